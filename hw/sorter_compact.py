"""Output compaction: selected items of each row packed into dense output beats."""

from __future__ import annotations

from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .sorter_net import compact_dist, compact_left, shift_up, wires
from .uops import is_zero, popcount, uadd, ugt, usub

__all__ = ["Compactor", "lanes_layout", "select_prefix"]


def lanes_layout(lanes: int, key_width: int, index_width: int) -> data.StructLayout:
    """``P`` lanes of (key, index), a per-lane valid mask and a last flag (in and out beats)."""
    lane = data.StructLayout({"key": key_width, "index": index_width})
    return data.StructLayout({"lanes": data.ArrayLayout(lane, lanes), "valid": lanes,
                              "last": 1})


def select_prefix(m: Module, sel: Sequence[Value],
                  name: str = "pack") -> tuple[list[Value], Signal]:
    """The half of the compaction that sits before the register in front of a :class:`Compactor`.

    Per lane the number of unselected lanes below it (:func:`compact_dist`, a ``log P``-level
    parallel prefix count) and the number of selected lanes (a popcount), the ``dist`` and
    ``count`` fields of the compactor's input. Returns (dist, count).
    """
    p = len(sel)
    dist = compact_dist(m, sel, name)
    count = Signal(range(p + 1), name=f"{name}_count")
    m.d.comb += count.eq(popcount(sel))
    return dist, count


class Compactor(wiring.Component):
    """Packs the selected items of a stream of rows into beats of ``P`` items, in order.

    Input rows carry ``P`` composite items ``{valid, key, ~index}``, a selection mask, per lane
    the number of unselected lanes below it and the number of selected lanes (``dist`` and
    ``count``, which must equal :func:`select_prefix` of ``sel``: it runs before the input
    register, so this cycle holds no prefix count) and the segment's ``last`` flag. Each row's
    selected items are moved to its low lanes (:func:`compact_left`'s ``log P`` multiplexer
    stages), appended behind the items carried over (a barrel shift by the residual count,
    ``ceil(log2(P + 1))`` stages, then one multiplexer per lane picking residual or shifted
    item), and a full beat leaves when ``P`` items are ready.

    Output beats are full (``valid`` all ones) except the last beat of each segment, which
    holds the remaining 1 to ``P`` items in its low lanes and has ``last`` set. The last beat
    leaves one cycle after the segment's last row, whatever the data (so the job's timing does
    not depend on where the selected items are); the first row of the next segment is taken in
    that same cycle. Every segment must select at least one item.

    Members
    -------
    i : ``In(stream.Signature(StructLayout({"row", "sel", "dist", "count", "last"})))``
    o : ``Out(stream.Signature(lanes_layout(...)))``
    idle : Out
    """

    def __init__(self, *, lanes: int, key_width: int, index_width: int) -> None:
        self._lanes, self._kw, self._iw = lanes, key_width, index_width
        self._width = 1 + key_width + index_width
        self.in_layout = data.StructLayout({
            "row": data.ArrayLayout(self._width, lanes), "sel": lanes,
            "dist": data.ArrayLayout(range(lanes + 1), lanes), "count": range(lanes + 1),
            "last": 1})
        self.out_layout = lanes_layout(lanes, key_width, index_width)
        super().__init__({"i": In(stream.Signature(self.in_layout)),
                          "o": Out(stream.Signature(self.out_layout)), "idle": Out(1)})

    def _beat(self, items: list[Value], count: Value, last: Value) -> Value:
        p, kw, iw = self._lanes, self._kw, self._iw
        lanes = [Cat(it[iw:iw + kw], ~it[:iw]) for it in items]  # key low, index high
        mask = ((Const(1, p + 1) << count) - 1)[:p]
        return Cat(*lanes, mask, last)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p, w = self._lanes, self._width
        row = data.ArrayLayout(w, p)
        res = Signal(row, reset_less=True)          # items carried over, low lanes
        r_cnt = Signal(range(p + 1))
        flush = Signal()                            # emit the residual as the segment's end
        o_valid = Signal()
        o_data = Signal(self.out_layout, reset_less=True)

        can = Signal()
        m.d.comb += [can.eq(~o_valid | self.o.ready), self.i.ready.eq(can),
                     self.o.valid.eq(o_valid), self.o.payload.eq(o_data),
                     self.idle.eq(~o_valid & ~flush & is_zero(r_cnt))]

        items = [self.i.payload.row[i] for i in range(p)]
        sel = [self.i.payload.sel[i] for i in range(p)]
        dist = [self.i.payload.dist[i] for i in range(p)]
        packed, _ = compact_left(m, items, sel, dist=dist)
        n = self.i.payload.count
        base = Signal(range(p + 1))
        m.d.comb += base.eq(Mux(flush, 0, r_cnt))
        zero = Const(0, w)
        shifted = shift_up(m, packed, base, 2 * p, zero)
        combined = wires(m, [Mux(ugt(base, q), res[q], shifted[q]) if q < p else shifted[q]
                             for q in range(2 * p)], "combined")
        total = Signal(range(2 * p + 1))
        m.d.comb += total.eq(uadd(base, Mux(self.i.valid, n, 0)))
        emit_full = Signal()
        # after a flush the base is 0 and a row alone never overflows: the flush only gates
        # the comparison, which reads the residual count register directly
        m.d.comb += emit_full.eq(self.i.valid & ~flush & ugt(uadd(r_cnt, n), p))

        with m.If(can):
            with m.If(flush):
                m.d.sync += [o_data.eq(self._beat([res[q] for q in range(p)], r_cnt, 1)),
                             o_valid.eq(1), flush.eq(0), r_cnt.eq(0)]
            with m.Elif(emit_full):
                m.d.sync += [o_data.eq(self._beat(combined[:p], Const(p), 0)), o_valid.eq(1)]
            with m.Else():
                m.d.sync += o_valid.eq(0)
            with m.If(self.i.valid):
                m.d.sync += [
                    res.eq(Mux(emit_full, Cat(*combined[p:]), Cat(*combined[:p]))),
                    r_cnt.eq(Mux(emit_full, usub(total, p), total)),
                ]
                with m.If(self.i.payload.last):
                    m.d.sync += flush.eq(1)
        return m
