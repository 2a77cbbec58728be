"""The two-level KV loader's function: the bit-exact reference for the RTL (hw/loader.py).

**Jobs.** One loader job reads one *region* (the K or the V array of one (layer, KV head)),
starting at a burst-aligned ``base`` address, for a list of retained token *slots* in strictly
ascending order (the sorter's Stage I output order). The region's layout is a
:class:`~hikv.params.RecordLayout` (see :mod:`hikv.model.refs.layout`): ``DENSE`` rows,
``MASKED_RECORD`` records with ``kept`` elements each, or ``CHANNEL_PAGES`` with one channel set
shared by all tokens of the job (a channel-group selection is a channel set whose members come in
groups). :class:`LoaderJob` bundles this and :func:`job_ranges` gives the byte ranges the job
needs: whole rows / records, and for channel pages the element of every retained token in every
selected channel (so a chunk longer than a burst is read only in the bursts holding retained
tokens; when ``channel_chunk_bytes <= burst_bytes`` this is the same as reading whole chunks).
A job's bytes must lie below ``2**addr_width``: the RTL computes addresses in ``addr_width``
bits and does not flag one that wraps, so :meth:`LoaderJob.check` refuses such a job and
:func:`check_region` such a configuration before its slots are known (every slot below
``tokens``, default ``max_tokens``).

**Request generation.** The loader reads the byte ranges of a job (in ascending address order)
at burst granularity. Each range covers burst blocks
``[start // burst, (start + length - 1) // burst]``. Ranges are merged into *runs* of
consecutive blocks: a range whose first block is at most one past the current run's last block
extends the run (so a block shared by neighbouring records is read once, and adjacent records
coalesce); otherwise the run is closed and a new one starts. Each run is cut greedily from its
start into AXI4 INCR requests of full-width beats, each as long as possible subject to
``max_burst_beats`` and never crossing a 4 KiB boundary. Every request is burst-aligned and a
multiple of a burst long, except where ``max_burst_beats * beat_bytes`` is shorter than a burst.
A request's length depends only on where its run starts and on whether the run reaches at least
one full request further, so hardware can issue it as soon as that is known (before the run
closes) and still match this list exactly.

The bytes the requests deliver equal :func:`hikv.model.refs.layout.burst_bytes` of the ranges, so
the hardware's byte counter is checked against the byte account exactly.

**Memory images** (:func:`dense_image`, :func:`masked_image`, :func:`channel_page_image`) build
the bytes of a region from K or V tensors in the layouts of :mod:`hikv.model.refs.layout`; the
``unpack_*`` functions are their inverses and define the packed data the loader delivers: per
retained token, in slot order, the dense vector with zeros where masked and the element mask
(:func:`packed_output`). Records and rows need not be a whole number of beats long or start on a
beat: the loader works on byte addresses, a beat may hold the end of one record and the start of
the next, and the bytes of a beat outside the current record are ignored.

**Read errors.** A beat answered with SLVERR or DECERR is never used as data silently: every
token whose bytes were taken from such a beat is flagged (:func:`error_slots`). For channel
pages the whole page is assembled in one buffer, so every retained token of a page that received
an erroneous beat is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hikv.model.refs.layout import Ranges, dense_rows, masked_records, page_channels
from hikv.params import KVLayout, LoaderParams, ParamError, RecordLayout

__all__ = [
    "AxiRead",
    "coalesce",
    "axi_requests",
    "request_bytes",
    "mask_to_bytes",
    "bytes_to_mask",
    "dense_image",
    "masked_image",
    "channel_page_image",
    "unpack_dense",
    "unpack_masked",
    "unpack_pages",
    "LoaderJob",
    "region_bytes",
    "check_region",
    "job_ranges",
    "job_requests",
    "packed_output",
    "error_slots",
]

AXI_BOUNDARY = 4096


@dataclass(frozen=True)
class AxiRead:
    """One AXI4 INCR read: byte address and number of beats (ARLEN = beats - 1)."""

    addr: int
    beats: int

    @property
    def arlen(self) -> int:
        return self.beats - 1


def coalesce(ranges: Ranges, burst: int, base: int = 0) -> list[tuple[int, int]]:
    """Runs of burst blocks ``(first_block, last_block)`` inclusive, in order.

    ``ranges`` must be in ascending address order (the loader's input is ascending).
    """
    if base % burst:
        raise ParamError(f"region base {base:#x} must be aligned to burst_bytes = {burst}")
    runs: list[tuple[int, int]] = []
    cur: list[int] | None = None
    starts = ranges.start.tolist()
    lengths = ranges.length.tolist()
    prev_start = None
    for start, length in zip(starts, lengths, strict=True):
        if length <= 0:
            continue
        if prev_start is not None and start < prev_start:
            raise ParamError(f"loader ranges must be ascending: {start:#x} after {prev_start:#x}")
        prev_start = start
        b0 = (base + start) // burst
        b1 = (base + start + length - 1) // burst
        if cur is not None and b0 <= cur[1] + 1:
            cur[1] = max(cur[1], b1)
        else:
            if cur is not None:
                runs.append((cur[0], cur[1]))
            cur = [b0, b1]
    if cur is not None:
        runs.append((cur[0], cur[1]))
    return runs


def axi_requests(ranges: Ranges, *, burst: int, beat_bytes: int, max_beats: int,
                 base: int = 0) -> list[AxiRead]:
    """The AXI4 read requests the loader issues for ``ranges`` (see module docstring)."""
    if burst % beat_bytes or burst > AXI_BOUNDARY:
        raise ParamError(f"burst_bytes = {burst} must be a multiple of the beat "
                         f"({beat_bytes} B) and at most {AXI_BOUNDARY}")
    if not 1 <= max_beats <= 256:
        raise ParamError(f"max_burst_beats = {max_beats} is out of range: allowed [1, 256]")
    out: list[AxiRead] = []
    max_bytes = max_beats * beat_bytes
    for b0, b1 in coalesce(ranges, burst, base):
        addr, end = b0 * burst, (b1 + 1) * burst
        while addr < end:
            n = min(max_bytes, AXI_BOUNDARY - addr % AXI_BOUNDARY, end - addr)
            out.append(AxiRead(addr, n // beat_bytes))
            addr += n
    return out


def request_bytes(reqs: list[AxiRead], beat_bytes: int) -> int:
    return sum(r.beats for r in reqs) * beat_bytes


# --------------------------------------------------------------------------- images
def _elem_bytes_of(x: torch.Tensor, layout: KVLayout) -> torch.Tensor:
    """Little-endian bytes of each element, shape [..., elem_bytes]."""
    eb = layout.elem_bytes
    dt = {1: torch.uint8, 2: torch.float16, 4: torch.float32}[eb]
    if eb == 1:
        if x.dtype != torch.uint8:
            raise ParamError("elem_bytes = 1 images take uint8 tensors")
        return x.unsqueeze(-1)
    return x.to(dt).contiguous().view(torch.uint8).reshape(*x.shape, eb)


def _elems_from_bytes(b: torch.Tensor, layout: KVLayout) -> torch.Tensor:
    eb = layout.elem_bytes
    if eb == 1:
        return b[..., 0]
    dt = {2: torch.float16, 4: torch.float32}[eb]
    return b.contiguous().view(dt).reshape(b.shape[:-1])


def mask_to_bytes(mask: torch.Tensor) -> torch.Tensor:
    """[n, d] bool -> [n, d/8] uint8; bit i of the mask is bit i%8 of byte i//8."""
    n, d = mask.shape
    bits = mask.to(torch.uint8).reshape(n, d // 8, 8)
    weights = (1 << torch.arange(8, dtype=torch.int32)).to(torch.uint8)
    return (bits * weights).sum(-1).to(torch.uint8)


def bytes_to_mask(b: torch.Tensor, d: int) -> torch.Tensor:
    n = b.shape[0]
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((b.unsqueeze(-1) >> shifts) & 1).bool().reshape(n, d)


def dense_image(x: torch.Tensor, layout: KVLayout) -> bytes:
    """Region bytes of token-major rows: x is [n, d]; row s at s * stride(row_bytes)."""
    n, d = x.shape
    if d != layout.head_dim:
        raise ParamError(f"vectors have {d} elements, layout.head_dim = {layout.head_dim}")
    stride = layout.stride(layout.row_bytes)
    img = torch.zeros(n, stride, dtype=torch.uint8)
    img[:, : layout.row_bytes] = _elem_bytes_of(x, layout).reshape(n, -1)
    return bytes(img.reshape(-1).numpy())


def masked_image(x: torch.Tensor, mask: torch.Tensor, layout: KVLayout) -> bytes:
    """Region bytes of masked records: mask, then the kept elements in ascending order."""
    n, d = x.shape
    kept = mask.sum(-1)
    if n and not bool((kept == kept[0]).all()):
        raise ParamError("masked records need the same number of kept elements per token")
    r = int(kept[0]) if n else 0
    rec = layout.record_bytes(r)
    stride = layout.stride(rec)
    img = torch.zeros(n, stride, dtype=torch.uint8)
    img[:, : layout.mask_bytes] = mask_to_bytes(mask)
    # stable: kept elements in ascending element order
    idx = torch.sort(torch.where(mask, torch.arange(d), d), dim=-1).values[:, :r]
    # gather raw bytes: a float gather would quieten signalling NaNs
    raw = _elem_bytes_of(x, layout)
    vals = torch.gather(raw, 1, idx.unsqueeze(-1).expand(-1, -1, layout.elem_bytes))
    img[:, layout.mask_bytes: rec] = vals.reshape(n, -1)
    return bytes(img.reshape(-1).numpy())


def channel_page_image(x: torch.Tensor, layout: KVLayout) -> bytes:
    """Region bytes of channel-major pages (the last page padded with zeros)."""
    n, d = x.shape
    pt = layout.page_tokens
    pages = -(-n // pt)
    pad = torch.zeros(pages * pt, d, dtype=x.dtype)
    pad[:n] = x
    # [pages, pt, d] -> [pages, d, pt] channel-major
    cm = pad.reshape(pages, pt, d).transpose(1, 2)
    return bytes(_elem_bytes_of(cm, layout).reshape(-1).numpy())


def unpack_dense(img: bytes, slots: list[int], layout: KVLayout) -> torch.Tensor:
    """Rows at ``slots`` of a dense image, as [len(slots), d]."""
    buf = torch.frombuffer(bytearray(img), dtype=torch.uint8)
    stride = layout.stride(layout.row_bytes)
    rows = torch.stack([buf[s * stride: s * stride + layout.row_bytes] for s in slots]) \
        if slots else torch.zeros(0, layout.row_bytes, dtype=torch.uint8)
    return _elems_from_bytes(rows.reshape(len(slots), layout.head_dim, -1), layout)


def unpack_masked(img: bytes, slots: list[int], kept: int, layout: KVLayout
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(dense vectors with zeros where masked, masks) of the records at ``slots``.

    Elements move as raw bytes, so every bit pattern (NaN payloads included) survives.
    """
    buf = torch.frombuffer(bytearray(img), dtype=torch.uint8)
    d, eb = layout.head_dim, layout.elem_bytes
    rec = layout.record_bytes(kept)
    stride = layout.stride(rec)
    raw_out = torch.zeros(len(slots), d, eb, dtype=torch.uint8)
    masks = torch.zeros(len(slots), d, dtype=torch.bool)
    for i, s in enumerate(slots):
        raw = buf[s * stride: s * stride + rec]
        m = bytes_to_mask(raw[: layout.mask_bytes].unsqueeze(0), d)[0]
        if int(m.sum()) != kept:
            raise ParamError(f"record at slot {s} has {int(m.sum())} mask bits, expected {kept}")
        raw_out[i, m] = raw[layout.mask_bytes:].reshape(kept, eb)
        masks[i] = m
    return _elems_from_bytes(raw_out, layout), masks


def unpack_pages(img: bytes, slots: list[int], channels: list[int], layout: KVLayout
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(vectors with zeros outside ``channels``, masks) of ``slots`` in a channel-page image."""
    d, pt, eb = layout.head_dim, layout.page_tokens, layout.elem_bytes
    chunk = layout.channel_chunk_bytes
    buf = torch.frombuffer(bytearray(img), dtype=torch.uint8)
    masks = torch.zeros(len(slots), d, dtype=torch.bool)
    if channels:
        masks[:, list(channels)] = True
    raw = torch.zeros(len(slots), d, eb, dtype=torch.uint8)
    for i, s in enumerate(slots):
        page, off = divmod(s, pt)
        for c in channels:
            a = page * d * chunk + c * chunk + off * eb
            raw[i, c] = buf[a: a + eb]
    return _elems_from_bytes(raw, layout), masks


# --------------------------------------------------------------------------- jobs
@dataclass(frozen=True)
class LoaderJob:
    """One loader job: one region, its layout mode and the retained slots (ascending).

    ``kept`` is the kept element count of ``MASKED_RECORD`` records (ignored otherwise);
    ``channels`` the selected channels of ``CHANNEL_PAGES`` (ignored otherwise). ``base`` is the
    region's byte address (burst-aligned). The RTL takes at least one slot per job.
    """

    mode: RecordLayout
    slots: tuple[int, ...]
    base: int = 0
    kept: int = 0
    channels: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.mode, RecordLayout):
            raise ParamError(f"LoaderJob.mode = {self.mode!r} is not a RecordLayout")
        object.__setattr__(self, "slots", tuple(int(s) for s in self.slots))
        object.__setattr__(self, "channels", tuple(sorted({int(c) for c in self.channels})))
        for a, b in zip(self.slots, self.slots[1:], strict=False):
            if b <= a:
                raise ParamError(f"LoaderJob.slots must be strictly ascending: {b} after {a}")
        if self.slots and self.slots[0] < 0:
            raise ParamError(f"LoaderJob.slots must be non-negative, not {self.slots[0]}")
        if self.base < 0:
            raise ParamError(f"LoaderJob.base = {self.base} must be non-negative")

    def check(self, layout: KVLayout, loader: LoaderParams) -> None:
        """Raise :class:`ParamError` unless the RTL built for ``layout``/``loader`` can run this
        job: 1 to ``max_tokens`` slots below ``max_tokens``, ``kept`` and channels in range,
        a burst-aligned base, the bytes of its slots inside the address space (``base`` + the
        end of its last record or page chunk ``<= 2**addr_width``, so no address wraps; a
        configuration sent before its slots are known: :func:`check_region`), channel pages
        only on a loader built with ``LoaderParams.channel_pages`` and masked records only on
        one built with ``LoaderParams.masked_records``."""
        d = layout.head_dim
        if self.mode is RecordLayout.CHANNEL_PAGES and not loader.channel_pages:
            raise ParamError("LoaderJob mode 'channel_pages' needs a loader built with "
                             "LoaderParams.channel_pages = True (the presets build it only "
                             "when their K Stage II rule selects channels)")
        if self.mode is RecordLayout.MASKED_RECORD and not loader.masked_records:
            raise ParamError("LoaderJob mode 'masked' needs a loader built with "
                             "LoaderParams.masked_records = True (the presets build it only "
                             "when a Stage II rule stores masked records)")
        if not 1 <= len(self.slots) <= loader.max_tokens:
            raise ParamError(f"LoaderJob has {len(self.slots)} slots: allowed "
                             f"[1, {loader.max_tokens}]")
        if self.slots[-1] >= loader.max_tokens:
            raise ParamError(f"LoaderJob slot {self.slots[-1]} is out of range: allowed "
                             f"[0, {loader.max_tokens})")
        if not 0 <= self.kept <= d:
            raise ParamError(f"LoaderJob.kept = {self.kept} is out of range: allowed [0, {d}]")
        if self.channels and not 0 <= self.channels[0] <= self.channels[-1] < d:
            raise ParamError(f"LoaderJob.channels must lie in [0, {d})")
        if self.base % layout.burst_bytes:
            raise ParamError(f"LoaderJob.base = {self.base:#x} must be a multiple of "
                             f"burst_bytes = {layout.burst_bytes}")
        r = job_ranges(self, layout)
        extent = int((r.start + r.length).max()) if len(r) else 0
        space = 1 << loader.addr_width
        if self.base + extent > space:
            top = (space - extent) // layout.burst_bytes * layout.burst_bytes
            allowed = (f"in [0, {top:#x}] for these slots (base + {extent} B <= "
                       f"2**{loader.addr_width})" if top >= 0 else
                       f"none: these slots alone exceed the {loader.addr_width}-bit space")
            raise ParamError(
                f"LoaderJob.base = {self.base:#x} with slot {self.slots[-1]} ends at "
                f"{self.base + extent:#x}, beyond the {loader.addr_width}-bit address space "
                f"(LoaderParams.addr_width): the loader's addresses would wrap; allowed "
                f"LoaderJob.base {allowed}")

    def record_bytes(self, layout: KVLayout) -> int:
        """Bytes of one record (row / masked record); the chunk for channel pages."""
        if self.mode is RecordLayout.DENSE:
            return layout.row_bytes
        if self.mode is RecordLayout.MASKED_RECORD:
            return layout.record_bytes(self.kept)
        return layout.channel_chunk_bytes


def region_bytes(mode: RecordLayout, tokens: int, layout: KVLayout, kept: int = 0) -> int:
    """Bytes a region of ``tokens`` slots spans in ``mode`` from its base: ``tokens`` records at
    the layout's stride (rows; masked records of ``kept`` elements), whole pages for channel
    pages."""
    if tokens < 0:
        raise ParamError(f"region tokens = {tokens} must be non-negative")
    if mode is RecordLayout.CHANNEL_PAGES:
        pages = -(-tokens // layout.page_tokens)
        return pages * layout.head_dim * layout.channel_chunk_bytes
    rec = layout.row_bytes if mode is RecordLayout.DENSE else layout.record_bytes(kept)
    return tokens * layout.stride(rec)


def check_region(mode: RecordLayout, base: int, layout: KVLayout, loader: LoaderParams, *,
                 tokens: int | None = None, kept: int = 0) -> None:
    """Raise :class:`ParamError` unless a job configuration (``cfg``: ``mode``, ``base``,
    ``kept``) keeps every slot below ``tokens`` (default ``loader.max_tokens``, every slot the
    ``tokens`` port can carry) inside the address space: ``base + region_bytes(mode, tokens,
    layout, kept) <= 2**addr_width``. The loader computes ``base + slot * stride`` in
    ``addr_width`` bits and does not flag an address that wraps, so a configuration sent before
    its slots are known (the sorter's Stage I output streamed into the loader) must satisfy this;
    :meth:`LoaderJob.check` checks the same for a job's own slots."""
    if not isinstance(mode, RecordLayout):
        raise ParamError(f"mode = {mode!r} is not a RecordLayout")
    if mode is RecordLayout.MASKED_RECORD and not 0 <= kept <= layout.head_dim:
        raise ParamError(f"LoaderJob.kept = {kept} is out of range: allowed "
                         f"[0, {layout.head_dim}]")
    n = loader.max_tokens if tokens is None else tokens
    if not 0 <= n <= loader.max_tokens:
        raise ParamError(f"region tokens = {n} is out of range: allowed [0, "
                         f"{loader.max_tokens}] (LoaderParams.max_tokens)")
    if base < 0 or base % layout.burst_bytes:
        raise ParamError(f"LoaderJob.base = {base:#x} must be a non-negative multiple of "
                         f"burst_bytes = {layout.burst_bytes}")
    extent = region_bytes(mode, n, layout, kept)
    space = 1 << loader.addr_width
    if base + extent > space:
        top = (space - extent) // layout.burst_bytes * layout.burst_bytes
        allowed = (f"in [0, {top:#x}]" if top >= 0 else
                   f"none: the region alone exceeds the {loader.addr_width}-bit space")
        raise ParamError(
            f"LoaderJob.base = {base:#x} + a region of {n} tokens ({extent} B, mode "
            f"{mode.value}) ends at {base + extent:#x}, beyond the {loader.addr_width}-bit "
            f"address space (LoaderParams.addr_width): the loader's addresses would wrap; "
            f"allowed LoaderJob.base {allowed}")


def job_ranges(job: LoaderJob, layout: KVLayout) -> Ranges:
    """Byte ranges (relative to the region) that ``job`` needs, in ascending address order."""
    slots = torch.tensor(job.slots, dtype=torch.int64)
    if job.mode is RecordLayout.DENSE:
        return dense_rows(slots, layout)
    if job.mode is RecordLayout.MASKED_RECORD:
        return masked_records(slots, layout, job.kept)
    return page_channels(slots, torch.tensor(job.channels, dtype=torch.int64), layout)


def job_requests(job: LoaderJob, layout: KVLayout, loader: LoaderParams) -> list[AxiRead]:
    """The AXI4 read requests (absolute addresses) the loader issues for ``job``."""
    return axi_requests(job_ranges(job, layout), burst=layout.burst_bytes,
                        beat_bytes=loader.beat_bytes, max_beats=loader.max_burst_beats,
                        base=job.base)


def packed_output(job: LoaderJob, img: bytes, layout: KVLayout
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """What the loader delivers for ``job`` read from region image ``img``: per slot (in
    order) the dense vector with zeros where masked, and the element mask (all ones for dense
    rows, the record's stored mask for masked records, the job's channels for channel pages)."""
    slots = list(job.slots)
    if job.mode is RecordLayout.DENSE:
        v = unpack_dense(img, slots, layout)
        return v, torch.ones(v.shape, dtype=torch.bool)
    if job.mode is RecordLayout.MASKED_RECORD:
        return unpack_masked(img, slots, job.kept, layout)
    return unpack_pages(img, slots, list(job.channels), layout)


def error_slots(job: LoaderJob, layout: KVLayout, loader: LoaderParams,
                error_beats: set[int]) -> list[bool]:
    """Per slot of ``job``, whether the loader flags it when the beats at the absolute byte
    addresses ``error_beats`` (beat-aligned, among those the job reads) answer with an error.

    A row or record is flagged when one of its bytes lies in an erroneous beat; a channel-page
    token when any erroneous beat lies in its page.
    """
    bb = loader.beat_bytes
    beats = sorted(error_beats)
    out = []
    for s in job.slots:
        if job.mode is RecordLayout.CHANNEL_PAGES:
            page_bytes = layout.head_dim * layout.channel_chunk_bytes
            lo = job.base + (s // layout.page_tokens) * page_bytes
            hi = lo + page_bytes
        else:
            rec = job.record_bytes(layout)
            lo = job.base + s * layout.stride(rec)
            hi = lo + rec
        out.append(any(e < hi and e + bb > lo for e in beats))
    return out
