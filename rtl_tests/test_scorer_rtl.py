"""Scoring unit RTL in Verilator through cocotb: the randomized and adversarial regression (the
same machinery as ``hikv rtl --block scorer``) at b = 4 and 8, and Verilog generation + lint.

Seed: ``HIKV_SEED`` if set, else a fixed one; it is printed and in every failure message.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

import pytest

from hikv.hw.blocks import get_block
from hikv.presets import get_preset
from hikv.rtl_tests.launch import LINT_FLAGS
from hikv.rtl_tests.registry import run_regression
from hikv.toolchain import cache_dir, setup_environ

pytestmark = pytest.mark.rtl

SEED = int(os.environ.get("HIKV_SEED", "20261201"))


def _tiny(bits: int):
    cfg = get_preset("tiny")
    return cfg.replace(policy=dataclasses.replace(cfg.policy, lowbit_bits=bits))


#: 8-bit keys are the same datapath with wider operands: ``--extended`` (CI runs the 4-bit unit,
#: the presets' choice)
@pytest.mark.parametrize("bits", [4, pytest.param(8, marks=pytest.mark.extended)])
def test_scorer_regression_tiny(bits):
    """>= 1,000 jobs (random, raw fp16 metadata, extreme scales, all-zero keys, saturation)
    with random valid/ready, zero mismatches, cycles == the timing contract."""
    rep = run_regression("scorer", _tiny(bits), seed=SEED)
    print("\n".join(rep.lines))
    assert rep.passed, f"preset=tiny bits={bits} seed={SEED}\n" + "\n".join(rep.lines)
    stats = rep.metrics["stats"]
    assert sum(stats.values()) >= 1000 and min(stats.values()) >= 200, stats
    assert rep.metrics["cycle_checks"]["single"] > 300, rep.metrics["cycle_checks"]
    assert rep.metrics["cycle_checks"]["batch"] >= 25, rep.metrics["cycle_checks"]


def test_scorer_sorter_chain_tiny():
    """The scoring unit chained into the sorter: Stage I selections of the reference keys,
    cycles == sorter Stage I cycles + the scorer's latency."""
    rep = run_regression("scorer_sorter", get_preset("tiny"), seed=SEED)
    print("\n".join(rep.lines))
    assert rep.passed, f"preset=tiny seed={SEED}\n" + "\n".join(rep.lines)
    assert rep.metrics["cycle_checks"] >= 90, rep.metrics


#: ``default`` is linted with 2 of its 32 lanes: the lanes are identical copies (every width is
#: per lane; 2 exercise the shared query sum's fan-out), and the 32-lane lint alone takes about
#: 269 s of CI. The full build: ``hikv verilog --block scorer --preset default`` + lint.
@pytest.mark.parametrize("block,preset,overrides", [
    ("scorer", "tiny", ()), ("scorer", "default", ("scorer.lanes=2",)),
    ("scorer_sorter", "tiny", ())])
def test_scorer_verilog_lints_clean(block, preset, overrides):
    from hikv.presets import with_overrides

    setup_environ()
    exe = shutil.which("verilator")
    if exe is None:
        pytest.skip("verilator not installed")
    blk = get_block(block)
    text = blk.verilog(with_overrides(get_preset(preset), overrides))
    path = cache_dir() / "lint" / f"{block}-{preset}" / f"{blk.toplevel}.v"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    out = subprocess.run([exe, *LINT_FLAGS, "--top-module", blk.toplevel, str(path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
