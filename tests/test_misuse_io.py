"""Misuse suite, output files: atomic writes keep the earlier complete file when a write fails
(a full disk, an exception half-way), --out folders are checked before work, locks serialise
one cache entry, run folders are unique per call."""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import time

import pytest

from hikv import io as hio
from hikv.params import ParamError


def test_atomic_write_keeps_the_old_file_on_a_full_disk(tmp_path, monkeypatch):
    path = tmp_path / "requests_full.csv"
    hio.write_csv(path, [{"a": 1, "b": 2}] * 3)
    before = path.read_bytes()

    def enospc(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(OSError, match="No space left"):
        hio.write_csv(path, [{"a": 9, "b": 9}] * 100)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests_full.csv"]


def test_atomic_write_keeps_the_old_file_on_an_exception(tmp_path):
    path = tmp_path / "x.txt"
    hio.atomic_write_text(path, "complete\n")
    with pytest.raises(RuntimeError), hio.atomic_open(path) as f:
        f.write("half")
        raise RuntimeError("crash mid-write")
    assert path.read_text() == "complete\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_save_figure_is_atomic(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    p = hio.save_figure(fig, tmp_path / "f.png", dpi=50)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [q.name for q in tmp_path.iterdir()] == ["f.png"]


def test_prepare_out_dir(tmp_path):
    out = tmp_path / "o"
    assert hio.prepare_out_dir(out, ("a.csv", "req_*.csv")) == out
    (out / "a.csv").write_text("1")
    (out / "req_x.csv").write_text("1")
    (out / "keep.md").write_text("1")
    with pytest.raises(ParamError, match=r"a\.csv, req_x\.csv\); pass --force"):
        hio.prepare_out_dir(out, ("a.csv", "req_*.csv"))
    hio.prepare_out_dir(out, ("a.csv", "req_*.csv"), force=True)
    assert sorted(p.name for p in out.iterdir()) == [hio.OUT_LOCK, "keep.md"]
    hio.release_out_dir(out)
    with pytest.raises(ParamError, match="is not a folder"):
        hio.prepare_out_dir(out / "keep.md", ("a.csv",))
    with pytest.raises(ParamError, match="cannot be written"):
        hio.check_writable(out / "keep.md" / "sub")


def test_unique_dirs_never_collide(tmp_path):
    dirs = {hio.unique_dir(tmp_path, "loader-tiny-s1") for _ in range(50)}
    assert len(dirs) == 50 and all(d.is_dir() and not any(d.iterdir()) for d in dirs)


def _hold(path, hold_s, log):
    with hio.file_lock(path):
        with open(log, "a") as f:
            f.write(f"in {time.time()}\n")
        time.sleep(hold_s)
        with open(log, "a") as f:
            f.write(f"out {time.time()}\n")


def test_file_lock_serialises_processes(tmp_path):
    lock, log = tmp_path / "b.lock", tmp_path / "log"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_hold, args=(lock, 0.3, log)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    kinds = [line.split()[0] for line in log.read_text().splitlines()]
    assert kinds == ["in", "out"] * 3        # never two holders at once


def test_read_json_rejects_nan_literals_and_names_the_line(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"a": NaN}')
    with pytest.raises(ParamError, match="NaN is not a finite number"):
        hio.read_json(p)
    p.write_text('{\n"a": 1,\n}')
    with pytest.raises(ParamError, match=r"x\.json:3: not valid JSON"):
        hio.read_json(p)
