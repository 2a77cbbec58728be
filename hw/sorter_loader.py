"""Sorter and loader chained: token scores in, packed K or V vectors of the selected tokens out.

``scores`` (the sorter's input beats: ``P`` lanes of (key, index), valid mask, last) go to the
sorter's Stage I (configured on ``scfg``); its output beats (the top ``k`` in ascending index
order, ``P`` per beat, the last beat partly valid) are split into one token per cycle by
:class:`LaneSplitter` and feed the loader (configured on ``cfg``), which reads the tokens'
records and delivers their vectors on ``o``. The loader's ``axi``, ``status`` and ``stats``
ports are passed through; ``sorter_error`` is the sorter's sticky error. Port names other than
the sorter's match :class:`~hikv.hw.loader.KVLoader`, so the loader testbench drives both.
"""

from __future__ import annotations

from amaranth.hdl import Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hikv.params import Config, ParamError

from .loader import KVLoader
from .loader_ports import (
    axi_read_signature,
    config_layout,
    output_layout,
    stats_signature,
    status_signature,
    token_layout,
)
from .loader_timing import LoaderGeometry
from .sorter import Sorter
from .uops import is_zero, lowest, onehot

__all__ = ["LaneSplitter", "SorterLoader", "make_sorter_loader"]


class LaneSplitter(wiring.Component):
    """Sorter output beats (``P`` lanes, valid lanes first) to one (index, last) per cycle.

    A beat is taken when the previous one's last valid lane leaves (in that same cycle), so a
    full beat streams ``P`` tokens in ``P`` cycles; ``last`` goes with the beat's last valid
    lane when the beat has ``last``.
    """

    def __init__(self, sorter: Sorter, geo: LoaderGeometry) -> None:
        self._lanes = sorter.params.lanes
        super().__init__({
            "i": In(stream.Signature(sorter.io_layout)),
            "o": Out(stream.Signature(token_layout(geo))),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._lanes
        idx = [Signal(len(self.i.payload.lanes[0].index), name=f"idx{j}") for j in range(p)]
        rem = Signal(p)
        last = Signal()
        lo = lowest(m, rem, "lane")
        lane_oh = onehot(m, lo[:max(1, (p - 1).bit_length())], p, "lane_oh")
        rem_next = rem & ~lane_oh
        fire = self.o.valid & self.o.ready
        take = self.i.valid & (is_zero(rem) | (fire & is_zero(rem_next)))
        sel = Const(0, len(idx[0]))
        for j in range(p):
            sel = sel | (lane_oh[j].replicate(len(idx[0])) & idx[j])
        m.d.comb += [
            self.o.valid.eq(rem.any()),
            self.o.payload.index.eq(sel),
            self.o.payload.last.eq(last & is_zero(rem_next)),
            self.i.ready.eq(is_zero(rem) | (fire & is_zero(rem_next))),
        ]
        with m.If(take):
            m.d.sync += [rem.eq(self.i.payload.valid), last.eq(self.i.payload.last)]
            m.d.sync += [idx[j].eq(self.i.payload.lanes[j].index) for j in range(p)]
        with m.Elif(fire):
            m.d.sync += rem.eq(rem_next)
        return m


class SorterLoader(wiring.Component):
    """One sorter and one loader, chained (see the module docstring)."""

    def __init__(self, cfg: Config) -> None:
        if cfg.sorter.max_n > cfg.loader.max_tokens:
            raise ParamError(f"sorter.max_n = {cfg.sorter.max_n} exceeds loader.max_tokens = "
                             f"{cfg.loader.max_tokens}: Stage I indices would not fit the loader")
        geo = LoaderGeometry(cfg.layout, cfg.loader)
        self._sorter = Sorter(cfg.sorter)
        self._loader = KVLoader(geo)
        super().__init__({
            "scfg": In(stream.Signature(self._sorter.cfg_layout)),
            "scores": In(stream.Signature(self._sorter.io_layout)),
            "cfg": In(stream.Signature(config_layout(geo))),
            "o": Out(stream.Signature(output_layout(geo))),
            "axi": Out(axi_read_signature(geo)),
            "status": Out(status_signature(geo)),
            "stats": Out(stats_signature()),
            "sorter_error": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.sorter = sorter = self._sorter
        m.submodules.loader = loader = self._loader
        m.submodules.split = split = LaneSplitter(sorter, loader.geometry)
        wiring.connect(m, wiring.flipped(self.scfg), sorter.cfg)
        wiring.connect(m, wiring.flipped(self.scores), sorter.i)
        wiring.connect(m, sorter.o, split.i)
        wiring.connect(m, split.o, loader.tokens)
        wiring.connect(m, wiring.flipped(self.cfg), loader.cfg)
        wiring.connect(m, loader.o, wiring.flipped(self.o))
        wiring.connect(m, loader.axi, wiring.flipped(self.axi))
        wiring.connect(m, loader.status, wiring.flipped(self.status))
        wiring.connect(m, loader.stats, wiring.flipped(self.stats))
        m.d.comb += self.sorter_error.eq(sorter.error)
        return m


def make_sorter_loader(cfg: Config) -> SorterLoader:
    """The chained block of a configuration (``hikv verilog --block sorter_loader``)."""
    return SorterLoader(cfg)
