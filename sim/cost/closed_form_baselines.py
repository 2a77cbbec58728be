"""Closed forms of the baselines: full KV, H2O, SnapKV, Quest, SparQ, Double Sparsity,
StreamingLLM, TOVA, AdaKV, G-AdaKV and PyramidKV.

One :class:`~hikv.sim.cost.closed_form_base.ClosedForm` per golden class of
:mod:`hikv.model.methods.registry` (same conventions; see there and
:mod:`hikv.sim.cost.closed_form_base`).

Exactness of the operating point (:meth:`step`): exact for full KV, H2O and SnapKV, Quest and
Double Sparsity's metadata; SparQ and Double Sparsity read scattered rows: exact when
``align_bytes >= burst_bytes`` (each record then costs ``ceil(record / burst)`` bursts wherever
it lies), otherwise the expectation over a uniformly random choice of the rows (neighbours share
bursts). The sequence state (:meth:`decode_read`) is exact for full KV, H2O and SnapKV, and for
the selective methods when every row starts a burst; otherwise an upper bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hikv.method_spec import Method
from hikv.model.refs.account import h2o_meta_bytes, label_row_bytes
from hikv.sim.cost.bursts import (
    Geometry,
    Rows,
    cdiv,
    contig_burst,
    contiguous,
    rows,
    run,
    zero_piece,
)
from hikv.sim.cost.closed_form_base import (
    ClosedForm,
    SortJob,
    StepAccount,
    Work,
    account_of,
    read_account,
)

__all__ = ["FullBytes", "H2OBytes", "SnapKVBytes", "QuestBytes", "SparQBytes", "DSBytes",
           "StreamingLLMBytes", "TOVABytes", "AdaKVBytes", "GAdaKVBytes", "PyramidKVBytes"]

ArrayLike = Any


class FullBytes(ClosedForm):
    """Every token resident, every cached token read (one contiguous run)."""

    method = Method.FULL

    def storage(self, g: Geometry, r: ArrayLike, keep_k: ArrayLike | None = None,
                keep_v: ArrayLike | None = None) -> ArrayLike:
        return r * 2 * g.stride(g.row_bytes)

    def _cached(self, n: ArrayLike, B: ArrayLike, prompt: ArrayLike | None) -> ArrayLike:
        """Cached tokens read at the operating point."""
        return n

    def step(self, g: Geometry, n: ArrayLike, B: ArrayLike, zero: ArrayLike, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None,
             prompt: ArrayLike | None = None) -> StepAccount:
        rb = g.row_bytes
        c = self._cached(n, B, prompt)
        kv = run(g, 0, c, rb)
        meta_len = self._meta_per_token * c
        meta = contiguous(g, meta_len) if self._meta_per_token else zero_piece()
        res = self.storage(g, self._kept(c, B))
        return account_of(c * rb, c * rb, meta_len, kv, kv, meta, res, c, zero)

    #: metadata bytes per cached token read every step (H2O's accumulated scores)
    _meta_per_token = 0

    def _kept(self, c: ArrayLike, B: ArrayLike) -> ArrayLike:
        """Resident tokens after the operating point's step, ``c`` cached before it."""
        return c + 1

    def _read(self, n: np.ndarray, cached: np.ndarray, z: np.ndarray) -> StepAccount:
        lay = self.layout
        row = lay.row_bytes
        k = Rows(lay, row).prefix(cached)
        meta = cached * self._meta_per_token if self._meta_per_token else z
        return read_account(cached * row, cached * row, meta, k, k,
                            contig_burst(meta, lay.burst_bytes), cached)


class _CappedBytes(FullBytes):
    """Shared by the methods that keep at most ``B`` tokens and evict one per step (H2O,
    StreamingLLM, TOVA): ``min(n, B)`` cached tokens read, ``_meta_per_token`` bytes of stored
    score each."""

    evicts = True
    evicts_during_prefill = True

    def storage(self, g: Geometry, r: ArrayLike, keep_k: ArrayLike | None = None,
                keep_v: ArrayLike | None = None) -> ArrayLike:
        return r * 2 * g.stride(g.row_bytes) + r * self._meta_per_token

    def _cached(self, n: ArrayLike, B: ArrayLike, prompt: ArrayLike | None) -> ArrayLike:
        return np.minimum(n, B)

    def _kept(self, c: ArrayLike, B: ArrayLike) -> ArrayLike:
        return np.minimum(c + 1, B)

    def resident_after_step(self, prompt: ArrayLike, step: ArrayLike) -> np.ndarray:
        return np.minimum(np.asarray(prompt) + np.asarray(step), self.spec.budget)


class H2OBytes(_CappedBytes):
    """Heavy hitters + recent window, one eviction per step, with the stored scores of the
    cached tokens read (:func:`~hikv.model.refs.account.h2o_meta_bytes` each: the accumulated score,
    and the count of observing queries for the averaged variant)."""

    method = Method.H2O

    @property
    def _meta_per_token(self) -> int:  # type: ignore[override]
        return h2o_meta_bytes(self.spec.averaged)

    def work(self, g: Geometry, n: ArrayLike, B: ArrayLike, sb: StepAccount, group: int, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None) -> Work:
        R = min(self.spec.recent, self.spec.budget)
        return Work(sorts=(SortJob("stage1", n=B + 1 - R, k=B - R,
                                   per_step=np.where(n >= B, 1, 0)),))


class StreamingLLMBytes(_CappedBytes):
    """Attention sinks + recent window: every resident token read, no scores, no sorting (the
    evicted token is always the oldest after the sinks)."""

    method = Method.STREAMING_LLM


class TOVABytes(_CappedBytes):
    """TOVA: every resident token read (the current query's attention, computed anyway, is
    the score; nothing stored); over budget, the layer's lowest score is evicted: one
    top-``B`` of ``B + 1`` per step and layer on the layer-wide scores (attention averaged
    over all query heads of the layer), shared by the layer's KV heads (``per_layer``)."""

    method = Method.TOVA

    def work(self, g: Geometry, n: ArrayLike, B: ArrayLike, sb: StepAccount, group: int, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None) -> Work:
        return Work(sorts=(SortJob("stage1", n=B + 1, k=B, per_step=np.where(n >= B, 1, 0),
                                   per_layer=True),))


class SnapKVBytes(FullBytes):
    """Chosen once after prefill (``min(P, B)`` tokens kept), then every resident token read;
    the cache grows by one token per decode step."""

    method = Method.SNAPKV
    evicts = True

    @property
    def canonical_prompt(self) -> bool:
        return True

    def _cached(self, n: ArrayLike, B: ArrayLike, prompt: ArrayLike | None) -> ArrayLike:
        p = n if prompt is None else np.asarray(prompt)
        return np.minimum(p, B) + (n - p)

    def resident_after_step(self, prompt: ArrayLike, step: ArrayLike) -> np.ndarray:
        return np.minimum(np.asarray(prompt), self.spec.budget) + np.asarray(step)


class _AdaptiveBytes(SnapKVBytes):
    """SnapKV's relatives with adaptive budgets (AdaKV, G-AdaKV, PyramidKV): chosen once after
    prefill, every resident token read. Per (layer, KV head) on average ``min(P, B)`` tokens
    are kept (the budgets are shared out, their sum is fixed), so the mean account is
    SnapKV's. Exact for that mean when every row starts a burst (bytes are then linear in
    the tokens of each head); otherwise the heads' reads of ``B`` rows on average cost at most
    one burst more each."""

    @property
    def exact(self) -> bool:
        return self.layout.align_bytes >= self.layout.burst_bytes


class AdaKVBytes(_AdaptiveBytes):
    """AdaKV: per-head budgets under the layer budget."""

    method = Method.ADAKV


class GAdaKVBytes(_AdaptiveBytes):
    """G-AdaKV: one budget over all layers and KV heads."""

    method = Method.G_ADAKV


class PyramidKVBytes(_AdaptiveBytes):
    """PyramidKV: per-layer budgets decreasing with depth, average ``B``."""

    method = Method.PYRAMIDKV


class QuestBytes(ClosedForm):
    """Pages of ``page_tokens`` scored by per-page key bounds; ``B / page_tokens`` pages read,
    the current page among them."""

    method = Method.QUEST

    def storage(self, g: Geometry, r: ArrayLike, keep_k: ArrayLike | None = None,
                keep_v: ArrayLike | None = None) -> ArrayLike:
        return r * 2 * g.stride(g.row_bytes) + cdiv(r, self.spec.page_tokens) * g.stride(
            2 * g.row_bytes)

    def step(self, g: Geometry, n: ArrayLike, B: ArrayLike, zero: ArrayLike, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None,
             prompt: ArrayLike | None = None) -> StepAccount:
        rb = g.row_bytes
        pt = self.spec.page_tokens
        n_res = n + 1
        pages = cdiv(n_res, pt)
        sel = np.minimum(np.maximum(1, B // pt), pages)
        last = n % pt
        c = (sel - 1) * pt + last
        kv = run(g, 0, pt, rb).scale(sel - 1) + run(g, (n // pt) * pt, last, rb)
        meta_len = (pages - 1) * g.stride(2 * rb)
        return account_of(c * rb, c * rb, meta_len, kv, kv, contiguous(g, meta_len),
                          self.storage(g, n_res), c, zero)

    def work(self, g: Geometry, n: ArrayLike, B: ArrayLike, sb: StepAccount, group: int, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None) -> Work:
        pages = cdiv(n + 1, self.spec.page_tokens)
        meta = contiguous(g, sb.meta_ideal)
        return Work(select_bytes=meta.burst, select_requests=meta.requests,
                    score_macs=group * pages * 2 * g.head_dim,
                    sorts=(SortJob("stage1", n=pages,
                                   k=np.maximum(1, B // self.spec.page_tokens)),))

    def _read(self, n: np.ndarray, cached: np.ndarray, z: np.ndarray) -> StepAccount:
        lay = self.layout
        row = lay.row_bytes
        dense = Rows(lay, row)
        pt = self.spec.page_tokens
        pages = cdiv(n, pt)
        n_sel = max(1, self.spec.budget // pt)
        few = pages <= n_sel
        last_page = n - (pages - 1) * pt              # tokens of the current page
        toks = np.where(few, n - 1, (n_sel - 1) * pt + last_page - 1)
        page_bytes = dense.runs(np.full_like(n, pt), pt * dense.stride)
        last_bytes = dense.runs(last_page - 1, pt * dense.stride)
        kb = np.where(few, dense.prefix(n - 1), (n_sel - 1) * page_bytes + last_bytes)
        meta = (pages - 1) * lay.stride(2 * row)
        return read_account(toks * row, toks * row, meta, kb, kb,
                            contig_burst(meta, lay.burst_bytes), toks)

    def _scoring_macs(self, n: np.ndarray, group: int) -> np.ndarray:
        return group * 2 * self.layout.head_dim * cdiv(n, self.spec.page_tokens)

    @property
    def exact(self) -> bool:
        return self.layout.align_bytes >= self.layout.burst_bytes


class _TopRows(ClosedForm):
    """Shared by SparQ and Double Sparsity: approximate scores of every token from metadata,
    then the top-``B`` rows read (scattered; all of them while ``n <= B``)."""

    def _r(self, head_dim: ArrayLike) -> ArrayLike:
        return np.minimum(self.spec.channels, head_dim)

    def _meta_storage(self, g: Geometry, r: ArrayLike) -> ArrayLike:
        """Metadata bytes kept for ``r`` resident tokens."""
        raise NotImplementedError

    def _scoring_read(self, g: Geometry, n: ArrayLike) -> tuple[ArrayLike, ArrayLike, ArrayLike]:
        """(K-copy bytes, metadata bytes, K-copy arrays) read to score ``n`` cached tokens:
        the K copy is ``arrays`` arrays of the first bytes, each read from its start."""
        raise NotImplementedError

    def storage(self, g: Geometry, r: ArrayLike, keep_k: ArrayLike | None = None,
                keep_v: ArrayLike | None = None) -> ArrayLike:
        return r * 2 * g.stride(g.row_bytes) + self._meta_storage(g, r)

    def step(self, g: Geometry, n: ArrayLike, B: ArrayLike, zero: ArrayLike, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None,
             prompt: ArrayLike | None = None) -> StepAccount:
        rb = g.row_bytes
        c = np.minimum(B, n + 1) - 1
        rw = rows(g, c, n, rb)
        k_copy, meta, arrays = self._scoring_read(g, n)
        k = rw + contiguous(g, k_copy).scale(arrays) if arrays is not None else rw
        k_ideal = c * rb + (k_copy * arrays if arrays is not None else 0)
        return account_of(k_ideal, c * rb, meta, k, rw, contiguous(g, meta),
                          self.storage(g, n + 1), c, zero)

    def _read(self, n: np.ndarray, cached: np.ndarray, z: np.ndarray) -> StepAccount:
        lay = self.layout
        row = lay.row_bytes
        dense = Rows(lay, row)
        b = self.spec.budget
        toks = np.minimum(n, b) - 1
        kb = np.where(n <= b, dense.prefix(toks), dense.isolated(toks))
        k_copy, meta, arrays = self._scoring_read(Geometry.of(lay), n - 1)
        meta = meta + z
        k_ideal, k_burst = toks * row, kb
        if arrays is not None:
            k_ideal = k_ideal + arrays * k_copy
            k_burst = k_burst + arrays * contig_burst(k_copy, lay.burst_bytes)
        return read_account(k_ideal, toks * row, meta, k_burst, kb,
                            contig_burst(meta, lay.burst_bytes), toks)

    def _scoring_macs(self, n: np.ndarray, group: int) -> np.ndarray:
        return group * min(self.spec.channels, self.layout.head_dim) * n

    def _stage1_sort(self, n: ArrayLike, B: ArrayLike) -> SortJob:
        return SortJob("stage1", n=n + 1, k=B, per_step=np.where(n + 1 > B, 1, 0))

    @property
    def exact(self) -> bool:
        return self.layout.align_bytes >= self.layout.burst_bytes


class SparQBytes(_TopRows):
    """SparQ: top-``r`` channels of ``|q|``, each read for every cached token from a
    channel-major second copy of K, score the tokens; the mean of V is read too."""

    method = Method.SPARQ

    def _meta_storage(self, g: Geometry, r: ArrayLike) -> ArrayLike:
        return r * g.row_bytes + g.row_bytes

    def _scoring_read(self, g: Geometry, n: ArrayLike) -> tuple[ArrayLike, ArrayLike, ArrayLike]:
        return n * g.elem_bytes, g.row_bytes, self._r(g.head_dim)

    def work(self, g: Geometry, n: ArrayLike, B: ArrayLike, sb: StepAccount, group: int, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None) -> Work:
        r = self._r(g.head_dim)
        one = contiguous(g, n * g.elem_bytes)
        return Work(select_bytes=one.burst * r, select_requests=one.requests * r,
                    score_macs=group * n * r, score_exps=group * (n + 1),
                    sorts=(SortJob("stage2", d=g.head_dim, k=r, count=1),
                           self._stage1_sort(n, B)))


class DSBytes(_TopRows):
    """Double Sparsity: a label cache (``r`` calibrated channels of every key, at
    ``label_bits``) scores every token."""

    method = Method.DOUBLE_SPARSITY

    def _meta_storage(self, g: Geometry, r: ArrayLike) -> ArrayLike:
        return r * label_row_bytes(self._r(g.head_dim), self.spec.label_bits)

    def _scoring_read(self, g: Geometry, n: ArrayLike) -> tuple[ArrayLike, ArrayLike, None]:
        return 0, self._meta_storage(g, n), None

    def work(self, g: Geometry, n: ArrayLike, B: ArrayLike, sb: StepAccount, group: int, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None) -> Work:
        return Work(select_bytes=sb.meta_burst,
                    select_requests=contiguous(g, sb.meta_ideal).requests,
                    score_macs=group * n * self._r(g.head_dim), score_exps=group * (n + 1),
                    sorts=(self._stage1_sort(n, B),))
