"""The reconfigurable importance sorter's function: the bit-exact reference for the RTL.

Keys are unsigned integers. Selection takes the largest keys; among equal keys the **lower
index wins**. Output order is **ascending index** (the loader consumes tokens in address order).

* Stage I (:func:`stage1_topk`): the ``k`` best of a stream of ``n`` (key, index) pairs; when
  ``k >= n`` every item is selected.
* Stage II (:func:`stage2_topr`): for each of many short vectors, the ``r`` best elements, the
  element index being the position in the vector.

The batched torch form :func:`topk_indices` is what the golden attention methods call, so the
methods choose exactly what the hardware would.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hikv.params import ParamError

__all__ = ["stage1_topk", "stage2_topr", "topk_indices", "topk_mask"]


def _composite(keys: torch.Tensor) -> torch.Tensor:
    """A unique int64 per element ordering like (key descending, index ascending)."""
    n = keys.shape[-1]
    if keys.numel() and int(keys.min()) < 0:
        raise ParamError("sorter keys must be unsigned (non-negative) integers")
    if keys.numel() and int(keys.max()) >= 1 << 40:
        raise ParamError("sorter keys must be below 2**40")
    idx = torch.arange(n, dtype=torch.int64, device=keys.device)
    return keys.to(torch.int64) * (1 << 22) + ((1 << 22) - 1 - idx)


def topk_indices(keys: torch.Tensor, k: int) -> torch.Tensor:
    """Positions of the ``k`` best keys along the last dimension, ascending.

    ``keys``: int64 tensor ``[..., n]`` (n < 2**22); ``k`` is clipped to ``n``. Ties go to the
    lower position.
    """
    n = keys.shape[-1]
    if n >= 1 << 22:
        raise ParamError(f"sorter stream length n = {n} is out of range: allowed [0, 4194303]")
    if k < 0:
        raise ParamError(f"k = {k} is out of range: allowed >= 0")
    k = min(k, n)
    top = torch.topk(_composite(keys), k, dim=-1, sorted=False).indices
    return torch.sort(top, dim=-1).values


def topk_mask(keys: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of :func:`topk_indices` (same shape as ``keys``)."""
    mask = torch.zeros(keys.shape, dtype=torch.bool, device=keys.device)
    return mask.scatter(-1, topk_indices(keys, k), True)


def stage1_topk(keys: Sequence[int], indices: Sequence[int], k: int) -> list[tuple[int, int]]:
    """Stage I job: the ``k`` best (key, index) pairs, ascending index.

    ``indices`` are the items' own labels (token positions), unique; ties between equal keys go
    to the lower label, whatever the arrival order.
    """
    if len(keys) != len(indices):
        raise ParamError(f"keys ({len(keys)}) and indices ({len(indices)}) differ in length")
    if len(set(indices)) != len(indices):
        raise ParamError("Stage I indices must be unique")
    if k < 0:
        raise ParamError(f"k = {k} is out of range: allowed >= 0")
    items = sorted(zip(keys, indices, strict=True), key=lambda t: (-t[0], t[1]))[:k]
    for key, _ in items:
        if key < 0:
            raise ParamError(f"sorter key {key} is negative; keys are unsigned")
    return sorted(items, key=lambda t: t[1])


def stage2_topr(vectors: Sequence[Sequence[int]], r: int) -> list[list[tuple[int, int]]]:
    """Stage II job: for each vector, its ``r`` best (key, element index), ascending index."""
    out = []
    for vec in vectors:
        out.append(stage1_topk(list(vec), list(range(len(vec))), r))
    return out
