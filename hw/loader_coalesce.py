"""The loader's request side: burst-block ranges to AXI4 INCR read requests.

See :class:`Coalescer`; the function is :func:`hikv.model.loader_ref.axi_requests`, checked in
tests/test_loader_units.py.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .loader_ports import range_layout, request_layout
from .loader_timing import AXI_BOUNDARY, LoaderGeometry
from .uops import add_w, is_zero, log2_int, sub_w, ult, zext

__all__ = ["Coalescer"]


class Coalescer(wiring.Component):
    """Burst-block ranges (ascending) to AXI INCR requests, as :func:`axi_requests` cuts them.

    Keeps the current run as the next byte address to request (``addr``) and the run's end. A
    range whose first block is at most one past the run's end extends it; any other range
    closes the run, which is then requested to its end before the range starts a new one. A
    request of ``min(max_burst_beats * beat, 4 KiB - addr % 4 KiB)`` bytes is issued as soon as
    the run reaches that far (its length cannot change any more); the remainder when the run
    closes. One range and one request per cycle.

    Parameters
    ----------
    geo : LoaderGeometry
        Layout and loader parameters (all widths).

    Members
    -------
    start : ``In(1)``
        Begin a job (one cycle): forget the previous run.
    ranges : ``In(stream.Signature(range_layout(geo)))``
        Burst-block ranges in ascending order, then one ``end``.
    requests : ``Out(stream.Signature(request_layout(geo)))``
        AXI requests (byte address, beats), in address order.
    done : ``Out(1)``
        After the ``end`` range, once everything is requested.
    """

    def __init__(self, geo: LoaderGeometry) -> None:
        if not isinstance(geo, LoaderGeometry):
            raise TypeError(f"Coalescer needs a LoaderGeometry, not {geo!r}")
        self._geo = geo
        super().__init__({
            "start": In(1),
            "ranges": In(stream.Signature(range_layout(geo))),
            "requests": Out(stream.Signature(request_layout(geo))),
            "done": Out(1),
        })

    @property
    def geometry(self) -> LoaderGeometry:
        return self._geo

    def elaborate(self, platform: object) -> Module:
        m = Module()
        g = self._geo
        aw = g.loader.addr_width
        bl, bbl = g.burst_shift, g.beat_shift
        max_req = g.max_request_bytes
        w = aw + 1                                   # byte addresses up to 2**aw inclusive
        cw = max(max_req, AXI_BOUNDARY).bit_length()

        addr = Signal(w, name="coal_addr")
        run_end = Signal(w, name="coal_run_end")
        have = Signal(name="coal_have")
        ending = Signal(name="coal_ending")

        # the next request: up to the run's end, the longest request, the next 4 KiB line
        pending = Signal(w, name="coal_pending")
        rem4k = Signal(cw, name="coal_rem4k")
        cap = Signal(cw, name="coal_cap")
        n = Signal(cw, name="coal_n")
        m.d.comb += [
            pending.eq(sub_w(run_end, addr, w)),
            rem4k.eq(sub_w(Const(AXI_BOUNDARY), addr[:log2_int(AXI_BOUNDARY)], cw)),
            cap.eq(Mux(ult(rem4k, Const(max_req)), rem4k, zext(Const(max_req), cw))),
            n.eq(Mux(ult(pending, cap), pending[:cw], cap)),
        ]
        head = self.ranges.payload
        hstart = Signal(w, name="coal_hstart")
        hend = Signal(w, name="coal_hend")
        m.d.comb += [hstart.eq(zext(Cat(Const(0, bl), head.b0), w)),
                     hend.eq(zext(Cat(Const(0, bl), add_w(head.b1, 1, len(head.b1) + 1)), w))]
        adj = have & ~ult(run_end, hstart)
        eager = have & ~ult(pending, cap)
        closing = (ending | (self.ranges.valid & ~head.end & ~adj)) & pending.any()

        req = self.requests.payload
        m.d.comb += [
            self.requests.valid.eq(eager | closing),
            req.addr.eq(addr[:aw]),
            req.beats.eq(n[bbl:]),
            self.ranges.ready.eq(~ending & (head.end | adj | is_zero(pending))),
            self.done.eq(ending & is_zero(pending)),
        ]
        with m.If(self.requests.valid & self.requests.ready):
            m.d.sync += addr.eq(add_w(addr, n, w))
        with m.If(self.ranges.valid & self.ranges.ready):
            with m.If(head.end):
                m.d.sync += ending.eq(1)
            with m.Elif(adj):
                with m.If(ult(run_end, hend)):
                    m.d.sync += run_end.eq(hend)
            with m.Else():
                m.d.sync += [addr.eq(hstart), run_end.eq(hend), have.eq(1)]
        with m.If(self.start):
            m.d.sync += [addr.eq(0), run_end.eq(0), have.eq(0), ending.eq(0)]
        return m
