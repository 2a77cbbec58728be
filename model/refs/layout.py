"""KV memory layouts, the byte ranges a step reads, and burst-granular byte accounts.

Each (layer, KV head) owns separate *regions* (K, V, and one per metadata array), each starting
burst-aligned at its own base address 0. A token's *slot* is its position in the region: for
methods that keep every token it is the token index; methods that evict keep their resident
tokens densely, in token order, so the slot is the token's rank among the resident tokens.

Layouts (:class:`~hikv.params.RecordLayout`):

* ``DENSE``: token-major rows of ``d`` elements; row ``s`` at ``s * stride(row_bytes)``.
* ``MASKED_RECORD``: per token a record of the ``d``-bit element mask (bit ``i`` = element ``i``
  kept, little-endian bytes), then the kept elements compacted in ascending element order;
  record ``s`` at ``s * stride(record_bytes(kept))``. Fixed ``kept`` per region, so records have
  one size and Stage II selection at write time makes a load contiguous.
* ``CHANNEL_PAGES``: pages of ``page_tokens`` tokens; inside a page channel-major, so channel
  ``c`` of page ``p`` is one chunk of ``page_tokens * elem_bytes`` at
  ``p * d * chunk + c * chunk``; token ``t``'s element sits at offset ``(t % page_tokens) *
  elem_bytes`` in its chunk. Query-aware channels shared by a head read whole chunks.

A read of any byte of a burst-aligned block of ``burst_bytes`` costs the whole block; a block
read twice in one step is counted once (the loader coalesces, see :mod:`hikv.model.refs.loader`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hikv.model.refs.account import ByteAccount
from hikv.params import KVLayout, ParamError

__all__ = [
    "Ranges",
    "Read",
    "ByteAccount",
    "dense_rows",
    "masked_records",
    "page_channels",
    "page_channel_runs",
    "contiguous",
    "burst_blocks",
    "burst_bytes",
    "account",
]


@dataclass(frozen=True)
class Ranges:
    """Byte ranges ``[start, start + length)`` inside one region, in read order."""

    start: torch.Tensor   # int64 [m]
    length: torch.Tensor  # int64 [m]

    @staticmethod
    def empty() -> Ranges:
        z = torch.zeros(0, dtype=torch.int64)
        return Ranges(z, z)

    def __len__(self) -> int:
        return int(self.start.numel())

    @property
    def ideal_bytes(self) -> int:
        return int(self.length.sum())


@dataclass(frozen=True)
class Read:
    """Ranges read from one region, classified as K, V or metadata bytes."""

    kind: str     # "k", "v" or "meta"
    region: str   # regions with the same name share their bursts
    ranges: Ranges


def _i64(x: torch.Tensor | list[int] | range) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=torch.int64).reshape(-1)
    if t.numel() and int(t.min()) < 0:
        raise ParamError("slots and channels must be non-negative")
    return t


def contiguous(start: int, length: int) -> Ranges:
    """One range (e.g. a whole metadata array)."""
    if length <= 0:
        return Ranges.empty()
    return Ranges(torch.tensor([start], dtype=torch.int64),
                  torch.tensor([length], dtype=torch.int64))


def dense_rows(slots: torch.Tensor, layout: KVLayout, row_bytes: int | None = None) -> Ranges:
    """Token-major rows of ``row_bytes`` (default one K or V vector), stride aligned."""
    rb = layout.row_bytes if row_bytes is None else row_bytes
    s = _i64(slots)
    return Ranges(s * layout.stride(rb), torch.full_like(s, rb))


def masked_records(slots: torch.Tensor, layout: KVLayout, kept: int) -> Ranges:
    """Masked records keeping ``kept`` elements (mask, then compacted elements)."""
    return dense_rows(slots, layout, layout.record_bytes(kept))


def page_channels(tokens: torch.Tensor, channels: torch.Tensor, layout: KVLayout,
                  whole_chunks: bool = False) -> Ranges:
    """Elements ``(t, c)`` for every token ``t`` and channel ``c``, channel-major pages.

    With ``whole_chunks`` each (page, channel) chunk is one range (what a loader requests);
    otherwise one range per element (the ideal bytes). Ranges come in address order.
    """
    t = torch.sort(_i64(tokens)).values
    c = torch.sort(_i64(channels)).values
    if c.numel() and int(c.max()) >= layout.head_dim:
        raise ParamError(f"channel {int(c.max())} out of range: allowed [0, {layout.head_dim})")
    chunk = layout.channel_chunk_bytes
    page_bytes = layout.head_dim * chunk
    eb = layout.elem_bytes
    if whole_chunks:
        pages = torch.unique(t // layout.page_tokens)
        start = (pages[:, None] * page_bytes + c[None, :] * chunk).reshape(-1)
        return Ranges(start, torch.full_like(start, chunk))
    page = t // layout.page_tokens
    off = (t % layout.page_tokens) * eb
    # address order: page, then channel, then token within page
    start = page[:, None] * page_bytes + c[None, :] * chunk + off[:, None]
    if c.numel() > 1 and bool((c[1:] == c[:-1]).any()):
        start = torch.sort(start.reshape(-1)).values
    else:
        start = _page_channel_order(page, start, c.numel())
    return Ranges(start, torch.full_like(start, eb))


def page_channel_runs(tokens: torch.Tensor, channels: torch.Tensor, layout: KVLayout
                      ) -> Ranges:
    """The bytes of :func:`page_channels` (same ideal bytes, same burst blocks) as fewer
    ranges: the elements of one channel of consecutive tokens of one page are adjacent in
    memory, so each such run is one range. Ranges come in address order. Tokens and channels
    must be distinct."""
    t = torch.sort(_i64(tokens)).values
    c = torch.sort(_i64(channels)).values
    if c.numel() and int(c.max()) >= layout.head_dim:
        raise ParamError(f"channel {int(c.max())} out of range: allowed [0, {layout.head_dim})")
    if (t.numel() > 1 and bool((t[1:] == t[:-1]).any())) or \
            (c.numel() > 1 and bool((c[1:] == c[:-1]).any())):
        raise ParamError("page_channel_runs needs distinct tokens and channels")
    if t.numel() == 0 or c.numel() == 0:
        return Ranges.empty()
    pt, eb = layout.page_tokens, layout.elem_bytes
    chunk = layout.channel_chunk_bytes
    tn = t.numpy()
    page = tn // pt
    brk = np.ones(tn.size, dtype=bool)
    brk[1:] = (tn[1:] != tn[:-1] + 1) | (page[1:] != page[:-1])
    first = np.flatnonzero(brk)                        # run starts (token indices)
    size = np.diff(np.append(first, tn.size))          # tokens per run
    rpage = torch.from_numpy(page[first])
    start = (rpage[:, None] * (layout.head_dim * chunk) + c[None, :] * chunk
             + torch.from_numpy((tn[first] % pt) * eb)[:, None])          # [runs, r]
    length = torch.from_numpy(size * eb)[:, None].expand(-1, c.numel())
    order = _page_channel_order(rpage, torch.arange(start.numel()).reshape(start.shape),
                                c.numel())
    return Ranges(start.reshape(-1)[order], length.reshape(-1)[order])


def _page_channel_order(page: torch.Tensor, start: torch.Tensor, r: int) -> torch.Tensor:
    """``start`` [m, r] (sorted tokens x distinct sorted channels) flattened in ascending
    address order without sorting: within the run of tokens of one page (``a`` tokens before
    it, ``s`` in it), element (token i, channel j) goes to ``a * r + j * s + (i - a)``."""
    m = page.numel()
    if m == 0 or r == 0:
        return start.reshape(-1)
    pg = page.numpy()
    idx = np.arange(m)
    new = np.ones(m, dtype=bool)
    new[1:] = pg[1:] != pg[:-1]
    a = np.maximum.accumulate(np.where(new, idx, 0))           # first token of the page run
    ends = np.append(np.flatnonzero(new)[1:], m)               # run ends, per run
    size = (ends - idx[new])[np.cumsum(new) - 1]               # run size, per token
    pos = (a * r)[:, None] + np.arange(r)[None, :] * size[:, None] + (idx - a)[:, None]
    out = np.empty(m * r, dtype=np.int64)
    out[pos.reshape(-1)] = start.numpy().reshape(-1)
    return torch.from_numpy(out)


def _new_blocks_np(start: np.ndarray, length: np.ndarray, burst: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_new_blocks` on int64 numpy arrays (numpy: small arrays, low per-call cost)."""
    keep = length > 0
    if not keep.all():
        start, length = start[keep], length[keep]
    first = start // burst
    last = (start + length - 1) // burst
    if first.size > 1 and (first[1:] < first[:-1]).any():   # already in order: no sort needed
        order = np.argsort(first, kind="stable")
        first, last = first[order], last[order]
    prev_max = np.empty_like(last)
    if last.size:
        prev_max[0] = -1
        np.maximum.accumulate(last[:-1], out=prev_max[1:])
    lo = np.maximum(first, prev_max + 1)
    return lo, np.maximum(last - lo + 1, 0)


def _new_blocks(r: Ranges, burst: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per range (sorted by first block), the first block not touched by an earlier range and
    the number of new blocks from there: their union is the set of blocks touched."""
    lo, counts = _new_blocks_np(r.start.numpy(), r.length.numpy(), burst)
    return torch.from_numpy(lo), torch.from_numpy(counts)


def burst_blocks(r: Ranges, burst: int) -> torch.Tensor:
    """Sorted unique indices of the burst blocks ``r`` touches."""
    lo, counts = _new_blocks(r, burst)
    return torch.repeat_interleave(lo, counts) + _ramp(counts)


def _ramp(counts: torch.Tensor) -> torch.Tensor:
    """[0..c0-1, 0..c1-1, ...] for counts c."""
    total = int(counts.sum())
    if total == 0:
        return torch.zeros(0, dtype=torch.int64)
    offsets = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
    return torch.arange(total, dtype=torch.int64) - offsets


def burst_bytes(r: Ranges, burst: int) -> int:
    """Bytes delivered at burst granularity: distinct blocks touched times ``burst``."""
    return int(_new_blocks_np(r.start.numpy(), r.length.numpy(), burst)[1].sum()) * burst


def account(reads: list[Read], layout: KVLayout, resident: int, tokens: int) -> ByteAccount:
    """Byte account of one step from what it read; regions of one name share bursts."""
    ideal = {"k": 0, "v": 0, "meta": 0}
    by_region: dict[tuple[str, str], list[Ranges]] = {}
    for rd in reads:
        if rd.kind not in ideal:
            raise ParamError(f"read kind {rd.kind!r} is not one of 'k', 'v', 'meta'")
        ideal[rd.kind] += rd.ranges.ideal_bytes
        by_region.setdefault((rd.kind, rd.region), []).append(rd.ranges)
    burst = {"k": 0, "v": 0, "meta": 0}
    bb = layout.burst_bytes
    for (kind, _), parts in by_region.items():
        if len(parts) == 1 and len(parts[0]) == 1:     # one range: blocks from its ends
            st0, ln0 = int(parts[0].start[0]), int(parts[0].length[0])
            if ln0 > 0:
                burst[kind] += ((st0 + ln0 - 1) // bb - st0 // bb + 1) * bb
            continue
        if len(parts) == 1:
            st, ln = parts[0].start.numpy(), parts[0].length.numpy()
        else:
            st = np.concatenate([p.start.numpy() for p in parts])
            ln = np.concatenate([p.length.numpy() for p in parts])
        burst[kind] += int(_new_blocks_np(st, ln, layout.burst_bytes)[1].sum()) \
            * layout.burst_bytes
    return ByteAccount(k_ideal=ideal["k"], v_ideal=ideal["v"], meta_ideal=ideal["meta"],
                       k_burst=burst["k"], v_burst=burst["v"], meta_burst=burst["meta"],
                       resident=resident, tokens=tokens)
