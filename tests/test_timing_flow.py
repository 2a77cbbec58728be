"""The timing flow (hikv.sim.eda.sta, hikv.sim.eda.fpga, `hikv timing`): the STA on hand-built
netlists, the node scaling, the pin-light wrapper, clear errors, and the ASIC timing of the
`tiny` sorter, loader and scoring unit against tests/golden/timing_tiny.json (a change that
lengthens a critical path beyond the tolerance fails, naming the path).

Refresh the golden file after an intended change (then review its diff):

    HIKV_UPDATE_GOLDEN=1 pytest tests/test_timing_flow.py
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from cost_helpers import cells_or_skip

from hikv.params import ParamError
from hikv.sim.eda import sta

GOLDEN = Path(__file__).parent / "golden" / "timing_tiny.json"
UPDATE = os.environ.get("HIKV_UPDATE_GOLDEN") == "1"
#: a critical path may grow by this fraction before the golden test fails
TOLERANCE = 0.05
LIB = "sky130_fd_sc_hd__"


def _netlist(cells: dict, ports: dict, names: dict) -> dict:
    return {"modules": {"t": {"ports": ports, "cells": cells,
                              "netnames": {n: {"bits": b, "hide_name": 0}
                                           for n, b in names.items()}}}}


def _ff(d: int, q: int) -> dict:
    return {"type": LIB + "dfxtp_1", "connections": {"CLK": [2], "D": [d], "Q": [q]}}


def _inv(a: int, y: int) -> dict:
    return {"type": LIB + "inv_1", "connections": {"A": [a], "Y": [y]}}


def test_sta_chain_and_fanout():
    """r0 -> inv -> inv -> r1 and r0 -> nand2 (fan-out 3) -> r2: arrival times add up from the
    table, fan-out slows a gate, names come from the netlist."""
    d = sta.load_delays()
    cells = {"f0": _ff(20, 10), "f1": _ff(12, 30), "i1": _inv(10, 11), "i2": _inv(11, 12),
             "n": {"type": LIB + "nand2_1", "connections": {"A": [10], "B": [3], "Y": [13]}},
             "f2": _ff(13, 31), "f3": _ff(13, 32), "f4": _ff(13, 33), "f5": _ff(3, 20)}
    ports = {"clk": {"direction": "input", "bits": [2]},
             "x": {"direction": "input", "bits": [3]}}
    net = _netlist(cells, ports, {"r0": [10], "r1": [30], "mid": [11], "r2": [31]})
    a = sta.analyse(net, "t", d)
    ck = d.clk_to_q[0] + d.clk_to_q[1] * (2 - 1)      # r0 drives inv and nand2
    inv = d.delay(LIB + "inv_1", "A", 1)
    chain = ck + 2 * inv + d.setup_ps
    nand = ck + d.delay(LIB + "nand2_1", "A", 3) + d.setup_ps
    assert d.delay(LIB + "nand2_1", "A", 3) > d.delay(LIB + "nand2_1", "A", 1)
    crit = a["critical"]
    assert crit.delay_ps == pytest.approx(max(chain, nand), abs=0.01)
    assert crit.start == "r0" and crit.start_kind == "flip-flop"
    paths = {p.end: p for p in a["top_paths"]}
    assert paths["r1"].delay_ps == pytest.approx(chain, abs=0.01)
    assert [s.cell for s in paths["r1"].steps] == ["inv_1", "inv_1"]
    assert "mid" in paths["r1"].named
    assert a["flipflops"] == 6 and a["reg_to_reg"] is not None


def test_sta_rejects_loops_and_unknown_cells():
    loop = _netlist({"a": _inv(5, 6), "b": _inv(6, 5), "f": _ff(5, 7)},
                    {"clk": {"direction": "input", "bits": [2]}}, {})
    with pytest.raises(ParamError, match="combinational loop"):
        sta.analyse(loop, "t")
    odd = _netlist({"a": {"type": "$_AND_", "connections": {"A": [3], "B": [3], "Y": [4]}}},
                   {"x": {"direction": "input", "bits": [3]}}, {})
    with pytest.raises(ParamError, match="no delay model"):
        sta.analyse(odd, "t")


def test_random_chains_are_additive():
    seed = 12
    rng = random.Random(seed)
    d = sta.load_delays()
    kinds = [c for c in d.cells if c.endswith(("inv_1", "buf_1"))]
    for _ in range(5):
        n = rng.randint(1, 12)
        cells = {"src": _ff(100, 10)}
        total = d.clk_to_q[0]
        for i in range(n):
            typ = rng.choice(kinds)
            pin, out = "A", ("Y" if typ.endswith("inv_1") else "X")
            cells[f"c{i}"] = {"type": typ, "connections": {pin: [10 + i], out: [11 + i]}}
            total += d.delay(typ, pin, 1)
        cells["dst"] = _ff(10 + n, 100)
        a = sta.analyse(_netlist(cells, {"clk": {"direction": "input", "bits": [2]}}, {}), "t")
        assert a["critical"].delay_ps == pytest.approx(total + d.setup_ps, abs=0.05), \
            f"seed={seed} n={n}"
        assert a["critical"].levels == n, f"seed={seed}"


def test_delay_table_is_characterised():
    d = sta.load_delays()
    spec = json.loads((Path(sta.__file__).parents[1] / "data" / "sky130_hd_cells.json").read_text())
    for name, c in spec["combinational"].items():
        for pin in c["inputs"]:
            d0, slope = d.cells[LIB + name][pin]
            assert 5 < d0 < 1000 and 0 < slope < 200, f"{name}.{pin}: {d0}, {slope}"
    assert 30 < d.fo4_ps < 200
    assert d.corner == {"process": "tt", "temperature_c": 25, "vdd_v": 1.8}
    assert "ngspice" in d.source


def test_node_delay_scale():
    assert sta.node_delay_scale(130) == pytest.approx(1.0)
    f45, f28, f16, f7 = (sta.node_delay_scale(n) for n in (45, 28, 16, 7))
    assert 1 > f45 > f28 > f16 > f7 > 0
    f32, f20 = sta.node_delay_scale(32), sta.node_delay_scale(20)
    assert min(f32, f20) <= f28 <= max(f32, f20)
    with pytest.raises(ParamError, match="tech_nm = 5 is out of range"):
        sta.node_delay_scale(5)


# --------------------------------------------------------------------------- FPGA helpers
_V = """module blk(clk, rst, a, b, y, z);
  input clk;
  wire clk;
  input rst;
  input [7:0] a;
  wire [7:0] a;
  input b;
  output [3:0] y;
  output z;
  reg z;
endmodule
"""


def test_ports_and_pin_light_wrapper():
    from hikv.sim.eda.fpga import WRAPPER_TOP, pin_light_wrapper, ports_of

    assert ports_of(_V, "blk") == [("input", "clk", 1), ("input", "rst", 1),
                                    ("input", "a", 8), ("input", "b", 1), ("output", "y", 4),
                                    ("output", "z", 1)]
    w = pin_light_wrapper(_V, "blk")
    assert f"module {WRAPPER_TOP}(input clk, input rst, input sin, input cap, output sout);" in w
    assert ".a(ireg[7:0])" in w and ".b(ireg[8:8])" in w
    assert ".y(o[3:0])" in w and ".z(o[4:4])" in w
    with pytest.raises(ParamError, match="module 'nope' not found"):
        ports_of(_V, "nope")


def test_fpga_tool_missing_is_a_clear_error(monkeypatch, tmp_path):
    from hikv import toolchain
    from hikv.sim.eda import fpga

    monkeypatch.setattr(toolchain.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(fpga.FpgaToolMissing, match=r"pip install -e \"\.\[timing\]\""):
        fpga.fpga_timing(_V, "blk")


def test_fpga_flow_options_reach_the_tools_and_the_result(monkeypatch, tmp_path):
    """The flow's Yosys and nextpnr options are passed to the tools, recorded in the result and
    part of the cache key (the tools are replaced by fakes: no place and route here)."""
    from hikv.sim.eda import area, fpga

    monkeypatch.setenv("HIKV_CACHE", str(tmp_path))
    monkeypatch.setattr(fpga, "nextpnr_command", lambda: ["fake-nextpnr"])
    monkeypatch.setattr(area, "yosys_command", lambda: ["fake-yosys"])
    seen: list[tuple[list[str], str]] = []
    report = {"fmax": {"$glbnet$clk": {"achieved": 123.4, "constraint": 100.0}},
              "utilization": {"TRELLIS_COMB": {"used": 7, "available": 83640}},
              "critical_paths": []}

    def fake_run(cmd, cwd, timeout_s, what, log):
        seen.append((list(cmd), (cwd / "synth.ys").read_text()))
        if cmd[0] == "fake-yosys":
            (cwd / "synth.json").write_text("{}")
        if cmd[0] == "fake-nextpnr":
            (cwd / "report.json").write_text(json.dumps(report))

    class _Ver:
        stdout, stderr = "fake nextpnr 0.0", ""

    monkeypatch.setattr(fpga, "_run", fake_run)
    monkeypatch.setattr(fpga.subprocess, "run", lambda *a, **k: _Ver())
    r = fpga.fpga_timing(_V, "blk", seed=3)
    assert r.flow == {"synth_ecp5": list(fpga.SYNTH_OPTIONS), "nextpnr": list(fpga.PNR_OPTIONS)}
    assert r.fmax_mhz == 123.4 and r.extra["seed"] == 3
    (ycmd, script), (pcmd, _) = seen
    assert ycmd[0] == "fake-yosys" and pcmd[0] == "fake-nextpnr"
    synth_line = next(ln for ln in script.splitlines() if ln.startswith("synth_ecp5"))
    assert synth_line.split()[1:] == ["-top", fpga.WRAPPER_TOP, "-json", "synth.json",
                                      *fpga.SYNTH_OPTIONS]
    assert pcmd[pcmd.index("--seed") + 1] == "3"
    assert pcmd[-len(fpga.PNR_OPTIONS):] == list(fpga.PNR_OPTIONS) or not fpga.PNR_OPTIONS
    # other options: passed through, recorded, and a different cache entry
    seen.clear()
    r2 = fpga.fpga_timing(_V, "blk", seed=3, synth_options=("-nowidelut",),
                          pnr_options=("--placer", "sa"))
    assert r2.key != r.key and len(seen) == 2
    assert r2.flow == {"synth_ecp5": ["-nowidelut"], "nextpnr": ["--placer", "sa"]}
    assert seen[0][1].rstrip().endswith("-nowidelut") and seen[1][0][-2:] == ["--placer", "sa"]
    # a cached result comes back with its options
    seen.clear()
    assert fpga.fpga_timing(_V, "blk", seed=3) == r and not seen


def test_cli_rejects_bad_arguments(capsys):
    from hikv.scripts.cli import main

    assert main(["timing", "--block", "nope", "--preset", "tiny"]) == 2
    assert "unknown block 'nope'" in capsys.readouterr().err
    assert main(["timing", "--block", "sorter", "--preset", "tiny", "--paths", "0"]) == 2
    assert "--paths = 0 is out of range" in capsys.readouterr().err


# --------------------------------------------------------------------------- golden (CI)
def _now(block: str) -> dict:
    from hikv.presets import get_preset

    r = sta.block_sta(block, get_preset("tiny"))
    c = r.critical
    return {"critical_ps": c.delay_ps, "levels": c.levels, "start": c.start, "end": c.end,
            "fo4": round(r.fo4_depth, 2), "node_clock_mhz": round(r.node_clock_hz / 1e6, 1),
            "tech_nm": r.tech_nm}


@pytest.mark.slow
@pytest.mark.parametrize("block", ["sorter", "loader", "scorer"])
def test_tiny_critical_path_against_golden(block):
    cells_or_skip()
    now = _now(block)
    gold = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if UPDATE:
        gold.setdefault("blocks", {})[block] = now
        gold["_refresh"] = "HIKV_UPDATE_GOLDEN=1 pytest tests/test_timing_flow.py"
        gold["tolerance"] = TOLERANCE
        gold["source"] = ("hikv.sim.eda.sta.block_sta(block, get_preset('tiny')): sky130_fd_sc_hd "
                          "STA (sim/data/sky130_delays.json), no wires")
        GOLDEN.write_text(json.dumps(gold, indent=1, sort_keys=True) + "\n")
    g = gold.get("blocks", {}).get(block)
    assert g is not None, f"no golden for {block}: run HIKV_UPDATE_GOLDEN=1 pytest {__file__}"
    limit = g["critical_ps"] * (1 + TOLERANCE)
    assert now["critical_ps"] <= limit, (
        f"{block} @ tiny: critical path {now['critical_ps']:.0f} ps > golden "
        f"{g['critical_ps']:.0f} ps + {TOLERANCE:.0%}: {now['start']} -> {now['end']} "
        f"({now['levels']} cells; golden path {g['start']} -> {g['end']}, {g['levels']} cells)")


@pytest.mark.slow
def test_block_clock_for_the_cost_model():
    cells_or_skip()
    from hikv.presets import get_preset

    cfg = get_preset("tiny")
    clk = sta.block_clock("sorter", cfg)
    r = sta.block_sta("sorter", cfg)
    assert clk["clock_hz"] == pytest.approx(1 / (r.critical_ps * 1e-12 * r.node_scale))
    assert clk["tech_nm"] == cfg.accel.tech_nm == 28
    assert "Stillmaker-Baas" in clk["source"] and "ngspice" in clk["source"]
    assert r.critical.start in clk["critical_path"]
