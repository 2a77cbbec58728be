"""The defining property of each extra baseline, on seeded random tensors and on the tiny
random LM: StreamingLLM keeps sinks + recent, TOVA evicts the layer's argmin, H2O's
averaged score is kvpress's ObservedAttention rule."""

from __future__ import annotations

import pytest
import torch

from hikv.model.methods.attention import causal_prefill, group_queries
from hikv.model.methods.registry import make_cache
from hikv.params import Method, MethodSpec, ParamError
from hikv.presets import get_preset

CFG = get_preset("default")          # d = 64, 9 query heads, 3 KV heads
HQ, HKV, D = CFG.model.q_heads, CFG.model.kv_heads, CFG.layout.head_dim


def _qkv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(HQ, n, D, generator=g), torch.randn(HKV, n, D, generator=g),
            torch.randn(HKV, n, D, generator=g))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n_prompt", [10, 60])
def test_streamingllm_keeps_sinks_and_recent(seed: int, n_prompt: int) -> None:
    spec = MethodSpec(Method.STREAMING_LLM, budget=24, sinks=4)
    q, k, v = _qkv(n_prompt + 30, seed)
    c = make_cache(spec, CFG)
    c.prefill(q[:, :n_prompt], k[:, :n_prompt], v[:, :n_prompt])
    for t in range(n_prompt, q.shape[1]):
        c.decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1])
        seen = t + 1
        want = list(range(seen)) if seen <= 24 else [*range(4), *range(seen - 20, seen)]
        assert c.pos is not None
        for h in range(HKV):
            assert c.pos[h].tolist() == want, f"seed={seed} step={t} head={h}"
        # the cache's K rows are those of the kept positions
        assert c.k is not None
        torch.testing.assert_close(c.k, k[:, want], msg=f"seed={seed} t={t}")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tova_evicts_the_layer_argmin(seed: int) -> None:
    """Each step over budget drops exactly one token, in every KV head the same: the one whose
    attention from the current query, averaged over all query heads, is lowest."""
    b = 16
    spec = MethodSpec(Method.TOVA, budget=b)
    q, k, v = _qkv(60, seed)
    c = make_cache(spec, CFG)
    c.prefill(q[:, :40], k[:, :40], v[:, :40])
    # prefill: the b tokens the last prompt query attends most (mean over all heads)
    _, _, obs = causal_prefill(q[:, :40], k[:, :40], v[:, :40], c.scale, window=1)
    assert obs is not None
    want = sorted(torch.argsort(obs.sum(0), descending=True, stable=True)[:b].tolist())
    assert c.pos is not None and c.pos[0].tolist() == want, f"seed={seed}"
    for t in range(40, 60):
        before = c.pos[0].tolist() + [t]
        assert c.k is not None
        kk = torch.cat([c.k, k[:, t:t + 1]], 1)
        qg = group_queries(q[:, t:t + 1], HKV)
        probs = torch.softmax((qg @ kk.transpose(-1, -2)) * c.scale, -1).mean((0, 1))
        c.decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1])
        after = c.pos[0].tolist()
        gone = set(before) - set(after)
        assert len(after) == b and len(gone) == 1, f"seed={seed} t={t}"
        dropped = before.index(gone.pop())
        assert float(probs[dropped]) == pytest.approx(float(probs.min()), abs=1e-7), \
            f"seed={seed} t={t}: evicted slot {dropped} is not the argmin"
        assert all(c.pos[h].tolist() == after for h in range(HKV)), f"seed={seed} t={t}"


@pytest.mark.parametrize("seed", [0, 3])
def test_h2o_averaged_is_observed_attention(seed: int) -> None:
    """Prefill keeps the top-B of (attention summed over the queries that see a key) / (their
    number), no recent window; decode keeps the same rule with counts growing by one."""
    b, n = 20, 50
    spec = MethodSpec(Method.H2O, budget=b, recent=0, averaged=True)
    q, k, v = _qkv(n + 10, seed)
    c = make_cache(spec, CFG)
    c.prefill(q[:, :n], k[:, :n], v[:, :n])
    _, sums, _ = causal_prefill(q[:, :n], k[:, :n], v[:, :n], c.scale, col_sums=True)
    assert sums is not None
    avg = sums / torch.arange(n, 0, -1)
    assert c.pos is not None
    for h in range(HKV):
        want = sorted(torch.topk(avg[h], b).indices.tolist())
        assert c.pos[h].tolist() == want, f"seed={seed} head={h}"
    summed = make_cache(MethodSpec(Method.H2O, budget=b, recent=0), CFG)
    summed.prefill(q[:, :n], k[:, :n], v[:, :n])
    assert summed.pos is not None and not torch.equal(summed.pos, c.pos), \
        f"seed={seed}: the averaged and summed rules chose the same tokens"
    for t in range(n, n + 10):
        _, acc = c.decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1])
        assert c.resident_tokens == b
        # counts: queries that could see each resident token
        torch.testing.assert_close(c.cnt, (t + 1 - c.pos).float())
        assert acc[0].meta_ideal == b * 2 * 2, f"seed={seed}: score + count per cached token"


def test_labels_round_trip_and_reject() -> None:
    from hikv.params import ParamError, parse_method

    p, d = CFG.policy, D
    for text in ("streamingllm@64", "tova@64", "h2o@64/avg"):
        spec = parse_method(text, p, d)
        assert spec.label == text and parse_method(spec.label, p, d) == spec
    assert parse_method("h2o@64/avg", p, d).recent == 0
    assert parse_method("streamingllm@2", p, d).sinks == 2
    with pytest.raises(ParamError, match="only allowed for h2o"):
        parse_method("snapkv@64/avg", p, d)


# --------------------------------------------------------------------------- adaptive budgets
def _snap(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: int, scale: float
          ) -> torch.Tensor:
    from hikv.model.methods.baselines import SnapKV
    from hikv.model.methods.cache import snap_scores

    _, _, obs = causal_prefill(q, k, v, scale, window=w)
    assert obs is not None
    return snap_scores(obs, q.shape[1] - w, SnapKV.pool_kernel)


def _prefix_kept(c, n: int, w: int) -> list[list[int]]:
    """Kept prompt positions before the observation window, per KV head."""
    return [[p for p in c.pos[h].tolist() if 0 <= p < n - w] for h in range(c.kv_heads)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adakv_budgets_sum_to_the_layer_budget_with_safeguard(seed: int) -> None:
    from hikv.model.methods.baselines_adaptive import ADAKV_SAFEGUARD
    from hikv.model.methods.global_select import global_topk

    b, w, n = 24, 8, 80
    spec = MethodSpec(Method.ADAKV, budget=b, recent=w)
    q, k, v = _qkv(n + 6, seed)
    # heads with very different concentration, so that the budgets really adapt
    k[0] *= 3.0
    c = make_cache(spec, CFG)
    c.prefill(q[:, :n], k[:, :n], v[:, :n])
    safe = int(ADAKV_SAFEGUARD * (b - w))
    assert c.head_budgets is not None and sum(c.head_budgets) == HKV * b, f"seed={seed}"
    assert min(c.head_budgets) >= w + safe and len(set(c.head_budgets)) > 1, \
        f"seed={seed}: budgets {c.head_budgets}"
    # the choice: per head its top `safe`, then the layer's best of the rest (global_topk)
    s = _snap(q[:, :n], k[:, :n], v[:, :n], w, c.scale)
    want = []
    rest = []
    for h in range(HKV):
        top = torch.argsort(s[h], descending=True, stable=True)[:safe].tolist()
        want.append(set(top))
        rest.append([i for i in range(n - w) if i not in want[h]])
    extra = global_topk([s[h, rest[h]] for h in range(HKV)], HKV * (b - w - safe))
    for h in range(HKV):
        want[h] |= {rest[h][i] for i in extra[h]}
    assert [set(x) for x in _prefix_kept(c, n, w)] == want, f"seed={seed}"
    for t in range(n, n + 6):
        _, acc = c.decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1])
        assert [a.tokens for a in acc] == [x + t - n for x in c.head_budgets], f"seed={seed}"
        assert c.resident_tokens == b + t + 1 - n


@pytest.mark.parametrize("layers,budget,window,prompt", [
    (30, 256, 32, 4000), (30, 256, 32, 300), (3, 16, 4, 40), (7, 100, 0, 101), (1, 8, 2, 9)])
def test_pyramid_budgets_average_to_b_and_decrease(layers, budget, window, prompt) -> None:
    from hikv.model.methods.baselines_adaptive import pyramid_budgets

    bs = pyramid_budgets(layers, budget, window, prompt)
    assert len(bs) == layers and sum(bs) == layers * budget, bs
    assert all(a >= b for a, b in zip(bs, bs[1:], strict=False)), f"not decreasing: {bs}"
    assert window <= min(bs) and max(bs) <= prompt, bs
    if layers > 1 and prompt > 3 * budget:
        assert bs[0] > budget > bs[-1], bs


def test_pyramid_budgets_reject_bad_input() -> None:
    from hikv.model.methods.baselines_adaptive import pyramid_budgets
    from hikv.params import ParamError

    with pytest.raises(ParamError, match="prompt"):
        pyramid_budgets(4, 64, 8, 64)
    with pytest.raises(ParamError, match="layers"):
        pyramid_budgets(0, 64, 8, 100)


def _tiny_route(labels: list[str], n_ids: int, prefix: int):
    from test_lm_route import random_ids, run_route, tiny_lm

    from hikv.model.accuracy import experiments as A
    lm, cfg = tiny_lm("llama")
    specs = [A.parse_method(lab, cfg.policy, lm.shape.head_dim) for lab in labels]
    ids = random_ids(n_ids, lm.shape.vocab, 77)
    return lm, cfg, specs, ids, run_route(lm, cfg, specs, ids, prefix)


def test_budgets_covering_everything_equal_full_on_the_tiny_lm() -> None:
    pytest.importorskip("transformers")
    labels = ["full", "streamingllm@64", "tova@64", "adakv@64", "gadakv@64", "pyramidkv@64",
              "h2o@64/avg"]
    *_, (got, _) = _tiny_route(labels, 36, 20)
    for b, lab in enumerate(labels):
        err = float((got[b] - got[0]).abs().max())
        assert err < 1e-4 * float(got[0].abs().max()), f"{lab}: max |diff| {err} (seed 77)"


def test_gadakv_and_pyramidkv_choose_across_layers_on_the_tiny_lm() -> None:
    """Through the LM route (the end-of-prefill hook): G-AdaKV's kept prefix tokens over all
    layers and KV heads are global_topk of the layers' SnapKV scores; PyramidKV's layers keep
    pyramid_budgets tokens each (average B), their own top scores."""
    pytest.importorskip("transformers")
    from test_lm_route import random_ids, tiny_lm

    from hikv.model.accuracy import experiments as A
    from hikv.model.lm.runner import Sequence, prefill, step
    from hikv.model.methods.baselines_adaptive import pyramid_budgets
    from hikv.model.methods.global_select import global_topk

    lm, cfg = tiny_lm("llama")
    d, layers = lm.shape.head_dim, lm.shape.method_layers
    n = 40
    ids = random_ids(n + 3, lm.shape.vocab, 78)
    g_spec = A.parse_method("gadakv@12", cfg.policy, d)
    p_spec = A.parse_method("pyramidkv@12", cfg.policy, d)
    full = Sequence(lm, MethodSpec(), cfg, capture=layers)
    g_seq, p_seq = Sequence(lm, g_spec, cfg), Sequence(lm, p_spec, cfg)
    prefill(lm, [full, g_seq, p_seq], ids[:n])
    w = g_spec.recent
    scores = []
    for layer in layers:
        t = full.captured_tensors(layer)
        scores.append(_snap(t["q"], t["k"], t["v"], w, lm.shape.scale))
    segs = [s[h] for s in scores for h in range(lm.shape.kv_heads)]
    want = global_topk(segs, len(layers) * lm.shape.kv_heads * (12 - w))
    got = [x for layer in layers for x in _prefix_kept(g_seq.caches[layer], n, w)]
    assert got == want, "G-AdaKV's kept tokens differ from global_topk (seed 78)"
    assert len({len(x) for x in got}) > 1, "every head kept the same count: nothing adapted"
    budgets = pyramid_budgets(len(layers), 12, p_spec.recent, n)
    for layer, b, s in zip(layers, budgets, scores, strict=True):
        c = p_seq.caches[layer]
        assert c.resident_tokens == b, (layer, b)
        for h in range(lm.shape.kv_heads):
            top = sorted(torch.argsort(s[h], descending=True, stable=True)[:b - w].tolist())
            assert _prefix_kept(c, n, w)[h] == top, f"layer {layer} head {h} (seed 78)"
    for t in range(n, n + 3):
        step(lm, [g_seq, p_seq], [ids[t]] * 2)
    assert g_seq.accounts[-1].tokens == len(layers) * lm.shape.kv_heads * (12 + 2)


def test_serve_and_report_take_the_extra_baselines(capsys) -> None:
    from hikv.presets import BASELINES
    from hikv.scripts.cli import main
    from hikv.sim.explore.report import build_report

    names = ["streamingllm", "tova", "adakv", "gadakv", "pyramidkv", "h2o-avg", "tova@8"]
    assert main(["serve", "--preset", "tiny", "--requests", "5", "--method",
                 ",".join(names)]) == 0
    rows = [ln.split()[0] for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    for n in names:
        assert n in rows, f"hikv serve printed no row for {n}"
    assert main(["serve", "--preset", "tiny", "--requests", "5", "--method", "tova@8/avg"]) == 2
    assert "only allowed for h2o" in capsys.readouterr().err
    rep = build_report(get_preset("tiny"), area=False, sections=False)
    assert {r.method for r in rep.rows} >= set(BASELINES) >= set(names[:5])


def test_accuracy_perplexity_runs_them_with_a_shared_prefill() -> None:
    """The accuracy study's route (one prompt pass, later batches adopt it): the extra methods
    give the same perplexity and bytes as with one pass per batch, and keep B tokens per
    (layer, KV head) on average."""
    pytest.importorskip("transformers")
    from test_lm_route import random_ids, tiny_lm

    from hikv.model.accuracy import experiments as A
    lm, cfg = tiny_lm("llama")
    labels = ["streamingllm@12", "tova@12", "adakv@12", "gadakv@12", "pyramidkv@12",
              "h2o@12/avg"]
    specs = [A.parse_method(lab, cfg.policy, lm.shape.head_dim) for lab in labels]
    win = [random_ids(44, lm.shape.vocab, 79)]
    shared = A.perplexity(lm, specs, cfg, win, 36, batch=2)
    alone = A.perplexity(lm, specs, cfg, win, 36, batch=2, share_prefill=False)
    for lab, a, b in zip(labels, shared, alone, strict=True):
        assert a["label"] == lab and a["ppl"] == pytest.approx(b["ppl"], rel=1e-6), lab
        assert a["bytes_tokens"] == b["bytes_tokens"], lab
        # cached tokens read per step: B after the first eviction (capped methods) or
        # B + steps so far (chosen once after prefill), never the whole context
        assert 11 <= a["bytes_tokens"] <= 12 + 7, (lab, a["bytes_tokens"])


def test_defining_properties_hold_in_every_layer_of_the_tiny_lm() -> None:
    """Through the LM route: StreamingLLM's layers hold sinks + recent, TOVA's layers hold B
    tokens, the same in every KV head, AdaKV's per-head budgets sum to the layer budget, each
    at least window + safeguard, H2O averaged keeps B with no forced window."""
    pytest.importorskip("transformers")
    from hikv.model.methods.baselines_adaptive import ADAKV_SAFEGUARD

    labels = ["streamingllm@12", "tova@12", "adakv@12", "h2o@12/avg"]
    lm, cfg, specs, ids, (_, seqs) = _tiny_route(labels, 44, 36)
    seen = len(ids)
    layers = lm.shape.method_layers
    s_spec, _, a_spec, _ = specs
    sinks = list(range(s_spec.sinks))
    for layer in layers:
        c = seqs[0].caches[layer]
        want = sinks + list(range(seen - (12 - s_spec.sinks), seen))
        assert all(c.pos[h].tolist() == want for h in range(c.kv_heads)), f"layer {layer}"
        t = seqs[1].caches[layer]
        assert t.resident_tokens == 12 and bool((t.pos == t.pos[0]).all()), f"layer {layer}"
        a = seqs[2].caches[layer]
        w = a.window
        safe = int(ADAKV_SAFEGUARD * (12 - w))
        assert sum(a.head_budgets) == a.kv_heads * 12, f"layer {layer}: {a.head_budgets}"
        assert min(a.head_budgets) >= w + safe, f"layer {layer}: {a.head_budgets}"
        h = seqs[3].caches[layer]
        assert h.resident_tokens == 12 and h.spec.recent == 0, f"layer {layer}"


@pytest.mark.parametrize("preset", ["tiny", "default", "paper"])
def test_tova_sorts_once_per_layer_not_per_kv_head(preset: str) -> None:
    """TOVA's eviction is one top-B of B + 1 per layer and step on the layer-wide score
    (attention averaged over all query heads): the cost model's sorter cycles and compares,
    summed over the layer's KV heads, are those of one such job."""
    from hikv.sim.cost.attention_model import attention_cost
    from hikv.sim.cost.engines import with_kind
    from hikv.sim.cost.timing import default_timing

    cfg = with_kind(get_preset(preset), "merge")      # the merge sorter's jobs
    B = cfg.policy.budget
    spec = MethodSpec(Method.TOVA, budget=B, recent=0)
    c = attention_cost(spec, cfg)
    t = default_timing()
    one = float(t.sorter_cycles(cfg.sorter, "stage1", n=B + 1, k=B, d=0, count=0))
    H = cfg.model.kv_heads
    assert float(c.sort_cycles) * H == pytest.approx(one * c.clocks.reference_hz
                                                     / c.clocks.hz("sorter"), rel=1e-12)
    from hikv.hw.sorter_timing import SorterTiming
    from hikv.sim.cost import energy as E

    q = float(t.sorter_compares(cfg.sorter, "stage1", n=B + 1, k=B, d=0, count=0))
    want = E.sorter_energy_j(cfg.model.layers * q, SorterTiming.from_params(cfg.sorter)
                             .item_width, cfg.accel.tech_nm)
    assert float(c.energy_parts_j["sorter"]) == pytest.approx(float(want), rel=1e-12)


def _iso_row(label: str, ppl: float, burst: float) -> dict:
    from hikv.model.accuracy import iso as I
    from hikv.params import parse_method

    cfg = get_preset("default")
    spec = parse_method(label, cfg.policy, cfg.layout.head_dim)
    return {"label": spec.label, "family": I.family(spec), "method": spec.method.value,
            "budget": spec.budget, "ppl": ppl, "bytes_ideal": burst, "bytes_burst": burst,
            "units": 90}


def test_iso_points_are_keyed_by_family(tmp_path) -> None:
    """`hikv report --iso` keeps one row per method family: H2O and its averaged
    variant, and ThinK (a HiKV Stage II kind, alone and on the evicting Stage I) beside HiKV's
    best family, each at its own iso budget; HiKV's other families stay out; HiKV's reference
    row is the file's ``hikv_family`` (the last row)."""
    import json

    from hikv.model.accuracy import iso as I
    from hikv.sim.explore.report import build_report, load_iso_accuracy

    cfg = get_preset("default")
    seed = "hikv-evict@{}/k:think48/v:static48"
    ppl = [_iso_row("full", 10.0, 1000),
           _iso_row("h2o@128", 10.5, 100), _iso_row("h2o@256", 10.05, 200),
           _iso_row("h2o@128/avg", 10.05, 110), _iso_row("h2o@256/avg", 10.0, 210),
           _iso_row("hikv-none/k:think32", 10.08, 600),
           _iso_row("think@128/r32", 10.3, 90), _iso_row("think@256/r32", 10.0, 180),
           _iso_row("hikv-evict@128", 10.0, 80), _iso_row("hikv-evict@256", 10.0, 160),
           _iso_row(seed.format(128), 10.0, 70), _iso_row(seed.format(256), 10.0, 140)]
    iso = I.iso_table(ppl, ppl_tol=0.01)
    data = I.iso_accuracy_file(iso, cfg, hikv_family="hikv-evict/k:think48/v:static48",
                               ppl_tol=0.01, passkey_tol=0.0, model="m", preset="default",
                               context=2048, source="test")
    fams = {p["family"] for p in data["points"]}
    assert fams == {"h2o", "h2o/avg", "hikv-none/k:think32", "hikv-evict/k:think32",
                    "hikv-evict/k:think48/v:static48"}, fams
    f = tmp_path / "iso.json"
    f.write_text(json.dumps(data))
    got = load_iso_accuracy(f, cfg)
    by = dict(zip(got.families, got.specs, strict=True))
    assert got.families[0] == "full" and got.families[-1] == "hikv-evict/k:think48/v:static48"
    assert by["h2o"].budget == 256 and not by["h2o"].averaged
    assert by["h2o/avg"].budget == 128 and by["h2o/avg"].averaged
    assert by["hikv-evict/k:think32"].budget == 256
    assert by["hikv-evict/k:think48/v:static48"].budget == 128
    assert "hikv-evict" not in by and got.unreached == ()
    rep = build_report(cfg, iso=got, area=False)
    labels = [r.label for r in rep.rows]
    assert labels == [s.label for s in got.specs] and len(set(labels)) == len(labels)
    assert rep.row(Method.HIKV).label == seed.format(128)
    ref = rep.rows[-1]
    assert all(r.hikv_bytes_reduction_vs_this == pytest.approx(r.bytes_burst / ref.bytes_burst)
               for r in rep.rows)
    # the file names its reference: a HiKV family that never reached is an error, not a
    # silent switch to another family
    f.write_text(json.dumps({**data, "hikv_family": "hikv-evict"}))
    with pytest.raises(ParamError, match="no HiKV point"):
        load_iso_accuracy(f, cfg)


def test_committed_iso_point_files_keep_one_point_per_method(tmp_path) -> None:
    """Every committed operating-point file (docs/results/**/iso_points*.json: points keyed by
    method, without ``hikv_family``) loads to the rows the one-point-per-method rule gives:
    per method its smallest within-tolerance budget, HiKV last. A file measured on a model of
    another head_dim than the preset's (Gemma-3, d = 256) is refused with a clear error, and
    its points, read without that guard, follow the same rule."""
    import json
    from pathlib import Path

    from hikv.params import from_dict
    from hikv.sim.explore.report import load_iso_accuracy

    cfg = get_preset("default")
    files = sorted((Path(__file__).resolve().parents[1] / "docs/results").rglob(
        "iso_points*.json"))
    assert len(files) >= 3
    for f in files:
        data = json.loads(f.read_text())
        if data.get("head_dim", cfg.layout.head_dim) != cfg.layout.head_dim:
            with pytest.raises(ParamError, match=f"head_dim = {data['head_dim']} .* preset "
                                                 f"'default' has head_dim = "
                                                 f"{cfg.layout.head_dim}"):
                load_iso_accuracy(f, cfg)
            f = tmp_path / f.name
            f.write_text(json.dumps({k: v for k, v in data.items() if k != "head_dim"}))
        best: dict = {}
        for pt in data["points"]:
            s = from_dict(MethodSpec, pt["spec"])
            if pt["within_tolerance"] and (s.method not in best or (s.budget, s.channels) < (
                    best[s.method].budget, best[s.method].channels)):
                best[s.method] = s
        want = ["full", *(best[m].label for m in Method if m in best)]
        if Method.HIKV not in best:
            # a measured "no HiKV at iso-accuracy" (e.g. the partial 4k seed tables): the file
            # is kept as a result, and the report refuses it with a clear error
            with pytest.raises(ParamError, match="no HiKV point within tolerance"):
                load_iso_accuracy(f, cfg)
            continue
        got = load_iso_accuracy(f, cfg)
        assert [s.label for s in got.specs] == want, f


@pytest.mark.parametrize("layout", ["contiguous", "buffer view", "offset view", "broadcast",
                                    "transposed"])
def test_gather_is_torch_gather(layout) -> None:
    """The caches' row gather gives ``torch.gather``'s values exactly for every layout a cache
    holds (a contiguous tensor, a view of a capacity buffer at any offset, a head broadcast)
    and for others (through ``torch.gather``); an index outside the rows is an error, never
    a read of another head's rows."""
    from hikv.model.methods.cache import gather

    g = torch.Generator().manual_seed(3)
    buf = torch.randn(3, 300, 16, generator=g)
    x = {"contiguous": buf[:, :200].contiguous(), "buffer view": buf[:, :200],
         "offset view": buf[:, 7:207],
         "broadcast": buf[:1, :200].expand(3, 200, 16),
         "transposed": torch.randn(16, 200, 3, generator=g).permute(2, 1, 0)}[layout]
    idx = torch.sort(torch.randint(0, 200, (3, 50), generator=g), -1).values
    idx[:, -1] = 199
    want = torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, 16))
    assert torch.equal(gather(x, idx), want)
    assert gather(x, idx[:, :0]).shape == (3, 0, 16)
    for bad in (200, -1):
        wrong = idx.clone()
        wrong[1, 3] = bad
        with pytest.raises(IndexError, match="out of range"):
            gather(x, wrong)
