"""The two-level KV loader's interfaces: job modes, the payload layouts of its ports and of the
streams between its sub-blocks, and the AXI4 read, status and statistics signatures.

Every width comes from :class:`~hikv.hw.loader_timing.LoaderGeometry`; the testbench reads the
port layouts through :func:`hikv.rtl_tests.loader_launch.tb_config`, never by hand.
"""

from __future__ import annotations

from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from hikv.params import RecordLayout

from .loader_timing import COUNTER_WIDTH, LoaderGeometry

__all__ = [
    "Mode",
    "MODE_OF_LAYOUT",
    "token_layout",
    "config_layout",
    "output_layout",
    "range_layout",
    "entry_layout",
    "request_layout",
    "beat_layout",
    "axi_read_signature",
    "status_signature",
    "stats_signature",
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


def range_layout(geo: LoaderGeometry) -> data.StructLayout:
    """Address generator -> coalescer: burst blocks ``b0..b1`` of one record (or one block of a
    channel page); ``end`` closes the job."""
    bw = geo.loader.addr_width - geo.burst_shift
    return data.StructLayout({"b0": bw, "b1": bw, "end": 1})


def entry_layout(geo: LoaderGeometry) -> data.StructLayout:
    """Address generator -> packer (through the entry queue): which beats make one record or
    page, and what to emit for it."""
    aw = geo.loader.addr_width - geo.beat_shift
    pages = geo.channel_pages      # `page` and `bitmap` only with the channel-page path
    return data.StructLayout({
        **({"page": 1} if pages else {}),   # a channel page (else one row / record)
        "token": geo.index_width,   # the slot, or the page number
        "fa": aw,         # first beat (beat address) of the record, or the page's first beat
        "la": aw,         # last beat the record / page needs
        "off": max(1, geo.beat_shift),  # byte lane of the record's first byte
        "last": 1,        # last record / page of the job
        "nodata": 1,      # page without selected channels / skipped token: nothing to read
        **({"bitmap": geo.layout.page_tokens} if pages else {}),  # retained tokens of a page
    })


def request_layout(geo: LoaderGeometry) -> data.StructLayout:
    """Coalescer -> AR channel (and the in-flight queue): byte address and beats."""
    return data.StructLayout({"addr": geo.loader.addr_width,
                              "beats": range(geo.loader.max_burst_beats + 1)})


def beat_layout(geo: LoaderGeometry) -> data.StructLayout:
    """R channel -> packer: one beat, its read-error flag and its beat address."""
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


def status_signature(geo: LoaderGeometry) -> wiring.Signature:
    """The loader's ``status`` port (flags sticky per job, cleared by ``cfg``)."""
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


def stats_signature() -> wiring.Signature:
    """The loader's ``stats`` port: per-job counters of ``COUNTER_WIDTH`` bits."""
    w = COUNTER_WIDTH
    return wiring.Signature({
        "bursts": Out(w),            # AR requests issued
        "bytes": Out(w),             # bytes received on R (beats x beat bytes)
        "busy_cycles": Out(w),       # cycles with status.busy
        "mem_wait_cycles": Out(w),   # busy, reads outstanding, no R beat offered
        "ar_stall_cycles": Out(w),   # ARVALID without ARREADY
        "out_stall_cycles": Out(w),  # output valid without ready
    })
