"""Sorter RTL in Verilator through cocotb: the randomized regression (the same machinery as
``hikv rtl --block sorter``), the replay entry point, and Verilog generation + lint.

Seed: ``HIKV_SEED`` if set, else a fixed one; it is printed and in every failure message.
"""

from __future__ import annotations

import os
import shutil

import pytest

from hikv.hw.sorter_timing import SorterTiming
from hikv.model.refs.sorter import stage1_topk, stage2_topr
from hikv.presets import PRESETS, get_preset
from hikv.rtl_tests.launch import generated_verilog_lints
from hikv.rtl_tests.sorter_rtl import run_regression

pytestmark = pytest.mark.rtl

SEED = int(os.environ.get("HIKV_SEED", "20260101"))


def test_sorter_regression_tiny():
    """>= 10^4 random jobs per mode plus corner cases, zero mismatches, cycles == formula."""
    cfg = get_preset("tiny")
    rep = run_regression(cfg, seed=SEED)
    print("\n".join(rep.lines))
    assert rep.passed, f"preset=tiny seed={SEED}\n" + "\n".join(rep.lines)
    stats = rep.metrics["stats"]
    for mode in ("stage1", "stage2"):
        assert stats[mode]["random"] >= 10_000, stats
        assert stats[mode]["cycle_checks"] > 1000, stats
    # the measured cycles, in the cost model's format, agree with the formula module
    from hikv.hw.sorter_timing import sorter_cycles
    from hikv.sim.cost.validate import load_measurements

    rows = load_measurements(rep.metrics["rtl_cycles"])
    assert len(rows) > 100
    for m in rows:
        assert m.cycles == sorter_cycles(cfg.sorter, **m.job), m


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog not installed")
def test_sorter_regression_tiny_icarus():
    """The optional second simulator: a shorter regression on Icarus."""
    rep = run_regression(get_preset("tiny"), seed=SEED, jobs=200, simulator="icarus")
    assert rep.passed, f"preset=tiny seed={SEED} simulator=icarus\n" + "\n".join(rep.lines)


def test_sorter_replay_user_vectors():
    from hikv.rtl_tests.sorter_jobs import STAGE1, STAGE2, SorterJob
    from hikv.rtl_tests.sorter_replay import replay, run_sorter

    cfg = get_preset("tiny")
    t = SorterTiming.from_params(cfg.sorter)
    res = run_sorter(cfg, stage1=[5, 9, 9, 1, 7, 3], k=3)
    assert res.indices == [[1, 2, 4]] and res.keys == [[9, 9, 7]]
    assert res.cycles == res.formula_cycles == t.stage1_cycles(6, 3) == 22  # as in README
    assert res.matches_golden
    vecs = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]]
    jobs = [SorterJob(STAGE2, 3, tuple(map(tuple, vecs))),
            SorterJob(STAGE1, 16, (tuple(range(64)),), tuple(range(64)))]
    runs = replay(cfg, jobs)
    assert runs[0].indices == [[i for _, i in v] for v in stage2_topr(vecs, 3)]
    assert runs[0].indices == [[4, 5, 7], [3, 5, 7]]  # as in docs/sorter.md
    assert runs[1].indices == [[i for _, i in stage1_topk(list(range(64)), list(range(64)),
                                                          16)]]
    assert all(r.cycles == r.formula_cycles and r.matches_golden for r in runs)
    # float scores go through the preset's key format
    res = run_sorter(cfg, stage1=[0.5, 0.25, 1.0, 0.125], k=2, labels=[3, 5, 8, 13])
    assert res.indices == [[3, 8]]


#: ``paper`` is ``default``'s sorter (32 lanes, 16-bit keys) with deeper counters and buffers
#: (max_n 32,768 against 4,096): its lint is ``--extended`` (66 s of CI on 2 cores)
@pytest.mark.parametrize("preset", [pytest.param(p, marks=pytest.mark.extended) if p == "paper"
                                    else p for p in sorted(PRESETS)])
def test_verilog_generates_and_lints(preset, tmp_path):
    """``hikv verilog --block sorter`` for every preset; verilator -Wall lint clean."""
    from hikv.scripts.cli import main

    generated_verilog_lints(main, "sorter", preset, tmp_path)
