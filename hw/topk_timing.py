"""Geometry and timing contract of the radix-select top-k engine (standard library only).

The RTL (:mod:`hikv.hw.topk`) takes every size it builds (digits, counters, buffer rows) from
:class:`TopKTiming`, and the cocotb regression checks :meth:`TopKTiming.stage1_cycles` against
the simulated RTL job by job, so the formula and the hardware cannot drift apart. The cost
model can import this module without Amaranth.

Definitions
-----------
``P`` lanes (keys per cycle), ``W``-bit keys split into ``G = ceil(W / b)`` digits of ``b =
min(digit_bits, W)`` bits from the top (the key is padded with zeros below its lowest bit to
``G b`` bits). A Stage I job of ``n`` keys occupies ``D = ceil(n / P)`` rows of the key buffer.

**Cycles of a job** are counted as the sorter's (:mod:`hikv.hw.sorter_timing`): from the cycle
in which the first input beat is accepted to the one in which the last output beat is accepted,
inclusive, with the input offered every cycle and the output always ready. The configuration
may be accepted any time before.

Formula (exact for the RTL, no data dependence)::

    cycles = (G + 1) * D + 4 * G + 4

In words: the load pass takes ``D`` cycles (the keys are written to the buffer and the top
digit's histogram is counted as they arrive) and ``3`` more to finish the count and pick the
digit; each of the ``G - 1`` further digits is a pass over the buffer of ``D``
cycles plus ``4`` (read, histogram register, counter update, pick); the emit pass reads the
``D`` rows again and its last output beat leaves ``5`` cycles after its last read (read,
compare, select, compactor input, compactor flush).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hikv.params import ParamError, SorterParams

from .sorter_timing import check_job_arg

__all__ = ["TopKTiming", "topk_cycles", "topk_compares", "topk_digit_compares"]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TopKTiming:
    """Sizes and the cycle formula of the top-k engine built from
    :class:`~hikv.params.SorterParams` (lanes, key width, ``max_n``, ``max_k``, digit width).

    Build it with :meth:`from_params`. Every attribute is a pure function of the parameters.
    """

    lanes: int
    key_width: int
    index_width: int
    max_n: int
    max_k: int
    count_width: int
    digit_bits: int

    #: cycles after the load pass's ``D`` beats until the next pass starts: the counter update
    #: (the beat itself loads the histogram register), the digit compare, the digit pick
    LOAD_TAIL = 3
    #: cycles a further digit pass adds to its ``D`` reads: the read (into the histogram
    #: register), the counter update, the digit compare, the digit pick
    SCAN_TAIL = 4
    #: cycles from the emit pass's last read to its last output beat, inclusive: memory read,
    #: compare register, select register, compactor input, compactor flush
    EMIT_TAIL = 5

    @classmethod
    def from_params(cls, p: SorterParams) -> TopKTiming:
        return cls(lanes=p.lanes, key_width=p.key_width, index_width=p.index_width,
                   max_n=p.max_n, max_k=p.max_k, count_width=p.count_width,
                   digit_bits=min(p.digit_bits, p.key_width))

    # ------------------------------------------------------------------ geometry
    @property
    def digits(self) -> int:
        """Digits of a key, ``G = ceil(W / b)``: one histogram pass each."""
        return _cdiv(self.key_width, self.digit_bits)

    @property
    def padded_width(self) -> int:
        """Key bits after padding to whole digits (``G b``)."""
        return self.digits * self.digit_bits

    @property
    def buckets(self) -> int:
        """Values of a digit, ``2^b``."""
        return 1 << self.digit_bits

    @property
    def counters(self) -> int:
        """Histogram counters built, ``2^b - 1``: counter ``g`` counts the keys still in the
        running whose digit is ``>= g`` (every key is ``>= 0``, so ``g = 0`` needs none)."""
        return self.buckets - 1

    @property
    def max_rows(self) -> int:
        """Rows of the key buffer (``ceil(max_n / P)``): a whole Stage I job."""
        return _cdiv(self.max_n, self.lanes)

    @property
    def row_bits(self) -> int:
        """Bits of one buffer row: ``P`` (key, index) pairs."""
        return self.lanes * (self.key_width + self.index_width)

    @property
    def latency(self) -> int:
        """Fixed part of every job's cycle count, ``4 G + 4`` (see the module docstring)."""
        return self.LOAD_TAIL + (self.digits - 1) * self.SCAN_TAIL + self.EMIT_TAIL

    # ------------------------------------------------------------------ jobs
    def check_stage1(self, n: int, k: int) -> None:
        """Raise :class:`ParamError` unless ``1 <= n <= max_n`` and ``1 <= k <= max_k``."""
        check_job_arg("n (Stage I count)", n, 1, self.max_n)
        check_job_arg("k", k, 1, self.max_k)

    def rows(self, n: int) -> int:
        """Rows ``D`` of a job of ``n`` keys."""
        return _cdiv(n, self.lanes)

    def stage1_cycles(self, n: int, k: int) -> int:
        """Cycles of a Stage I job, top ``k`` of ``n`` keys: ``(G + 1) D + 4 G + 4``."""
        self.check_stage1(n, k)
        return (self.digits + 1) * self.rows(n) + self.latency

    def stage1_passes(self, n: int, k: int) -> int:
        """Passes over the ``D`` rows: the load pass, ``G - 1`` digit passes, the emit pass."""
        self.check_stage1(n, k)
        return self.digits + 1

    # ------------------------------------------------------------------ activity
    def stage1_compares(self, n: int, k: int) -> int:
        """Key-wide (``W``-bit) comparisons of a Stage I job: per row of every histogram pass
        ``P`` prefix matches, per row of the emit pass ``2 P`` (greater, equal). Data
        independent; the digit compares are :meth:`stage1_digit_compares`."""
        self.check_stage1(n, k)
        d = self.rows(n)
        return d * self.digits * self.lanes + d * 2 * self.lanes

    def stage1_digit_compares(self, n: int, k: int) -> int:
        """Digit-wide (``b``-bit) comparisons of a Stage I job: per row of every histogram
        pass ``P (2^b - 1)`` (each lane's digit against every counter's bucket)."""
        self.check_stage1(n, k)
        return self.rows(n) * self.digits * self.lanes * self.counters

    def output_beats(self, selected: int) -> int:
        """Output beats of a job selecting ``selected`` keys (dense, last beat partial)."""
        return _cdiv(selected, self.lanes)

    def memory_bits(self) -> dict[str, int]:
        """Bits of the on-chip buffer (an SRAM macro in the area flow when large enough)."""
        return {"keys": self.max_rows * self.row_bits}

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description of the geometry (for reports)."""
        return {"lanes": self.lanes, "key_width": self.key_width,
                "index_width": self.index_width, "digit_bits": self.digit_bits,
                "digits": self.digits, "counters": self.counters,
                "max_rows": self.max_rows, "row_bits": self.row_bits,
                "latency": self.latency, "memory_bits": self.memory_bits(),
                "memory_bits_total": sum(self.memory_bits().values())}


def _job(params: SorterParams, mode: str, n: int, k: int, what: str) -> int:
    if mode != "stage1":
        raise ParamError(f"top-k engine mode = {mode!r}: it runs 'stage1' jobs only")
    t = TopKTiming.from_params(params)
    return 0 if n == 0 else getattr(t, what)(int(n), int(k))


def topk_cycles(params: SorterParams, mode: str, *, n: int = 0, k: int = 0, d: int = 0,
                count: int = 0) -> int:
    """Cycles of one Stage I job in the cost model's calling convention
    (:func:`hikv.hw.sorter_timing.sorter_cycles`): top ``k`` of ``n`` keys; an empty job
    (``n`` zero) takes 0 cycles. ``mode`` must be ``"stage1"``; ``d`` and ``count`` are
    accepted for the convention's sake and must be zero."""
    if d or count:
        raise ParamError(f"top-k engine job: d = {d} and count = {count} are Stage II "
                         "arguments; the engine runs Stage I only")
    return _job(params, mode, n, k, "stage1_cycles")


def topk_compares(params: SorterParams, mode: str, *, n: int = 0, k: int = 0) -> int:
    """Key-wide comparisons of one Stage I job (:meth:`TopKTiming.stage1_compares`)."""
    return _job(params, mode, n, k, "stage1_compares")


def topk_digit_compares(params: SorterParams, mode: str, *, n: int = 0, k: int = 0) -> int:
    """Digit-wide comparisons of one Stage I job (:meth:`TopKTiming.stage1_digit_compares`)."""
    return _job(params, mode, n, k, "stage1_digit_compares")
