"""Stage II selection block: the top ``r`` of each short vector at the sorter's Stage II rate.

Function (bit-exact with :func:`hikv.model.refs.sorter.stage2_topr`): for each vector of ``d``
unsigned ``W``-bit keys, the ``min(r, d)`` largest, ties to the **lower element index**, leaving
in **ascending index order** as dense beats of ``(key, index)`` lanes, the last beat of each
vector flagged ``last`` (the sorter's Stage II output, ``hikv.hw.sorter_compact.lanes_layout``).
A vector arrives as ``D = ceil(d / P)`` beats of ``P`` keys in element order (lanes past ``d``
in the last beat and the beats' ``index`` fields are ignored); the block keeps the sorter's
steady-state rate of one vector every ``D`` cycles (the timing contract,
:class:`~hikv.hw.stage2_timing.Stage2Timing`).

Contract on ``r`` and the beats (the sorter's Stage II, docs/sorter.md "Interfaces"): ``r`` is
sampled with each vector's first input beat, so it may change from vector to vector; ``r > d``
selects the whole vector; ``r = 0`` or ``r > max_r`` (the sorter's ``max_vec``) sets the sticky
``error``, and that vector still leaves as one output vector whose items carry no meaning. An
input beat whose ``valid`` mask is not all ones (the vector's tail lanes on its last beat) or
whose ``last`` is not set exactly on the vector's last beat also sets ``error`` (the vector
still runs). ``error`` clears only on reset.

Algorithm. Each element becomes the composite ``{key, ~e}`` (``e`` its element index, ``E =
ceil(log2 d)`` bits), unique per element and ordered as the reference orders (larger key first,
then lower index). A bitwise radix select finds the ``min(r, d)``-th largest composite ``T``
from the top bit: with ``m`` the elements still equal to ``T``'s bits so far and ``need`` the
number still to place, bit ``j`` counts ``c = |m & bit_j|``; if ``c >= need`` then ``T_j = 1``
and ``m := m & bit_j``, else the ``c`` elements are placed (``g |= m & bit_j``, ``need -= c``)
and ``m := m & ~bit_j``. After the ``W + E`` bits ``m`` is the one element equal to ``T`` and
the selection is ``g | m``. An engine resolves ``B`` bits per cycle (a chain of ``B``
popcounts of ``d`` bits: the clock falls as ``B`` grows), so a vector takes ``S = ceil((W + E)
/ B)`` cycles, and ``N = ceil(S / D)`` engines take the vectors in turn to keep one vector every
``D`` cycles.

Microarchitecture (three stages, each handing over in the cycle it finishes)::

    i ──► collect: d keys, ──► N select engines, in turn: d keys, m, g, need, ──┐
          beat counter          step (S cycles of B radix steps)                │
          (D beats)                                                             ▼
    o ◄── compactor (hw/sorter_compact.py) ◄── row register ◄── select prefix ◄── emit:
          dense beats, last per vector         d keys, selection, row counter (D rows)

Parameters
----------
lanes : int
    ``P``, keys per input beat and items per output beat (a power of two, 2 to 64).
key_width : int
    ``W``, bits of a key (1 to 32).
length : int
    ``d``, elements per vector (2 to 4096), fixed at elaboration.
index_width : int
    Bits of the output lanes' ``index`` field (at least ``ceil(log2 d)``; default that).
bits_per_cycle : int
    ``B``, radix steps per engine cycle (1 to ``W + E``; default
    :data:`~hikv.hw.stage2_timing.DEFAULT_BITS_PER_CYCLE`, the shortest path).
max_r : int
    Largest ``r`` accepted (``d`` to 4096; default ``d``); the ``r`` port is
    ``bit_length(max_r)`` bits wide, so ``r > max_r`` is representable and refused.

Members
-------
i : ``In(stream.Signature(lanes_layout(P, W, index_width)))``
o : ``Out(stream.Signature(lanes_layout(P, W, index_width)))``
r : ``In(unsigned(bit_length(max_r)))``
    Elements kept per vector, 1 to ``max_r`` (above ``d``: all); sampled with each vector's
    first input beat.
error : ``Out(1)``
    Sticky: a vector with ``r`` out of range or a beat whose ``valid`` or ``last`` disagrees.
idle : ``Out(1)``
    No vector in the block.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hikv.params import Config, ParamError, SorterParams

from .sorter_compact import Compactor, lanes_layout, select_prefix
from .sorter_net import wires
from .stage2_timing import DEFAULT_BITS_PER_CYCLE, Stage2Timing
from .uops import eq_const, is_zero, log2_int, popcount, select, uge, ugt, usub

__all__ = ["Stage2Select", "stage2_select_from_params", "make_stage2"]


def _check(name: str, value: object, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ParamError(f"Stage2Select {name} = {value!r} is out of range: allowed "
                         f"[{lo}, {hi}]")
    return value


class Stage2Select(wiring.Component):
    """See the module docstring."""

    def __init__(self, *, lanes: int, key_width: int, length: int,
                 index_width: int | None = None,
                 bits_per_cycle: int = DEFAULT_BITS_PER_CYCLE,
                 max_r: int | None = None) -> None:
        self._t = Stage2Timing(lanes, key_width, length, bits_per_cycle)
        self._p, self._w, self._d = lanes, key_width, length
        self._e = log2_int(length)
        iw = self._e if index_width is None else index_width
        self._iw = _check("index_width", iw, max(1, self._e), 32)
        self._b = bits_per_cycle
        self._max_r = _check("max_r", length if max_r is None else max_r, length, 4096)
        layout = lanes_layout(lanes, key_width, self._iw)
        super().__init__({"i": In(stream.Signature(layout)),
                          "o": Out(stream.Signature(layout)),
                          "r": In(unsigned(self._max_r.bit_length())),
                          "error": Out(1), "idle": Out(1)})

    @property
    def timing(self) -> Stage2Timing:
        """The block's sizes and timing contract."""
        return self._t

    @property
    def max_r(self) -> int:
        """Largest ``r`` accepted."""
        return self._max_r

    @property
    def lanes(self) -> int:
        """``P``."""
        return self._p

    @property
    def length(self) -> int:
        """``d``."""
        return self._d

    @property
    def rows(self) -> int:
        """``D = ceil(d / P)``: beats (and cycles) per vector."""
        return self._t.rows

    @property
    def bits_per_cycle(self) -> int:
        """``B``: composite bits an engine resolves per cycle (chained radix steps)."""
        return self._b

    @property
    def select_cycles(self) -> int:
        """``S = ceil((W + E) / B)``: cycles an engine spends on a vector."""
        return self._t.select_cycles

    @property
    def engines(self) -> int:
        """``N = ceil(S / D)``: select engines, taking vectors in turn (an engine takes its
        next vector in the cycle its result leaves)."""
        return self._t.engines

    @property
    def latency(self) -> int:
        """Cycles of a job minus ``count * D`` (:attr:`Stage2Timing.latency`)."""
        return self._t.latency

    def cycles(self, count: int) -> int:
        """Cycles of ``count`` vectors streamed back to back (:meth:`Stage2Timing.cycles`)."""
        return self._t.cycles(count)

    def _engine(self, m: Module, k: int, keys_c: Value, r_c: Value) -> dict[str, Value]:
        """One select engine: ``S`` cycles of ``B`` radix steps on a vector of ``keys_c``.

        Returns its signals: ``take`` / ``leave`` (inputs: load a vector / hand the result
        over), ``free`` (can take a vector this cycle), ``done`` (the result can leave this
        cycle), ``busy``, ``result`` (the selection mask) and ``keys``."""
        w, d, e = self._w, self._d, self._e
        b, s_cyc = self.bits_per_cycle, self.select_cycles
        keys_s = Signal(data.ArrayLayout(w, d), reset_less=True, name=f"e{k}_keys")
        mask = Signal(d, reset_less=True, name=f"e{k}_mask")
        great = Signal(d, reset_less=True, name=f"e{k}_great")
        need = Signal(range(d + 1), reset_less=True, name=f"e{k}_need")
        step = Signal(range(s_cyc + 1), name=f"e{k}_step")
        busy = Signal(name=f"e{k}_busy")
        take, leave = Signal(name=f"e{k}_take"), Signal(name=f"e{k}_leave")
        last_step, finished = Signal(name=f"e{k}_last"), Signal(name=f"e{k}_fin")
        done, free = Signal(name=f"e{k}_done"), Signal(name=f"e{k}_free")
        m.d.comb += [last_step.eq(busy & eq_const(step, s_cyc - 1)),
                     finished.eq(busy & eq_const(step, s_cyc)),
                     done.eq(last_step | finished), free.eq(~busy | leave)]
        pad = s_cyc * b - (w + e)           # zero bits below the composite: no-op steps

        def comp_bit(elem: int, pos: int) -> Value:
            """Bit ``pos`` of the padded composite of element ``elem``."""
            j = pos - pad
            if j < 0:
                return Const(0, 1)
            if j >= e:
                return keys_s[elem][j - e]
            return Const(((~elem) >> j) & 1, 1)

        cur_m, cur_g, cur_need = Value.cast(mask), Value.cast(great), Value.cast(need)
        sel_bits = step[:max(1, log2_int(s_cyc))]
        for sub in range(b):
            bits = []
            for elem in range(d):
                cands = [comp_bit(elem, s_cyc * b - 1 - (c * b + sub)) for c in range(s_cyc)]
                bits.append(cands[0] if s_cyc == 1 else select(cands, sel_bits))
            ones = wires(m, [cur_m & Cat(*bits)], f"e{k}_ones{sub}_")[0]
            c = wires(m, [popcount([ones[i] for i in range(d)])], f"e{k}_cnt{sub}_")[0]
            up = wires(m, [uge(c, cur_need)], f"e{k}_up{sub}_")[0]
            cur_m, cur_g, cur_need = wires(m, [
                Mux(up, ones, cur_m & ~ones), Mux(up, cur_g, cur_g | ones),
                Mux(up, cur_need, usub(cur_need, c)[:len(need)])], f"e{k}_st{sub}_")
        result = Signal(d, name=f"e{k}_result")
        m.d.comb += result.eq(Mux(finished, great | mask, cur_g | cur_m))
        with m.If(busy & ~finished):
            m.d.sync += [mask.eq(cur_m), great.eq(cur_g), need.eq(cur_need), step.eq(step + 1)]
        with m.If(take):
            m.d.sync += [keys_s.eq(keys_c), mask.eq((1 << d) - 1), great.eq(0),
                         need.eq(r_c), step.eq(0), busy.eq(1)]
        with m.Elif(leave):
            m.d.sync += busy.eq(0)
        return {"take": take, "leave": leave, "free": free, "done": done, "busy": busy,
                "result": result, "keys": keys_s}

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p, w, d = self._p, self._w, self._d
        rows = self.rows
        keys_l = data.ArrayLayout(w, d)
        m.submodules.compact = compact = Compactor(lanes=p, key_width=w, index_width=self._iw)
        wiring.connect(m, wiring.flipped(self.o), compact.o)

        # ---------------------------------------------------------------- collect
        keys_c = Signal(keys_l, reset_less=True)
        r_c = Signal(range(d + 1), reset_less=True)   # min(r, d), sampled on the first beat
        beat = Signal(range(max(2, rows)))
        full_c = Signal()
        sel_free = Signal()
        take = Signal()
        error = Signal()
        m.d.comb += [take.eq(full_c & sel_free),
                     self.i.ready.eq(~full_c | sel_free), self.error.eq(error)]
        first = eq_const(beat, 0) if rows > 1 else Const(1, 1)
        is_last = eq_const(beat, rows - 1) if rows > 1 else Const(1, 1)
        tail = d - (rows - 1) * p                      # valid lanes of the last beat
        want_valid = Mux(is_last, (1 << tail) - 1, (1 << p) - 1)
        with m.If(self.i.valid & self.i.ready):
            with m.If(first):
                m.d.sync += r_c.eq(Mux(ugt(self.r, d), d, self.r[:len(r_c)]))
                with m.If(is_zero(self.r) | ugt(self.r, self._max_r)):
                    m.d.sync += error.eq(1)
            with m.If((self.i.payload.valid != want_valid) | (self.i.payload.last != is_last)):
                m.d.sync += error.eq(1)
            for q in range(rows):
                with m.If(eq_const(beat, q) if rows > 1 else Const(1, 1)):
                    for lane in range(p):
                        if q * p + lane < d:
                            m.d.sync += keys_c[q * p + lane].eq(self.i.payload.lanes[lane].key)
            if rows > 1:
                m.d.sync += beat.eq(Mux(eq_const(beat, rows - 1), 0, beat + 1))
        last_beat = self.i.valid & self.i.ready & is_last
        with m.If(last_beat):
            m.d.sync += full_c.eq(1)
        with m.Elif(take):
            m.d.sync += full_c.eq(0)

        # ---------------------------------------------------------------- select
        n_eng = self.engines
        emit_free = Signal()
        wr = Signal(range(max(2, n_eng)))        # engine that takes the next vector
        rd = Signal(range(max(2, n_eng)))        # engine whose result the emit stage takes next
        eng = [self._engine(m, k, keys_c, r_c) for k in range(n_eng)]
        ptr_w, ptr_r = max(1, log2_int(n_eng)), max(1, log2_int(n_eng))
        wr_one = [eq_const(wr[:ptr_w], k) if n_eng > 1 else Const(1, 1) for k in range(n_eng)]
        rd_one = [eq_const(rd[:ptr_r], k) if n_eng > 1 else Const(1, 1) for k in range(n_eng)]
        m.d.comb += sel_free.eq(select([x["free"] for x in eng], wr[:ptr_w])
                                if n_eng > 1 else eng[0]["free"])
        handoff = Signal()
        m.d.comb += handoff.eq(emit_free & (select([x["done"] for x in eng], rd[:ptr_r])
                                            if n_eng > 1 else eng[0]["done"]))
        for k, x in enumerate(eng):
            m.d.comb += [x["take"].eq(take & wr_one[k]), x["leave"].eq(handoff & rd_one[k])]
        if n_eng > 1:
            with m.If(take):
                m.d.sync += wr.eq(Mux(eq_const(wr, n_eng - 1), 0, wr + 1))
            with m.If(handoff):
                m.d.sync += rd.eq(Mux(eq_const(rd, n_eng - 1), 0, rd + 1))
        result = Signal(d)
        keys_s = Signal(keys_l)
        if n_eng > 1:
            m.d.comb += [result.eq(select([x["result"] for x in eng], rd[:ptr_r])),
                         keys_s.eq(select([x["keys"].as_value() for x in eng], rd[:ptr_r]))]
        else:
            m.d.comb += [result.eq(eng[0]["result"]), keys_s.eq(eng[0]["keys"])]
        busy_any = Signal()
        m.d.comb += busy_any.eq(Cat(*[x["busy"] for x in eng]).any())

        # ---------------------------------------------------------------- emit
        keys_e = Signal(keys_l, reset_less=True)
        sel_e = Signal(d, reset_less=True)
        row = Signal(range(max(2, rows)))
        busy_e = Signal()
        row_last = eq_const(row, rows - 1) if rows > 1 else Const(1, 1)
        s_valid = Signal()                  # the row register in front of the compactor
        s_data = Signal(compact.in_layout, reset_less=True)
        adv = Signal()
        m.d.comb += [adv.eq(~s_valid | compact.i.ready),
                     compact.i.valid.eq(s_valid), compact.i.payload.eq(s_data),
                     emit_free.eq(~busy_e | (adv & row_last))]
        with m.If(handoff):
            m.d.sync += [keys_e.eq(keys_s), sel_e.eq(result), busy_e.eq(1), row.eq(0)]
        with m.Elif(busy_e & adv & row_last):
            m.d.sync += busy_e.eq(0)
        with m.If(busy_e & adv & ~row_last):
            m.d.sync += row.eq(row + 1)

        row_sel = row[:max(1, log2_int(rows))]
        items, sel = [], []
        for lane in range(p):
            cand_i, cand_s = [], []
            for q in range(rows):
                el = q * p + lane
                if el < d:
                    cand_i.append(Cat(~Const(el, self._iw), keys_e[el], Const(1, 1)))
                    cand_s.append(sel_e[el])
                else:
                    cand_i.append(Const(0, 1 + w + self._iw))
                    cand_s.append(Const(0, 1))
            items.append(cand_i[0] if rows == 1 else select(cand_i, row_sel))
            sel.append(cand_s[0] if rows == 1 else select(cand_s, row_sel))
        sel = wires(m, sel, "esel")
        dist, count = select_prefix(m, sel, "epack")
        with m.If(adv):
            m.d.sync += [s_valid.eq(busy_e), s_data.sel.eq(Cat(*sel)), s_data.count.eq(count),
                         s_data.last.eq(row_last)]
            for lane in range(p):
                m.d.sync += [s_data.row[lane].eq(items[lane]), s_data.dist[lane].eq(dist[lane])]
        no_beat = eq_const(beat, 0) if rows > 1 else Const(1, 1)
        m.d.comb += self.idle.eq(~full_c & ~busy_any & ~busy_e & ~s_valid & compact.idle
                                 & no_beat)
        return m


def stage2_select_from_params(params: SorterParams, length: int, *,
                              bits_per_cycle: int = DEFAULT_BITS_PER_CYCLE) -> Stage2Select:
    """The block for a preset's sorter lanes, key width and index width and vectors of
    ``length``, accepting ``r`` up to the sorter's ``max_vec`` (at least ``length``)."""
    return Stage2Select(lanes=params.lanes, key_width=params.key_width, length=length,
                        index_width=params.index_width, bits_per_cycle=bits_per_cycle,
                        max_r=max(length, params.max_vec))


def make_stage2(cfg: Config, *, bits_per_cycle: int = DEFAULT_BITS_PER_CYCLE) -> Stage2Select:
    """The Stage II block of a configuration preset (block registry entry point): vectors of
    ``layout.head_dim`` elements, the sorter's lanes and key width, ``B = bits_per_cycle``."""
    return stage2_select_from_params(cfg.sorter, cfg.layout.head_dim,
                                     bits_per_cycle=bits_per_cycle)
