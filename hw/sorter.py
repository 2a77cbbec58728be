"""The reconfigurable importance sorter: one engine for HiKV Stage I and Stage II.

Function (bit-exact with :mod:`hikv.model.refs.sorter`): keys are unsigned ``W``-bit integers;
the largest are selected, ties go to the **lower index**, and the selected items leave in
**ascending index order**.

* **Stage I** (``mode = STAGE1``): the top ``k`` of one stream of ``n = count`` items whose
  indices are the labels carried in the stream (token positions). The output is in *arrival
  order*, which is ascending index order because Stage I labels must arrive in increasing order
  (as HiKV produces them: tokens in position order). Ties are broken by the label itself, so the
  *set* selected is the reference's for any unique labels.
* **Stage II** (``mode = STAGE2``): for each of ``count`` vectors of ``d = length`` items, its
  top ``r = k``; the index is the element's position in its vector (the stream's index field is
  ignored).

Microarchitecture (``P`` lanes; a *row* is one beat of ``P`` items; all sizes from
:class:`~hikv.hw.sorter_timing.SorterTiming`)::

                 cfg ──► job registers (mode, D rows/segment, levels used L, K = 2^L rows,
                          │                 threshold row/lane, tail lanes)
                          ▼
    i ──► lane prep ──┬──────────────────────────────► ring buffer (rows, arrival order) ──┐
         {valid,key,  │                                 ceil(max_n/P) rows                 │
          ~index}     ▼                                                                    │
              bitonic row sorter (P lanes, S stages)                                       │
                      ▼                                                                    │
              merge level 0   ─ runs of 1 row  → 2     each level: lane queues A, B       │
              merge level 1   ─ runs of 2 rows → 4       + merge engine (P-comparator      │
                 ...                                        selector, pipelined merge)     │
              merge level L-1 ─ runs of 2^(L-1) → 2^L    levels >= L pass rows through    │
                      ▼                                                                    │
              reducer: list := top-K rows of (list ∪ run)      (Stage I: K rows kept)     │
                      │  last run of a segment: item k-1 ──► threshold queue ──┐          │
                      ▼                                                        ▼          ▼
                                                         second pass: select item >= threshold
                                                                         ▼
                                                   compactor (log P shift network) ──► o

1. **First pass.** Each accepted beat becomes ``P`` composite items ``{valid, key, ~index}``
   (unique per item; pads of a short last row are all-zero and sort last). The beat is stored
   in the ring buffer in arrival order and, sorted by a pipelined bitonic network, enters the
   merge tree. Level ``j`` merges pairs of sorted runs of ``2^j`` rows with a *merge engine*:
   the runs wait in lane queues (run item ``i`` in lane ``i mod P``), ``P`` comparators pick
   the larger of A's lane ``i`` head and B's lane ``P-1-i`` head each cycle (the top ``P`` of
   what is left, as a rotated bitonic sequence), and ``log P`` pipelined bitonic-merge stages
   sort them outside the loop (see :class:`~hikv.hw.sorter_merge.MergeEngine`). Every level
   moves one row per cycle; a row is delayed by exactly ``2^j + 2 + log P`` cycles.
2. **Reducer.** Another engine merges each sorted run of ``K`` rows with the running top-``K``
   list (truncating the merge to ``K`` rows), so it too moves a row per cycle. On a segment's
   last run it picks the ``min(k, n)``-th best composite: the threshold. Composites are unique,
   so exactly ``min(k, n)`` items are ``>=`` the threshold.
3. **Second pass.** The buffered rows are re-read in arrival order; ``P`` comparators mark the
   items ``>=`` the threshold; a compactor packs them into dense output beats.

Stage II uses the same path with one segment per vector: the tree sorts the whole vector
(``L = ceil(log2 D)``), the reducer passes it through, and vectors stream back to back (one
vector every ``D = ceil(d/P)`` cycles). Stage I segments the whole stream and uses the tree
only up to runs of ``K >= k/P`` rows. Timing is data-independent; see
:mod:`hikv.hw.sorter_timing` for the exact cycle formulas and docs/sorter.md for the area.

Interfaces (``amaranth.lib.stream``, payloads ``data.StructLayout``):

* ``cfg``: ``mode`` (:class:`SorterMode`), ``k`` (Stage I k / Stage II r), ``length``
  (Stage II d), ``count`` (Stage I n / Stage II vectors). Accepted only between jobs.
  A configuration outside the parameters (``k`` or ``count`` zero, ``k > max_k`` in Stage I,
  ``r > max_vec``, ``n > max_n``, ``d`` zero or ``> max_vec``) sets the sticky ``error`` output
  and is dropped.
* ``i``: ``lanes[P]`` of (``key``, ``index``), ``valid`` (per-lane mask, all ones except the
  last beat of a segment), ``last`` (last beat of the Stage I stream / of a Stage II vector).
  The sorter derives lane validity from the configuration; a beat whose ``valid`` or ``last``
  disagrees, or (Stage I) whose labels do not increase, sets ``error``.
* ``o``: same layout: selected (``key``, ``index``) in ascending index order, dense; ``last``
  marks the final beat of the Stage I job / of each Stage II vector. Lanes above ``valid`` hold
  no meaning.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from hikv.params import Config, SorterParams

from .sorter_compact import Compactor, lanes_layout, select_prefix
from .sorter_merge import MergeLevel, Reducer
from .sorter_net import RowSorter
from .sorter_queue import RowQueue
from .sorter_timing import SorterTiming
from .uops import is_zero, uadd, ueq, ugt, ult, usub

__all__ = ["SorterMode", "Sorter", "config_layout", "io_layout", "make_sorter"]


class SorterMode(enum.Enum, shape=1):
    """Job mode of the sorter."""

    STAGE1 = 0  #: top-k of one stream of token scores
    STAGE2 = 1  #: top-r of each of many short vectors


def config_layout(params: SorterParams) -> data.StructLayout:
    """Layout of one configuration beat."""
    return data.StructLayout({
        "mode": SorterMode,
        "k": range(max(params.max_k, params.max_vec) + 1),
        "length": range(params.max_vec + 1),
        "count": unsigned(params.count_width),
    })


def io_layout(params: SorterParams) -> data.StructLayout:
    """Layout of an input or output beat: ``lanes[P]`` of (key, index), ``valid``, ``last``."""
    return lanes_layout(params.lanes, params.key_width, params.index_width)


def _clog2(m: Module, x: Value, name: str) -> Signal:
    """``ceil(log2(x))`` for ``x >= 1`` (priority encoder on ``x - 1``)."""
    y = Signal(len(x), name=f"{name}_m1")
    m.d.comb += y.eq(usub(x, 1))
    res: Value = Const(0, range(len(x) + 1))
    for b in range(len(y)):
        res = Mux(y[b], b + 1, res)
    out = Signal(range(len(x) + 1), name=name)
    m.d.comb += out.eq(res)
    return out


class SorterInterface(wiring.Component):
    """What the sorter and the top-k engine (:class:`hikv.hw.topk.TopK`) share: the members
    below; ``params``; ``timing`` (``timing_class.from_params(params)``), its ``latency`` and
    Stage I cycle count. A subclass sets :attr:`timing_class` and elaborates.

    Members
    -------
    cfg : ``In(stream.Signature(config_layout(params)))``
    i : ``In(stream.Signature(io_layout(params)))``
    o : ``Out(stream.Signature(io_layout(params)))``
    busy : ``Out(1)``  a job is configured and not finished
    error : ``Out(1)``  sticky: a bad configuration or an input beat whose valid/last disagrees
        (the subclass may name more)
    """

    timing_class: type

    def __init__(self, params: SorterParams) -> None:
        if not isinstance(params, SorterParams):
            raise TypeError(f"{type(self).__name__} needs a SorterParams, not {params!r}")
        self._params = params
        self._timing = self.timing_class.from_params(params)
        self.cfg_layout = config_layout(params)
        self.io_layout = io_layout(params)
        super().__init__({
            "cfg": In(stream.Signature(self.cfg_layout)),
            "i": In(stream.Signature(self.io_layout)),
            "o": Out(stream.Signature(self.io_layout)),
            "busy": Out(1),
            "error": Out(1),
        })

    @property
    def params(self) -> SorterParams:
        return self._params

    @property
    def latency(self) -> int:
        """Fixed part of every job's cycle count (the timing's ``latency``)."""
        return int(self._timing.latency)

    def stage1_cycles(self, n: int, k: int) -> int:
        return int(self._timing.stage1_cycles(n, k))


class Sorter(SorterInterface):
    """Reconfigurable importance sorter (see the module docstring for the architecture).

    Parameters
    ----------
    params : SorterParams
        Lanes ``P``, key width ``W``, ``max_n``, ``max_k``, ``max_vec``.

    Members: :class:`SorterInterface`'s.
    """

    timing_class = SorterTiming

    @property
    def timing(self) -> SorterTiming:
        """Sizes and cycle formulas (:class:`~hikv.hw.sorter_timing.SorterTiming`)."""
        return self._timing

    def stage2_cycles(self, count: int, d: int, r: int) -> int:
        return self._timing.stage2_cycles(count, d, r)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        t, prm = self._timing, self._params
        p, lg, w = prm.lanes, t.log_lanes, t.item_width
        iw, kw = prm.index_width, prm.key_width
        seg_max = max(t.max_rows, t.vec_rows_max)
        run_rows = max(t.list_rows_max, 1 << t.vec_levels_max)

        # ------------------------------------------------------------ job registers
        active = Signal()
        mode = Signal(SorterMode)
        seg_rows = Signal(range(seg_max + 1))
        # tree levels that merge (bit j: level j), decoded when the configuration is taken
        level_used = Signal(t.levels)
        k_rows = Signal(range(run_rows + 1))
        thr_row = Signal(range(max(2, run_rows)))
        thr_lane = Signal(range(max(2, p)))
        in_active = Signal()
        in_row = Signal(range(seg_max))
        # last row of a segment: a register computed one beat ahead (in_row == seg_rows - 1)
        last_row = Signal()
        # valid lanes of the next beat (all, or the segment's tail on its last row): a register,
        # so the lane-valid multiplexer before the pre-sorter reads no comparison
        lane_ok = Signal(p)
        tail_mask = Signal(p)
        in_segs = Signal(unsigned(prm.count_width))
        out_segs = Signal(unsigned(prm.count_width))
        error = Signal()
        m.d.comb += [self.busy.eq(active), self.error.eq(error)]

        # ------------------------------------------------------------ configuration decode
        c = self.cfg.payload
        is1 = Signal()
        length = Signal(range(max(prm.max_n, prm.max_vec, 1 << prm.count_width) + 1))
        nseg = Signal(unsigned(prm.count_width))
        bad = Signal()
        m.d.comb += [
            is1.eq(~c.mode.as_value()[0]),  # STAGE1 = 0
            length.eq(Mux(is1, c.count, c.length)),
            nseg.eq(Mux(is1, 1, c.count)),
            bad.eq(is_zero(c.k) | is_zero(length) | is_zero(nseg)
                   | Mux(is1, ugt(c.k, prm.max_k) | ugt(c.count, prm.max_n),
                         ugt(c.k, prm.max_vec) | ugt(c.length, prm.max_vec))),
        ]
        d_rows = Signal(range(seg_max + 1))
        keff = Signal.like(length)
        k_groups = Signal(range(max(prm.max_k, prm.max_vec) + 1))
        m.d.comb += [
            d_rows.eq(uadd(length, p - 1)[lg:]),
            keff.eq(Mux(ult(c.k, length), c.k, length)),
            k_groups.eq(uadd(c.k, p - 1)[lg:]),
        ]
        lg_d = _clog2(m, d_rows, "lg_rows")
        lg_k = _clog2(m, k_groups, "lg_k")
        lg_k1 = Mux(ult(lg_k, t.min_run_levels), t.min_run_levels, lg_k)
        lu = Signal(range(t.levels + 1))
        m.d.comb += lu.eq(Mux(is1 & ult(lg_k1, lg_d), lg_k1, lg_d))

        new_mask = Signal(p)
        m.d.comb += new_mask.eq(((Const(1, p + 1) << uadd(usub(length, 1)[:lg], 1)) - 1)[:p])

        start = Signal()
        m.d.comb += [self.cfg.ready.eq(~active), start.eq(self.cfg.valid & ~active & ~bad)]
        # the tree levels and the reducer drop descriptors fetched ahead one cycle after the
        # configuration is taken (a register: the decode of the configuration port reaches no
        # engine); the job's first row reaches the first level several cycles later
        start_r = Signal()
        m.d.sync += start_r.eq(start)
        with m.If(self.cfg.valid & ~active):
            with m.If(bad):
                m.d.sync += error.eq(1)
            with m.Else():
                m.d.sync += [
                    active.eq(1), mode.eq(c.mode), seg_rows.eq(d_rows),
                    level_used.eq(Cat(*[ugt(lu, j) for j in range(t.levels)])),
                    k_rows.eq(Const(1, run_rows.bit_length() + 1) << lu),
                    thr_row.eq(usub(keff, 1)[lg:]), thr_lane.eq(usub(keff, 1)[:lg]),
                    in_active.eq(1), in_row.eq(0), in_segs.eq(nseg), out_segs.eq(nseg),
                    last_row.eq(ueq(d_rows, 1)),
                    tail_mask.eq(new_mask),
                    lane_ok.eq(Mux(ueq(d_rows, 1), new_mask, (1 << p) - 1)),
                ]

        # ------------------------------------------------------------ first pass: input
        m.submodules.ring = ring = RowQueue(width=p * w + 1, depth=t.ring_rows, skip=False)
        m.submodules.presort = presort = RowSorter(lanes=p, width=w)
        accept = Signal()
        m.d.comb += [
            self.i.ready.eq(in_active & ring.w_rdy & presort.i.ready),
            accept.eq(self.i.valid & self.i.ready),
        ]
        comps = []
        for lane in range(p):
            ln = self.i.payload.lanes[lane]
            lvalid = lane_ok[lane]
            idx = Mux(mode == SorterMode.STAGE1, ln.index,
                      Cat(Const(lane, lg), in_row)[:iw]) if lg else ln.index
            comps.append(Mux(lvalid, Cat(~idx[:iw], ln.key, Const(1, 1)), Const(0, w)))
        m.d.comb += [
            ring.w_en.eq(accept),
            ring.w_data.eq(Cat(*comps, last_row)),
            presort.i.valid.eq(accept),
            presort.i.payload.eq(Cat(*comps)),
        ]
        next_last = Signal()
        m.d.comb += next_last.eq(Mux(last_row, ueq(seg_rows, 1), ueq(uadd(in_row, 2), seg_rows)))
        with m.If(accept):
            m.d.sync += [in_row.eq(Mux(last_row, 0, uadd(in_row, 1))),
                         last_row.eq(next_last),
                         lane_ok.eq(Mux(next_last, tail_mask, (1 << p) - 1))]
            with m.If(last_row):
                m.d.sync += in_segs.eq(usub(in_segs, 1))
                with m.If(ueq(in_segs, 1)):
                    m.d.sync += in_active.eq(0)
            with m.If((self.i.payload.valid != lane_ok) | (self.i.payload.last != last_row)):
                m.d.sync += error.eq(1)

        # Stage I labels must increase (the output is in arrival order): lanes within a beat
        # and the first lane against the previous beat's last lane (only the last beat of a
        # job is partial, so the previous beat is full).
        labels = [self.i.payload.lanes[lane].index for lane in range(p)]
        prev_label = Signal(iw, reset_less=True)
        ordered = Signal()
        order_terms = [~self.i.payload.valid[lane] | ugt(labels[lane], labels[lane - 1])
                       for lane in range(1, p)]
        m.d.comb += ordered.eq(Cat(is_zero(in_row) | ugt(labels[0], prev_label),
                                   *order_terms).all())
        with m.If(accept):
            m.d.sync += prev_label.eq(labels[p - 1])
            with m.If((mode == SorterMode.STAGE1) & ~ordered):
                m.d.sync += error.eq(1)

        # ------------------------------------------------------------ merge tree + reducer
        prev = presort.o
        levels = []
        for j in range(t.levels):
            lvl = MergeLevel(lanes=p, width=w, level=j, max_seg_rows=seg_max)
            m.submodules[f"level{j}"] = lvl
            m.d.comb += [lvl.seg_rows.eq(seg_rows), lvl.used.eq(level_used[j]),
                         lvl.start.eq(start_r)]
            wiring.connect(m, prev, lvl.i)
            prev = lvl.o
            levels.append(lvl)
        m.submodules.reducer = red = Reducer(lanes=p, width=w, list_rows=t.list_rows_max,
                                             run_rows=run_rows, max_seg_rows=seg_max)
        wiring.connect(m, prev, red.i)
        m.d.comb += [red.seg_rows.eq(seg_rows), red.k_rows.eq(k_rows),
                     red.thr_row.eq(thr_row), red.thr_lane.eq(thr_lane), red.start.eq(start_r)]

        # ------------------------------------------------------------ second pass: select
        m.submodules.compact = cmp = Compactor(lanes=p, key_width=kw, index_width=iw)
        s_valid = Signal()
        s_data = Signal(cmp.in_layout, reset_less=True)
        s_free = Signal()
        pop = Signal()
        ring_items = [ring.r_data[q * w:(q + 1) * w] for q in range(p)]
        ring_last = ring.r_data[p * w]
        # the compaction's prefix counts are taken before the register (the compactor's first
        # half), so the compactor's own cycle is only the moves and the append behind its residual
        sel = [it >= red.thr.payload for it in ring_items]
        dist, n_sel = select_prefix(m, sel)
        m.d.comb += [
            s_free.eq(~s_valid | cmp.i.ready),
            pop.eq(ring.r_valid & red.thr.valid & s_free),
            ring.pop.eq(pop),
            red.thr.ready.eq(pop & ring_last),
            cmp.i.valid.eq(s_valid),
            cmp.i.payload.eq(s_data),
        ]
        with m.If(s_free):
            m.d.sync += [
                s_valid.eq(pop),
                s_data.row.eq(Cat(*ring_items)),
                s_data.sel.eq(Cat(*sel)),
                s_data.dist.eq(Cat(*dist)),
                s_data.count.eq(n_sel),
                s_data.last.eq(ring_last),
            ]
        wiring.connect(m, cmp.o, wiring.flipped(self.o))

        with m.If(self.o.valid & self.o.ready & self.o.payload.last):
            m.d.sync += out_segs.eq(usub(out_segs, 1))

        # ------------------------------------------------------------ job completion
        idle = Signal()
        m.d.comb += idle.eq(~in_active & is_zero(out_segs) & presort.idle & red.idle
                            & ring.idle & ~s_valid & cmp.idle
                            & Cat(*[lv.idle for lv in levels]).all())
        with m.If(active & idle):
            m.d.sync += active.eq(0)
        return m


def make_sorter(cfg: Config) -> Sorter:
    """The sorter of a configuration preset (block registry entry point)."""
    return Sorter(cfg.sorter)
