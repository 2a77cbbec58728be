"""Dense attention building blocks shared by every method (no state, no policy).

Shapes: queries ``[Hq, T, d]``, keys and values ``[Hkv, n, d]``, GQA with ``G = Hq / Hkv`` query
heads per KV head (query head ``h`` reads KV head ``h // G``, as in Llama and Gemma).
"""

from __future__ import annotations

import math

import torch

from hikv.params import ParamError

__all__ = ["group_queries", "ungroup", "attend", "causal_prefill", "default_scale"]


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def group_queries(q: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[Hq, T, d] -> [Hkv, G*T, d] (query heads of one KV head side by side)."""
    hq, t, d = q.shape
    if hq % kv_heads:
        raise ParamError(f"q_heads = {hq} is not a multiple of kv_heads = {kv_heads}")
    return q.reshape(kv_heads, (hq // kv_heads) * t, d)


def ungroup(x: torch.Tensor, q_heads: int) -> torch.Tensor:
    """Inverse of :func:`group_queries`."""
    hkv, gt, d = x.shape
    return x.reshape(q_heads, (hkv * gt) // q_heads, d)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | torch.Tensor,
           valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of grouped queries ``[Hkv, M, d]`` over ``[Hkv, n, d]``.

    ``scale`` is a float or a tensor broadcasting against the logits ``[Hkv, M, n]``;
    ``valid`` (bool, broadcasting likewise) masks keys out. Returns (output, probabilities).
    """
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale
    if valid is not None:
        logits = logits.masked_fill(~valid, float("-inf"))
    probs = torch.softmax(logits.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v), probs


def causal_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, *,
                   col_sums: bool = False, window: int = 0, chunk: int = 512
                   ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Causal attention of ``N`` prompt tokens, in query chunks to bound memory.

    Returns the output ``[Hq, N, d]``; with ``col_sums`` the attention probability each key
    received, summed over all queries and the query heads of its KV head (``[Hkv, N]``, H2O's
    accumulated attention); with ``window > 0`` the probabilities of the last ``window`` queries
    summed over them and the group (``[Hkv, N]``, SnapKV's observation).
    """
    hq, n, d = q.shape
    hkv = k.shape[0]
    g = hq // hkv
    if k.shape[1] != n or v.shape[1] != n:
        raise ParamError("prefill q, k and v must cover the same tokens")
    out = torch.empty_like(q)
    sums = torch.zeros(hkv, n, dtype=torch.float32) if col_sums else None
    obs = torch.zeros(hkv, n, dtype=torch.float32) if window > 0 else None
    qg = q.reshape(hkv, g, n, d)
    keys_pos = torch.arange(n)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        qc = qg[:, :, s:e]                                     # [Hkv, G, c, d]
        logits = torch.matmul(qc, k[:, None].transpose(-1, -2)) * scale  # [Hkv, G, c, n]
        causal = keys_pos[None, :] <= torch.arange(s, e)[:, None]       # [c, n]
        logits = logits.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(logits.float(), dim=-1)
        out.reshape(hkv, g, n, d)[:, :, s:e] = torch.matmul(probs.to(q.dtype), v[:, None])
        if sums is not None:
            sums += probs.sum(dim=(1, 2))
        if obs is not None and e > n - window:
            lo = max(s, n - window) - s
            obs += probs[:, :, lo:].sum(dim=(1, 2))
    return out, sums, obs
