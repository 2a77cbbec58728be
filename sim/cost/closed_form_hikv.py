"""Closed form of HiKV (golden class :class:`hikv.model.methods.registry.HiKV`): Stage I (none,
evicting, query-aware by page bounds or low-bit keys) and Stage II (whole vectors, static masked
records, query-aware K channels in channel-major pages, ThinK's fixed K channels as rows of
``r`` elements plus one channel mask per head).

Exactness of the operating point (:meth:`HiKVBytes.step`): exact with no Stage I; evicting:
the average over one compaction cycle of ``Δ`` steps (the phase of the cycle is the
expectation's random variable); query-aware with low-bit keys reads scattered rows (exact when
``align_bytes >= burst_bytes``, else the expectation over a uniformly random choice); with page
bounds it chooses whole pages and assumes they hold no sink or recent token (the *nominal*
count, an upper bound: the golden model can read up to ``page_tokens`` fewer tokens per such
overlap); query-aware K channels: the expectation over uniformly random channel sets, touched
pages counted as wholly selected. The sequence state (:meth:`HiKVBytes.decode_read`) counts
whole pages and whole page chunks where the golden count depends on the data (upper bounds).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from hikv.method_spec import Method
from hikv.model.refs.account import (
    SCORE_BYTES,
    bounds_row_bytes,
    lowbit_row_bytes,
    stage1_meta_bytes,
    stage2_meta_bytes,
)
from hikv.params import HiKVPolicy, Stage1Scorer, Stage1Variant, Stage2Kind, Stage2Rule
from hikv.sim.cost.bursts import (
    Geometry,
    Piece,
    Rows,
    cdiv,
    channel_blocks_per_page,
    contig_burst,
    contiguous,
    run,
    scattered,
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

__all__ = ["HiKVBytes"]

ArrayLike = Any
_QUERY_CHANNELS = (Stage2Kind.QUERY_CHANNELS, Stage2Kind.CHANNEL_GROUPS)


class HiKVBytes(ClosedForm):
    """HiKV's two stages in closed form (see the module docstring)."""

    method = Method.HIKV

    @property
    def policy(self) -> HiKVPolicy:
        assert self.spec.hikv is not None
        return self.spec.hikv

    @property
    def evicts(self) -> bool:  # type: ignore[override]
        return self.policy.stage1 is Stage1Variant.EVICT

    @property
    def canonical_prompt(self) -> bool:
        return self.evicts

    # ----------------------------------------------------------------- storage
    def storage(self, g: Geometry, r: ArrayLike, keep_k: ArrayLike | None = None,
                keep_v: ArrayLike | None = None) -> ArrayLike:
        p = self.policy

        def region(rule: Stage2Rule, keep: ArrayLike | None) -> ArrayLike:
            if rule.kind is Stage2Kind.NONE:
                return r * g.stride(g.row_bytes)
            if rule.kind is Stage2Kind.STATIC:
                return r * g.stride(g.record_bytes(rule.keep if keep is None else keep))
            if rule.kind is Stage2Kind.THINK:
                return r * g.stride((rule.keep if keep is None else keep) * g.elem_bytes)
            return cdiv(r, g.page_tokens) * g.head_dim * g.page_tokens * g.elem_bytes

        return (region(p.k_rule, keep_k) + region(p.v_rule, keep_v) + stage1_meta_bytes(p, g, r)
                + stage2_meta_bytes(p, g.head_dim))

    # ----------------------------------------------------------------- residency
    def resident_after_step(self, prompt: ArrayLike, step: ArrayLike) -> np.ndarray:
        prompt = np.asarray(prompt, dtype=np.int64)
        step = np.asarray(step, dtype=np.int64)
        if not self.evicts:
            return prompt + step
        b = self.spec.budget
        x = np.minimum(prompt, b) + step
        d = self.policy.compact_interval
        return np.where(x < b + d, x, b + (x - b) % d)

    @property
    def exact(self) -> bool:
        p = self.policy
        if p.stage1 is Stage1Variant.QUERY_AWARE and p.scorer is Stage1Scorer.PAGE_BOUNDS:
            return False
        if p.k_rule.kind in _QUERY_CHANNELS:
            return False
        return (p.stage1 is not Stage1Variant.QUERY_AWARE
                or self.layout.align_bytes >= self.layout.burst_bytes)

    # ----------------------------------------------------------------- operating point
    def step(self, g: Geometry, n: ArrayLike, B: ArrayLike, zero: ArrayLike, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None,
             prompt: ArrayLike | None = None) -> StepAccount:
        sa = self._step(g, n, B, zero, keep_k=keep_k, keep_v=keep_v)
        mask = stage2_meta_bytes(self.policy, g.head_dim)
        if not np.any(mask):
            return sa
        # ThinK's channel mask: its own region, read whole every step
        m = contiguous(g, mask)
        return dataclasses.replace(sa, meta_ideal=sa.meta_ideal + mask,
                                   meta_burst=sa.meta_burst + m.burst,
                                   requests=sa.requests + m.requests)

    def _step(self, g: Geometry, n: ArrayLike, B: ArrayLike, zero: ArrayLike, *,
              keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None
              ) -> StepAccount:
        p = self.policy
        kr, vr = p.k_rule, p.v_rule
        kk = g.head_dim if kr.kind is Stage2Kind.NONE else np.asarray(
            kr.keep if keep_k is None else keep_k)
        kv_ = g.head_dim if vr.kind is Stage2Kind.NONE else np.asarray(
            vr.keep if keep_v is None else keep_v)
        S, R, delta, pt = p.sinks, p.recent, p.compact_interval, g.page_tokens
        eb = g.elem_bytes
        qc = kr.kind in _QUERY_CHANNELS
        rec_k = (g.record_bytes(kk) if kr.kind is Stage2Kind.STATIC
                 else kk * eb if kr.kind is Stage2Kind.THINK else g.row_bytes)
        rec_v = g.record_bytes(kv_) if vr.kind is Stage2Kind.STATIC else g.row_bytes
        ideal_k_tok = kk * eb if qc else rec_k
        ideal_v_tok = rec_v
        n_res = n + 1

        def kv_pieces(pieces: list[tuple[str, ArrayLike, ArrayLike]], pages: ArrayLike
                      ) -> tuple[Piece, Piece]:
            """pieces: ("run", s0, count) / ("scat", count, pool); ``pages``: K pages."""
            k, v = zero_piece(), zero_piece()
            for kind, a, b in pieces:
                if kind == "run":
                    v = v + run(g, a, b, rec_v)
                    if not qc:
                        k = k + run(g, a, b, rec_k)
                else:
                    v = v + scattered(g, a, rec_v, b)
                    if not qc:
                        k = k + scattered(g, a, rec_k, b)
            if qc:
                blocks, runs = channel_blocks_per_page(g, kr.kind, kk, kr.group)
                k = Piece(pages * blocks * g.burst_bytes * 1.0, pages * runs * 1.0)
            return k, v

        if p.stage1 is Stage1Variant.NONE:
            k, v = kv_pieces([("run", 0, n)], cdiv(n, pt))
            res = self.storage(g, n_res, kk, kv_)
            return account_of(n * ideal_k_tok, n * ideal_v_tok, 0, k, v, zero_piece(), res, n,
                              zero)

        if p.stage1 is Stage1Variant.EVICT:
            # after prefill the cache holds min(n, B); over a compaction cycle step j (1..Δ)
            # reads B + j - 1 tokens (contiguous slots) and that many scores; averaged
            j = np.arange(delta).reshape((delta,) + (1,) * np.ndim(zero))
            evicting = n > B
            c = np.where(evicting, B + j, n)                 # cached tokens read at each step
            k, v = kv_pieces([("run", 0, c)], cdiv(c, pt))
            meta = contiguous(g, c * SCORE_BYTES)
            # resident after step j: c + 1 tokens, back to B after the compaction at step Δ
            after = np.where(evicting & (j == delta - 1), B, c + 1)
            res = self.storage(g, after, kk, kv_)
            avg = lambda x: np.mean(np.asarray(x, dtype=float) + np.zeros(c.shape),  # noqa
                                    axis=0)
            km, vm, mm = (Piece(avg(x.burst), avg(x.requests)) for x in (k, v, meta))
            return account_of(avg(c * ideal_k_tok), avg(c * ideal_v_tok), avg(c * SCORE_BYTES),
                              km, vm, mm, avg(res), avg(c), zero)

        # query-aware Stage I
        all_sel = n_res <= B
        rp = max(R, 1)                       # forced recent window, current token included
        forced = p.forced
        n_imp = p.important_tokens(B)
        recent_s0 = n_res - rp
        recent_c = rp - 1                    # cached recent tokens (the current one: not read)
        sink_pages = cdiv(S, pt)
        recent_pages = np.where(recent_c > 0, (n_res - 2) // pt - recent_s0 // pt + 1, 0)
        if p.scorer is Stage1Scorer.PAGE_BOUNDS:
            chosen = np.minimum(n_imp // pt, cdiv(n_res, pt))
            tokens = forced - 1 + chosen * pt
            pieces = [("run", 0, S), ("run", recent_s0, recent_c)]
            k, v = kv_pieces(pieces, sink_pages + recent_pages + chosen)
            v = v + run(g, 0, pt, rec_v).scale(chosen)
            if not qc:
                k = k + run(g, 0, pt, rec_k).scale(chosen)
            meta_len = cdiv(n_res, pt) * bounds_row_bytes(g)
        else:
            cand = np.maximum(n_res - forced, 1)
            tokens = forced - 1 + n_imp
            cand_pages = cdiv(cand, pt)
            touched = cand_pages * (1.0 - (1.0 - np.minimum(n_imp / cand, 1.0)) ** pt)
            pieces = [("run", 0, S), ("run", recent_s0, recent_c), ("scat", n_imp, cand)]
            k, v = kv_pieces(pieces, sink_pages + recent_pages + touched)
            meta_len = (n_res - 1) * lowbit_row_bytes(p.scored_channels(g.head_dim),
                                                      p.lowbit_bits, eb)
        meta = contiguous(g, meta_len)
        # everything fits the budget: all tokens read, no scoring
        k_all, v_all = kv_pieces([("run", 0, n)], cdiv(n, pt))
        sel = lambda a, b: np.where(all_sel, a, b)  # noqa: E731
        k = Piece(sel(k_all.burst, k.burst), sel(k_all.requests, k.requests))
        v = Piece(sel(v_all.burst, v.burst), sel(v_all.requests, v.requests))
        meta = Piece(sel(0.0, meta.burst), sel(0.0, meta.requests))
        tokens = sel(n, tokens)
        res = self.storage(g, n_res, kk, kv_)
        return account_of(tokens * ideal_k_tok, tokens * ideal_v_tok, sel(0, meta_len), k, v,
                          meta, res, tokens, zero)

    def work(self, g: Geometry, n: ArrayLike, B: ArrayLike, sb: StepAccount, group: int, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None) -> Work:
        p = self.policy
        kr, vr = p.k_rule, p.v_rule
        d = g.head_dim
        kk = np.asarray(kr.keep if keep_k is None else keep_k)
        kv_ = np.asarray(vr.keep if keep_v is None else keep_v)
        sorts: list[SortJob] = []
        qk = None
        if kr.kind in _QUERY_CHANNELS:
            gr = kr.group if kr.kind is Stage2Kind.CHANNEL_GROUPS else 1
            qk = kk
            sorts.append(SortJob("stage2", d=d // gr, k=kk // gr, count=1))
        if kr.kind is Stage2Kind.THINK:        # ThinK's fixed channels (chosen at prefill)
            qk = kk
        if kr.kind is Stage2Kind.STATIC:       # the new token's K at write time
            sorts.append(SortJob("stage2", d=d, k=kk, count=1))
        if vr.kind is Stage2Kind.STATIC:       # the new token's V at write time
            sorts.append(SortJob("stage2", d=d, k=kv_, count=1))
        over = n + 1 > B                       # more tokens than the budget: selection
        select_b = select_r = score_macs = score_exps = 0.0
        if p.stage1 is Stage1Variant.QUERY_AWARE:
            select_b = np.where(over, sb.meta_burst, 0.0)
            select_r = np.where(over, contiguous(g, sb.meta_ideal).requests, 0.0)
            n_imp = p.important_tokens(B)
            if p.scorer is Stage1Scorer.PAGE_BOUNDS:
                pages = cdiv(n + 1, g.page_tokens)
                score_macs = np.where(over, group * pages * 2 * d, 0.0)
                sorts.append(SortJob("stage1", n=pages, k=n_imp // g.page_tokens,
                                     per_step=np.where(over, 1, 0)))
            else:
                score_macs = np.where(over, group * n * p.scored_channels(d), 0.0)
                score_exps = np.where(over, group * (n + 1), 0.0)
                sorts.append(SortJob("stage1", n=n + 1 - p.forced, k=n_imp,
                                     per_step=np.where(over, 1, 0)))
        elif p.stage1 is Stage1Variant.EVICT:
            dl = p.compact_interval
            k1 = p.important_tokens(B)
            sorts.append(SortJob("stage1", n=k1 + dl, k=k1,
                                 per_step=np.where(n > B, 1.0 / dl, 0.0)))
        records = 0
        if vr.kind is Stage2Kind.STATIC:
            records = records + sb.tokens
        if kr.kind is Stage2Kind.STATIC:
            records = records + sb.tokens
        page_toks = sb.tokens if kr.kind in _QUERY_CHANNELS else 0
        return Work(select_bytes=select_b, select_requests=select_r, score_macs=score_macs,
                    score_exps=score_exps, qk_dims=qk, sorts=tuple(sorts),
                    masked_records=records, page_tokens=page_toks)

    # ----------------------------------------------------------------- sequence state
    def _read(self, n: np.ndarray, cached: np.ndarray, z: np.ndarray) -> StepAccount:
        p = self.policy
        lay = self.layout
        pt = lay.page_tokens
        burst = lay.burst_bytes
        # which cached tokens are read, and in what pattern
        if p.stage1 is Stage1Variant.QUERY_AWARE:
            few = n <= p.budget
            if p.scorer is Stage1Scorer.PAGE_BOUNDS:
                sel = p.forced + (p.important // pt) * pt      # whole pages: an upper bound
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
                       else rule.keep * lay.elem_bytes if rule.kind is Stage2Kind.THINK
                       else lay.record_bytes(rule.keep))
            rr = Rows(lay, payload)
            if pattern == "prefix":
                sel_b = rr.prefix(toks)
            elif pattern == "isolated":
                sel_b = rr.isolated(toks)
            else:
                # per page the selected tokens are one run of at most a page (a chosen page,
                # the sinks, the start of the recent window): at most ceil(toks/pt) + 2 runs
                n_runs = cdiv(toks, pt) + 2
                sel_b = np.minimum(n_runs * rr.runs(np.full_like(toks, pt), rr.stride),
                                   rr.isolated(toks))
            return toks * payload, np.where(few, rr.prefix(n - 1), sel_b)

        kr = p.k_rule
        if kr.kind in (Stage2Kind.NONE, Stage2Kind.STATIC, Stage2Kind.THINK):
            k_ideal, k_burst = rows(kr)
        else:
            all_pages = cdiv(np.maximum(n - 1, 0), pt)
            if pattern == "pages":
                pages = np.minimum(all_pages, cdiv(toks, pt) + 2)
            else:
                pages = np.minimum(all_pages, toks)
            pages = np.where(few, all_pages, pages)
            k_ideal = toks * kr.keep * lay.elem_bytes
            k_burst = pages * kr.keep * cdiv(lay.channel_chunk_bytes, burst) * burst
        v_ideal, v_burst = rows(p.v_rule)
        # Stage I metadata
        if p.stage1 is Stage1Variant.NONE:
            meta = z
        elif p.stage1 is Stage1Variant.EVICT:
            meta = cached * SCORE_BYTES
        elif p.scorer is Stage1Scorer.PAGE_BOUNDS:
            meta = np.where(few, 0, cdiv(n, pt) * bounds_row_bytes(lay))
        else:
            meta = np.where(few, 0, (n - 1) * lowbit_row_bytes(
                p.scored_channels(lay.head_dim), p.lowbit_bits, lay.elem_bytes))
        # ThinK's channel mask: its own region, read whole every step
        mask = stage2_meta_bytes(p, lay.head_dim)
        return read_account(k_ideal, v_ideal, meta + mask, k_burst, v_burst,
                            contig_burst(meta, burst) + contig_burst(mask, burst), toks)

    def _scoring_macs(self, n: np.ndarray, group: int) -> np.ndarray:
        p = self.policy
        if p.stage1 is not Stage1Variant.QUERY_AWARE:
            return np.zeros_like(n)
        few = n <= p.budget
        d = self.layout.head_dim
        if p.scorer is Stage1Scorer.PAGE_BOUNDS:
            return np.where(few, 0, group * 2 * d * cdiv(n, self.layout.page_tokens))
        return np.where(few, 0, group * p.scored_channels(d) * n)
