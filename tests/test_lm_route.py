"""The transformers route through the golden model, on tiny random Llama and Gemma-3 models
(built from configs: no download). Full KV through the route must reproduce the model's own
logits; methods whose budget covers every token must too; small budgets must evict."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("transformers")

from hikv.model.accuracy import experiments as A  # noqa: E402
from hikv.model.lm.runner import (  # noqa: E402
    Sequence,
    lm_config,
    prefill,
    reference_logits,
    step,
    wrap_model,
)
from hikv.model.methods.registry import KVCache  # noqa: E402
from hikv.params import Method, MethodSpec, ParamError  # noqa: E402
from hikv.presets import get_preset  # noqa: E402

SEED = 1234


def _sharpen(model: torch.nn.Module, factor: float) -> None:
    """Scale q/k projections so attention is far from uniform (random init is ~uniform)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(factor)


def tiny_lm(arch: str):
    """A tiny random ``llama`` or ``gemma`` (Gemma-3: sliding-window layers) routed through the
    golden model, and the ``tiny`` preset adapted to it (shared with other test modules)."""
    import transformers

    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        if arch == "llama":
            cfg = transformers.LlamaConfig(
                vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=512)
            model = transformers.LlamaForCausalLM(cfg)
        else:
            cfg = transformers.Gemma3TextConfig(
                vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                query_pre_attn_scalar=24, sliding_window=8,
                layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                max_position_embeddings=512)
            model = transformers.Gemma3ForCausalLM(cfg)
        _sharpen(model, 6.0)
    lm = wrap_model(model, None, name=f"tiny-{arch}")
    return lm, lm_config(get_preset("tiny"), lm.shape)


def random_ids(n: int, vocab: int, seed: int) -> list[int]:
    """``n`` token ids below ``vocab`` from a local generator seeded by ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def run_route(lm, cfg, specs, ids, prefix):
    """One sequence per spec: prefill ``ids[:prefix]``, then step through the rest; the logits
    [B, steps + 1, V] and the sequences."""
    seqs = [Sequence(lm, s, cfg) for s in specs]
    out = [prefill(lm, seqs, ids[:prefix]).unsqueeze(0).expand(len(seqs), -1)]
    for t in range(prefix, len(ids)):
        out.append(step(lm, seqs, [ids[t]] * len(seqs)))
    return torch.stack(out, 1), seqs      # [B, steps + 1, V]


@pytest.mark.parametrize("arch", ["llama", "gemma"])
def test_full_kv_route_reproduces_model_logits(arch: str) -> None:
    lm, cfg = tiny_lm(arch)
    ids = random_ids(40, lm.shape.vocab, SEED)
    prefix = 24
    got, _ = run_route(lm, cfg, [MethodSpec()], ids, prefix)
    want = reference_logits(lm, ids, positions=range(prefix - 1, len(ids)))
    err = float((got[0] - want).abs().max())
    assert err < 2e-4 * float(want.abs().max()), f"{arch} seed {SEED}: max |diff| = {err}"
    if arch == "gemma":
        assert lm.shape.windows == (8, None, 8)
        assert lm.shape.method_layers == (1,)
        assert abs(lm.shape.scale - 24 ** -0.5) < 1e-12


@pytest.mark.parametrize("arch", ["llama", "gemma"])
def test_methods_with_budget_covering_everything_equal_full(arch: str) -> None:
    lm, cfg = tiny_lm(arch)
    d = lm.shape.head_dim
    ids = random_ids(36, lm.shape.vocab, SEED + 1)
    labels = ["full", "h2o@64", "snapkv@64", "quest@64", "hikv-evict@64", "hikv-qa@64",
              f"sparq@64/r{d}", f"ds@64/r{d}"]
    specs = [A.parse_method(lab, cfg.policy, d) for lab in labels]
    got, seqs = run_route(lm, cfg, specs, ids, 20)
    for b, lab in enumerate(labels):
        err = float((got[b] - got[0]).abs().max())
        assert err < 1e-4 * float(got[0].abs().max()), f"{arch} {lab}: max |diff| {err}"
    # bytes: every method reads every cached token of every method layer once per step
    full = seqs[0]
    assert len(full.accounts) == len(ids) - 20
    assert full.units == len(lm.shape.method_layers) * lm.shape.kv_heads
    last = full.accounts[-1]
    assert last.tokens == full.units * (len(ids) - 1)
    assert last.k_ideal == last.tokens * cfg.layout.row_bytes


def test_small_budget_evicts_and_changes_logits() -> None:
    lm, cfg = tiny_lm("llama")
    ids = random_ids(48, lm.shape.vocab, SEED + 2)
    specs = [MethodSpec(), MethodSpec(Method.H2O, budget=8, recent=4),
             A.parse_method("hikv-evict@16", dataclasses.replace(cfg.policy, compact_interval=4),
                            lm.shape.head_dim)]
    got, seqs = run_route(lm, cfg, specs, ids, 24)
    for s in seqs[1:]:
        caches = [c for c in s.caches if isinstance(c, KVCache)]
        assert all(c.resident_tokens <= s.spec.budget + 4 for c in caches), s.label
        assert s.accounts[-1].tokens < seqs[0].accounts[-1].tokens, s.label
    assert float((got[1] - got[0]).abs().max()) > 1e-3


def _state(c) -> list[torch.Tensor]:
    out = [c.k, c.v, c.pos]
    for name in ("acc", "imp"):
        if getattr(c, name, None) is not None:
            out.append(getattr(c, name))
    return out


def test_shared_prefill_equals_separate_prefill() -> None:
    lm, cfg = tiny_lm("llama")
    d = lm.shape.head_dim
    ids = random_ids(44, lm.shape.vocab, SEED + 3)
    labels = ["h2o@16", "snapkv@16", "hikv-evict@16", "hikv-qa@16/v:static12", "quest@16"]
    specs = [A.parse_method(lab, cfg.policy, d) for lab in labels]
    shared = [Sequence(lm, s, cfg) for s in specs]
    lg = prefill(lm, shared, ids[:30])
    for b, s in enumerate(specs):
        alone = [Sequence(lm, s, cfg)]
        assert torch.equal(prefill(lm, alone, ids[:30]), lg)
        for layer, (c1, c2) in enumerate(zip(shared[b].caches, alone[0].caches, strict=True)):
            for x, y in zip(_state(c1), _state(c2), strict=True):
                assert torch.equal(x, y), f"{labels[b]} layer {layer}: state after prefill"
    # decoding side by side (one batched model call) vs alone: the dense layers' batched
    # matrix products round differently in the last bits, nothing more
    together, _ = run_route(lm, cfg, specs, ids, 30)
    for b, s in enumerate(specs):
        alone_lg, _ = run_route(lm, cfg, [s], ids, 30)
        err = float((alone_lg[0] - together[b]).abs().max())
        assert err < 1e-4 * float(alone_lg.abs().max()), f"{labels[b]}: {err}"


@pytest.mark.parametrize("arch", ["llama", "gemma"])
def test_prefix_fork_equals_prefill_of_the_prefix(arch: str) -> None:
    """One pass over a prompt with ``prefix`` gives the sequences of ``prefix_for`` (through
    adopt_prefill of ``lm.last_prefix``) the state and logits a pass over the prefix alone
    gives: the follow-up protocol forked from the prompt protocol's pass.
    Both methods' statistics (column sums, observation windows, windows not asked for by the
    main sequences) and a window layer (Gemma) are covered; the main sequences' state is that
    of a pass without the fork."""
    from hikv.model.lm.runner import adopt_prefill

    lm, cfg = tiny_lm(arch)
    d = lm.shape.head_dim
    ids = random_ids(200, lm.shape.vocab, SEED + 7)
    labels = ["h2o@16", "snapkv@16", "hikv-evict@16", "hikv-qa@16", "quest@16", "full"]
    specs = [A.parse_method(lab, cfg.policy, d) for lab in labels]
    for cut, main in ((170, [1]), (191, [0, 3]), (199, [5])):
        ref_main = [Sequence(lm, specs[i], cfg) for i in main]
        lg_main = prefill(lm, ref_main, ids)
        forked = [Sequence(lm, s, cfg) for s in specs]
        seqs = [Sequence(lm, specs[i], cfg) for i in main]
        lg = prefill(lm, seqs, ids, prefix=cut, prefix_for=forked)
        assert torch.equal(lg, lg_main), f"{arch} cut {cut} seed {SEED + 7}"
        for a, b in zip(seqs, ref_main, strict=True):
            for c1, c2 in zip(a.caches, b.caches, strict=True):
                if isinstance(c1, KVCache):
                    for x, y in zip(_state(c1), _state(c2), strict=True):
                        assert torch.equal(x, y), f"{arch} cut {cut}: main {a.label}"
        fork = lm.last_prefix
        assert fork is not None and fork.tokens == cut
        lg_f = adopt_prefill(lm, forked, fork)
        for s, sp in zip(forked, specs, strict=True):
            alone = [Sequence(lm, sp, cfg)]
            lg_a = prefill(lm, alone, ids[:cut])
            err = float((lg_a - lg_f).abs().max())
            # the dense layers see N rows instead of cut: equal up to BLAS blocking
            assert err <= 1e-5 * float(lg_a.abs().max()), f"{arch} {s.label} cut {cut}: {err}"
            for layer, (c1, c2) in enumerate(zip(s.caches, alone[0].caches, strict=True)):
                if not isinstance(c1, KVCache):
                    assert torch.allclose(c1.k, c2.k, rtol=1e-5, atol=1e-6)
                    continue
                for x, y in zip(_state(c1), _state(c2), strict=True):
                    if x.dtype.is_floating_point:
                        assert torch.allclose(x, y, rtol=1e-5, atol=1e-6), \
                            f"{arch} {s.label} cut {cut} layer {layer}"
                    else:
                        assert torch.equal(x, y), f"{arch} {s.label} cut {cut} layer {layer}"
    with pytest.raises(ParamError, match="prefix"):
        prefill(lm, [Sequence(lm, specs[0], cfg)], ids[:20], prefix=20)


def test_fidelity_and_capture() -> None:
    lm, cfg = tiny_lm("gemma")
    ids = random_ids(30, lm.shape.vocab, SEED + 4)
    rows = A.fidelity(lm, [MethodSpec(), MethodSpec(Method.H2O, budget=8, recent=2)], cfg,
                      ids, 20)
    full = [r for r in rows if r["label"] == "full"]
    h2o = [r for r in rows if r["label"] != "full"]
    assert [r["layer"] for r in full] == [1]
    assert full[0]["rel_err_mean"] < 1e-5 and full[0]["cosine_mean"] > 1 - 1e-5
    assert h2o[0]["rel_err_mean"] > 1e-3
    cap = A.capture(lm, cfg, ids, [0, 1], 20, prob_rows=4)
    for layer in (0, 1):
        c = cap["layers"][layer]
        assert c["q"].shape == (2, 30, 32) and c["k"].shape == (1, 30, 32)
        assert c["probs_decode"].shape == (2, 10, 30)
        assert torch.allclose(c["probs_decode"].sum(-1), torch.ones(2, 10), atol=1e-5)
        assert c["probs_prefill_last"].shape == (2, 4, 20)
    # the sliding layer's decode probabilities are zero outside its window of 8
    pd = cap["layers"][0]["probs_decode"]
    assert float(pd[:, -1, : 30 - 8].abs().max()) == 0.0
    assert float(cap["layers"][1]["probs_decode"][:, -1, :22].sum()) > 0


def test_resolve_device() -> None:
    """--device: cpu and auto resolve here; unknown names and absent CUDA are clear errors."""
    import torch

    from hikv.model.lm.runner import resolve_device
    from hikv.params import ParamError

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ParamError, match="device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ParamError, match="CUDA is not available"):
            resolve_device("cuda:0")
