"""The two-level KV loader: retained token slots in, AXI4 reads out, packed vectors back.

One *job* loads one region (the K or the V array of one (layer, KV head)) for a stream of
retained token slots in strictly ascending order -- the sorter's Stage I output, ``(index,
last)`` -- and delivers, per slot and in the same order, the token's dense vector with zeros
where Stage II masked it. The function is :mod:`hikv.model.loader_ref` bit for bit; the
geometry and timing contract are in :mod:`hikv.hw.loader_timing`; docs/loader.md has the
interface, the memory layouts and measured numbers.

Structure (one job at a time)::

    cfg ----------------------------------------------+
    tokens --> AddressGen --ranges--> Coalescer --requests--> AR (at most N outstanding)
                   |                                              |
                   +--entries (FIFO)--> Packer <--beats-- R <-----+  (in-flight FIFO: addresses)
                                          |
                                          +--> o (token, dense vector, mask, err, last)

* :class:`AddressGen` turns each token into the burst blocks of its record (dense rows, masked
  records) or, per page of the channel-page layout, into one block per (selected channel,
  group of retained tokens); it also pushes one *entry* per record or page telling the data
  side which beats to take.
* :class:`Coalescer` merges blocks into runs and cuts them into AXI INCR requests of at most
  ``max_burst_beats`` beats that never cross 4 KiB, issuing each as soon as its length is known.
* :class:`Packer` assembles records from beats by byte address (a beat may end one record and
  start the next), expands masked records (``lanes`` elements per cycle), or collects a channel
  page in its buffer and emits the page's retained tokens one per cycle.

Read errors (SLVERR, DECERR) are reported on ``status`` (sticky, with the first error's address)
and flag the affected tokens' ``err`` bit; they are never passed on as clean data.

The Verilog is one flat module, clean under ``verilator --lint-only -Wall`` (see the helpers).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, ValueLike
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hikv.params import Config, RecordLayout, clog2

from .loader_timing import AXI_BOUNDARY, COUNTER_WIDTH, LoaderGeometry

__all__ = [
    "Mode",
    "MODE_OF_LAYOUT",
    "token_layout",
    "config_layout",
    "output_layout",
    "axi_read_signature",
    "AddressGen",
    "Coalescer",
    "Packer",
    "KVLoader",
    "make_loader",
]


class Mode(enum.Enum, shape=2):
    """Layout of the region a job reads (``cfg.mode``)."""

    DENSE = 0    # token-major rows of d elements
    MASKED = 1   # per token: d-bit mask, then `kept` compacted elements
    PAGES = 2    # channel-major pages, one channel mask per job


MODE_OF_LAYOUT = {RecordLayout.DENSE: Mode.DENSE, RecordLayout.MASKED_RECORD: Mode.MASKED,
                  RecordLayout.CHANNEL_PAGES: Mode.PAGES}


# --------------------------------------------------------------------------- layouts
def token_layout(geo: LoaderGeometry) -> data.StructLayout:
    """Token input: a retained slot (the sorter's ``index``) and the job's ``last`` flag."""
    return data.StructLayout({"index": geo.index_width, "last": 1})


def config_layout(geo: LoaderGeometry) -> data.StructLayout:
    """Job configuration: layout mode, region base (burst-aligned), kept elements per masked
    record, channel mask (channel pages), outstanding-read limit (0: the built maximum)."""
    lay, lp = geo.layout, geo.loader
    return data.StructLayout({
        "mode": Mode,
        "base": lp.addr_width,
        "kept": range(lay.head_dim + 1),
        "cmask": lay.head_dim,
        "outstanding": range(lp.max_outstanding + 1),
    })


def output_layout(geo: LoaderGeometry) -> data.StructLayout:
    """Packed output: slot, dense vector (element 0 in the low bits, zeros where masked),
    element mask, read-error flag, last token of the job."""
    lay = geo.layout
    return data.StructLayout({
        "token": geo.index_width,
        "data": lay.head_dim * lay.elem_bytes * 8,
        "mask": lay.head_dim,
        "err": 1,
        "last": 1,
    })


def _range_layout(geo: LoaderGeometry) -> data.StructLayout:
    bw = geo.loader.addr_width - geo.burst_shift
    return data.StructLayout({"b0": bw, "b1": bw, "end": 1})


def _entry_layout(geo: LoaderGeometry) -> data.StructLayout:
    aw = geo.loader.addr_width - geo.beat_shift
    return data.StructLayout({
        "page": 1,        # a channel page (else one row / record)
        "token": geo.index_width,   # the slot, or the page number
        "fa": aw,         # first beat (beat address) of the record, or the page's first beat
        "la": aw,         # last beat the record / page needs
        "off": max(1, geo.beat_shift),  # byte lane of the record's first byte
        "last": 1,        # last record / page of the job
        "nodata": 1,      # page without selected channels / skipped token: nothing to read
        "bitmap": geo.layout.page_tokens,  # retained tokens of the page
    })


def _request_layout(geo: LoaderGeometry) -> data.StructLayout:
    return data.StructLayout({"addr": geo.loader.addr_width,
                              "beats": range(geo.loader.max_burst_beats + 1)})


def _beat_layout(geo: LoaderGeometry) -> data.StructLayout:
    return data.StructLayout({"data": geo.beat_bytes * 8, "err": 1,
                              "addr": geo.loader.addr_width - geo.beat_shift})


def axi_read_signature(geo: LoaderGeometry) -> wiring.Signature:
    """AXI4 read master (AR and R channels), member names as in the AXI specification."""
    lp = geo.loader
    return wiring.Signature({
        "arid": Out(lp.id_width), "araddr": Out(lp.addr_width), "arlen": Out(8),
        "arsize": Out(3), "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
        "rid": In(lp.id_width), "rdata": In(lp.data_width), "rresp": In(2), "rlast": In(1),
        "rvalid": In(1), "rready": Out(1),
    })


def _status_signature(geo: LoaderGeometry) -> wiring.Signature:
    return wiring.Signature({
        "busy": Out(1),          # a job is running
        "done": Out(1),          # the last job finished (until the next cfg)
        "slverr": Out(1),        # a beat of this job answered SLVERR (sticky per job)
        "decerr": Out(1),        # a beat of this job answered DECERR (sticky per job)
        "err_addr": Out(geo.loader.addr_width),  # byte address of the first erroneous beat
        "rlast_error": Out(1),   # RLAST did not match the request length
        "order_error": Out(1),   # a token index was not above the previous one (dropped)
        "cfg_error": Out(1),     # unaligned base (low bits ignored) or kept > d (clamped)
    })


def _stats_signature() -> wiring.Signature:
    w = COUNTER_WIDTH
    return wiring.Signature({
        "bursts": Out(w),            # AR requests issued
        "bytes": Out(w),             # bytes received on R (beats x beat bytes)
        "busy_cycles": Out(w),       # cycles with status.busy
        "mem_wait_cycles": Out(w),   # busy, reads outstanding, no R beat offered
        "ar_stall_cycles": Out(w),   # ARVALID without ARREADY
        "out_stall_cycles": Out(w),  # output valid without ready
    })


# --------------------------------------------------------------------------- helpers
# Amaranth's Verilog back end shortens the operands of arithmetic and comparison cells (it
# drops constant-zero top bits), which Verilator's -Wall reports as width mismatches. These
# helpers give every such cell operands of one explicit width; the ``^ 0`` keeps the back end
# from shortening the zero extension again. They cost nothing after synthesis.
def _x(v: ValueLike, width: int) -> Value:
    """``v`` zero-extended (or truncated) to ``width`` bits, opaque to operand shortening."""
    v = Value.cast(v)
    e = Cat(v, Const(0, width - len(v))) if width > len(v) else v[:width]
    return e ^ Const(0, width)


def _w(*vs: ValueLike) -> int:
    return max(len(Value.cast(v)) for v in vs)


def _add(a: ValueLike, b: ValueLike, width: int) -> Value:
    return (_x(a, width) + _x(b, width))[:width]


def _sub(a: ValueLike, b: ValueLike, width: int) -> Value:
    return (_x(a, width) - _x(b, width))[:width]


def _mul(a: ValueLike, b: ValueLike, width: int) -> Value:
    return (_x(a, width) * _x(b, width))[:width]


def _lt(a: ValueLike, b: ValueLike) -> Value:
    w = _w(a, b)
    return _x(a, w) < _x(b, w)


def _eq(a: ValueLike, b: ValueLike) -> Value:
    w = _w(a, b)
    return _x(a, w) == _x(b, w)


def _eqc(v: ValueLike, c: int) -> Value:
    """``v == c`` for a constant ``c`` that fits ``v``."""
    v = Value.cast(v)
    return ~(v ^ Const(c, len(v))).any()


def _zero(v: ValueLike) -> Value:
    return ~Value.cast(v).any()


def _popcount(bits: list[Value], width: int) -> Value:
    acc: Value = Const(0, width)
    for b in bits:
        acc = _add(acc, b, width)
    return acc


def _onehot(m: Module, idx: Value, n: int, name: str) -> Signal:
    """``1 << idx`` as ``n`` bits."""
    oh = Signal(n, name=name)
    m.d.comb += oh.eq(Cat(*[_eqc(idx, i) if i < 1 << len(idx) else Const(0, 1)
                            for i in range(n)]))
    return oh


def _lowest(m: Module, vec: Value, name: str) -> Signal:
    """Index of the lowest set bit of ``vec`` (0 when none is set)."""
    idx = Signal(range(max(2, len(vec))), name=name)
    for i in reversed(range(len(vec))):
        with m.If(vec[i]):
            m.d.comb += idx.eq(i)
    return idx


def _highest(m: Module, vec: Value, name: str) -> Signal:
    """Index of the highest set bit of ``vec`` (0 when none is set)."""
    idx = Signal(range(max(2, len(vec))), name=name)
    for i in range(len(vec)):
        with m.If(vec[i]):
            m.d.comb += idx.eq(i)
    return idx


def _select(items: list[Value], idx: Value) -> Value:
    """``items[idx]`` as a binary mux tree on the bits of ``idx`` (zeros past the end)."""
    width = max(len(v) for v in items)
    level = [_x(v, width) for v in items]
    for bit in range(len(idx)):
        nxt = []
        for i in range(0, len(level), 2):
            hi = level[i + 1] if i + 1 < len(level) else Const(0, width)
            nxt.append(Mux(idx[bit], hi, level[i]))
        level = nxt
    return level[0]


def _log2(n: int) -> int:
    return clog2(n) if n > 1 else 0


class _Inline:
    """A sub-block whose logic is added to its parent's module (one flat Verilog module)."""

    def build(self, m: Module) -> None:
        raise NotImplementedError

    def elaborate(self, platform: object) -> Module:
        m = Module()
        self.build(m)
        return m

    def inline(self, m: Module) -> None:
        """Add this block's logic to ``m`` (instead of ``m.submodules``)."""
        self._MustUse__used = True     # elaborated into the parent; see amaranth._unused
        self.build(m)


class _Fifo:
    """First-in first-out queue of ``depth`` (a power of two) words, read combinationally.

    Write ``w_data`` with ``w_en`` while ``w_rdy``; ``r_data`` is the oldest word while
    ``r_rdy``; ``r_en`` drops it. ``level`` counts the words held.
    """

    def __init__(self, m: Module, *, width: int, depth: int, name: str) -> None:
        assert depth >= 2 and depth & (depth - 1) == 0
        aw = _log2(depth)
        self.w_data = Signal(width, name=f"{name}_w_data")
        self.w_en = Signal(name=f"{name}_w_en")
        self.w_rdy = Signal(name=f"{name}_w_rdy")
        self.r_data = Signal(width, name=f"{name}_r_data")
        self.r_en = Signal(name=f"{name}_r_en")
        self.r_rdy = Signal(name=f"{name}_r_rdy")
        self.level = Signal(aw + 1, name=f"{name}_level")
        wp = Signal(aw, name=f"{name}_wp")
        rp = Signal(aw, name=f"{name}_rp")
        mem = Memory(shape=width, depth=depth, init=[])
        m.submodules[f"{name}_mem"] = mem
        wport = mem.write_port()
        rport = mem.read_port(domain="comb")
        do_w = self.w_en & self.w_rdy
        do_r = self.r_en & self.r_rdy
        m.d.comb += [
            self.w_rdy.eq(~self.level[aw]),
            self.r_rdy.eq(self.level.any()),
            wport.addr.eq(wp), wport.data.eq(self.w_data), wport.en.eq(do_w),
            rport.addr.eq(rp), self.r_data.eq(rport.data),
        ]
        with m.If(do_w):
            m.d.sync += wp.eq(_add(wp, 1, aw))
        with m.If(do_r):
            m.d.sync += rp.eq(_add(rp, 1, aw))
        with m.If(do_w & ~do_r):
            m.d.sync += self.level.eq(_add(self.level, 1, aw + 1))
        with m.If(do_r & ~do_w):
            m.d.sync += self.level.eq(_sub(self.level, 1, aw + 1))


# --------------------------------------------------------------------------- address side
# AddressGen states
_IDLE, _RUN, _CLOSE_E, _CLOSE_R, _FLUSH, _DONE = range(6)


class AddressGen(_Inline, wiring.Component):
    """Tokens to burst-block ranges (for the coalescer) and entries (for the packer).

    ``start`` (one cycle, with the job's ``mode`` / ``base`` / ``rec_len`` / ``stride`` /
    ``cmask`` stable until ``done``) begins a job. Rows and records: per token one range and
    one entry, in the same cycle. Channel pages: tokens are gathered per page; when the page
    closes (a token of another page, or the last token) its entry is pushed, then one
    single-block range per (selected channel, group of retained tokens), in address order. The
    job ends with an ``end`` range.

    A token whose index is not above the previous one is not read: it pulses ``order_error``
    and becomes a *skip* entry (``nodata`` record), so the output stays one item per input
    token. In page mode a skip entry goes out at once, ahead of the page being gathered, except
    a skipped last token, which follows that page.
    """

    def __init__(self, geo: LoaderGeometry) -> None:
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
            "ranges": Out(stream.Signature(_range_layout(geo))),
            "entries": Out(stream.Signature(_entry_layout(geo))),
            "done": Out(1),
            "order_error": Out(1),
        })

    def build(self, m: Module) -> None:
        g = self._geo
        lay, lp = g.layout, g.loader
        aw, iw = lp.addr_width, g.index_width
        bl, bbl = g.burst_shift, g.beat_shift
        pt, ptl = lay.page_tokens, _log2(lay.page_tokens)
        d = lay.head_dim
        ngroups, gtok = g.groups, g.group_tokens

        tok = self.tokens.payload
        rng = self.ranges.payload
        ent = self.entries.payload

        state = Signal(3, name="agen_state")
        prev = Signal(iw, name="agen_prev")
        have_prev = Signal(name="agen_have_prev")
        cur_page = Signal(max(1, iw - ptl), name="agen_page")
        bitmap = Signal(pt, name="agen_bitmap")
        have_page = Signal(name="agen_have_page")
        closing_last = Signal(name="agen_closing_last")
        skip_last = Signal(name="agen_skip_last")     # a skipped last token follows the page
        skip_token = Signal(iw, name="agen_skip_token")
        page_base = Signal(aw, name="agen_page_base")
        gmap = Signal(ngroups, name="agen_gmap")
        crem = Signal(d, name="agen_crem")
        grem = Signal(ngroups, name="agen_grem")
        r_sent = Signal(name="agen_r_sent")
        e_sent = Signal(name="agen_e_sent")

        ooo = Signal(name="agen_ooo")
        m.d.comb += ooo.eq(have_prev & ~_lt(prev, tok.index))

        # records: byte address of the token's record and of its last byte
        rec_a = Signal(aw, name="agen_rec_a")
        rec_e = Signal(aw, name="agen_rec_e")
        m.d.comb += [rec_a.eq(_add(self.base, _mul(tok.index, self.stride, aw), aw)),
                     rec_e.eq(_sub(_add(rec_a, self.rec_len, aw), 1, aw))]

        # pages: page number, token in page, base, token groups, last beat
        tpage = tok.index[ptl:] if ptl < iw else Const(0, 1)
        tslot = _onehot(m, tok.index[:ptl], pt, "agen_tslot") if ptl else Const(1, 1)
        pb = Signal(aw, name="agen_pb")
        m.d.comb += pb.eq(_add(self.base, _mul(cur_page, Const(g.page_bytes), aw), aw))
        gm = Signal(ngroups, name="agen_gm")
        m.d.comb += gm.eq(Cat(*[bitmap[i * gtok:(i + 1) * gtok].any() for i in range(ngroups)]))
        c_hi = _highest(m, self.cmask, "agen_c_hi")
        g_hi = _highest(m, gm, "agen_g_hi")
        chunk_l, group_l = _log2(lay.channel_chunk_bytes), _log2(g.group_bytes)
        last_addr = _add(_add(pb, Cat(Const(0, chunk_l), c_hi), aw),
                         Cat(Const(0, group_l), g_hi), aw)
        page_la = Signal(aw - bbl, name="agen_page_la")
        m.d.comb += page_la.eq(Cat(Const((1 << (bl - bbl)) - 1, bl - bbl), last_addr[bl:]))

        is_pages = _eqc(self.mode.as_value(), Mode.PAGES.value)

        def reset_job() -> list:
            return [have_prev.eq(0), have_page.eq(0), closing_last.eq(0), skip_last.eq(0),
                    r_sent.eq(0), e_sent.eq(0)]

        def after_page() -> None:
            with m.If(closing_last | skip_last):
                m.d.sync += state.eq(_FLUSH)
            with m.Else():
                m.d.sync += state.eq(_RUN)

        with m.If(_eqc(state, _IDLE) | _eqc(state, _DONE)):
            m.d.comb += self.done.eq(_eqc(state, _DONE))
            with m.If(self.start):
                m.d.sync += reset_job() + [state.eq(_RUN)]

        with m.Elif(_eqc(state, _RUN)):
            with m.If(is_pages):
                same = have_page & _eq(tpage, cur_page)
                with m.If(self.tokens.valid & ooo):
                    m.d.comb += self.order_error.eq(self.tokens.ready)
                    with m.If(tok.last):
                        # the page being gathered closes first, then the skip entry
                        m.d.comb += self.tokens.ready.eq(1)
                        m.d.sync += [skip_last.eq(1), skip_token.eq(tok.index),
                                     closing_last.eq(0), state.eq(_CLOSE_E)]
                    with m.Else():
                        m.d.comb += [self.entries.valid.eq(1), ent.nodata.eq(1),
                                     ent.token.eq(tok.index),
                                     self.tokens.ready.eq(self.entries.ready)]
                with m.Elif(self.tokens.valid & (~have_page | same)):
                    m.d.comb += self.tokens.ready.eq(1)
                    m.d.sync += [cur_page.eq(tpage), have_page.eq(1),
                                 bitmap.eq(Mux(have_page, bitmap | tslot, tslot)),
                                 prev.eq(tok.index), have_prev.eq(1)]
                    with m.If(tok.last):
                        m.d.sync += [closing_last.eq(1), state.eq(_CLOSE_E)]
                with m.Elif(self.tokens.valid):
                    m.d.sync += [closing_last.eq(0), state.eq(_CLOSE_E)]
            with m.Else():
                m.d.comb += [
                    rng.b0.eq(rec_a[bl:]), rng.b1.eq(rec_e[bl:]),
                    self.ranges.valid.eq(self.tokens.valid & ~ooo & self.entries.ready),
                    ent.token.eq(tok.index), ent.fa.eq(rec_a[bbl:]),
                    ent.la.eq(rec_e[bbl:]), ent.off.eq(rec_a[:bbl] if bbl else 0),
                    ent.last.eq(tok.last), ent.nodata.eq(ooo),
                    self.entries.valid.eq(self.tokens.valid & (ooo | self.ranges.ready)),
                    self.tokens.ready.eq(self.entries.ready & (ooo | self.ranges.ready)),
                ]
                with m.If(self.tokens.valid & self.tokens.ready):
                    with m.If(ooo):
                        m.d.comb += self.order_error.eq(1)
                    with m.Else():
                        m.d.sync += [prev.eq(tok.index), have_prev.eq(1)]
                    with m.If(tok.last):
                        m.d.sync += state.eq(_FLUSH)

        with m.Elif(_eqc(state, _CLOSE_E)):
            m.d.comb += [
                self.entries.valid.eq(1),
                ent.page.eq(1), ent.token.eq(cur_page), ent.fa.eq(pb[bbl:]),
                ent.la.eq(page_la), ent.bitmap.eq(bitmap), ent.nodata.eq(_zero(self.cmask)),
                ent.last.eq(closing_last),
            ]
            with m.If(self.entries.ready):
                m.d.sync += [page_base.eq(pb), gmap.eq(gm), crem.eq(self.cmask), grem.eq(gm)]
                with m.If(_zero(self.cmask)):
                    m.d.sync += have_page.eq(0)
                    after_page()
                with m.Else():
                    m.d.sync += state.eq(_CLOSE_R)

        with m.Elif(_eqc(state, _CLOSE_R)):
            c = _lowest(m, crem, "agen_c_lo")
            gi = _lowest(m, grem, "agen_g_lo")
            blk_addr = _add(_add(page_base, Cat(Const(0, chunk_l), c), aw),
                            Cat(Const(0, group_l), gi), aw)
            m.d.comb += [self.ranges.valid.eq(1), rng.b0.eq(blk_addr[bl:]),
                         rng.b1.eq(blk_addr[bl:])]
            grem_next = grem & ~_onehot(m, gi, ngroups, "agen_g_oh")
            crem_next = crem & ~_onehot(m, c, d, "agen_c_oh")
            with m.If(self.ranges.ready):
                with m.If(_zero(grem_next)):
                    m.d.sync += [crem.eq(crem_next), grem.eq(gmap)]
                    with m.If(_zero(crem_next)):
                        m.d.sync += have_page.eq(0)
                        after_page()
                with m.Else():
                    m.d.sync += grem.eq(grem_next)

        with m.Elif(_eqc(state, _FLUSH)):
            m.d.comb += [
                self.ranges.valid.eq(~r_sent), rng.end.eq(1),
                self.entries.valid.eq(skip_last & ~e_sent),
                ent.nodata.eq(1), ent.token.eq(skip_token), ent.last.eq(1),
            ]
            with m.If(self.ranges.valid & self.ranges.ready):
                m.d.sync += r_sent.eq(1)
            with m.If(self.entries.valid & self.entries.ready):
                m.d.sync += e_sent.eq(1)
            r_ok = r_sent | self.ranges.ready
            e_ok = ~skip_last | e_sent | self.entries.ready
            with m.If(r_ok & e_ok):
                m.d.sync += [r_sent.eq(0), e_sent.eq(0), skip_last.eq(0), state.eq(_DONE)]


class Coalescer(_Inline, wiring.Component):
    """Burst-block ranges (ascending) to AXI INCR requests, as :func:`axi_requests` cuts them.

    Keeps the current run as the next byte address to request (``addr``) and the run's end. A
    range whose first block is at most one past the run's end extends it; any other range
    closes the run, which is then requested to its end before the range starts a new one. A
    request of ``min(max_burst_beats * beat, 4 KiB - addr % 4 KiB)`` bytes is issued as soon as
    the run reaches that far (its length cannot change any more); the remainder when the run
    closes. One range and one request per cycle. ``done`` after the ``end`` range once
    everything is requested.
    """

    def __init__(self, geo: LoaderGeometry) -> None:
        self._geo = geo
        super().__init__({
            "start": In(1),
            "ranges": In(stream.Signature(_range_layout(geo))),
            "requests": Out(stream.Signature(_request_layout(geo))),
            "done": Out(1),
        })

    def build(self, m: Module) -> None:
        g = self._geo
        aw = g.loader.addr_width
        bl, bbl = g.burst_shift, g.beat_shift
        max_req = g.max_request_bytes
        w = aw + 1                                   # byte addresses up to 2**aw inclusive
        cw = max(max_req, AXI_BOUNDARY).bit_length()

        addr = Signal(w, name="coal_addr")
        run_end = Signal(w, name="coal_run_end")
        have = Signal(name="coal_have")
        ending = Signal(name="coal_ending")

        pending = Signal(w, name="coal_pending")
        rem4k = Signal(cw, name="coal_rem4k")
        cap = Signal(cw, name="coal_cap")
        n = Signal(cw, name="coal_n")
        m.d.comb += [
            pending.eq(_sub(run_end, addr, w)),
            rem4k.eq(_sub(Const(AXI_BOUNDARY), addr[:_log2(AXI_BOUNDARY)], cw)),
            cap.eq(Mux(_lt(rem4k, Const(max_req)), rem4k, _x(Const(max_req), cw))),
            n.eq(Mux(_lt(pending, cap), pending[:cw], cap)),
        ]
        head = self.ranges.payload
        hstart = Signal(w, name="coal_hstart")
        hend = Signal(w, name="coal_hend")
        m.d.comb += [hstart.eq(_x(Cat(Const(0, bl), head.b0), w)),
                     hend.eq(_x(Cat(Const(0, bl), _add(head.b1, 1, len(head.b1) + 1)), w))]
        adj = have & ~_lt(run_end, hstart)
        eager = have & ~_lt(pending, cap)
        closing = (ending | (self.ranges.valid & ~head.end & ~adj)) & pending.any()

        req = self.requests.payload
        m.d.comb += [
            self.requests.valid.eq(eager | closing),
            req.addr.eq(addr[:aw]),
            req.beats.eq(n[bbl:]),
            self.ranges.ready.eq(~ending & (head.end | adj | _zero(pending))),
            self.done.eq(ending & _zero(pending)),
        ]
        with m.If(self.requests.valid & self.requests.ready):
            m.d.sync += addr.eq(_add(addr, n, w))
        with m.If(self.ranges.valid & self.ranges.ready):
            with m.If(head.end):
                m.d.sync += ending.eq(1)
            with m.Elif(adj):
                with m.If(_lt(run_end, hend)):
                    m.d.sync += run_end.eq(hend)
            with m.Else():
                m.d.sync += [addr.eq(hstart), run_end.eq(hend), have.eq(1)]
        with m.If(self.start):
            m.d.sync += [addr.eq(0), run_end.eq(0), have.eq(0), ending.eq(0)]


# --------------------------------------------------------------------------- data side
class Packer(_Inline, wiring.Component):
    """Beats (with their addresses) and entries to the packed output stream.

    The head entry is held in a register (``cur``) while the FIFO head is the next entry.
    Rows and records: the beats ``fa..la`` of ``cur`` are written into a word buffer; at ``la``
    the record (shifted by its start lane, bytes past ``rec_len`` cleared) goes to the
    expander. The ``la`` beat is kept for the next record unless ``cur`` is the last entry or
    the next entry is known to start in a later beat (kept beats that turn out to be unneeded
    are dropped like burst padding, beats before ``fa``). The expander emits dense rows in one
    cycle and masked records in ``expand_cycles`` (``lanes`` output elements per cycle, each
    taken from the compacted elements by the prefix count of the mask). A skip entry (a token
    out of order) becomes an output with ``err`` set, zero data and mask. Channel pages: beats
    of the page go to the buffer at their offset in the page; at ``la`` the page's retained
    tokens leave one per cycle, channels outside ``cmask`` zeroed. Beats after the last entry
    are dropped.
    """

    def __init__(self, geo: LoaderGeometry) -> None:
        self._geo = geo
        lay = geo.layout
        super().__init__({
            "start": In(1),
            "mode": In(Mode),
            "rec_len": In(range(geo.record_bytes_max + 1)),
            "cmask": In(lay.head_dim),
            "beats": In(stream.Signature(_beat_layout(geo))),
            "entries": In(stream.Signature(_entry_layout(geo))),
            "o": Out(stream.Signature(output_layout(geo))),
            "done": Out(1),
        })

    def build(self, m: Module) -> None:
        g = self._geo
        lay = g.layout
        d, eb, pt = lay.head_dim, lay.elem_bytes, lay.page_tokens
        ew = eb * 8
        bb = g.beat_bytes
        rmax = g.record_bytes_max
        mb = lay.mask_bytes
        row_bits = d * ew
        nw = g.buffer_words
        rw = g.record_words
        x, steps = g.lanes, g.expand_cycles
        ptl = _log2(pt)
        xw = x.bit_length()

        nxt = self.entries.payload
        bt = self.beats.payload
        o = self.o.payload

        buf = [Signal(bb * 8, name=f"pack_buf{i}", reset_less=True) for i in range(nw)]
        cur = Signal(_entry_layout(g), name="pack_cur")
        cur_valid = Signal(name="pack_cur_valid")
        cur_err = Signal(name="pack_cur_err")
        last_popped = Signal(name="pack_last_popped")
        draining = Signal(name="pack_draining")
        bmp = Signal(pt, name="pack_bmp")
        done = Signal(name="pack_done")
        m.d.comb += self.done.eq(done)
        is_dense = _eqc(self.mode.as_value(), Mode.DENSE.value)

        # ---------------------------------------------------------------- entry register
        retire = Signal(name="pack_retire")
        load = Signal(name="pack_load")
        m.d.comb += [load.eq(self.entries.valid & (~cur_valid | retire)),
                     self.entries.ready.eq(load)]
        with m.If(load):
            m.d.sync += [cur.eq(nxt), cur_valid.eq(1)]
        with m.Elif(retire):
            m.d.sync += cur_valid.eq(0)
        with m.If(retire):
            m.d.sync += cur_err.eq(0)
            with m.If(cur.last):
                m.d.sync += last_popped.eq(1)

        # ---------------------------------------------------------------- output register
        o_free = Signal(name="pack_o_free")
        m.d.comb += o_free.eq(~self.o.valid | self.o.ready)
        o_load = Signal(name="pack_o_load")
        o_token = Signal(g.index_width, name="pack_o_token")
        o_data = Signal(row_bits, name="pack_o_data")
        o_mask = Signal(d, name="pack_o_mask")
        o_err = Signal(name="pack_o_err")
        o_last = Signal(name="pack_o_last")
        with m.If(o_load):
            m.d.sync += [self.o.valid.eq(1), o.token.eq(o_token), o.data.eq(o_data),
                         o.mask.eq(o_mask), o.err.eq(o_err), o.last.eq(o_last)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.o.valid & self.o.ready & o.last):
            m.d.sync += done.eq(1)

        # ---------------------------------------------------------------- expander (B)
        busy = Signal(name="pack_busy")
        step = Signal(max(1, _log2(steps)), name="pack_step")
        cmp_ = Signal(row_bits, reset_less=True, name="pack_cmp")   # compacted, from bit 0
        msk = Signal(d, reset_less=True, name="pack_msk")           # mask, rotated x per step
        acc = Signal(row_bits, reset_less=True, name="pack_acc")    # groups, in from the top
        b_token = Signal(g.index_width, name="pack_b_token")
        b_err = Signal(name="pack_b_err")
        b_last = Signal(name="pack_b_last")
        b_dense = Signal(name="pack_b_dense")
        final = Signal(name="pack_final")
        m.d.comb += final.eq(b_dense | _eqc(step, steps - 1))
        b_fire = busy & (~final | o_free)
        b_ready = ~busy | (b_fire & final)

        mg = msk[:x]
        elems = [cmp_[k * ew:(k + 1) * ew] for k in range(x)]
        lanes = []
        for p in range(x):
            pre = _popcount([mg[i] for i in range(p)], xw)
            lanes.append(Mux(mg[p], _select(elems[:p + 1], pre), 0))
        lane_vec = Cat(*lanes)
        pc = _popcount([mg[i] for i in range(x)], xw)
        acc_next = Cat(acc[x * ew:], lane_vec)

        with m.If(b_fire):
            m.d.sync += [cmp_.eq(cmp_ >> Cat(Const(0, _log2(ew)), pc)),
                         msk.eq(msk.rotate_right(x)), acc.eq(acc_next),
                         step.eq(_add(step, 1, len(step)))]
            with m.If(final):
                m.d.sync += [busy.eq(0), step.eq(0)]
                m.d.comb += [o_load.eq(1), o_token.eq(b_token), o_err.eq(b_err),
                             o_last.eq(b_last)]
                with m.If(b_dense):
                    m.d.comb += [o_data.eq(cmp_), o_mask.eq(msk)]
                with m.Else():
                    m.d.comb += [o_data.eq(acc_next), o_mask.eq(msk.rotate_right(x))]

        # ---------------------------------------------------------------- capture (A)
        before = _lt(bt.addr, cur.fa)
        at_end = _eq(bt.addr, cur.la)
        widx = Signal(_log2(nw), name="pack_widx")
        m.d.comb += widx.eq(_sub(bt.addr, cur.fa, len(bt.addr)))
        write = Signal(name="pack_write")
        wsel = [write & _eqc(widx, j) for j in range(nw)]
        for j in range(nw):
            with m.If(wsel[j]):
                m.d.sync += buf[j].eq(bt.data)

        # record as it would be with this beat written, shifted to its first byte
        words = [Mux(wsel[j], bt.data, buf[j]) for j in range(rw)]
        flat = Cat(*words)
        shifted = Signal(rmax * 8, name="pack_shifted")
        m.d.comb += shifted.eq(flat >> Cat(Const(0, 3), cur.off))
        lw = len(self.rec_len)
        lenmask = Cat(*[_lt(Const(j, lw), self.rec_len).replicate(8) for j in range(rmax)])
        rec = Signal(rmax * 8, name="pack_rec")
        m.d.comb += rec.eq(shifted & lenmask)
        a2b = Signal(name="pack_a2b")
        skip = Signal(name="pack_skip")
        with m.If(a2b):
            m.d.sync += [busy.eq(1), step.eq(0), b_token.eq(cur.token), b_last.eq(cur.last)]
            with m.If(skip):
                m.d.sync += [b_err.eq(1), b_dense.eq(1), cmp_.eq(0), msk.eq(0)]
            with m.Else():
                m.d.sync += [b_err.eq(cur_err | bt.err), b_dense.eq(is_dense)]
                with m.If(is_dense):
                    m.d.sync += [cmp_.eq(rec[:row_bits]), msk.eq(Const((1 << d) - 1, d))]
                with m.Else():
                    m.d.sync += [cmp_.eq(rec[mb * 8: mb * 8 + row_bits]), msk.eq(rec[:d])]

        # channel page rows: element (channel c, token t) sits at element c * pt + t
        pflat = Cat(*[buf[j] for j in range(nw)])
        rows = [Cat(*[pflat[(c * pt + t) * ew:(c * pt + t + 1) * ew] for c in range(d)])
                for t in range(pt)]
        cbits = Cat(*[self.cmask[c].replicate(ew) for c in range(d)])
        t_lo = _lowest(m, bmp, "pack_t_lo")
        row = _select(rows, t_lo[:ptl]) if ptl else rows[0]
        bmp_next = bmp & ~(_onehot(m, t_lo[:ptl], pt, "pack_t_oh") if ptl else Const(1, 1))

        # keep the la beat unless nothing later can start in it
        keep = ~cur.last & ~(self.entries.valid & ~nxt.nodata & ~_eq(nxt.fa, cur.la))

        with m.If(draining):
            # one retained token of the page per cycle (after a skip output in the expander)
            with m.If(o_free & ~busy):
                m.d.comb += [o_load.eq(1),
                             o_token.eq(Cat(t_lo[:ptl], cur.token) if ptl else cur.token),
                             o_data.eq(row & cbits), o_mask.eq(self.cmask),
                             o_err.eq(cur_err), o_last.eq(cur.last & _zero(bmp_next))]
                m.d.sync += bmp.eq(bmp_next)
                with m.If(_zero(bmp_next)):
                    m.d.comb += retire.eq(1)
                    m.d.sync += draining.eq(0)
        with m.Elif(~cur_valid):
            m.d.comb += self.beats.ready.eq(last_popped)      # trailing padding beats
        with m.Elif(cur.nodata):
            with m.If(cur.page):
                m.d.sync += [draining.eq(1), bmp.eq(cur.bitmap)]
            with m.Elif(b_ready):
                m.d.comb += [a2b.eq(1), skip.eq(1), retire.eq(1)]
        with m.Elif(self.beats.valid):
            with m.If(before):
                m.d.comb += self.beats.ready.eq(1)
            with m.Elif(~at_end):
                m.d.comb += [self.beats.ready.eq(1), write.eq(1)]
                m.d.sync += cur_err.eq(cur_err | bt.err)
            with m.Elif(cur.page):
                m.d.comb += [self.beats.ready.eq(1), write.eq(1)]
                m.d.sync += [cur_err.eq(cur_err | bt.err), draining.eq(1),
                             bmp.eq(cur.bitmap)]
            with m.Elif(b_ready):
                m.d.comb += [self.beats.ready.eq(~keep), a2b.eq(1), write.eq(1),
                             retire.eq(1)]

        with m.If(self.start):
            m.d.sync += [last_popped.eq(0), done.eq(0), draining.eq(0), cur_err.eq(0),
                         cur_valid.eq(0)]


# --------------------------------------------------------------------------- top
class KVLoader(wiring.Component):
    """The two-level KV loader (see the module docstring and docs/loader.md).

    Ports: ``cfg`` (one :func:`config_layout` per job, accepted while idle), ``tokens``
    (:func:`token_layout`, strictly ascending slots, ``last`` on the final one), ``o``
    (:func:`output_layout`, one per token in input order), ``axi`` (AXI4 read master, ARID 0,
    INCR, full-width beats), ``status`` and ``stats`` (per-job counters, cleared by ``cfg``).
    The Verilog is one flat module.
    """

    def __init__(self, geo: LoaderGeometry) -> None:
        self._geo = geo
        super().__init__({
            "cfg": In(stream.Signature(config_layout(geo))),
            "tokens": In(stream.Signature(token_layout(geo))),
            "o": Out(stream.Signature(output_layout(geo))),
            "axi": Out(axi_read_signature(geo)),
            "status": Out(_status_signature(geo)),
            "stats": Out(_stats_signature()),
        })

    @property
    def geometry(self) -> LoaderGeometry:
        return self._geo

    def elaborate(self, platform: object) -> Module:
        m = Module()
        g = self._geo
        lay, lp = g.layout, g.loader
        aw, bbl, bl = lp.addr_width, g.beat_shift, g.burst_shift
        d = lay.head_dim
        al = _log2(lay.align_bytes)
        cw = COUNTER_WIDTH

        agen, coal, pack = AddressGen(g), Coalescer(g), Packer(g)
        for blk in (agen, coal, pack):
            blk.inline(m)
        efifo = _Fifo(m, width=len(agen.entries.payload.as_value()),
                      depth=g.entry_fifo_depth, name="entries")
        req_w = len(coal.requests.payload.as_value())
        ififo = _Fifo(m, width=req_w, depth=g.inflight_depth, name="inflight")

        # ---------------------------------------------------------------- job configuration
        busy = Signal()
        start = Signal()
        mode = Signal(Mode)
        base = Signal(aw)
        kept = Signal(range(d + 1))
        cmask = Signal(d)
        limit = Signal(range(lp.max_outstanding + 1))
        rec_len = Signal(range(g.record_bytes_max + 1))
        stride = Signal(range(lay.stride(g.record_bytes_max) + 1))
        st = self.status
        cp = self.cfg.payload
        cfg_fire = self.cfg.valid & self.cfg.ready

        m.d.comb += self.cfg.ready.eq(~busy)
        m.d.sync += start.eq(cfg_fire)
        with m.If(cfg_fire):
            bad_mode = _eqc(cp.mode.as_value(), 3)
            too_many = _lt(Const(d), cp.kept)
            o_bad = _zero(cp.outstanding) | _lt(Const(lp.max_outstanding), cp.outstanding)
            m.d.sync += [
                busy.eq(1), st.done.eq(0),
                mode.eq(Mux(bad_mode, Mode.DENSE.value, cp.mode.as_value())),
                base.eq(Cat(Const(0, bl), cp.base[bl:])),
                kept.eq(Mux(too_many, d, cp.kept)),
                cmask.eq(cp.cmask),
                limit.eq(Mux(o_bad, lp.max_outstanding, cp.outstanding)),
                st.cfg_error.eq(bad_mode | cp.base[:bl].any() | too_many),
                st.slverr.eq(0), st.decerr.eq(0), st.err_addr.eq(0),
                st.rlast_error.eq(0), st.order_error.eq(0),
            ]
        rw = len(rec_len)
        masked_len = _add(Const(lay.mask_bytes), _mul(kept, Const(lay.elem_bytes), rw), rw)
        is_dense = _eqc(mode.as_value(), Mode.DENSE.value)
        m.d.comb += [rec_len.eq(Mux(is_dense, lay.row_bytes, masked_len)),
                     stride.eq(Cat(Const(0, al),
                                   _add(rec_len, Const(lay.align_bytes - 1), rw + 1)[al:]))]
        m.d.comb += st.busy.eq(busy)

        for blk in (agen, coal, pack):
            m.d.comb += blk.start.eq(start)
        m.d.comb += [agen.mode.eq(mode), agen.base.eq(base), agen.rec_len.eq(rec_len),
                     agen.stride.eq(stride), agen.cmask.eq(cmask),
                     pack.mode.eq(mode), pack.rec_len.eq(rec_len), pack.cmask.eq(cmask)]

        # ---------------------------------------------------------------- address side
        wiring.connect(m, wiring.flipped(self.tokens), agen.tokens)
        wiring.connect(m, agen.ranges, coal.ranges)
        m.d.comb += [efifo.w_data.eq(agen.entries.payload.as_value()),
                     efifo.w_en.eq(agen.entries.valid),
                     agen.entries.ready.eq(efifo.w_rdy),
                     pack.entries.payload.eq(efifo.r_data),
                     pack.entries.valid.eq(efifo.r_rdy),
                     efifo.r_en.eq(pack.entries.ready)]
        with m.If(agen.order_error):
            m.d.sync += st.order_error.eq(1)

        ax = self.axi
        req = coal.requests.payload
        room = _lt(ififo.level, limit)
        ar_fire = ax.arvalid & ax.arready
        m.d.comb += [
            ax.arvalid.eq(coal.requests.valid & room),
            ax.araddr.eq(req.addr), ax.arlen.eq(_sub(req.beats, 1, 8)),
            ax.arsize.eq(lp.axsize), ax.arburst.eq(1), ax.arid.eq(0),
            coal.requests.ready.eq(ax.arready & room),
            ififo.w_data.eq(req.as_value()),
            ififo.w_en.eq(ar_fire),
        ]

        # ---------------------------------------------------------------- data side
        head = data.View(_request_layout(g), ififo.r_data)
        k = Signal(range(lp.max_burst_beats))
        last_beat = _eq(k, _sub(head.beats, 1, len(head.beats)))
        r_fire = ax.rvalid & ax.rready
        beat_addr = _add(head.addr[bbl:], k, aw - bbl)
        m.d.comb += [
            pack.beats.valid.eq(ax.rvalid & ififo.r_rdy),
            pack.beats.payload.data.eq(ax.rdata),
            pack.beats.payload.err.eq(ax.rresp[1]),
            pack.beats.payload.addr.eq(beat_addr),
            ax.rready.eq(pack.beats.ready & ififo.r_rdy),
            ififo.r_en.eq(r_fire & last_beat),
        ]
        with m.If(r_fire):
            m.d.sync += k.eq(Mux(last_beat, 0, _add(k, 1, len(k))))
            with m.If(ax.rlast ^ last_beat):
                m.d.sync += st.rlast_error.eq(1)
            with m.If(ax.rresp[1]):
                with m.If(~st.slverr & ~st.decerr):
                    m.d.sync += st.err_addr.eq(Cat(Const(0, bbl), beat_addr))
                with m.If(ax.rresp[0]):
                    m.d.sync += st.decerr.eq(1)
                with m.Else():
                    m.d.sync += st.slverr.eq(1)
        wiring.connect(m, pack.o, wiring.flipped(self.o))

        # ---------------------------------------------------------------- completion
        finished = pack.done & coal.done & agen.done & _zero(ififo.level)
        with m.If(busy & finished & ~start):
            m.d.sync += [busy.eq(0), st.done.eq(1)]

        # ---------------------------------------------------------------- statistics
        s = self.stats
        with m.If(cfg_fire):
            m.d.sync += [s.bursts.eq(0), s.bytes.eq(0), s.busy_cycles.eq(0),
                         s.mem_wait_cycles.eq(0), s.ar_stall_cycles.eq(0),
                         s.out_stall_cycles.eq(0)]
        with m.Else():
            with m.If(ar_fire):
                m.d.sync += s.bursts.eq(_add(s.bursts, 1, cw))
            with m.If(r_fire):
                m.d.sync += s.bytes.eq(_add(s.bytes, Const(g.beat_bytes), cw))
            with m.If(busy):
                m.d.sync += s.busy_cycles.eq(_add(s.busy_cycles, 1, cw))
            with m.If(busy & ififo.level.any() & ~ax.rvalid):
                m.d.sync += s.mem_wait_cycles.eq(_add(s.mem_wait_cycles, 1, cw))
            with m.If(ax.arvalid & ~ax.arready):
                m.d.sync += s.ar_stall_cycles.eq(_add(s.ar_stall_cycles, 1, cw))
            with m.If(self.o.valid & ~self.o.ready):
                m.d.sync += s.out_stall_cycles.eq(_add(s.out_stall_cycles, 1, cw))
        return m


def make_loader(cfg: Config) -> KVLoader:
    """The loader for a configuration (``hikv verilog --block loader``)."""
    return KVLoader(LoaderGeometry(cfg.layout, cfg.loader))
