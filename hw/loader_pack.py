"""The loader's data side: R beats and packer entries to the packed output stream.

See :class:`Packer`; the function is :func:`hikv.model.refs.loader.packed_output`, checked in
tests/test_loader_units.py.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .loader_ports import Mode, beat_layout, entry_layout, output_layout
from .loader_timing import LoaderGeometry
from .uops import (
    add_w,
    eq_const,
    is_zero,
    log2_int,
    lowest,
    onehot,
    popcount,
    select,
    sub_w,
    ueq,
    ult,
)

__all__ = ["Packer"]


class Packer(wiring.Component):
    """Beats (with their addresses) and entries to the packed output stream.

    The head entry is held in a register (``cur``) while the queue head is the next entry.
    Rows and records: the beats ``fa..la`` of ``cur`` are written into a word buffer; at ``la``
    the record (shifted by its start lane, bytes past ``rec_len`` cleared) goes to the
    expander. The ``la`` beat is kept for the next record unless ``cur`` is the last entry or
    the next entry is known to start in a later beat (kept beats that turn out to be unneeded
    are dropped like burst padding, beats before ``fa``). The expander emits dense rows in one
    cycle and masked records in ``expand_cycles`` (``lanes`` output elements per cycle, each
    taken from the compacted elements by the prefix count of the mask). A skip entry (a token
    out of order) becomes an output with ``err`` set, zero data and mask. Channel pages: beats
    of the page go to the buffer at their offset in the page; at ``la`` the page's retained
    tokens leave one per cycle, channels outside ``cmask`` zeroed (built only with
    ``LoaderParams.channel_pages``). Beats after the last entry are dropped.

    Parameters
    ----------
    geo : LoaderGeometry
        Layout and loader parameters (all widths, buffer words, expander lanes).

    Members
    -------
    start : ``In(1)``
        Begin a job (one cycle).
    mode, rec_len, cmask : ``In``
        The job's configuration, stable while it runs.
    beats : ``In(stream.Signature(beat_layout(geo)))``
        R beats with their beat address and error flag, in request order.
    entries : ``In(stream.Signature(entry_layout(geo)))``
        The address generator's entries (through the entry queue).
    o : ``Out(stream.Signature(output_layout(geo)))``
        One packed vector per token, in token order (a registered output).
    done : ``Out(1)``
        The output with ``last`` has left.
    """

    def __init__(self, geo: LoaderGeometry) -> None:
        if not isinstance(geo, LoaderGeometry):
            raise TypeError(f"Packer needs a LoaderGeometry, not {geo!r}")
        self._geo = geo
        lay = geo.layout
        super().__init__({
            "start": In(1),
            "mode": In(Mode),
            "rec_len": In(range(geo.record_bytes_max + 1)),
            "cmask": In(lay.head_dim),
            "beats": In(stream.Signature(beat_layout(geo))),
            "entries": In(stream.Signature(entry_layout(geo))),
            "o": Out(stream.Signature(output_layout(geo))),
            "done": Out(1),
        })

    @property
    def geometry(self) -> LoaderGeometry:
        return self._geo

    # ------------------------------------------------------------------ entry register
    def _entry_register(self, m: Module) -> SimpleNamespace:
        g = self._geo
        s = SimpleNamespace(
            buf=[Signal(g.beat_bytes * 8, name=f"pack_buf{i}", reset_less=True)
                 for i in range(g.buffer_words)],
            cur=Signal(entry_layout(g), name="pack_cur"),
            cur_valid=Signal(name="pack_cur_valid"),
            cur_err=Signal(name="pack_cur_err"),
            last_popped=Signal(name="pack_last_popped"),
            draining=Signal(name="pack_draining"),
            bmp=Signal(g.layout.page_tokens, name="pack_bmp"),
            done=Signal(name="pack_done"),
            retire=Signal(name="pack_retire"),
            load=Signal(name="pack_load"),
            is_dense=eq_const(self.mode.as_value(), Mode.DENSE.value),
        )
        m.d.comb += [self.done.eq(s.done),
                     s.load.eq(self.entries.valid & (~s.cur_valid | s.retire)),
                     self.entries.ready.eq(s.load)]
        with m.If(s.load):
            m.d.sync += [s.cur.eq(self.entries.payload), s.cur_valid.eq(1)]
        with m.Elif(s.retire):
            m.d.sync += s.cur_valid.eq(0)
        with m.If(s.retire):
            m.d.sync += s.cur_err.eq(0)
            with m.If(s.cur.last):
                m.d.sync += s.last_popped.eq(1)
        return s

    # ------------------------------------------------------------------ output register
    def _output_register(self, m: Module, s: SimpleNamespace) -> None:
        g = self._geo
        d = g.layout.head_dim
        o = self.o.payload
        s.o_free = Signal(name="pack_o_free")
        m.d.comb += s.o_free.eq(~self.o.valid | self.o.ready)
        s.o_load = Signal(name="pack_o_load")
        s.o_token = Signal(g.index_width, name="pack_o_token")
        s.o_data = Signal(d * g.layout.elem_bytes * 8, name="pack_o_data")
        s.o_mask = Signal(d, name="pack_o_mask")
        s.o_err = Signal(name="pack_o_err")
        s.o_last = Signal(name="pack_o_last")
        with m.If(s.o_load):
            m.d.sync += [self.o.valid.eq(1), o.token.eq(s.o_token), o.data.eq(s.o_data),
                         o.mask.eq(s.o_mask), o.err.eq(s.o_err), o.last.eq(s.o_last)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.o.valid & self.o.ready & o.last):
            m.d.sync += s.done.eq(1)

    # ------------------------------------------------------------------ expander (B)
    def _expander(self, m: Module, s: SimpleNamespace) -> None:
        """Masked record -> dense vector, ``lanes`` elements per cycle (dense rows at once)."""
        g = self._geo
        d, ew = g.layout.head_dim, g.layout.elem_bytes * 8
        row_bits = d * ew
        x, steps = g.lanes, g.expand_cycles
        s.busy = Signal(name="pack_busy")
        s.step = Signal(max(1, log2_int(steps)), name="pack_step")
        s.cmp = Signal(row_bits, reset_less=True, name="pack_cmp")   # compacted, from bit 0
        s.msk = Signal(d, reset_less=True, name="pack_msk")          # mask, rotated x per step
        acc = Signal(row_bits, reset_less=True, name="pack_acc")     # groups, in from the top
        s.b_token = Signal(g.index_width, name="pack_b_token")
        s.b_err = Signal(name="pack_b_err")
        s.b_last = Signal(name="pack_b_last")
        s.b_dense = Signal(name="pack_b_dense")
        # b_dense | step == steps - 1 while busy, a register (b_dense drives the whole output
        # row's multiplexer: its fan-out stays off the path to b_ready and the entry pop)
        final = Signal(name="pack_final")
        s.final = final
        if not g.masked_records:
            # LoaderParams.masked_records off: every record is a row or a skip, one cycle each
            # (the top reads a masked job as dense); the expander is the output's register
            m.d.comb += final.eq(1)
            s.b_ready = ~s.busy | s.o_free
            with m.If(s.busy & s.o_free):
                m.d.sync += s.busy.eq(0)
                m.d.comb += [s.o_load.eq(1), s.o_token.eq(s.b_token), s.o_err.eq(s.b_err),
                             s.o_last.eq(s.b_last), s.o_data.eq(s.cmp), s.o_mask.eq(s.msk)]
            return
        b_fire = s.busy & (~final | s.o_free)
        s.b_ready = ~s.busy | (b_fire & final)

        mg = s.msk[:x]
        elems = [s.cmp[k * ew:(k + 1) * ew] for k in range(x)]
        lanes = [Mux(mg[p], select(elems[:p + 1], popcount([mg[i] for i in range(p)])), 0)
                 for p in range(x)]
        pc = popcount([mg[i] for i in range(x)])
        acc_next = Cat(acc[x * ew:], Cat(*lanes))

        with m.If(b_fire):
            m.d.sync += [s.cmp.eq(s.cmp >> Cat(Const(0, log2_int(ew)), pc)),
                         s.msk.eq(s.msk.rotate_right(x)), acc.eq(acc_next),
                         s.step.eq(add_w(s.step, 1, len(s.step))),
                         final.eq(s.b_dense | (eq_const(s.step, steps - 2) if steps > 1
                                               else Const(1)))]
            with m.If(final):
                m.d.sync += [s.busy.eq(0), s.step.eq(0)]
                m.d.comb += [s.o_load.eq(1), s.o_token.eq(s.b_token), s.o_err.eq(s.b_err),
                             s.o_last.eq(s.b_last)]
                with m.If(s.b_dense):
                    m.d.comb += [s.o_data.eq(s.cmp), s.o_mask.eq(s.msk)]
                with m.Else():
                    m.d.comb += [s.o_data.eq(acc_next), s.o_mask.eq(s.msk.rotate_right(x))]

    # ------------------------------------------------------------------ capture (A)
    def _capture(self, m: Module, s: SimpleNamespace) -> None:
        """Beats into the word buffer; the record as it is with this beat -> the expander."""
        g = self._geo
        lay = g.layout
        d, ew = lay.head_dim, lay.elem_bytes * 8
        row_bits, rmax, mb = d * ew, g.record_bytes_max, lay.mask_bytes
        bt, cur = self.beats.payload, s.cur
        s.before = ult(bt.addr, cur.fa)
        s.at_end = ueq(bt.addr, cur.la)
        widx = Signal(log2_int(g.buffer_words), name="pack_widx")
        m.d.comb += widx.eq(sub_w(bt.addr, cur.fa, len(bt.addr)))
        s.write = Signal(name="pack_write")
        wsel = [s.write & eq_const(widx, j) for j in range(g.buffer_words)]
        for j in range(g.buffer_words):
            with m.If(wsel[j]):
                m.d.sync += s.buf[j].eq(bt.data)

        # the record as it is with this beat written, shifted to its first byte: it goes to
        # the expander only with the entry's last beat (``at_end``), which is written at word
        # ``la - fa``, so the word it replaces is chosen from the entry register alone (not
        # by ``write``, which waits for the beat's address compares)
        lidx = Signal(log2_int(g.buffer_words), name="pack_lidx")
        m.d.comb += lidx.eq(sub_w(cur.la, cur.fa, len(cur.la)))
        words = [Mux(eq_const(lidx, j), bt.data, s.buf[j]) for j in range(g.record_words)]
        shifted = Signal(rmax * 8, name="pack_shifted")
        m.d.comb += shifted.eq(Cat(*words) >> Cat(Const(0, 3), cur.off))
        lw = len(self.rec_len)
        lenmask = Cat(*[ult(Const(j, lw), self.rec_len).replicate(8) for j in range(rmax)])
        rec = Signal(rmax * 8, name="pack_rec")
        m.d.comb += rec.eq(shifted & lenmask)
        s.a2b = Signal(name="pack_a2b")
        # the expander's registers load whenever it can take a record (``b_ready``, from
        # registers and ``o.ready``), with what a2b would give it now; a2b (after the beat's
        # address compares) only sets ``busy``, so the compares reach one flip-flop, not the
        # record's. A load without a2b is not used: the expander stays (or goes) idle. A skip
        # (a2b while ``cur.nodata``) gives an err output with zero data and mask.
        with m.If(s.a2b):
            m.d.sync += [s.busy.eq(1), s.step.eq(0)]
        with m.If(s.b_ready):
            m.d.sync += [s.b_token.eq(cur.token), s.b_last.eq(cur.last)]
            if g.masked_records:
                m.d.sync += s.final.eq(cur.nodata | s.is_dense
                                       | Const(int(g.expand_cycles == 1)))
            with m.If(cur.nodata):
                m.d.sync += [s.b_err.eq(1), s.b_dense.eq(1), s.cmp.eq(0), s.msk.eq(0)]
            with m.Else():
                m.d.sync += [s.b_err.eq(s.cur_err | bt.err), s.b_dense.eq(s.is_dense)]
                if not g.masked_records:            # rows only
                    m.d.sync += [s.cmp.eq(rec[:row_bits]), s.msk.eq(Const((1 << d) - 1, d))]
                else:
                    with m.If(s.is_dense):
                        m.d.sync += [s.cmp.eq(rec[:row_bits]),
                                     s.msk.eq(Const((1 << d) - 1, d))]
                    with m.Else():
                        m.d.sync += [s.cmp.eq(rec[mb * 8: mb * 8 + row_bits]),
                                     s.msk.eq(rec[:d])]

    # ------------------------------------------------------------------ page rows
    def _page_drain(self, m: Module, s: SimpleNamespace) -> None:
        """A buffered channel page: one retained token per cycle (after a skip output in the
        expander); element (channel c, token t) sits at element ``c * pt + t``."""
        lay = self._geo.layout
        d, pt, ew = lay.head_dim, lay.page_tokens, lay.elem_bytes * 8
        ptl = log2_int(pt)
        pflat = Cat(*s.buf)
        rows = [Cat(*[pflat[(c * pt + t) * ew:(c * pt + t + 1) * ew] for c in range(d)])
                for t in range(pt)]
        cbits = Cat(*[self.cmask[c].replicate(ew) for c in range(d)])
        t_lo = lowest(m, s.bmp, "pack_t_lo")
        row = select(rows, t_lo[:ptl]) if ptl else rows[0]
        bmp_next = s.bmp & ~(onehot(m, t_lo[:ptl], pt, "pack_t_oh") if ptl else Const(1, 1))
        with m.If(s.o_free & ~s.busy):
            m.d.comb += [s.o_load.eq(1),
                         s.o_token.eq(Cat(t_lo[:ptl], s.cur.token) if ptl else s.cur.token),
                         s.o_data.eq(row & cbits), s.o_mask.eq(self.cmask),
                         s.o_err.eq(s.cur_err), s.o_last.eq(s.cur.last & is_zero(bmp_next))]
            m.d.sync += s.bmp.eq(bmp_next)
            with m.If(is_zero(bmp_next)):
                m.d.comb += s.retire.eq(1)
                m.d.sync += s.draining.eq(0)

    # ------------------------------------------------------------------ control
    def _control(self, m: Module, s: SimpleNamespace) -> None:
        """What to do with the head beat and the current entry."""
        cur, bt, nxt = s.cur, self.beats.payload, self.entries.payload
        # keep the la beat unless nothing later can start in it
        keep = ~cur.last & ~(self.entries.valid & ~nxt.nodata & ~ueq(nxt.fa, cur.la))
        pages = self._geo.channel_pages                 # LoaderParams.channel_pages
        if pages:
            with m.If(s.draining):
                self._page_drain(m, s)
        with (m.Elif if pages else m.If)(~s.cur_valid):       # the chain's first branch
            m.d.comb += self.beats.ready.eq(s.last_popped)      # trailing padding beats
        with m.Elif(cur.nodata):
            if pages:
                with m.If(cur.page):
                    m.d.sync += [s.draining.eq(1), s.bmp.eq(cur.bitmap)]
                with m.Elif(s.b_ready):
                    m.d.comb += [s.a2b.eq(1), s.retire.eq(1)]
            else:
                with m.If(s.b_ready):
                    m.d.comb += [s.a2b.eq(1), s.retire.eq(1)]
        with m.Elif(self.beats.valid):
            with m.If(s.before):
                m.d.comb += self.beats.ready.eq(1)
            with m.Elif(~s.at_end):
                m.d.comb += [self.beats.ready.eq(1), s.write.eq(1)]
                m.d.sync += s.cur_err.eq(s.cur_err | bt.err)
            if pages:
                with m.Elif(cur.page):
                    m.d.comb += [self.beats.ready.eq(1), s.write.eq(1)]
                    m.d.sync += [s.cur_err.eq(s.cur_err | bt.err), s.draining.eq(1),
                                 s.bmp.eq(cur.bitmap)]
            with m.Elif(s.b_ready):
                m.d.comb += [self.beats.ready.eq(~keep), s.a2b.eq(1), s.write.eq(1),
                             s.retire.eq(1)]
        with m.If(self.start):
            m.d.sync += [s.last_popped.eq(0), s.done.eq(0), s.draining.eq(0), s.cur_err.eq(0),
                         s.cur_valid.eq(0)]

    def elaborate(self, platform: object) -> Module:
        m = Module()
        s = self._entry_register(m)
        self._output_register(m, s)
        self._expander(m, s)
        self._capture(m, s)
        self._control(m, s)
        return m
