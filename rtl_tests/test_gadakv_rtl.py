"""G-AdaKV's global top-k on the sorter RTL (Verilator through cocotb): random problems with
many ties, segments longer than ``max_n`` and budgets above ``max_k``; the kept sets equal
``global_topk`` bit for bit and every job's cycles equal the timing formula. The same machinery
as ``hikv rtl --block sorter --traffic gadakv``.

Seed: ``HIKV_SEED`` if set, else a fixed one; it is in every failure message.
"""

from __future__ import annotations

import os

import pytest

from hikv.params import ParamError
from hikv.presets import get_preset
from hikv.rtl_tests.gadakv_rtl import sorter_regression
from hikv.scripts.cli import main

SEED = int(os.environ.get("HIKV_SEED", "20260101"))


@pytest.mark.rtl
def test_gadakv_global_topk_on_the_rtl_tiny() -> None:
    rep = sorter_regression(get_preset("tiny"), seed=SEED, traffic="gadakv")
    print("\n".join(rep.lines))
    assert rep.passed, f"preset=tiny seed={SEED}\n" + "\n".join(rep.lines)
    st = rep.metrics["gadakv"]
    assert st["problems"] == 40 and st["multi_round"] >= 5, st
    assert st["scan_jobs"] > 100 and st["merge_jobs"] > 50, st
    assert st["cycle_checks"] == st["jobs"] and st["cycle_mismatches"] == 0, st


def test_traffic_is_checked() -> None:
    with pytest.raises(ParamError, match="sorter traffic = 'nope' is not one of"):
        sorter_regression(get_preset("tiny"), seed=1, traffic="nope")
    with pytest.raises(ParamError, match="jobs = 0 is out of range"):
        sorter_regression(get_preset("tiny"), seed=1, jobs=0, traffic="gadakv")


def test_cli_traffic_only_for_the_sorter(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rtl", "--block", "loader", "--traffic", "gadakv"]) == 2
    assert "--traffic is for --block sorter" in capsys.readouterr().err
