"""KV-cache methods: full KV, H2O, SnapKV, Quest, SparQ, Double Sparsity, StreamingLLM, TOVA,
AdaKV, G-AdaKV, PyramidKV and HiKV.

One :class:`KVCache` per (layer, sequence). ``prefill(q, k, v)`` runs causal attention over the
prompt (every method attends the whole prompt during prefill) and sets the method's state;
``decode(q, k, v)`` appends the new token, attends with the method's policy and returns the
output with one :class:`~hikv.model.refs.layout.ByteAccount` per KV head. Queries and keys arrive
with positional encoding applied (shapes ``[Hq, T, d]`` and ``[Hkv, T, d]``).

Conventions shared by all methods (see also :mod:`hikv.model.refs.layout`):

* the current token is always attended; its K and V were just computed on chip, so they are not
  counted as read. Every other attended token is read from external memory;
* selection is per KV head and shared by its query heads (GQA): scores of the query heads of a
  group are summed (probabilities) or their bounds summed (Quest); TOVA is the exception: as
  its paper, it averages over all query heads of the layer and every KV head drops the same
  token;
* evicting methods keep resident tokens in token order; a token's slot is its rank among them.

HiKV's selections go through the sorter reference (:func:`hikv.model.refs.sorter.topk_indices`
on keys from :func:`hikv.model.refs.keys.float_to_key`), so the golden model chooses exactly what
the hardware chooses. Baselines are software methods and select on exact float scores.
"""

from __future__ import annotations

# importing the golden classes fills METHODS (each KVCache subclass that sets ``method``)
from hikv.model.methods.baselines import (
    H2O,
    TOVA,
    DoubleSparsity,
    FullKV,
    Quest,
    SnapKV,
    SparQ,
    StreamingLLM,
)
from hikv.model.methods.baselines_adaptive import AdaKV, GAdaKV, PyramidKV
from hikv.model.methods.cache import METHODS, KVCache, static_mask
from hikv.model.methods.hikv import HiKV, hikv_resident_bytes
from hikv.model.refs.account import SCORE_BYTES
from hikv.params import Config, MethodSpec, ParamError

__all__ = [
    "KVCache",
    "FullKV",
    "H2O",
    "SnapKV",
    "Quest",
    "SparQ",
    "DoubleSparsity",
    "StreamingLLM",
    "TOVA",
    "AdaKV",
    "GAdaKV",
    "PyramidKV",
    "HiKV",
    "hikv_resident_bytes",
    "make_cache",
    "METHODS",
    "static_mask",
    "SCORE_BYTES",
]


def make_cache(spec: MethodSpec, cfg: Config, *, scale: float | None = None,
               q_heads: int | None = None, kv_heads: int | None = None) -> KVCache:
    """A fresh per-layer cache for ``spec`` with layout, key format and shape from ``cfg``."""
    try:
        cls = METHODS[spec.method]
    except KeyError:
        raise ParamError(f"no golden class for method {spec.method.value!r}") from None
    return cls(spec, cfg.layout, q_heads=q_heads or cfg.model.q_heads,
               kv_heads=kv_heads or cfg.model.kv_heads, scale=scale,
               key_format=cfg.key_format, key_width=cfg.sorter.key_width)

