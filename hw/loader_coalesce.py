"""The loader's request side: burst-block ranges to AXI4 INCR read requests.

See :class:`Coalescer`; the function is :func:`hikv.model.refs.loader.axi_requests`, checked in
tests/test_loader_units.py.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hikv.params import ParamError

from .loader_ports import range_layout, request_layout
from .loader_timing import AXI_BOUNDARY, LoaderGeometry
from .uops import add_cs, add_w, is_zero, log2_int, sub_cs, ult, ult_cs, zext

__all__ = ["Coalescer"]


class Coalescer(wiring.Component):
    """Burst-block ranges (ascending) to AXI INCR requests, as :func:`axi_requests` cuts them.

    Keeps the current run as the next byte address to request (``addr``) and the run's end. A
    range whose first block is at most one past the run's end extends it; any other range
    closes the run, which is then requested to its end before the range starts a new one. A
    request of ``min(max_burst_beats * beat, 4 KiB - addr % 4 KiB)`` bytes is issued as soon as
    the run reaches that far (its length cannot change any more); the remainder when the run
    closes. One range and one request per cycle.

    Timing: the state is kept in burst units with the run's remaining length
    (``left``, ``run_end - 1 - addr``) and ``addr + longest request`` in registers beside the
    address, so the three comparisons that choose the request (remaining run, rest of the 4 KiB
    line, longest request) read registers only, and every next value (address, remaining run,
    run end) is one adder from registers, selected late by those comparisons. The cycle
    behaviour is that of the plain recurrence ``addr += min(run_end - addr, cap(addr))``.

    Parameters
    ----------
    geo : LoaderGeometry
        Address width, burst, beat and longest-request sizes.

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
        aw, bl, bbl = g.loader.addr_width, g.burst_shift, g.beat_shift
        if bl > log2_int(AXI_BOUNDARY):
            raise ParamError(f"burst_bytes = {g.layout.burst_bytes} is larger than the AXI "
                             f"4 KiB boundary ({AXI_BOUNDARY} B)")
        w = aw + 1 - bl                 # burst addresses up to 2**aw bytes inclusive
        k = log2_int(AXI_BOUNDARY) - bl  # bursts per 4 KiB line: 2**k
        line = 1 << k
        big = min(g.max_request_bytes >> bl, line)   # the longest request that fits a line
        qw = w + 1                      # q = run_end - 1 - addr, two's complement (-1: empty)

        # state (burst units): a = next burst to request, e = the run's end (exclusive),
        # q = e - 1 - a, am = a + big; ~a[:k] = bursts left in a's 4 KiB line, minus one
        a = Signal(w, name="coal_addr")
        am = Signal(w, name="coal_addr_big")
        e = Signal(w, name="coal_run_end")
        q = Signal(qw, name="coal_left", init=(1 << qw) - 1)
        have = Signal(name="coal_have")
        ending = Signal(name="coal_ending")

        head = self.ranges.payload
        b0, b1 = zext(head.b0, w), zext(head.b1, w)
        a_lo, a_hi = a[:k], a[k:]
        rem_m1 = ~a_lo                                   # 4 KiB line remainder - 1 (k bits)
        # every comparison reads registers only (none follows an adder of the loop)
        empty = q[-1]                                    # q = -1: nothing left in the run
        q_small = is_zero(q[k:])
        lt_rem = empty | (q_small & ult(q[:k], rem_m1))  # left < line remainder
        lt_big = empty | (q_small & ult(q[:k], Const(big - 1, k)))   # left < big
        rem_lt_big = ult(rem_m1, Const(big - 1, k))      # line remainder < big
        sel_left = lt_rem & lt_big                       # the request takes the whole run
        sel_line = ~sel_left & rem_lt_big                # ... the rest of the 4 KiB line
        adj = have & ~ult_cs(e, b0, w)                   # the range continues the run
        grows = ~ult_cs(b1, e, w)                        # ... and ends after it

        # the request's length (bursts) and beats
        n = Signal(k + 1, name="coal_n")
        m.d.comb += n.eq(Mux(sel_left, add_w(q[:k + 1], 1, k + 1),
                             Mux(sel_line, add_w(rem_m1, 1, k + 1), Const(big, k + 1))))
        eager = have & ~sel_left
        closing = (ending | (self.ranges.valid & ~head.end & ~adj)) & ~empty
        req = self.requests.payload
        m.d.comb += [
            self.requests.valid.eq(eager | closing),
            req.addr.eq(Cat(Const(0, bl), a)[:aw]),
            req.beats.eq(Cat(Const(0, bl - bbl), n)),
            self.ranges.ready.eq(~ending & (head.end | adj | empty)),
            self.done.eq(ending & empty),
        ]

        # candidates, each one adder from registers; the compares above only select
        fire = self.requests.valid & self.requests.ready
        take = self.ranges.valid & self.ranges.ready & ~head.end
        hi_w = w - k
        a_line = Cat(Const(0, k), add_w(a_hi, 1, hi_w))             # a + line remainder
        big_lo, big_hi = big % line, big // line
        line_big = Cat(Const(big_lo, k), add_w(a_hi, 1 + big_hi, hi_w))   # a_line + big
        a_next = Mux(sel_left, e, Mux(sel_line, a_line, am))
        am_next = Mux(sel_left, add_w(e, big, w), Mux(sel_line, line_big, add_w(am, big, w)))
        # the remaining-run candidates: carry-select adders (the longest paths of the block)
        b1_line = Cat(b1[:k], add_cs(zext(b1[k:], qw - k), ~zext(a_hi, qw - k), qw - k))
        q_fire = Mux(sel_left, Const((1 << qw) - 1, qw),
                     Mux(sel_line, add_cs(q, ~zext(rem_m1, qw), qw), sub_cs(q, big, qw)))
        q_grow = Mux(fire, Mux(sel_left, sub_cs(b1, e, qw),
                               Mux(sel_line, b1_line, sub_cs(b1, am, qw))),
                     sub_cs(b1, a, qw))
        with m.If(take & ~adj):                          # a new run (nothing is pending)
            m.d.sync += [a.eq(b0), am.eq(add_w(b0, big, w)), e.eq(add_w(b1, 1, w)),
                         q.eq(sub_cs(b1, b0, qw)), have.eq(1)]
        with m.Else():
            with m.If(fire):
                m.d.sync += [a.eq(a_next), am.eq(am_next), q.eq(q_fire)]
            with m.If(take & grows):                     # the range extends the run
                m.d.sync += [e.eq(add_w(b1, 1, w)), q.eq(q_grow)]
        with m.If(self.ranges.valid & self.ranges.ready & head.end):
            m.d.sync += ending.eq(1)
        with m.If(self.start):
            m.d.sync += [a.eq(0), am.eq(big), e.eq(0), q.eq((1 << qw) - 1), have.eq(0),
                         ending.eq(0)]
        return m
