"""A FIFO of rows with a look-ahead head, pop, and drop-``n``: the sorter's run and row buffers."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .uops import is_zero, uadd, ueq, uge, ult, usub

__all__ = ["LaneQueue", "RowQueue", "late_select"]


def late_select(sel, pop1, pop0, popped, kept):
    """``popped if (pop1 if sel else pop0) else kept``, written so that ``sel`` (a comparator
    result, the latest signal) drives the last multiplexer: ``pop1``/``pop0`` are the pop for
    either comparator outcome, prepared from registers."""
    return Mux(sel, Mux(pop1, popped, kept), Mux(pop0, popped, kept))


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
    skip : bool
        Build the ``skip`` input (default). Without it the queue only pops, and the read
        pointer's successor is kept in a register, so ``pop`` only selects the next pointer
        and count (no adder after it): the sorter's ring buffer and threshold queue, the
        loader's entry and in-flight queues.
    head_register : bool
        Only without ``skip``: the head row is a register of its own, loaded from an
        asynchronous read of the row after it (or from ``w_data`` when that row is being
        written), so ``r_data`` comes straight from flip-flops and ``pop`` only selects the
        register's next value, instead of addressing the read port (for a memory of
        flip-flops that is a registered address and a ``depth``-way multiplexer before
        ``r_data``). Same cycles; one row of flip-flops more, and the memory is never an
        SRAM macro (its read is asynchronous). Default off.

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
        Drop this many rows after the popped one (on the stored ones now, the rest on arrival);
        only with ``skip=True``.
    level : Out
        Rows stored (including rows still to be dropped).
    idle : Out
        Empty and nothing left to drop.
    """

    def __init__(self, *, width: int, depth: int, skip: bool = True,
                 head_register: bool = False) -> None:
        if not isinstance(width, int) or width < 1:
            raise TypeError(f"RowQueue width must be a positive integer, not {width!r}")
        if not isinstance(depth, int) or depth < 2:
            raise TypeError(f"RowQueue depth must be an integer >= 2, not {depth!r}")
        self._width = width
        self._depth = depth
        self._skip = bool(skip)
        if head_register and self._skip:
            raise TypeError("RowQueue head_register needs skip=False")
        self._head_register = bool(head_register)
        ports = {
            "w_en": In(1), "w_data": In(width), "w_rdy": Out(1),
            "r_valid": Out(1), "r_data": Out(width), "pop": In(1),
            "level": Out(range(depth + 1)), "idle": Out(1),
        }
        if self._skip:
            ports["skip"] = In(range(depth + 1))
        super().__init__(ports)

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
        if self._head_register:
            rp = mem.read_port(domain="comb")
        else:
            rp = mem.read_port(transparent_for=(wp,))

        count = Signal(range(depth + 1))
        head = Signal(self._width, name="head") if self._head_register else None
        drop = Signal(range(depth + 1))
        rd_ptr = Signal(range(depth))
        wr_ptr = Signal(range(depth))

        def wrap(v):
            return Mux(uge(v, depth), usub(v, depth), v)[:len(rd_ptr)]

        m.d.comb += [
            self.w_rdy.eq(ult(count, depth)),
            self.r_valid.eq(~is_zero(count) & is_zero(drop)),
            # (here, not in each branch: the statement order keeps the Verilog text, and with
            # it the synthesis cache keys, of the queues built before head_register existed)
            self.r_data.eq(head if self._head_register else rp.data),
            self.level.eq(count),
            self.idle.eq(is_zero(count) & is_zero(drop)),
            wp.en.eq(self.w_en),
            wp.addr.eq(wr_ptr),
            wp.data.eq(self.w_data),
        ]
        with m.If(self.w_en):
            m.d.sync += wr_ptr.eq(wrap(uadd(wr_ptr, 1)))
        if not self._skip:
            return self._pop_only(m, rp, rd_ptr, wr_ptr, count, wrap, head)

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

    def _pop_only(self, m: Module, rp: object, rd_ptr: Signal, wr_ptr: Signal,
                  count: Signal, wrap: object, head: Signal | None) -> Module:
        rd1 = Signal(range(self._depth), init=1)       # wrap(rd_ptr + 1)
        if self._head_register:
            # the head next cycle: the row after it on a pop (stored, or written now when the
            # queue holds one row), else the head (or the row written now into an empty queue)
            assert head is not None
            after = Mux(self.w_en & ueq(wr_ptr, rd1), self.w_data, rp.data)
            here = Mux(is_zero(count), self.w_data, head)
            m.d.comb += rp.addr.eq(rd1)
            m.d.sync += head.eq(Mux(self.pop, after, here))
        else:
            m.d.comb += rp.addr.eq(Mux(self.pop, rd1, rd_ptr))
        m.d.sync += [
            rd_ptr.eq(Mux(self.pop, rd1, rd_ptr)),
            rd1.eq(Mux(self.pop, wrap(uadd(rd1, 1)), rd1)),
            # w_en and pop both arrive late: they select among count - 1, count, count + 1
            count.eq(Mux(self.pop ^ self.w_en, Mux(self.pop, usub(count, 1), uadd(count, 1)),
                         count)),
        ]
        return m


class LaneQueue(wiring.Component):
    """A FIFO of rows whose ``lanes`` columns are read independently: the merge engine's input.

    Rows are written whole (one write port); each lane has its own read pointer and count, so
    lane ``j`` is a FIFO of the items ``j, j + P, j + 2P, ...`` of the stream of rows. One
    memory of ``lanes * width`` bits per row with one read port per lane (an SRAM macro of the
    same capacity as a :class:`RowQueue`; small ones become flip-flops). Lane ``j``'s head is
    visible from the cycle after it was written (synchronous, transparent read).

    ``pop[j]`` removes lane ``j``'s head; it is given as ``pop_sel[j] ? pop1[j] : pop0[j]``
    (``pop_sel`` the engine's comparator, ``pop1``/``pop0`` the pop for either outcome) so that
    the comparator drives the last multiplexer before the pointer and count registers
    (:func:`late_select`). ``end`` removes ``amt[j]`` items from every lane ``j``
    at once (the rest of a merge pair; never in the same cycle as a ``pop``; items still to
    arrive are dropped on arrival: the count goes negative). ``amt`` comes from registers in
    the engine, and every next read pointer and count is computed from registers, so the
    engine's pop (after its comparators) only selects among them.

    Members
    -------
    w_en, w_data : In
        Write a row (only while ``w_rdy``).
    w_rdy : Out
        No lane is full.
    r_valid : Out(lanes)
        Lane heads present.
    r_data : Out(lanes * width)
        Lane heads (lane ``j`` in bits ``[j*width, (j+1)*width)``).
    pop_sel, pop1, pop0 : In(lanes)
    end : In(1)
    amt : In(ArrayLayout(range(depth + 1), lanes))
    idle : Out
        Every lane empty, nothing left to drop.
    """

    def __init__(self, *, lanes: int, width: int, depth: int) -> None:
        for name, v, lo in (("lanes", lanes, 1), ("width", width, 1), ("depth", depth, 2)):
            if not isinstance(v, int) or v < lo:
                raise TypeError(f"LaneQueue {name} must be an integer >= {lo}, not {v!r}")
        self._lanes, self._width, self._depth = lanes, width, depth
        from amaranth.lib import data

        super().__init__({
            "w_en": In(1), "w_data": In(lanes * width), "w_rdy": Out(1),
            "r_valid": Out(lanes), "r_data": Out(lanes * width),
            "pop_sel": In(lanes), "pop1": In(lanes), "pop0": In(lanes),
            "end": In(1), "amt": In(data.ArrayLayout(range(depth + 1), lanes)),
            "idle": Out(1),
        })

    @property
    def depth(self) -> int:
        return self._depth

    def elaborate(self, platform: object) -> Module:
        from amaranth.hdl import Cat

        m = Module()
        p, w, depth = self._lanes, self._width, self._depth
        m.submodules.mem = mem = Memory(shape=unsigned(p * w), depth=depth, init=[])
        wp = mem.write_port()
        wr_ptr = Signal(range(depth))
        m.d.comb += [wp.en.eq(self.w_en), wp.addr.eq(wr_ptr), wp.data.eq(self.w_data)]
        with m.If(self.w_en):
            m.d.sync += wr_ptr.eq(Mux(uge(uadd(wr_ptr, 1), depth), 0, uadd(wr_ptr, 1)))
        cw = (depth + 1).bit_length() + 1
        fulls, empties = [], []

        def wrap(v):
            return Mux(uge(v, depth), usub(v, depth), v)

        for j in range(p):
            rp = mem.read_port(transparent_for=(wp,))
            # the read pointer and its successor are registers, and every next value of the
            # pointer and the count is computed from registers before the pop is known: the
            # engine's pop (after its comparator) only selects among them
            rd = Signal(range(depth), name=f"rd{j}")
            rd1 = Signal(range(depth), name=f"rd1_{j}", init=1)
            # two's complement in cw bits (negative: rows to drop on arrival), unsigned ops
            count = Signal(cw, name=f"count{j}")
            r_amt = Signal(range(depth), name=f"rd_amt{j}")
            r_amt1 = Signal(range(depth), name=f"rd1_amt{j}")
            r_inc1 = Signal(range(depth), name=f"rd1_inc{j}")
            rd_next = Signal(range(depth), name=f"rd_next{j}")
            c_inc = Signal(cw, name=f"count_inc{j}")
            c_dec = Signal(cw, name=f"count_dec{j}")
            c_end = Signal(cw, name=f"count_end{j}")
            c_end1 = Signal(cw, name=f"count_end1_{j}")
            m.d.comb += [
                r_amt.eq(wrap(uadd(rd, self.amt[j]))[:len(rd)]),
                r_amt1.eq(wrap(uadd(rd1, self.amt[j]))[:len(rd)]),
                r_inc1.eq(wrap(uadd(rd1, 1))[:len(rd)]),
                c_inc.eq(uadd(count, 1)[:cw]),
                c_dec.eq(usub(count, 1)[:cw]),
                c_end.eq(usub(count, self.amt[j])[:cw]),
                c_end1.eq(usub(uadd(count, 1), self.amt[j])[:cw]),
                # pop and end never come together: the pop (latest) selects last
                rd_next.eq(late_select(self.pop_sel[j], self.pop1[j], self.pop0[j], rd1,
                                       Mux(self.end, r_amt, rd))),
                rp.addr.eq(rd_next),
                self.r_valid[j].eq(~count[cw - 1] & ~is_zero(count)),
                self.r_data[j * w:(j + 1) * w].eq(rp.data[j * w:(j + 1) * w]),
            ]
            m.d.sync += [rd.eq(rd_next),
                         rd1.eq(late_select(self.pop_sel[j], self.pop1[j], self.pop0[j],
                                            r_inc1, Mux(self.end, r_amt1, rd1))),
                         # w_en, pop and end arrive late: they select among values computed
                         # from registers
                         count.eq(late_select(self.pop_sel[j], self.pop1[j], self.pop0[j],
                                              Mux(self.w_en, count, c_dec),
                                              Mux(self.end, Mux(self.w_en, c_end1, c_end),
                                                  Mux(self.w_en, c_inc, count))))]
            # "not full" is a register of its own, so the writer's ready (and the producer's
            # stall behind it) starts at a flip-flop instead of a compare of the count and an
            # AND over the lanes (same cycles). Its next value is chosen by the same late
            # selects as the count's, among flags of registers: with 0 <= count <= depth
            # (or negative), count + 1 fills the lane only from depth - 1, a pop or an end
            # of amt >= 1 never does, count + 1 - amt only with amt <= 1
            at_full = Signal(name=f"at_full{j}")
            at_edge = Signal(name=f"at_edge{j}")       # count >= depth - 1
            amt0 = Signal(name=f"amt0_{j}")
            amt1 = Signal(name=f"amt1_{j}")
            m.d.comb += [at_full.eq(ueq(count, depth)),
                         at_edge.eq(at_full | ueq(count, depth - 1)),
                         amt0.eq(is_zero(self.amt[j])), amt1.eq(ueq(self.amt[j], 1))]
            rdy = Signal(name=f"w_rdy{j}", init=1)
            m.d.sync += rdy.eq(late_select(
                self.pop_sel[j], self.pop1[j], self.pop0[j],
                ~(self.w_en & at_full),                                  # count or count - 1
                Mux(self.end,
                    ~Mux(self.w_en, (amt0 & at_edge) | (amt1 & at_full), amt0 & at_full),
                    ~Mux(self.w_en, at_edge, at_full))))
            fulls.append(rdy)
            empties.append(is_zero(count))
        m.d.comb += [self.w_rdy.eq(Cat(*fulls).all()), self.idle.eq(Cat(*empties).all())]
        return m
