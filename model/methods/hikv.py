"""Golden HiKV: Stage I (none, evicting, query-aware) and Stage II, selecting through the
sorter reference exactly as the hardware does. Conventions in :mod:`hikv.model.methods.registry`;
the closed form in :mod:`hikv.sim.cost.closed_form_hikv`.
"""

from __future__ import annotations

import torch

from hikv.method_spec import Stage1Scorer, Stage1Variant, Stage2Kind, Stage2Rule
from hikv.model.methods.attention import attend, group_queries
from hikv.model.methods.cache import (
    Evicting,
    lowbit_keys,
    quest_scores,
    snap_scores,
    static_mask,
)
from hikv.model.refs.account import (
    SCORE_BYTES,
    bounds_row_bytes,
    lowbit_row_bytes,
    stage1_meta_bytes,
    stage2_meta_bytes,
)
from hikv.model.refs.keys import float_to_key
from hikv.model.refs.layout import (
    ByteAccount,
    Ranges,
    Read,
    contiguous,
    dense_rows,
    masked_records,
    page_channel_runs,
)
from hikv.model.refs.sorter import topk_indices
from hikv.params import HiKVPolicy, KVLayout, Method, MethodSpec

__all__ = ["HiKV", "hikv_resident_bytes", "think_channel_scores", "lowbit_keys"]


def think_channel_scores(q_obs: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """ThinK's key-channel importance per KV head: ``[Hkv, d]``.

    ThinK (Xu et al. 2024) scores channel ``c`` of a head by ``||Q_obs[:, c]|| * ||K[:, c]||``,
    ``Q_obs`` the observation window's queries, ``K`` the cached keys. With GQA, ``q_obs``
    ``[Hkv, M, d]`` stacks the window queries of the KV head's query heads (as kvpress averages
    their squares over the group). Returned as the root mean squares, ``||Q_obs[:, c]|| /
    sqrt(M) * ||K[:, c]|| / sqrt(n)``: the same order within a head, and in fp16 range for the
    sorter keys where the plain product of norms of long prompts would overflow.
    """
    qs = q_obs.float().pow(2).mean(1).sqrt()
    ks = k.float().pow(2).mean(1).sqrt() if k.shape[1] else torch.zeros_like(qs)
    return qs * ks


class HiKV(Evicting):
    """HiKV: Stage I token selection (evicting or query-aware) and Stage II element selection.

    Stage I, evicting: after prefill the cache is seeded SnapKV-style (observation window
    ``obs_window``, max-pool ``pool_kernel``) to sinks ``S`` + recent ``R`` + the ``B-S-R``
    most important other tokens; during decode importance accumulates H2O-style (attention
    probabilities summed over the group) and every ``Δ`` steps, once the cache holds ``B + Δ``
    tokens, it is compacted back to ``B`` (one sorter job: top ``B-S-R`` of ``B+Δ-S-R``).

    Stage I, query-aware: nothing is evicted. Each step, sinks and the recent window are kept
    and the other ``B-S-R`` are chosen by an approximate score from stored metadata: per-page
    key bounds (Quest-style, whole pages) or keys quantised to ``lowbit_bits``, of every
    channel or of ``lowbit_channels`` per KV head chosen once at the end of prefill (the
    largest mean ``|q_c| |k_c|`` over the prompt, Double Sparsity's calibration; the query's
    same channels score them).

    Stage II: K and V rules (:class:`~hikv.params.Stage2Rule`). ``static``: top-``r`` of |x| per
    vector at write time, stored as masked records. ``query_channels``: per step and KV head the
    top-``r`` channels of |q| (summed over the group) form the logits, with SparQ's temperature
    rescale; K is stored in channel-major pages. ``channel_groups``: the same with groups of
    ``group`` contiguous channels. ``think`` (K only): ThinK's criterion
    (:func:`think_channel_scores`) on the observation window's queries and the keys retained
    after Stage I chooses ``r`` channels per KV head once, at the end of prefill (one sorter
    job of ``d``); they stay fixed, so every key, prompt or decoded, is stored as its ``r``
    channels (rows of ``r`` elements, no per-token mask; the head's ``d``-bit channel mask is
    metadata read once per step), and ``q . k`` uses those channels only (no rescale).
    """

    method = Method.HIKV

    def __init__(self, spec: MethodSpec, layout: KVLayout, **kwargs) -> None:
        super().__init__(spec, layout, **kwargs)
        assert spec.hikv is not None
        self.policy: HiKVPolicy = spec.hikv
        self.policy.check_head_dim(layout.head_dim)
        self.imp: torch.Tensor | None = None   # [Hkv, n] importance (evicting)
        self.think_mask: torch.Tensor | None = None   # [Hkv, d] ThinK's kept K channels
        self.scored: torch.Tensor | None = None   # [Hkv, c] the low-bit keys' channels

    # ----------------------------------------------------------------- keys
    def _keys(self, x: torch.Tensor, signed: bool = False) -> torch.Tensor:
        return float_to_key(x, self.key_format, self.key_width, signed=signed)

    def _topk(self, scores: torch.Tensor, k: int, signed: bool = False) -> torch.Tensor:
        return topk_indices(self._keys(scores, signed), k)

    # ----------------------------------------------------------------- Stage II at write
    def _static(self, x: torch.Tensor, rule: Stage2Rule) -> torch.Tensor:
        if rule.kind is not Stage2Kind.STATIC:
            return x
        return x * static_mask(x, rule.keep, self.key_format, self.key_width)

    def _store(self, k: torch.Tensor) -> torch.Tensor:
        if self.policy.k_rule.kind is Stage2Kind.THINK:
            return k if self.think_mask is None else k * self.think_mask.unsqueeze(1)
        return self._static(k, self.policy.k_rule)

    def _think(self, q_obs: torch.Tensor) -> None:
        """ThinK: choose the K channels from the grouped window queries ``q_obs`` [Hkv, M, d]
        and the resident keys (one sorter job per head), and prune the resident keys."""
        assert self.k is not None
        idx = self._topk(think_channel_scores(q_obs, self.k), self.policy.k_rule.keep)
        self.think_mask = torch.zeros(self.kv_heads, self.d, dtype=torch.bool).scatter(
            1, idx, True)
        self.k = self.k * self.think_mask.unsqueeze(1)

    def _store_v(self, v: torch.Tensor) -> torch.Tensor:
        return self._static(v, self.policy.v_rule)

    # ----------------------------------------------------------------- Stage I, evicting
    _wants_col_sums = False

    @property
    def _obs_window(self) -> int:  # type: ignore[override]
        return self.policy.obs_window if self.policy.stage1 is Stage1Variant.EVICT else 0

    def _choose_scored(self, qg: torch.Tensor, k: torch.Tensor) -> None:
        """The low-bit keys' channels (``lowbit_channels`` of ``d`` per KV head), chosen once as
        Double Sparsity calibrates its label channels: the largest mean ``|q_c| |k_c|`` over
        the grouped queries ``qg`` [Hkv, M, d] and the keys ``k`` [Hkv, n, d] (one sorter job
        of ``d`` per head)."""
        c = self.policy.lowbit_channels
        contrib = qg.float().abs().mean(1) * k.float().abs().mean(1)
        self.scored = self._topk(contrib, c)

    def _scored_part(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [Hkv, m, d] on the low-bit keys' channels (all when none were chosen)."""
        if self.scored is None:
            return x
        return torch.gather(x, 2, self.scored.unsqueeze(1).expand(-1, x.shape[1], -1))

    def _after_prefill(self, q, k, sums, obs) -> None:
        p = self.policy
        if (p.stage1 is Stage1Variant.QUERY_AWARE and p.scorer is Stage1Scorer.LOWBIT_KEYS
                and p.lowbit_channels and q.shape[1]):
            self._choose_scored(group_queries(q, self.kv_heads), k)
        if p.stage1 is Stage1Variant.EVICT:
            assert obs is not None
            n = self.resident_tokens
            self.imp = snap_scores(obs, n, p.pool_kernel).float()
            self._compact(p.budget)
        if p.k_rule.kind is Stage2Kind.THINK and q.shape[1]:
            # after Stage I, as kvpress composes SnapKV then ThinK: the retained keys
            self._think(group_queries(q[:, -p.obs_window:], self.kv_heads))

    def _keep_state(self, idx: torch.Tensor) -> None:
        if self.imp is not None:
            self.imp = torch.gather(self.imp, 1, idx)

    def _compact(self, budget: int) -> None:
        """Keep sinks, the recent window and the top ``B-S-R`` by importance (one sorter job)."""
        n = self.resident_tokens
        if n <= budget:
            return
        p = self.policy
        s, r = p.sinks, p.recent
        assert self.imp is not None
        cand = self.imp[:, s: n - r]
        top = self._topk(cand, p.important_tokens(budget)) + s
        keep = torch.cat([torch.arange(s).expand(self.kv_heads, s), top,
                          torch.arange(n - r, n).expand(self.kv_heads, r)], dim=1)
        self._keep(keep)

    # ----------------------------------------------------------------- Stage I, query-aware
    def _forced(self, n: int) -> torch.Tensor:
        """Sinks and recent window (current token included), as a bool [n]."""
        p = self.policy
        f = torch.zeros(n, dtype=torch.bool)
        f[: p.sinks] = True
        f[max(0, n - max(p.recent, 1)):] = True
        return f

    def _lowbit_keys(self, bits: int) -> torch.Tensor:
        """:func:`lowbit_keys` of ``self.k``, kept per token (:meth:`_per_token`: the
        quantisation is per token, so only the tokens added since the last call are quantised;
        prefill, ThinK's pruning or a new capacity buffer quantises it whole)."""
        return self._per_token("_lbkeys", bits,
                               lambda k: lowbit_keys(self._scored_part(k), bits))

    def _select_query_aware(self, qg: torch.Tensor) -> torch.Tensor:
        """Selected entries as a bool mask [Hkv, n]: forced tokens plus the chosen ones."""
        assert self.k is not None
        p = self.policy
        n = self.resident_tokens
        if n <= p.budget:
            return torch.ones(self.kv_heads, n, dtype=torch.bool)
        forced = self._forced(n)
        n_imp = p.important
        sel = forced.expand(self.kv_heads, n).clone()
        if p.scorer is Stage1Scorer.PAGE_BOUNDS:
            # whole pages: a chosen page adds its tokens that are not forced already
            pt = self.layout.page_tokens
            kmin, kmax = self._page_bounds(pt)
            scores = quest_scores(qg, kmin, kmax)                       # [Hkv, pages]
            page_of = torch.arange(n) // pt
            cand_pages = torch.unique(page_of[~forced])
            top = self._topk(scores[:, cand_pages], n_imp // pt, signed=True)
            chosen = cand_pages[top]                                     # [Hkv, n_pages]
            sel |= (page_of[None, :, None] == chosen[:, None, :]).any(-1)
        else:
            if p.lowbit_channels and self.scored is None:
                self._choose_scored(qg, self.k)     # no prompt: the first query calibrates
            kq = self._lowbit_keys(p.lowbit_bits)
            q_s = self._scored_part(qg)
            s_hat = torch.softmax((q_s @ kq.transpose(-1, -2) * self.scale).float(), -1).sum(1)
            cand = torch.nonzero(~forced).squeeze(1)
            top = self._topk(s_hat[:, cand], n_imp)
            sel.scatter_(1, cand[top], True)
        return sel

    # ----------------------------------------------------------------- Stage II per step
    def _k_channels(self, qg: torch.Tensor) -> torch.Tensor | None:
        """Query-aware K channels [Hkv, r] ascending, or None for whole / static K."""
        rule = self.policy.k_rule
        if rule.kind is Stage2Kind.QUERY_CHANNELS:
            return topk_indices(self._keys(qg.abs().sum(1)), rule.keep)
        if rule.kind is Stage2Kind.CHANNEL_GROUPS:
            g = rule.group
            gs = qg.abs().sum(1).reshape(self.kv_heads, self.d // g, g).sum(-1)
            groups = topk_indices(self._keys(gs), rule.keep // g)
            return (groups.unsqueeze(-1) * g + torch.arange(g)).reshape(self.kv_heads, -1)
        return None

    # ----------------------------------------------------------------- decode
    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None and self.v is not None
        p = self.policy
        n = self.resident_tokens
        if p.k_rule.kind is Stage2Kind.THINK and self.think_mask is None:
            self._think(qg)     # no prompt: the first decoded token is the observation window
        if p.stage1 is Stage1Variant.QUERY_AWARE:
            sel = self._select_query_aware(qg)
        else:
            sel = torch.ones(self.kv_heads, n, dtype=torch.bool)
        valid = sel.unsqueeze(1)                                    # [Hkv, 1, n]
        ch = self._k_channels(qg)
        if ch is None:
            out, probs = attend(qg, self.k, self.v, self.scale, valid)
        else:
            idx = ch.unsqueeze(1)
            q_r = torch.gather(qg, 2, idx.expand(-1, self.group, -1))
            k_r = torch.gather(self.k, 2, idx.expand(-1, n, -1))
            l1 = qg.abs().sum(-1, keepdim=True)
            temp = torch.sqrt(self.d * q_r.abs().sum(-1, keepdim=True) / l1.clamp_min(1e-30))
            out, probs = attend(q_r, k_r, self.v, 1.0 / temp.clamp_min(1e-30), valid)
        entries = [torch.nonzero(sel[h]).squeeze(1) for h in range(self.kv_heads)]
        reads = [self._reads(e, None if ch is None else ch[h], n) for h, e in enumerate(entries)]
        counts = [int((e != n - 1).sum()) for e in entries]
        if p.stage1 is Stage1Variant.EVICT:
            assert self.imp is not None
            self.imp = torch.cat([self.imp, torch.zeros(self.kv_heads, 1)], dim=1)
            self.imp += probs.float().sum(1)
            if n >= p.budget + p.compact_interval:
                self._compact(p.budget)
        resident = hikv_resident_bytes(p, self.layout, self.resident_tokens)
        return out, self._accounts(reads, resident, counts)

    # ----------------------------------------------------------------- bytes
    def _reads(self, sel: torch.Tensor, ch: torch.Tensor | None, n: int) -> list[Read]:
        lay = self.layout
        p = self.policy
        cached = sel[sel != n - 1]
        reads: list[Read] = []
        kr = p.k_rule
        if kr.kind is Stage2Kind.NONE:
            reads.append(Read("k", "k", dense_rows(cached, lay)))
        elif kr.kind is Stage2Kind.STATIC:
            reads.append(Read("k", "k", masked_records(cached, lay, kr.keep)))
        elif kr.kind is Stage2Kind.THINK:
            reads.append(Read("k", "k", dense_rows(cached, lay, kr.keep * lay.elem_bytes)))
            reads.append(Read("meta", "think", contiguous(0, stage2_meta_bytes(p, lay.head_dim))))
        else:
            assert ch is not None
            reads.append(Read("k", "k", page_channel_runs(cached, ch, lay)))
        vr = p.v_rule
        if vr.kind is Stage2Kind.NONE:
            reads.append(Read("v", "v", dense_rows(cached, lay)))
        else:
            reads.append(Read("v", "v", masked_records(cached, lay, vr.keep)))
        reads.append(Read("meta", "stage1", self._meta_read(n)))
        return reads

    def _meta_row_bytes(self) -> int:
        """Stage I metadata per token (lowbit keys) or per page (bounds), or per entry score."""
        p, lay = self.policy, self.layout
        if p.stage1 is Stage1Variant.EVICT:
            return SCORE_BYTES
        if p.scorer is Stage1Scorer.PAGE_BOUNDS:
            return bounds_row_bytes(lay)
        return lowbit_row_bytes(p.scored_channels(lay.head_dim), p.lowbit_bits, lay.elem_bytes)

    def _meta_read(self, n: int) -> Ranges:
        p = self.policy
        if p.stage1 is Stage1Variant.NONE:
            return Ranges.empty()
        if p.stage1 is Stage1Variant.EVICT:
            return contiguous(0, (n - 1) * SCORE_BYTES)
        if n <= p.budget:
            return Ranges.empty()       # everything is selected: no scoring needed
        if p.scorer is Stage1Scorer.PAGE_BOUNDS:
            pages = -(-n // self.layout.page_tokens)
            return contiguous(0, pages * self._meta_row_bytes())
        return contiguous(0, (n - 1) * self._meta_row_bytes())


def hikv_resident_bytes(p: HiKVPolicy, lay: KVLayout, n: int) -> int:
    """Bytes HiKV keeps for ``n`` resident tokens of one (layer, KV head)."""

    def region(rule: Stage2Rule) -> int:
        if rule.kind is Stage2Kind.NONE:
            return n * lay.stride(lay.row_bytes)
        if rule.kind is Stage2Kind.STATIC:
            return n * lay.stride(lay.record_bytes(rule.keep))
        if rule.kind is Stage2Kind.THINK:
            return n * lay.stride(rule.keep * lay.elem_bytes)
        return -(-n // lay.page_tokens) * lay.head_dim * lay.channel_chunk_bytes

    return (region(p.k_rule) + region(p.v_rule) + stage1_meta_bytes(p, lay, n)
            + stage2_meta_bytes(p, lay.head_dim))


