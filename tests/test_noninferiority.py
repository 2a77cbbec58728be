"""Iso-accuracy as a non-inferiority test (hikv.model.accuracy.iso): the paired perplexity
bootstrap, the paired task interval, full KV against itself on disjoint windows, the table and
its verdicts, the per-block NLLs the perplexity rows record, and the finer budget grid."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hikv.model.accuracy import iso as I
from hikv.params import ParamError

SEED = 36


def _ppl_row(label: str, blocks: list[list[float]], *, budget: int = 64, family: str = "",
             method: str = "snapkv", block: int = I.NLL_BLOCK) -> dict:
    """A perplexity row over ``blocks`` (per window, NLL sums of full blocks of ``block``)."""
    tokens = sum(len(w) for w in blocks) * block
    nll = sum(sum(w) for w in blocks) / tokens
    return {"label": label, "family": family or label.split("@")[0], "method": method,
            "budget": budget, "ppl": math.exp(nll), "tokens": tokens, "windows": len(blocks),
            "length": 1024, "window": 1024, "protocol": "both", "units": 4,
            "bytes_burst": 100.0 * budget, "bytes_ideal": 90.0 * budget,
            "nll_blocks": blocks, "nll_block_tokens": block}


def _noise(rng: np.random.Generator, windows: int, blocks: int, sd: float) -> np.ndarray:
    return rng.normal(3.0 * I.NLL_BLOCK, sd, size=(windows, blocks))


def test_nll_block_sums() -> None:
    assert I.nll_block_sums([1.0] * 40, 16) == [16.0, 16.0, 8.0]
    assert I.nll_block_sums([], 16) == []
    with pytest.raises(ParamError, match="block = 0"):
        I.nll_block_sums([1.0], 0)


def test_ppl_bound_is_paired_and_decides_both_ways() -> None:
    rng = np.random.default_rng(SEED)
    base = _noise(rng, 8, 16, sd=4.0)                # text difficulty: large, shared
    full = _ppl_row("full", base.tolist(), method="full")
    same = I.ppl_increase_bound(_ppl_row("a@64", base.tolist()), full)
    assert same is not None and same.estimate == pytest.approx(0.0, abs=1e-12)
    assert same.low == pytest.approx(0.0, abs=1e-12) and same.high == pytest.approx(0.0, abs=1e-12)
    # +0.2 % per token with a little paired noise: the bound stays far below 1 % (paired),
    # although the text's own spread is much larger than the margin
    small = base + I.NLL_BLOCK * 0.002 + rng.normal(0, 0.02, base.shape)
    b = I.ppl_increase_bound(_ppl_row("b@64", small.tolist()), full, seed=SEED)
    assert b.low < b.estimate < b.high < I.PPL_MARGIN, (SEED, b)
    assert b.estimate == pytest.approx(math.expm1(float((small - base).sum())
                                                  / (base.size * I.NLL_BLOCK)))
    # +5 % per token: the lower bound is above the margin
    worse = base + I.NLL_BLOCK * math.log(1.05) + rng.normal(0, 0.05, base.shape)
    w = I.ppl_increase_bound(_ppl_row("c@64", worse.tolist()), full, seed=SEED)
    assert I.PPL_MARGIN < w.low, (SEED, w)
    # +1 % with noise of the size of the margin: undecided
    e = rng.normal(0, 1.5, base.shape)
    noisy = base + I.NLL_BLOCK * math.log(1.01) + e - e.mean()
    u = I.ppl_increase_bound(_ppl_row("d@64", noisy.tolist()), full, seed=SEED)
    assert u.low < I.PPL_MARGIN < u.high, (SEED, u)
    # seeded: the same bounds again
    assert I.ppl_increase_bound(_ppl_row("d@64", noisy.tolist()), full, seed=SEED) == u
    # rows over other tokens are refused, rows without blocks give None
    with pytest.raises(ParamError, match="same tokens"):
        I.ppl_increase_bound(_ppl_row("e@64", base[:4].tolist()), full)
    assert I.ppl_increase_bound({**full, "nll_blocks": None}, full) is None


def test_task_bound_is_newcombes_paired_interval() -> None:
    ok = I.task_difference_bound([1.0] * 50, [1.0] * 50)
    lo50, _ = I.wilson(50, 50, 1.6448536269514722)
    assert ok.estimate == 0 and ok.low == pytest.approx(-(1 - lo50))
    assert ok.low == pytest.approx(-0.0513, abs=1e-4)      # 50 equal trials: just short of -5
    assert I.task_difference_bound([1.0] * 60, [1.0] * 60).low > -I.TASK_MARGIN
    one_miss = I.task_difference_bound([1.0] * 19 + [0.0], [1.0] * 20)
    assert one_miss.low < -I.TASK_MARGIN < one_miss.high        # 19/20 vs 20/20: undecided
    # concordant pairs narrow the interval: the same marginals, paired or not
    a = [1.0] * 30 + [0.0] * 30
    paired = I.task_difference_bound(a, a)
    crossed = I.task_difference_bound(a, a[::-1])
    assert paired.high - paired.low < crossed.high - crossed.low
    # fractional scores (a share of the references), the first trials of a stopped row
    rng = np.random.default_rng(SEED)
    s = rng.integers(0, 5, 80) / 4
    assert -1 <= I.task_difference_bound(s[:30], s).low <= 0 <= \
        I.task_difference_bound(s[:30], s).high
    assert I.task_difference_bound(s[:30], s).units == 30
    with pytest.raises(ParamError, match="in \\[0, 1\\]"):
        I.task_difference_bound([2.0], [1.0])


def test_split_self_check_on_synthetic_windows() -> None:
    rng = np.random.default_rng(SEED)
    many = _noise(rng, 256, 32, sd=1.0)
    c = I.split_self_check(_ppl_row("full", many.tolist(), method="full"), seed=SEED)
    assert c["within"] and c["half_width"] <= I.SELF_CHECK_HALF_WIDTH, (SEED, c)
    assert c["low"] <= 0 <= c["high"], (SEED, c)
    few = _noise(rng, 4, 4, sd=6.0)
    c = I.split_self_check(_ppl_row("full", few.tolist(), method="full"), seed=SEED)
    assert not c["within"] and c["half_width"] > 0.003, (SEED, c)
    shifted = many.copy()
    shifted[1::2] += I.NLL_BLOCK * 0.02            # the odd windows 2 % harder
    c = I.split_self_check(_ppl_row("full", shifted.tolist(), method="full"), seed=SEED)
    assert c["high"] < 0 and not c["covers_zero"], (SEED, c)
    assert I.split_self_check(_ppl_row("full", many[:1].tolist(), method="full")) is None


def _task_row(label: str, scores: list[float], family: str = "", budget: int = 64) -> dict:
    return {"label": label, "family": family or label.split("@")[0], "task": "passkey",
            "protocol": "prompt", "length": 1024, "trials": len(scores), "budget": budget,
            "score_sum": sum(scores), "scores": scores, "status": "complete"}


def test_table_verdicts_intervals_and_unpaired_rows() -> None:
    rng = np.random.default_rng(SEED)
    base = _noise(rng, 16, 16, sd=3.0)
    full = _ppl_row("full", base.tolist(), method="full", family="full")
    rows = [full]
    # family x: no at 64, undecided at 128, yes at 256 and 512 -> iso 256, low 128
    for b, (shift, sd) in {64: (0.05, 0.01), 128: (0.01, 1.5), 256: (0.0, 0.01),
                           512: (0.0, 0.0)}.items():
        e = rng.normal(0, sd, base.shape)
        rows.append(_ppl_row(f"x@{b}", (base + I.NLL_BLOCK * math.log1p(shift)
                                        + e - e.mean()).tolist(), budget=b))
    # family y: measured without per-block NLLs (point rule)
    for b, rel in {64: 0.02, 128: 0.005}.items():
        r = _ppl_row(f"y@{b}", base.tolist(), budget=b)
        rows.append({**r, "ppl": full["ppl"] * (1 + rel), "nll_blocks": None})
    perfect = [1.0] * 80
    tasks = [_task_row("full", perfect, "full"), *(_task_row(f"x@{b}", perfect, budget=b)
                                                  for b in (128, 256, 512)),
             _task_row("y@128", perfect, budget=128)]
    pts, fams = I.noninferiority_table(rows, tasks, length=1024, protocol="prompt", seed=SEED)
    v = {p["label"]: p["verdict"] for p in pts}
    assert v == {"x@64": "no", "x@128": "undecided", "x@256": "yes", "x@512": "yes",
                 "y@64": "no", "y@128": "yes"}, (SEED, v)
    x = next(f for f in fams if f["family"] == "x")
    assert (x["verdict"], x["iso_budget_low"], x["iso_budget"]) == ("yes", 128, 256)
    assert x["bytes_burst"] == 25600 and x["bytes_burst_low"] == 12800
    y = [p for p in pts if p["family"] == "y"]
    assert all(p["ppl_test"].startswith("no paired data") for p in y)
    assert all(p["level"] == I.NI_LEVEL and p["ppl_margin"] == I.PPL_MARGIN
               and p["task_margin"] == I.TASK_MARGIN for p in pts)
    assert "passkey: not run" in next(p for p in pts if p["label"] == "x@64")["tasks"]
    red = I.noninferiority_reductions(fams, "y")
    rx = next(r for r in red if r["baseline"] == "x")
    assert rx["x_burst"] == pytest.approx(25600 / 12800)
    assert rx["x_burst_low"] == pytest.approx(1.0) and rx["x_burst_high"] is not None


def test_perplexity_rows_record_block_sums() -> None:
    """The perplexity harness records per-window NLL block sums over the same tokens for every
    method: they add up to the row's NLL, and the paired bound of full KV against itself is 0."""
    pytest.importorskip("transformers")
    from test_lm_route import random_ids, tiny_lm

    from hikv.model.accuracy.experiments import perplexity
    from hikv.params import MethodSpec, parse_method

    lm, cfg = tiny_lm("llama")
    wins = [random_ids(60, 97, SEED + i) for i in range(2)]
    specs = [MethodSpec(), parse_method("snapkv@16", cfg.policy, lm.shape.head_dim)]
    rows = perplexity(lm, specs, cfg, wins, 20)
    for r in rows:
        assert r["nll_block_tokens"] == I.NLL_BLOCK and len(r["nll_blocks"]) == 2
        assert [len(w) for w in r["nll_blocks"]] == [3, 3]            # 39 predictions each
        total = sum(sum(w) for w in r["nll_blocks"])
        assert total == pytest.approx(r["nll"] * r["tokens"], rel=1e-6), r["label"]
    b = I.ppl_increase_bound(rows[0], rows[0])
    assert b.estimate == 0 and b.low == 0 and b.high == 0
    assert I.ppl_increase_bound(rows[1], rows[0]).estimate == pytest.approx(
        rows[1]["ppl"] / rows[0]["ppl"] - 1, rel=1e-4)


def test_finer_budget_grid() -> None:
    import dataclasses

    from hikv.model.accuracy.seed_spec import SEED_SUITES, budget_grid, finer_budgets

    assert finer_budgets([64, 128, 256], 2.0) == [64, 128, 256]
    assert finer_budgets([64, 128, 256], 2 ** 0.5) == [64, 91, 128, 181, 256]
    suite = dataclasses.replace(SEED_SUITES["seed-smollm2"], budget_step=2 ** 0.5)
    for n in suite.lengths:
        got = sorted({b for b, _ in budget_grid(suite, n)})
        steps = [b / a for a, b in zip(got, got[1:], strict=False)]
        assert max(steps) < 1.45 and min(steps) > 1.35, (n, got)
    assert ("B=181 (grid)" in {r for _, r in budget_grid(suite, 4096)})
    with pytest.raises(ParamError, match="budget step"):
        finer_budgets([64, 128], 1.0)
    with pytest.raises(ParamError, match="budget step"):
        dataclasses.replace(suite, budget_step=3.0)
    # the grid enters the cells' key only where set: existing cells keep theirs
    from hikv.model.accuracy.seed_spec import suite_key

    plain = SEED_SUITES["seed-smollm2"]
    assert len(suite_key(plain)) == 9 and suite_key(suite)[-1] == "step 1.41421"
