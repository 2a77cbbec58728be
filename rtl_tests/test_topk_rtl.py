"""Top-k engine RTL in Verilator through cocotb: the randomized regression (the machinery of
``hikv rtl --block topk``) and Verilog generation + lint.

CI runs 2,000 random jobs on ``tiny`` (about 10 s of simulation); ``--extended`` runs the
10^4-job regression of ``hikv rtl --block topk --preset tiny`` and the ``default`` and
``paper`` regressions. Seed: ``HIKV_SEED`` if set, else a fixed one; it is in every failure
message.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hikv.hw.topk_timing import topk_cycles
from hikv.presets import PRESETS, get_preset
from hikv.rtl_tests.launch import generated_verilog_lints
from hikv.rtl_tests.topk_rtl import default_jobs, run_regression

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
    # the measured cycles (hikv.rtl_cycles/1 rows) agree with the formula module
    data = json.loads(Path(rep.metrics["rtl_cycles"]).read_text())
    assert data["schema"] == "hikv.rtl_cycles/1" and data["measurements"]
    for row in data["measurements"]:
        assert row["block"] == "topk" and row["preset"] == preset, row
        assert row["cycles"] == topk_cycles(cfg.sorter, row["mode"], n=row["n"],
                                            k=row["k"]), row


def test_topk_regression_tiny():
    """2,000 random Stage I jobs plus the corner cases and refused configurations: zero
    mismatches against the golden model, cycles == formula."""
    _check("tiny", 2_000)


@pytest.mark.extended
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_topk_regression_full(preset):
    """``hikv rtl --block topk``'s own size: 10^4 random jobs on tiny, 100 on the others."""
    _check(preset, None)


@pytest.mark.parametrize("preset", [pytest.param(p, marks=pytest.mark.extended) if p == "paper"
                                    else p for p in sorted(PRESETS)])
def test_verilog_generates_and_lints(preset, tmp_path):
    """``hikv verilog --block topk`` for every preset; verilator -Wall lint clean."""
    from hikv.scripts.cli import main

    generated_verilog_lints(main, "topk", preset, tmp_path)
