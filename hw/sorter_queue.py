"""A FIFO of rows with a look-ahead head, pop, and drop-``n``: the sorter's run and row buffers."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .uops import is_zero, uadd, uge, ult, usub

__all__ = ["RowQueue"]


class RowQueue(wiring.Component):
    """First-in first-out queue in one simple dual-port memory (one write, one read port).

    The head row is visible (``r_valid``/``r_data``) from the cycle after it was written,
    without a pop: the read port is synchronous and reads the address the head will have next
    cycle, transparently to a write in the same cycle. ``skip`` drops that many rows after the
    popped one, at once for rows already stored and on arrival for rows still to come
    (``r_valid`` stays low until they are gone).

    Parameters
    ----------
    width : int
        Bits per row.
    depth : int
        Rows (at least 2).

    Members
    -------
    w_en, w_data : In
        Write a row (only while ``w_rdy``).
    w_rdy : Out
        Not full.
    r_valid, r_data : Out
        The head row.
    pop : In
        Remove the head (only while ``r_valid``).
    skip : In
        Drop this many rows after the popped one (on the stored ones now, the rest on arrival).
    level : Out
        Rows stored (including rows still to be dropped).
    idle : Out
        Empty and nothing left to drop.
    """

    def __init__(self, *, width: int, depth: int) -> None:
        if not isinstance(width, int) or width < 1:
            raise TypeError(f"RowQueue width must be a positive integer, not {width!r}")
        if not isinstance(depth, int) or depth < 2:
            raise TypeError(f"RowQueue depth must be an integer >= 2, not {depth!r}")
        self._width = width
        self._depth = depth
        super().__init__({
            "w_en": In(1), "w_data": In(width), "w_rdy": Out(1),
            "r_valid": Out(1), "r_data": Out(width), "pop": In(1),
            "skip": In(range(depth + 1)),
            "level": Out(range(depth + 1)), "idle": Out(1),
        })

    @property
    def width(self) -> int:
        return self._width

    @property
    def depth(self) -> int:
        return self._depth

    def elaborate(self, platform: object) -> Module:
        m = Module()
        depth = self._depth
        m.submodules.mem = mem = Memory(shape=unsigned(self._width), depth=depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=(wp,))

        count = Signal(range(depth + 1))
        drop = Signal(range(depth + 1))
        rd_ptr = Signal(range(depth))
        wr_ptr = Signal(range(depth))

        def wrap(v):
            return Mux(uge(v, depth), usub(v, depth), v)[:len(rd_ptr)]

        m.d.comb += [
            self.w_rdy.eq(ult(count, depth)),
            self.r_valid.eq(~is_zero(count) & is_zero(drop)),
            self.r_data.eq(rp.data),
            self.level.eq(count),
            self.idle.eq(is_zero(count) & is_zero(drop)),
            wp.en.eq(self.w_en),
            wp.addr.eq(wr_ptr),
            wp.data.eq(self.w_data),
        ]
        with m.If(self.w_en):
            m.d.sync += wr_ptr.eq(wrap(uadd(wr_ptr, 1)))

        want = Signal(range(2 * depth + 1))
        avail = Signal(range(depth + 1))
        dropped = Signal(range(depth + 1))
        step = Signal(range(depth + 2))
        rd_next = Signal(range(depth))
        m.d.comb += [
            want.eq(uadd(drop, self.skip)),
            avail.eq(Mux(self.pop, usub(count, 1), count)),
            dropped.eq(Mux(ult(want, avail), want, avail)),
            step.eq(Mux(self.pop, uadd(dropped, 1), dropped)),
            rd_next.eq(wrap(uadd(rd_ptr, step))),
            rp.addr.eq(rd_next),
        ]
        m.d.sync += [
            rd_ptr.eq(rd_next),
            count.eq(usub(Mux(self.w_en, uadd(count, 1), count), step)),
            drop.eq(usub(want, dropped)),
        ]
        return m
