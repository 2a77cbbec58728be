"""Dense attention building blocks shared by every method (no state, no policy).

Shapes: queries ``[Hq, T, d]``, keys and values ``[Hkv, n, d]``, GQA with ``G = Hq / Hkv`` query
heads per KV head (query head ``h`` reads KV head ``h // G``, as in Llama and Gemma).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hikv.params import ParamError

__all__ = ["group_queries", "ungroup", "attend", "causal_prefill", "prefill_pass", "PrefixStats",
           "default_scale"]


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
    out, sums, obs, _ = prefill_pass(q, k, v, scale, col_sums=col_sums,
                                     windows=(window,) if window > 0 else (), chunk=chunk)
    return out, sums, obs.get(window)


def prefill_pass(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, *,
                 col_sums: bool = False, windows: Sequence[int] = (), prefix: int = 0,
                 prefix_col_sums: bool = False, prefix_windows: Sequence[int] = (),
                 chunk: int = 512) -> tuple[torch.Tensor, torch.Tensor | None,
                                            dict[int, torch.Tensor], PrefixStats | None]:
    """:func:`causal_prefill` with every observation window in ``windows`` from one pass
    (``(out, sums, {window: obs})``, each the same tensor ``causal_prefill`` gives for it),
    and, with ``prefix`` in ``[1, N]``, the statistics of the prompt's first ``prefix`` tokens
    as if they were a prompt of their own (:class:`PrefixStats`: column sums if
    ``prefix_col_sums``, the observations of ``prefix_windows``; causal attention makes the
    first ``prefix`` rows' probabilities those of the shorter prompt, and each is summed over
    the same query chunks as a pass over the prefix alone would sum it).
    """
    hq, n, d = q.shape
    hkv = k.shape[0]
    g = hq // hkv
    if k.shape[1] != n or v.shape[1] != n:
        raise ParamError("prefill q, k and v must cover the same tokens")
    if not 0 <= prefix <= n:
        raise ParamError(f"prefix = {prefix} is out of range: allowed [0, {n}]")
    out = torch.empty_like(q)
    sums = torch.zeros(hkv, n, dtype=torch.float32) if col_sums else None
    obs = {w: torch.zeros(hkv, n, dtype=torch.float32) for w in windows if w > 0}
    pre = None
    if prefix:
        pre = PrefixStats(prefix, torch.zeros(hkv, prefix, dtype=torch.float32)
                          if prefix_col_sums else None,
                          {w: torch.zeros(hkv, prefix, dtype=torch.float32)
                           for w in prefix_windows if w > 0})
    qg = q.reshape(hkv, g, n, d)
    # a power-of-two scale is exact in either order: folded into the queries once, it leaves
    # every logit the same float and saves a pass over the logits
    pow2 = math.frexp(scale)[0] == 0.5
    if pow2:
        qg = qg * scale
    pos = torch.arange(n)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        qc = qg[:, :, s:e]                                     # [Hkv, G, c, d]
        # causal: a chunk's queries see keys [0, e) only, and everything below runs on those
        # columns alone: the logits (each a dot product over d, whatever the number of keys),
        # the chunk's upper triangle set to -inf in place, the softmax, the values' product and
        # the sums. The keys a chunk cannot see have probability exactly 0 in a pass over the
        # full square, so the sums and the observations are the same floats and the
        # output is too where the BLAS kernel rounds the values' product independently of the
        # key count (MKL at the harness's chunk of 512 on one machine; on another AVX-512
        # one it differs in the last bit: tests/test_accuracy_prefill.py), at about half the
        # CPU time of a pass that keeps the later keys at -inf
        logits = torch.matmul(qc, k[:, None, :e].transpose(-1, -2))
        if not pow2:
            logits.mul_(scale)
        logits[..., s:e].masked_fill_(pos[None, s:e] > pos[s:e, None], float("-inf"))
        probs = torch.softmax(logits.float(), dim=-1)
        out.reshape(hkv, g, n, d)[:, :, s:e] = torch.matmul(probs.to(q.dtype),
                                                            v[:, None, :e])
        if sums is not None:
            sums[:, :e] += probs.sum(dim=(1, 2))
        for w, o in obs.items():
            if e > n - w:
                lo = max(s, n - w) - s
                o[:, :e] += probs[:, :, lo:].sum(dim=(1, 2))
        if pre is not None and s < prefix:
            pe = min(e, prefix)                # a pass over the prefix ends its chunk here
            pp = probs[:, :, :pe - s, :pe]     # its rows see the prefix's keys [0, pe)
            if pre.sums is not None:
                pre.sums[:, :pe] += pp.sum(dim=(1, 2))
            for w, o in pre.obs.items():
                if pe > prefix - w:
                    o[:, :pe] += pp[:, :, max(s, prefix - w) - s:].sum(dim=(1, 2))
    return out, sums, obs, pre


@dataclass
class PrefixStats:
    """Prompt statistics of a prompt's first ``tokens`` tokens (:func:`prefill_pass`)."""

    tokens: int
    sums: torch.Tensor | None
    obs: dict[int, torch.Tensor]
