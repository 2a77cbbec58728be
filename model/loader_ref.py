"""The two-level KV loader's function: the bit-exact reference for the RTL.

**Request generation.** The loader reads the byte ranges of a job (one region, ranges in
ascending address order: the records of ascending retained tokens, or the (page, channel) chunks
of the channel-page layout) at burst granularity. Each range covers burst blocks
``[start // burst, (start + length - 1) // burst]``. Ranges are merged into *runs* of
consecutive blocks: a range whose first block is at most one past the current run's last block
extends the run (so a block shared by neighbouring records is read once, and adjacent records
coalesce); otherwise the run is closed and a new one starts. Each run is cut greedily from its
start into AXI4 INCR requests of full-width beats, each as long as possible subject to
``max_burst_beats`` and never crossing a 4 KiB boundary. Every request is burst-aligned and a
multiple of a burst long, except where ``max_burst_beats * beat_bytes`` is shorter than a burst.

The bytes the requests deliver equal :func:`hikv.model.layout.burst_bytes` of the ranges, so the
hardware's byte counter is checked against the byte account exactly.

**Memory images** (:func:`dense_image`, :func:`masked_image`, :func:`channel_page_image`) build
the bytes of a region from K or V tensors in the layouts of :mod:`hikv.model.layout`; the
``unpack_*`` functions are their inverses and define the packed data the loader delivers: per
token, the dense vector with zeros where masked.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hikv.params import KVLayout, ParamError

from .layout import Ranges

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
    vals = torch.gather(x, 1, idx)
    img[:, layout.mask_bytes: rec] = _elem_bytes_of(vals, layout).reshape(n, -1)
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
    """(dense vectors with zeros where masked, masks) of the records at ``slots``."""
    buf = torch.frombuffer(bytearray(img), dtype=torch.uint8)
    d = layout.head_dim
    rec = layout.record_bytes(kept)
    stride = layout.stride(rec)
    out = torch.zeros(len(slots), d, dtype=_elems_from_bytes(
        torch.zeros(1, layout.elem_bytes, dtype=torch.uint8), layout).dtype)
    masks = torch.zeros(len(slots), d, dtype=torch.bool)
    for i, s in enumerate(slots):
        raw = buf[s * stride: s * stride + rec]
        m = bytes_to_mask(raw[: layout.mask_bytes].unsqueeze(0), d)[0]
        vals = _elems_from_bytes(raw[layout.mask_bytes:].reshape(kept, -1), layout)
        if int(m.sum()) != kept:
            raise ParamError(f"record at slot {s} has {int(m.sum())} mask bits, expected {kept}")
        out[i, m] = vals
        masks[i] = m
    return out, masks
