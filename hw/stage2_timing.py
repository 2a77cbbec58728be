"""Geometry and timing contract of the Stage II selection block (standard library only).

The RTL (:mod:`hikv.hw.stage2_select`) takes its engine count and step schedule from
:class:`Stage2Timing`, and the cocotb regression (``hikv rtl --block stage2``) checks
:meth:`Stage2Timing.cycles` against the simulated RTL job by job, so the formula and the
hardware cannot drift apart. The cost model imports this module without Amaranth.

Definitions
-----------
``P`` lanes, ``W``-bit keys, vectors of ``d`` elements (fixed when the block is built),
``E = ceil(log2 d)`` index bits, ``B`` radix steps per engine cycle. A vector arrives as
``D = ceil(d / P)`` beats; an engine resolves the ``W + E`` bits of the composite ``{key,
~index}`` in ``S = ceil((W + E) / B)`` cycles; ``N = ceil(S / D)`` engines take the vectors in
turn, so the block keeps one vector every ``D`` cycles.

**Cycles of a job** of ``count`` vectors are counted as the sorter's
(:mod:`hikv.hw.sorter_timing`): from the cycle in which the first input beat is accepted to the
one in which the last output beat is accepted, inclusive, input offered every cycle, output
always ready. Formula (exact for the RTL, no data dependence, ``r`` included)::

    cycles = count * D + D + S + 4

In words: ``D`` beats per vector in steady state; the last vector's hand-over to a select
engine, its ``S`` select cycles, the emit stage's ``D`` rows, the row register and the
compactor's flush and output register (the ``+ D + S + 4`` of :attr:`Stage2Timing.latency`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hikv.params import ParamError, SorterParams

__all__ = ["DEFAULT_BITS_PER_CYCLE", "Stage2Timing", "stage2_block_cycles",
           "stage2_radix_steps"]

#: ``B`` of the registered block: one radix step per engine cycle, the build that keeps the
#: sorter's Stage II rate (docs/topk.md, "Stage II engine": ``B = 2`` halves the engines but
#: chains two popcounts and costs 39 % of the clock on ``default``)
DEFAULT_BITS_PER_CYCLE = 1


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _log2_ceil(n: int) -> int:
    return (n - 1).bit_length()


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ParamError(f"Stage2Select {name} = {value!r} is out of range: allowed "
                         f"[{lo}, {hi}]")
    return value


@dataclass(frozen=True)
class Stage2Timing:
    """Sizes and the cycle formula of a Stage II selection block.

    Parameters
    ----------
    lanes : int
        ``P`` (a power of two, 2 to 64).
    key_width : int
        ``W`` (1 to 32).
    length : int
        ``d`` (2 to 4096).
    bits_per_cycle : int
        ``B`` (1 to ``W + E``).
    """

    lanes: int
    key_width: int
    length: int
    bits_per_cycle: int = DEFAULT_BITS_PER_CYCLE

    def __post_init__(self) -> None:
        p = _int("lanes", self.lanes, 2, 64)
        if p & (p - 1):
            raise ParamError(f"Stage2Select lanes = {p} is out of range: allowed a power of "
                             "two in [2, 64]")
        _int("key_width", self.key_width, 1, 32)
        _int("length", self.length, 2, 4096)
        _int("bits_per_cycle", self.bits_per_cycle, 1, self.composite_bits)

    @classmethod
    def from_params(cls, params: SorterParams, length: int, *,
                    bits_per_cycle: int = DEFAULT_BITS_PER_CYCLE) -> Stage2Timing:
        """The block for a preset's sorter lanes and key width and vectors of ``length``."""
        return cls(params.lanes, params.key_width, length, bits_per_cycle)

    @property
    def index_bits(self) -> int:
        """``E = ceil(log2 d)``."""
        return _log2_ceil(self.length)

    @property
    def composite_bits(self) -> int:
        """``W + E``: bits of the composite ``{key, ~index}``, one radix step each."""
        return self.key_width + _log2_ceil(self.length)

    @property
    def rows(self) -> int:
        """``D = ceil(d / P)``: beats (and cycles) per vector."""
        return _cdiv(self.length, self.lanes)

    @property
    def select_cycles(self) -> int:
        """``S = ceil((W + E) / B)``: cycles an engine spends on a vector."""
        return _cdiv(self.composite_bits, self.bits_per_cycle)

    @property
    def engines(self) -> int:
        """``N = ceil(S / D)``: select engines, taking vectors in turn."""
        return _cdiv(self.select_cycles, self.rows)

    @property
    def latency(self) -> int:
        """Cycles of a job minus ``count * D``: ``D + S + 4``."""
        return self.rows + self.select_cycles + 4

    def cycles(self, count: int) -> int:
        """Cycles of ``count`` vectors streamed back to back (the module docstring); 0 for
        none."""
        _int("count", count, 0, 1 << 40)
        return count * self.rows + self.latency if count else 0

    def summary(self) -> dict[str, int]:
        """Every size, for tables and reports."""
        return {"lanes": self.lanes, "key_width": self.key_width, "length": self.length,
                "bits_per_cycle": self.bits_per_cycle, "rows": self.rows,
                "select_cycles": self.select_cycles, "engines": self.engines,
                "latency": self.latency}


def stage2_block_cycles(params: SorterParams, *, d: int, count: int,
                        bits_per_cycle: int = DEFAULT_BITS_PER_CYCLE) -> int:
    """Cycles of a Stage II job of ``count`` vectors of ``d`` on the block built for ``d``
    (the cost model's convention: a job of another length runs on a block built for it); 0
    for an empty job (``count`` or ``d`` zero). ``r`` does not enter."""
    if not count or not d:
        return 0
    return Stage2Timing.from_params(params, max(2, d), bits_per_cycle=bits_per_cycle
                                    ).cycles(count)


def stage2_radix_steps(params: SorterParams, *, d: int, count: int) -> int:
    """Radix steps of a Stage II job (``count * (W + E)``), each a popcount of ``d`` bits: the
    block's actions for the energy model."""
    if not count or not d:
        return 0
    return count * (params.key_width + _log2_ceil(max(2, d)))
