"""Radix-select top-k engine: the sorter's Stage I without a sort.

Function (bit-exact with :func:`hikv.model.refs.sorter.stage1_topk`): the ``k`` largest of
``n`` unsigned ``W``-bit keys, ties to the **lower index**, selected items leaving in
**ascending index order**. The interface is the sorter's (:mod:`hikv.hw.sorter`): the same
configuration and beat layouts (:func:`~hikv.hw.sorter.config_layout`,
:func:`~hikv.hw.sorter.io_layout`), the same stream handshakes, ``busy`` and ``error``, so the
sorter's Stage I testbench, golden reference and job codec drive it unchanged. Stage I labels
must increase within a job (tokens in position order), so arrival order is index order and
"ties to the lower index" is "ties in arrival order".

Algorithm. The ``k``-th largest key ``T`` is found one ``b``-bit digit at a time from the top
(``G = ceil(W / b)`` digits): a histogram of the keys still in the running (those whose higher
digits equal ``T``'s, found so far) picks the digit of ``T`` at which the count of keys from the
top reaches the ``k`` still to be placed; the keys above that digit are placed. After the last
digit, exactly ``k - r`` keys are greater than ``T`` and at least ``r`` equal it; the emit pass
selects every key greater than ``T`` and the first ``r`` equal to it in arrival order.

Microarchitecture (``P`` lanes; a *row* is one beat of ``P`` (key, index) pairs; sizes from
:class:`~hikv.hw.topk_timing.TopKTiming`)::

            cfg ──► job registers: D rows, tail lanes, r := min(k, n), prefix, mask
                                                                     ▲ digit pick (2 cycles)
    i ──┬─────────────────────────────────► key buffer (Memory) ─┐  │
        │ load pass: top digit              ceil(max_n/P) rows   │  │
        ▼                                   1 write, 1 read port │  │
      histogram register ◄── digit passes: prefix match, digit ──┤  │
        {match, digit} x P                                       │  │
        ▼                                                        │  │
      2^b - 1 counters: C[g] += #lanes (match, digit >= g) ──────┼──┘
                                                                 │ emit pass
                       compare register: key > T, key == T, ties ◄┘
                       before the lane (prefix count) x P
                                   ▼
                       select: > T, or == T and ties before < r; prefix count ──► compactor ──► o

1. **Load pass.** Each accepted beat is written to the key buffer (an
   ``amaranth.lib.memory.Memory``: one write and one synchronous read port, an SRAM macro in
   the area flow) and, through the histogram register, counted by digit 0.
2. **Digit pick** (2 cycles after a pass's last count). Counter ``g`` holds ``C[g]``, the keys
   in the running whose digit is ``>= g``; it does not increase with ``g``. The first cycle
   registers ``C[g] >= r`` for every ``g``; the second takes the digit ``t`` as the last ``g``
   with ``C[g] >= r`` (``C[0] >= r`` always holds), appends it to ``T``'s prefix, places the
   ``C[t + 1]`` keys above it (``r -= C[t + 1]``) and clears the counters.
3. **Digit passes** ``1 .. G - 1`` re-read the buffer; a key is counted when its higher digits
   equal the prefix (a masked compare).
4. **Emit pass.** The buffer is read once more in arrival order; per lane ``key > T``,
   ``key == T`` and the number of equal keys in lower lanes (a prefix count) are registered,
   then a key is selected when greater, or equal with fewer than ``r`` equal keys before it in
   the job; the sorter's select prefix and compactor (:mod:`hikv.hw.sorter_compact`) pack the
   selected keys into dense output beats.

Timing is data-independent: :meth:`TopKTiming.stage1_cycles`, ``(G + 1) D + 4 G + 4``. Every
pass moves a row per cycle; backpressure on ``o`` stalls the emit pass only.

Interfaces: as :class:`~hikv.hw.sorter.Sorter`. A Stage II configuration, ``k`` or ``count``
zero, ``k > max_k`` or ``count > max_n`` sets the sticky ``error`` and is dropped. An input beat
whose ``valid`` or ``last`` disagrees with the configuration, or whose labels do not increase,
sets ``error`` (the job still runs). Data registers and the buffer have no reset; after a reset
in the middle of a job the next job runs clean.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import enum, wiring
from amaranth.lib.memory import Memory

from hikv.params import Config

from .sorter import SorterInterface, SorterMode
from .sorter_compact import Compactor, select_prefix
from .sorter_net import compact_dist, wires
from .topk_timing import TopKTiming
from .uops import eq_const, is_zero, popcount, select, uadd, ueq, uge, ugt, ult, usub

__all__ = ["Phase", "TopK", "make_topk"]


class Phase(enum.Enum, shape=4):
    """What the engine is doing (one register)."""

    IDLE = 0      #: waiting for a configuration
    LOAD = 1      #: the load pass: input beats into the buffer, digit 0 counted
    READ = 2      #: a digit pass: one buffer row read per cycle
    READ_END = 3  #: the pass's last row in the histogram register
    COUNT = 4     #: the pass's last row counted
    COMPARE = 5   #: counters compared with the keys still to place
    PICK = 6      #: the digit appended to the threshold, counters cleared
    EMIT = 7      #: the emit pass: one buffer row read per cycle
    DRAIN = 8     #: waiting for the last output beat


class TopK(SorterInterface):
    """Radix-select top-k engine with the sorter's Stage I contract (see the module
    docstring).

    Parameters
    ----------
    params : SorterParams
        Lanes ``P``, key width ``W``, ``max_n``, ``max_k`` and the digit width
        ``digit_bits``; ``max_vec`` only sizes the shared configuration layout.

    Members: :class:`~hikv.hw.sorter.SorterInterface`'s; ``error`` also rises on an input beat
    whose labels disagree with its valid/last.
    """

    timing_class = TopKTiming

    @property
    def timing(self) -> TopKTiming:
        """Sizes and the cycle formula (:class:`~hikv.hw.topk_timing.TopKTiming`)."""
        return self._timing

    def elaborate(self, platform: object) -> Module:
        m = Module()
        t, prm = self._timing, self._params
        p, kw, iw = prm.lanes, prm.key_width, prm.index_width
        b, nd, wp = t.digit_bits, t.digits, t.padded_width
        nc = t.counters
        lg = (p - 1).bit_length()
        full = (1 << p) - 1

        # ------------------------------------------------------------ job registers
        n_rows = Signal(range(t.max_rows + 1))
        tail_mask = Signal(p)
        rem = Signal(range(prm.max_k + 1))          # keys still to place: r
        prefix = Signal(wp, reset_less=True)        # T's digits found so far (high bits)
        pmask = Signal(wp, reset_less=True)         # ones over the digits found
        digit = Signal(range(max(2, nd)))           # digit of the pass under way
        error = Signal()
        phase = Signal(Phase)
        active = Signal()
        m.d.comb += [active.eq(~eq_const(phase.as_value(), Phase.IDLE.value)),
                     self.busy.eq(active), self.error.eq(error)]

        # ------------------------------------------------------------ configuration decode
        c = self.cfg.payload
        bad = Signal()
        m.d.comb += bad.eq((c.mode != SorterMode.STAGE1) | is_zero(c.k) | is_zero(c.count)
                           | ugt(c.k, prm.max_k) | ugt(c.count, prm.max_n))
        d_rows = Signal(range(t.max_rows + 1))
        keff = Signal(range(prm.max_k + 1))
        new_mask = Signal(p)
        m.d.comb += [
            d_rows.eq(uadd(c.count, p - 1)[lg:]),
            keff.eq(Mux(ult(c.k, c.count), c.k, c.count)),
            new_mask.eq(((Const(1, p + 1) << uadd(usub(c.count, 1)[:lg], 1)) - 1)[:p]),
        ]
        start = Signal()
        m.d.comb += [self.cfg.ready.eq(~active), start.eq(self.cfg.valid & ~active & ~bad)]
        with m.If(self.cfg.valid & ~active & bad):
            m.d.sync += error.eq(1)

        # ------------------------------------------------------------ key buffer
        row_w = kw + iw
        m.submodules.keys = mem = Memory(shape=t.row_bits, depth=max(2, t.max_rows), init=[])
        wp_ = mem.write_port()
        rp = mem.read_port()
        ri = Signal(range(t.max_rows + 1))            # input row
        ra = Signal(range(t.max_rows + 1))            # next row to read
        last_in = Signal()                            # the next input row is the last
        lane_ok = Signal(p)                           # valid lanes of the next input row

        # ------------------------------------------------------------ histogram datapath
        h_valid = Signal()
        h_match = Signal(p)
        h_dig = [Signal(b, name=f"h_dig{q}", reset_less=True) for q in range(p)]
        cnt = [Signal(range(prm.max_n + 1), name=f"cnt{g}") for g in range(1, nc + 1)]
        cw = len(cnt[0])
        ge = Signal(nc)                               # C[g] >= r, g = 1 .. 2^b - 1
        clear = Signal()

        def pad(key):
            return Cat(Const(0, wp - kw), key) if wp > kw else key

        def digit_of(key, j):
            hi = wp - j * b
            return pad(key)[hi - b:hi]

        with m.If(h_valid):
            for g in range(1, nc + 1):
                inc = popcount([h_match[q] & uge(h_dig[q], g) for q in range(p)])
                m.d.sync += cnt[g - 1].eq(uadd(cnt[g - 1], inc)[:cw])
        with m.If(clear):
            m.d.sync += [cg.eq(0) for cg in cnt]

        # ------------------------------------------------------------ read pipeline
        rd_en = Signal()
        m_valid = Signal()        # the read port holds a row
        m_last = Signal()         # ... the job's last
        m_scan = Signal()         # ... for a digit pass (else for the emit pass)
        adv = Signal()            # the emit pipeline moves (no output backpressure)
        m.d.comb += [rp.en.eq(rd_en), rp.addr.eq(ra[:len(rp.addr)])]

        mem_keys = [rp.data[q * row_w:q * row_w + kw] for q in range(p)]
        mem_idx = [rp.data[q * row_w + kw:(q + 1) * row_w] for q in range(p)]
        mem_ok = Signal(p)
        m.d.comb += mem_ok.eq(Mux(m_last, tail_mask, full))

        # digit pass: the read row into the histogram register
        dsel = [select([digit_of(mem_keys[q], j) for j in range(nd)], digit)
                if nd > 1 else digit_of(mem_keys[q], 0) for q in range(p)]
        with m.If(m_valid & m_scan & adv):
            m.d.sync += h_match.eq(Cat(*[mem_ok[q] & is_zero((pad(mem_keys[q]) ^ prefix)
                                                            & pmask) for q in range(p)]))
            m.d.sync += [h_dig[q].eq(dsel[q]) for q in range(p)]

        # ------------------------------------------------------------ emit pipeline
        a_valid = Signal()
        a_last = Signal()
        a_gt = Signal(p)
        a_eq = Signal(p)
        a_item = [Signal(1 + kw + iw, name=f"a_item{q}", reset_less=True) for q in range(p)]
        a_before = [Signal(range(p + 1), name=f"a_before{q}", reset_less=True)
                    for q in range(p)]
        a_eqn = Signal(range(p + 1), reset_less=True)
        thr = prefix[wp - kw:]
        eqs = [mem_ok[q] & ueq(mem_keys[q], thr) for q in range(p)]
        gts = [mem_ok[q] & ugt(mem_keys[q], thr) for q in range(p)]
        # equal keys in lower lanes: the unselected-lane count of the complement
        before = compact_dist(m, [~e for e in eqs], "ties")
        with m.If(adv):
            m.d.sync += [a_valid.eq(m_valid & ~m_scan), a_last.eq(m_last)]
            m.d.sync += [a_gt.eq(Cat(*gts)), a_eq.eq(Cat(*eqs)), a_eqn.eq(popcount(eqs))]
            m.d.sync += [a_item[q].eq(Cat(~mem_idx[q], mem_keys[q], Const(1, 1)))
                         for q in range(p)]
            m.d.sync += [a_before[q].eq(before[q]) for q in range(p)]

        m.submodules.compact = cmp = Compactor(lanes=p, key_width=kw, index_width=iw)
        s_valid = Signal()
        s_data = Signal(cmp.in_layout, reset_less=True)
        ties = Signal(range(prm.max_k + 1))           # equal keys still to select
        sel = wires(m, [a_gt[q] | (a_eq[q] & ult(a_before[q], ties)) for q in range(p)], "sel")
        dist, n_sel = select_prefix(m, sel)
        m.d.comb += [adv.eq(~s_valid | cmp.i.ready),
                     cmp.i.valid.eq(s_valid), cmp.i.payload.eq(s_data)]
        with m.If(adv):
            m.d.sync += [s_valid.eq(a_valid),
                         s_data.row.eq(Cat(*a_item)), s_data.sel.eq(Cat(*sel)),
                         s_data.dist.eq(Cat(*dist)), s_data.count.eq(n_sel),
                         s_data.last.eq(a_last)]
            with m.If(a_valid):
                m.d.sync += ties.eq(Mux(ult(a_eqn, ties), usub(ties, a_eqn), 0))
        wiring.connect(m, cmp.o, wiring.flipped(self.o))

        # ------------------------------------------------------------ digit pick
        # first cycle: C[g] >= r; second: t = the number of g with C[g] >= r (they are a
        # prefix of 1 .. 2^b - 1), r -= C[t + 1], digit t appended to the prefix
        pick = Signal()
        # one-hot t: C[g] >= r and not C[g + 1] >= r (ge[i] is C[i + 1] >= r; C[0] >= r and
        # not C[2^b] >= r)
        onehot_t = [(Const(1, 1) if g == 0 else ge[g - 1]) & ~(ge[g] if g < nc else Const(0, 1))
                    for g in range(nc + 1)]
        t_val = Signal(b)
        above = Signal(cw)
        m.d.comb += [
            t_val.eq(Cat(*[Cat(*[onehot_t[g] for g in range(nc + 1) if (g >> i) & 1]).any()
                           for i in range(b)])),
            above.eq(Cat(*[Cat(*[onehot_t[g] & cnt[g][i] for g in range(nc)]).any()
                           for i in range(cw)])),
        ]
        with m.If(pick):
            m.d.sync += rem.eq(usub(rem, above)[:len(rem)])
            for j in range(nd):
                hi = wp - j * b
                with m.If(eq_const(digit, j)):
                    m.d.sync += [prefix[hi - b:hi].eq(t_val),
                                 pmask[hi - b:hi].eq((1 << b) - 1)]

        # ------------------------------------------------------------ phases
        # an If chain on the phase, not m.FSM / m.Switch: Verilog case statements that assign
        # a signal in some states only are incomplete (verilator -Wall CASEINCOMPLETE)
        def phase_is(ph: Phase) -> Value:
            return eq_const(phase.as_value(), ph.value)

        load = Signal()
        accept = Signal()
        m.d.comb += [self.i.ready.eq(load), accept.eq(self.i.valid & load)]
        read_last = ueq(uadd(ra, 1), n_rows)        # the row read now is the job's last
        with m.If(phase_is(Phase.IDLE)):
            with m.If(start):
                m.d.sync += [
                    phase.eq(Phase.LOAD), n_rows.eq(d_rows), tail_mask.eq(new_mask),
                    rem.eq(keff), prefix.eq(0), pmask.eq(0), digit.eq(0),
                    ri.eq(0), last_in.eq(ueq(d_rows, 1)),
                    lane_ok.eq(Mux(ueq(d_rows, 1), new_mask, full)),
                ]
                m.d.comb += clear.eq(1)
        with m.Elif(phase_is(Phase.LOAD)):
            m.d.comb += load.eq(1)
            with m.If(accept):
                nxt_last = ueq(uadd(ri, 2), n_rows)
                m.d.sync += [ri.eq(uadd(ri, 1)), last_in.eq(nxt_last),
                             lane_ok.eq(Mux(nxt_last, tail_mask, full))]
                with m.If(last_in):
                    m.d.sync += phase.eq(Phase.COUNT)
        with m.Elif(phase_is(Phase.READ)):
            m.d.comb += rd_en.eq(1)
            m.d.sync += [ra.eq(uadd(ra, 1)), m_valid.eq(1), m_scan.eq(1),
                         m_last.eq(read_last)]
            with m.If(read_last):
                m.d.sync += phase.eq(Phase.READ_END)
        with m.Elif(phase_is(Phase.READ_END)):
            m.d.sync += [m_valid.eq(0), phase.eq(Phase.COUNT)]
        with m.Elif(phase_is(Phase.COUNT)):
            m.d.sync += phase.eq(Phase.COMPARE)
        with m.Elif(phase_is(Phase.COMPARE)):
            m.d.sync += [ge.eq(Cat(*[uge(cg, rem) for cg in cnt])), phase.eq(Phase.PICK)]
        with m.Elif(phase_is(Phase.PICK)):
            m.d.comb += [pick.eq(1), clear.eq(1)]
            m.d.sync += [digit.eq(uadd(digit, 1)[:len(digit)]), ra.eq(0),
                         phase.eq(Mux(ueq(digit, nd - 1), Phase.EMIT, Phase.READ))]
        with m.Elif(phase_is(Phase.EMIT)):
            m.d.comb += rd_en.eq(adv)
            with m.If(is_zero(ra)):
                # the ties to select: r after the last digit (set once, before any row)
                m.d.sync += ties.eq(rem)
            with m.If(adv):
                m.d.sync += [ra.eq(uadd(ra, 1)), m_valid.eq(1), m_scan.eq(0),
                             m_last.eq(read_last)]
                with m.If(read_last):
                    m.d.sync += phase.eq(Phase.DRAIN)
        with m.Elif(phase_is(Phase.DRAIN)):
            with m.If(adv):
                m.d.sync += m_valid.eq(0)
            with m.If(self.o.valid & self.o.ready & self.o.payload.last):
                m.d.sync += phase.eq(Phase.IDLE)

        # ------------------------------------------------------------ load pass
        in_keys = [self.i.payload.lanes[q].key for q in range(p)]
        in_idx = [self.i.payload.lanes[q].index for q in range(p)]
        m.d.comb += [
            wp_.en.eq(accept), wp_.addr.eq(ri[:len(wp_.addr)]),
            wp_.data.eq(Cat(*[Cat(in_keys[q], in_idx[q]) for q in range(p)])),
        ]
        with m.If(accept):
            m.d.sync += h_match.eq(lane_ok)
            m.d.sync += [h_dig[q].eq(digit_of(in_keys[q], 0)) for q in range(p)]
        m.d.sync += h_valid.eq(accept | (m_valid & m_scan))
        with m.If(accept & ((self.i.payload.valid != lane_ok)
                            | (self.i.payload.last != last_in))):
            m.d.sync += error.eq(1)
        # Stage I labels must increase (the output is in arrival order)
        prev_label = Signal(iw, reset_less=True)
        ordered = Signal()
        order_terms = [~self.i.payload.valid[q] | ugt(in_idx[q], in_idx[q - 1])
                       for q in range(1, p)]
        m.d.comb += ordered.eq(Cat(is_zero(ri) | ugt(in_idx[0], prev_label),
                                   *order_terms).all())
        with m.If(accept):
            m.d.sync += prev_label.eq(in_idx[p - 1])
            with m.If(~ordered):
                m.d.sync += error.eq(1)
        return m


def make_topk(cfg: Config) -> TopK:
    """The top-k engine of a configuration preset (block registry entry point)."""
    return TopK(cfg.sorter)
