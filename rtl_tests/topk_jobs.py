"""Stage I jobs for the top-k engine's testbench (:mod:`hikv.rtl_tests.tb_topk`).

The jobs are the sorter's (:class:`~hikv.rtl_tests.sorter_jobs.SorterJob`, packed by the same
:class:`~hikv.rtl_tests.sorter_jobs.BeatCodec` and checked against the same golden model,
:mod:`hikv.model.refs.sorter`), Stage I only, plus key distributions aimed at radix select:
keys that share their high digits and differ in the low one, keys packed around a digit
boundary, keys a step apart around one value (many ties at the threshold and next to it).
"""

from __future__ import annotations

import random

from hikv.hw.topk_timing import TopKTiming
from hikv.params import SorterParams

from .sorter_jobs import STAGE1, SorterJob, directed_jobs, random_job

__all__ = ["RADIX_KINDS", "radix_keys", "random_topk_job", "directed_topk_jobs"]

#: key distributions of :func:`radix_keys`
RADIX_KINDS = ("low-digit", "boundary", "near", "two-values")


def radix_keys(rng: random.Random, n: int, params: SorterParams, kind: str) -> list[int]:
    """``n`` keys of ``kind`` (:data:`RADIX_KINDS`) for ``params``' key and digit widths."""
    t = TopKTiming.from_params(params)
    w, b = params.key_width, t.digit_bits
    top = (1 << w) - 1
    if kind == "low-digit":
        # the high digits equal, the lowest digit random: every pass but the last keeps all
        low = min(w, b)
        high = rng.randint(0, top) & ~((1 << low) - 1)
        return [high | rng.randint(0, (1 << low) - 1) for _ in range(n)]
    if kind == "boundary":
        # around a multiple of 2^(j b): the keys just below it differ in every lower digit
        shift = b * rng.randint(1, max(1, t.digits - 1)) if w > b else rng.randint(1, w)
        base = (rng.randint(1, max(1, top >> shift)) << shift) & top
        return [min(top, max(0, base + rng.randint(-3, 2))) for _ in range(n)]
    if kind == "near":
        v = rng.randint(0, top)
        return [min(top, max(0, v + rng.randint(-1, 1))) for _ in range(n)]
    if kind == "two-values":
        a, c = rng.randint(0, top), rng.randint(0, top)
        return [a if rng.random() < 0.5 else c for _ in range(n)]
    raise ValueError(f"radix key kind {kind!r}: allowed {RADIX_KINDS}")


def random_topk_job(rng: random.Random, params: SorterParams, *,
                    max_n: int | None = None) -> SorterJob:
    """A random Stage I job: the sorter's generator (sizes biased to the extremes, keys random,
    tied, all equal, all maximal, all zero, sorted) or, one job in three, a radix kind."""
    job = random_job(rng, params, STAGE1, max_n=max_n)
    if rng.random() < 1 / 3:
        kind = rng.choice(RADIX_KINDS)
        keys = tuple(radix_keys(rng, job.length, params, kind))
        job = SorterJob(STAGE1, job.k, (keys,), job.labels, kind)
    return job


def directed_topk_jobs(params: SorterParams, rng: random.Random) -> list[SorterJob]:
    """The sorter's Stage I corner cases (sizes 1, P +- 1, n; k 1, n/2, n, max_k; equal, zero,
    maximal, sorted, tied keys; the highest labels; the largest jobs), then every radix kind
    at the longest job for k = 1, k = max_k and k at a random tie."""
    out = [j for j in directed_jobs(params, rng) if j.mode == STAGE1]
    n, kmax = params.max_n, params.max_k
    for kind in RADIX_KINDS:
        for k in sorted({1, kmax, rng.randint(1, kmax)}):
            out.append(SorterJob(STAGE1, k, (tuple(radix_keys(rng, n, params, kind)),),
                                 tuple(range(n)), f"directed-{kind}"))
    return out
