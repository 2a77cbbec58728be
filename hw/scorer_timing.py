"""Timing contract of the low-bit scoring unit (standard library only).

The cost model imports this module (no Amaranth, no torch); the RTL (:mod:`hikv.hw.scorer`)
takes its pipeline depth from :data:`SCORER_STAGES`, and the cocotb regression checks
:meth:`ScorerTiming.cycles` against the simulated RTL job by job.

Definitions
-----------
``L`` lanes: one input beat carries ``L`` tokens (the last beat of a job ``1..L``). A job of
``n`` tokens takes ``B = ceil(n / L)`` beats.

**Cycles of a job** = ``t_last - t_first + 1``: ``t_first`` the cycle in which the job's first
input beat is accepted (``i.valid & i.ready``), ``t_last`` the cycle in which its last output
beat is accepted (``o.valid & o.ready``), with the input offered every cycle and the output
always ready. The configuration beat (the query) may be accepted any time before and does not
count::

    cycles(n) = ceil(n / L) + latency,     latency = SCORER_STAGES = 11

(stages 1-3, :data:`SCORER_DOT_STAGES`: the integer dot products ``D`` and the query sum ``Q``,
a 3:2 compressor tree over two stages and a carry-select adder; 4-6: the exact score ``S =
step * D + lo * Q`` and ``-S`` in carry-save form (products, shifts and signs, reduction);
7-8: both added by carry-select adders, ``|S|``; 9-11: fp16 rounding (leading one; the kept
bits, guard and sticky; the rounded pattern) and the sorter key, the output register). Every
stage is cut so that no carry chain in it is longer than about 12 bits: the unit meets 1 GHz
at 28 nm on the kit's ASIC estimate (docs/timing.md). The unit accepts one beat per cycle in
steady state, so back-to-back jobs overlap: a job costs ``ceil(n / L)`` cycles of throughput.
Backpressure stalls the whole pipeline (a global stall), so it only adds cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

from hikv.params import ParamError, ScorerParams

__all__ = ["SCORER_DOT_STAGES", "SCORER_STAGES", "ScorerTiming"]

#: stages of the integer dot products D (3:2 compressor tree, then a carry-select adder)
SCORER_DOT_STAGES = 3
#: pipeline registers between an accepted input beat and its output beat
SCORER_STAGES = SCORER_DOT_STAGES + 8


@dataclass(frozen=True)
class ScorerTiming:
    """Cycle formulas of one scoring unit with ``params.lanes`` lanes."""

    params: ScorerParams

    @property
    def lanes(self) -> int:
        return self.params.lanes

    @property
    def latency(self) -> int:
        """Cycles from accepting a beat to presenting its scores (``o.valid``)."""
        return SCORER_STAGES

    def beats(self, n: int) -> int:
        """Input (and output) beats of a job of ``n`` tokens."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ParamError(f"scorer job tokens n = {n!r} is out of range: allowed >= 1")
        return -(-n // self.lanes)

    def cycles(self, n: int) -> int:
        """Cycles of one job of ``n`` tokens, first input beat to last output beat."""
        return self.beats(n) + self.latency

    def throughput_cycles(self, n: int) -> int:
        """Cycles a job of ``n`` tokens occupies the unit when jobs stream back to back."""
        return self.beats(n)
