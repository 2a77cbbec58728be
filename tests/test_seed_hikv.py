"""The seed's HiKV and ThinK: ThinK's channel choice against a
direct statement of its criterion, the label grammar, the named policy variant, and the golden
decode of the seed's HiKV on a tiny random model with byte accounts equal to the closed form."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from hikv.model.methods.attention import group_queries
from hikv.model.methods.hikv import think_channel_scores
from hikv.model.methods.registry import make_cache
from hikv.model.refs.keys import float_to_key
from hikv.params import (
    HiKVPolicy,
    MethodSpec,
    ParamError,
    Stage1Variant,
    Stage2Kind,
    Stage2Rule,
    parse_method,
)
from hikv.presets import (
    SEED_ALIGN_BYTES,
    THINK_METHODS,
    get_preset,
    method_specs,
    seed_hikv,
)
from hikv.sim.cost.closed_form import closed_form

FIELDS = ("k_ideal", "v_ideal", "meta_ideal", "k_burst", "v_burst", "meta_burst", "tokens")


# --------------------------------------------------------------------------- ThinK's criterion
def _direct_think(q: torch.Tensor, k: torch.Tensor, kv_heads: int, window: int
                  ) -> torch.Tensor:
    """ThinK as the paper states it, per KV head: ||Q_obs[:, c]||_2 * ||K[:, c]||_2, Q_obs the
    last ``window`` queries of every query head of the group (float64, plain norms)."""
    hq, _, d = q.shape
    g = hq // kv_heads
    out = torch.empty(kv_heads, d, dtype=torch.float64)
    for h in range(kv_heads):
        qo = q[h * g:(h + 1) * g, -window:].reshape(-1, d).double()
        out[h] = qo.norm(dim=0) * k[h].double().norm(dim=0)
    return out


def _assert_top(scores: torch.Tensor, chosen: torch.Tensor, r: int, key_fn, ctx: str) -> None:
    """``chosen`` (bool [H, d]) is the top-``r`` of ``scores`` per head; channels may differ
    only where the sorter's keys of the criterion tie."""
    for h in range(scores.shape[0]):
        want = set(torch.topk(scores[h], r).indices.tolist())
        got = set(torch.nonzero(chosen[h]).squeeze(1).tolist())
        assert len(got) == r, f"{ctx} head {h}: {len(got)} channels kept, want {r}"
        if got == want:
            continue
        keys = key_fn(h)
        lo = min(int(keys[c]) for c in got)
        hi = max(int(keys[c]) for c in set(range(scores.shape[1])) - got)
        assert lo >= hi, f"{ctx} head {h}: chose {sorted(got)}, criterion {sorted(want)}"


@pytest.mark.parametrize("stage1", ["none", "evict"])
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_think_channels_follow_the_criterion(stage1: str, seed: int) -> None:
    cfg = get_preset("default")          # d = 64, fp16 keys of 16 bits
    d, hq, hkv, n, r = 64, 6, 2, 120, 20
    g = torch.Generator().manual_seed(seed)
    # channels of very different scales, so the criterion has a clear order
    qs = torch.exp(torch.randn(d, generator=g))
    ks = torch.exp(torch.randn(d, generator=g))
    q = torch.randn(hq, n, d, generator=g) * qs
    k = torch.randn(hkv, n, d, generator=g) * ks
    v = torch.randn(hkv, n, d, generator=g)
    label = f"hikv-none/k:think{r}" if stage1 == "none" else f"think@48/r{r}"
    spec = parse_method(label, cfg.policy, d)
    c = make_cache(spec, cfg, q_heads=hq, kv_heads=hkv)
    c.prefill(q, k, v)
    assert c.think_mask is not None and c.pos is not None and c.k is not None
    # ThinK scores the keys Stage I retained (kvpress: SnapKV, then ThinK)
    kept = torch.stack([k[h, c.pos[h]] for h in range(hkv)])
    if stage1 == "evict":
        assert kept.shape[1] == 48, f"seed {seed}: no eviction"
    w = spec.hikv.obs_window
    scores = _direct_think(q, kept, hkv, w)
    ours = think_channel_scores(group_queries(q[:, -w:], hkv), kept)

    def key_fn(h):
        return float_to_key(ours[h], cfg.key_format, cfg.sorter.key_width)

    _assert_top(scores, c.think_mask, r, key_fn, f"{label} seed {seed}")
    # the pruned channels are gone from every retained key
    assert bool((c.k * (~c.think_mask).unsqueeze(1) == 0).all()), f"seed {seed}"


def test_think_decode_is_attention_on_the_kept_channels() -> None:
    """A decode step of ThinK alone equals softmax attention with the pruned K channels
    zeroed (prompt keys and the decoded key alike), at the model's scale (no rescale)."""
    cfg = get_preset("default")
    d, hq, hkv, n, r, seed = 64, 4, 2, 50, 24, 21
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(h, n, d, generator=g) for h in (hq, hkv, hkv))
    c = make_cache(parse_method(f"hikv-none/k:think{r}", cfg.policy, d), cfg, q_heads=hq,
                   kv_heads=hkv)
    c.prefill(q, k, v)
    q1, k1, v1 = (torch.randn(h, 1, d, generator=g) for h in (hq, hkv, hkv))
    out, acc = c.decode(q1, k1, v1)
    mask = c.think_mask.unsqueeze(1)
    kk = torch.cat([k, k1], 1) * mask
    vv = torch.cat([v, v1], 1)
    gq = hq // hkv
    for h in range(hq):
        logits = q1[h] @ kk[h // gq].T / d ** 0.5
        want = torch.softmax(logits, -1) @ vv[h // gq]
        assert torch.allclose(out[h], want, atol=1e-5), f"seed {seed} head {h}"
    # bytes: r elements per cached key, whole V rows, the channel mask
    lay = cfg.layout
    assert acc[0].k_ideal == n * r * lay.elem_bytes
    assert acc[0].meta_ideal == d // 8


def test_think_without_a_prompt_uses_the_first_decoded_token() -> None:
    cfg = get_preset("tiny")
    d, seed = cfg.layout.head_dim, 5
    g = torch.Generator().manual_seed(seed)
    c = make_cache(parse_method("hikv-none/k:think4", cfg.policy, d), cfg)
    m = cfg.model
    c.decode(*(torch.randn(h, 1, d, generator=g) for h in (m.q_heads, m.kv_heads, m.kv_heads)))
    assert c.think_mask is not None and int(c.think_mask.sum()) == 4 * m.kv_heads


# --------------------------------------------------------------------------- labels
@pytest.mark.parametrize("alias,canonical", [
    ("think/r32", "hikv-evict@256/k:think32"),
    ("think", "hikv-evict@256/k:think32"),
    ("think@128/r16", "hikv-evict@128/k:think16"),
    ("think@512", "hikv-evict@512/k:think32"),
])
def test_think_aliases_parse_to_the_canonical_label(alias: str, canonical: str) -> None:
    p = get_preset("default").policy
    spec = parse_method(alias, p, 64)
    assert spec.label == canonical
    assert parse_method(canonical, p, 64) == spec
    assert spec.hikv is not None and spec.hikv.k_rule.kind is Stage2Kind.THINK


@pytest.mark.parametrize("label", ["hikv-evict@256/k:think48/v:static48",
                                   "hikv-query_aware@256/lowbit4/k:think16",
                                   "hikv-none@256/k:think64/v:static8"])
def test_think_labels_round_trip(label: str) -> None:
    p = get_preset("default").policy
    spec = parse_method(label, p, 64)
    assert spec.label == label and MethodSpec.from_label(spec.label, p, 64) == spec


@pytest.mark.parametrize("label,match", [("hikv-none/k:think65", "keep"),
                                         ("hikv-none/v:think8", "v_rule"),
                                         ("think/r0", "keep")])
def test_bad_think_labels_name_the_parameter(label: str, match: str) -> None:
    with pytest.raises(ParamError, match=match):
        parse_method(label, get_preset("default").policy, 64)


def test_think_methods_are_in_the_operating_point() -> None:
    cfg = get_preset("default")
    specs = method_specs(cfg)
    assert specs["think"].label == "hikv-none@256/k:think32"
    assert specs["think-evict"].label == "hikv-evict@256/k:think32"
    assert set(THINK_METHODS) <= set(specs)


# --------------------------------------------------------------------------- the variant
@pytest.mark.parametrize("preset", ["tiny", "default", "paper"])
def test_seed_variant_is_evicting_and_packed(preset: str) -> None:
    base = get_preset(preset)
    cfg = seed_hikv(base)
    p, d = cfg.policy, cfg.layout.head_dim
    assert cfg.name == f"{preset}+seed" and cfg.layout.align_bytes == SEED_ALIGN_BYTES
    assert p.stage1 is Stage1Variant.EVICT and p.budget == base.policy.budget
    assert p.v_rule == Stage2Rule(Stage2Kind.STATIC, 3 * d // 4)
    assert p.k_rule == Stage2Rule(Stage2Kind.THINK, 3 * d // 4)
    # the named presets themselves keep their own policy
    assert get_preset(preset).policy == base.policy
    spec = method_specs(cfg)["hikv"]
    assert parse_method(spec.label, p, d) == spec
    q = seed_hikv(base, k_kind=Stage2Kind.QUERY_CHANNELS, keep_k=d // 2, align_bytes=2)
    assert q.policy.k_rule == Stage2Rule(Stage2Kind.QUERY_CHANNELS, d // 2)
    with pytest.raises(ParamError, match="align_bytes"):
        seed_hikv(base, align_bytes=4)
    with pytest.raises(ParamError, match="keep"):
        seed_hikv(base, keep_v=d + 1)


def test_packed_records_save_bytes_where_aligned_ones_do_not() -> None:
    """The point of the packed layout: on the default preset a V record of 48 of 64 elements
    (8 + 96 B) takes two 64-byte bursts when records are burst-aligned, and 104 B when packed."""
    from hikv.sim.cost.closed_form import step_bytes

    base = get_preset("default")
    seed = seed_hikv(base, k_kind=Stage2Kind.NONE)
    aligned = dataclasses.replace(seed.layout, align_bytes=base.layout.align_bytes)
    spec = method_specs(seed)["hikv"]
    n = 4 * base.policy.budget
    packed_v = float(step_bytes(spec, seed.layout, n).v_burst)
    aligned_v = float(step_bytes(spec, aligned, n).v_burst)
    full_v = float(step_bytes(method_specs(base)["hikv-evict"], base.layout, n).v_burst)
    assert aligned_v == full_v
    assert packed_v < 0.85 * aligned_v


# --------------------------------------------------------------------------- tiny random model
def test_seed_hikv_decodes_a_tiny_random_model() -> None:
    """The golden decode of the seed's HiKV through the transformers route on a tiny random
    Llama: real eviction, and every step's byte account (summed over the method's layers and
    KV heads) equals the closed form's sequence state times the number of (layer, head)s."""
    transformers = pytest.importorskip("transformers")
    from hikv.model.lm.runner import Sequence, lm_config, prefill, step, wrap_model

    seed = 4242
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        mcfg = transformers.LlamaConfig(
            vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=256)
        model = transformers.LlamaForCausalLM(mcfg)
    lm = wrap_model(model, None, name="tiny-llama")
    cfg = seed_hikv(lm_config(get_preset("tiny"), lm.shape))
    spec = MethodSpec.for_hikv(cfg.policy)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 97, (60,), generator=g).tolist()
    prompt = 40
    seq = Sequence(lm, spec, cfg)
    full = Sequence(lm, MethodSpec(), cfg)
    prefill(lm, [seq, full], ids[:prompt])
    outs = []
    for t in ids[prompt:]:
        outs.append(step(lm, [seq, full], [t, t]))
    model_cf = closed_form(spec, cfg.layout)
    steps = np.arange(1, len(outs) + 1)
    cf = model_cf.decode_read(np.full(len(steps), prompt), steps)
    units = seq.units
    for j, acc in enumerate(seq.accounts):
        for f in FIELDS:
            assert getattr(acc, f) == units * int(getattr(cf, f)[j]), \
                f"seed {seed} step {j + 1} {f}: golden {getattr(acc, f)} != closed form"
    caches = [c for c in seq.caches if hasattr(c, "think_mask")]
    assert caches and all(c.resident_tokens <= cfg.policy.budget + cfg.policy.compact_interval
                          for c in caches)
    assert seq.accounts[-1].tokens < full.accounts[-1].tokens
    logits = torch.stack(outs)
    assert bool(torch.isfinite(logits).all())
    assert float((logits[:, 0] - logits[:, 1]).abs().max()) > 0.0


def test_think_policy_checks_head_dim() -> None:
    p = dataclasses.replace(HiKVPolicy(), k_rule=Stage2Rule(Stage2Kind.THINK, 80))
    with pytest.raises(ParamError, match="keep"):
        p.check_head_dim(64)


def test_think_runs_in_the_accuracy_harness(tmp_path) -> None:
    """``hikv accuracy perplexity`` takes ThinK's labels: ``think`` (no budget) is swept over
    ``--budgets`` on the evicting Stage I; ``hikv-none/k:thinkR`` is ThinK alone."""
    import json
    import string

    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from hikv.scripts.cli import main

    seed = 4343
    chars = ["<unk>"] + list(string.ascii_letters + string.digits + string.punctuation + " \n")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(
        {c: i for i, c in enumerate(chars)}, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("."),
                                                        behavior="isolated")
    tok.decoder = tokenizers.decoders.Fuse()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=len(chars), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=1024))
    model.save_pretrained(tmp_path / "model")
    fast.save_pretrained(tmp_path / "model")
    essays = tmp_path / "cache" / "assets" / "pg-essays" / "PaulGrahamEssays"
    essays.mkdir(parents=True)
    (essays / "a.txt").write_text("the cat sat on a mat. a dog ran far away! " * 60)
    out = tmp_path / "out"
    assert main(["accuracy", "perplexity", "--model", str(tmp_path / "model"), "--cache",
                 str(tmp_path / "cache"), "--preset", "tiny", "--methods", "full",
                 "think/r8", "hikv-none/k:think8", "--budgets", "16", "--windows", "1",
                 "--window", "200", "--prefix", "160", "--out", str(out)]) == 0
    rows = json.loads((out / "perplexity.json").read_text())["rows"]
    assert [r["label"] for r in rows] == ["full", "hikv-evict@16/k:think8",
                                          "hikv-none@16/k:think8"], f"seed {seed}"
    by = {r["label"]: r for r in rows}
    # K bytes: 8 of 16 channels, no per-token mask
    assert by["hikv-none@16/k:think8"]["bytes_ideal"] < by["full"]["bytes_ideal"]
    assert by["hikv-evict@16/k:think8"]["bytes_ideal"] < by["hikv-none@16/k:think8"][
        "bytes_ideal"]
    assert all(np.isfinite(r["ppl"]) for r in rows)
