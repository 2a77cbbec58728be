"""Jobs for the Stage II selection block's testbench (:mod:`hikv.rtl_tests.tb_stage2`).

A job is ``count`` vectors of ``d`` keys streamed back to back, each with its own ``r`` (the
block samples ``r`` with a vector's first beat, so ``r`` may change from vector to vector).
The expected output of a vector is :func:`hikv.model.refs.sorter.stage2_topr` of it; ``r`` above
``d`` selects the whole vector. Key kinds aim at the composite radix select: ties of 1 to 3
values, all equal, all zero, all maximal, sorted, keys a step apart around one value (ties
broken by the index bits of the composite).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hikv.model.refs.sorter import stage2_topr

__all__ = ["KEY_KINDS", "Stage2Job", "stage2_keys", "random_stage2_job", "directed_stage2_jobs"]

#: key distributions of :func:`stage2_keys`
KEY_KINDS = ("random", "ties", "equal", "zero", "max", "ascending", "descending", "near")


@dataclass(frozen=True)
class Stage2Job:
    """``vectors[i]`` (``d`` keys each) with ``rs[i]`` kept; ``kind`` names the generator."""

    vectors: tuple[tuple[int, ...], ...]
    rs: tuple[int, ...]
    kind: str

    @property
    def count(self) -> int:
        return len(self.vectors)

    @property
    def length(self) -> int:
        return len(self.vectors[0])

    def expected(self) -> list[list[tuple[int, int]]]:
        """Per vector, the golden (key, element index) pairs in ascending index order."""
        return [stage2_topr([v], r)[0] for v, r in zip(self.vectors, self.rs, strict=True)]

    def describe(self, limit: int = 8) -> str:
        vecs = "; ".join(str(list(v)) for v in self.vectors[:limit])
        more = f" (+{self.count - limit} vectors)" if self.count > limit else ""
        return f"{self.kind} d={self.length} count={self.count} r={list(self.rs)}: {vecs}{more}"


def stage2_keys(rng: random.Random, d: int, width: int, kind: str) -> tuple[int, ...]:
    """``d`` keys of ``width`` bits of ``kind`` (:data:`KEY_KINDS`)."""
    top = (1 << width) - 1
    if kind == "random":
        return tuple(rng.randint(0, top) for _ in range(d))
    if kind == "ties":
        vals = [rng.randint(0, top) for _ in range(rng.randint(1, 3))]
        return tuple(rng.choice(vals) for _ in range(d))
    if kind == "equal":
        return (rng.randint(0, top),) * d
    if kind == "zero":
        return (0,) * d
    if kind == "max":
        return (top,) * d
    if kind == "near":
        v = rng.randint(0, top)
        return tuple(min(top, max(0, v + rng.randint(-1, 1))) for _ in range(d))
    if kind in ("ascending", "descending"):
        base = sorted(rng.randint(0, top) for _ in range(d))
        return tuple(base if kind == "ascending" else base[::-1])
    raise ValueError(f"Stage II key kind {kind!r}: allowed {KEY_KINDS}")


def _r(rng: random.Random, d: int, max_r: int) -> int:
    """``r`` biased to the extremes: 1, ``d``, ``max_r``, above ``d``, or any of 1..d."""
    x = rng.random()
    if x < 0.15:
        return 1
    if x < 0.3:
        return d
    if x < 0.4:
        return rng.randint(d, max_r)
    return rng.randint(1, d)


def random_stage2_job(rng: random.Random, d: int, width: int, max_r: int, *,
                      max_count: int = 6) -> Stage2Job:
    """1 to ``max_count`` vectors of one key kind; ``r`` the same for the job or drawn per
    vector (half the jobs each)."""
    kind = rng.choice(KEY_KINDS + ("ties", "random"))
    count = rng.randint(1, max_count)
    vectors = tuple(stage2_keys(rng, d, width, kind) for _ in range(count))
    if rng.random() < 0.5:
        rs = (_r(rng, d, max_r),) * count
    else:
        rs = tuple(_r(rng, d, max_r) for _ in range(count))
    return Stage2Job(vectors, rs, kind)


def directed_stage2_jobs(rng: random.Random, d: int, width: int, max_r: int) -> list[Stage2Job]:
    """Every key kind with ``r`` = 1, 2, ``d - 1``, ``d`` and ``max_r`` (4 vectors each); one
    vector alone; ``r`` changing on every vector over 1..d and back; the longest job (32
    vectors) with random ``r``."""
    out = []
    for kind in KEY_KINDS:
        for r in sorted({1, 2, d - 1, d, max_r}):
            vecs = tuple(stage2_keys(rng, d, width, kind) for _ in range(4))
            out.append(Stage2Job(vecs, (r,) * 4, f"directed-{kind}"))
    out.append(Stage2Job((stage2_keys(rng, d, width, "ties"),), (d // 2 or 1,),
                         "directed-one"))
    sweep = tuple(range(1, d + 1)) + tuple(range(d, 0, -1))
    out.append(Stage2Job(tuple(stage2_keys(rng, d, width, "ties") for _ in sweep), sweep,
                         "directed-r-sweep"))
    out.append(Stage2Job(tuple(stage2_keys(rng, d, width, "random") for _ in range(32)),
                         tuple(rng.randint(1, max_r) for _ in range(32)), "directed-long"))
    return out
