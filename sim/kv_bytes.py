"""KV bytes per KV method in closed form, vectorised over sequences (for the serving model).

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
from dataclasses import dataclass

import numpy as np

from hikv.model.methods import SCORE_BYTES
from hikv.params import (
    Config,
    HiKVPolicy,
    KVLayout,
    Method,
    MethodSpec,
    ParamError,
    Stage1Scorer,
    Stage1Variant,
    Stage2Kind,
    Stage2Rule,
)

__all__ = [
    "SCORE_BYTES",
    "METHOD_NAMES",
    "ReadBytes",
    "KVBytes",
    "method_specs",
    "resolve_methods",
    "kv_bytes_model",
]

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
def _cdiv(a: np.ndarray | int, b: int) -> np.ndarray:
    return -(-np.asarray(a, dtype=np.int64) // b)


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


def _contig(length: np.ndarray, burst: int) -> np.ndarray:
    """Burst bytes of one contiguous range ``[0, length)``."""
    return _cdiv(np.maximum(length, 0), burst) * burst


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
        assert self.policy is not None
        p = self.policy

        def region(rule: Stage2Rule) -> np.ndarray:
            if rule.kind is Stage2Kind.NONE:
                return r * lay.stride(row)
            if rule.kind is Stage2Kind.STATIC:
                return r * lay.stride(lay.record_bytes(rule.keep))
            return _cdiv(r, lay.page_tokens) * lay.head_dim * lay.channel_chunk_bytes

        if p.stage1 is Stage1Variant.EVICT:
            meta = r * SCORE_BYTES
        elif p.stage1 is Stage1Variant.QUERY_AWARE:
            meta = (_cdiv(r, lay.page_tokens) * lay.stride(2 * row)
                    if p.scorer is Stage1Scorer.PAGE_BOUNDS else r * self._lowbit_row_bytes())
        else:
            meta = np.zeros_like(r)
        return region(p.k_rule) + region(p.v_rule) + meta

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
                             _contig(meta, lay.burst_bytes), cached)
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
                             _contig(meta, lay.burst_bytes), toks)
        if m in (Method.SPARQ, Method.DOUBLE_SPARSITY):
            few = n <= b
            toks = np.minimum(n, b) - 1
            kb = np.where(few, dense.prefix(toks), dense.isolated(toks))
            if m is Method.SPARQ:
                r = min(self.spec.channels, lay.head_dim)
                kt = (n - 1) * lay.elem_bytes
                meta = np.full_like(z, row)
                return ReadBytes(toks * row + r * kt, toks * row, meta,
                                 kb + r * _contig(kt, lay.burst_bytes), kb,
                                 _contig(meta, lay.burst_bytes), toks)
            lab = (n - 1) * self._label_row_bytes()
            return ReadBytes(toks * row, toks * row, lab, kb, kb,
                             _contig(lab, lay.burst_bytes), toks)
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
        return ReadBytes(k_ideal, v_ideal, meta, k_burst, v_burst, _contig(meta, burst), toks)

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
