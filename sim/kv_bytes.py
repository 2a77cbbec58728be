"""Closed-form external bytes of every KV method, for the cost model and the serving model.

The golden model (:mod:`hikv.model.methods`) counts the bytes of each step exactly from what it
reads and keeps (:class:`~hikv.model.layout.ByteAccount`), by running the method on tensors.
This one module gives the same quantities in closed form, vectorised with numpy, for two users
that ask different questions of the same formulas:

* the cost model (:mod:`hikv.sim.attention_model`, sweeps): :func:`step_bytes`, the bytes of
  one decode step with ``n`` cached tokens at an operating point, broadcast over the design
  axes (context, budget, Stage II keeps, head dimension), with an AXI request estimate for the
  loader timing (``tests/test_cost_bytes.py``);
* the serving simulator (:mod:`hikv.sim.serving`, :mod:`hikv.sim.step_cost`):
  :class:`KVBytes`, per sequence state (prompt ``P``, decode step ``j``): bytes read, resident
  tokens after each step and during prefill, storage per resident token
  (``tests/test_kv_bytes.py``).

Both rest on the same pieces (burst-granular runs, contiguous metadata arrays, the resident
bytes of HiKV's records, :data:`SCORE_BYTES`), and ``tests/test_kv_bytes.py`` checks that the
two views agree on every method where both are exact. Where the golden count depends on the
data, :func:`step_bytes` gives an *expectation* (random choice of rows or channels; the cost
model wants typical bytes) and :class:`KVBytes` an *upper bound* (the serving model must not
overcommit bandwidth); each says so below.

Cost model view (:func:`step_bytes`)
------------------------------------
Closed-form external bytes per decode step and (layer, KV head), for every method.

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

Serving view (:class:`KVBytes`)
-------------------------------
The golden model (:mod:`hikv.model.methods`) counts, per decode step and (layer, KV head), the
bytes each method reads and keeps resident by running the method on real tensors. The serving
simulator needs the same numbers for millions of steps, so this module writes them as closed
forms of the sequence state, in numpy, and ``tests/test_kv_bytes.py`` checks them against the
golden model's :class:`~hikv.model.layout.ByteAccount` on small cases.

Sequence state, shared with the scheduler:

* ``prompt`` ``P``: tokens prefilled at the sequence's last (re)admission (after a recompute
  preemption the prompt plus the tokens generated so far);
* ``step`` ``j >= 1``: the decode step, as the golden model's ``KVCache.steps`` after
  ``decode``; the context attended at step ``j`` is ``n = P + j`` tokens, the current one
  included (its K and V are computed on chip and not read).

Every function returns bytes of ONE (layer, KV head); multiply by ``layers * kv_heads`` for a
sequence. Reads are at burst granularity (``*_burst``) and ideal.

Exactness. Token counts are exact for every method except HiKV's query-aware Stage I with the
``page_bounds`` scorer, where a chosen page that overlaps the sinks or the recent window adds
fewer tokens than a whole page; the closed form counts whole pages (an upper bound, at most two
partial pages above). Burst bytes are exact when ``align_bytes >= burst_bytes`` (every row or
record starts a burst) or the rows read are slots ``0..m-1``; otherwise they are an upper bound
(neighbouring selected rows may share bursts). Query-aware K channels (``query_channels``,
``channel_groups``) count whole page chunks, an upper bound. :attr:`KVBytes.exact` says which
applies.

Residency (capacity). Methods that keep every token (full KV, Quest, SparQ, Double Sparsity,
HiKV with Stage I ``none`` or ``query_aware``) hold ``P + j`` tokens. H2O evicts after every
prefill chunk and every decode step (budget ``B``); SnapKV and HiKV's evicting Stage I evict
only after the last prefill chunk (the whole prompt is resident until then); SnapKV never evicts
during decode; HiKV compacts from ``B + Δ`` back to ``B`` every ``Δ`` steps. Storage per
resident token comes from each method's ``resident`` formula in the golden model (metadata,
SparQ's second K copy, Quest's page bounds, Double Sparsity's labels, H2O's and HiKV's
accumulated scores, HiKV's Stage II records).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hikv.model.methods import SCORE_BYTES
from hikv.params import (
    Config,
    HiKVPolicy,
    KVLayout,
    LoaderParams,
    Method,
    MethodSpec,
    ParamError,
    Stage1Scorer,
    Stage1Variant,
    Stage2Kind,
    Stage2Rule,
)

from .timing import unique_apply

__all__ = [
    "SCORE_BYTES",
    "METHOD_NAMES",
    "Geometry",
    "StepBytes",
    "step_bytes",
    "ReadBytes",
    "KVBytes",
    "method_specs",
    "resolve_methods",
    "kv_bytes_model",
]

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


def _expected_groups(total: ArrayLike, per: ArrayLike, chosen: ArrayLike) -> ArrayLike:
    """Expected number of groups (of ``per`` consecutive items, ``total/per`` groups) touched
    by ``chosen`` items drawn without replacement: groups x (1 - C(total-per, chosen) /
    C(total, chosen))."""
    def one(t: int, p: int, c: int) -> float:
        miss = math.comb(t - p, c) / math.comb(t, c) if c <= t - p else 0.0
        return (t // p) * (1.0 - miss)

    return unique_apply(one, total, per, chosen)


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

def _contig_burst(length: ArrayLike, burst: int) -> ArrayLike:
    """Burst bytes of one contiguous range ``[0, length)``."""
    return _cdiv(np.maximum(length, 0), burst) * burst


#: method names the serving simulator and ``hikv serve --method`` accept (besides ``all``)
METHOD_NAMES = ("full", "h2o", "snapkv", "quest", "sparq", "ds", "hikv", "hikv-evict",
                "hikv-query")


def method_specs(cfg: Config) -> dict[str, MethodSpec]:
    """Every method at the preset's operating point, by name.

    Baselines take HiKV's budget ``cfg.policy.budget`` (tokens attended per step, as
    :class:`~hikv.params.MethodSpec` defines it), H2O HiKV's recent window, SnapKV HiKV's
    observation window, Quest the layout's page size; other fields keep the ``MethodSpec``
    defaults. ``hikv`` is ``cfg.policy`` as given; ``hikv-evict`` and ``hikv-query`` are the
    same policy with the evicting or the query-aware Stage I.
    """
    p = cfg.policy
    b = p.budget
    return {
        "full": MethodSpec(method=Method.FULL, budget=b, recent=p.recent),
        "h2o": MethodSpec(method=Method.H2O, budget=b, recent=p.recent),
        "snapkv": MethodSpec(method=Method.SNAPKV, budget=b, recent=min(p.obs_window, b)),
        "quest": MethodSpec(method=Method.QUEST, budget=b, recent=p.recent,
                            page_tokens=cfg.layout.page_tokens),
        "sparq": MethodSpec(method=Method.SPARQ, budget=b, recent=p.recent),
        "ds": MethodSpec(method=Method.DOUBLE_SPARSITY, budget=b, recent=p.recent),
        "hikv": MethodSpec.for_hikv(p),
        "hikv-evict": MethodSpec.for_hikv(dataclasses.replace(p, stage1=Stage1Variant.EVICT)),
        "hikv-query": MethodSpec.for_hikv(
            dataclasses.replace(p, stage1=Stage1Variant.QUERY_AWARE)),
    }


def resolve_methods(cfg: Config, names: str | list[str] | tuple[str, ...]
                    ) -> dict[str, MethodSpec]:
    """Names (or ``"all"``, or a comma-separated string) -> ``{name: spec}`` in order.

    ``all`` is every name of :data:`METHOD_NAMES` whose spec differs from an earlier one
    (``hikv-query`` is dropped when ``hikv`` already is query-aware).
    """
    specs = method_specs(cfg)
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    out: dict[str, MethodSpec] = {}
    for name in names:
        if name == "all":
            for n in METHOD_NAMES:
                if specs[n] not in out.values():
                    out[n] = specs[n]
        elif name in specs:
            out[name] = specs[name]
        else:
            raise ParamError(f"method = {name!r} is not one of: all, {', '.join(METHOD_NAMES)}")
    if not out:
        raise ParamError("method: give at least one method name")
    return out


# --------------------------------------------------------------------------- helpers
@dataclass(frozen=True)
class ReadBytes:
    """Bytes one decode step reads for one (layer, KV head), arrays over sequences."""

    k_ideal: np.ndarray
    v_ideal: np.ndarray
    meta_ideal: np.ndarray
    k_burst: np.ndarray
    v_burst: np.ndarray
    meta_burst: np.ndarray
    tokens: np.ndarray

    @property
    def ideal(self) -> np.ndarray:
        return self.k_ideal + self.v_ideal + self.meta_ideal

    @property
    def burst(self) -> np.ndarray:
        return self.k_burst + self.v_burst + self.meta_burst


class _Rows:
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
            return m * (_cdiv(self.payload, self.burst) * self.burst)
        span = np.where(m > 0, (m - 1) * self.stride + self.payload, 0)
        return _cdiv(span, self.burst) * self.burst

    def runs(self, m: np.ndarray, run_starts_gcd: int) -> np.ndarray:
        """Burst bytes of one run of ``m`` consecutive slots starting at an offset that is a
        multiple of ``run_starts_gcd`` bytes (exact if aligned, else an upper bound)."""
        m = np.asarray(m, dtype=np.int64)
        if self.aligned:
            return self.prefix(m)
        slack = self.burst - math.gcd(run_starts_gcd, self.burst)
        span = np.where(m > 0, slack + (m - 1) * self.stride + self.payload, 0)
        return _cdiv(span, self.burst) * self.burst

    def isolated(self, m: np.ndarray) -> np.ndarray:
        """Burst bytes of ``m`` rows at arbitrary slots (exact if aligned, else a bound)."""
        m = np.asarray(m, dtype=np.int64)
        return m * self.runs(np.ones_like(m), self.stride)


# --------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class KVBytes:
    """Closed-form bytes of one method on one layout, per (layer, KV head).

    Build with :func:`kv_bytes_model`. All methods take numpy integer arrays (or scalars) and
    broadcast.
    """

    spec: MethodSpec
    layout: KVLayout

    # ----------------------------------------------------------------- properties
    @property
    def method(self) -> Method:
        return self.spec.method

    @property
    def policy(self) -> HiKVPolicy | None:
        return self.spec.hikv

    @property
    def exact(self) -> bool:
        """True when :meth:`decode_read` equals the golden model's account (else a bound)."""
        lay = self.layout
        p = self.policy
        if p is not None:
            if p.stage1 is Stage1Variant.QUERY_AWARE and p.scorer is Stage1Scorer.PAGE_BOUNDS:
                return False
            if p.k_rule.kind in (Stage2Kind.QUERY_CHANNELS, Stage2Kind.CHANNEL_GROUPS):
                return False
        selective = self.method in (Method.QUEST, Method.SPARQ, Method.DOUBLE_SPARSITY) or (
            p is not None and p.stage1 is Stage1Variant.QUERY_AWARE)
        return not selective or lay.align_bytes >= lay.burst_bytes

    @property
    def evicts(self) -> bool:
        """Capacity method: frees KV of evicted tokens."""
        p = self.policy
        return self.method in (Method.H2O, Method.SNAPKV) or (
            p is not None and p.stage1 is Stage1Variant.EVICT)

    @property
    def evicts_during_prefill(self) -> bool:
        """H2O evicts after every prefill chunk; SnapKV and HiKV only after the last."""
        return self.method is Method.H2O

    # ----------------------------------------------------------------- storage
    def storage_bytes(self, r: np.ndarray | int) -> np.ndarray:
        """Resident bytes for ``r`` resident tokens (data, metadata, alignment padding)."""
        r = np.asarray(r, dtype=np.int64)
        lay = self.layout
        row = lay.row_bytes
        dense = r * 2 * lay.stride(row)
        m = self.method
        if m in (Method.FULL, Method.SNAPKV):
            return dense
        if m is Method.H2O:
            return dense + r * SCORE_BYTES
        if m is Method.QUEST:
            return dense + _cdiv(r, self.spec.page_tokens) * lay.stride(2 * row)
        if m is Method.SPARQ:
            return dense + r * row + row
        if m is Method.DOUBLE_SPARSITY:
            return dense + r * self._label_row_bytes()
        p = self.policy
        assert p is not None
        return _resident_hikv(self.spec, Geometry.of(lay), r, p.k_rule.keep, p.v_rule.keep)

    def token_write_bytes(self) -> float:
        """Average bytes written per new token (its storage, page metadata amortised)."""
        many = 64 * self.layout.page_tokens * self.spec.page_tokens
        return float(self.storage_bytes(many) - self.storage_bytes(0)) / many

    # ----------------------------------------------------------------- residency (tokens)
    def resident_after_prefill(self, done: np.ndarray, total: np.ndarray) -> np.ndarray:
        """Resident tokens once ``done`` of ``total`` prompt tokens are prefilled."""
        done = np.asarray(done, dtype=np.int64)
        total = np.asarray(total, dtype=np.int64)
        b = self.spec.budget
        if self.evicts_during_prefill:
            return np.minimum(done, b)
        if self.evicts:
            return np.where(done >= total, np.minimum(done, b), done)
        return done

    def prefill_peak(self, done: np.ndarray, chunk: np.ndarray) -> np.ndarray:
        """Resident tokens while a chunk runs: what stays of ``done`` plus the whole chunk."""
        done = np.asarray(done, dtype=np.int64)
        chunk = np.asarray(chunk, dtype=np.int64)
        if self.evicts_during_prefill:
            return np.minimum(done, self.spec.budget) + chunk
        return done + chunk

    def resident_after_step(self, prompt: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Resident tokens after decode step ``step`` (``step = 0``: after prefill)."""
        prompt = np.asarray(prompt, dtype=np.int64)
        step = np.asarray(step, dtype=np.int64)
        b = self.spec.budget
        m = self.method
        if m is Method.H2O:
            return np.minimum(prompt + step, b)
        if m is Method.SNAPKV:
            return np.minimum(prompt, b) + step
        p = self.policy
        if p is not None and p.stage1 is Stage1Variant.EVICT:
            x = np.minimum(prompt, b) + step
            d = p.compact_interval
            return np.where(x < b + d, x, b + (x - b) % d)
        return prompt + step

    @property
    def canonical_prompt(self) -> bool:
        """SnapKV and HiKV's evicting Stage I: decode depends on ``min(P, B)``, not ``P``."""
        p = self.policy
        return self.method is Method.SNAPKV or (p is not None
                                                 and p.stage1 is Stage1Variant.EVICT)

    def decode_key(self, prompt: np.ndarray | int, step: np.ndarray | int) -> np.ndarray:
        """One integer ``x`` per (prompt, step) such that everything decode step ``step``
        reads, attends and keeps is a function of ``x`` alone: ``x = P + j`` (``min(P, B) + j``
        for SnapKV and evicting HiKV). :meth:`by_key` maps ``x`` back to a (prompt, step)."""
        prompt = np.asarray(prompt, dtype=np.int64)
        if self.canonical_prompt:
            prompt = np.minimum(prompt, self.spec.budget)
        return prompt + np.asarray(step, dtype=np.int64)

    def by_key(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A (prompt, step) pair with :meth:`decode_key` ``x`` (``x >= 1``)."""
        x = np.asarray(x, dtype=np.int64)
        prompt = np.minimum(x - 1, self.spec.budget)
        return prompt, x - prompt

    def step_peak(self, prompt: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Resident tokens during decode step ``step >= 1`` (after the append, before any
        eviction)."""
        return self.resident_after_step(prompt, np.asarray(step) - 1) + 1

    # ----------------------------------------------------------------- reads
    def decode_read(self, prompt: np.ndarray, step: np.ndarray) -> ReadBytes:
        """Bytes decode step ``step >= 1`` reads (per (layer, KV head))."""
        prompt = np.asarray(prompt, dtype=np.int64)
        step = np.asarray(step, dtype=np.int64)
        lay = self.layout
        row = lay.row_bytes
        dense = _Rows(lay, row)
        z = np.zeros(np.broadcast(prompt, step).shape, dtype=np.int64)
        cached = self.resident_after_step(prompt, step - 1)     # tokens before the append
        n = cached + 1                                           # resident after the append
        m = self.method
        b = self.spec.budget
        if m in (Method.FULL, Method.H2O, Method.SNAPKV):
            k = dense.prefix(cached)
            meta = cached * SCORE_BYTES if m is Method.H2O else z
            return ReadBytes(cached * row, cached * row, meta, k, k,
                             _contig_burst(meta, lay.burst_bytes), cached)
        if m is Method.QUEST:
            pt = self.spec.page_tokens
            pages = _cdiv(n, pt)
            n_sel = max(1, b // pt)
            few = pages <= n_sel
            last_page = n - (pages - 1) * pt              # tokens of the current page
            toks = np.where(few, n - 1, (n_sel - 1) * pt + last_page - 1)
            page_bytes = dense.runs(np.full_like(n, pt), pt * dense.stride)
            last_bytes = dense.runs(last_page - 1, pt * dense.stride)
            kb = np.where(few, dense.prefix(n - 1), (n_sel - 1) * page_bytes + last_bytes)
            meta = (pages - 1) * lay.stride(2 * row)
            return ReadBytes(toks * row, toks * row, meta, kb, kb,
                             _contig_burst(meta, lay.burst_bytes), toks)
        if m in (Method.SPARQ, Method.DOUBLE_SPARSITY):
            few = n <= b
            toks = np.minimum(n, b) - 1
            kb = np.where(few, dense.prefix(toks), dense.isolated(toks))
            if m is Method.SPARQ:
                r = min(self.spec.channels, lay.head_dim)
                kt = (n - 1) * lay.elem_bytes
                meta = np.full_like(z, row)
                return ReadBytes(toks * row + r * kt, toks * row, meta,
                                 kb + r * _contig_burst(kt, lay.burst_bytes), kb,
                                 _contig_burst(meta, lay.burst_bytes), toks)
            lab = (n - 1) * self._label_row_bytes()
            return ReadBytes(toks * row, toks * row, lab, kb, kb,
                             _contig_burst(lab, lay.burst_bytes), toks)
        return self._hikv_read(n, cached, z)

    def _hikv_read(self, n: np.ndarray, cached: np.ndarray, z: np.ndarray) -> ReadBytes:
        p = self.policy
        assert p is not None
        lay = self.layout
        pt = lay.page_tokens
        burst = lay.burst_bytes
        # which cached tokens are read, and in what pattern
        if p.stage1 is Stage1Variant.QUERY_AWARE:
            few = n <= p.budget
            forced = np.minimum(p.sinks, n) + np.minimum(max(p.recent, 1), n)
            n_imp = p.budget - forced
            if p.scorer is Stage1Scorer.PAGE_BOUNDS:
                sel = forced + (n_imp // pt) * pt          # whole pages: an upper bound
                pattern = "pages"
            else:
                sel = np.full_like(n, p.budget)
                pattern = "isolated"
            toks = np.where(few, n - 1, np.minimum(sel, n) - 1)
        else:
            few = np.ones_like(n, dtype=bool)
            toks = cached
            pattern = "prefix"

        def rows(rule: Stage2Rule) -> tuple[np.ndarray, np.ndarray]:
            payload = (lay.row_bytes if rule.kind is Stage2Kind.NONE
                       else lay.record_bytes(rule.keep))
            rr = _Rows(lay, payload)
            if pattern == "prefix":
                sel_b = rr.prefix(toks)
            elif pattern == "isolated":
                sel_b = rr.isolated(toks)
            else:
                # per page the selected tokens are one run of at most a page (a chosen page,
                # the sinks, the start of the recent window): at most ceil(toks/pt) + 2 runs
                n_runs = _cdiv(toks, pt) + 2
                sel_b = np.minimum(n_runs * rr.runs(np.full_like(toks, pt), rr.stride),
                                   rr.isolated(toks))
            full_b = rr.prefix(n - 1)
            ideal = toks * payload
            return ideal, np.where(few, full_b, sel_b)

        kr = p.k_rule
        if kr.kind in (Stage2Kind.NONE, Stage2Kind.STATIC):
            k_ideal, k_burst = rows(kr)
        else:
            r = kr.keep
            chunk = lay.channel_chunk_bytes
            k_ideal = toks * r * lay.elem_bytes
            all_pages = _cdiv(np.maximum(n - 1, 0), pt)
            if pattern == "pages":
                pages = np.minimum(all_pages, _cdiv(toks, pt) + 2)
            else:
                pages = np.minimum(all_pages, toks)
            pages = np.where(few, all_pages, pages)
            k_burst = pages * r * _cdiv(chunk, burst) * burst
        v_ideal, v_burst = rows(p.v_rule)
        # Stage I metadata
        if p.stage1 is Stage1Variant.NONE:
            meta = z
        elif p.stage1 is Stage1Variant.EVICT:
            meta = cached * SCORE_BYTES
        elif p.scorer is Stage1Scorer.PAGE_BOUNDS:
            meta = np.where(few, 0, _cdiv(n, pt) * lay.stride(2 * lay.row_bytes))
        else:
            meta = np.where(few, 0, (n - 1) * self._lowbit_row_bytes())
        return ReadBytes(k_ideal, v_ideal, meta, k_burst, v_burst, _contig_burst(meta, burst), toks)

    def decode_read_burst(self, prompt: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Total burst bytes of decode step ``step`` (the simulator's hot path)."""
        return self.decode_read(prompt, step).burst

    def attended(self, prompt: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Tokens attended at decode step ``step`` (cached tokens read plus the current one)."""
        return self.decode_read(prompt, step).tokens + 1

    def scoring_macs(self, prompt: np.ndarray, step: np.ndarray, group: int) -> np.ndarray:
        """Multiply-accumulates per (layer, KV head) spent choosing what to read: Quest and
        HiKV page bounds ``2 d`` per page and query head, SparQ and Double Sparsity ``r`` per
        token and query head, HiKV low-bit keys ``d`` per token and query head."""
        prompt = np.asarray(prompt, dtype=np.int64)
        step = np.asarray(step, dtype=np.int64)
        n = self.resident_after_step(prompt, step - 1) + 1
        d = self.layout.head_dim
        m = self.method
        if m is Method.QUEST:
            return group * 2 * d * _cdiv(n, self.spec.page_tokens)
        if m in (Method.SPARQ, Method.DOUBLE_SPARSITY):
            return group * min(self.spec.channels, d) * n
        p = self.policy
        if m is Method.HIKV and p is not None and p.stage1 is Stage1Variant.QUERY_AWARE:
            few = n <= p.budget
            if p.scorer is Stage1Scorer.PAGE_BOUNDS:
                return np.where(few, 0, group * 2 * d * _cdiv(n, self.layout.page_tokens))
            return np.where(few, 0, group * d * n)
        return np.zeros_like(n)

    # ----------------------------------------------------------------- metadata rows
    def _label_row_bytes(self) -> int:
        r = min(self.spec.channels, self.layout.head_dim)
        bits = self.spec.label_bits
        return -(-r * bits // 8) + (0 if bits >= 16 else 2)

    def _lowbit_row_bytes(self) -> int:
        p = self.policy
        assert p is not None
        return -(-self.layout.head_dim * p.lowbit_bits // 8) + 2 * self.layout.elem_bytes


def kv_bytes_model(spec: MethodSpec, layout: KVLayout) -> KVBytes:
    """The closed-form byte model of ``spec`` on ``layout``."""
    if spec.hikv is not None:
        spec.hikv.check_head_dim(layout.head_dim)
    return KVBytes(spec, layout)
