"""Geometry and timing contract of the reconfigurable importance sorter (standard library only).

This module is what the cost model imports: it needs neither Amaranth nor torch. The RTL
(:mod:`hikv.hw.sorter`) takes every size it builds (tree levels, queue depths, ring depth,
pipeline depth) from :class:`SorterTiming`, so the formulas below and the hardware cannot drift
apart; the cocotb regression checks the formulas against the simulated RTL job by job.

Definitions
-----------
``P`` lanes, a *row* is one beat of ``P`` items. A job's *segment* is the unit whose top-k is
taken: the whole stream in Stage I (``n`` items), one vector in Stage II (``d`` items). A segment
of ``m`` items occupies ``D = ceil(m / P)`` rows.

**Cycles of a job** = ``t_last - t_first + 1`` where ``t_first`` is the clock cycle in which the
first input beat of the job is accepted (``i.valid & i.ready``) and ``t_last`` the cycle in which
the last output beat of the job is accepted (``o.valid & o.ready``), measured with the input
offered every cycle and the output always ready (no backpressure). The configuration beat may be
accepted any time before; idle cycles before the first input beat do not count.

Formulas (exact for the RTL, no data dependence)::

    Stage I  (n items, top k):     D = ceil(n/P)
        L  = min(max(Lmin, ceil(log2(ceil(k/P)))), ceil(log2(D)))   tree levels used
        K  = 2**L                                                rows of the running top-K list
        cycles = D + K*(ceil(D/K) - 1) + K + floor((min(k,n) - 1)/P) + latency
    Stage II (count vectors of d, top r each):   D = ceil(d/P)
        L  = ceil(log2(D)),  K = 2**L
        cycles = count*D + K + floor((min(r,d) - 1)/P) + latency
        steady state: one vector every D cycles (``stage2_interval``)
    latency = S + (2 + M)*levels + 5 + M,   S = log2(P)*(log2(P)+1)/2 pre-sorter stages,
        M = log2(P) pipelined bitonic-merge stages per merge engine,
        Lmin = max(1, ceil(log2(2 + M)))   (the reducer's list round trip fits in K rows)

In words: the first pass accepts one row per cycle while a merge tree sorts runs of ``K`` rows
and a reducer keeps the running top ``K*P``; ``K`` cycles after the last run starts, the
reducer emits the ``min(k, n)``-th best item, which becomes the selection threshold; the second
pass re-reads the ``D`` buffered rows in arrival order. When ``D`` is a multiple of ``K`` the
Stage I count is ``2*D + floor((k-1)/P) + latency`` = ``2N/P + k/P + latency``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hikv.params import ParamError, SorterParams

__all__ = ["SorterTiming", "ceil_log2", "check_job_arg", "sorter_cycles", "sorter_compares"]


def ceil_log2(n: int) -> int:
    """``ceil(log2(n))`` for ``n >= 1`` (0 for 1)."""
    if n < 1:
        raise ValueError(f"ceil_log2 needs n >= 1, not {n}")
    return (n - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def check_job_arg(name: str, value: Any, lo: int, hi: int) -> None:
    """A sorter job's argument ``name``: an integer in ``[lo, hi]`` (:class:`ParamError`
    naming it otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"sorter job {name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ParamError(f"sorter job {name} = {value} is out of range: allowed [{lo}, {hi}]")


@dataclass(frozen=True)
class SorterTiming:
    """Sizes and cycle formulas of the sorter built from :class:`~hikv.params.SorterParams`.

    Build it with :meth:`from_params`. Every attribute is a pure function of the parameters.
    """

    lanes: int
    key_width: int
    index_width: int
    max_n: int
    max_k: int
    max_vec: int
    count_width: int

    @classmethod
    def from_params(cls, p: SorterParams) -> SorterTiming:
        return cls(lanes=p.lanes, key_width=p.key_width, index_width=p.index_width,
                   max_n=p.max_n, max_k=p.max_k, max_vec=p.max_vec, count_width=p.count_width)

    # ------------------------------------------------------------------ geometry
    @property
    def log_lanes(self) -> int:
        return ceil_log2(self.lanes)

    @property
    def item_width(self) -> int:
        """Bits of one item inside the sorter: ``{valid, key, ~index}`` (compared unsigned)."""
        return 1 + self.key_width + self.index_width

    @property
    def presort_stages(self) -> int:
        """Pipeline stages (registers) of the P-lane bitonic row sorter: ``S``."""
        p = self.log_lanes
        return p * (p + 1) // 2

    @property
    def merge_pipeline(self) -> int:
        """Pipeline stages of a merge engine after its selector: the ``log P`` bitonic-merge
        stages (the selector's register is the stage every engine always had)."""
        return self.log_lanes

    @property
    def min_run_levels(self) -> int:
        """Fewest tree levels a Stage I job with several runs uses: the reducer re-reads row
        ``t`` of its list ``K`` cycles after writing it, and a written row needs
        ``2 + merge_pipeline`` cycles to come back, so ``K = 2**L >= 2 + merge_pipeline``."""
        return max(1, ceil_log2(2 + self.merge_pipeline))

    @property
    def k_levels_max(self) -> int:
        """Tree levels Stage I can use: runs of ``2**levels`` rows hold ``max_k`` items."""
        return max(self.min_run_levels, ceil_log2(_cdiv(self.max_k, self.lanes)))

    @property
    def vec_levels_max(self) -> int:
        """Tree levels Stage II can use: one run holds a whole vector of ``max_vec``."""
        return ceil_log2(_cdiv(self.max_vec, self.lanes))

    @property
    def levels(self) -> int:
        """Merge-tree levels built: level ``j`` merges pairs of sorted runs of ``2**j`` rows."""
        return max(1, self.k_levels_max, self.vec_levels_max)

    @property
    def list_rows_max(self) -> int:
        """Rows of the reducer's running top-K list at most (``K``)."""
        return 1 << self.k_levels_max

    def level_queue_rows(self, level: int) -> int:
        """Depth of each of the two run queues of tree level ``level``."""
        return (1 << level) + 2

    @property
    def reducer_run_rows(self) -> int:
        """Depth of the reducer's new-run queue."""
        return self.list_rows_max + 2

    @property
    def reducer_list_rows(self) -> int:
        """Depth of the reducer's list queue (old list being read + new list being written)."""
        return 2 * self.list_rows_max + 2

    @property
    def max_rows(self) -> int:
        """Rows of the longest Stage I job (``ceil(max_n / P)``)."""
        return _cdiv(self.max_n, self.lanes)

    @property
    def vec_rows_max(self) -> int:
        return _cdiv(self.max_vec, self.lanes)

    @property
    def ring_rows(self) -> int:
        """Depth of the input row buffer re-read by the second pass.

        A whole Stage I job must fit; in Stage II a row waits ``latency + K + D`` cycles at most
        between its arrival and its re-read, so that many rows keep one vector per ``D`` cycles.
        """
        stage2 = self.latency + (1 << self.vec_levels_max) + self.vec_rows_max
        return max(self.max_rows, stage2)

    @property
    def latency(self) -> int:
        """Fixed part of every job's cycle count: ``S + (2 + M)*levels + 5 + M``.

        ``S`` pre-sorter stages, ``2 + M`` cycles per tree level (queue write, merge step,
        ``M = merge_pipeline`` bitonic-merge stages), and ``5 + M`` for the reducer
        (``2 + M``), the threshold hand-over (1), the select register (1) and the compactor's
        final flush (1).
        """
        mp = self.merge_pipeline
        return self.presort_stages + (2 + mp) * self.levels + 5 + mp

    # ------------------------------------------------------------------ jobs
    def check_stage1(self, n: int, k: int) -> None:
        """Raise :class:`ParamError` unless ``1 <= n <= max_n`` and ``1 <= k <= max_k``."""
        check_job_arg("n (Stage I count)", n, 1, self.max_n)
        check_job_arg("k", k, 1, self.max_k)

    def check_stage2(self, count: int, d: int, r: int) -> None:
        """Raise :class:`ParamError` unless the Stage II job fits the parameters."""
        check_job_arg("count (Stage II vectors)", count, 1, (1 << self.count_width) - 1)
        check_job_arg("d (vector length)", d, 1, self.max_vec)
        check_job_arg("r", r, 1, self.max_vec)

    def segment_rows(self, items: int) -> int:
        """Rows ``D`` of a segment of ``items`` items."""
        return _cdiv(items, self.lanes)

    def stage1_levels(self, n: int, k: int) -> int:
        """Tree levels a Stage I job uses (``L``); the rest pass rows through."""
        d = self.segment_rows(n)
        return min(max(self.min_run_levels, ceil_log2(_cdiv(k, self.lanes))), ceil_log2(d))

    def stage2_levels(self, d: int) -> int:
        return ceil_log2(self.segment_rows(d))

    def stage1_cycles(self, n: int, k: int) -> int:
        """Cycles of a Stage I job: top ``k`` of ``n`` items (see the module docstring)."""
        self.check_stage1(n, k)
        d = self.segment_rows(n)
        kr = 1 << self.stage1_levels(n, k)
        first_pass = d + kr * (_cdiv(d, kr) - 1)
        return first_pass + kr + (min(k, n) - 1) // self.lanes + self.latency

    def stage2_cycles(self, count: int, d: int, r: int) -> int:
        """Cycles of a Stage II job: top ``r`` of each of ``count`` vectors of ``d`` items."""
        self.check_stage2(count, d, r)
        rows = self.segment_rows(d)
        kr = 1 << self.stage2_levels(d)
        return count * rows + kr + (min(r, d) - 1) // self.lanes + self.latency

    # ------------------------------------------------------------------ activity
    @property
    def merge_units(self) -> int:
        """Comparators of one merge engine: ``P`` in the selector and ``P/2 log P`` in its
        pipelined bitonic merge of the ``P`` selected items: ``P (1 + log P / 2)``."""
        return self.lanes + self.lanes // 2 * self.log_lanes

    def _compares(self, rows: int, reducer_steps: int) -> int:
        # every row passes the pre-sorter, one step of every tree level (used or bypassed;
        # each step evaluates the P selector comparators and the P log P bitonic-merge units)
        # and the P threshold comparators of the second pass; the reducer steps
        # min(K, a + b) per run
        presort = rows * (self.lanes // 2) * self.presort_stages
        tree = rows * self.levels * self.merge_units
        return presort + tree + reducer_steps * self.merge_units + rows * self.lanes

    def stage1_compares(self, n: int, k: int) -> int:
        """Comparator evaluations of a Stage I job (every unit evaluates once per step; the
        count does not depend on the data)."""
        self.check_stage1(n, k)
        d = self.segment_rows(n)
        kr = 1 << self.stage1_levels(n, k)
        return self._compares(d, min(kr, d) + kr * (_cdiv(d, kr) - 1))

    def stage2_compares(self, count: int, d: int, r: int) -> int:
        """Comparator evaluations of a Stage II job (see :meth:`stage1_compares`)."""
        self.check_stage2(count, d, r)
        rows = count * self.segment_rows(d)
        return self._compares(rows, rows)

    def stage2_interval(self, d: int) -> int:
        """Steady-state cycles per Stage II vector: ``ceil(d / P)``."""
        check_job_arg("d (vector length)", d, 1, self.max_vec)
        return self.segment_rows(d)

    def output_beats(self, selected: int) -> int:
        """Output beats of one segment with ``selected`` items (dense, last beat partial)."""
        return _cdiv(selected, self.lanes)

    def memory_bits(self) -> dict[str, int]:
        """Bits of every on-chip buffer, by name (SRAM in an ASIC; see docs/sorter.md)."""
        row = self.lanes * self.item_width
        out = {"ring": self.ring_rows * (row + 1)}
        for j in range(self.levels):
            out[f"level{j}"] = 2 * self.level_queue_rows(j) * row
        out["reducer_run"] = self.reducer_run_rows * row
        out["reducer_list"] = self.reducer_list_rows * row
        out["threshold"] = 4 * self.item_width
        return out

    def comparators(self) -> dict[str, int]:
        """Compare-exchange units (``item_width`` bits each) per sub-block."""
        p, lg = self.lanes, self.log_lanes
        merge = p + p // 2 * lg  # P-lane selector (half-cleaner) + P-input bitonic merge
        return {"presort": p // 2 * self.presort_stages, "tree": self.levels * merge,
                "reducer": merge, "select": p}

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description of the geometry (for reports)."""
        return {"lanes": self.lanes, "key_width": self.key_width,
                "index_width": self.index_width, "item_width": self.item_width,
                "presort_stages": self.presort_stages, "levels": self.levels,
                "list_rows_max": self.list_rows_max, "ring_rows": self.ring_rows,
                "latency": self.latency, "memory_bits": self.memory_bits(),
                "memory_bits_total": sum(self.memory_bits().values()),
                "comparators": self.comparators()}



def _job(params: SorterParams, mode: str, n: int, k: int, d: int, count: int,
         stage1: str, stage2: str) -> int:
    t = SorterTiming.from_params(params)
    if mode == "stage1":
        return 0 if n == 0 else getattr(t, stage1)(int(n), int(k))
    if mode == "stage2":
        return 0 if count == 0 else getattr(t, stage2)(int(count), int(d), int(k))
    raise ParamError(f"sorter mode = {mode!r} is not one of ('stage1', 'stage2')")


def sorter_cycles(params: SorterParams, mode: str, *, n: int = 0, k: int = 0, d: int = 0,
                  count: int = 0) -> int:
    """Cycles of one job in the cost model's calling convention (``hikv.sim.cost.timing``).

    ``mode="stage1"``: top ``k`` of ``n`` keys; ``mode="stage2"``: ``count`` vectors of ``d``
    keys, top ``k`` (= r) of each. An empty job (``n`` or ``count`` zero) takes 0 cycles.
    Scalars only; vectorise with ``numpy.vectorize`` (``excluded={0, 1}``).
    """
    return _job(params, mode, n, k, d, count, "stage1_cycles", "stage2_cycles")


def sorter_compares(params: SorterParams, mode: str, *, n: int = 0, k: int = 0, d: int = 0,
                    count: int = 0) -> int:
    """Comparator evaluations of one job, same convention as :func:`sorter_cycles`."""
    return _job(params, mode, n, k, d, count, "stage1_compares", "stage2_compares")
