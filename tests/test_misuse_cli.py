"""Misuse suite, explicit cases: every expected failure of the command line is one line on
stderr naming the problem and what is allowed, exit 2, no traceback; Ctrl-C is exit 130; a
closed pipe is no traceback; numeric inputs are validated (finite, in range, integers not
truncated); bounds and non-steady results are labelled; captures load without running code."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from signal_helpers import sigint_default

from hikv.scripts.cli import main

HIKV = [sys.executable, "-m", "hikv.scripts.cli"]


def _err_line(capsys) -> str:
    """The command's stderr: one error line (after argparse's usage lines), no traceback."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if not x.startswith(("usage:", " "))]
    assert len(lines) == 1, err
    return lines[0]


def _trace(path: Path, rows: list[str]) -> Path:
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(r + "\n" for r in rows))
    return path


def _rows(n: int, gap_s: float = 0.5) -> list[str]:
    out = []
    for i in range(n):
        t = i * gap_s
        out.append(f"2023-11-16 18:{15 + int(t) // 60:02d}:{int(t) % 60:02d}."
                   f"{int(1e7 * (t % 1)):07d},{100 + 13 * (i % 5)},{3 + (i % 4)}")
    return out


# --------------------------------------------------------------------------- sweep axes
@pytest.mark.parametrize("flag, value, expect", [
    ("--budget", "0", "--budget value 0: HiKVPolicy.budget = 0 is out of range"),
    ("--budget", "-5", "--budget value -5: HiKVPolicy.budget = -5 is out of range"),
    ("--head-dim", "7", "--head-dim value 7: KVLayout.head_dim = 7 is out of range"),
    ("--head-dim", "8.9", "'8.9' is not an integer"),
    ("--budget", "", "is not a comma-separated list"),
    ("--context", "64,,32", "is not a comma-separated list"),
    ("--pe-lanes", "0", "pe_lanes = 0 is out of range"),
    ("--bandwidth", "0", "mem_bandwidth_bytes_per_s = 0.0 is out of range"),
    ("--bandwidth", "inf", "'inf' is not a finite number"),
    ("--bandwidth", "nan", "'nan' is not a finite number"),
    ("--node", "3", "tech_nm = 3 is not one of"),
    ("--memory", "sram", "memory = 'sram' is not one of"),
])
def test_sweep_axes_are_validated(tmp_path, capsys, flag, value, expect):
    rc = main(["sweep", "--preset", "tiny", f"{flag}={value}", "--no-area", "--no-plots",
               "--out", str(tmp_path / "o")])
    assert rc == 2, (flag, value)
    assert expect in _err_line(capsys)
    assert not (tmp_path / "o" / "sweep.csv").exists()


def test_sweep_integer_axis_accepts_exact_integers(tmp_path):
    out = tmp_path / "o"
    assert main(["sweep", "--preset", "tiny", "--budget", "8,1.6e1", "--context", "64",
                 "--no-area", "--no-plots", "--out", str(out)]) == 0
    with (out / "sweep.csv").open() as f:
        budgets = {int(r["policy.budget"]) for r in csv.DictReader(f)}
    assert budgets == {8, 16}


# --------------------------------------------------------------------------- output folders
def test_out_folder_is_owned_refused_or_cleared(tmp_path, capsys):
    out = tmp_path / "o"
    base = ["serve", "--preset", "tiny", "--method", "full,h2o", "--requests", "30",
            "--rate", "50", "--out", str(out)]
    assert main(base) == 0
    capsys.readouterr()
    (out / "mine.txt").write_text("not hikv's")
    assert main(base) == 2
    assert "pass --force" in _err_line(capsys)
    # --force with fewer methods: the old requests_h2o.csv must not stay beside new files
    assert main([*base[:4], "full", *base[5:], "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".hikv-run.lock", "MANIFEST.json", "kv_use.png", "latency_cdf.png", "mine.txt",
        "requests_full.csv", "summary.csv"]


def test_bad_output_paths_fail_before_the_work(tmp_path, capsys):
    afile = tmp_path / "file"
    afile.write_text("x")
    for out in (afile, afile / "sub"):
        t0 = time.perf_counter()
        rc = main(["serve", "--preset", "tiny", "--requests", "2000", "--rate", "5",
                   "--out", str(out)])
        assert rc == 2 and time.perf_counter() - t0 < 5, out
        assert str(out) in _err_line(capsys)
    assert main(["verilog", "--block", "sorter", "--preset", "tiny", "--out",
                 str(tmp_path / "missing" / "x.v")]) == 2
    assert "does not exist" in _err_line(capsys)
    assert main(["report", "--preset", "tiny", "--no-area", "--no-serving", "--out",
                 str(afile)]) == 2
    assert "is not a folder" in _err_line(capsys)


# --------------------------------------------------------------------------- user files
def test_unreadable_and_foreign_input_files(tmp_path, capsys):
    import gzip

    good = _trace(tmp_path / "t.csv", _rows(5))
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(good.read_bytes()))
    (tmp_path / "u16.csv").write_bytes(good.read_text().encode("utf-16"))
    (tmp_path / "latin.csv").write_bytes(good.read_bytes().replace(b"2023-11-16 18:15:00",
                                                                   b"2023-11-16 18:15:0\xe9"))
    for name, expect in (("t.csv.gz", "gzip"), ("u16.csv", "UTF-16"),
                         ("latin.csv", "not UTF-8"), ("missing.csv", "not found")):
        assert main(["serve", "--preset", "tiny", "--trace", str(tmp_path / name)]) == 2, name
        assert expect in _err_line(capsys), name
    _trace(tmp_path / "huge.csv", ["2023-11-16 18:15:00,99999999999999999999,5"])
    assert main(["serve", "--preset", "tiny", "--trace", str(tmp_path / "huge.csv")]) == 2
    assert "huge.csv:2: ContextTokens" in _err_line(capsys)
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text("{nope")
    for f in ("list.json", "bad.json", "missing.json"):
        assert main(["accuracy", "table", "--perplexity", str(tmp_path / f), "--out",
                     str(tmp_path / "t")]) == 2, f
        assert f in _err_line(capsys)
        assert main(["report", "--preset", "tiny", "--no-area", "--no-serving", "--iso",
                     str(tmp_path / f), "--out", str(tmp_path / "r")]) == 2, f
        assert f in _err_line(capsys)


def test_numbers_are_finite_and_in_range(capsys):
    cases = [
        (["serve", "--preset", "tiny", "--seed", "-1", "--requests", "5"], "--seed = -1"),
        (["serve", "--preset", "tiny", "--rate", "inf"], "'inf' is not a finite number"),
        (["serve", "--preset", "tiny", "--rate", "nan"], "'nan' is not a finite number"),
        (["serve", "--preset", "tiny", "--requests", "0"], "--requests = 0"),
        (["serve", "--preset", "tiny", "--requests", "5", "--set",
          "accel.mem_bandwidth_bytes_per_s=Infinity"], "must be a finite number"),
        (["serve", "--preset", "tiny", "--rate", "1e-300", "--requests", "5"],
         "lose the resolution"),
        (["serve", "--preset", "tiny", "--rate", "1e300", "--requests", "5"],
         "rate_per_s = 1e+300 is out of range"),
        (["sweep", "--preset", "tiny", "--bench", "--points", "0"], "--points = 0"),
        (["sweep", "--preset", "tiny", "--bench", "--seed", "-3"], "--seed = -3"),
        (["rtl", "--block", "sorter", "--seed", "-2"], "--seed = -2"),
        (["accuracy", "perplexity", "--batch", "0", "--out", "/tmp/x"], "--batch = 0"),
    ]
    for argv, expect in cases:
        assert main(argv) == 2, argv
        assert expect in _err_line(capsys), argv


# --------------------------------------------------------------------------- labels
def test_degenerate_traces_give_labelled_results_never_nan(tmp_path, capsys):
    one = _trace(tmp_path / "one.csv", _rows(1))
    burst = _trace(tmp_path / "burst.csv", ["2023-11-16 18:15:00,100,3"] * 3)
    out = tmp_path / "o"
    assert main(["serve", "--preset", "tiny", "--method", "full", "--trace", str(one),
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "nan" not in text.lower() and "not checked" in text
    for f in out.glob("*.csv"):
        body = f.read_text().lower()
        assert "nan" not in body and "inf" not in body.replace("inference", ""), f
    assert main(["serve", "--preset", "tiny", "--trace", str(burst), "--rate", "3"]) == 2
    assert "zero span" in _err_line(capsys)
    assert main(["serve", "--preset", "tiny", "--trace", str(burst), "--goodput"]) == 2
    assert "zero span" in _err_line(capsys)


def test_goodput_bound_and_overload_are_labelled(tmp_path, capsys):
    out = tmp_path / "o"
    # one request: every rate meets the SLOs, so the search stops at its cap (a lower bound)
    one = _trace(tmp_path / "one.csv", _rows(1))
    assert main(["serve", "--preset", "tiny", "--method", "full", "--trace", str(one),
                 "--goodput", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "goodput [full]: lower bound" in text and ">=" in text
    with (out / "summary.csv").open() as f:
        row = next(csv.DictReader(f))
    assert row["goodput_bound"] == "lower bound" and row["goodput_bracketed"] == "False"
    # SLOs no rate can meet: the reported 0 is an upper bound, printed as "<lowest rate"
    assert main(["serve", "--preset", "tiny", "--method", "full", "--requests", "30",
                 "--ttft-slo", "1e-9", "--goodput", "--out", str(out), "--force"]) == 0
    text = capsys.readouterr().out
    assert "goodput [full]: upper bound" in text and " <0." in text
    with (out / "summary.csv").open() as f:
        assert next(csv.DictReader(f))["goodput_bound"] == "upper bound"
    # far beyond capacity: the windowed Little's law is labelled as not in a steady state
    assert main(["serve", "--preset", "tiny", "--method", "full", "--rate", "100000",
                 "--requests", "400", "--out", str(out), "--force"]) == 0
    text = capsys.readouterr().out
    assert "not in a steady state" in text
    with (out / "summary.csv").open() as f:
        row = next(csv.DictReader(f))
    assert row["little_steady_state"] == "False" and "overloaded" in row["little_note"]


def test_steady_run_is_not_flagged(capsys):
    assert main(["serve", "--preset", "tiny", "--method", "full", "--rate", "20",
                 "--requests", "300", "--seed", "3"]) == 0
    assert "steady state" not in capsys.readouterr().out


# --------------------------------------------------------------------------- signals, pipes
def test_keyboard_interrupt_is_exit_130(monkeypatch, capsys):
    import hikv.scripts.cmd_presets as cmd

    def boom(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cmd, "run", boom)
    assert main(["presets"]) == 130
    assert "interrupted" in _err_line(capsys)


def test_oserror_is_one_line(monkeypatch, capsys):
    import errno

    import hikv.scripts.cmd_presets as cmd

    def full(args):
        raise OSError(errno.ENOSPC, "No space left on device", "/x/requests_full.csv")

    monkeypatch.setattr(cmd, "run", full)
    assert main(["presets"]) == 2
    err = _err_line(capsys)
    assert "No space left on device: /x/requests_full.csv" in err and "free disk" in err


def test_broken_pipe_is_not_a_traceback():
    env = dict(os.environ, PYTHONUNBUFFERED="0")
    for _ in range(3):
        p = subprocess.run(f"{sys.executable} -m hikv.scripts.cli presets default | true",
                           shell=True, capture_output=True, text=True, env=env, timeout=120)
        for bad in ("Traceback", "BrokenPipeError", "Exception ignored"):
            assert bad not in p.stderr, p.stderr


def test_ctrl_c_in_a_real_run_then_a_rerun(tmp_path):
    """SIGINT during a long serve run: exit 130, one line, no partial file kept; a rerun with
    --force into the same folder then succeeds."""
    out = tmp_path / "o"
    # --goodput makes the run minutes long on any machine, so the interrupt lands mid-run (the
    # output folder is only written at the end: waiting for it raced with fast machines)
    argv = [*HIKV, "serve", "--preset", "default", "--method", "all", "--requests", "20000",
            "--rate", "50", "--goodput", "--out", str(out)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=sigint_default)
    time.sleep(10.0)
    assert p.poll() is None, "the run finished before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert not out.is_dir() or not [f for f in out.iterdir() if f.name.endswith(".tmp")]
    assert main(["serve", "--preset", "tiny", "--method", "full", "--requests", "20",
                 "--out", str(out), "--force"]) == 0


# --------------------------------------------------------------------------- safe loading
class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {_Evil.marker}",))


def test_capture_is_loaded_without_running_code(tmp_path, capsys):
    import torch

    _Evil.marker = tmp_path / "pwned"
    bad = tmp_path / "evil.pt"
    torch.save({"layers": {0: _Evil()}, "meta": {}}, bad)
    rc = main(["rtl", "--block", "sorter_loader", "--preset", "tiny", "--capture", str(bad)])
    assert rc == 2 and not _Evil.marker.exists()
    assert "weights_only" in _err_line(capsys)
    (tmp_path / "text.pt").write_text("hello")
    assert main(["rtl", "--block", "sorter_loader", "--capture", str(tmp_path / "text.pt")]) == 2
    assert "text.pt" in _err_line(capsys)
    ok = tmp_path / "ok.pt"
    torch.save({"layers": {0: {"q": torch.zeros(2)}}, "meta": {"prefix": 1}}, ok)
    from hikv.scripts.cmd_rtl import load_capture

    assert load_capture(str(ok))["meta"]["prefix"] == 1


# --------------------------------------------------------------------------- provenance
def test_one_code_version_everywhere():
    from hikv.io import code_version
    from hikv.model.accuracy import io as accuracy_io
    from hikv.sim.explore import report
    from hikv.sim.serving import report as serving_report
    assert report.code_version is code_version
    assert accuracy_io.code_version is code_version
    assert serving_report.code_version is code_version
    assert code_version().startswith("0.") or "+" in code_version()


def test_json_results_refuse_non_finite(tmp_path):
    from hikv.io import NonFiniteError, write_csv, write_json
    from hikv.model.accuracy.io import write_rows

    with pytest.raises(NonFiniteError, match=r"rows\[1\]\.ppl = nan"):
        write_rows(tmp_path, "perplexity", [{"ppl": 3.0}, {"ppl": float("nan")}], {})
    assert not (tmp_path / "perplexity.json").exists()
    with pytest.raises(NonFiniteError, match="column 'x' = inf"):
        write_csv(tmp_path / "a.csv", [{"x": float("inf")}])
    write_json(tmp_path / "b.json", {"x": float("nan")}, missing_ok=("x",))
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": None}


def test_report_serving_cells_label_bounds():
    from hikv.sim.serving.report import goodput_cell

    assert goodput_cell({"goodput_req_per_s": 4.0, "goodput_bound": "measured"}) == "4.000"
    assert goodput_cell({"goodput_req_per_s": 4096.0,
                          "goodput_bound": "lower bound"}) == ">=4096.000"
    assert goodput_cell({"goodput_req_per_s": 0.0, "goodput_bound": "upper bound",
                          "goodput_min_rate_tried_req_per_s": 0.244}) == "<0.244"
