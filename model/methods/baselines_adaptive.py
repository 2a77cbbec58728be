"""Golden baselines with adaptive budgets: AdaKV, G-AdaKV and PyramidKV.

All three score the prompt as SnapKV does (the observation window's attention, summed over
the window's queries and the group's query heads, max-pooled over positions with SnapKV's
kernel; the window itself is always kept, ``spec.recent`` tokens per KV head) and choose once,
after prefill; decode then reads every resident token, as SnapKV does. They differ in how the
budget is shared:

* **AdaKV** (Feng et al., 2024): a layer's ``Hkv x B`` slots go to the best scores over all its
  KV heads, after a safeguard of ``floor(alpha (B - w))`` best prefix tokens per head
  (``alpha = 0.2``, AdaKV's and kvpress's default). Per-head budgets differ, sum to ``Hkv x B``;
* **G-AdaKV**: one budget over all layers and KV heads, ``L x Hkv x (B - w)`` prefix tokens chosen
  by :func:`hikv.model.methods.global_select.global_topk` over the concatenation of every (layer, KV
  head) score vector (ties to the lower flat index); no safeguard;
* **PyramidKV** (Cai et al., 2024): per-layer budgets decreasing linearly with depth
  (:func:`pyramid_budgets`, the paper's schedule with ``beta = 20``), average ``B``; every KV
  head of a layer keeps the layer's budget.

G-AdaKV and PyramidKV need every layer: :meth:`~hikv.model.methods.cache.KVCache.end_prefill`
(called by :mod:`hikv.model.lm.runner` once per sequence after the prompt, with the method layers'
caches in depth order) makes the choice. A cache used on its own (no call) chooses at its first
decode step as a model of one layer, where G-AdaKV is AdaKV without the safeguard and PyramidKV is
SnapKV.

Per-head resident sets of different sizes are stored left-padded (``valid`` marks real
entries); :attr:`resident_tokens` is then the mean over the KV heads. Each KV head's
:class:`~hikv.model.refs.layout.ByteAccount` counts its own tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import torch

from hikv.model.methods.attention import attend
from hikv.model.methods.baselines import SnapKV
from hikv.model.methods.cache import Evicting, KVCache, snap_scores, stable_topk
from hikv.model.methods.global_select import global_topk
from hikv.model.refs.layout import ByteAccount
from hikv.params import Method, ParamError

__all__ = ["AdaKV", "GAdaKV", "PyramidKV", "pyramid_budgets", "ADAKV_SAFEGUARD",
           "PYRAMID_BETA"]

#: AdaKV's safeguard: each head keeps at least this fraction of its even share of the budget
ADAKV_SAFEGUARD = Fraction(1, 5)
#: PyramidKV's ratio of the average prefix budget to the last layer's (the paper's beta)
PYRAMID_BETA = 20


def pyramid_budgets(layers: int, budget: int, window: int, prompt: int,
                    beta: int = PYRAMID_BETA) -> list[int]:
    """PyramidKV's per-layer budgets (window included), layer 0 first.

    The prefix budgets ``b_l`` fall linearly from ``max = 2 (B - w) - min`` to
    ``min = (B - w) / beta``; when ``max`` exceeds the prompt's prefix ``P - w`` it is cut to it
    and ``min = 2 (B - w) - max`` (PyramidKV's code), so the mean stays ``B - w``. The real
    values are rounded to integers that sum to exactly ``L (B - w)`` (floors, then one more
    token to the layers with the largest fractions, ties to the lower layer), so the budgets
    average exactly ``B``. Needs ``P > B`` (otherwise nothing is evicted).
    """
    for name, v, lo in (("layers", layers, 1), ("budget", budget, 1), ("window", window, 0),
                        ("beta", beta, 1)):
        if not isinstance(v, int) or v < lo:
            raise ParamError(f"pyramid_budgets: {name} = {v!r} must be an integer >= {lo}")
    if not window <= budget < prompt:
        raise ParamError(f"pyramid_budgets: needs window = {window} <= budget = {budget} < "
                         f"prompt = {prompt}")
    b = budget - window
    if layers == 1:
        return [budget]
    lo = Fraction(b, beta)
    hi = 2 * b - lo
    if hi > prompt - window:
        hi = Fraction(prompt - window)
        lo = 2 * b - hi
    step = (hi - lo) / (layers - 1)
    targets = [hi - i * step for i in range(layers)]
    ints = [int(t) for t in targets]                   # floors (targets >= 0)
    extra = layers * b - sum(ints)
    order = sorted(range(layers), key=lambda i: (-(targets[i] - ints[i]), i))
    for i in order[:extra]:
        ints[i] += 1
    return [window + x for x in ints]


class _Adaptive(Evicting):
    """SnapKV scoring, one choice after prefill (possibly across layers), per-head sets."""

    pool_kernel = SnapKV.pool_kernel

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.valid: torch.Tensor | None = None    # [Hkv, n] real entries (left-padded heads)
        self.pending: torch.Tensor | None = None  # prefix scores [Hkv, n - w] awaiting a choice
        self.head_budgets: list[int] | None = None

    @property
    def _obs_window(self) -> int:  # type: ignore[override]
        return self.spec.recent

    @property
    def window(self) -> int:
        """Observation-window tokens kept per KV head (``spec.recent``, at most the prompt)."""
        return min(self.spec.recent, self.seen)

    def _after_prefill(self, q, k, sums, obs) -> None:
        assert obs is not None
        n = self.seen
        self.valid = torch.ones(self.kv_heads, n, dtype=torch.bool)
        if n > self.spec.budget:
            self.pending = snap_scores(obs, n - self.window, self.pool_kernel)

    @property
    def resident_tokens(self) -> int | float:  # type: ignore[override]
        """Resident tokens per KV head; the mean over the heads when their sets differ."""
        if self.valid is None:
            return super().resident_tokens
        total = int(self.valid.sum())
        return total // self.kv_heads if total % self.kv_heads == 0 else total / self.kv_heads

    def head_tokens(self) -> list[int]:
        """Resident tokens of each KV head."""
        assert self.valid is not None
        return [int(x) for x in self.valid.sum(1)]

    def _keep_heads(self, prefix: Sequence[Sequence[int]]) -> None:
        """Keep, per KV head, the prefix positions ``prefix[h]`` and the observation window."""
        assert self.pending is not None and self.k is not None
        n, w = self.seen, self.window
        rows = [sorted(int(i) for i in p) + list(range(n - w, n)) for p in prefix]
        m = max(len(r) for r in rows)
        idx = torch.zeros(self.kv_heads, m, dtype=torch.int64)
        valid = torch.zeros(self.kv_heads, m, dtype=torch.bool)
        for h, r in enumerate(rows):            # left-padded: the newest entry is last
            idx[h, m - len(r):] = torch.tensor(r, dtype=torch.int64)
            valid[h, m - len(r):] = True
        self._keep(idx)
        assert self.pos is not None
        self.pos = self.pos.masked_fill(~valid, -1)
        self.valid = valid
        self.head_budgets = [len(r) for r in rows]
        self.pending = None

    def _choose_alone(self) -> None:
        """The choice of a cache not given to :meth:`end_prefill` (a model of one layer)."""
        type(self).end_prefill([self])

    def _decode(self, qg: torch.Tensor) -> tuple[torch.Tensor, list[ByteAccount]]:
        assert self.k is not None and self.v is not None
        if self.valid is None:              # decoding without a prompt
            self.valid = torch.ones(self.kv_heads, self.k.shape[1] - 1, dtype=torch.bool)
        if self.pending is not None:
            # the choice is made on the prompt: set the new entry aside, choose, put it back
            k_new, v_new = self.k[:, -1:], self.v[:, -1:]
            self.k, self.v, self.pos = self.k[:, :-1], self.v[:, :-1], self.pos[:, :-1]
            self.seen -= 1
            self._choose_alone()
            self.seen += 1
            self._append(k_new, v_new)
            self.pos = torch.cat([self.pos, torch.full((self.kv_heads, 1), self.seen - 1)], 1)
        self.valid = torch.cat([self.valid, torch.ones(self.kv_heads, 1, dtype=torch.bool)], 1)
        out, _ = attend(qg, self.k, self.v, self.scale, valid=self.valid.unsqueeze(1))
        counts = self.head_tokens()
        stride = 2 * self._row_stride()
        return out, [self._accounts([self._dense_reads(torch.arange(t - 1))], t * stride,
                                    [t - 1])[0] for t in counts]


class AdaKV(_Adaptive):
    """AdaKV: per-head budgets under the layer budget ``Hkv x B`` (see the module)."""

    method = Method.ADAKV

    def _after_prefill(self, q, k, sums, obs) -> None:
        super()._after_prefill(q, k, sums, obs)
        if self.pending is not None:       # a layer's choice needs no other layer
            self._choose_alone()

    def safeguard(self) -> int:
        """Prefix tokens every KV head keeps whatever the other heads' scores."""
        return int(ADAKV_SAFEGUARD * (self.spec.budget - self.window))

    @classmethod
    def end_prefill(cls, caches: Sequence[KVCache]) -> None:
        for c in caches:
            assert isinstance(c, AdaKV)
            if c.pending is None:
                continue
            s, b = c.safeguard(), c.spec.budget - c.window
            safe = stable_topk(c.pending, s)                      # [Hkv, s]
            rest = []
            for h in range(c.kv_heads):
                free = torch.ones(c.pending.shape[1], dtype=torch.bool)
                free[safe[h]] = False
                rest.append(free.nonzero().squeeze(1))
            picked = global_topk([c.pending[h, r] for h, r in enumerate(rest)],
                                 c.kv_heads * (b - s))
            c._keep_heads([safe[h].tolist() + rest[h][p].tolist()
                           for h, p in enumerate(picked)])


class GAdaKV(_Adaptive):
    """G-AdaKV: one budget over every layer and KV head (see the module)."""

    method = Method.G_ADAKV

    @classmethod
    def end_prefill(cls, caches: Sequence[KVCache]) -> None:
        todo = [c for c in caches if isinstance(c, GAdaKV) and c.pending is not None]
        if len(todo) != sum(isinstance(c, KVCache) for c in caches):
            if todo:
                raise ParamError("G-AdaKV: every layer's prompt must exceed the budget, or none")
            return
        segs = [c.pending[h] for c in todo for h in range(c.kv_heads)]   # type: ignore[index]
        k = sum(c.kv_heads * (c.spec.budget - c.window) for c in todo)
        kept = global_topk(segs, k)
        a = 0
        for c in todo:
            c._keep_heads(kept[a:a + c.kv_heads])
            a += c.kv_heads


class PyramidKV(_Adaptive):
    """PyramidKV: per-layer budgets from :func:`pyramid_budgets` (see the module)."""

    method = Method.PYRAMIDKV

    @classmethod
    def end_prefill(cls, caches: Sequence[KVCache]) -> None:
        todo = [c for c in caches if isinstance(c, PyramidKV)]
        if not todo or all(c.pending is None for c in todo):
            return
        if any(c.pending is None for c in todo):
            raise ParamError("PyramidKV: every layer's prompt must exceed the budget, or none")
        c0 = todo[0]
        budgets = pyramid_budgets(len(todo), c0.spec.budget, c0.window, c0.seen)
        for c, b in zip(todo, budgets, strict=True):
            assert c.pending is not None
            top = stable_topk(c.pending, b - c.window)
            c._keep_heads(top.tolist())
