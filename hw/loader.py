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
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from hikv.params import Config, RecordLayout, clog2

from .loader_timing import COUNTER_WIDTH, LoaderGeometry

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


def _log2(n: int) -> int:
    return clog2(n) if n > 1 else 0


# --------------------------------------------------------------------------- address side
class AddressGen(wiring.Component):
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

    def elaborate(self, platform: object) -> Module:
        m = Module()
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

        prev = Signal(iw)
        have_prev = Signal()
        cur_page = Signal(max(1, iw - ptl))
        bitmap = Signal(pt)
        have_page = Signal()
        closing_last = Signal()
        skip_last = Signal()          # a skipped last token follows the closing page
        skip_token = Signal(iw)
        page_base = Signal(aw)
        gmap = Signal(ngroups)
        crem = Signal(d)
        grem = Signal(ngroups)
        r_sent = Signal()
        e_sent = Signal()

        ooo = Signal()
        m.d.comb += ooo.eq(have_prev & (tok.index <= prev))

        # records: byte address of the token's record and of its last byte
        rec_a = Signal(aw)
        rec_e = Signal(aw)
        m.d.comb += [rec_a.eq(self.base + tok.index * self.stride),
                     rec_e.eq(rec_a + self.rec_len - 1)]

        # pages: page number, token in page, base, token groups, last beat
        tpage = tok.index[ptl:] if ptl < iw else Const(0, 1)
        tslot = Signal(pt)
        m.d.comb += tslot.eq(Const(1, pt) << (tok.index[:ptl] if ptl else 0))
        pb = Signal(aw)
        m.d.comb += pb.eq(self.base + cur_page * g.page_bytes)
        gm = Signal(ngroups)
        m.d.comb += gm.eq(Cat(*[bitmap[i * gtok:(i + 1) * gtok].any() for i in range(ngroups)]))
        c_hi = _highest(m, self.cmask, "c_hi")
        g_hi = _highest(m, gm, "g_hi")
        last_blk = Signal(aw)
        m.d.comb += last_blk.eq((pb + (c_hi << _log2(lay.channel_chunk_bytes))
                                 + (g_hi << _log2(g.group_bytes))) >> bl)
        page_la = Signal(aw - bbl)
        m.d.comb += page_la.eq(Cat(Const((1 << (bl - bbl)) - 1, bl - bbl), last_blk))

        def reset_job() -> list:
            return [have_prev.eq(0), have_page.eq(0), closing_last.eq(0), skip_last.eq(0),
                    r_sent.eq(0), e_sent.eq(0)]

        def after_page() -> None:
            with m.If(closing_last | skip_last):
                m.next = "FLUSH"
            with m.Else():
                m.next = "RUN"

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += reset_job()
                    m.next = "RUN"

            with m.State("RUN"):
                with m.If(self.mode == Mode.PAGES):
                    same = have_page & (tpage == cur_page)
                    with m.If(self.tokens.valid & ooo):
                        m.d.comb += self.order_error.eq(self.tokens.ready)
                        with m.If(tok.last):
                            # the page being gathered closes first, then the skip entry
                            m.d.comb += self.tokens.ready.eq(1)
                            m.d.sync += [skip_last.eq(1), skip_token.eq(tok.index),
                                         closing_last.eq(0)]
                            m.next = "CLOSE_E"
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
                            m.d.sync += closing_last.eq(1)
                            m.next = "CLOSE_E"
                    with m.Elif(self.tokens.valid):
                        m.d.sync += closing_last.eq(0)
                        m.next = "CLOSE_E"
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
                            m.next = "FLUSH"

            with m.State("CLOSE_E"):
                m.d.comb += [
                    self.entries.valid.eq(1),
                    ent.page.eq(1), ent.token.eq(cur_page), ent.fa.eq(pb[bbl:]),
                    ent.la.eq(page_la), ent.bitmap.eq(bitmap), ent.nodata.eq(self.cmask == 0),
                    ent.last.eq(closing_last),
                ]
                with m.If(self.entries.ready):
                    m.d.sync += [page_base.eq(pb), gmap.eq(gm), crem.eq(self.cmask),
                                 grem.eq(gm)]
                    with m.If(self.cmask == 0):
                        m.d.sync += have_page.eq(0)
                        after_page()
                    with m.Else():
                        m.next = "CLOSE_R"

            with m.State("CLOSE_R"):
                c = _lowest(m, crem, "c_lo")
                gi = _lowest(m, grem, "g_lo")
                blk = Signal(aw)
                m.d.comb += blk.eq((page_base + (c << _log2(lay.channel_chunk_bytes))
                                    + (gi << _log2(g.group_bytes))) >> bl)
                m.d.comb += [self.ranges.valid.eq(1), rng.b0.eq(blk), rng.b1.eq(blk)]
                grem_next = grem & ~(Const(1, ngroups) << gi)
                crem_next = crem & ~(Const(1, d) << c)
                with m.If(self.ranges.ready):
                    with m.If(grem_next == 0):
                        m.d.sync += [crem.eq(crem_next), grem.eq(gmap)]
                        with m.If(crem_next == 0):
                            m.d.sync += have_page.eq(0)
                            after_page()
                    with m.Else():
                        m.d.sync += grem.eq(grem_next)

            with m.State("FLUSH"):
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
                    m.d.sync += [r_sent.eq(0), e_sent.eq(0), skip_last.eq(0)]
                    m.next = "DONE"

            with m.State("DONE"):
                m.d.comb += self.done.eq(1)
                with m.If(self.start):
                    m.d.sync += reset_job()
                    m.next = "RUN"
        return m


class Coalescer(wiring.Component):
    """Burst-block ranges (ascending) to AXI INCR requests, as :func:`axi_requests` cuts them.

    Keeps the current run ``[run_start, run_end)`` as the next byte address to request
    (``addr``) and the run's end. A range whose first block is at most one past the run's end
    extends it; any other range closes the run, which is then requested to its end before the
    range starts a new one. A request of ``min(max_burst_beats * beat, 4 KiB - addr % 4 KiB)``
    bytes is issued as soon as the run reaches that far (its length cannot change any more);
    the remainder when the run closes. One range and one request per cycle. ``done`` after the
    ``end`` range once everything is requested.
    """

    def __init__(self, geo: LoaderGeometry) -> None:
        self._geo = geo
        super().__init__({
            "start": In(1),
            "ranges": In(stream.Signature(_range_layout(geo))),
            "requests": Out(stream.Signature(_request_layout(geo))),
            "done": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        g = self._geo
        aw = g.loader.addr_width
        bl, bbl = g.burst_shift, g.beat_shift
        max_req = g.max_request_bytes

        addr = Signal(aw + 1)
        run_end = Signal(aw + 1)
        have = Signal()
        ending = Signal()

        pending = Signal(aw + 1)
        rem4k = Signal(range(4097))
        cap = Signal(range(max(max_req, 4096) + 1))
        n = Signal(range(max(max_req, 4096) + 1))
        m.d.comb += [
            pending.eq(run_end - addr),
            rem4k.eq(4096 - addr[:12]),
            cap.eq(Mux(rem4k < max_req, rem4k, max_req)),
            n.eq(Mux(pending < cap, pending, cap)),
        ]
        head = self.ranges.payload
        hstart = Signal(aw + 1)
        hend = Signal(aw + 1)
        m.d.comb += [hstart.eq(head.b0 << bl), hend.eq((head.b1 + 1) << bl)]
        adj = have & (hstart <= run_end)
        eager = have & (pending >= cap)
        closing = (ending | (self.ranges.valid & ~head.end & ~adj)) & (pending != 0)

        req = self.requests.payload
        m.d.comb += [
            self.requests.valid.eq(eager | closing),
            req.addr.eq(addr[:aw]),
            req.beats.eq(n >> bbl),
            self.ranges.ready.eq(~ending & (head.end | adj | (pending == 0))),
            self.done.eq(ending & (pending == 0)),
        ]
        with m.If(self.requests.valid & self.requests.ready):
            m.d.sync += addr.eq(addr + n)
        with m.If(self.ranges.valid & self.ranges.ready):
            with m.If(head.end):
                m.d.sync += ending.eq(1)
            with m.Elif(adj):
                with m.If(hend > run_end):
                    m.d.sync += run_end.eq(hend)
            with m.Else():
                m.d.sync += [addr.eq(hstart), run_end.eq(hend), have.eq(1)]
        with m.If(self.start):
            m.d.sync += [addr.eq(0), run_end.eq(0), have.eq(0), ending.eq(0)]
        return m


# --------------------------------------------------------------------------- data side
class Packer(wiring.Component):
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

    def elaborate(self, platform: object) -> Module:
        m = Module()
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

        nxt = self.entries.payload
        bt = self.beats.payload
        o = self.o.payload

        buf = Array(Signal(bb * 8, name=f"buf{i}", reset_less=True) for i in range(nw))
        cur = Signal(_entry_layout(g))
        cur_valid = Signal()
        cur_err = Signal()
        last_popped = Signal()
        draining = Signal()
        bmp = Signal(pt)
        done = Signal()
        m.d.comb += self.done.eq(done)

        # ---------------------------------------------------------------- entry register
        retire = Signal()
        load = Signal()
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
        o_free = Signal()
        m.d.comb += o_free.eq(~self.o.valid | self.o.ready)
        o_load = Signal()
        o_token = Signal(g.index_width)
        o_data = Signal(row_bits)
        o_mask = Signal(d)
        o_err = Signal()
        o_last = Signal()
        with m.If(o_load):
            m.d.sync += [self.o.valid.eq(1), o.token.eq(o_token), o.data.eq(o_data),
                         o.mask.eq(o_mask), o.err.eq(o_err), o.last.eq(o_last)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.o.valid & self.o.ready & o.last):
            m.d.sync += done.eq(1)

        # ---------------------------------------------------------------- expander (B)
        busy = Signal()
        step = Signal(range(max(2, steps)))
        cmp_ = Signal(row_bits, reset_less=True)      # compacted elements, consumed from bit 0
        msk = Signal(d, reset_less=True)              # element mask, rotated X per step
        acc = Signal(row_bits, reset_less=True)       # output groups, shifted in from the top
        b_token = Signal(g.index_width)
        b_err = Signal()
        b_last = Signal()
        b_dense = Signal()
        final = b_dense | (step == steps - 1)
        b_fire = busy & (~final | o_free)
        b_ready = ~busy | (b_fire & final)

        mg = msk[:x]
        lanes = []
        for p in range(x):
            pre = sum((mg[i] for i in range(p)), Const(0, 1))
            choices = Array(cmp_[k * ew:(k + 1) * ew] for k in range(p + 1))
            lanes.append(Mux(mg[p], choices[pre], 0))
        lane_vec = Cat(*lanes)
        pc = sum((mg[i] for i in range(x)), Const(0, 1))
        acc_next = Cat(acc[x * ew:], lane_vec)

        with m.If(b_fire):
            m.d.sync += [cmp_.eq(cmp_ >> (pc * ew)), msk.eq(msk.rotate_right(x)),
                         acc.eq(acc_next), step.eq(step + 1)]
            with m.If(final):
                m.d.sync += [busy.eq(0), step.eq(0)]
                m.d.comb += [o_load.eq(1), o_token.eq(b_token), o_err.eq(b_err),
                             o_last.eq(b_last)]
                with m.If(b_dense):
                    m.d.comb += [o_data.eq(cmp_), o_mask.eq(msk)]
                with m.Else():
                    m.d.comb += [o_data.eq(acc_next), o_mask.eq(msk.rotate_right(x))]

        # ---------------------------------------------------------------- capture (A)
        before = bt.addr < cur.fa
        at_end = bt.addr == cur.la
        widx = Signal(range(max(2, nw)))
        m.d.comb += widx.eq(bt.addr - cur.fa)
        write = Signal()
        with m.If(write):
            m.d.sync += buf[widx].eq(bt.data)

        # record as it would be with this beat written, shifted to its first byte
        words = [Mux(write & (widx == j), bt.data, buf[j]) for j in range(rw)]
        flat = Cat(*words)
        shifted = Signal(rmax * 8)
        m.d.comb += shifted.eq(flat >> Cat(Const(0, 3), cur.off))
        lenmask = Cat(*[(self.rec_len > j).replicate(8) for j in range(rmax)])
        rec = Signal(rmax * 8)
        m.d.comb += rec.eq(shifted & lenmask)
        a2b = Signal()
        skip = Signal()
        with m.If(a2b):
            m.d.sync += [busy.eq(1), step.eq(0), b_token.eq(cur.token), b_last.eq(cur.last)]
            with m.If(skip):
                m.d.sync += [b_err.eq(1), b_dense.eq(1), cmp_.eq(0), msk.eq(0)]
            with m.Else():
                m.d.sync += [b_err.eq(cur_err | bt.err), b_dense.eq(self.mode == Mode.DENSE)]
                with m.If(self.mode == Mode.DENSE):
                    m.d.sync += [cmp_.eq(rec[:row_bits]), msk.eq(Const((1 << d) - 1, d))]
                with m.Else():
                    m.d.sync += [cmp_.eq(rec[mb * 8: mb * 8 + row_bits]), msk.eq(rec[:d])]

        # channel page rows: element (channel c, token t) sits at element c * pt + t
        pflat = Cat(*[buf[j] for j in range(nw)])
        rows = Array(Cat(*[pflat[(c * pt + t) * ew:(c * pt + t + 1) * ew] for c in range(d)])
                     for t in range(pt))
        cbits = Cat(*[self.cmask[c].replicate(ew) for c in range(d)])
        t_lo = _lowest(m, bmp, "t_lo")
        bmp_next = bmp & ~(Const(1, pt) << t_lo)

        # keep the la beat unless nothing later can start in it
        keep = ~cur.last & ~(self.entries.valid & ~nxt.nodata & (nxt.fa != cur.la))

        with m.If(draining):
            # one retained token of the page per cycle (after a skip output in the expander)
            with m.If(o_free & ~busy):
                m.d.comb += [o_load.eq(1),
                             o_token.eq(Cat(t_lo[:ptl], cur.token) if ptl else cur.token),
                             o_data.eq(rows[t_lo] & cbits), o_mask.eq(self.cmask),
                             o_err.eq(cur_err), o_last.eq(cur.last & (bmp_next == 0))]
                m.d.sync += bmp.eq(bmp_next)
                with m.If(bmp_next == 0):
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
        return m


# --------------------------------------------------------------------------- top
class KVLoader(wiring.Component):
    """The two-level KV loader (see the module docstring and docs/loader.md).

    Ports: ``cfg`` (one :func:`config_layout` per job, accepted while idle), ``tokens``
    (:func:`token_layout`, strictly ascending slots, ``last`` on the final one), ``o``
    (:func:`output_layout`, one per token in input order), ``axi`` (AXI4 read master, ARID 0,
    INCR, full-width beats), ``status`` and ``stats`` (per-job counters, cleared by ``cfg``).
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

        m.submodules.agen = agen = AddressGen(g)
        m.submodules.coal = coal = Coalescer(g)
        m.submodules.pack = pack = Packer(g)
        m.submodules.entries = efifo = SyncFIFO(width=len(agen.entries.payload.as_value()),
                                                depth=g.entry_fifo_depth)
        req_w = len(coal.requests.payload.as_value())
        m.submodules.inflight = ififo = SyncFIFO(width=req_w, depth=lp.max_outstanding)

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

        m.d.comb += self.cfg.ready.eq(~busy)
        m.d.sync += start.eq(self.cfg.valid & self.cfg.ready)
        with m.If(self.cfg.valid & self.cfg.ready):
            bad_mode = cp.mode.as_value() == 3
            m.d.sync += [
                busy.eq(1), st.done.eq(0),
                mode.eq(Mux(bad_mode, Mode.DENSE, cp.mode)),
                base.eq(Cat(Const(0, bl), cp.base[bl:])),
                kept.eq(Mux(cp.kept > d, d, cp.kept)),
                cmask.eq(cp.cmask),
                limit.eq(Mux((cp.outstanding == 0) | (cp.outstanding > lp.max_outstanding),
                             lp.max_outstanding, cp.outstanding)),
                st.cfg_error.eq(bad_mode | (cp.base[:bl] != 0) | (cp.kept > d)),
                st.slverr.eq(0), st.decerr.eq(0), st.err_addr.eq(0),
                st.rlast_error.eq(0), st.order_error.eq(0),
            ]
        rl = Mux(mode == Mode.DENSE, lay.row_bytes, lay.mask_bytes + kept * lay.elem_bytes)
        m.d.comb += [rec_len.eq(rl),
                     stride.eq(((rec_len + lay.align_bytes - 1) >> al) << al)]
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
        room = ififo.level < limit
        m.d.comb += [
            ax.arvalid.eq(coal.requests.valid & room),
            ax.araddr.eq(req.addr), ax.arlen.eq(req.beats - 1), ax.arsize.eq(lp.axsize),
            ax.arburst.eq(1), ax.arid.eq(0),
            coal.requests.ready.eq(ax.arready & room),
            ififo.w_data.eq(req.as_value()),
            ififo.w_en.eq(ax.arvalid & ax.arready),
        ]

        # ---------------------------------------------------------------- data side
        head = data.View(_request_layout(g), ififo.r_data)
        k = Signal(range(lp.max_burst_beats))
        last_beat = k == head.beats - 1
        r_fire = ax.rvalid & ax.rready
        m.d.comb += [
            pack.beats.valid.eq(ax.rvalid & ififo.r_rdy),
            pack.beats.payload.data.eq(ax.rdata),
            pack.beats.payload.err.eq(ax.rresp[1]),
            pack.beats.payload.addr.eq(head.addr[bbl:] + k),
            ax.rready.eq(pack.beats.ready & ififo.r_rdy),
            ififo.r_en.eq(r_fire & last_beat),
        ]
        with m.If(r_fire):
            m.d.sync += k.eq(Mux(last_beat, 0, k + 1))
            with m.If(ax.rlast != last_beat):
                m.d.sync += st.rlast_error.eq(1)
            with m.If(ax.rresp[1]):
                with m.If(~st.slverr & ~st.decerr):
                    m.d.sync += st.err_addr.eq(Cat(Const(0, bbl), head.addr[bbl:] + k))
                with m.If(ax.rresp[0]):
                    m.d.sync += st.decerr.eq(1)
                with m.Else():
                    m.d.sync += st.slverr.eq(1)
        wiring.connect(m, pack.o, wiring.flipped(self.o))

        # ---------------------------------------------------------------- completion
        finished = pack.done & coal.done & agen.done & (ififo.level == 0)
        with m.If(busy & finished & ~start):
            m.d.sync += [busy.eq(0), st.done.eq(1)]

        # ---------------------------------------------------------------- statistics
        s = self.stats
        with m.If(self.cfg.valid & self.cfg.ready):
            m.d.sync += [s.bursts.eq(0), s.bytes.eq(0), s.busy_cycles.eq(0),
                         s.mem_wait_cycles.eq(0), s.ar_stall_cycles.eq(0),
                         s.out_stall_cycles.eq(0)]
        with m.Else():
            with m.If(ax.arvalid & ax.arready):
                m.d.sync += s.bursts.eq(s.bursts + 1)
            with m.If(r_fire):
                m.d.sync += s.bytes.eq(s.bytes + g.beat_bytes)
            with m.If(busy):
                m.d.sync += s.busy_cycles.eq(s.busy_cycles + 1)
            with m.If(busy & (ififo.level != 0) & ~ax.rvalid):
                m.d.sync += s.mem_wait_cycles.eq(s.mem_wait_cycles + 1)
            with m.If(ax.arvalid & ~ax.arready):
                m.d.sync += s.ar_stall_cycles.eq(s.ar_stall_cycles + 1)
            with m.If(self.o.valid & ~self.o.ready):
                m.d.sync += s.out_stall_cycles.eq(s.out_stall_cycles + 1)
        return m


def make_loader(cfg: Config) -> KVLoader:
    """The loader for a configuration (``hikv verilog --block loader``)."""
    return KVLoader(LoaderGeometry(cfg.layout, cfg.loader))
