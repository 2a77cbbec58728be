"""Parameter checks shared by :mod:`hikv.params`, :mod:`hikv.method_spec` and the parameter
classes of the subsystems (:mod:`hikv.sim.cluster.params`).

Standard library only. Each ``check_*`` raises :class:`ParamError` with a message naming the owner,
the parameter, its value and the allowed range.
"""

from __future__ import annotations

import enum
import math
from typing import Any

__all__ = ["ParamError", "clog2", "INT_MAX", "check_int", "check_pow2", "check_num", "check_enum",
           "check_bool", "check_name"]


class ParamError(ValueError):
    """A parameter is out of its allowed range; the message names it."""


def clog2(n: int) -> int:
    """Bits needed to index ``n`` items (at least 1)."""
    return max(1, math.ceil(math.log2(n))) if n > 1 else 1


# --------------------------------------------------------------------------- checks
#: Largest integer any parameter takes: the models compute in int64 arrays.
INT_MAX = 2**62


def check_int(owner: str, name: str, value: Any, lo: int, hi: int | None = None) -> None:
    """An integer (not a bool) in ``[lo, hi]`` (no ``hi``: up to :data:`INT_MAX`)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"{owner}.{name} must be an integer, not {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ParamError(f"{owner}.{name} = {value} is out of range: allowed {rng}")
    if value > INT_MAX:
        raise ParamError(f"{owner}.{name} = {value} is out of range: allowed [{lo}, {INT_MAX}] "
                         "(a 64-bit integer)")


def check_pow2(owner: str, name: str, value: int) -> None:
    """A power of two (``value`` already checked as a positive integer)."""
    if value & (value - 1):
        raise ParamError(f"{owner}.{name} = {value} must be a power of two")


def check_num(owner: str, name: str, value: Any, lo: float, hi: float | None = None,
              lo_open: bool = False) -> None:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``; no ``hi``: unbounded
    above); an integer's magnitude at most :data:`INT_MAX`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ParamError(f"{owner}.{name} must be a finite number, not {value!r}")
    if isinstance(value, int) and abs(value) > INT_MAX:
        raise ParamError(f"{owner}.{name} = {value} is out of range: allowed magnitude <= "
                         f"{INT_MAX} for an integer (write it as a float, e.g. 1e30)")
    bad_lo = value <= lo if lo_open else value < lo
    if bad_lo or (hi is not None and value > hi):
        left = "(" if lo_open else "["
        rng = f"{left}{lo}, {hi}]" if hi is not None else (f"> {lo}" if lo_open else f">= {lo}")
        raise ParamError(f"{owner}.{name} = {value} is out of range: allowed {rng}")


def check_enum(owner: str, name: str, value: Any, cls: type[enum.Enum]) -> None:
    """A member of ``cls``."""
    if not isinstance(value, cls):
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ParamError(f"{owner}.{name} = {value!r} is not one of: {allowed}")


def check_bool(owner: str, name: str, value: Any) -> None:
    """``True`` or ``False``."""
    if not isinstance(value, bool):
        raise ParamError(f"{owner}.{name} must be a bool (True or False), not {value!r}")


def check_name(owner: str, name: str, value: Any) -> None:
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise ParamError(f"{owner}.{name} must be a non-empty string, not {value!r}")
