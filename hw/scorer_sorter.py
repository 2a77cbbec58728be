"""Scoring unit and sorter chained: stored low-bit keys in, the Stage I selection out.

``qcfg`` (the query and the first token's index) configures the scoring unit, ``scfg`` the
sorter (a Stage I job: ``k``, ``count = n``); the unit's output beats (``L`` sorter keys with
their indices per cycle) are the sorter's input beats, so the scoring unit has as many lanes as
the sorter (``scorer.lanes == sorter.lanes``, as the presets set it). ``o`` carries the top
``k`` (key, index) in ascending index order; ``sorter_error`` is the sorter's sticky error.

Cycles of a job (first token beat in to last selection beat out, no backpressure) are the
sorter's Stage I cycles plus the scoring unit's latency:
``SorterTiming.stage1_cycles(n, k) + ScorerTiming.latency`` (:func:`chain_cycles`).
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hikv.params import Config, ParamError

from .scorer import Scorer, ScorerGeometry
from .scorer_timing import ScorerTiming
from .sorter import Sorter
from .sorter_timing import SorterTiming

__all__ = ["ScorerSorter", "chain_cycles", "make_scorer_sorter"]


def chain_cycles(cfg: Config, n: int, k: int) -> int:
    """Cycles of one chained Stage I job of ``n`` tokens, top ``k``."""
    return (SorterTiming.from_params(cfg.sorter).stage1_cycles(n, k)
            + ScorerTiming(cfg.scorer).latency)


class ScorerSorter(wiring.Component):
    """One scoring unit feeding one sorter (see the module docstring).

    Members
    -------
    qcfg : ``In(stream.Signature(ScorerGeometry.config_layout()))``
    i : ``In(stream.Signature(ScorerGeometry.input_layout()))``
    scfg : ``In(stream.Signature(Sorter.cfg_layout))``
    o : ``Out(stream.Signature(Sorter.io_layout))``
    sorter_error : ``Out(1)``
    """

    def __init__(self, cfg: Config) -> None:
        if cfg.scorer.lanes != cfg.sorter.lanes:
            raise ParamError(f"scorer.lanes = {cfg.scorer.lanes} must equal sorter.lanes = "
                             f"{cfg.sorter.lanes} to chain the scoring unit into the sorter")
        self._scorer = Scorer(ScorerGeometry.of(cfg))
        self._sorter = Sorter(cfg.sorter)
        super().__init__({
            "qcfg": In(stream.Signature(self._scorer.geometry.config_layout())),
            "i": In(stream.Signature(self._scorer.geometry.input_layout())),
            "scfg": In(stream.Signature(self._sorter.cfg_layout)),
            "o": Out(stream.Signature(self._sorter.io_layout)),
            "sorter_error": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.scorer = scorer = self._scorer
        m.submodules.sorter = sorter = self._sorter
        wiring.connect(m, wiring.flipped(self.qcfg), scorer.cfg)
        wiring.connect(m, wiring.flipped(self.i), scorer.i)
        wiring.connect(m, wiring.flipped(self.scfg), sorter.cfg)
        wiring.connect(m, scorer.o, sorter.i)
        wiring.connect(m, sorter.o, wiring.flipped(self.o))
        m.d.comb += self.sorter_error.eq(sorter.error)
        return m


def make_scorer_sorter(cfg: Config) -> ScorerSorter:
    """The chained block of a configuration (``hikv verilog --block scorer_sorter``)."""
    return ScorerSorter(cfg)
