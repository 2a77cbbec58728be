"""A sweep over any single axis runs; a Stage II axis that cannot change anything is refused."""

from __future__ import annotations

import csv

import pytest

from hikv.scripts.cli import main


@pytest.mark.parametrize("axis", [["--memory", "ddr3"], ["--node", "7"], ["--bandwidth", "1e11"],
                                  ["--pe-lanes", "64"], ["--context", "4096"]])
def test_a_single_axis_sweeps(tmp_path, capsys, axis):
    out = tmp_path / "s"
    rc = main(["sweep", "--preset", "default", "--no-area", "--no-plots", *axis,
               "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert rows and all(r["time_s"] not in ("", "nan", "inf") for r in rows)


def test_keep_k_on_a_preset_that_keeps_every_k_element_is_refused(tmp_path, capsys):
    rc = main(["sweep", "--preset", "default", "--no-area", "--no-plots", "--keep-k", "8",
               "--out", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert rc == 2 and "--keep-k" in err and "policy.k_rule.kind" in err
    assert not (tmp_path / "s" / "sweep.csv").exists()


def test_keep_v_sweeps_where_v_is_pruned(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sweep", "--preset", "tiny", "--no-area", "--no-plots", "--keep-v", "4,8",
                 "--out", str(out)]) == 0, capsys.readouterr().err
    rows = [r for r in csv.DictReader(open(out / "sweep.csv")) if r["method"].startswith("hikv")]
    assert len({r["bytes_burst"] for r in rows}) == 2      # the axis changes the bytes


def test_area_columns_count_loaders_at_the_loader_clock_of_the_sweep():
    import dataclasses

    import numpy as np

    from hikv.hw.blocks import loader_instances
    from hikv.presets import get_preset
    from hikv.sim.cost.clocks import assumed_clocks
    from hikv.sim.explore.sweep import area_columns

    cfg = get_preset("tiny")
    slow = cfg.replace(accel=dataclasses.replace(cfg.accel,
                                                 loader_clock_hz=cfg.accel.clock_hz / 4,
                                                 clock_source="a slower loader, for the test"))
    clocks = assumed_clocks(slow)
    assert clocks.hz("loader") == cfg.accel.clock_hz / 4
    n_ref, n_slow = loader_instances(cfg), loader_instances(cfg, clock_hz=clocks.hz("loader"))
    assert n_slow > n_ref
    pts = {"context": np.asarray([cfg.context])}
    a_ref = area_columns(cfg, pts, 1)
    a_slow = area_columns(cfg, pts, 1, clocks)
    assert a_slow["area_hikv_m2"][0] > a_ref["area_hikv_m2"][0]
