"""Closed-form external bytes per decode step and (layer, KV head), for every method.

The golden model (:mod:`hikv.model.methods`) counts the bytes of each step exactly from what it
reads (:class:`~hikv.model.layout.ByteAccount`); this module gives the same quantities in closed
form, vectorised with numpy, so the cost model and the sweeps need no torch and no data. The
tests check them against the golden model on small cases.

Operating point: ``n`` tokens are cached before the step (the prompt, ``Config.context``); the
step appends the current token (computed on chip, never read). Conventions follow the golden
model; where the golden count depends on the data the closed form states its assumption:

* exact for full KV, H2O and SnapKV (first decode step), Quest, Double Sparsity, HiKV with no
  Stage I, and HiKV evicting (the average over one compaction cycle of ``Δ`` steps);
* SparQ, Double Sparsity and HiKV-lowbit read scattered rows: exact when ``align_bytes >=
  burst_bytes`` (each record then costs ``ceil(record / burst)`` bursts wherever it lies);
  otherwise the expectation over a uniformly random choice of the rows (neighbours share
  bursts);
* HiKV query-aware with page bounds chooses whole pages; the closed form assumes the chosen
  pages hold no sink or recent token (the *nominal* count, an upper bound: the golden model can
  read up to ``page_tokens`` fewer tokens per such overlap);
* query-aware K channels (``query_channels`` / ``channel_groups``): bursts are the expectation
  over uniformly random channel sets, and touched pages are counted as wholly selected.

``requests`` estimates the loader's AXI requests (a contiguous run of ``L`` bytes costs
``ceil(L / max_request_bytes)``; scattered records one request each), used only by the loader
timing; it is an upper bound where neighbouring selected records would coalesce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hikv.params import (
    KVLayout,
    LoaderParams,
    Method,
    MethodSpec,
    ParamError,
    Stage1Scorer,
    Stage1Variant,
    Stage2Kind,
)

__all__ = ["Geometry", "StepBytes", "step_bytes", "SCORE_BYTES"]

#: bytes of one stored importance score of the evicting Stage I (as in the golden model)
SCORE_BYTES = 2

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
        return _cdiv(payload, self.align_bytes) * self.align_bytes

    def record_bytes(self, kept: ArrayLike) -> ArrayLike:
        return self.head_dim // 8 + kept * self.elem_bytes


@dataclass(frozen=True)
class StepBytes:
    """Bytes of one decode step of one (layer, KV head); numpy arrays (or floats).

    Same fields as :class:`hikv.model.layout.ByteAccount` plus ``requests``.
    """

    k_ideal: ArrayLike
    v_ideal: ArrayLike
    meta_ideal: ArrayLike
    k_burst: ArrayLike
    v_burst: ArrayLike
    meta_burst: ArrayLike
    resident: ArrayLike
    tokens: ArrayLike
    requests: ArrayLike

    @property
    def ideal(self) -> ArrayLike:
        return self.k_ideal + self.v_ideal + self.meta_ideal

    @property
    def burst(self) -> ArrayLike:
        return self.k_burst + self.v_burst + self.meta_burst

    def as_dict(self) -> dict[str, ArrayLike]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["ideal"] = self.ideal
        d["burst"] = self.burst
        return d


# --------------------------------------------------------------------------- pieces
def _cdiv(a: ArrayLike, b: ArrayLike) -> ArrayLike:
    return -(-np.asarray(a) // np.asarray(b))


@dataclass(frozen=True)
class _Piece:
    """Burst bytes and request count of some reads of one region."""

    burst: ArrayLike
    requests: ArrayLike

    def __add__(self, o: _Piece) -> _Piece:
        return _Piece(self.burst + o.burst, self.requests + o.requests)

    def scale(self, k: ArrayLike) -> _Piece:
        return _Piece(self.burst * k, self.requests * k)


def _zero() -> _Piece:
    return _Piece(np.asarray(0.0), np.asarray(0.0))


def _run(g: Geometry, s0: ArrayLike, count: ArrayLike, rec: ArrayLike) -> _Piece:
    """Records at consecutive slots ``s0 .. s0+count-1`` of ``rec`` bytes each (exact)."""
    bu, mr = g.burst_bytes, g.max_request_bytes
    stride = g.stride(rec)
    c = np.maximum(np.asarray(count), 0)
    b1 = _cdiv(rec, bu)                                   # blocks of one burst-aligned record
    # align >= burst: every record starts on a burst; each costs b1 blocks
    aligned_blocks = c * b1
    gap = stride > b1 * bu                               # untouched bursts between records
    aligned_req = np.where(gap, c * _cdiv(b1 * bu, mr), _cdiv(c * b1 * bu, mr))
    # align < burst: records pack; the run covers blocks first..last (gaps < align < burst)
    start = np.asarray(s0) * stride
    end = start + np.maximum(c - 1, 0) * stride + rec - 1
    packed_blocks = np.where(c > 0, end // bu - start // bu + 1, 0)
    packed_req = _cdiv(packed_blocks * bu, mr)
    big = g.align_bytes >= bu
    blocks = np.where(big, aligned_blocks, packed_blocks)
    req = np.where(c > 0, np.where(big, aligned_req, packed_req), 0)
    return _Piece(blocks * bu * 1.0, req * 1.0)


def _scattered(g: Geometry, count: ArrayLike, rec: ArrayLike, pool: ArrayLike) -> _Piece:
    """``count`` records chosen among ``pool`` consecutive slots.

    ``align >= burst``: each record costs ``ceil(rec / burst)`` bursts wherever it lies (exact).
    Otherwise records pack and neighbours share bursts: the expected number of bursts touched
    when the ``count`` records are a uniformly random subset of the pool, ``sum over the pool's
    bursts of 1 - (1 - count / pool)^m``, ``m`` the records overlapping each burst.
    """
    bu, mr = g.burst_bytes, g.max_request_bytes
    stride = g.stride(rec)
    c = np.maximum(np.asarray(count), 0)
    b1 = _cdiv(rec, bu)
    aligned = _Piece(c * b1 * bu * 1.0, c * _cdiv(b1 * bu, mr) * 1.0)
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
    packed = _Piece(blocks * bb, c * 1.0)
    big = np.asarray(g.align_bytes) >= bu
    return _Piece(np.where(big, aligned.burst, packed.burst),
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


def _contiguous(g: Geometry, length: ArrayLike) -> _Piece:
    """One array read from its start (metadata)."""
    bu, mr = g.burst_bytes, g.max_request_bytes
    ln = np.maximum(np.asarray(length), 0)
    blocks = _cdiv(ln, bu)
    return _Piece(blocks * bu * 1.0, _cdiv(blocks * bu, mr) * 1.0)


def _rows(g: Geometry, count: ArrayLike, n: ArrayLike, rec: ArrayLike) -> _Piece:
    """``count`` selected rows of ``n``: contiguous when all are selected, else scattered."""
    full = _run(g, 0, n, rec)
    sc = _scattered(g, count, rec, n)
    allsel = np.asarray(count) >= np.asarray(n)
    return _Piece(np.where(allsel, full.burst, sc.burst), np.where(allsel, full.requests,
                                                                    sc.requests))


def _channel_blocks_per_page(g: Geometry, kind: Stage2Kind, keep: ArrayLike, group: int
                             ) -> tuple[ArrayLike, ArrayLike]:
    """(bursts, runs) of one page's chosen channels in the channel-major page layout."""
    d, bu = g.head_dim, g.burst_bytes
    chunk = g.page_tokens * g.elem_bytes
    unit = chunk * (group if kind is Stage2Kind.CHANNEL_GROUPS else 1)   # bytes per choice
    units = d // (unit // chunk)                                         # choices per page
    chosen = keep // (unit // chunk)
    per_burst = np.maximum(bu // unit, 1)                                # choices per burst
    # unit >= burst: each choice is ceil(unit / burst) bursts
    big = chosen * _cdiv(unit, bu)
    # unit < burst: distinct bursts touched; expectation over random choice sets
    small = _expected_groups(units, per_burst, chosen)
    blocks = np.where(unit >= bu, big, small)
    return blocks, np.where(unit >= bu, chosen, small)


def _unique_apply(fn: Any, *args: ArrayLike) -> ArrayLike:
    """``fn`` of Python ints, applied to broadcast integer arrays once per distinct tuple."""
    arrs = np.broadcast_arrays(*(np.asarray(a, dtype=np.int64) for a in args))
    shape = arrs[0].shape
    flat = np.stack([a.reshape(-1) for a in arrs], axis=1)
    uniq, inv = np.unique(flat, axis=0, return_inverse=True)
    vals = np.array([fn(*map(int, row)) for row in uniq], dtype=float)
    out = vals[inv.reshape(-1)].reshape(shape)
    return out if out.ndim else float(out)


def _expected_groups(total: ArrayLike, per: ArrayLike, chosen: ArrayLike) -> ArrayLike:
    """Expected number of groups (of ``per`` consecutive items, ``total/per`` groups) touched
    by ``chosen`` items drawn without replacement: groups x (1 - C(total-per, chosen) /
    C(total, chosen))."""
    def one(t: int, p: int, c: int) -> float:
        miss = math.comb(t - p, c) / math.comb(t, c) if c <= t - p else 0.0
        return (t // p) * (1.0 - miss)

    return _unique_apply(one, total, per, chosen)


def _resident_hikv(spec: MethodSpec, g: Geometry, n_res: ArrayLike, keep_k: ArrayLike,
                   keep_v: ArrayLike) -> ArrayLike:
    """:func:`hikv.model.methods.hikv_resident_bytes` in closed form."""
    p = spec.hikv
    assert p is not None

    def region(kind: Stage2Kind, keep: ArrayLike) -> ArrayLike:
        if kind is Stage2Kind.NONE:
            return n_res * g.stride(g.row_bytes)
        if kind is Stage2Kind.STATIC:
            return n_res * g.stride(g.record_bytes(keep))
        return _cdiv(n_res, g.page_tokens) * g.head_dim * g.page_tokens * g.elem_bytes

    meta = 0
    if p.stage1 is Stage1Variant.EVICT:
        meta = n_res * SCORE_BYTES
    elif p.stage1 is Stage1Variant.QUERY_AWARE:
        if p.scorer is Stage1Scorer.PAGE_BOUNDS:
            meta = _cdiv(n_res, g.page_tokens) * g.stride(2 * g.row_bytes)
        else:
            meta = n_res * (_cdiv(g.head_dim * p.lowbit_bits, 8) + 2 * g.elem_bytes)
    return region(p.k_rule.kind, keep_k) + region(p.v_rule.kind, keep_v) + meta


# --------------------------------------------------------------------------- methods
def step_bytes(spec: MethodSpec, geom: Geometry | KVLayout, n: ArrayLike, *,
               budget: ArrayLike | None = None, keep_k: ArrayLike | None = None,
               keep_v: ArrayLike | None = None, loader: LoaderParams | None = None
               ) -> StepBytes:
    """Bytes per decode step and (layer, KV head) with ``n`` cached tokens.

    ``budget``, ``keep_k`` and ``keep_v`` (HiKV's Stage II keeps) override the spec's values and,
    like ``n`` and the geometry, may be numpy arrays (they broadcast).
    """
    g = geom if isinstance(geom, Geometry) else Geometry.of(geom, loader)
    n = np.asarray(n)
    if (n < 1).any():
        raise ParamError("n (cached tokens) must be >= 1")
    B = np.asarray(spec.budget if budget is None else budget)
    rb = g.row_bytes
    m = spec.method
    zero = np.zeros(np.broadcast(n, B, g.head_dim).shape)
    if m is Method.FULL:
        kv = _run(g, 0, n, rb)
        res = (n + 1) * 2 * g.stride(rb)
        return _out(n * rb, n * rb, 0, kv, kv, _zero(), res, n, zero)
    if m is Method.H2O:                # an accumulated score per resident token, read each step
        c = np.minimum(n, B)
        kv = _run(g, 0, c, rb)
        after = np.minimum(n + 1, B)
        meta_len = c * SCORE_BYTES
        return _out(c * rb, c * rb, meta_len, kv, kv, _contiguous(g, meta_len),
                    after * (2 * g.stride(rb) + SCORE_BYTES), c, zero)
    if m is Method.SNAPKV:
        c = np.minimum(n, B)
        kv = _run(g, 0, c, rb)
        return _out(c * rb, c * rb, 0, kv, kv, _zero(), (c + 1) * 2 * g.stride(rb), c, zero)
    if m is Method.QUEST:
        pt = spec.page_tokens
        n_res = n + 1
        pages = _cdiv(n_res, pt)
        sel = np.minimum(np.maximum(1, B // pt), pages)
        last = n % pt
        c = (sel - 1) * pt + last
        kv = _run(g, 0, pt, rb).scale(sel - 1) + _run(g, (n // pt) * pt, last, rb)
        ms = g.stride(2 * rb)
        meta_len = (pages - 1) * ms
        res = n_res * 2 * g.stride(rb) + pages * ms
        return _out(c * rb, c * rb, meta_len, kv, kv, _contiguous(g, meta_len), res, c, zero)
    if m is Method.SPARQ:
        r = np.minimum(spec.channels, g.head_dim)
        c = np.minimum(B, n + 1) - 1
        rows = _rows(g, c, n, rb)
        k = rows + _contiguous(g, n * g.elem_bytes).scale(r)
        res = (n + 1) * 2 * g.stride(rb) + (n + 1) * rb + rb
        return _out(c * rb + r * n * g.elem_bytes, c * rb, rb, k, rows, _contiguous(g, rb),
                    res, c, zero)
    if m is Method.DOUBLE_SPARSITY:
        r = np.minimum(spec.channels, g.head_dim)
        bits = spec.label_bits
        lrb = _cdiv(r * bits, 8) + (0 if bits >= 16 else 2)
        c = np.minimum(B, n + 1) - 1
        rows = _rows(g, c, n, rb)
        res = (n + 1) * 2 * g.stride(rb) + (n + 1) * lrb
        return _out(c * rb, c * rb, n * lrb, rows, rows, _contiguous(g, n * lrb), res, c, zero)
    if m is Method.HIKV:
        return _hikv(spec, g, n, B, keep_k, keep_v, zero)
    raise ParamError(f"no closed form for method {m.value!r}")


def _out(k_ideal: ArrayLike, v_ideal: ArrayLike, meta_ideal: ArrayLike, k: _Piece, v: _Piece,
         meta: _Piece, resident: ArrayLike, tokens: ArrayLike, zero: ArrayLike) -> StepBytes:
    f = lambda x: np.asarray(x, dtype=float) + zero  # noqa: E731 (broadcast to the grid)
    return StepBytes(k_ideal=f(k_ideal), v_ideal=f(v_ideal), meta_ideal=f(meta_ideal),
                     k_burst=f(k.burst), v_burst=f(v.burst), meta_burst=f(meta.burst),
                     resident=f(resident), tokens=f(tokens),
                     requests=f(k.requests + v.requests + meta.requests))


def _hikv(spec: MethodSpec, g: Geometry, n: ArrayLike, B: ArrayLike, keep_k: ArrayLike | None,
          keep_v: ArrayLike | None, zero: ArrayLike) -> StepBytes:
    p = spec.hikv
    assert p is not None
    kr, vr = p.k_rule, p.v_rule
    kk = g.head_dim if kr.kind is Stage2Kind.NONE else np.asarray(
        kr.keep if keep_k is None else keep_k)
    kv_ = g.head_dim if vr.kind is Stage2Kind.NONE else np.asarray(
        vr.keep if keep_v is None else keep_v)
    S, R, delta, pt = p.sinks, p.recent, p.compact_interval, g.page_tokens
    eb = g.elem_bytes
    qc = kr.kind in (Stage2Kind.QUERY_CHANNELS, Stage2Kind.CHANNEL_GROUPS)
    rec_k = g.record_bytes(kk) if kr.kind is Stage2Kind.STATIC else g.row_bytes
    rec_v = g.record_bytes(kv_) if vr.kind is Stage2Kind.STATIC else g.row_bytes
    ideal_k_tok = kk * eb if qc else (rec_k if kr.kind is Stage2Kind.STATIC else g.row_bytes)
    ideal_v_tok = rec_v
    n_res = n + 1

    def kv_pieces(pieces: list[tuple[str, ArrayLike, ArrayLike]], pages: ArrayLike
                  ) -> tuple[_Piece, _Piece]:
        """pieces: ("run", s0, count) / ("scat", count, pool); ``pages``: touched K pages."""
        k, v = _zero(), _zero()
        for kind, a, b in pieces:
            if kind == "run":
                v = v + _run(g, a, b, rec_v)
                if not qc:
                    k = k + _run(g, a, b, rec_k)
            else:
                v = v + _scattered(g, a, rec_v, b)
                if not qc:
                    k = k + _scattered(g, a, rec_k, b)
        if qc:
            blocks, runs = _channel_blocks_per_page(g, kr.kind, kk, kr.group)
            k = _Piece(pages * blocks * g.burst_bytes * 1.0, pages * runs * 1.0)
        return k, v

    if p.stage1 is Stage1Variant.NONE:
        k, v = kv_pieces([("run", 0, n)], _cdiv(n, pt))
        res = _resident_hikv(spec, g, n_res, kk, kv_)
        return _out(n * ideal_k_tok, n * ideal_v_tok, 0, k, v, _zero(), res, n, zero)

    if p.stage1 is Stage1Variant.EVICT:
        # after prefill the cache holds min(n, B); over a compaction cycle step j (1..Δ) reads
        # B + j - 1 tokens (contiguous slots) and that many scores; averaged over the cycle
        j = np.arange(delta).reshape((delta,) + (1,) * np.ndim(zero))
        evicting = n > B
        c = np.where(evicting, B + j, n)                 # cached tokens read at each step
        k, v = kv_pieces([("run", 0, c)], _cdiv(c, pt))
        meta = _contiguous(g, c * SCORE_BYTES)
        # resident after step j: c + 1 tokens, back to B after the compaction at step Δ
        after = np.where(evicting & (j == delta - 1), B, c + 1)
        res = _resident_hikv(spec, g, after, kk, kv_)
        avg = lambda x: np.mean(np.asarray(x, dtype=float) + np.zeros(c.shape), axis=0)  # noqa
        km, vm, mm = (_Piece(avg(x.burst), avg(x.requests)) for x in (k, v, meta))
        return _out(avg(c * ideal_k_tok), avg(c * ideal_v_tok), avg(c * SCORE_BYTES), km, vm,
                    mm, avg(res), avg(c), zero)

    # query-aware Stage I
    all_sel = n_res <= B
    rp = max(R, 1)                       # forced recent window, current token included
    forced = S + rp
    n_imp = np.maximum(B - forced, 0)
    recent_s0 = n_res - rp
    recent_c = rp - 1                    # cached recent tokens (the current one is not read)
    sink_pages = _cdiv(S, pt)
    recent_pages = np.where(recent_c > 0, (n_res - 2) // pt - recent_s0 // pt + 1, 0)
    if p.scorer is Stage1Scorer.PAGE_BOUNDS:
        chosen = n_imp // pt
        cand_pages = _cdiv(n_res, pt)
        chosen = np.minimum(chosen, cand_pages)
        tokens = forced - 1 + chosen * pt
        pieces = [("run", 0, S), ("run", recent_s0, recent_c)]
        k, v = kv_pieces(pieces, sink_pages + recent_pages + chosen)
        page_run_v = _run(g, 0, pt, rec_v).scale(chosen)
        v = v + page_run_v
        if not qc:
            k = k + _run(g, 0, pt, rec_k).scale(chosen)
        meta_len = _cdiv(n_res, pt) * g.stride(2 * g.row_bytes)
    else:
        cand = np.maximum(n_res - forced, 1)
        tokens = forced - 1 + n_imp
        cand_pages = _cdiv(cand, pt)
        touched = cand_pages * (1.0 - (1.0 - np.minimum(n_imp / cand, 1.0)) ** pt)
        pieces = [("run", 0, S), ("run", recent_s0, recent_c), ("scat", n_imp, cand)]
        k, v = kv_pieces(pieces, sink_pages + recent_pages + touched)
        meta_len = (n_res - 1) * (_cdiv(g.head_dim * p.lowbit_bits, 8) + 2 * eb)
    meta = _contiguous(g, meta_len)
    # everything fits the budget: all tokens read, no scoring
    k_all, v_all = kv_pieces([("run", 0, n)], _cdiv(n, pt))
    sel = lambda a, b: np.where(all_sel, a, b)  # noqa: E731
    k = _Piece(sel(k_all.burst, k.burst), sel(k_all.requests, k.requests))
    v = _Piece(sel(v_all.burst, v.burst), sel(v_all.requests, v.requests))
    meta = _Piece(sel(0.0, meta.burst), sel(0.0, meta.requests))
    tokens = sel(n, tokens)
    res = _resident_hikv(spec, g, n_res, kk, kv_)
    return _out(tokens * ideal_k_tok, tokens * ideal_v_tok, sel(0, meta_len), k, v, meta, res,
                tokens, zero)
