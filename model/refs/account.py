"""Byte accounts and the per-token metadata sizes every KV method stores (torch-free).

Shared by the golden model (:mod:`hikv.model.methods.registry`, which counts each step's bytes from
the ranges it reads) and the closed forms of the cost model (:mod:`hikv.sim.cost.closed_form`, which
give the same counts as formulas over numpy arrays). Standard library only: importing this module
pulls in neither torch nor numpy, and every function accepts Python integers or numpy arrays (they
broadcast).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from hikv.params import HiKVPolicy, KVLayout, Stage1Scorer, Stage1Variant, Stage2Kind

__all__ = [
    "SCORE_BYTES",
    "h2o_meta_bytes",
    "ByteAccount",
    "label_row_bytes",
    "lowbit_row_bytes",
    "bounds_row_bytes",
    "stage1_meta_bytes",
    "stage2_meta_bytes",
]

#: bytes of one stored importance score (fp16): H2O's and HiKV's evicting Stage I accumulators
SCORE_BYTES = 2

Num = Any   # a Python int or a numpy array of integers


def h2o_meta_bytes(averaged: bool) -> int:
    """Bytes H2O stores (and reads every step) per resident token: its accumulated score, and
    for the averaged variant (``MethodSpec.averaged``) also the count of queries that saw it
    (a 16-bit counter, ``SCORE_BYTES`` wide), the divisor of the average."""
    return 2 * SCORE_BYTES if averaged else SCORE_BYTES


@dataclass(frozen=True)
class ByteAccount:
    """External bytes of one decode step for one (layer, KV head), or a sum of such.

    ``*_ideal`` counts the bytes the step needs; ``*_burst`` the bytes memory delivers at burst
    granularity. ``resident`` is what the method keeps in memory after the step (data, metadata
    and alignment padding). ``tokens`` counts the cached tokens whose K or V was read. The
    golden model fills it with integers; the closed forms with numpy arrays (design points).
    """

    k_ideal: Num = 0
    v_ideal: Num = 0
    meta_ideal: Num = 0
    k_burst: Num = 0
    v_burst: Num = 0
    meta_burst: Num = 0
    resident: Num = 0
    tokens: Num = 0

    @property
    def ideal(self) -> Num:
        return self.k_ideal + self.v_ideal + self.meta_ideal

    @property
    def burst(self) -> Num:
        return self.k_burst + self.v_burst + self.meta_burst

    def __add__(self, other: ByteAccount) -> ByteAccount:
        return type(self)(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                             for f in fields(self)})

    def as_dict(self) -> dict[str, Num]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["ideal"] = self.ideal
        d["burst"] = self.burst
        return d


def _cdiv(a: Num, b: Num) -> Num:
    return -(-a // b)


def label_row_bytes(channels: Num, bits: int) -> Num:
    """Double Sparsity: one label row of ``channels`` channels at ``bits`` bits (below 16 bits,
    its asymmetric quantiser's fp16 minimum and step per token)."""
    return _cdiv(channels * bits, 8) + (0 if bits >= 16 else 4)


def lowbit_row_bytes(head_dim: Num, bits: int, elem_bytes: Num) -> Num:
    """HiKV's low-bit key scorer: one key at ``bits`` bits per channel plus its min and step
    (``head_dim``: the channels the key holds, ``HiKVPolicy.scored_channels``)."""
    return _cdiv(head_dim * bits, 8) + 2 * elem_bytes


def bounds_row_bytes(layout: KVLayout) -> int:
    """Quest and HiKV's page-bounds scorer: one page's channel min and max, aligned."""
    return layout.stride(2 * layout.row_bytes)


def stage1_meta_bytes(p: HiKVPolicy, layout: KVLayout, n: int) -> int:
    """Bytes HiKV's Stage I keeps as metadata for ``n`` resident tokens."""
    if p.stage1 is Stage1Variant.EVICT:
        return n * SCORE_BYTES
    if p.stage1 is Stage1Variant.QUERY_AWARE:
        if p.scorer is Stage1Scorer.PAGE_BOUNDS:
            return _cdiv(n, layout.page_tokens) * bounds_row_bytes(layout)
        return n * lowbit_row_bytes(p.scored_channels(layout.head_dim), p.lowbit_bits,
                                    layout.elem_bytes)
    return 0


def stage2_meta_bytes(p: HiKVPolicy, head_dim: Num) -> Num:
    """Bytes HiKV's Stage II keeps as metadata per (layer, KV head), whatever the tokens:
    ThinK's K-channel mask (``head_dim`` bits, one per head, fixed after prefill; its records
    then carry no per-token mask). Read once per decode step (its own region)."""
    return head_dim // 8 if p.k_rule.kind is Stage2Kind.THINK else 0 * head_dim
