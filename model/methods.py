"""KV-cache methods: full KV, H2O, SnapKV, Quest, SparQ, Double Sparsity and HiKV.

One :class:`KVCache` per (layer, sequence). ``prefill(q, k, v)`` runs causal attention over the
prompt (every method attends the whole prompt during prefill) and sets the method's state;
``decode(q, k, v)`` appends the new token, attends with the method's policy and returns the
output with one :class:`~hikv.model.layout.ByteAccount` per KV head. Queries and keys arrive
with positional encoding applied (shapes ``[Hq, T, d]`` and ``[Hkv, T, d]``).

Conventions shared by all methods (see also :mod:`hikv.model.layout`):

* the current token is always attended; its K and V were just computed on chip, so they are not
  counted as read. Every other attended token is read from external memory;
* selection is per KV head and shared by its query heads (GQA): scores of the query heads of a
  group are summed (probabilities) or their bounds summed (Quest);
* evicting methods keep resident tokens in token order; a token's slot is its rank among them.

HiKV's selections go through the sorter reference (:func:`hikv.model.sorter_ref.topk_indices`
on keys from :func:`hikv.model.keys.float_to_key`), so the golden model chooses exactly what the
hardware chooses. Baselines are software methods and select on exact float scores.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
import torch.nn.functional as F

from hikv.params import (
    Config,
    HiKVPolicy,
    KeyFormat,
    KVLayout,
    Method,
    MethodSpec,
    ParamError,
    Stage1Scorer,
    Stage1Variant,
    Stage2Kind,
    Stage2Rule,
)

from .account import (
    SCORE_BYTES,
    bounds_row_bytes,
    label_row_bytes,
    lowbit_row_bytes,
    stage1_meta_bytes,
)
from .attention import attend, causal_prefill, default_scale, group_queries, ungroup
from .keys import float_to_key
from .layout import (
    ByteAccount,
    Ranges,
    Read,
    account,
    contiguous,
    dense_rows,
    masked_records,
    page_channel_runs,
)
from .sorter_ref import topk_indices

__all__ = [
    "KVCache",
    "FullKV",
    "H2O",
    "SnapKV",
    "Quest",
    "SparQ",
    "DoubleSparsity",
    "HiKV",
    "make_cache",
    "METHODS",
    "static_mask",
    "SCORE_BYTES",
]

def _float_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Positions of the ``k`` largest scores along the last dim, ascending (baselines)."""
    k = min(k, scores.shape[-1])
    return torch.sort(torch.topk(scores, k, dim=-1, sorted=True).indices, dim=-1).values


def _gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [H, n, d], idx [H, m] -> [H, m, d]."""
    return torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def static_mask(x: torch.Tensor, keep: int, key_format: KeyFormat, key_width: int
                ) -> torch.Tensor:
    """Stage II static rule: per vector, the ``keep`` largest |x| (sorter Stage II job)."""
    keys = float_to_key(x.abs(), key_format, key_width)
    idx = topk_indices(keys, keep)
    return torch.zeros(x.shape, dtype=torch.bool).scatter(-1, idx, True)


class KVCache(ABC):
    """Per-layer KV cache of one sequence under one method."""

    method: Method

    def __init__(self, spec: MethodSpec, layout: KVLayout, *, q_heads: int, kv_heads: int,
                 scale: float | None = None, key_format: KeyFormat = KeyFormat.FP16,
                 key_width: int = 16) -> None:
        if spec.method is not self.method:
            raise ParamError(f"{type(self).__name__} needs a spec of method "
                             f"{self.method.value!r}, not {spec.method.value!r}")
        if q_heads % kv_heads:
            raise ParamError(f"q_heads = {q_heads} is not a multiple of kv_heads = {kv_heads}")
        self.spec = spec
        self.layout = layout
        self.q_heads = q_heads
        self.kv_heads = kv_heads
        self.group = q_heads // kv_heads
        self.d = layout.head_dim
        self.scale = default_scale(self.d) if scale is None else scale
        self.key_format = key_format
        self.key_width = key_width
        self.k: torch.Tensor | None = None     # [Hkv, n, d] resident keys
        self.v: torch.Tensor | None = None
        self.pos: torch.Tensor | None = None   # [Hkv, n] token positions of resident entries
        self.seen = 0                          # tokens written so far (prompt + generated)
        self.steps = 0                         # decode steps so far

    # ----------------------------------------------------------------- interface
    def prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self._check(q, k, v)
        if self.seen:
            raise ParamError("prefill must come first, once per cache")
        out, sums, obs = causal_prefill(q, k, v, self.scale, col_sums=self._wants_col_sums,
                                        window=self._obs_window)
        self.adopt_prefill(q, k, v, sums, obs)
        return out

    @property
    def prefill_stats(self) -> tuple[bool, int]:
        """What :meth:`prefill` needs from prompt attention besides its output: (column sums
        wanted, observation window), the ``col_sums`` and ``window`` of
        :func:`~hikv.model.attention.causal_prefill`."""
        return self._wants_col_sums, self._obs_window

    def adopt_prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      sums: torch.Tensor | None, obs: torch.Tensor | None) -> None:
        """Set the state :meth:`prefill` sets, from statistics computed elsewhere.

        ``sums`` and ``obs`` must be what ``causal_prefill(q, k, v, scale, col_sums=,
        window=)`` returns for this cache's :attr:`prefill_stats` (``None`` where not wanted).
        Lets several caches (methods) share one prompt attention pass; the state is the same
        as after :meth:`prefill`. The cache keeps references to ``k``, ``v``, ``sums`` and
        ``obs``; none of the methods modifies them in place.
        """
        self._check(q, k, v)
        if self.seen:
            raise ParamError("prefill must come first, once per cache")
        want_sums, window = self.prefill_stats
        if (sums is not None) != want_sums or (obs is not None) != (window > 0):
            raise ParamError(f"{type(self).__name__} needs col_sums={want_sums} and "
                             f"window={window} statistics from the prompt attention")
        n = k.shape[1]
        self.k, self.v = self._store(k), self._store_v(v)
        self.pos = torch.arange(n).expand(self.kv_heads, n).clone()
        self.seen = n
        self._after_prefill(q, k, sums, obs)

    def decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
               ) -> tuple[torch.Tensor, list[ByteAccount]]:
        self._check(q, k, v)
        if q.shape[1] != 1:
            raise ParamError(f"decode takes one token per step, got {q.shape[1]}")
        if self.k is None:  # decoding without a prompt: an empty prefill
            self.k = torch.zeros(self.kv_heads, 0, self.d, dtype=k.dtype)
            self.v = torch.zeros(self.kv_heads, 0, self.d, dtype=v.dtype)
            self.pos = torch.zeros(self.kv_heads, 0, dtype=torch.int64)
        assert self.v is not None and self.pos is not None
        self._append(self._store(k), self._store_v(v))
        self.pos = torch.cat([self.pos, torch.full((self.kv_heads, 1), self.seen)], dim=1)
        self.seen += 1
        self.steps += 1
        qg = group_queries(q, self.kv_heads)          # [Hkv, G, d]
        out, accounts = self._decode(qg)
        return ungroup(out, self.q_heads), accounts

    @property
    def resident_tokens(self) -> int:
        return 0 if self.k is None else int(self.k.shape[1])

    def _append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """``self.k``/``self.v`` plus one entry, in amortised O(1): they are views of
        capacity buffers that double when full (the values are those ``torch.cat`` gives)."""
        assert self.k is not None and self.v is not None
        n = self.k.shape[1]
        buf = getattr(self, "_kvbuf", None)
        if buf is None or buf[0] is not self.k or buf[2].shape[1] <= n:
            cap = max(64, 2 * (n + 1))
            kb = self.k.new_empty(self.kv_heads, cap, self.d)
            vb = self.v.new_empty(self.kv_heads, cap, self.d)
            kb[:, :n] = self.k
            vb[:, :n] = self.v
        else:
            kb, vb = buf[2], buf[3]
        kb[:, n] = k[:, 0]
        vb[:, n] = v[:, 0]
        self.k, self.v = kb[:, : n + 1], vb[:, : n + 1]
        self._kvbuf = (self.k, self.v, kb, vb)

    def _page_bounds(self, pt: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`_page_bounds` of ``self.k``, updated incrementally while the cache only
        grows by :meth:`_append` (exact: only the pages touched since are recomputed)."""
        assert self.k is not None
        n = self.resident_tokens
        c = getattr(self, "_pbounds", None)
        buf = getattr(self, "_kvbuf", None)
        if (c is None or c[0] != pt or c[1] > n or buf is None or buf[0] is not self.k
                or c[4] is not buf[2]):
            kmin, kmax = _page_bounds(self.k, pt)
        else:
            p0 = (c[1] - 1) // pt if c[1] else 0
            tmin, tmax = _page_bounds(self.k[:, p0 * pt:], pt)
            kmin = torch.cat([c[2][:, :p0], tmin], 1)
            kmax = torch.cat([c[3][:, :p0], tmax], 1)
        self._pbounds = (pt, n, kmin, kmax, None if buf is None else buf[2])
        return kmin, kmax

    # ----------------------------------------------------------------- hooks
    _wants_col_sums = False
    _obs_window = 0

    def _store(self, k: torch.Tensor) -> torch.Tensor:
        return k

    def _store_v(self, v: torch.Tensor) -> torch.Tensor:
        return v

    def _after_prefill(self, q: torch.Tensor, k: torch.Tensor,  # noqa: B027 (optional hook)
                       sums: torch.Tensor | None, obs: torch.Tensor | None) -> None:
        """Set policy state after prefill."""

    @abstractmethod
    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        """Attend the grouped query ``[Hkv, G, d]`` against the cache (current token last)."""

    # ----------------------------------------------------------------- helpers
    def _check(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
            raise ParamError("q, k, v must be [heads, tokens, head_dim]")
        if q.shape[0] != self.q_heads or k.shape[0] != self.kv_heads or v.shape != k.shape:
            raise ParamError(f"expected q [{self.q_heads}, T, {self.d}] and k, v "
                             f"[{self.kv_heads}, T, {self.d}], got {tuple(q.shape)}, "
                             f"{tuple(k.shape)}, {tuple(v.shape)}")
        if q.shape[-1] != self.d or k.shape[-1] != self.d:
            raise ParamError(f"head_dim must be {self.d} (layout.head_dim), got {q.shape[-1]}")

    def _row_stride(self) -> int:
        return self.layout.stride(self.layout.row_bytes)

    def _dense_reads(self, slots: torch.Tensor) -> list[Read]:
        return [Read("k", "k", dense_rows(slots, self.layout)),
                Read("v", "v", dense_rows(slots, self.layout))]

    def _attend_selected(self, qg: torch.Tensor, sel: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attend over cache entries ``sel`` [Hkv, m] (ascending; the current token included)."""
        assert self.k is not None and self.v is not None
        return attend(qg, _gather(self.k, sel), _gather(self.v, sel), self.scale)

    def _with_current(self, sel: torch.Tensor) -> torch.Tensor:
        """``sel`` plus the current (last) entry, ascending, no duplicates."""
        n = self.resident_tokens
        last = torch.full((sel.shape[0], 1), n - 1, dtype=torch.int64)
        if sel.shape[1] and bool((sel[:, -1] == n - 1).all()):
            return sel
        return torch.cat([sel[sel != n - 1].reshape(sel.shape[0], -1), last], dim=1)

    def _accounts(self, reads_per_head: list[list[Read]], resident: int,
                  tokens_per_head: list[int]) -> list[ByteAccount]:
        return [account(r, self.layout, resident, t)
                for r, t in zip(reads_per_head, tokens_per_head, strict=True)]


# =========================================================================== baselines
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


class _Evicting(KVCache):
    """Shared eviction machinery: resident tokens kept in order, gathered on eviction."""

    def _keep(self, idx: torch.Tensor) -> None:
        """Keep resident entries ``idx`` [Hkv, m] (ascending)."""
        assert self.k is not None and self.v is not None and self.pos is not None
        self.k, self.v = _gather(self.k, idx), _gather(self.v, idx)
        self.pos = torch.gather(self.pos, 1, idx)
        self._keep_state(idx)

    def _keep_state(self, idx: torch.Tensor) -> None:
        """Gather per-entry policy state alongside K and V."""


class H2O(_Evicting):
    """Heavy hitters (accumulated attention) + a recent window; evicts one token per step.

    The accumulated score of every resident token is stored (``SCORE_BYTES`` each, as HiKV's
    evicting Stage I stores it) and read every step: it is metadata of the step."""

    method = Method.H2O
    _wants_col_sums = True

    def _after_prefill(self, q, k, sums, obs) -> None:
        assert sums is not None
        self.acc = sums
        self._evict_to(self.spec.budget)

    def _keep_state(self, idx: torch.Tensor) -> None:
        self.acc = torch.gather(self.acc, 1, idx)

    def _evict_to(self, budget: int) -> None:
        n = self.resident_tokens
        if n <= budget:
            return
        r = min(self.spec.recent, budget)
        heavy = budget - r
        old = n - r
        top = _float_topk(self.acc[:, :old], heavy)
        recent = torch.arange(old, n).expand(self.kv_heads, r)
        self._keep(torch.cat([top, recent], dim=1))

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None and self.v is not None
        self.acc = torch.cat([self.acc, torch.zeros(self.kv_heads, 1)], dim=1)
        out, probs = attend(qg, self.k, self.v, self.scale)
        self.acc += probs.float().sum(1)
        n = self.resident_tokens
        reads = self._dense_reads(torch.arange(n - 1))
        reads.append(Read("meta", "scores", contiguous(0, (n - 1) * SCORE_BYTES)))
        self._evict_to(self.spec.budget)
        res = self.resident_tokens * (2 * self._row_stride() + SCORE_BYTES)
        return out, self._accounts([reads] * self.kv_heads, res, [n - 1] * self.kv_heads)


def _snap_scores(obs: torch.Tensor, n_prefix: int, kernel: int) -> torch.Tensor:
    """SnapKV: observation-window attention on the prefix, max-pooled over positions."""
    x = obs[:, :n_prefix].unsqueeze(1)
    return F.max_pool1d(x, kernel, stride=1, padding=kernel // 2).squeeze(1)


class SnapKV(_Evicting):
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
        scores = _snap_scores(obs, n - w, self.pool_kernel)
        top = _float_topk(scores, self.spec.budget - w)
        self._keep(torch.cat([top, torch.arange(n - w, n).expand(self.kv_heads, w)], dim=1))

    # decode attends and reads every resident token, exactly as full KV does
    _decode = FullKV._decode


def _page_bounds(k: torch.Tensor, pt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-page channel min and max of keys [Hkv, n, d] -> two [Hkv, pages, d]."""
    h, n, d = k.shape
    pages = -(-n // pt)
    pad = pages * pt - n
    kmax = F.pad(k, (0, 0, 0, pad), value=float("-inf")).reshape(h, pages, pt, d).amax(2)
    kmin = F.pad(k, (0, 0, 0, pad), value=float("inf")).reshape(h, pages, pt, d).amin(2)
    return kmin, kmax


def _quest_scores(qg: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor) -> torch.Tensor:
    """Quest's upper bound of q.k per page, summed over the group: [Hkv, pages]."""
    q = qg.unsqueeze(2)                                      # [Hkv, G, 1, d]
    ub = torch.maximum(q * kmin.unsqueeze(1), q * kmax.unsqueeze(1)).sum(-1)  # [Hkv,G,pages]
    return ub.sum(1)


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
        scores = _quest_scores(qg, kmin, kmax)
        scores[:, -1] = float("inf")                        # the current page
        sel_pages = _float_topk(scores, n_sel)              # [Hkv, p]
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
    return _float_topk(qg.abs().sum(1), r)


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
        sel = _float_topk(token_score, self.spec.budget)
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
    calibrated on the prompt at prefill (documented shortcut)."""

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
        return _float_topk(contrib, r)

    def calibrate(self, q: torch.Tensor, k: torch.Tensor) -> None:
        self.channels = self.calibration_channels(q, k, min(self.spec.channels, self.d))

    def _after_prefill(self, q, k, sums, obs) -> None:
        if self.channels is None:
            self.calibrate(q, k)

    def _label(self, k: torch.Tensor) -> torch.Tensor:
        assert self.channels is not None
        lab = torch.gather(k, 2, self.channels.unsqueeze(1).expand(-1, k.shape[1], -1))
        bits = self.spec.label_bits
        if bits >= 16:
            return lab
        # symmetric per-token quantisation to `bits` bits (fp16 scale per token)
        qmax = 2 ** (bits - 1) - 1
        scale = lab.abs().amax(-1, keepdim=True).clamp_min(1e-8) / qmax
        return torch.round(lab / scale).clamp(-qmax, qmax) * scale

    def _label_row_bytes(self) -> int:
        return label_row_bytes(min(self.spec.channels, self.d), self.spec.label_bits)

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None
        if self.channels is None:
            self.calibrate(ungroup(qg, self.q_heads), self.k)
        assert self.channels is not None
        n = self.resident_tokens
        lab = self._label(self.k)
        q_r = torch.gather(qg, 2, self.channels.unsqueeze(1).expand(-1, self.group, -1))
        s_hat = torch.softmax((q_r @ lab.transpose(-1, -2) * self.scale).float(), -1)
        token_score = s_hat.sum(1)
        token_score[:, -1] = float("inf")
        sel = _float_topk(token_score, self.spec.budget)
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


# =========================================================================== HiKV
def _lowbit(k: torch.Tensor, bits: int) -> torch.Tensor:
    """Per-token asymmetric min/max quantisation of keys to ``bits`` bits (dequantised)."""
    lo = k.amin(-1, keepdim=True)
    hi = k.amax(-1, keepdim=True)
    step = ((hi - lo) / (2**bits - 1)).clamp_min(1e-8)
    return torch.round((k - lo) / step) * step + lo


class HiKV(_Evicting):
    """HiKV: Stage I token selection (evicting or query-aware) and Stage II element selection.

    Stage I, evicting: after prefill the cache is seeded SnapKV-style (observation window
    ``obs_window``, max-pool ``pool_kernel``) to sinks ``S`` + recent ``R`` + the ``B-S-R``
    most important other tokens; during decode importance accumulates H2O-style (attention
    probabilities summed over the group) and every ``Δ`` steps, once the cache holds ``B + Δ``
    tokens, it is compacted back to ``B`` (one sorter job: top ``B-S-R`` of ``B+Δ-S-R``).

    Stage I, query-aware: nothing is evicted. Each step, sinks and the recent window are kept
    and the other ``B-S-R`` are chosen by an approximate score from stored metadata: per-page
    key bounds (Quest-style, whole pages) or keys quantised to ``lowbit_bits``.

    Stage II: K and V rules (:class:`~hikv.params.Stage2Rule`). ``static``: top-``r`` of |x| per
    vector at write time, stored as masked records. ``query_channels``: per step and KV head the
    top-``r`` channels of |q| (summed over the group) form the logits, with SparQ's temperature
    rescale; K is stored in channel-major pages. ``channel_groups``: the same with groups of
    ``group`` contiguous channels.
    """

    method = Method.HIKV

    def __init__(self, spec: MethodSpec, layout: KVLayout, **kwargs) -> None:
        super().__init__(spec, layout, **kwargs)
        assert spec.hikv is not None
        self.policy: HiKVPolicy = spec.hikv
        self.policy.check_head_dim(layout.head_dim)
        self.imp: torch.Tensor | None = None   # [Hkv, n] importance (evicting)

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
        return self._static(k, self.policy.k_rule)

    def _store_v(self, v: torch.Tensor) -> torch.Tensor:
        return self._static(v, self.policy.v_rule)

    # ----------------------------------------------------------------- Stage I, evicting
    _wants_col_sums = False

    @property
    def _obs_window(self) -> int:  # type: ignore[override]
        return self.policy.obs_window if self.policy.stage1 is Stage1Variant.EVICT else 0

    def _after_prefill(self, q, k, sums, obs) -> None:
        if self.policy.stage1 is not Stage1Variant.EVICT:
            return
        assert obs is not None
        n = self.resident_tokens
        self.imp = _snap_scores(obs, n, self.policy.pool_kernel).float()
        self._compact(self.policy.budget)

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
            scores = _quest_scores(qg, kmin, kmax)                       # [Hkv, pages]
            page_of = torch.arange(n) // pt
            cand_pages = torch.unique(page_of[~forced])
            top = self._topk(scores[:, cand_pages], n_imp // pt, signed=True)
            chosen = cand_pages[top]                                     # [Hkv, n_pages]
            sel |= (page_of[None, :, None] == chosen[:, None, :]).any(-1)
        else:
            kq = _lowbit(self.k, p.lowbit_bits)
            s_hat = torch.softmax((qg @ kq.transpose(-1, -2) * self.scale).float(), -1).sum(1)
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
        return lowbit_row_bytes(lay.head_dim, p.lowbit_bits, lay.elem_bytes)

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
        return -(-n // lay.page_tokens) * lay.head_dim * lay.channel_chunk_bytes

    return region(p.k_rule) + region(p.v_rule) + stage1_meta_bytes(p, lay, n)


METHODS: dict[Method, type[KVCache]] = {
    Method.FULL: FullKV,
    Method.H2O: H2O,
    Method.SNAPKV: SnapKV,
    Method.QUEST: Quest,
    Method.SPARQ: SparQ,
    Method.DOUBLE_SPARSITY: DoubleSparsity,
    Method.HIKV: HiKV,
}


def make_cache(spec: MethodSpec, cfg: Config, *, scale: float | None = None,
               q_heads: int | None = None, kv_heads: int | None = None) -> KVCache:
    """A fresh per-layer cache for ``spec`` with layout, key format and shape from ``cfg``."""
    cls = METHODS[spec.method]
    return cls(spec, cfg.layout, q_heads=q_heads or cfg.model.q_heads,
               kv_heads=kv_heads or cfg.model.kv_heads, scale=scale,
               key_format=cfg.key_format, key_width=cfg.sorter.key_width)

