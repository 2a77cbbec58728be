"""Stage II selection block RTL in Verilator through cocotb: the randomized regression (the
machinery of ``hikv rtl --block stage2``) and Verilog generation + lint.

CI runs 300 random jobs on ``tiny`` plus the directed jobs and refused inputs (seconds of
simulation); ``--extended`` runs the 10^4-job regression of ``hikv rtl --block stage2 --preset
tiny`` and the ``default`` and ``paper`` regressions. Seed: ``HIKV_SEED`` if set, else a fixed
one; it is in every failure message.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hikv.hw.stage2_timing import stage2_block_cycles
from hikv.presets import PRESETS, get_preset
from hikv.rtl_tests.launch import generated_verilog_lints
from hikv.rtl_tests.stage2_rtl import default_jobs, run_regression

pytestmark = pytest.mark.rtl

SEED = int(os.environ.get("HIKV_SEED", "20260101"))


def _check(preset: str, jobs: int | None) -> None:
    cfg = get_preset(preset)
    rep = run_regression(cfg, seed=SEED, jobs=jobs)
    print("\n".join(rep.lines))
    assert rep.passed, f"preset={preset} seed={SEED}\n" + "\n".join(rep.lines)
    stats = rep.metrics["stats"]
    assert stats["random"] >= (default_jobs(cfg) if jobs is None else jobs), stats
    assert stats["cycle_checks"] > stats["random"] // 4, stats
    assert stats["r_changes"] > 0, stats
    # the measured cycles (hikv.rtl_cycles/1 rows) agree with the cost model's contract
    data = json.loads(Path(rep.metrics["rtl_cycles"]).read_text())
    assert data["schema"] == "hikv.rtl_cycles/1" and data["measurements"]
    for row in data["measurements"]:
        assert row["block"] == "stage2" and row["preset"] == preset, row
        assert row["d"] == cfg.layout.head_dim, row
        assert row["cycles"] == stage2_block_cycles(cfg.sorter, d=row["d"],
                                                    count=row["count"]), row


def test_stage2_regression_tiny():
    """300 random jobs plus the directed jobs and refused inputs: zero mismatches against the
    golden model, cycles == formula."""
    _check("tiny", 300)


@pytest.mark.extended
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_stage2_regression_full(preset):
    """``hikv rtl --block stage2``'s own size: 10^4 random jobs on tiny, 1,000 on the others."""
    _check(preset, None)


@pytest.mark.parametrize("preset", [pytest.param(p, marks=pytest.mark.extended) if p == "paper"
                                    else p for p in sorted(PRESETS)])
def test_verilog_generates_and_lints(preset, tmp_path):
    """``hikv verilog --block stage2`` for every preset; verilator -Wall lint clean."""
    from hikv.scripts.cli import main

    generated_verilog_lints(main, "stage2", preset, tmp_path)
