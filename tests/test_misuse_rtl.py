"""Misuse suite, RTL flow: two ``hikv rtl`` runs started together on a cold cache (each pair
its own fresh HIKV_CACHE) both pass -- one builds, the other waits on the build lock, and two
runs with the same seed do not share a run folder; a build interrupted half-way, and a
build directory left with a corrupt precompiled header, are detected and rebuilt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from signal_helpers import sigint_default

pytestmark = [pytest.mark.rtl, pytest.mark.slow, pytest.mark.concurrency]

HIKV = [sys.executable, "-m", "hikv.scripts.cli"]
JOBS = "12"


def _start(cache: Path, block: str, seed: int, **kw) -> subprocess.Popen:
    env = dict(os.environ, HIKV_CACHE=str(cache))
    return subprocess.Popen([*HIKV, "rtl", "--block", block, "--preset", "tiny", "--seed",
                             str(seed), "--jobs", JOBS], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def _finish(p: subprocess.Popen, what: str) -> str:
    out, _ = p.communicate(timeout=1500)
    assert p.returncode == 0 and "PASS block=" in out, f"{what}: exit {p.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    return out


@pytest.mark.parametrize("block", [pytest.param("sorter", marks=pytest.mark.extended), "loader"])
def test_two_concurrent_cold_cache_runs_both_pass(tmp_path, block):
    cache = tmp_path / "cache"
    # the same seed on purpose: the run folders must still differ
    a, b = _start(cache, block, 7), _start(cache, block, 7)
    _finish(a, f"{block} run A")
    _finish(b, f"{block} run B")
    builds = [d for d in (cache / "build").iterdir() if d.is_dir()]
    assert len(builds) == 1 and (builds[0] / ".hikv-build-ok").is_file()


def test_interrupted_build_then_rerun_and_corrupt_pch(tmp_path):
    from hikv.toolchain import BUILD_STAMP

    cache = tmp_path / "cache"
    p = _start(cache, "sorter", 3, start_new_session=True, preexec_fn=sigint_default)
    deadline = time.time() + 600
    objs: list[Path] = []
    while time.time() < deadline and p.poll() is None:
        objs = list((cache / "build").glob("*/*.o")) if (cache / "build").is_dir() else []
        if objs:
            break
        time.sleep(0.2)
    assert p.poll() is None, "the build finished before it could be interrupted"
    os.killpg(p.pid, signal.SIGINT)                 # Ctrl-C in a terminal: the whole group
    out, _ = p.communicate(timeout=300)
    assert p.returncode in (130, -signal.SIGINT, 2), out[-2000:]
    assert "Traceback" not in out, out[-2000:]
    build = next(d for d in (cache / "build").iterdir() if d.is_dir())
    assert not (build / BUILD_STAMP).exists()       # an unfinished build is never stamped
    _finish(_start(cache, "sorter", 3), "rerun after the interrupt")
    assert (build / BUILD_STAMP).is_file()
    # a stamped build whose precompiled header and objects were corrupted afterwards (make
    # would take them for up to date and the build would crash): detected and rebuilt
    pchs = list(build.glob("*.gch")) + list(build.glob("*__pch*.fast*"))
    victims = pchs + list(build.glob("*.o"))[:1]
    for f in victims:
        f.write_bytes(b"\0garbage" * 64)
    exe = [f for f in build.iterdir() if f.is_file() and os.access(f, os.X_OK)
           and f.suffix == "" and f.name.startswith("hikv")]
    for f in exe:
        f.unlink()
    _finish(_start(cache, "sorter", 4), "run after corrupting the build")
