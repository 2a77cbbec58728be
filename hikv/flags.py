"""Numbers given on the command line: one parser for every numeric flag, and each flag's range.

One rule for every number a user types (a flag, a sweep axis, a ``--set`` value, a trace
field): ASCII digits only (``１２８`` and ``٣`` are refused, as JSON and the trace reader refuse
them), finite (``nan``, ``inf`` and ``1e999`` are refused), an integer exactly (``8.9`` is an
error, never truncated; ``1e3`` is 1000). Every numeric flag also has an allowed range here,
chosen so that no input can make a run go on without bound (``--trials 10**40``); a flag not
in :data:`FLAG_RANGES` takes :data:`DEFAULT_INT_RANGE` / :data:`DEFAULT_FLOAT_RANGE`.
Standard library only; the command line (:mod:`hikv.scripts.cli`) applies it to every
``type=int`` / ``type=float`` flag by the flag's destination name.
"""

from __future__ import annotations

import math
import re

from hikv.param_checks import INT_MAX, ParamError

__all__ = ["parse_int", "parse_float", "FLAG_RANGES", "DEFAULT_INT_RANGE",
           "DEFAULT_FLOAT_RANGE", "flag_range", "check_flag"]

_INT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")

#: Tokens: contexts, windows, prefixes, budgets (1 Mi tokens is far past any model here).
_TOKENS = (1, 1 << 20)
#: Requests of a serving run (the Azure traces hold under 30,000 each).
_REQUESTS = (1, 10_000_000)

#: Allowed ``[lo, hi]`` of the numeric flags that no parameter class checks, by destination name
#: (``--serving-requests`` -> ``serving_requests``): counts of work, bounded so that no run is
#: unbounded. Flags that set a parameter (``--rate``, ``--max-running``, SLOs, ...) are checked
#: by its class in :mod:`hikv.params` and the subsystems' parameter classes.
FLAG_RANGES: dict[str, tuple[float, float]] = {
    # work counts
    "requests": _REQUESTS, "max_requests": _REQUESTS, "serving_requests": (0, 10_000_000),
    "trials": (1, 100_000), "windows": (1, 100_000), "jobs": (1, 10_000_000),
    "points": (1, 10_000_000), "paths": (1, 1_000), "prob_rows": (1, 1 << 16),
    "replicas": (1, 100_000), "loaders": (1, 1_024),
    # sizes in tokens
    "window": _TOKENS, "prefix": _TOKENS, "tokens": _TOKENS, "lengths": _TOKENS,
    "length": _TOKENS, "suite_lengths": _TOKENS, "budgets": _TOKENS,
    "layers": (0, 1_024),
    # parallelism
    "threads": (1, 1_024), "workers": (1, 1_024), "batch": (1, 1 << 16),
    # seeds
    "seed": (0, 2**63 - 1),
    # FPGA target clock, fractions and tolerances
    "fpga_mhz": (1e-3, 1e4), "depths": (0.0, 1.0),
    "acc_tol": (0.0, 100.0), "ppl_tol": (0.0, 100.0), "passkey_tol": (0.0, 1.0),
    "budget_step": (1.0, 2.0),
}
#: Range of an integer flag not in :data:`FLAG_RANGES`.
DEFAULT_INT_RANGE = (-INT_MAX, INT_MAX)
#: Range of a float flag not in :data:`FLAG_RANGES`.
DEFAULT_FLOAT_RANGE = (-1e300, 1e300)


def _ascii(text: str, what: str) -> str:
    s = text.strip()
    if not s.isascii():
        raise ParamError(f"{what} {text!r}: write numbers with ASCII digits 0-9")
    return s


def parse_int(text: str, what: str = "value", *, limit: bool = True) -> int:
    """An integer written in ASCII, exactly (``1e3`` is 1000, ``8.9`` an error); with
    ``limit`` at most :data:`~hikv.param_checks.INT_MAX` in magnitude."""
    s = _ascii(text, what)
    if _INT.match(s):
        v = int(s)
    else:
        f = parse_float(s, what)
        if f != math.floor(f):
            raise ParamError(f"{what} {text!r} is not an integer")
        v = int(f)
    if limit and abs(v) > INT_MAX:
        raise ParamError(f"{what} {text!r} is out of range: allowed magnitude <= {INT_MAX}")
    return v


def parse_float(text: str, what: str = "value") -> float:
    """A finite number written in ASCII (``nan``, ``inf`` and overflowing ones refused)."""
    s = _ascii(text, what)
    if s.lower().lstrip("+-") in ("inf", "infinity", "nan"):
        raise ParamError(f"{what} {text!r} is not a finite number")
    if not _FLOAT.match(s):
        raise ParamError(f"{what} {text!r} is not a number")
    v = float(s)
    if not math.isfinite(v):
        raise ParamError(f"{what} {text!r} is not a finite number")
    return v


def flag_range(dest: str, is_int: bool) -> tuple[float, float]:
    """The allowed ``[lo, hi]`` of the flag whose destination is ``dest``."""
    return FLAG_RANGES.get(dest, DEFAULT_INT_RANGE if is_int else DEFAULT_FLOAT_RANGE)


def check_flag(dest: str, flag: str, value: float) -> None:
    """``value`` within :func:`flag_range` of ``dest``, else :class:`ParamError` naming the
    flag, the value and the range."""
    lo, hi = flag_range(dest, isinstance(value, int))
    if not lo <= value <= hi:
        lo_s, hi_s = (f"{x:,}" if isinstance(x, int) else f"{x:g}" for x in (lo, hi))
        shown = f"{value:g}" if isinstance(value, float) or abs(value) > 10**15 else str(value)
        raise ParamError(f"{flag} = {shown} is out of range: allowed [{lo_s}, {hi_s}]")
