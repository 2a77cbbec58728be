"""The report's figures: methods with equal results drawn once, HiKV never merged, and the
nominal view beside an iso-accuracy one."""

from __future__ import annotations

from pathlib import Path

from hikv.presets import get_preset
from hikv.sim.explore.render import group_same, operating_point, plot_report
from hikv.sim.explore.report import build_report

ROOT = Path(__file__).resolve().parents[1]


def test_group_same_merges_equal_methods_and_keeps_hikv_apart():
    labels = ["snapkv@8", "tova@8", "hikv@8", "quest@8", "adakv@8"]
    vals = [[1.0, 2.0], [1.0, 2.0 + 1e-6], [1.0, 2.0], [1.5, 2.0], [1.0, 2.0]]
    groups = group_same(labels, vals)
    assert [g[0] for g in groups] == [["snapkv@8", "tova@8", "adakv@8"], ["hikv@8"],
                                      ["quest@8"]]
    # a 1 % difference is not "the same"
    assert len(group_same(["a", "b"], [[1.0], [1.01]])) == 2


def test_nominal_report_has_one_view_and_names_its_operating_point(tmp_path):
    rep = build_report(get_preset("tiny"), area=False)
    assert rep.nominal == {}
    line = operating_point(rep)
    cfg = get_preset("tiny")
    assert f"context N = {cfg.context}" in line and f"B = {cfg.policy.budget}" in line
    files = plot_report(rep, tmp_path)
    assert sorted(f.name for f in files) == ["methods.png", "speedup_vs_context.png"]


def test_iso_report_draws_the_nominal_view_beside_it(tmp_path):
    from hikv.sim.explore.report import load_iso_accuracy

    cfg = get_preset("default")
    iso = load_iso_accuracy(ROOT / "docs/results/smollm2/seed/iso_points_prompt_2048.json", cfg)
    rep = build_report(cfg, iso=iso, area=False)
    nominal = build_report(cfg, area=False)
    # the nominal view is exactly the nominal report's rows, relative to full KV
    full = nominal.rows[0]
    assert [r["label"] for r in rep.nominal["rows"]] == [r.label for r in nominal.rows]
    for got, r in zip(rep.nominal["rows"], nominal.rows, strict=True):
        assert got["time"] == r.time_s / full.time_s
        assert got["bytes"] == r.bytes_burst / full.bytes_burst
    assert rep.nominal["context_curve"] == nominal.context_curve
    files = plot_report(rep, tmp_path)
    assert all(f.stat().st_size > 0 for f in files)
