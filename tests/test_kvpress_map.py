"""The pure parts of benchmarks/kvpress_crosscheck.py (no kvpress needed): Jaccard, the budget
to compression-ratio mapping and the settings mapping of each pair."""

from __future__ import annotations

import random

import pytest
from benchmark_scripts import load_benchmark

kc = load_benchmark("kvpress_crosscheck")


def test_jaccard() -> None:
    assert kc.jaccard([1, 2, 3], [3, 2, 1]) == 1.0
    assert kc.jaccard([1, 2], [3, 4]) == 0.0
    assert kc.jaccard([1, 2, 3], [2, 3, 4]) == pytest.approx(2 / 4)
    assert kc.jaccard([], []) == 1.0
    rng = random.Random(3)
    for case in range(200):
        a = rng.sample(range(50), rng.randint(0, 20))
        b = rng.sample(range(50), rng.randint(0, 20))
        j = kc.jaccard(a, b)
        assert j == kc.jaccard(b, a) and 0.0 <= j <= 1.0, f"seed=3 case={case}"
        assert (j == 1.0) == (set(a) == set(b)), f"seed=3 case={case}"


def test_mean_jaccard_needs_the_same_sets() -> None:
    ours = {(0, 0, 0): [1, 2], (0, 0, 1): [1, 2]}
    mean, low = kc.mean_jaccard(ours, {(0, 0, 0): [1, 2], (0, 0, 1): [2, 3]})
    assert mean == pytest.approx((1 + 1 / 3) / 2) and low == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="different"):
        kc.mean_jaccard(ours, {(0, 0, 0): [1, 2]})
    with pytest.raises(ValueError, match="no kept sets"):
        kc.mean_jaccard({}, {})


@pytest.mark.parametrize("tokens", [2, 33, 256, 1000, 1024, 4096, 32768])
def test_compression_ratio_keeps_exactly_the_budget(tokens: int) -> None:
    rng = random.Random(tokens)
    for budget in {1, tokens - 1, tokens // 2, *(rng.randint(1, tokens - 1) for _ in range(50))}:
        if not 1 <= budget < tokens:
            continue
        r = kc.compression_ratio(budget, tokens)
        assert 0 < r < 1 and kc.kvpress_n_kept(tokens, r) == budget, (tokens, budget, r)


def test_compression_ratio_rejects_impossible_budgets() -> None:
    with pytest.raises(ValueError, match="budget = 256 is out of range"):
        kc.compression_ratio(256, 256)
    with pytest.raises(ValueError, match="budget = 0"):
        kc.compression_ratio(0, 256)


def test_pairs_map_our_settings() -> None:
    from hikv.model.methods.baselines import SnapKV
    from hikv.params import ParamError

    ps = {p.name: p for p in kc.pairs(256, 1024, window=32)}
    cr = kc.compression_ratio(256, 1024)
    snap = ps["SnapKV, matched"]
    assert snap.matched and snap.press == "SnapKVPress" and snap.label == "snapkv@256"
    assert snap.press_kwargs == {"compression_ratio": cr, "window_size": 32,
                                 "kernel_size": SnapKV.pool_kernel}
    assert not ps["SnapKV, kvpress defaults"].matched
    assert not ps["H2O vs ObservedAttentionPress"].matched
    assert ps["H2O vs ObservedAttentionPress"].attn == "eager"   # kvpress needs attentions
    assert ps["full KV"].kind == "logits" and ps["full KV"].press is None
    ada = ps["AdaKV (SnapKV scores)"].press_kwargs
    # kvpress's safeguard int(alpha' B) = window + floor(0.2 (B - window)), ours
    assert int(256 * ada["alpha_safeguard"]) == 32 + (256 - 32) // 5
    cfg = kc.crosscheck_config()
    checked = 0
    for p in ps.values():
        if "compression_ratio" in p.press_kwargs:
            assert kc.kvpress_n_kept(1024, p.press_kwargs["compression_ratio"]) == 256, p.name
        try:
            spec = kc.our_spec(p, cfg)
        except ParamError:
            continue                    # a method this checkout lacks: the script skips it
        checked += 1
        if p.kind == "tokens" and p.label.split("@")[0] in ("snapkv", "h2o"):
            assert spec.budget == 256, p.name
            assert spec.recent == dict(p.overrides).get("recent", spec.recent), p.name
    assert checked >= 5


def test_render_marks_targets() -> None:
    rows = [{"name": "full KV", "kvpress": None, "variant": "", "matched": True,
             "settings": {"ours": {}, "kvpress": {}}, "logits_max_abs_diff": 3e-5,
             "passed": True},
            {"name": "SnapKV, matched", "kvpress": "SnapKVPress", "variant": "v",
             "matched": True, "settings": {"ours": {}, "kvpress": {"compression_ratio": 0.75}},
             "jaccard_mean": 0.98, "jaccard_min": 0.9, "passed": False}]
    text = kc.render({"model": "m", "windows": 1, "tokens": 8, "decode": 1, "budget": 2,
                      "rows": rows, "skipped": ["skipped X: the kit has no method 'x'"]})
    assert "3.00e-05" in text and "met" in text and "MISSED" in text
    assert "* skipped X" in text


def test_ties_classify_and_options() -> None:
    """benchmarks/kvpress_ties.py: a swap is a tie only on exactly equal scores; its options
    are the cross-check's (one table)."""
    mod = load_benchmark("kvpress_ties")
    assert mod.classify([0.5, 0.7], [0.5, 0.2]) == "tie"
    assert mod.classify([0.5], [0.5 * (1 + 1e-6)]) == "near"
    assert mod.classify([0.5], [0.6]) == "far"
    assert mod.X.INT_OPTIONS is kc.INT_OPTIONS or [o[0] for o in mod.X.INT_OPTIONS] == [
        o[0] for o in kc.INT_OPTIONS]
    with pytest.raises(SystemExit):
        kc.main(["--out", "/nonexistent", "--decode", "-1"])


def test_tie_aware_counts_only_exactly_tied_swaps() -> None:
    """A set differing only among tokens of one exactly equal score is an agreement (the two
    sides broke a plateau of max-pooled scores differently); anything else is not."""
    scores = {(0, 0, 0): [0.9, 0.5, 0.5, 0.5, 0.1], (0, 0, 1): [0.9, 0.5, 0.5, 0.4, 0.1],
              (0, 0, 2): [0.9, 0.5, 0.5, 0.5, 0.1]}
    ours = {(0, 0, 0): [0, 1], (0, 0, 1): [0, 1], (0, 0, 2): [0, 1]}
    theirs = {(0, 0, 0): [0, 3],          # 1 <-> 3: both 0.5, a tie
              (0, 0, 1): [0, 3],          # 1 (0.5) <-> 3 (0.4): a real difference
              (0, 0, 2): [0, 1]}
    got = kc.tie_aware(ours, theirs, scores)
    assert got["jaccard_mean"] == pytest.approx((1 / 3 + 1 / 3 + 1) / 3)
    assert got["tie_mean"] == pytest.approx((1 + 1 / 3 + 1) / 3)
    assert (got["sets"], got["sets_differing"], got["sets_tied"], got["tokens_tied"]) == \
        (3, 2, 1, 1)
    # without our scores nothing counts as a tie; sets of different sizes never do
    assert kc.tie_aware(ours, theirs)["tie_mean"] == got["jaccard_mean"]
    assert kc.tie_aware({(0,): [0, 1]}, {(0,): [0, 1, 2]},
                        {(0,): [0.5, 0.5, 0.5]})["sets_tied"] == 0
    rng = random.Random(11)
    for case in range(100):
        s = [rng.choice([0.1, 0.2, 0.3]) for _ in range(30)]
        order = sorted(range(30), key=lambda i: (-s[i], rng.random()))
        other = sorted(range(30), key=lambda i: (-s[i], rng.random()))
        k = rng.randint(1, 29)
        t = kc.tie_aware({0: order[:k]}, {0: other[:k]}, {0: s})
        assert t["tie_mean"] == 1.0, f"seed=11 case={case}: two top-{k} of one scoring"


def test_the_cross_check_is_a_gate() -> None:
    ok = {"rows": [{"name": "a", "passed": True}, {"name": "b", "passed": None}]}
    bad = {"rows": [*ok["rows"], {"name": "c", "passed": False}]}
    assert kc.exit_status(ok) == 0 and kc.exit_status(bad) == 1
    text = kc.render({"model": "m", "windows": 1, "tokens": 8, "decode": 1, "budget": 2,
                      "skipped": [], "rows": [{
                          "name": "c", "kvpress": "X", "variant": "", "matched": True,
                          "settings": {"ours": {}, "kvpress": {}}, "jaccard_mean": 0.98,
                          "jaccard_min": 0.9, "tie_mean": 0.985, "tie_min": 0.95, "sets": 90,
                          "sets_differing": 10, "sets_tied": 4, "tokens_tied": 5,
                          "passed": False}]})
    assert "4 only among exactly tied scores (5 tokens)" in text
    assert "Gate: FAILED, missed by c" in text


@pytest.mark.parametrize("passed,status", [((True, None), 0), ((True, False, None), 1)])
def test_main_exits_with_the_gate(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                  passed: tuple, status: int) -> None:
    """``python benchmarks/kvpress_crosscheck.py`` exits 1 when a matched row missed its
    target, 0 otherwise (the measurement itself replaced by its report)."""
    rows = [{"name": f"r{i}", "passed": p} for i, p in enumerate(passed)]
    seen = []

    def fake_run(args):  # noqa: ANN001, ANN202
        seen.append(args)
        return {"rows": rows}

    monkeypatch.setattr(kc, "run", fake_run)
    assert kc.main(["--out", str(tmp_path)]) == status
    assert len(seen) == 1 and seen[0].tokens == 1024 and seen[0].windows == 2


@pytest.mark.parametrize("budget,uniform", [(256, True), (639, True), (640, False),
                                            (1024, False)])
def test_kvpress_pyramid_falls_back_to_uniform_below_beta_window(budget: int,
                                                                  uniform: bool) -> None:
    """kvpress's PyramidKVPress keeps one budget in every layer when its lowest layer budget
    B / beta is below the 32-token window: B < 640 at beta = 20."""
    got = kc.kvpress_pyramid_budgets(budget, 4096, 30, window=32)
    assert (len(set(got)) == 1) == uniform, (budget, got[:3], got[-3:])
    if uniform:
        assert abs(got[0] - budget) <= 1
    else:
        assert got[0] > budget > got[-1]
    note = next(p.note for p in kc.pairs(budget, 4096, window=32, layers=30)
                if p.name == "PyramidKV")
    assert ("uniform SnapKV" in note) == uniform, note


def test_our_side_records_the_scores_it_chose_from() -> None:
    """run_ours keeps, per (window, layer, KV head), the prefix scores SnapKV and PyramidKV
    chose from: our kept prefix positions are a top-k of them (what the tie check needs)."""
    pytest.importorskip("transformers")
    from test_lm_route import random_ids, tiny_lm

    lm, _ = tiny_lm("llama")
    tokens, budget = 48, 24
    todo = [p for p in kc.pairs(budget, tokens, window=8, layers=lm.shape.layers)
            if p.name in ("SnapKV, matched", "PyramidKV, our layer budgets")]
    assert len(todo) == 2
    got = kc.run_ours(lm, [random_ids(tokens + 2, 97, 7)], todo, tokens=tokens, decode=2)
    for p in todo:
        kept, scores = got["kept"][p.name], got["scores"][p.name]
        assert set(kept) == set(scores), p.name
        for key, pos in kept.items():
            s = scores[key]
            prefix = [i for i in pos if i < len(s)]
            worst = min(s[i] for i in prefix)
            assert all(s[i] <= worst for i in range(len(s)) if i not in prefix), (p.name, key)
        assert kc.tie_aware(kept, kept, scores)["tie_mean"] == 1.0
