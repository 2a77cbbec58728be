"""Golden baselines: full KV, H2O (summed or averaged score), SnapKV, Quest, SparQ, Double
Sparsity, StreamingLLM and TOVA (the adaptive-budget relatives of SnapKV, AdaKV, G-AdaKV and
PyramidKV, are in :mod:`hikv.model.methods.baselines_adaptive`).

Software methods: they select on exact float scores (:func:`~hikv.model.methods.cache.float_topk`).
Conventions in :mod:`hikv.model.methods.registry`; their closed forms in
:mod:`hikv.sim.cost.closed_form_baselines`.
"""

from __future__ import annotations

import torch

from hikv.model.methods.attention import attend, ungroup
from hikv.model.methods.cache import (
    Evicting,
    KVCache,
    float_topk,
    lowbit_keys,
    quest_scores,
    snap_scores,
    stable_topk,
)
from hikv.model.refs.account import (
    bounds_row_bytes,
    h2o_meta_bytes,
    label_row_bytes,
)
from hikv.model.refs.layout import (
    ByteAccount,
    Read,
    contiguous,
)
from hikv.params import (
    Method,
)

__all__ = ["FullKV", "H2O", "SnapKV", "Quest", "SparQ", "DoubleSparsity", "StreamingLLM",
           "TOVA"]


class FullKV(KVCache):
    """Every token resident, every token read."""

    method = Method.FULL

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None and self.v is not None
        out, _ = attend(qg, self.k, self.v, self.scale)
        n = self.resident_tokens
        reads = self._dense_reads(torch.arange(n - 1))
        res = n * 2 * self._row_stride()
        return out, self._accounts([reads] * self.kv_heads, res, [n - 1] * self.kv_heads)



class H2O(Evicting):
    """Heavy hitters (accumulated attention) + a recent window; evicts one token per step.

    The accumulated score of every resident token is stored (``SCORE_BYTES`` each, as HiKV's
    evicting Stage I stores it) and read every step: it is metadata of the step.

    ``spec.averaged`` (label ``h2o@B/avg``): kvpress's ``ObservedAttentionPress`` rule, a
    token's score is its accumulated attention divided by the number of queries that could see
    it (causal: the tokens from it to the newest), and no recent window (``spec.recent = 0``).
    The count is stored beside the score (:func:`~hikv.model.refs.account.h2o_meta_bytes`). kvpress
    applies the rule once, to the prompt; here it also evicts one token per decode step, as
    H2O does. Group heads are summed (kvpress averages them: the same order)."""

    method = Method.H2O
    _wants_col_sums = True

    def _after_prefill(self, q, k, sums, obs) -> None:
        assert sums is not None
        n = self.resident_tokens
        self.acc = sums
        # queries that saw key i during the prompt: i, i+1, ..., n-1
        self.cnt = torch.arange(n, 0, -1, dtype=torch.float32).expand(self.kv_heads, n).clone()
        self._evict_to(self.spec.budget)

    def _keep_state(self, idx: torch.Tensor) -> None:
        self.acc = torch.gather(self.acc, 1, idx)
        self.cnt = torch.gather(self.cnt, 1, idx)

    def scores(self) -> torch.Tensor:
        """The eviction score of every resident token, [Hkv, n]."""
        return self.acc / self.cnt if self.spec.averaged else self.acc

    def _evict_to(self, budget: int) -> None:
        n = self.resident_tokens
        if n <= budget:
            return
        r = min(self.spec.recent, budget)
        heavy = budget - r
        old = n - r
        top = float_topk(self.scores()[:, :old], heavy)
        recent = torch.arange(old, n).expand(self.kv_heads, r)
        self._keep(torch.cat([top, recent], dim=1))

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None and self.v is not None
        self.acc = torch.cat([self.acc, torch.zeros(self.kv_heads, 1)], dim=1)
        self.cnt = torch.cat([self.cnt, torch.zeros(self.kv_heads, 1)], dim=1) + 1
        out, probs = attend(qg, self.k, self.v, self.scale)
        self.acc += probs.float().sum(1)
        n = self.resident_tokens
        meta = h2o_meta_bytes(self.spec.averaged)
        reads = self._dense_reads(torch.arange(n - 1))
        reads.append(Read("meta", "scores", contiguous(0, (n - 1) * meta)))
        self._evict_to(self.spec.budget)
        res = self.resident_tokens * (2 * self._row_stride() + meta)
        return out, self._accounts([reads] * self.kv_heads, res, [n - 1] * self.kv_heads)



class SnapKV(Evicting):
    """Chosen once after prefill: the observation window's pooled attention picks the prefix
    tokens; the window itself is kept. ``spec.recent`` is the window (SnapKV's 32). No eviction
    during decode."""

    method = Method.SNAPKV
    pool_kernel = 7

    @property
    def _obs_window(self) -> int:  # type: ignore[override]
        return self.spec.recent

    def _after_prefill(self, q, k, sums, obs) -> None:
        assert obs is not None
        n = self.resident_tokens
        if n <= self.spec.budget:
            return
        w = min(self.spec.recent, n)
        scores = snap_scores(obs, n - w, self.pool_kernel)
        top = float_topk(scores, self.spec.budget - w)
        self._keep(torch.cat([top, torch.arange(n - w, n).expand(self.kv_heads, w)], dim=1))

    # decode attends and reads every resident token, exactly as full KV does
    _decode = FullKV._decode



class Quest(KVCache):
    """Query-aware page selection: 16-token pages scored by per-page key min/max; the page of
    the current token is always selected; ``budget / page_tokens`` pages in all."""

    method = Method.QUEST

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None
        pt = self.spec.page_tokens
        n = self.resident_tokens
        pages = -(-n // pt)
        n_sel = max(1, self.spec.budget // pt)
        kmin, kmax = self._page_bounds(pt)
        scores = quest_scores(qg, kmin, kmax)
        scores[:, -1] = float("inf")                        # the current page
        sel_pages = float_topk(scores, n_sel)              # [Hkv, p]
        tok = (sel_pages.unsqueeze(-1) * pt + torch.arange(pt)).reshape(self.kv_heads, -1)
        valid = tok < n
        out_parts, reads, counts = [], [], []
        meta_stride = bounds_row_bytes(self.layout)
        for h in range(self.kv_heads):
            sel = tok[h][valid[h]]
            o, _ = attend(qg[h: h + 1], self.k[h: h + 1, sel], self.v[h: h + 1, sel], self.scale)
            out_parts.append(o)
            cached = sel[sel != n - 1]
            r = self._dense_reads(cached)
            r.append(Read("meta", "quest_pages", contiguous(0, (pages - 1) * meta_stride)))
            reads.append(r)
            counts.append(int(cached.numel()))
        res = n * 2 * self._row_stride() + pages * meta_stride
        return torch.cat(out_parts), self._accounts(reads, res, counts)


def _sparq_channels(qg: torch.Tensor, r: int) -> torch.Tensor:
    """Top-r channels of |q| summed over the group, [Hkv, r] ascending."""
    return float_topk(qg.abs().sum(1), r)


class SparQ(KVCache):
    """SparQ: top-r channels of |q| approximate the scores (from a channel-major second copy of
    K), the top-k tokens are attended exactly, and the attention mass left out is given to the
    mean of V: ``out = alpha * attn_topk + (1 - alpha) * mean(V)``."""

    method = Method.SPARQ

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None and self.v is not None
        n = self.resident_tokens
        r = min(self.spec.channels, self.d)
        ch = _sparq_channels(qg, r)                                   # [Hkv, r]
        q_r = torch.gather(qg, 2, ch.unsqueeze(1).expand(-1, self.group, -1))
        k_r = torch.gather(self.k, 2, ch.unsqueeze(1).expand(-1, n, -1))
        l1 = qg.abs().sum(-1, keepdim=True)
        l1_r = q_r.abs().sum(-1, keepdim=True)
        temp = torch.sqrt(self.d * l1_r / l1.clamp_min(1e-30))        # SparQ's rescale
        s_hat = torch.softmax((q_r @ k_r.transpose(-1, -2) / temp.clamp_min(1e-30)).float(), -1)
        token_score = s_hat.sum(1)                                    # [Hkv, n]
        token_score[:, -1] = float("inf")                             # current token
        sel = float_topk(token_score, self.spec.budget)
        alpha = torch.gather(s_hat, 2, sel.unsqueeze(1).expand(-1, self.group, -1)).sum(-1,
                                                                                   True)
        att, _ = self._attend_selected(qg, sel)
        mean_v = self.v.mean(1, keepdim=True)
        out = alpha.to(att.dtype) * att + (1 - alpha.to(att.dtype)) * mean_v
        reads, counts = [], []
        eb = self.layout.elem_bytes
        for h in range(self.kv_heads):
            cached = sel[h][sel[h] != n - 1]
            rd = self._dense_reads(cached)
            for c in ch[h].tolist():   # channel c of all cached tokens: its own array
                rd.append(Read("k", f"kT{c}", contiguous(0, (n - 1) * eb)))
            rd.append(Read("meta", "mean_v", contiguous(0, self.layout.row_bytes)))
            reads.append(rd)
            counts.append(int(cached.numel()))
        res = n * 2 * self._row_stride() + n * self.layout.row_bytes + self.layout.row_bytes
        return out, self._accounts(reads, res, counts)


class DoubleSparsity(KVCache):
    """Double Sparsity: offline-calibrated outlier channels per KV head; a label cache holds
    those channels of every key; labels approximate the scores, the top-k tokens are attended
    exactly. Calibrate with :meth:`calibrate` (e.g. on other text); otherwise channels are
    calibrated on the prompt at prefill (documented shortcut). Below 16 bits the key labels and
    the query's label channels are quantised per row, asymmetric min/max, as in its code."""

    method = Method.DOUBLE_SPARSITY

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.channels: torch.Tensor | None = None

    @staticmethod
    def calibration_channels(q: torch.Tensor, k: torch.Tensor, r: int) -> torch.Tensor:
        """Channels with the largest mean |q_c k_c| (q [Hq, T, d], k [Hkv, T, d]) -> [Hkv, r]."""
        hkv = k.shape[0]
        qg = q.reshape(hkv, -1, q.shape[1], q.shape[2]).abs().mean((1, 2))   # [Hkv, d]
        contrib = qg * k.abs().mean(1)
        return float_topk(contrib, r)

    def calibrate(self, q: torch.Tensor, k: torch.Tensor) -> None:
        self.channels = self.calibration_channels(q, k, min(self.spec.channels, self.d))

    def _after_prefill(self, q, k, sums, obs) -> None:
        if self.channels is None:
            self.calibrate(q, k)

    def _quantise(self, x: torch.Tensor) -> torch.Tensor:
        """Labels below 16 bits as Double Sparsity's code quantises them (``pseudo_quantize``):
        per row over its ``r`` channels, asymmetric min/max, ``2^bits`` levels (the low-bit
        keys' quantiser, :func:`~hikv.model.methods.cache.lowbit_keys`)."""
        bits = self.spec.label_bits
        return x if bits >= 16 else lowbit_keys(x, bits)

    def _label(self, k: torch.Tensor) -> torch.Tensor:
        assert self.channels is not None
        return self._quantise(torch.gather(k, 2, self.channels.unsqueeze(1).expand(
            -1, k.shape[1], -1)))

    def _labels(self) -> torch.Tensor:
        """:meth:`_label` of ``self.k``, kept per token (:meth:`_per_token`: a label is its
        token's channels, quantised per token, so only the tokens added since the last call are
        labelled; prefill, a new capacity buffer or other channels relabel the whole cache)."""
        assert self.channels is not None
        return self._per_token("_labelled", self.channels, self._label)

    def _label_row_bytes(self) -> int:
        return label_row_bytes(min(self.spec.channels, self.d), self.spec.label_bits)

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None
        if self.channels is None:
            self.calibrate(ungroup(qg, self.q_heads), self.k)
        assert self.channels is not None
        n = self.resident_tokens
        lab = self._labels()
        # the query's label channels are quantised too, as in Double Sparsity's code
        q_r = self._quantise(torch.gather(qg, 2, self.channels.unsqueeze(1).expand(
            -1, self.group, -1)))
        s_hat = torch.softmax((q_r @ lab.transpose(-1, -2) * self.scale).float(), -1)
        token_score = s_hat.sum(1)
        token_score[:, -1] = float("inf")
        sel = float_topk(token_score, self.spec.budget)
        out, _ = self._attend_selected(qg, sel)
        reads, counts = [], []
        lrb = self._label_row_bytes()
        for h in range(self.kv_heads):
            cached = sel[h][sel[h] != n - 1]
            rd = self._dense_reads(cached)
            rd.append(Read("meta", "labels", contiguous(0, (n - 1) * lrb)))
            reads.append(rd)
            counts.append(int(cached.numel()))
        res = n * 2 * self._row_stride() + n * lrb
        return out, self._accounts(reads, res, counts)




class StreamingLLM(Evicting):
    """StreamingLLM (Xiao et al., 2024): the first ``spec.sinks`` tokens (attention sinks) and
    the most recent ``budget - sinks`` tokens; the prompt is cut to that after prefill and one
    token is evicted per decode step. No scores: every resident token is read, nothing else."""

    method = Method.STREAMING_LLM

    def _after_prefill(self, q, k, sums, obs) -> None:
        self._evict_to(self.spec.budget)

    def kept_positions(self, seen: int) -> torch.Tensor:
        """Token positions resident after ``seen`` tokens: sinks, then the recent window."""
        b, s = self.spec.budget, min(self.spec.sinks, self.spec.budget)
        if seen <= b:
            return torch.arange(seen)
        return torch.cat([torch.arange(s), torch.arange(seen - (b - s), seen)])

    def _evict_to(self, budget: int) -> None:
        n = self.resident_tokens
        if n <= budget:
            return
        s = min(self.spec.sinks, budget)
        idx = torch.cat([torch.arange(s), torch.arange(n - (budget - s), n)])
        self._keep(idx.expand(self.kv_heads, budget))

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None and self.v is not None
        out, _ = attend(qg, self.k, self.v, self.scale)
        n = self.resident_tokens
        reads = self._dense_reads(torch.arange(n - 1))
        self._evict_to(self.spec.budget)
        res = self.resident_tokens * 2 * self._row_stride()
        return out, self._accounts([reads] * self.kv_heads, res, [n - 1] * self.kv_heads)


class TOVA(Evicting):
    """TOVA (Oren et al., 2024): attend every resident token, then, over budget, evict the
    token with the lowest attention of the current query, averaged over all query heads of the
    layer (the paper's layer-wise rule, also kvpress's ``TOVAPress``): every KV head drops the
    same token. After prefill the prompt is cut to the ``budget`` tokens the last prompt query
    attends most. Ties are kept by the lower position. The current token may be evicted (as in
    the paper; kvpress always keeps the prompt's last token). No stored scores."""

    method = Method.TOVA
    _obs_window = 1          # the last prompt query's attention

    def _after_prefill(self, q, k, sums, obs) -> None:
        assert obs is not None
        if self.resident_tokens > self.spec.budget:
            self._keep_top(obs.sum(0))

    def _keep_top(self, score: torch.Tensor) -> None:
        """Keep the ``budget`` highest layer-wide scores ``[n]`` in every KV head."""
        self.last_score = score
        self._keep(stable_topk(score, self.spec.budget).expand(self.kv_heads, -1))

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None and self.v is not None
        out, probs = attend(qg, self.k, self.v, self.scale)
        n = self.resident_tokens
        reads = self._dense_reads(torch.arange(n - 1))
        if n > self.spec.budget:
            self._keep_top(probs.float().mean((0, 1)))
        res = self.resident_tokens * 2 * self._row_stride()
        return out, self._accounts([reads] * self.kv_heads, res, [n - 1] * self.kv_heads)
