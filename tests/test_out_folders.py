"""Output folders: one run at a time, special files never replaced, a manifest that proves a
run finished, orphan temporary files cleaned, SIGTERM handled like Ctrl-C."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hikv import io as hio
from hikv.params import ParamError
from hikv.scripts.cli import main

SERVE = ["serve", "--preset", "tiny", "--method", "full", "--rate", "50", "--requests", "20"]


def _hikv(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hikv.scripts.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_a_second_run_into_a_held_folder_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "o"
    hio.hold_out_dir(out.mkdir() or out)
    try:
        p = _hikv(*SERVE, "--out", str(out))
        _, err = p.communicate(timeout=120)
        assert p.returncode == 2, err
        assert "is in use by another run" in err and f"pid {os.getpid()}" in err
        assert not (out / "summary.csv").exists()
    finally:
        hio.release_out_dir(out)
    # released: the same command now runs
    assert main([*SERVE, "--out", str(out)]) == 0


def test_two_concurrent_runs_never_mix(tmp_path):
    out = tmp_path / "o"
    runs = [_hikv(*SERVE[:-1], "400", "--seed", str(s), "--out", str(out)) for s in (1, 2)]
    codes = sorted(p.wait(timeout=300) for p in runs)
    assert codes == [0, 2]
    ok, why = hio.folder_complete(out)
    assert ok, why
    manifest = json.loads((out / hio.MANIFEST).read_text())
    seed = manifest["arguments"][manifest["arguments"].index("--seed") + 1]
    # every row of every file is the winning run's (its seed), none the refused run's
    assert f"seed {seed})" in (out / "summary.csv").read_text()
    assert f"seed {3 - int(seed)})" not in (out / "summary.csv").read_text()


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_special_files_are_refused_not_replaced(tmp_path, capsys, kind):
    if kind == "fifo":
        target = tmp_path / "pipe"
        os.mkfifo(target)
    else:
        target = Path("/dev/full")
        if not target.exists():
            pytest.skip("no /dev/full here")
    assert main(["verilog", "--block", "sorter", "--preset", "tiny", "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert "not a regular file: refusing to replace it" in err
    assert (target.is_fifo() if kind == "fifo" else target.is_char_device())


def test_a_symlink_is_followed(tmp_path):
    real = tmp_path / "real.v"
    real.write_text("old")
    link = tmp_path / "link.v"
    link.symlink_to(real)
    hio.atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_manifest_lists_every_file_and_detects_changes(tmp_path):
    out = tmp_path / "o"
    assert main([*SERVE, "--out", str(out)]) == 0
    manifest = json.loads((out / hio.MANIFEST).read_text())
    names = {e["path"] for e in manifest["files"]}
    assert {"summary.csv", "requests_full.csv", "latency_cdf.png"} <= names
    assert manifest["arguments"][:2] == ["hikv", "serve"] and manifest["code_version"]
    assert hio.folder_complete(out) == (True, "")
    (out / "summary.csv").write_text("edited")
    ok, why = hio.folder_complete(out)
    assert not ok and "summary.csv" in why


def test_a_failed_or_killed_run_leaves_no_manifest_and_the_next_run_cleans_up(tmp_path):
    out = tmp_path / "o"
    assert main([*SERVE, "--out", str(out)]) == 0
    (out / ".summary.csv.abc123.tmp").write_text("half a row")   # as a kill -9 mid-write
    # the next run starts: the old manifest goes first, so a crash now leaves none
    hio.prepare_out_dir(out, ("summary.csv", "requests_*.csv", "*.png"), force=True)
    assert not (out / hio.MANIFEST).exists()
    assert not (out / ".summary.csv.abc123.tmp").exists()
    ok, why = hio.folder_complete(out)
    assert not ok and "did not finish" in why
    hio.release_out_dir(out)


def test_sigterm_exits_143_with_one_line_and_no_manifest(tmp_path):
    out = tmp_path / "o"
    p = _hikv(*SERVE[:-1], "20000", "--out", str(out))
    deadline = time.monotonic() + 120
    while not (out / hio.OUT_LOCK).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    assert not (out / hio.MANIFEST).exists()
    assert not [f for f in out.iterdir() if f.name.endswith(".tmp")]


def test_prepare_out_dir_names_the_parameter_on_refusal(tmp_path):
    out = tmp_path / "o"
    hio.prepare_out_dir(out, ("a.csv",))
    (out / "a.csv").write_text("1")
    with pytest.raises(ParamError, match="--out .* pass --force"):
        hio.prepare_out_dir(out, ("a.csv",))
    hio.release_out_dir(out)


@pytest.mark.parametrize("override", ["accel.mem_bandwidth_bytes_per_s=1e-300",
                                      "accel.clock_hz=1e308"])
def test_report_refuses_a_degenerate_configuration(tmp_path, capsys, override):
    out = tmp_path / "r"
    rc = main(["report", "--preset", "tiny", "--no-area", "--no-plots", "--no-serving",
               "--set", override, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert override.split("=")[0] in err and "Traceback" not in err
    assert not (out / "report.csv").exists() and not (out / "report.md").exists()


def test_argparse_errors_are_one_line(capsys):
    for argv in (["serve", "--rate", "x"], ["bogus"], ["report", "--preset"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "error:" in err and "--help" in err, err


def test_set_of_a_whole_section_merges_into_it():
    from hikv.presets import get_preset, with_overrides

    base = get_preset("default")
    cfg = with_overrides(base, ['accel={"clock_hz": 2e9}'])
    assert cfg.accel.clock_hz == 2e9
    assert dataclasses.replace(cfg.accel, clock_hz=base.accel.clock_hz) == base.accel  # rest kept
    with pytest.raises(ParamError, match="'bogus' is not a parameter"):
        with_overrides(base, ['accel={"bogus": 1}'])
    with pytest.raises(ParamError, match="is a section"):
        with_overrides(base, ["accel=5"])


def test_fetch_assets_verify_rehashes_and_deletes_a_corrupt_copy(tmp_path, capsys):
    from hikv.model.lm.assets import asset_path

    target = asset_path("smollm2-135m", tmp_path)
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not the model")
    rc = main(["fetch-assets", "--verify", "--cache", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1 and "CORRUPT  smollm2-135m" in out and "absent   pg-essays" in out
    assert not target.exists()
    assert main(["fetch-assets", "--verify", "--cache", str(tmp_path)]) == 0


def test_a_rate_for_a_one_request_trace_is_refused(tmp_path, capsys):
    trace = tmp_path / "one.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:00.0000000,100,3\n")
    rc = main(["serve", "--preset", "tiny", "--method", "full", "--trace", str(trace),
               "--rate", "5"])
    assert rc == 2 and "holds one request, which has no arrival rate" in capsys.readouterr().err
    assert main(["serve", "--preset", "tiny", "--method", "full", "--trace", str(trace)]) == 0
