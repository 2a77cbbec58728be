"""The two-level KV loader: retained token slots in, AXI4 reads out, packed vectors back.

One *job* loads one region (the K or the V array of one (layer, KV head)) for a stream of
retained token slots in strictly ascending order -- the sorter's Stage I output, ``(index,
last)`` -- and delivers, per slot and in the same order, the token's dense vector with zeros
where Stage II masked it. The function is :mod:`hikv.model.refs.loader` bit for bit; the
geometry and timing contract are in :mod:`hikv.hw.loader_timing`; docs/loader.md has the
interface, the memory layouts and measured numbers.

Structure (one job at a time; one module per function)::

    cfg ----------------------------------------------+
    tokens --> AddressGen --ranges--> slice --> Coalescer --requests--> AR (at most N)
                   |                                              |
                   +--entries (queue)--> Packer <--beats-- R <----+  (in-flight queue)
                                          |
                                          +--> o (token, dense vector, mask, err, last)

* :class:`~hikv.hw.loader_addr.AddressGen` (hw/loader_addr.py) turns each token into the burst
  blocks of its record (dense rows, masked records) or, per page of the channel-page layout,
  into one block per (selected channel, group of retained tokens); it also pushes one *entry*
  per record or page telling the data side which beats to take.
* :class:`~hikv.hw.loader_coalesce.Coalescer` (hw/loader_coalesce.py) merges blocks into runs
  and cuts them into AXI INCR requests of at most ``max_burst_beats`` beats that never cross
  4 KiB, issuing each as soon as its length is known.
* :class:`~hikv.hw.loader_pack.Packer` (hw/loader_pack.py) assembles records from beats by
  byte address (a beat may end one record and start the next), expands masked records
  (``lanes`` elements per cycle), or collects a channel page in its buffer and emits the
  page's retained tokens one per cycle.
* The entry queue and the in-flight request queue are the shared
  :class:`~hikv.hw.sorter_queue.RowQueue` (a written row is at the head the next cycle).
* Port layouts and signatures: hw/loader_ports.py; width-safe arithmetic: hw/uops.py.

Read errors (SLVERR, DECERR) are reported on ``status`` (sticky, with the first error's address)
and flag the affected tokens' ``err`` bit; they are never passed on as clean data.

The Verilog (:func:`hikv.hw.verilog.to_verilog`) is one flat module, clean under ``verilator
--lint-only -Wall``.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hikv.params import Config

from .loader_addr import AddressGen
from .loader_coalesce import Coalescer
from .loader_pack import Packer
from .loader_ports import (
    Mode,
    axi_read_signature,
    config_layout,
    output_layout,
    range_layout,
    request_layout,
    stats_signature,
    status_signature,
    token_layout,
)
from .loader_timing import COUNTER_WIDTH, LoaderGeometry, job_timing
from .sorter_queue import RowQueue
from .uops import add_w, eq_const, is_zero, log2_int, mul_w, sub_w, ueq, ult

__all__ = ["KVLoader", "make_loader"]


class KVLoader(wiring.Component):
    """The two-level KV loader (see the module docstring and docs/loader.md).

    A job starts with a ``cfg`` beat (accepted while idle) and ends when every token's output
    has left and every read has returned (``status.done``). A configuration the RTL cannot use
    is corrected and flagged, never dropped: an unaligned ``base`` loses its low bits, ``kept >
    d`` is clamped to ``d``, mode 3 (and mode 2 on a loader built without
    ``LoaderParams.channel_pages``) and mode 1 on one built without
    ``LoaderParams.masked_records`` read as dense (all set ``status.cfg_error``);
    ``outstanding`` 0 or above the built maximum means the built maximum.

    Parameters
    ----------
    geo : LoaderGeometry
        Record layout and loader parameters; every width, buffer and queue depth comes from it.

    Members
    -------
    cfg : ``In(stream.Signature(config_layout(geo)))``
        One per job: mode, region base, kept elements, channel mask, outstanding-read limit.
    tokens : ``In(stream.Signature(token_layout(geo)))``
        Strictly ascending slots, ``last`` on the final one (a token not above its predecessor
        is answered with an ``err`` output and sets ``status.order_error``).
    o : ``Out(stream.Signature(output_layout(geo)))``
        One per token, in input order: slot, dense vector, element mask, err, last.
    axi : ``Out(axi_read_signature(geo))``
        AXI4 read master: ARID 0, INCR, full-width beats, at most ``outstanding`` reads.
    status : ``Out(status_signature(geo))``
        busy, done and the sticky error flags of the job.
    stats : ``Out(stats_signature())``
        Per-job counters (bursts, bytes, busy / memory-wait / stall cycles), cleared by ``cfg``.
    """

    def __init__(self, geo: LoaderGeometry) -> None:
        if not isinstance(geo, LoaderGeometry):
            raise TypeError(f"KVLoader needs a LoaderGeometry, not {geo!r}")
        self._geo = geo
        super().__init__({
            "cfg": In(stream.Signature(config_layout(geo))),
            "tokens": In(stream.Signature(token_layout(geo))),
            "o": Out(stream.Signature(output_layout(geo))),
            "axi": Out(axi_read_signature(geo)),
            "status": Out(status_signature(geo)),
            "stats": Out(stats_signature()),
        })

    @property
    def geometry(self) -> LoaderGeometry:
        return self._geo

    @property
    def latency(self) -> int:
        """Fixed part of every job's cycle count, from the timing contract
        (:func:`~hikv.hw.loader_timing.job_timing`): with an ideal producer and consumer, a
        job whose reads are one request of ``beats`` beats answered after ``L`` cycles takes
        ``latency + L + beats - 1`` cycles from the cfg handshake to ``status.done`` (a
        one-token dense job)."""
        t = job_timing(self._geo, mode="dense", slots=[0], latency=1)
        return t.cycles - t.beats

    # ------------------------------------------------------------------ job configuration
    def _job_config(self, m: Module) -> SimpleNamespace:
        """The cfg handshake: job registers, checks, record length and stride."""
        g = self._geo
        lay, lp = g.layout, g.loader
        d, bl, al = lay.head_dim, g.burst_shift, log2_int(lay.align_bytes)
        j = SimpleNamespace(
            busy=Signal(), start=Signal(), mode=Signal(Mode), base=Signal(lp.addr_width),
            kept=Signal(range(d + 1)), cmask=Signal(d),
            limit=Signal(range(lp.max_outstanding + 1)),
            rec_len=Signal(range(g.record_bytes_max + 1)),
            stride=Signal(range(lay.stride(g.record_bytes_max) + 1)),
        )
        st, cp = self.status, self.cfg.payload
        j.cfg_fire = self.cfg.valid & self.cfg.ready
        m.d.comb += [self.cfg.ready.eq(~j.busy), st.busy.eq(j.busy)]
        m.d.sync += j.start.eq(j.cfg_fire)
        with m.If(j.cfg_fire):
            bad_mode = eq_const(cp.mode.as_value(), 3)
            if not g.channel_pages:          # no page path built: pages read as dense rows
                bad_mode = bad_mode | eq_const(cp.mode.as_value(), Mode.PAGES.value)
            if not g.masked_records:         # no masked path built: read as dense rows
                bad_mode = bad_mode | eq_const(cp.mode.as_value(), Mode.MASKED.value)
            too_many = ult(Const(d), cp.kept)
            o_bad = is_zero(cp.outstanding) | ult(Const(lp.max_outstanding), cp.outstanding)
            m.d.sync += [
                j.busy.eq(1), st.done.eq(0),
                j.mode.eq(Mux(bad_mode, Mode.DENSE.value, cp.mode.as_value())),
                j.base.eq(Cat(Const(0, bl), cp.base[bl:])),
                j.kept.eq(Mux(too_many, d, cp.kept)),
                j.cmask.eq(cp.cmask),
                j.limit.eq(Mux(o_bad, lp.max_outstanding, cp.outstanding)),
                st.cfg_error.eq(bad_mode | cp.base[:bl].any() | too_many),
                st.slverr.eq(0), st.decerr.eq(0), st.err_addr.eq(0),
                st.rlast_error.eq(0), st.order_error.eq(0),
            ]
            # record length from the cfg payload, stride from it in the start cycle: both are
            # registers by the first token (cycle 2), so neither is in the token's cycle
            if g.masked_records:
                rw = len(j.rec_len)
                kept = Mux(too_many, d, cp.kept)
                masked_len = add_w(Const(lay.mask_bytes), mul_w(kept, Const(lay.elem_bytes), rw),
                                   rw)
                dense = bad_mode | eq_const(cp.mode.as_value(), Mode.DENSE.value)
                m.d.sync += j.rec_len.eq(Mux(dense, lay.row_bytes, masked_len))
            else:                            # every job reads rows
                m.d.sync += j.rec_len.eq(lay.row_bytes)
        with m.If(j.start):
            m.d.sync += j.stride.eq(Cat(Const(0, al), add_w(j.rec_len, Const(lay.align_bytes - 1),
                                                            len(j.rec_len) + 1)[al:]))
        return j

    # ------------------------------------------------------------------ address side
    def _address_side(self, m: Module, j: SimpleNamespace, agen: AddressGen, coal: Coalescer,
                      entries: RowQueue, inflight: RowQueue) -> None:
        """Tokens -> address generator -> coalescer -> AR; entries into their queue."""
        m.d.comb += [agen.mode.eq(j.mode), agen.base.eq(j.base), agen.rec_len.eq(j.rec_len),
                     agen.stride.eq(j.stride), agen.cmask.eq(j.cmask)]
        wiring.connect(m, wiring.flipped(self.tokens), agen.tokens)
        self._range_slice(m, j, agen, coal)
        m.d.comb += [entries.w_data.eq(agen.entries.payload.as_value()),
                     entries.w_en.eq(agen.entries.valid & entries.w_rdy),
                     agen.entries.ready.eq(entries.w_rdy)]
        with m.If(agen.order_error):
            m.d.sync += self.status.order_error.eq(1)

        ax, req = self.axi, coal.requests.payload
        room = ult(inflight.level, j.limit)
        m.d.comb += [
            ax.arvalid.eq(coal.requests.valid & room),
            ax.araddr.eq(req.addr), ax.arlen.eq(sub_w(req.beats, 1, 8)),
            ax.arsize.eq(self._geo.loader.axsize), ax.arburst.eq(1), ax.arid.eq(0),
            coal.requests.ready.eq(ax.arready & room),
            inflight.w_data.eq(req.as_value()),
            inflight.w_en.eq(ax.arvalid & ax.arready & inflight.w_rdy),
        ]

    def _range_slice(self, m: Module, j: SimpleNamespace, agen: AddressGen,
                     coal: Coalescer) -> None:
        """Register slice (a two-entry skid buffer) between the address generator and the
        coalescer: the record address's multiply-add and the coalescer's run compare are in
        different cycles, and the generator's ``ready`` is a register (``~skid_valid``), so no
        combinational path crosses it either way. A range written in one cycle is at the
        coalescer the next; the generator may write while fewer than two ranges are held."""
        lay = range_layout(self._geo)
        main_v, skid_v = Signal(name="slice_main_valid"), Signal(name="slice_skid_valid")
        main_d, skid_d = Signal(lay, name="slice_main"), Signal(lay, name="slice_skid")
        up, down = agen.ranges, coal.ranges
        m.d.comb += [up.ready.eq(~skid_v), down.valid.eq(main_v), down.payload.eq(main_d)]
        with m.If(main_v & down.ready):             # the coalescer takes the held range
            with m.If(skid_v):
                m.d.sync += [main_d.eq(skid_d), skid_v.eq(0)]
            with m.Else():
                m.d.sync += [main_v.eq(up.valid), main_d.eq(up.payload)]
        with m.Elif(main_v):                        # held: a new range waits in the skid
            with m.If(up.valid & ~skid_v):
                m.d.sync += [skid_v.eq(1), skid_d.eq(up.payload)]
        with m.Else():
            m.d.sync += [main_v.eq(up.valid), main_d.eq(up.payload)]
        with m.If(j.start):
            m.d.sync += [main_v.eq(0), skid_v.eq(0)]

    # ------------------------------------------------------------------ data side
    def _data_side(self, m: Module, j: SimpleNamespace, pack: Packer, entries: RowQueue,
                   inflight: RowQueue) -> None:
        """R beats (addressed by the in-flight queue's head) and entries -> packer -> o."""
        g = self._geo
        aw, bbl = g.loader.addr_width, g.beat_shift
        ax, st = self.axi, self.status
        m.d.comb += [pack.mode.eq(j.mode), pack.rec_len.eq(j.rec_len), pack.cmask.eq(j.cmask),
                     pack.entries.payload.eq(entries.r_data),
                     pack.entries.valid.eq(entries.r_valid),
                     entries.pop.eq(pack.entries.valid & pack.entries.ready)]
        head = data.View(request_layout(g), inflight.r_data)
        k = Signal(range(g.loader.max_burst_beats))
        k_zero = Signal(init=1, name="r_k_zero")        # k == 0, a register
        last_beat = ueq(k, sub_w(head.beats, 1, len(head.beats)))
        r_fire = ax.rvalid & ax.rready
        # the beat's address: the request's own for its first beat, else the previous beat's
        # plus one from a register (no adder between the in-flight queue and the packer)
        next_addr = Signal(aw - bbl, name="r_next_addr")
        beat_addr = Signal(aw - bbl, name="r_beat_addr")
        m.d.comb += beat_addr.eq(Mux(k_zero, head.addr[bbl:], next_addr))
        with m.If(r_fire):
            m.d.sync += [next_addr.eq(add_w(beat_addr, 1, aw - bbl)), k_zero.eq(last_beat)]
        m.d.comb += [
            pack.beats.valid.eq(ax.rvalid & inflight.r_valid),
            pack.beats.payload.data.eq(ax.rdata),
            pack.beats.payload.err.eq(ax.rresp[1]),
            pack.beats.payload.addr.eq(beat_addr),
            ax.rready.eq(pack.beats.ready & inflight.r_valid),
            inflight.pop.eq(r_fire & last_beat),
        ]
        with m.If(r_fire):
            m.d.sync += k.eq(Mux(last_beat, 0, add_w(k, 1, len(k))))
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

    # ------------------------------------------------------------------ statistics
    def _statistics(self, m: Module, j: SimpleNamespace, inflight: RowQueue) -> None:
        s, ax, cw = self.stats, self.axi, COUNTER_WIDTH

        def late(event, name: str) -> Signal:
            """The event one cycle later (timing: the AR / R / output handshake logic and the
            counters' 32-bit carry chains are in different cycles). The last such event of a
            job is at least two cycles before ``status.done``, so the counts are complete
            when ``done`` shows."""
            r = Signal(name=f"stat_{name}")
            m.d.sync += r.eq(event)
            return r

        counters = [
            (s.bursts, late(ax.arvalid & ax.arready, "ar"), 1),
            (s.bytes, late(ax.rvalid & ax.rready, "r"), self._geo.beat_bytes),
            (s.busy_cycles, j.busy, 1),
            (s.mem_wait_cycles, late(j.busy & inflight.level.any() & ~ax.rvalid, "wait"), 1),
            (s.ar_stall_cycles, late(ax.arvalid & ~ax.arready, "ar_stall"), 1),
            (s.out_stall_cycles, late(self.o.valid & ~self.o.ready, "out_stall"), 1),
        ]
        with m.If(j.cfg_fire):
            m.d.sync += [c.eq(0) for c, _, _ in counters]
        with m.Else():
            for c, when, step in counters:
                with m.If(when):
                    m.d.sync += c.eq(add_w(c, Const(step), cw))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        g = self._geo
        m.submodules.agen = agen = AddressGen(g)
        m.submodules.coal = coal = Coalescer(g)
        m.submodules.pack = pack = Packer(g)
        m.submodules.entries = entries = RowQueue(
            width=len(agen.entries.payload.as_value()), depth=g.entry_fifo_depth, skip=False)
        m.submodules.inflight = inflight = RowQueue(
            width=len(coal.requests.payload.as_value()), depth=g.inflight_depth, skip=False,
            head_register=True)

        j = self._job_config(m)
        for blk in (agen, coal, pack):
            m.d.comb += blk.start.eq(j.start)
        self._address_side(m, j, agen, coal, entries, inflight)
        self._data_side(m, j, pack, entries, inflight)
        # completion: every sub-block finished and no read in flight
        finished = pack.done & coal.done & agen.done & is_zero(inflight.level)
        with m.If(j.busy & finished & ~j.start):
            m.d.sync += [j.busy.eq(0), self.status.done.eq(1)]
        self._statistics(m, j, inflight)
        return m


def make_loader(cfg: Config) -> KVLoader:
    """The loader for a configuration (``hikv verilog --block loader``)."""
    return KVLoader(LoaderGeometry(cfg.layout, cfg.loader))
