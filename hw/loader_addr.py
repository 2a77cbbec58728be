"""The loader's address side: retained token slots to burst-block ranges and packer entries.

See :class:`AddressGen`; the function is :func:`hikv.model.refs.loader.job_ranges` (ranges) and
:func:`hikv.rtl_tests.loader_jobs.expected_entries` (entries), checked in
tests/test_loader_units.py.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import enum, stream, wiring
from amaranth.lib.wiring import In, Out

from .loader_ports import Mode, entry_layout, range_layout, token_layout
from .loader_timing import LoaderGeometry
from .uops import (
    add_cs,
    add_w,
    eq_const,
    highest,
    is_zero,
    log2_int,
    lowest,
    mul_w,
    onehot,
    sub_w,
    ueq,
    ult,
)

__all__ = ["AgenState", "AddressGen"]


class AgenState(enum.Enum, shape=3):
    """States of :class:`AddressGen`."""

    IDLE = 0      #: before the first job
    RUN = 1       #: taking tokens (records: one range + entry each; pages: gathering a page)
    CLOSE_E = 2   #: pages: push the closed page's entry
    CLOSE_R = 3   #: pages: one range per (selected channel, token group) of the closed page
    FLUSH = 4     #: push the ``end`` range (and a deferred skip entry of a skipped last token)
    DONE = 5      #: job finished (``done``) until the next ``start``


class AddressGen(wiring.Component):
    """Tokens to burst-block ranges (for the coalescer) and entries (for the packer).

    ``start`` (one cycle, with the job's ``base`` and ``rec_len``; these and ``mode`` /
    ``stride`` / ``cmask`` stable from the cycle after it until ``done``) begins a job. Rows and
    records: per token one range and one entry, in the same cycle. Channel pages: tokens are
    gathered per page; when the page closes (a token of another page, or the last token) its
    entry is pushed, then one single-block range per (selected channel, group of retained
    tokens), in address order. The job ends with an ``end`` range.

    A token whose index is not above the previous one is not read: it pulses ``order_error``
    and becomes a *skip* entry (``nodata`` record), so the output stays one item per input
    token. In page mode a skip entry goes out at once, ahead of the page being gathered, except
    a skipped last token, which follows that page.

    Parameters
    ----------
    geo : LoaderGeometry
        Layout and loader parameters (all widths).

    Members
    -------
    start : ``In(1)``
        Begin a job (one cycle).
    mode, base, rec_len, stride, cmask : ``In``
        The job's configuration, stable while it runs.
    tokens : ``In(stream.Signature(token_layout(geo)))``
        Retained slots, ascending, ``last`` on the final one.
    ranges : ``Out(stream.Signature(range_layout(geo)))``
        Burst-block ranges in address order, then one ``end``.
    entries : ``Out(stream.Signature(entry_layout(geo)))``
        One per record, page or skipped token, in output order.
    done : ``Out(1)``
        The job's ``end`` range and last entry are out.
    order_error : ``Out(1)``
        Pulses when a token out of order is dropped.
    """

    def __init__(self, geo: LoaderGeometry) -> None:
        if not isinstance(geo, LoaderGeometry):
            raise TypeError(f"AddressGen needs a LoaderGeometry, not {geo!r}")
        self._geo = geo
        lay, lp = geo.layout, geo.loader
        super().__init__({
            "start": In(1),
            "mode": In(Mode),
            "base": In(lp.addr_width),
            "rec_len": In(range(geo.record_bytes_max + 1)),
            "stride": In(range(lay.stride(geo.record_bytes_max) + 1)),
            "cmask": In(lay.head_dim),
            "tokens": In(stream.Signature(token_layout(geo))),
            "ranges": Out(stream.Signature(range_layout(geo))),
            "entries": Out(stream.Signature(entry_layout(geo))),
            "done": Out(1),
            "order_error": Out(1),
        })

    @property
    def geometry(self) -> LoaderGeometry:
        return self._geo

    # ------------------------------------------------------------------ registers
    def _registers(self) -> SimpleNamespace:
        g = self._geo
        lay, lp = g.layout, g.loader
        iw, ptl = g.index_width, log2_int(lay.page_tokens)
        return SimpleNamespace(
            state=Signal(AgenState, name="agen_state"),
            prev=Signal(iw, name="agen_prev"),
            have_prev=Signal(name="agen_have_prev"),
            cur_page=Signal(max(1, iw - ptl), name="agen_page"),
            bitmap=Signal(lay.page_tokens, name="agen_bitmap"),
            have_page=Signal(name="agen_have_page"),
            closing_last=Signal(name="agen_closing_last"),
            skip_last=Signal(name="agen_skip_last"),     # a skipped last token follows the page
            skip_token=Signal(iw, name="agen_skip_token"),
            page_base=Signal(lp.addr_width, name="agen_page_base"),
            gmap=Signal(g.groups, name="agen_gmap"),
            crem=Signal(lay.head_dim, name="agen_crem"),
            grem=Signal(g.groups, name="agen_grem"),
            r_sent=Signal(name="agen_r_sent"),
            e_sent=Signal(name="agen_e_sent"),
        )

    def _addresses(self, m: Module, r: SimpleNamespace) -> SimpleNamespace:
        """Combinational addresses: the token's record, and the page being closed."""
        g = self._geo
        lay, aw = g.layout, g.loader.addr_width
        bl, bbl = g.burst_shift, g.beat_shift
        pt, ptl = lay.page_tokens, log2_int(lay.page_tokens)
        tok = self.tokens.payload
        a = SimpleNamespace()
        a.ooo = Signal(name="agen_ooo")
        m.d.comb += a.ooo.eq(r.have_prev & ~ult(r.prev, tok.index))

        # records: byte address of the token's record and of its last byte
        a.rec_a = Signal(aw, name="agen_rec_a")
        a.rec_e = Signal(aw, name="agen_rec_e")
        # the record's last byte from base + rec_len - 1, a register loaded at `start`, so the
        # multiply-add is the only arithmetic between the token and the range
        rec_last = Signal(aw, name="agen_rec_last")
        # (rec_len >= 1: rec_len - 1 is a short subtract, then one carry-select adder)
        rw = len(self.rec_len)
        with m.If(self.start):
            m.d.sync += rec_last.eq(add_cs(self.base, sub_w(self.rec_len, 1, rw), aw))
        off = Signal(aw, name="agen_rec_off")
        m.d.comb += [off.eq(mul_w(tok.index, self.stride, aw)),
                     a.rec_a.eq(add_w(self.base, off, aw)),
                     a.rec_e.eq(add_w(rec_last, off, aw))]

        # pages: page number, token in page, base, token groups, last beat
        a.tpage = tok.index[ptl:] if ptl < g.index_width else Const(0, 1)
        a.tslot = onehot(m, tok.index[:ptl], pt, "agen_tslot") if ptl else Const(1, 1)
        a.pb = Signal(aw, name="agen_pb")
        m.d.comb += a.pb.eq(add_w(self.base, mul_w(r.cur_page, Const(g.page_bytes), aw), aw))
        a.gm = Signal(g.groups, name="agen_gm")
        gtok = g.group_tokens
        m.d.comb += a.gm.eq(Cat(*[r.bitmap[i * gtok:(i + 1) * gtok].any()
                                  for i in range(g.groups)]))
        c_hi = highest(m, self.cmask, "agen_c_hi")
        g_hi = highest(m, a.gm, "agen_g_hi")
        a.chunk_l, a.group_l = log2_int(lay.channel_chunk_bytes), log2_int(g.group_bytes)
        last_addr = add_w(add_w(a.pb, Cat(Const(0, a.chunk_l), c_hi), aw),
                          Cat(Const(0, a.group_l), g_hi), aw)
        a.page_la = Signal(aw - bbl, name="agen_page_la")
        m.d.comb += a.page_la.eq(Cat(Const((1 << (bl - bbl)) - 1, bl - bbl), last_addr[bl:]))
        return a

    # ------------------------------------------------------------------ states
    def _after_page(self, m: Module, r: SimpleNamespace) -> None:
        with m.If(r.closing_last | r.skip_last):
            m.d.sync += r.state.eq(AgenState.FLUSH)
        with m.Else():
            m.d.sync += r.state.eq(AgenState.RUN)

    def _run_pages(self, m: Module, r: SimpleNamespace, a: SimpleNamespace) -> None:
        tok, ent = self.tokens.payload, self.entries.payload
        same = r.have_page & ueq(a.tpage, r.cur_page)
        with m.If(self.tokens.valid & a.ooo):
            m.d.comb += self.order_error.eq(self.tokens.ready)
            with m.If(tok.last):
                # the page being gathered closes first, then the skip entry
                m.d.comb += self.tokens.ready.eq(1)
                m.d.sync += [r.skip_last.eq(1), r.skip_token.eq(tok.index),
                             r.closing_last.eq(0), r.state.eq(AgenState.CLOSE_E)]
            with m.Else():
                m.d.comb += [self.entries.valid.eq(1), ent.nodata.eq(1),
                             ent.token.eq(tok.index),
                             self.tokens.ready.eq(self.entries.ready)]
        with m.Elif(self.tokens.valid & (~r.have_page | same)):
            m.d.comb += self.tokens.ready.eq(1)
            m.d.sync += [r.cur_page.eq(a.tpage), r.have_page.eq(1),
                         r.bitmap.eq(Mux(r.have_page, r.bitmap | a.tslot, a.tslot)),
                         r.prev.eq(tok.index), r.have_prev.eq(1)]
            with m.If(tok.last):
                m.d.sync += [r.closing_last.eq(1), r.state.eq(AgenState.CLOSE_E)]
        with m.Elif(self.tokens.valid):
            m.d.sync += [r.closing_last.eq(0), r.state.eq(AgenState.CLOSE_E)]

    def _run_records(self, m: Module, r: SimpleNamespace, a: SimpleNamespace) -> None:
        g = self._geo
        bl, bbl = g.burst_shift, g.beat_shift
        tok, rng, ent = self.tokens.payload, self.ranges.payload, self.entries.payload
        m.d.comb += [
            rng.b0.eq(a.rec_a[bl:]), rng.b1.eq(a.rec_e[bl:]),
            self.ranges.valid.eq(self.tokens.valid & ~a.ooo & self.entries.ready),
            ent.token.eq(tok.index), ent.fa.eq(a.rec_a[bbl:]),
            ent.la.eq(a.rec_e[bbl:]), ent.off.eq(a.rec_a[:bbl] if bbl else 0),
            ent.last.eq(tok.last), ent.nodata.eq(a.ooo),
            self.entries.valid.eq(self.tokens.valid & (a.ooo | self.ranges.ready)),
            self.tokens.ready.eq(self.entries.ready & (a.ooo | self.ranges.ready)),
        ]
        with m.If(self.tokens.valid & self.tokens.ready):
            with m.If(a.ooo):
                m.d.comb += self.order_error.eq(1)
            with m.Else():
                m.d.sync += [r.prev.eq(tok.index), r.have_prev.eq(1)]
            with m.If(tok.last):
                m.d.sync += r.state.eq(AgenState.FLUSH)

    def _close_entry(self, m: Module, r: SimpleNamespace, a: SimpleNamespace) -> None:
        bbl = self._geo.beat_shift
        ent = self.entries.payload
        m.d.comb += [
            self.entries.valid.eq(1),
            ent.page.eq(1), ent.token.eq(r.cur_page), ent.fa.eq(a.pb[bbl:]),
            ent.la.eq(a.page_la), ent.bitmap.eq(r.bitmap), ent.nodata.eq(is_zero(self.cmask)),
            ent.last.eq(r.closing_last),
        ]
        with m.If(self.entries.ready):
            m.d.sync += [r.page_base.eq(a.pb), r.gmap.eq(a.gm), r.crem.eq(self.cmask),
                         r.grem.eq(a.gm)]
            with m.If(is_zero(self.cmask)):
                m.d.sync += r.have_page.eq(0)
                self._after_page(m, r)
            with m.Else():
                m.d.sync += r.state.eq(AgenState.CLOSE_R)

    def _close_ranges(self, m: Module, r: SimpleNamespace, a: SimpleNamespace) -> None:
        g = self._geo
        aw, bl = g.loader.addr_width, g.burst_shift
        rng = self.ranges.payload
        c = lowest(m, r.crem, "agen_c_lo")
        gi = lowest(m, r.grem, "agen_g_lo")
        blk_addr = add_w(add_w(r.page_base, Cat(Const(0, a.chunk_l), c), aw),
                         Cat(Const(0, a.group_l), gi), aw)
        m.d.comb += [self.ranges.valid.eq(1), rng.b0.eq(blk_addr[bl:]),
                     rng.b1.eq(blk_addr[bl:])]
        grem_next = r.grem & ~onehot(m, gi, g.groups, "agen_g_oh")
        crem_next = r.crem & ~onehot(m, c, g.layout.head_dim, "agen_c_oh")
        with m.If(self.ranges.ready):
            with m.If(is_zero(grem_next)):
                m.d.sync += [r.crem.eq(crem_next), r.grem.eq(r.gmap)]
                with m.If(is_zero(crem_next)):
                    m.d.sync += r.have_page.eq(0)
                    self._after_page(m, r)
            with m.Else():
                m.d.sync += r.grem.eq(grem_next)

    def _flush(self, m: Module, r: SimpleNamespace) -> None:
        rng, ent = self.ranges.payload, self.entries.payload
        m.d.comb += [
            self.ranges.valid.eq(~r.r_sent), rng.end.eq(1),
            self.entries.valid.eq(r.skip_last & ~r.e_sent),
            ent.nodata.eq(1), ent.token.eq(r.skip_token), ent.last.eq(1),
        ]
        with m.If(self.ranges.valid & self.ranges.ready):
            m.d.sync += r.r_sent.eq(1)
        with m.If(self.entries.valid & self.entries.ready):
            m.d.sync += r.e_sent.eq(1)
        r_ok = r.r_sent | self.ranges.ready
        e_ok = ~r.skip_last | r.e_sent | self.entries.ready
        with m.If(r_ok & e_ok):
            m.d.sync += [r.r_sent.eq(0), r.e_sent.eq(0), r.skip_last.eq(0),
                         r.state.eq(AgenState.DONE)]

    def elaborate(self, platform: object) -> Module:
        m = Module()
        r = self._registers()
        a = self._addresses(m, r)
        pages_built = self._geo.channel_pages      # LoaderParams.channel_pages
        is_pages = eq_const(self.mode.as_value(), Mode.PAGES.value)

        def state_is(*states: AgenState) -> Value:
            v = r.state.as_value()
            return Cat(*[eq_const(v, s.value) for s in states]).any()

        # an If chain, not m.Switch: Verilog case statements that assign a signal in some
        # states only are incomplete (verilator -Wall CASEINCOMPLETE)
        with m.If(state_is(AgenState.IDLE, AgenState.DONE)):
            m.d.comb += self.done.eq(state_is(AgenState.DONE))
            with m.If(self.start):
                m.d.sync += [r.have_prev.eq(0), r.have_page.eq(0), r.closing_last.eq(0),
                             r.skip_last.eq(0), r.r_sent.eq(0), r.e_sent.eq(0),
                             r.state.eq(AgenState.RUN)]
        with m.Elif(state_is(AgenState.RUN)):
            if pages_built:
                with m.If(is_pages):
                    self._run_pages(m, r, a)
                with m.Else():
                    self._run_records(m, r, a)
            else:                                   # no page logic: never CLOSE_E / CLOSE_R
                self._run_records(m, r, a)
        if pages_built:
            with m.Elif(state_is(AgenState.CLOSE_E)):
                self._close_entry(m, r, a)
            with m.Elif(state_is(AgenState.CLOSE_R)):
                self._close_ranges(m, r, a)
        with m.Elif(state_is(AgenState.FLUSH)):
            self._flush(m, r)
        return m
