"""The area flow's hierarchical mode: replicated lanes synthesised once and counted per copy
(:func:`hikv.sim.eda.area.hierarchical_synthesis`), checked against the flat flow, and the flat
flow's scripts and cache keys free of the mode's parts."""

from __future__ import annotations

import json

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from benchmark_scripts import load_benchmark
from cost_helpers import cells_or_skip

from hikv.hw.verilog import to_verilog
from hikv.presets import get_preset, with_overrides
from hikv.sim.eda import area as A


class _Lane(wiring.Component):
    """A registered ``width`` x 8-bit product plus an accumulator."""

    def __init__(self, width: int = 8):
        self.width = width
        super().__init__({"a": In(width), "b": In(8), "y": Out(width + 8)})

    def elaborate(self, platform):
        m = Module()
        p = Signal(self.width + 8)
        m.d.sync += p.eq(self.a * self.b)
        m.d.sync += self.y.eq(self.y + p)
        return m


class _Lanes(wiring.Component):
    """``n`` lanes sharing the input ``a`` (cross-lane sharing the hierarchical flow loses),
    their outputs summed in the top; ``odd`` makes the last lane 12 bits wide (a second
    distinct submodule)."""

    def __init__(self, n: int = 4, odd: bool = False):
        self.n, self.odd = n, odd
        super().__init__({"a": In(8), "b": In(8 * n), "y": Out(24)})

    def elaborate(self, platform):
        m = Module()
        acc = 0
        for j in range(self.n):
            w = 12 if self.odd and j == self.n - 1 else 8
            lane = m.submodules[f"lane{j}"] = _Lane(w)
            m.d.comb += [lane.a.eq(self.a), lane.b.eq(self.b[8 * j:8 * j + 8])]
            acc = acc + lane.y
        m.d.sync += self.y.eq(acc)
        return m


class _Outer(wiring.Component):
    """Lanes inside a submodule: two levels of hierarchy."""

    def __init__(self):
        super().__init__({"a": In(8), "y": Out(24)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = _Lanes(2)
        m.d.comb += [inner.a.eq(self.a), self.y.eq(inner.y)]
        return m


def test_flat_flow_script_and_key_are_unchanged():
    """The hierarchical mode adds a black-box line and key parts only when it is used: a flat
    synthesis keeps the flat flow's script and cache key (so its cached results stay valid)."""
    cells = cells_or_skip()
    assert A._coarse_script("t") == ("read_verilog -sv design.v\n"
                                     "synth -top t -flatten -run begin:fine\n"
                                     "write_rtlil coarse.il\n"
                                     "select t:$mem_v2\n"
                                     "write_json -selected memories.json\n")
    assert "read_verilog -sv -lib blackboxes.v" in A._coarse_script("t", True)
    v = to_verilog(_Lanes(2), "lanes2")
    from hikv.toolchain import text_hash

    flat = text_hash(v, "lanes2", A.FLOW_VERSION, cells.digest, str(A.DEFAULT_SRAM_MIN_BITS),
                     A._fine_script("lanes2", cells, []), A._coarse_script("lanes2"))
    assert A.synth_key(v, "lanes2") == A.synth_key(v, "lanes2", blackboxes="") == flat
    assert A.synth_key(v, "lanes2", blackboxes="module x(); endmodule\n") != flat
    # a flat result's cache file has the flat flow's fields only
    res = A.SynthResult(top="t", key="k", area_m2=1.0, sequential_area_m2=0.5, cells={"c": 1},
                        nand2_cell_area_m2=1.0)
    assert set(res.to_dict()) == {"top", "key", "area_m2", "sequential_area_m2", "cells",
                                  "nand2_cell_area_m2", "macros", "yosys", "flow_version",
                                  "sram_min_bits"}
    hier = A.SynthResult(**{**res.to_dict(), "macros": (), "parts": (("p", "k2", 3),)})
    assert A.SynthResult.from_dict(json.loads(json.dumps(hier.to_dict()))) == hier


def test_identical_lanes_are_one_part():
    v = to_verilog(_Lanes(3, odd=True), "lanes", flatten=False)
    mods = A.verilog_modules(v)
    assert list(mods) == ["lanes", "lanes.lane0", "lanes.lane1", "lanes.lane2"]
    canon = {n: A.canonical_module(t, "p") for n, t in mods.items() if n != "lanes"}
    assert canon["lanes.lane0"] == canon["lanes.lane1"] != canon["lanes.lane2"]
    assert A._instantiates(mods["lanes"], list(mods)) == list(mods)[1:]
    assert A._instantiates(mods["lanes.lane0"], list(mods)) == []


def test_hierarchical_area_is_top_plus_lanes_and_close_to_flat():
    cells_or_skip()
    v_hier = to_verilog(_Lanes(4, odd=True), "lanes4", flatten=False)
    hier = A.hierarchical_synthesis(v_hier, "lanes4")
    flat = A.synthesize(to_verilog(_Lanes(4, odd=True), "lanes4"), "lanes4")
    # three 8-bit lanes are one part, the 12-bit lane another
    assert sorted(n for _, _, n in hier.parts) == [1, 3]
    mods = A.verilog_modules(v_hier)
    lanes = [t for n, t in mods.items() if n != "lanes4"]
    top = A.synthesize(mods["lanes4"], "lanes4", blackboxes="".join(lanes))
    assert top.blackbox_cells == {f"lanes4.lane{j}": 1 for j in range(4)}
    assert all("lane" not in c for c in top.cells)
    total = top.area_m2
    for p, key, n in hier.parts:
        (part,) = {r.key: r for r in (A.cached_synthesis(A.canonical_module(t, p), p)
                                      for t in lanes) if r is not None and r.key == key}.values()
        total += n * part.area_m2
    assert hier.area_m2 == pytest.approx(total)
    assert 0 < top.area_m2 < hier.area_m2 / 2       # the adder tree and output register
    assert hier.flipflops == flat.flipflops
    assert hier.cell_count == sum(hier.cells.values())
    # the same logic either way; the lanes' shared input is not optimised across them
    assert hier.nand2_equivalents == pytest.approx(flat.nand2_equivalents, rel=0.05)
    assert A.hierarchical_synthesis(v_hier, "lanes4", cached_only=True) == hier


def test_nested_hierarchy_is_refused():
    cells_or_skip()
    v = to_verilog(_Outer(), "outer", flatten=False)
    with pytest.raises(A.SynthError, match="one level of hierarchy"):
        A.hierarchical_synthesis(v, "outer", cached_only=True)


def test_scorer_goes_through_the_hierarchical_flow(monkeypatch):
    """``block_synth`` (what ``hikv report`` and ``hikv sweep --tradeoff`` call) synthesises
    the scoring unit hierarchically, from its unflattened Verilog, one lane submodule per
    lane; ``flat=True`` keeps the flat flow."""
    seen = []
    monkeypatch.setattr(A, "hierarchical_synthesis",
                        lambda v, top, **kw: seen.append((A.verilog_modules(v), top, kw)) or "hier")
    monkeypatch.setattr(A, "cached_synthesis", lambda v, top, **kw: "flat")
    # a result known by its RTL key is returned without either flow (hikv.sim.eda.shipped)
    monkeypatch.setattr(A, "_rtl_lookup", lambda *a, **kw: (None, None))
    cfg = with_overrides(get_preset("tiny"), ["scorer.lanes=2"])
    assert "scorer" in A.HIERARCHICAL_BLOCKS
    assert A.block_synth("scorer", cfg, cached_only=True) == "hier"
    mods, top, kw = seen[0]
    assert top == "hikv_scorer" and kw["cached_only"]
    assert list(mods) == ["hikv_scorer", "hikv_scorer.lane0", "hikv_scorer.lane1"]
    assert A.block_synth("scorer", cfg, cached_only=True, flat=True) == "flat"
    assert A.block_synth("sorter", cfg, cached_only=True) == "flat"


@pytest.mark.slow
@pytest.mark.extended    # CI checks the method on a small design (the test above)
def test_tiny_scorer_hierarchical_area_matches_flat():
    """Method check on a real block (docs/cost_model.md, section 3): the tiny scoring unit
    with 2 lanes, flat against hierarchical. Measured on 4 lanes: 95,148 flat, 95,358
    hierarchical NAND2 eq. (+0.22 %), the same 5,007 flip-flops."""
    cells_or_skip()
    cfg = with_overrides(get_preset("tiny"), ["scorer.lanes=2"])
    flat = A.block_synth("scorer", cfg, flat=True)
    hier = A.block_synth("scorer", cfg)
    assert [n for _, _, n in hier.parts] == [2]
    assert hier.flipflops == flat.flipflops
    diff = hier.nand2_equivalents / flat.nand2_equivalents - 1
    assert -0.01 <= diff <= 0.02, (f"tiny scorer, 2 lanes: hierarchical "
                                   f"{hier.nand2_equivalents:,.0f} against flat "
                                   f"{flat.nand2_equivalents:,.0f} NAND2 eq. ({diff:+.2%})")


@pytest.mark.slow
def test_loader_parts_benchmark_on_tiny():
    """benchmarks/loader_parts.py (where a loader's area is, and the bound on one
    shared address side): every part of the tiny loader synthesised, the shares summing to one,
    the bound ``(I - 1) x (top + agen + coal)`` and the flat synthesis below the parts' sum."""
    cells_or_skip()
    mod = load_benchmark("loader_parts")
    A.block_synth("loader", get_preset("tiny"))          # the flat build, for the comparison
    r = mod.parts("tiny")
    assert set(r["parts"]) == {"top", "agen", "coal", "entries", "inflight", "pack"}
    assert abs(sum(p["share"] for p in r["parts"].values()) - 1) < 1e-9
    shared = sum(r["parts"][k]["area_mm2"] for k in mod.SHARED)
    assert r["one_loader_saving_bound_mm2"] == pytest.approx((r["instances"] - 1) * shared)
    assert r["flat_mm2"] is not None and r["flat_mm2"] <= r["hierarchical_mm2"]
    mod.show(r)
