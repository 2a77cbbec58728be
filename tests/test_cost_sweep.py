"""Design-space sweeps (hikv.sim.explore.sweep, `hikv sweep`)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from hikv.params import ParamError
from hikv.presets import baseline_specs, get_preset
from hikv.scripts.cli import main
from hikv.sim.explore import sweep as S


def test_grid_and_evaluate():
    cfg = get_preset("default")
    pts = S.grid({"context": [1024, 4096], "budget": [128, 256], "memory": ["hbm2", "ddr3"]})
    assert len(pts["context"]) == 8
    specs = [baseline_specs(cfg)[0], baseline_specs(cfg)[-1]]
    res = S.evaluate(cfg, pts, specs)
    h = res.methods[specs[1].label]
    assert h["time_s"].shape == (8,)
    full = res.methods["full"]
    np.testing.assert_allclose(full["speedup_vs_ref"], 1.0)
    # DDR3 costs more DRAM energy than HBM2 at the same bytes
    hb = pts["memory"] == "hbm2"
    assert (h["energy_dram_j"][~hb] > h["energy_dram_j"][hb]).all()
    with pytest.raises(ParamError, match="unknown sweep axis"):
        S.grid({"lanes": [1]})
    with pytest.raises(ParamError, match="memory"):
        S.grid({"memory": ["sram"]})
    with pytest.raises(ParamError, match="keep_v"):
        S.evaluate(cfg, S.grid({"keep_v": [64], "head_dim": [32]}), specs)


def test_scorer_lanes_axis(tmp_path, capsys):
    """More scoring-unit lanes shorten query-aware HiKV's select phase (default preset)."""
    cfg = get_preset("default")
    pts = S.grid({"scorer_lanes": [4, 8, 16, 32]})
    hikv = [s for s in baseline_specs(cfg) if s.method.value == "hikv"]
    res = S.evaluate(cfg, pts, [baseline_specs(cfg)[0], *hikv])
    h = res.methods[hikv[0].label]
    assert (np.diff(h["scorer_cycles_per_head"]) < 0).all()
    assert (np.diff(h["time_s"]) <= 0).all() and (h["bytes_bound_fraction"] <= 1 + 1e-12).all()
    out = tmp_path / "sw"
    assert main(["sweep", "--preset", "default", "--scorer-lanes", "8,32", "--no-area",
                 "--no-plots", "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert {r["scorer.lanes"] for r in rows} == {"8", "32"}
    assert main(["sweep", "--preset", "default", "--scorer-lanes", "0", "--no-area",
                 "--out", str(tmp_path / "bad")]) == 2
    assert "--scorer-lanes value 0: ScorerParams.lanes" in capsys.readouterr().err


def test_pareto_mask():
    x = np.array([1.0, 2.0, 3.0, 2.0, 3.0])
    y = np.array([1.0, 2.0, 2.5, 1.0, 3.0])
    # (2, 1) dominates (1, 1) and (2, 2); (3, 2.5) dominates (3, 3)
    assert S.pareto_mask(x, y).tolist() == [False, False, True, True, False]


def test_cli_sweep_csv_has_every_config_field(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", "--preset", "tiny", "--context", "32,64", "--budget", "8,16",
                 "--node", "45,7", "--no-area", "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert len(rows) == 8 * 2
    for col in ("policy.budget", "accel.tech_nm", "layout.head_dim", "model.layers",
                "sorter.lanes", "loader.data_width", "context", "code_version",
                "timing_model", "speedup_vs_ref", "energy_j"):
        assert col in rows[0], col
    assert {r["policy.budget"] for r in rows} == {"8", "16"}
    assert {r["accel.tech_nm"] for r in rows} == {"45", "7"}
    for name in ("pareto_energy_speedup.png", "speedup_vs_context.png"):
        assert (out / name).stat().st_size > 0
    assert "largest HiKV speedup" in capsys.readouterr().out


def test_bench_runs():
    r = S.bench(get_preset("default"), points=2000, repeat=1)
    assert r["points"] == 2000 and r["points_per_s"] > 0


def test_cli_sweep_with_estimated_clocks(tmp_path, capsys):
    from cost_helpers import cells_or_skip

    cells_or_skip()
    out = tmp_path / "sw"
    assert main(["sweep", "--preset", "tiny", "--context", "32,64", "--clocks", "sta",
                 "--no-area", "--no-plots", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "clocks: pe_array" in text and "sorter" in text and "(sta)" in text
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert len(rows) == 2 * 2
