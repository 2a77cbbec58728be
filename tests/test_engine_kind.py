"""``SorterParams.kind`` is priced wherever the sorter is (hikv.sim.cost.engines): Stage I
cycles and energy on the radix-select engine, its clock, its area in HiKV's units, the Stage II
block beside it for a policy with a Stage II rule (a baseline's Stage II jobs on the merge
sorter), the report's engine table and the
sweep's and trade-off's engine axis. Synthesis is replaced by fixed areas where a test needs
areas of `default` (the real numbers: docs/topk.md)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from hikv.hw.sorter_timing import SorterTiming
from hikv.hw.stage2_timing import Stage2Timing, stage2_block_cycles, stage2_radix_steps
from hikv.hw.topk_timing import TopKTiming
from hikv.params import Method, MethodSpec, ParamError
from hikv.presets import get_preset
from hikv.scripts.cli import main
from hikv.sim.cost import energy as E
from hikv.sim.cost import engines as EN
from hikv.sim.cost.attention_model import (
    Overrides,
    attention_cost,
    stage2_step_energy_j,
    step_work,
)
from hikv.sim.cost.blocks import block_cost
from hikv.sim.cost.clocks import assumed_clocks


def _hikv(cfg):
    return MethodSpec.for_hikv(cfg.policy)


def test_sort_blocks_follow_the_kind_and_the_stage2_rule():
    default, tiny = get_preset("default"), get_preset("tiny")
    assert not EN.hikv_stage2(default) and EN.hikv_stage2(tiny)   # tiny: a STATIC V rule
    assert EN.sort_blocks(default) == ("sorter",)
    assert EN.sort_blocks(EN.with_kind(default, "radix")) == ("topk",)
    assert EN.sort_blocks(EN.with_kind(tiny, "radix")) == ("topk", "stage2")
    assert EN.sort_blocks(default, "radix") == ("topk",)
    assert EN.area_blocks(EN.with_kind(default, "radix")) == ("topk", "loader", "scorer")
    assert "both built" in EN.describe(EN.with_kind(tiny, "radix"))
    with pytest.raises(ParamError, match="sorter.kind = 'heap' is not one of"):
        EN.check_kinds(["merge", "heap"])


def test_radix_stage1_cycles_and_energy_are_the_engines():
    """Stage I jobs on the radix engine take TopKTiming's cycles and its comparisons' energy;
    with kind ignored they would equal the merge sorter's."""
    cfg = EN.with_kind(get_preset("default"), "radix")
    merge = get_preset("default")
    jobs = step_work(_hikv(cfg), cfg).sorts
    assert jobs and all(j.mode == "stage1" for j in jobs)
    t = TopKTiming.from_params(cfg.sorter)
    H = cfg.model.kv_heads
    want_cyc = want_cmp = want_dig = 0.0
    for j in jobs:
        per = float(j.per_step / H if j.per_layer else j.per_step)
        n, k = int(j.n), int(j.k)
        want_cyc += t.stage1_cycles(n, k) * per
        want_cmp += t.stage1_compares(n, k) * per
        want_dig += t.stage1_digit_compares(n, k) * per
    c = attention_cost(_hikv(cfg), cfg)              # every block at accel.clock_hz
    m = attention_cost(_hikv(merge), merge)
    assert float(c.sort_cycles) == pytest.approx(want_cyc)
    assert float(c.sort_cycles) != pytest.approx(float(m.sort_cycles))
    units = cfg.model.layers * H
    want_e = (E.sorter_energy_j(units * want_cmp, cfg.sorter.key_width, cfg.accel.tech_nm)
              + E.sorter_energy_j(units * want_dig, t.digit_bits, cfg.accel.tech_nm))
    assert float(c.energy_parts_j["sorter"]) == pytest.approx(float(want_e))
    st = SorterTiming.from_params(merge.sorter)
    assert float(m.sort_cycles) == pytest.approx(sum(
        st.stage1_cycles(int(j.n), int(j.k)) * float(j.per_step / H if j.per_layer
                                                      else j.per_step) for j in jobs))


def test_radix_engine_runs_at_its_own_clock():
    cfg = EN.with_kind(get_preset("default"), "radix")
    base = assumed_clocks(cfg)
    assert "topk" in base.blocks and base.blocks["topk"].used
    assert not base.blocks["sorter"].used                     # no Stage II rule on default
    slow = dataclasses.replace(base, blocks={**base.blocks, "topk": dataclasses.replace(
        base.blocks["topk"], hz=5e8)})
    a = attention_cost(_hikv(cfg), cfg, clocks=base)
    b = attention_cost(_hikv(cfg), cfg, clocks=slow)
    assert float(b.sort_cycles) == pytest.approx(2 * float(a.sort_cycles))
    assert block_cost("topk", cfg, clocks=slow).clock_hz == 5e8
    assert block_cost("topk", cfg).used and not block_cost("sorter", cfg).used
    assert not block_cost("topk", get_preset("default")).used
    # a hand-set sorter clock is the Stage I engine's
    user = cfg.replace(accel=dataclasses.replace(cfg.accel, sorter_clock_hz=4e8,
                                                 clock_source="test"))
    assert assumed_clocks(user).blocks["topk"].hz == 4e8


def test_engine_clocks_relabel_the_sort_blocks():
    from hikv.sim.cost.clocks import engine_clocks

    cfg = get_preset("default")
    base = assumed_clocks(cfg)
    assert "topk" not in base.blocks and base.blocks["sorter"].used
    radix = engine_clocks(base, cfg, "radix")
    assert radix.blocks["topk"].used and not radix.blocks["sorter"].used
    back = engine_clocks(radix, cfg, "merge")
    assert back.blocks["sorter"].used and not back.blocks["topk"].used
    tiny = get_preset("tiny")
    both = engine_clocks(assumed_clocks(tiny), tiny, "radix")
    assert both.blocks["topk"].used and both.blocks["stage2"].used
    assert not both.blocks["sorter"].used
    back = engine_clocks(both, tiny, "merge")
    assert back.blocks["sorter"].used and not back.blocks["stage2"].used


def test_hikv_stage2_jobs_run_on_the_stage2_block():
    """tiny's HiKV has a STATIC V rule: with kind radix its Stage I runs on the top-k engine,
    its Stage II on the Stage II block (Stage2Timing's cycles, its radix steps' energy), the
    cycles adding up; the Stage II block's clock scales its share alone."""
    tiny = EN.with_kind(get_preset("tiny"), "merge")
    cfg = EN.with_kind(tiny, "radix")
    jobs = step_work(_hikv(cfg), cfg).sorts
    assert {j.mode for j in jobs} == {"stage1", "stage2"}
    base = assumed_clocks(cfg)
    assert base.blocks["stage2"].used and not base.blocks["sorter"].used
    c = attention_cost(_hikv(cfg), cfg, clocks=base)
    m = attention_cost(_hikv(tiny), tiny)
    H = cfg.model.kv_heads
    t = TopKTiming.from_params(cfg.sorter)
    want1 = want2 = steps = cmp = dig = 0.0
    for j in jobs:
        per = float(j.per_step / H if j.per_layer else j.per_step)
        if j.mode == "stage1":
            want1 += t.stage1_cycles(int(j.n), int(j.k)) * per
            cmp += t.stage1_compares(int(j.n), int(j.k)) * per
            dig += t.stage1_digit_compares(int(j.n), int(j.k)) * per
        else:
            assert int(j.d) == cfg.layout.head_dim
            want2 += Stage2Timing.from_params(cfg.sorter, int(j.d)).cycles(int(j.count)) * per
            steps += stage2_radix_steps(cfg.sorter, d=int(j.d), count=int(j.count)) * per
    assert want2 > 0
    assert float(c.sort_cycles) == pytest.approx(want1 + want2)
    assert float(c.sort_cycles) != pytest.approx(float(m.sort_cycles))
    tech, units = cfg.accel.tech_nm, cfg.model.layers * H
    want_e = (E.sorter_energy_j(units * cmp, cfg.sorter.key_width, tech)
              + E.sorter_energy_j(units * dig, t.digit_bits, tech)
              + units * steps * stage2_step_energy_j(cfg.layout.head_dim, tech))
    assert float(c.energy_parts_j["sorter"]) == pytest.approx(float(want_e))
    slow = dataclasses.replace(base, blocks={**base.blocks, "stage2": dataclasses.replace(
        base.blocks["stage2"], hz=base.blocks["stage2"].hz / 2)})
    s = attention_cost(_hikv(cfg), cfg, clocks=slow)
    assert float(s.sort_cycles) == pytest.approx(want1 + 2 * want2)
    bc = block_cost("stage2", cfg, clocks=slow)
    assert bc.used and bc.clock_hz == base.blocks["stage2"].hz / 2
    assert bc.cycles_fn(d=16, count=3) == stage2_block_cycles(cfg.sorter, d=16, count=3)
    assert not block_cost("stage2", tiny).used


def test_baseline_stage2_jobs_stay_on_the_merge_sorter():
    """SparQ's top-r channels run on the merge sorter whichever engine HiKV has."""
    tiny = get_preset("tiny")
    cfg = EN.with_kind(tiny, "radix")
    spec = MethodSpec(Method.SPARQ)
    jobs = step_work(spec, cfg).sorts
    s2 = [j for j in jobs if j.mode == "stage2"]
    assert s2
    st = SorterTiming.from_params(cfg.sorter)
    c = attention_cost(spec, cfg)
    m = attention_cost(spec, tiny)
    H = cfg.model.kv_heads
    part = sum(st.stage2_cycles(int(j.count), int(j.d), min(int(j.k), int(j.d)))
               * float(j.per_step / H if j.per_layer else j.per_step) for j in s2)
    # the Stage II share is the merge sorter's on both; only Stage I moved to the engine
    assert float(c.sort_cycles) >= part > 0
    from hikv.sim.cost.timing import sorter_for_job

    s1 = sum(TopKTiming.from_params(sorter_for_job(cfg.sorter, n=int(j.n), k=int(j.k)))
             .stage1_cycles(int(j.n), int(j.k))
             * float(j.per_step / H if j.per_layer else j.per_step)
             for j in jobs if j.mode == "stage1" and int(j.n) > 0 and int(j.k) > 0)
    assert float(c.sort_cycles) == pytest.approx(part + s1)
    assert float(m.sort_cycles) >= part


def test_kind_override_equals_the_configured_kind():
    cfg = get_preset("default")
    both = attention_cost(_hikv(cfg), cfg, Overrides(sorter_kind=np.array(["merge", "radix"])))
    for i, k in enumerate(("merge", "radix")):
        c = EN.with_kind(cfg, k)
        one = attention_cost(_hikv(c), c)
        assert both.sort_cycles[i] == pytest.approx(float(one.sort_cycles))
        assert both.energy_j[i] == pytest.approx(float(one.energy_j))
    with pytest.raises(ParamError, match="sorter_kind"):
        attention_cost(_hikv(cfg), cfg, Overrides(sorter_kind="heap"))


def _fake_area(monkeypatch):
    """accelerator_area with 1 mm^2 of baseline and fixed block areas (no synthesis)."""
    import hikv.sim.eda.area as A

    unit = {"sorter": 0.3e-6, "topk": 0.05e-6, "stage2": 0.07e-6, "loader": 0.02e-6,
            "scorer": 0.4e-6}

    def fake(cfg, *, blocks=None, loader_clock_hz=None, **kw):
        blocks = A.hikv_blocks(cfg) if blocks is None else blocks
        hikv = tuple(A.AreaItem(b, 1, unit[b], 1.0, "fake") for b in blocks)
        if set(blocks) & set(EN.SORT_BLOCKS):
            hikv += tuple(A.pipeline_buffer_items(cfg))
        base = (A.AreaItem("baseline", 1, 1e-6, 1.0, "fake"),)
        return A.AcceleratorArea(tech_nm=cfg.accel.tech_nm, baseline=base, hikv=hikv)

    monkeypatch.setattr(A, "accelerator_area", fake)
    return unit


def test_engine_area_counts_the_engine_and_the_buffers(monkeypatch):
    import hikv.sim.eda.area as A

    unit = _fake_area(monkeypatch)
    default = get_preset("default")
    buf = sum(i.area_m2 for i in A.pipeline_buffer_items(default))
    merge = EN.engine_area(default)
    radix = EN.engine_area(default, "radix")
    names = [i.name for i in radix.hikv]
    assert "topk" in names and "sorter" not in names
    assert radix.hikv_m2 == pytest.approx(unit["topk"] + unit["loader"] + unit["scorer"] + buf)
    assert merge.hikv_m2 - radix.hikv_m2 == pytest.approx(unit["sorter"] - unit["topk"])
    both = EN.engine_area(get_preset("tiny"), "radix")
    assert {"topk", "stage2"} <= {i.name for i in both.hikv}
    assert "sorter" not in {i.name for i in both.hikv}
    sh = EN.engine_shares(default)
    assert sh["merge"]["in_use"] and not sh["radix"]["in_use"]
    assert sh["radix"]["share_of_system"] == pytest.approx(radix.share)
    assert sh["radix"]["sort_m2"] == pytest.approx(unit["topk"])


def test_report_names_the_engine_and_shares_with_each(monkeypatch, tmp_path):
    """`hikv report --set sorter.kind=radix`: the header names the engine, the area holds the
    top-k engine, the engine table gives both kinds' shares, report.json and report.csv carry
    them."""
    import hikv.sim.explore.report as R

    _fake_area(monkeypatch)
    monkeypatch.setattr(R, "accelerator_clocks", lambda cfg, **kw: assumed_clocks(cfg))
    monkeypatch.setattr("hikv.sim.cost.static_power.accelerator_leakage",
                        lambda ar: SimpleNamespace(to_dict=lambda: {}))
    monkeypatch.setattr("hikv.sim.eda.published.unit_comparisons", lambda cfg, ar: [])
    out = tmp_path / "r"
    assert main(["report", "--preset", "default", "--set", "sorter.kind=radix", "--no-serving",
                 "--no-plots", "--quiet", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "Stage I engine: sorter.kind = radix" in md
    assert "### HiKV with each Stage I engine" in md and "| radix (in use) | topk |" in md
    rep = json.loads((out / "report.json").read_text())
    assert rep["engine"]["kind"] == "radix" and rep["engine"]["sort_blocks"] == ["topk"]
    assert [i["name"] for i in rep["area"]["items"] if i["part"] == "hikv"][0] == "topk"
    kinds = rep["area"]["engines"]["kinds"]
    assert kinds["radix"]["in_use"] and kinds["merge"]["sort_blocks"] == ["sorter"]
    assert rep["area"]["share_of_system"] == pytest.approx(kinds["radix"]["share_of_system"])
    assert kinds["merge"]["share_of_system"] > kinds["radix"]["share_of_system"]
    assert kinds["radix"]["sort_cycles_per_head"] != kinds["merge"]["sort_cycles_per_head"]
    csv_text = (out / "report.csv").read_text().splitlines()
    head = csv_text[0].split(",")
    row = dict(zip(head, csv_text[1].split(","), strict=False))
    assert row["sorter_kind"] == "radix" and row["alt_sorter_kind"] == "merge"
    assert float(row["alt_share_of_system"]) == pytest.approx(
        kinds["merge"]["share_of_system"])


def test_favoured_kind_rule():
    """The faster step wins; within TIME_TIE of each other the smaller HiKV units win."""
    k = {"merge": {"time_s": 1.0, "hikv_m2": 2.0}, "radix": {"time_s": 1.2, "hikv_m2": 1.0}}
    assert EN.favoured_kind(k)[0] == "merge" and "16.7 % shorter" in EN.favoured_kind(k)[1]
    k["radix"]["time_s"] = 1.0 + 0.9 * EN.TIME_TIE
    assert EN.favoured_kind(k)[0] == "radix"
    assert "same HiKV step time" in EN.favoured_kind(k)[1]
    k["radix"]["hikv_m2"] = 3.0
    assert EN.favoured_kind(k)[0] == "merge"
    with pytest.raises(ParamError, match="two engines"):
        EN.favoured_kind({"merge": k["merge"]})


@pytest.mark.parametrize("preset", ["tiny", "default", "paper"])
def test_each_preset_uses_the_engine_the_numbers_favour(preset):
    """Each preset's sorter.kind is the one its report favours (the shipped areas and clocks:
    no synthesis), and the report says so next to the alternative."""
    from hikv.sim.explore.render import markdown
    from hikv.sim.explore.report import build_report

    rep = build_report(get_preset(preset), fetch_cells=False)
    eng = rep.area["engines"]
    assert eng["available"], eng
    assert eng["favoured"] == get_preset(preset).sorter.kind.value == eng["in_use"]
    assert f"The numbers favour **{eng['favoured']}**" in markdown(rep)
    assert "this configuration uses it" in markdown(rep)


def test_tradeoff_engine_axis(monkeypatch, tmp_path):
    """The trade-off curve over both engines: the radix rows price the top-k engine's area
    and cycles, the summary gives the smallest share at >= 90 % of the roofline per engine."""
    import hikv.sim.eda.area as A
    from hikv.sim.explore import tradeoff as T

    ge = {"sorter": 200_000, "topk": 20_000, "scorer": 100_000, "loader": 30_000}

    def cached(block, cfg):
        return SimpleNamespace(nand2_equivalents=ge[block], macro_bytes=0)

    monkeypatch.setattr(T, "cached_synth", cached)
    monkeypatch.setattr(A, "accelerator_area",
                        lambda cfg, blocks=(): SimpleNamespace(baseline_m2=1e-6))
    cfg = get_preset("default")
    r = T.tradeoff(cfg, sorter_lanes=[32], scorer_lanes=[32], loaders=[1, 4],
                   kinds=["merge", "radix"])
    assert r.kinds == ["merge", "radix"] and r.share.shape == (4,)
    tech = cfg.accel.tech_nm
    d = float(A.logic_area_m2(ge["sorter"] - ge["topk"], tech))
    for n in (1, 4):
        m = int(np.flatnonzero((r.sorter_kind == "merge") & (r.loaders == n))[0])
        x = int(np.flatnonzero((r.sorter_kind == "radix") & (r.loaders == n))[0])
        assert r.area_hikv_m2[m] - r.area_hikv_m2[x] == pytest.approx(d)
    T.write_tradeoff(r, tmp_path)
    head = (tmp_path / "tradeoff.csv").read_text().splitlines()[0]
    assert head.startswith("sorter_kind,sorter_lanes,")
    text = " ".join(T.summary(r))
    assert "with the merge sorter" in text and "with the top-k engine" in text
    with pytest.raises(ParamError, match="sorter kind"):
        T.tradeoff(cfg, sorter_lanes=[32], scorer_lanes=[32], loaders=[1], kinds=["heap"])


def test_tradeoff_prices_the_stage2_block_beside_the_radix_engine(monkeypatch):
    """``tiny`` has a Stage II rule: its radix rows add the Stage II block's area (sized with
    the sorter's lanes) to the engine's."""
    import hikv.sim.eda.area as A
    from hikv.sim.explore import tradeoff as T

    ge = {"sorter": 200_000, "topk": 20_000, "stage2": 7_000, "scorer": 100_000,
          "loader": 30_000}
    seen: list[tuple[str, int]] = []

    def cached(block, cfg):
        seen.append((block, cfg.sorter.lanes))
        return SimpleNamespace(nand2_equivalents=ge[block], macro_bytes=0)

    monkeypatch.setattr(T, "cached_synth", cached)
    monkeypatch.setattr(A, "accelerator_area",
                        lambda cfg, blocks=(): SimpleNamespace(baseline_m2=1e-6))
    cfg = get_preset("tiny")
    r = T.tradeoff(cfg, sorter_lanes=[4], scorer_lanes=[4], loaders=[1],
                   kinds=["merge", "radix"])
    assert ("stage2", 4) in seen
    m = int(np.flatnonzero(r.sorter_kind == "merge")[0])
    x = int(np.flatnonzero(r.sorter_kind == "radix")[0])
    d = float(A.logic_area_m2(ge["sorter"] - ge["topk"] - ge["stage2"], cfg.accel.tech_nm))
    assert r.area_hikv_m2[m] - r.area_hikv_m2[x] == pytest.approx(d)


def test_cli_sorter_kind_axis(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sweep", "--preset", "tiny", "--context", "32,64", "--sorter-kind",
                 "merge,radix", "--no-area", "--no-plots", "--out", str(out)]) == 0
    import csv

    rows = list(csv.DictReader((out / "sweep.csv").open()))
    hk = [r for r in rows if r["method"].startswith("hikv")]
    assert {r["sorter.kind"] for r in hk} == {"merge", "radix"}
    by = {(r["context"], r["sorter.kind"]): float(r["sort_cycles_per_head"]) for r in hk}
    assert by[("64", "merge")] != by[("64", "radix")]
    assert main(["sweep", "--preset", "tiny", "--sorter-kind", "heap", "--no-area",
                 "--out", str(tmp_path / "t")]) == 2
    assert "--sorter-kind value 'heap'" in capsys.readouterr().err
