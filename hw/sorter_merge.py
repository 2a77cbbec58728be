"""Merging sorted runs of rows: the merge engine, one merge-tree level, and the top-K reducer.

A *run* is a sequence of rows whose items are sorted descending across the whole run (lane 0
of the first row is the largest). All three blocks use the same *merge engine*
(:class:`MergeEngine`): it merges a run ``A`` and a run ``B`` one output row per cycle from two
lane queues, with one comparator per lane in its feedback loop and a pipelined bitonic merge
after it. Merging ``a`` and ``b`` rows takes exactly ``a + b`` steps, whatever the data.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .sorter_net import apply_stage, bitonic_merge_network, wires
from .sorter_queue import LaneQueue, RowQueue, late_select
from .uops import is_zero, uadd, ueq, uge, ugt, ule, usub

__all__ = ["MergeEngine", "MergeLevel", "Reducer"]


def _row(width: int, lanes: int) -> data.ArrayLayout:
    return data.ArrayLayout(width, lanes)


class MergeEngine(wiring.Component):
    """Merges pairs of descending runs ``A`` and ``B`` read lane by lane from two lane queues.

    A pair is described before it starts by ``pair_a`` and ``pair_b`` (rows of each run, at
    least one of them non-zero) and ``pair_m`` (output rows, ``1 <= m <= a + b``; fewer than
    ``a + b`` truncates the merge to its top ``m`` rows and drops the rest of both runs through
    the queues' ``end``). ``pair_tag`` travels with the output rows of the pair.

    **Loop-free merge** (the FLiMS selector, Papaphilippou et al., 2019). Run ``A``'s items sit
    in ``P`` lane FIFOs, item ``i`` in lane ``i mod P`` (a row queue read per lane); same for
    ``B``. Each step, comparator ``i`` compares the heads of ``A``'s lane ``i`` and ``B``'s
    lane ``P-1-i`` and takes the larger one (an exhausted lane is minus infinity): because
    exactly ``P`` items leave per step, the ``P`` heads of ``A`` are always its next ``P`` items
    and comparator ``i`` always pairs ``A``'s ``u``-th next item with ``B``'s ``(P-1-u)``-th,
    which is the half-cleaner of a two-row bitonic merge. So the ``P`` items taken are the top
    ``P`` of what is left, as a cyclically rotated bitonic sequence, and ``log P`` pipelined
    bitonic-merge stages sort them *outside* the loop. The per-step recurrence is one
    comparator, the pop and the queue's read pointer: no register ``X`` and no merge network
    in the feedback path.

    The pair descriptor is taken into registers ahead of the pair (``pair_ready`` pulses when it
    is taken, normally while the previous pair runs); ``flush`` drops a descriptor taken ahead
    (a new job's sizes). One step per cycle while the pipeline advances (global stall when the
    output is held); a step waits for the lane heads it may take. Output rows leave
    ``latency`` cycles after their step with the step number within the pair and the tag.

    Parameters
    ----------
    lanes, width : int
        Row geometry (``lanes`` a power of two).
    max_a, max_b, max_m : int
        Largest ``pair_a``, ``pair_b``, ``pair_m``.
    """

    def __init__(self, *, lanes: int, width: int, max_a: int, max_b: int, max_m: int) -> None:
        for name, v in (("lanes", lanes), ("width", width), ("max_a", max_a),
                        ("max_b", max_b), ("max_m", max_m)):
            if not isinstance(v, int) or v < 1:
                raise TypeError(f"MergeEngine {name} must be a positive integer, not {v!r}")
        self._lanes, self._width = lanes, width
        self._max_a, self._max_b, self._max_m = max_a, max_b, max_m
        row = _row(width, lanes)
        self.out_layout = data.StructLayout({"row": row, "step": range(max(2, max_m)),
                                             "tag": 1})
        super().__init__({
            "a_valid": In(lanes), "a_data": In(row),
            "a_pop_sel": Out(lanes), "a_pop1": Out(lanes), "a_pop0": Out(lanes), "a_end": Out(1),
            "a_amt": Out(data.ArrayLayout(range(max_a + 1), lanes)),
            "b_valid": In(lanes), "b_data": In(row),
            "b_pop_sel": Out(lanes), "b_pop1": Out(lanes), "b_pop0": Out(lanes), "b_end": Out(1),
            "b_amt": Out(data.ArrayLayout(range(max_b + 1), lanes)),
            "pair_valid": In(1), "pair_a": In(range(max_a + 1)), "pair_b": In(range(max_b + 1)),
            "pair_m": In(range(max_m + 1)), "pair_tag": In(1), "pair_ready": Out(1),
            "flush": In(1),
            "o": Out(stream.Signature(self.out_layout)),
            "busy": Out(1),
            "active": Out(1),
        })

    @property
    def latency(self) -> int:
        """Cycles from a step to its output row on ``o``: ``1 + log2(lanes)``."""
        return 1 + len(bitonic_merge_network(self._lanes))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p, w = self._lanes, self._width
        stages = bitonic_merge_network(p)

        busy = Signal()
        # cur_*: what is left of the pair in progress (busy) or the next pair's sizes (idle),
        # kept in registers so that no multiplexer on ``busy`` precedes the queues' ``amt``
        # and the end-of-pair test
        cur_a = [Signal(range(self._max_a + 1), name=f"cur_a{j}") for j in range(p)]
        cur_b = [Signal(range(self._max_b + 1), name=f"cur_b{j}") for j in range(p)]
        cur_m = Signal(range(self._max_m + 1))
        idx = Signal(range(max(2, self._max_m)))
        tag = Signal()

        # output pipeline: stage 0 holds the selected items, stages 1.. the bitonic merge
        nst = len(stages) + 1
        pv = [Signal(name=f"pv{s}") for s in range(nst)]
        prow = [Signal(_row(w, p), name=f"prow{s}", reset_less=True) for s in range(nst)]
        pmeta = [Signal(data.StructLayout({"step": range(max(2, self._max_m)), "tag": 1}),
                        name=f"pmeta{s}", reset_less=True) for s in range(nst)]
        adv = Signal()
        m.d.comb += adv.eq(~pv[-1] | self.o.ready)

        # the next pair's descriptor waits in registers (taken while the previous pair runs),
        # so the first step of a pair reads no arithmetic of the pair's producer
        nv = Signal()
        na_r = Signal(range(self._max_a + 1))
        nb_r = Signal(range(self._max_b + 1))
        nm_r = Signal(range(self._max_m + 1))
        ntag = Signal()

        a_items = [self.a_data[i] for i in range(p)]
        b_items = [self.b_data[i] for i in range(p)]
        ha = wires(m, [~is_zero(c) for c in cur_a], "ha")
        hb = wires(m, [~is_zero(c) for c in cur_b], "hb")
        ok = Signal()
        m.d.comb += ok.eq(Cat(*[(~ha[j] | self.a_valid[j]) & (~hb[j] | self.b_valid[j])
                                for j in range(p)]).all())
        fire = Signal()
        m.d.comb += fire.eq(adv & ok & (busy | nv))
        done = Signal()
        m.d.comb += done.eq(ueq(cur_m, 1))

        taken = Signal()
        load = Signal()
        m.d.comb += [taken.eq(fire & ~busy),
                     load.eq(self.pair_valid & ~self.flush & (~nv | taken))]
        with m.If(self.flush):
            m.d.sync += nv.eq(0)
        with m.Elif(load):
            m.d.sync += [nv.eq(1), na_r.eq(self.pair_a), nb_r.eq(self.pair_b),
                         nm_r.eq(self.pair_m), ntag.eq(self.pair_tag)]
        with m.Elif(taken):
            m.d.sync += nv.eq(0)
        # the next pair's sizes as they will be after this cycle
        na_n = Mux(load, self.pair_a, na_r)
        nb_n = Mux(load, self.pair_b, nb_r)
        nm_n = Mux(load, self.pair_m, nm_r)

        # pops: the comparator's result only selects between two values prepared from the
        # registers (both runs have items: ``ge``; only one: that one; take_a = ha & (~hb | ge),
        # take_b = hb & ~take_a)
        fd = Signal()
        m.d.comb += fd.eq(fire & ~done)
        take_a, take_b, sel = [], [], []
        ges: list = [None] * p
        pre_a: list = [None] * p
        pre_b: list = [None] * p
        zero = Const(0, w)
        for i in range(p):
            jb = p - 1 - i
            ge = Signal(name=f"sel{i}_ge")
            m.d.comb += ge.eq(a_items[i] >= b_items[jb])
            pa1, pa0, pb1, pb0 = wires(m, [fd & ha[i], fd & ha[i] & ~hb[jb],
                                           fd & hb[jb] & ~ha[i], fd & hb[jb]], f"sel{i}_pre")
            ges[i] = ge
            pre_a[i], pre_b[jb] = (pa1, pa0), (pb1, pb0)
            ta, tb = wires(m, [ha[i] & (~hb[jb] | ge), hb[jb] & ~(ha[i] & (~hb[jb] | ge))],
                           f"sel{i}_take")
            take_a.append(ta)
            take_b.append(tb)
            (it,) = wires(m, [Mux(ta, a_items[i], Mux(tb, b_items[jb], zero))], f"sel{i}_item")
            sel.append(it)

        m.d.comb += [
            self.a_pop_sel.eq(Cat(*ges)),
            self.a_pop1.eq(Cat(*[pre_a[j][0] for j in range(p)])),
            self.a_pop0.eq(Cat(*[pre_a[j][1] for j in range(p)])),
            self.b_pop_sel.eq(Cat(*[ges[p - 1 - j] for j in range(p)])),
            self.b_pop1.eq(Cat(*[pre_b[j][0] for j in range(p)])),
            self.b_pop0.eq(Cat(*[pre_b[j][1] for j in range(p)])),
            self.a_end.eq(fire & done),
            self.b_end.eq(fire & done),
            self.pair_ready.eq(load),
            self.o.valid.eq(pv[-1]),
            self.o.payload.row.eq(prow[-1]),
            self.o.payload.step.eq(pmeta[-1].step),
            self.o.payload.tag.eq(pmeta[-1].tag),
            self.busy.eq(busy),
            self.active.eq(busy | Cat(*pv).any()),
        ]
        for j in range(p):
            m.d.comb += [self.a_amt[j].eq(cur_a[j]), self.b_amt[j].eq(cur_b[j])]
        # the sizes reload with the next pair's at the end of a pair and while idle; a pop
        # (late) only selects the decrement
        reload = Signal()
        m.d.comb += reload.eq((fire & done) | (~fire & ~busy))
        m.d.sync += cur_m.eq(Mux(fd, usub(cur_m, 1), Mux(reload, nm_n, cur_m)))
        for j in range(p):
            jb = p - 1 - j
            m.d.sync += [
                cur_a[j].eq(late_select(ges[j], *pre_a[j], usub(cur_a[j], 1),
                                        Mux(reload, na_n, cur_a[j]))),
                cur_b[j].eq(late_select(ges[jb], *pre_b[j], usub(cur_b[j], 1),
                                        Mux(reload, nb_n, cur_b[j]))),
            ]
        with m.If(fire):
            m.d.sync += [
                busy.eq(~done),
                idx.eq(Mux(busy, uadd(idx, 1), 1)),
            ]
            with m.If(~busy):
                m.d.sync += tag.eq(ntag)
        merged = [apply_stage(m, [prow[s][i] for i in range(p)], stage, f"bm{s}")
                  for s, stage in enumerate(stages)]
        with m.If(adv):
            m.d.sync += [pv[0].eq(fire), prow[0].eq(Cat(*sel)),
                         pmeta[0].step.eq(Mux(busy, idx, 0)),
                         pmeta[0].tag.eq(Mux(busy, tag, ntag))]
            for s, items in enumerate(merged):
                m.d.sync += [pv[s + 1].eq(pv[s]), prow[s + 1].eq(Cat(*items)),
                             pmeta[s + 1].eq(pmeta[s])]
        return m


def _connect_queue(m: Module, q: LaneQueue, e: MergeEngine, side: str) -> None:
    m.d.comb += [
        getattr(e, f"{side}_valid").eq(q.r_valid),
        getattr(e, f"{side}_data").eq(q.r_data),
        q.pop_sel.eq(getattr(e, f"{side}_pop_sel")),
        q.pop1.eq(getattr(e, f"{side}_pop1")),
        q.pop0.eq(getattr(e, f"{side}_pop0")),
        q.end.eq(getattr(e, f"{side}_end")),
    ]
    amt = getattr(e, f"{side}_amt")
    m.d.comb += [q.amt[j].eq(amt[j]) for j in range(len(q.r_valid))]


class MergeLevel(wiring.Component):
    """Level ``j`` of the merge tree: merges consecutive pairs of runs of ``R = 2**j`` rows.

    Rows arrive as a stream of segments of ``seg_rows`` rows each (a segment is sorted into runs
    independently of its neighbours). Within a segment, rows ``[2qR, 2qR + R)`` form run ``A``
    and ``[2qR + R, 2qR + 2R)`` run ``B`` of pair ``q`` (the last pair may be short or have no
    ``B``), so the level's output is the segment sorted into runs of ``2R`` rows. With ``used``
    low the level passes rows through unchanged (each row is a run of its own). With gapless
    input, every row leaves ``R + 2 + log P`` cycles (used) or ``2 + log P`` cycles (unused) after
    it arrived.

    Members
    -------
    i, o : row streams.
    seg_rows : In
        Rows per segment (constant during a job).
    used : In
        Merge (1) or pass rows through (0).
    start : In
        A job's configuration was accepted (``seg_rows``/``used`` hold the new job's values
        from this cycle or the previous one): drop the pair descriptor fetched ahead and
        restart at the segment's first row. No row of the job may arrive before the cycle
        after ``start``.
    idle : Out
        Nothing stored, nothing in flight.
    """

    def __init__(self, *, lanes: int, width: int, level: int, max_seg_rows: int) -> None:
        if not isinstance(level, int) or level < 0:
            raise TypeError(f"MergeLevel level must be a non-negative integer, not {level!r}")
        self._lanes, self._width, self._level = lanes, width, level
        self._max_seg_rows = max_seg_rows
        row = _row(width, lanes)
        super().__init__({
            "i": In(stream.Signature(row)), "o": Out(stream.Signature(row)),
            "seg_rows": In(range(max_seg_rows + 1)), "used": In(1), "start": In(1),
            "idle": Out(1),
        })

    @property
    def run_rows(self) -> int:
        return 1 << self._level

    @property
    def queue_rows(self) -> int:
        return self.run_rows + 2

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p, w, j = self._lanes, self._width, self._level
        r = self.run_rows
        m.submodules.qa = qa = LaneQueue(lanes=p, width=w, depth=self.queue_rows)
        m.submodules.qb = qb = LaneQueue(lanes=p, width=w, depth=self.queue_rows)
        m.submodules.engine = eng = MergeEngine(lanes=p, width=w, max_a=r, max_b=r,
                                                max_m=2 * r)
        pos_range = range(max(self._max_seg_rows, 2 << j))

        # ---- input steering: run A or run B of the current pair
        in_pos = Signal(pos_range)
        to_b = Signal()
        m.d.comb += to_b.eq(self.used & in_pos[j])
        accept = Signal()
        m.d.comb += [
            self.i.ready.eq(Mux(to_b, qb.w_rdy, qa.w_rdy)),
            accept.eq(self.i.valid & self.i.ready),
            qa.w_en.eq(accept & ~to_b),
            qb.w_en.eq(accept & to_b),
            qa.w_data.eq(self.i.payload),
            qb.w_data.eq(self.i.payload),
        ]
        with m.If(accept):
            nxt = uadd(in_pos, 1)
            m.d.sync += in_pos.eq(Mux(uge(nxt, self.seg_rows), 0, nxt))

        # ---- pair descriptors from the rows of the segment left for the next pair: a
        # register (``fresh``: the segment starts, all ``seg_rows`` are left), so each
        # descriptor is a comparison with constants and the next one a subtraction
        fresh = Signal(init=1)
        rem_r = Signal(range(self._max_seg_rows + 1))
        rem = Signal(range(self._max_seg_rows + 1))
        a_len = Signal(range(r + 1))
        b_len = Signal(range(r + 1))
        m_len = Signal(range(2 * r + 1))
        m.d.comb += [
            rem.eq(Mux(fresh, self.seg_rows, rem_r)),
            a_len.eq(Mux(~self.used, 1, Mux(ugt(rem, r), r, rem))),
            b_len.eq(Mux(~self.used, 0, Mux(ugt(rem, 2 * r), r,
                                            Mux(ugt(rem, r), usub(rem, r), 0)))),
            m_len.eq(Mux(~self.used, 1, Mux(ugt(rem, 2 * r), 2 * r, rem))),
            eng.pair_valid.eq(~is_zero(m_len)),
            eng.pair_a.eq(a_len),
            eng.pair_b.eq(b_len),
            eng.pair_m.eq(m_len),
            eng.pair_tag.eq(0),
        ]
        m.d.comb += eng.flush.eq(self.start)
        with m.If(self.start):
            m.d.sync += fresh.eq(1)
        with m.Elif(eng.pair_ready):
            m.d.sync += [fresh.eq(ule(rem, m_len)), rem_r.eq(usub(rem, m_len))]

        _connect_queue(m, qa, eng, "a")
        _connect_queue(m, qb, eng, "b")
        m.d.comb += [
            self.o.valid.eq(eng.o.valid),
            self.o.payload.eq(eng.o.payload.row),
            eng.o.ready.eq(self.o.ready),
            self.idle.eq(qa.idle & qb.idle & ~eng.active),
        ]
        return m


class Reducer(wiring.Component):
    """Keeps the running top ``K`` rows of each segment and emits the selection threshold.

    The tree delivers each segment as sorted runs of ``K = k_rows`` rows (the last one may be
    shorter; ``list_rows`` bounds ``K`` in Stage I, ``run_rows`` a Stage II vector). The
    reducer merges every run with the list kept so far, truncated to its top
    ``K`` rows, and writes the result back as the new list (a queue: the old list is read at
    its head while the new one is appended). On the segment's last run it does not keep the
    list; instead it emits item ``thr_lane`` of output row ``thr_row`` (the ``k``-th best of
    the segment) on ``thr``. Merging a run of ``b`` rows takes ``min(K, a + b)`` cycles, so
    full runs stream through at one row per cycle.

    Members
    -------
    i : row stream from the last tree level.
    thr : item stream, one per segment.
    seg_rows, k_rows, thr_row, thr_lane : In, constant during a job.
    start : In
        A job's configuration was accepted: drop the run descriptor fetched ahead.
    idle : Out
    """

    def __init__(self, *, lanes: int, width: int, list_rows: int, run_rows: int,
                 max_seg_rows: int) -> None:
        if run_rows < list_rows:
            raise ValueError(f"Reducer run_rows ({run_rows}) must be >= list_rows ({list_rows})")
        self._lanes, self._width = lanes, width
        self._list_rows = list_rows
        self._run_rows = run_rows
        self._max_seg_rows = max_seg_rows
        row = _row(width, lanes)
        super().__init__({
            "i": In(stream.Signature(row)),
            "thr": Out(stream.Signature(width)),
            "seg_rows": In(range(max_seg_rows + 1)),
            "k_rows": In(range(run_rows + 1)),
            "thr_row": In(range(max(2, run_rows))),
            "thr_lane": In(range(max(2, lanes))),
            "start": In(1),
            "idle": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p, w, kmax = self._lanes, self._width, self._list_rows
        run_max = self._run_rows  # Stage I: K <= list_rows; Stage II: a whole vector
        m.submodules.qrun = qrun = LaneQueue(lanes=p, width=w, depth=kmax + 2)
        m.submodules.qlist = qlist = LaneQueue(lanes=p, width=w, depth=2 * kmax + 2)
        m.submodules.qthr = qthr = RowQueue(width=w, depth=4, skip=False)
        m.submodules.engine = eng = MergeEngine(lanes=p, width=w, max_a=kmax, max_b=run_max,
                                                max_m=run_max)

        m.d.comb += [
            qrun.w_en.eq(self.i.valid & qrun.w_rdy),
            qrun.w_data.eq(self.i.payload),
            self.i.ready.eq(qrun.w_rdy),
        ]

        # ---- run descriptors: run q covers rows [qK, qK + K) of the segment; ``rem_r`` the
        # rows left after the runs described so far (``fresh``: the segment starts)
        fresh = Signal(init=1)
        rem_r = Signal(range(self._max_seg_rows + 1))
        rem = Signal(range(self._max_seg_rows + 1))
        b_len = Signal(range(run_max + 1))
        final = Signal()
        m.d.comb += [
            rem.eq(Mux(fresh, self.seg_rows, rem_r)),
            final.eq(ule(rem, self.k_rows)),
            b_len.eq(Mux(final, rem, self.k_rows)),
            eng.pair_valid.eq(~is_zero(b_len)),
            eng.pair_a.eq(Mux(fresh, 0, self.k_rows)),
            eng.pair_b.eq(b_len),
            # min(a + b, K): the first run alone (b <= K), else the list is full
            eng.pair_m.eq(Mux(fresh, b_len, self.k_rows)),
            eng.pair_tag.eq(final),
        ]
        m.d.comb += eng.flush.eq(self.start)
        with m.If(self.start):
            m.d.sync += fresh.eq(1)
        with m.Elif(eng.pair_ready):
            m.d.sync += [fresh.eq(final), rem_r.eq(usub(rem, self.k_rows))]
        _connect_queue(m, qlist, eng, "a")
        _connect_queue(m, qrun, eng, "b")

        # ---- output rows: back into the list, or (last run) pick the threshold
        o = eng.o
        is_thr = Signal()
        thr_item = Signal(w)
        with m.Switch(self.thr_lane):
            for lane in range(p):
                with m.Case(lane):
                    m.d.comb += thr_item.eq(o.payload.row[lane])
        m.d.comb += [
            is_thr.eq(o.payload.tag & ueq(o.payload.step, self.thr_row)),
            o.ready.eq(Mux(o.payload.tag, Mux(is_thr, qthr.w_rdy, 1), qlist.w_rdy)),
            qlist.w_en.eq(o.valid & ~o.payload.tag & qlist.w_rdy),
            qlist.w_data.eq(o.payload.row),
            qthr.w_en.eq(o.valid & is_thr & qthr.w_rdy),
            qthr.w_data.eq(thr_item),
            self.thr.valid.eq(qthr.r_valid),
            self.thr.payload.eq(qthr.r_data),
            qthr.pop.eq(self.thr.valid & self.thr.ready),
            self.idle.eq(qrun.idle & qlist.idle & qthr.idle & ~eng.active),
        ]
        return m
