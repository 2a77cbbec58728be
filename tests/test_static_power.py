"""Static power: leakage per area and per SRAM bit, static energy per step in the report, and
our per-unit areas against the published figures of hikv/sim/data/published_areas.json."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cost_helpers import cells_or_skip

from hikv.params import Method, ParamError
from hikv.presets import get_preset
from hikv.sim.cost import energy as E
from hikv.sim.cost.engines import with_kind
from hikv.sim.cost.static_power import (
    LeakagePower,
    accelerator_leakage,
    method_leakage_w,
    static_step_energy_j,
)
from hikv.sim.eda.area import AcceleratorArea, AreaItem
from hikv.sim.tech import load_data, node_area_scale, node_energy_scale


def test_logic_leakage_positive_proportional_to_area_zero_for_zero():
    for t in (45, 28, 16, 7):
        one = E.logic_leakage_w(1e-6, t)
        assert one > 0
        assert E.logic_leakage_w(3e-6, t) == pytest.approx(3 * one)
        assert E.logic_leakage_w(0.0, t) == 0.0
    arr = E.logic_leakage_w(np.array([0.0, 1e-6, 2e-6]), 28)
    assert arr[0] == 0 and arr[2] == pytest.approx(2 * arr[1])
    with pytest.raises(ParamError):
        E.logic_leakage_w(-1e-6, 28)


def test_logic_leakage_density_from_the_table_and_node_rule():
    tab = load_data("leakage.json")["logic"]
    comps = tab["components"].values()
    at_40 = sum(c["leakage_w"] for c in comps) / sum(c["area_m2"] for c in comps)
    ref = tab["to_reference"]
    at_45 = at_40 * ref["leakage"] / ref["area"]
    assert E.logic_leakage_w_per_m2(45) == pytest.approx(at_45)
    # a component leaks like its energy scales; its area shrinks by the area factor
    assert E.logic_leakage_w_per_m2(28) == pytest.approx(
        at_45 * node_energy_scale(28) / node_area_scale(28))
    # the cited components sit between 8 and 14 mW/mm^2 at 40 nm
    assert 8e3 < at_40 < 14e3


def test_sram_leakage_proportional_to_bits_and_node():
    for t in (45, 28):
        w = E.sram_leakage_w(32768, t)
        assert w > 0 and E.sram_leakage_w(0, t) == 0.0
        assert w == pytest.approx(8 * 32768 * E.sram_leakage_w_per_bit(32768, t))
    pts = load_data("leakage.json")["sram"]["points"]
    for p in pts:
        assert E.sram_leakage_w_per_bit(p["capacity_bytes"], 45) == pytest.approx(
            p["leakage_w_per_bit"])
    assert E.sram_leakage_w_per_bit(2**20, 28) == pytest.approx(
        E.sram_leakage_w_per_bit(2**20, 45) * node_energy_scale(28))


def test_static_energy_proportional_to_time_and_power():
    assert E.static_energy_j(2e-3, 1e-6) == pytest.approx(2e-9)
    assert E.static_energy_j(2e-3, 3e-6) == pytest.approx(3 * E.static_energy_j(2e-3, 1e-6))
    assert E.static_energy_j(0.0, 1.0) == 0.0
    with pytest.raises(ParamError):
        E.static_energy_j(1e-3, -1.0)


def _area(base: list[AreaItem], hikv: list[AreaItem]) -> AcceleratorArea:
    return AcceleratorArea(tech_nm=28, baseline=tuple(base), hikv=tuple(hikv))


def test_accelerator_leakage_by_part_and_method():
    logic = AreaItem("lane", 4, 1e-9, 100.0, "test")
    sram = AreaItem("SRAM", 1, 1e-8, 0.0, "test", sram_bytes=4096)
    leak = accelerator_leakage(_area([logic, sram], [AreaItem("sorter", 1, 2e-9, 50.0, "t")]))
    assert leak.baseline_logic_w == pytest.approx(E.logic_leakage_w(4e-9, 28))
    assert leak.baseline_sram_w == pytest.approx(E.sram_leakage_w(4096, 28))
    assert leak.hikv_w == pytest.approx(E.logic_leakage_w(2e-9, 28))
    assert method_leakage_w(leak, Method.FULL) == pytest.approx(leak.baseline_w)
    assert method_leakage_w(leak, "hikv") == pytest.approx(leak.baseline_w + leak.hikv_w)
    e = static_step_energy_j(leak, Method.HIKV, 2e-6)
    assert e == pytest.approx((leak.baseline_w + leak.hikv_w) * 2e-6)
    # zero area, zero leakage
    zero = accelerator_leakage(_area([AreaItem("lane", 0, 1e-9, 1.0, "t")], []))
    assert zero.baseline_w == 0.0 and zero.hikv_w == 0.0
    # a HiKV block not registered: no HiKV number
    missing = AcceleratorArea(tech_nm=28, baseline=(logic,), hikv=(), missing=("scorer",))
    assert math.isnan(accelerator_leakage(missing).hikv_w)
    assert isinstance(leak, LeakagePower) and leak.to_dict()["sources"]["sram"]


def test_report_refuses_static_without_synthesis():
    from hikv.sim.explore.render import markdown, rows_csv
    from hikv.sim.explore.report import build_report

    rep = build_report(get_preset("tiny"), area=False)
    assert all(math.isnan(r.static_energy_j) and math.isnan(r.energy_with_static_j)
               for r in rep.rows)
    text = markdown(rep)
    s = text[text.index("## Static energy"):text.index("## Clocks")]
    assert "Not available" in s and "--no-area" in s and "| method |" not in s
    claim = {c["claim"]: c for c in rep.claims}["attention energy vs full KV, static included"]
    assert claim["origin"] == "unavailable" and math.isnan(claim["ours_value"])
    head, *rows = rows_csv(rep).splitlines()
    assert "static_energy_j" in head
    # what the report does not have is an empty cell, never "nan" (tests/test_flags.py's rule)
    assert rows and not any("nan" in row.lower() for row in rows)


def test_report_shows_dynamic_static_and_both_ratios():
    cells_or_skip()
    from hikv.sim.explore.render import markdown
    from hikv.sim.explore.report import build_report

    rep = build_report(get_preset("tiny"), fetch_cells=False)
    sp = rep.area["static_power"]
    assert sp["baseline_w"] > 0 and sp["hikv_w"] > 0
    full, hikv = rep.row(Method.FULL), rep.row(Method.HIKV)
    for r in rep.rows:
        leak = sp["baseline_w"] + (sp["hikv_w"] if r.method == "hikv" else 0.0)
        assert r.static_energy_j == pytest.approx(leak * r.time_s)
        assert r.energy_with_static_j == pytest.approx(r.energy_j + r.static_energy_j)
        assert r.energy_with_static_reduction_vs_full == pytest.approx(
            1 - r.energy_with_static_j / full.energy_with_static_j)
    assert hikv.energy_with_static_reduction_vs_full < hikv.energy_reduction_vs_full
    text = markdown(rep)
    s = text[text.index("## Static energy"):text.index("## Clocks")]
    assert "energy vs full: dynamic | energy vs full: with static" in s
    assert f"| {hikv.label} | " in s and f"| {full.label} | " in s
    claim = {c["claim"]: c for c in rep.claims}["attention energy vs full KV, static included"]
    assert claim["ours_value"] == pytest.approx(hikv.energy_with_static_reduction_vs_full)


def test_published_table_matches_its_data_file():
    cells_or_skip()
    from hikv.sim.eda.area import accelerator_area, sram_area_m2
    from hikv.sim.eda.published import published_denominator, unit_comparisons
    from hikv.sim.explore.render import markdown
    from hikv.sim.explore.report import build_report

    tab = load_data("published_areas.json")
    units, k40 = tab["units"], tab["node_scaling"]["from_40nm_to_45nm_area"]
    cfg = with_kind(get_preset("tiny"), "merge")   # the sorter's comparators
    rows = {u.unit.split(":")[0]: u for u in unit_comparisons(cfg, accelerator_area(cfg))}
    a28 = node_area_scale(28)
    assert rows["PE array"].published_m2 == pytest.approx(units["fp32_mac"]["area_m2"] * k40 * a28)
    assert units["fp32_mac"]["area_m2"] == pytest.approx(sum(units["fp32_mac"]["parts"].values()))
    assert rows["SRAM"].published_m2 == pytest.approx(units["sram_per_mib"]["area_m2"] * a28)
    assert rows["SRAM"].ours_m2 == pytest.approx(sram_area_m2(2**20, 28))
    w = int(rows["sorter"].unit.split(" of ")[1].split()[0])
    assert rows["sorter"].published_m2 == pytest.approx(
        units["comparator_32b"]["area_m2"] * w / 32 * k40 * a28)
    for u in rows.values():
        assert u.ours_m2 > 0 and u.ratio == pytest.approx(u.ours_m2 / u.published_m2)
    den = published_denominator()
    assert den["configurations"] == tab["denominator"]["configurations"] and den["available"]
    rep = build_report(cfg, fetch_cells=False)
    text = markdown(rep)
    assert "### Per-unit areas against published figures" in text
    assert den["source"] in text
    for u in rep.area["published"]["units"]:
        assert f"| {u['unit']} | {u['ours_m2'] * 1e12:,.1f} | {u['published_m2'] * 1e12:,.1f} |" \
            in text
