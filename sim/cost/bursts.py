"""Burst-granular byte counts of the read patterns KV methods use, as numpy formulas.

The pieces every closed form (:mod:`hikv.sim.cost.closed_form`) is built from: records at
consecutive slots (:func:`run`, :class:`Rows`), records chosen among a pool (:func:`scattered`,
the expectation over a uniformly random choice when records share bursts), one contiguous
metadata array (:func:`contiguous`, :func:`contig_burst`) and query-aware channels of the
channel-major page layout (:func:`channel_blocks_per_page`). :class:`Geometry` is the KV layout
and loader geometry as broadcastable arrays, so one call prices many design points.

Conventions (those of the golden model, :mod:`hikv.model.refs.layout`): a region starts
burst-aligned at address 0; a read of any byte of a burst costs the whole burst; a burst read
twice in one step counts once. ``requests`` estimates the loader's AXI requests (a contiguous
run of ``L`` bytes costs ``ceil(L / max_request_bytes)``; scattered records one request each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hikv.params import KVLayout, LoaderParams, Stage2Kind
from hikv.sim.cost.timing import unique_apply

__all__ = ["Geometry", "Piece", "zero_piece", "cdiv", "run", "scattered", "contiguous", "rows",
           "channel_blocks_per_page", "contig_burst", "Rows"]

ArrayLike = Any


@dataclass(frozen=True)
class Geometry:
    """KV layout and loader geometry as (broadcastable) arrays; see :class:`KVLayout`."""

    head_dim: ArrayLike
    elem_bytes: ArrayLike
    burst_bytes: ArrayLike
    align_bytes: ArrayLike
    page_tokens: ArrayLike
    max_request_bytes: ArrayLike

    @staticmethod
    def of(layout: KVLayout, loader: LoaderParams | None = None, *,
           head_dim: ArrayLike | None = None) -> Geometry:
        """From a layout (and loader); ``head_dim`` may override the layout's (sweeps)."""
        ld = loader or LoaderParams()
        return Geometry(head_dim=np.asarray(layout.head_dim if head_dim is None else head_dim),
                        elem_bytes=np.asarray(layout.elem_bytes),
                        burst_bytes=np.asarray(layout.burst_bytes),
                        align_bytes=np.asarray(layout.align_bytes),
                        page_tokens=np.asarray(layout.page_tokens),
                        max_request_bytes=np.asarray(ld.max_burst_beats * ld.beat_bytes))

    @property
    def row_bytes(self) -> ArrayLike:
        return self.head_dim * self.elem_bytes

    def stride(self, payload: ArrayLike) -> ArrayLike:
        return cdiv(payload, self.align_bytes) * self.align_bytes

    def record_bytes(self, kept: ArrayLike) -> ArrayLike:
        return self.head_dim // 8 + kept * self.elem_bytes



# --------------------------------------------------------------------------- pieces
def cdiv(a: ArrayLike, b: ArrayLike) -> ArrayLike:
    return -(-np.asarray(a) // np.asarray(b))


@dataclass(frozen=True)
class Piece:
    """Burst bytes and request count of some reads of one region."""

    burst: ArrayLike
    requests: ArrayLike

    def __add__(self, o: Piece) -> Piece:
        return Piece(self.burst + o.burst, self.requests + o.requests)

    def scale(self, k: ArrayLike) -> Piece:
        return Piece(self.burst * k, self.requests * k)


def zero_piece() -> Piece:
    return Piece(np.asarray(0.0), np.asarray(0.0))


def run(g: Geometry, s0: ArrayLike, count: ArrayLike, rec: ArrayLike) -> Piece:
    """Records at consecutive slots ``s0 .. s0+count-1`` of ``rec`` bytes each (exact)."""
    bu, mr = g.burst_bytes, g.max_request_bytes
    stride = g.stride(rec)
    c = np.maximum(np.asarray(count), 0)
    b1 = cdiv(rec, bu)                                   # blocks of one burst-aligned record
    # align >= burst: every record starts on a burst; each costs b1 blocks
    aligned_blocks = c * b1
    gap = stride > b1 * bu                               # untouched bursts between records
    aligned_req = np.where(gap, c * cdiv(b1 * bu, mr), cdiv(c * b1 * bu, mr))
    # align < burst: records pack; the run covers blocks first..last (gaps < align < burst)
    start = np.asarray(s0) * stride
    end = start + np.maximum(c - 1, 0) * stride + rec - 1
    packed_blocks = np.where(c > 0, end // bu - start // bu + 1, 0)
    packed_req = cdiv(packed_blocks * bu, mr)
    big = g.align_bytes >= bu
    blocks = np.where(big, aligned_blocks, packed_blocks)
    req = np.where(c > 0, np.where(big, aligned_req, packed_req), 0)
    return Piece(blocks * bu * 1.0, req * 1.0)


def scattered(g: Geometry, count: ArrayLike, rec: ArrayLike, pool: ArrayLike) -> Piece:
    """``count`` records chosen among ``pool`` consecutive slots.

    ``align >= burst``: each record costs ``ceil(rec / burst)`` bursts wherever it lies (exact).
    Otherwise records pack and neighbours share bursts: the expected number of bursts touched
    when the ``count`` records are a uniformly random subset of the pool, ``sum over the pool's
    bursts of 1 - (1 - count / pool)^m``, ``m`` the records overlapping each burst.
    """
    bu, mr = g.burst_bytes, g.max_request_bytes
    stride = g.stride(rec)
    c = np.maximum(np.asarray(count), 0)
    b1 = cdiv(rec, bu)
    aligned = Piece(c * b1 * bu * 1.0, c * cdiv(b1 * bu, mr) * 1.0)
    if bool(np.all(np.asarray(g.align_bytes) >= bu)):
        return aligned
    pool = np.maximum(np.asarray(pool), 1)
    frac = np.minimum(c / pool, 1.0)
    st, rc, bb, fr, pl = np.broadcast_arrays(np.asarray(stride), np.asarray(rec),
                                             np.asarray(bu), frac, pool)
    blocks = np.zeros(st.shape)
    keys = np.stack([st.reshape(-1), rc.reshape(-1), bb.reshape(-1)], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(st.shape)
    for u, (s_, r_, b_) in enumerate(uniq.tolist()):
        sel = inv == u
        m = np.array(_overlaps(int(s_), int(r_), int(b_)), dtype=float)
        touched = 1.0 - (1.0 - fr[sel][:, None]) ** m[None, :]
        blocks[sel] = pl[sel] * s_ / b_ * touched.mean(axis=1)
    packed = Piece(blocks * bb, c * 1.0)
    big = np.asarray(g.align_bytes) >= bu
    return Piece(np.where(big, aligned.burst, packed.burst),
                  np.where(big, aligned.requests, packed.requests))


def _overlaps(stride: int, rec: int, burst: int) -> list[int]:
    """Records (at multiples of ``stride``, ``rec`` bytes long) overlapping each burst of one
    period of the pattern (``lcm(stride, burst) / burst`` bursts)."""
    period = math.lcm(stride, burst) // burst
    out = []
    for j in range(period):
        lo, hi = j * burst, (j + 1) * burst
        first = max(0, -(-(lo - rec + 1) // stride))       # first record ending after lo
        last = (hi - 1) // stride                           # last record starting before hi
        out.append(max(0, last - first + 1))
    return out


def contiguous(g: Geometry, length: ArrayLike) -> Piece:
    """One array read from its start (metadata)."""
    bu, mr = g.burst_bytes, g.max_request_bytes
    ln = np.maximum(np.asarray(length), 0)
    blocks = cdiv(ln, bu)
    return Piece(blocks * bu * 1.0, cdiv(blocks * bu, mr) * 1.0)


def rows(g: Geometry, count: ArrayLike, n: ArrayLike, rec: ArrayLike) -> Piece:
    """``count`` selected rows of ``n``: contiguous when all are selected, else scattered."""
    full = run(g, 0, n, rec)
    sc = scattered(g, count, rec, n)
    allsel = np.asarray(count) >= np.asarray(n)
    return Piece(np.where(allsel, full.burst, sc.burst), np.where(allsel, full.requests,
                                                                    sc.requests))


def channel_blocks_per_page(g: Geometry, kind: Stage2Kind, keep: ArrayLike, group: int
                             ) -> tuple[ArrayLike, ArrayLike]:
    """(bursts, runs) of one page's chosen channels in the channel-major page layout."""
    d, bu = g.head_dim, g.burst_bytes
    chunk = g.page_tokens * g.elem_bytes
    unit = chunk * (group if kind is Stage2Kind.CHANNEL_GROUPS else 1)   # bytes per choice
    units = d // (unit // chunk)                                         # choices per page
    chosen = keep // (unit // chunk)
    per_burst = np.maximum(bu // unit, 1)                                # choices per burst
    # unit >= burst: each choice is ceil(unit / burst) bursts
    big = chosen * cdiv(unit, bu)
    # unit < burst: distinct bursts touched; expectation over random choice sets
    small = _expected_groups(units, per_burst, chosen)
    blocks = np.where(unit >= bu, big, small)
    return blocks, np.where(unit >= bu, chosen, small)


def _expected_groups(total: ArrayLike, per: ArrayLike, chosen: ArrayLike) -> ArrayLike:
    """Expected number of groups (of ``per`` consecutive items, ``total/per`` groups) touched
    by ``chosen`` items drawn without replacement: groups x (1 - C(total-per, chosen) /
    C(total, chosen))."""
    def one(t: int, p: int, c: int) -> float:
        miss = math.comb(t - p, c) / math.comb(t, c) if c <= t - p else 0.0
        return (t // p) * (1.0 - miss)

    return unique_apply(one, total, per, chosen)



def contig_burst(length: ArrayLike, burst: int) -> ArrayLike:
    """Burst bytes of one contiguous range ``[0, length)``."""
    return cdiv(np.maximum(length, 0), burst) * burst



class Rows:
    """Rows (or records) of ``payload`` bytes at ``stride`` in one region, burst-granular."""

    def __init__(self, layout: KVLayout, payload: int) -> None:
        self.payload = payload
        self.stride = layout.stride(payload)
        self.burst = layout.burst_bytes
        self.aligned = self.stride % self.burst == 0     # every row starts a burst

    def prefix(self, m: np.ndarray) -> np.ndarray:
        """Burst bytes of slots ``0..m-1`` (exact)."""
        m = np.asarray(m, dtype=np.int64)
        if self.aligned:
            return m * (cdiv(self.payload, self.burst) * self.burst)
        span = np.where(m > 0, (m - 1) * self.stride + self.payload, 0)
        return cdiv(span, self.burst) * self.burst

    def runs(self, m: np.ndarray, run_starts_gcd: int) -> np.ndarray:
        """Burst bytes of one run of ``m`` consecutive slots starting at an offset that is a
        multiple of ``run_starts_gcd`` bytes (exact if aligned, else an upper bound)."""
        m = np.asarray(m, dtype=np.int64)
        if self.aligned:
            return self.prefix(m)
        slack = self.burst - math.gcd(run_starts_gcd, self.burst)
        span = np.where(m > 0, slack + (m - 1) * self.stride + self.payload, 0)
        return cdiv(span, self.burst) * self.burst

    def isolated(self, m: np.ndarray) -> np.ndarray:
        """Burst bytes of ``m`` rows at arbitrary slots (exact if aligned, else a bound)."""
        m = np.asarray(m, dtype=np.int64)
        return m * self.runs(np.ones_like(m), self.stride)

