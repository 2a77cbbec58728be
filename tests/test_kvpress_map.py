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
