"""The golden model's cache interface and what every method shares.

:class:`KVCache` is one per-layer KV cache of one sequence under one method (prefill, decode,
byte accounts; see :mod:`hikv.model.methods.registry` for the conventions), :class:`Evicting` the
machinery of methods that keep a subset of tokens, and the selection helpers the baselines
(:mod:`hikv.model.methods.baselines`) and HiKV (:mod:`hikv.model.methods.hikv`) share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from hikv.method_spec import register_class
from hikv.model.methods.attention import (
    attend,
    causal_prefill,
    default_scale,
    group_queries,
    ungroup,
)
from hikv.model.refs import lowbit
from hikv.model.refs.keys import float_to_key
from hikv.model.refs.layout import (
    ByteAccount,
    Read,
    account,
    dense_rows,
)
from hikv.model.refs.sorter import topk_indices
from hikv.params import (
    KeyFormat,
    KVLayout,
    Method,
    MethodSpec,
    ParamError,
)

__all__ = ["KVCache", "Evicting", "static_mask", "float_topk", "stable_topk", "gather",
           "page_bounds", "quest_scores", "snap_scores", "lowbit_keys"]


def lowbit_keys(k: torch.Tensor, bits: int) -> torch.Tensor:
    """Per-token (last axis) asymmetric min/max quantisation to ``bits`` bits, dequantised, by
    the integer arithmetic the scoring unit implements (:mod:`hikv.model.refs.lowbit`, defined
    once): HiKV's low-bit keys and Double Sparsity's labels (its code's ``pseudo_quantize``)."""
    codes, lo, step = lowbit.quantise_keys(k.detach().cpu().float().numpy(), bits)
    return torch.from_numpy(lowbit.dequantise(codes, lo, step)).to(k.device)


def float_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Positions of the ``k`` largest scores along the last dim, ascending (baselines)."""
    k = min(k, scores.shape[-1])
    return torch.sort(torch.topk(scores, k, dim=-1, sorted=True).indices, dim=-1).values


def stable_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Positions of the ``k`` largest scores along the last dim, ascending; among equal scores
    the lower position is kept (a stable sort, so the choice is deterministic)."""
    k = min(k, scores.shape[-1])
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    return torch.sort(order[..., :k], dim=-1).values


def gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [H, n, d], idx [H, m] -> [H, m, d]: ``out[h, j] = x[h, idx[h, j]]``.

    The rows are copied by one ``index_select`` over the rows of every head (``x`` read as
    ``[rows, d]`` where its heads are whole rows apart, as the caches' capacity buffers and
    their views are), about 7x faster on the CPU than ``torch.gather`` with the index expanded
    over ``d``, whose values it gives exactly; other layouts take ``torch.gather``. An index
    outside ``[0, n)`` raises ``IndexError``."""
    h, n, d = x.shape
    if idx.shape[0] != h or idx.dim() != 2:
        raise IndexError(f"gather: index {tuple(idx.shape)} for x {tuple(x.shape)}: allowed "
                         f"[{h}, m]")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise IndexError(f"gather: index out of range: allowed [0, {n - 1}], got "
                         f"[{int(idx.min())}, {int(idx.max())}]")
    s0, s1, s2 = x.stride()
    if h and n and d and s2 == 1 and s1 == d and s0 % d == 0:
        step = s0 // d
        rows = x.as_strided(((h - 1) * step + n, d), (d, 1))
        flat = idx + torch.arange(h, dtype=idx.dtype, device=idx.device).unsqueeze(1) * step
        return rows.index_select(0, flat.reshape(-1)).reshape(h, idx.shape[1], d)
    return torch.gather(x, 1, idx.unsqueeze(-1).expand(-1, -1, d))


def static_mask(x: torch.Tensor, keep: int, key_format: KeyFormat, key_width: int
                ) -> torch.Tensor:
    """Stage II static rule: per vector, the ``keep`` largest |x| (sorter Stage II job)."""
    keys = float_to_key(x.abs(), key_format, key_width)
    idx = topk_indices(keys, keep)
    return torch.zeros(x.shape, dtype=torch.bool).scatter(-1, idx, True)



#: each method's golden class, filled by :class:`KVCache` subclasses that set ``method``
#: (re-exported by :mod:`hikv.model.methods.registry`; the closed form of the same method:
#: :data:`hikv.sim.cost.closed_form.CLOSED_FORMS`)
METHODS: dict[Method, type[KVCache]] = {}


class KVCache(ABC):
    """Per-layer KV cache of one sequence under one method.

    A subclass that sets :attr:`method` (a registered :class:`~hikv.method_spec.Method`, whose
    closed form declares it) is that method's golden class in :data:`METHODS`."""

    method: Method

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "method" in cls.__dict__:      # a class that names its method is its golden class
            register_class(METHODS, cls.method, cls)

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
        type(self).end_prefill([self])       # a cache prefilled on its own: a one-layer model
        return out

    @classmethod  # noqa: B027 (optional hook)
    def end_prefill(cls, caches: Sequence[KVCache]) -> None:
        """Called once per sequence after the prompt has been prefilled in every layer, with
        the method layers' caches in depth order (:mod:`hikv.model.lm.runner`): the hook of methods
        that choose across layers (G-AdaKV's global budget, PyramidKV's per-layer budgets).
        :meth:`prefill` of a cache alone calls it with ``[self]`` (a model of one layer); a
        method must also work when it is never called (:meth:`adopt_prefill` alone)."""

    @property
    def prefill_stats(self) -> tuple[bool, int]:
        """What :meth:`prefill` needs from prompt attention besides its output: (column sums
        wanted, observation window), the ``col_sums`` and ``window`` of
        :func:`~hikv.model.methods.attention.causal_prefill`."""
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
        capacity buffers that grow by an eighth (at least 64 entries) when full (the values are
        those ``torch.cat`` gives). Not doubling: after a long prompt the decode adds a few
        hundred tokens at most, and a doubled buffer per sequence and layer took twice the
        cache's memory (an 8k perplexity cell of 12 methods side by side, 13.6 GB)."""
        assert self.k is not None and self.v is not None
        n = self.k.shape[1]
        buf = getattr(self, "_kvbuf", None)
        if buf is None or buf[0] is not self.k or buf[2].shape[1] <= n:
            cap = n + 1 + max(64, (n + 1) // 8)
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
        """:func:`page_bounds` of ``self.k``, updated incrementally while the cache only
        grows by :meth:`_append` (exact: only the pages touched since are recomputed)."""
        assert self.k is not None
        n = self.resident_tokens
        c = getattr(self, "_pbounds", None)
        if c is None or c[0] != pt or not self._grown_since(c[1], c[4]):
            kmin, kmax = page_bounds(self.k, pt)
        else:
            p0 = (c[1] - 1) // pt if c[1] else 0
            tmin, tmax = page_bounds(self.k[:, p0 * pt:], pt)
            kmin = torch.cat([c[2][:, :p0], tmin], 1)
            kmax = torch.cat([c[3][:, :p0], tmax], 1)
        self._pbounds = (pt, n, kmin, kmax, self._kv_buffer())
        return kmin, kmax

    def _per_token(self, slot: str, key: Any,
                   fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """``fn(self.k)`` for a ``fn`` that works token by token (row ``i`` of its result
        ``[Hkv, n, ...]`` depends on token ``i`` alone), kept in attribute ``slot`` and updated
        incrementally while the cache only grows by :meth:`_append` (exact: only the tokens
        added since the last call go through ``fn``). Anything that replaced ``self.k`` --
        prefill, eviction, pruning, a new capacity buffer -- or another ``key`` (compared with
        ``is``, then ``==`` for what is not a tensor) recomputes it whole."""
        assert self.k is not None
        n = self.resident_tokens
        c = getattr(self, slot, None)
        same = c is not None and (c[0] is key or (
            not isinstance(key, torch.Tensor) and not isinstance(c[0], torch.Tensor)
            and c[0] == key))
        if c is None or not same or not self._grown_since(c[1], c[3]):
            out = fn(self.k)
        elif c[1] == n:
            out = c[2]
        else:
            out = torch.cat([c[2], fn(self.k[:, c[1]:])], 1)
        setattr(self, slot, (key, n, out, self._kv_buffer()))
        return out

    def _kv_buffer(self) -> torch.Tensor | None:
        """The capacity buffer ``self.k`` is a view of (:meth:`_append`), if any."""
        buf = getattr(self, "_kvbuf", None)
        return None if buf is None else buf[2]

    def _grown_since(self, n: int, buffer: torch.Tensor | None) -> bool:
        """Whether ``self.k`` is what it was when it had ``n`` rows in ``buffer`` (what
        :meth:`_kv_buffer` gave then) plus rows added by :meth:`_append` only: a result kept per
        token for those ``n`` rows is still valid (anything that replaced ``self.k`` --
        prefill, eviction, pruning, a new capacity buffer -- makes this false)."""
        buf = getattr(self, "_kvbuf", None)
        return (buffer is not None and buf is not None and buf[0] is self.k
                and buf[2] is buffer and n <= self.resident_tokens)

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
        return attend(qg, gather(self.k, sel), gather(self.v, sel), self.scale)

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



class Evicting(KVCache):
    """Shared eviction machinery: resident tokens kept in order, gathered on eviction."""

    def _keep(self, idx: torch.Tensor) -> None:
        """Keep resident entries ``idx`` [Hkv, m] (ascending)."""
        assert self.k is not None and self.v is not None and self.pos is not None
        self.k, self.v = gather(self.k, idx), gather(self.v, idx)
        self.pos = torch.gather(self.pos, 1, idx)
        self._keep_state(idx)

    def _keep_state(self, idx: torch.Tensor) -> None:
        """Gather per-entry policy state alongside K and V."""



def snap_scores(obs: torch.Tensor, n_prefix: int, kernel: int) -> torch.Tensor:
    """SnapKV: observation-window attention on the prefix, max-pooled over positions."""
    x = obs[:, :n_prefix].unsqueeze(1)
    return F.max_pool1d(x, kernel, stride=1, padding=kernel // 2).squeeze(1)



def page_bounds(k: torch.Tensor, pt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-page channel min and max of keys [Hkv, n, d] -> two [Hkv, pages, d]."""
    h, n, d = k.shape
    pages = -(-n // pt)
    pad = pages * pt - n
    kmax = F.pad(k, (0, 0, 0, pad), value=float("-inf")).reshape(h, pages, pt, d).amax(2)
    kmin = F.pad(k, (0, 0, 0, pad), value=float("inf")).reshape(h, pages, pt, d).amin(2)
    return kmin, kmax



def quest_scores(qg: torch.Tensor, kmin: torch.Tensor, kmax: torch.Tensor) -> torch.Tensor:
    """Quest's upper bound of q.k per page, summed over the group: [Hkv, pages]."""
    q = qg.unsqueeze(2)                                      # [Hkv, G, 1, d]
    ub = torch.maximum(q * kmin.unsqueeze(1), q * kmax.unsqueeze(1)).sum(-1)  # [Hkv,G,pages]
    return ub.sum(1)


