"""G-AdaKV's global selection, and its exact mapping to Stage I jobs of the sorter.

Algorithm (G-AdaKV: Ada-KV's adaptive budget allocation with one budget shared by every layer
and KV head, Feng et al., "Ada-KV: Optimizing KV Cache Eviction by Adaptive Budget Allocation
for Efficient LLM Inference", 2024): every (layer, KV head) scores its tokens; the cache keeps
the ``K`` best scores over the *concatenation* of all (layer, KV head) score vectors, so a head
keeps as many tokens as it owns among the global top ``K`` (its budget adapts to how
concentrated its scores are, and the budgets sum to ``K``). Ties are broken by the lower *flat
index*: segment order (layer, then KV head, as the caller lists them), then token position.
:func:`global_topk` is that definition, written once; the golden classes call it.

Mapping to the sorter (:func:`sorter_schedule`). A Stage I job takes the top ``k <= max_k`` of
``n <= max_n`` (key, label) items, ties to the lower label, labels increasing. The global top
``K`` restricted to one contiguous piece of the flat order (a *chunk*) is that chunk's own top
``k_c`` for some ``k_c <= min(K, |chunk|)``, so each chunk's top ``min(K, |chunk|)`` contains
every member of the global selection that lies in it (ties included: inside a chunk the flat
order is the label order). Merging consecutive candidate lists is again a Stage I job whose
labels are the candidates' ordinals in flat order, so the merge's ties equal the global ones.
One *round* therefore finds the global top ``m = min(K, max_k, max_n // 2)`` exactly:

1. *scan*: one Stage I job per chunk (a (layer, head) segment cut into pieces of at most
   ``max_n`` tokens) with ``k = m``; a chunk of at most ``m`` items needs no job (all are
   candidates);
2. *merge*: groups of ``g = max_n // m`` consecutive candidate lists (at most ``max_n`` items),
   one Stage I job of ``k = m`` per group with more than ``m`` items, repeated until one list is
   left: the global top ``m``.

A budget above ``max_k`` takes ``ceil(K / m)`` rounds: round ``r`` selects the top ``m_r``
of the items not yet selected (streamed in flat order, labels still increasing), and the top
``K`` of a set is its top ``m_1`` plus the top ``K - m_1`` of the rest.
:func:`round_schedule` (the re-streaming schedule) re-streams every remaining item in every round;
:func:`sorter_schedule` (the *buffered* schedule, the default) keeps every node's candidate
list from the first round and, in later rounds, refills only the lists a round uses up
(docs/sorter.md, "G-AdaKV": the proof, and 44x to 67x fewer cycles at paper scale on synthetic
keys).
:func:`global_topk_cycles` prices a schedule with the sorter's timing contract
(:mod:`hikv.hw.sorter_timing`). Everything here is pure Python (no torch, no numpy); inputs may
be lists, numpy arrays or torch tensors of scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from hikv.hw.sorter_timing import SorterTiming, check_job_arg
from hikv.params import ParamError, SorterParams

__all__ = ["global_topk", "SelectJob", "round_budgets", "scan_chunks", "merge_groups",
           "plan_round", "sorter_schedule", "round_schedule", "run_schedule", "stage1_runner",
           "fast_runner", "schedule_cycles", "global_topk_cycles"]


def _values(seg: Any, where: str) -> list[Any]:
    vals = seg.tolist() if hasattr(seg, "tolist") else list(seg)
    if not isinstance(vals, list) or any(isinstance(v, list) for v in vals):
        raise ParamError(f"{where} must be one-dimensional")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ParamError(f"{where} holds {v!r}; scores must be real numbers")
        if isinstance(v, float) and math.isnan(v):
            raise ParamError(f"{where} holds NaN; scores must be ordered")
    return vals


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ParamError(f"global budget k = {k!r} is out of range: allowed an integer >= 0")
    return k


def global_topk(scores: Sequence[Any], k: int) -> list[list[int]]:
    """The global top ``k`` over the concatenation of ``scores``, as kept positions per segment.

    Parameters
    ----------
    scores : sequence of 1-D score vectors (lists, numpy arrays or torch tensors), one per
        (layer, KV head) in flat order (layer-major). Higher scores are kept.
    k : int >= 0
        The global budget; ``k >= sum of lengths`` keeps everything.

    Returns
    -------
    list of lists of int
        For each segment, the positions kept, ascending. Among equal scores the lower flat index
        (segment, then position) is kept. Exactly ``min(k, total)`` positions in all.
    """
    k = _check_k(k)
    flat: list[tuple[Any, int, int]] = []
    for s, seg in enumerate(scores):
        for i, v in enumerate(_values(seg, f"scores[{s}]")):
            flat.append((v, s, i))
    flat.sort(key=lambda t: (-t[0], t[1], t[2]))
    kept: list[list[int]] = [[] for _ in scores]
    for _, s, i in flat[:k]:
        kept[s].append(i)
    return [sorted(x) for x in kept]


# --------------------------------------------------------------------------- sorter mapping
@dataclass(frozen=True)
class SelectJob:
    """One Stage I job of the schedule: the top ``k`` of ``keys`` (labels ``0 .. n-1``, the
    items' ordinals in flat order). ``phase`` is ``"scan"`` or ``"merge"``; ``round`` and
    ``level`` (0 for scans, 1.. for merge levels) locate it."""

    keys: tuple[int, ...]
    k: int
    phase: str
    round: int
    level: int

    @property
    def labels(self) -> tuple[int, ...]:
        return tuple(range(len(self.keys)))


def _check_sorter(max_n: int, max_k: int) -> None:
    for name, v in (("max_n", max_n), ("max_k", max_k)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ParamError(f"sorter {name} = {v!r} is out of range: allowed an integer >= 1")
    if max_n < 2:
        raise ParamError(f"sorter max_n = {max_n} is out of range: a merge needs max_n >= 2")


def round_budgets(total: int, k: int, max_n: int, max_k: int) -> list[int]:
    """Items selected by each round: ``m = min(max_k, max_n // 2)`` per round, the rest last."""
    _check_sorter(max_n, max_k)
    want = min(_check_k(k), total)
    cap = min(max_k, max_n // 2)
    return [min(cap, want - r) for r in range(0, want, cap)]


def scan_chunks(length: int, max_n: int) -> list[int]:
    """Sizes of the chunks one segment of ``length`` items is cut into (at most ``max_n``)."""
    return [min(max_n, length - a) for a in range(0, length, max_n)]


def merge_groups(count: int, m: int, max_n: int) -> list[range]:
    """Consecutive groups of candidate lists merged by one job each: ``max_n // m`` lists (of
    at most ``m`` items each) per group."""
    g = max(2, max_n // m)
    return [range(a, min(a + g, count)) for a in range(0, count, g)]


def plan_round(lengths: Sequence[int], m: int, max_n: int) -> list[tuple[str, int, int]]:
    """The Stage I jobs ``(phase, n, k)`` of one round that selects ``m`` of items whose
    remaining segment lengths are ``lengths``: the same plan :func:`sorter_schedule` runs, from
    sizes only (data-independent)."""
    jobs: list[tuple[str, int, int]] = []
    sizes: list[int] = []
    for length in lengths:
        for n in scan_chunks(length, max_n):
            if n > m:
                jobs.append(("scan", n, m))
            sizes.append(min(n, m))
    while len(sizes) > 1:
        nxt = []
        for grp in merge_groups(len(sizes), m, max_n):
            n = sum(sizes[i] for i in grp)
            if n > m:
                jobs.append(("merge", n, m))
            nxt.append(min(n, m))
        sizes = nxt
    return jobs


Schedule = Generator[SelectJob, list[int], list[list[int]]]


def _sorter_keys(keys: Sequence[Sequence[int]]) -> list[list[int]]:
    segs = [_values(s, f"keys[{i}]") for i, s in enumerate(keys)]
    for i, s in enumerate(segs):
        if any(not isinstance(v, int) or v < 0 for v in s):
            raise ParamError(f"keys[{i}] must hold unsigned integer sorter keys")
    return segs


def round_schedule(keys: Sequence[Sequence[int]], k: int, *, max_n: int,
                   max_k: int) -> Schedule:
    """The re-streaming schedule, a baseline for :func:`sorter_schedule`: every round re-streams
    every token not yet kept (``ceil(K / m)`` full passes). Same protocol and result as
    :func:`sorter_schedule`."""
    segs = _sorter_keys(keys)
    total = sum(len(s) for s in segs)
    remaining = [list(range(len(s))) for s in segs]      # positions not yet kept, ascending
    kept: list[list[int]] = [[] for _ in segs]
    for rnd, m in enumerate(round_budgets(total, k, max_n, max_k)):
        lists: list[list[tuple[int, int]]] = []          # (segment, position), flat order
        for s, rem in enumerate(remaining):
            for a in range(0, len(rem), max_n):
                chunk = rem[a:a + max_n]
                if len(chunk) > m:
                    sel = yield SelectJob(tuple(segs[s][p] for p in chunk), m, "scan", rnd, 0)
                    chunk = [chunk[j] for j in _checked(sel, len(chunk), m)]
                lists.append([(s, p) for p in chunk])
        level = 0
        while len(lists) > 1:
            level += 1
            nxt = []
            for grp in merge_groups(len(lists), m, max_n):
                cand = [item for i in grp for item in lists[i]]
                if len(cand) > m:
                    sel = yield SelectJob(tuple(segs[s][p] for s, p in cand), m, "merge", rnd,
                                          level)
                    cand = [cand[j] for j in _checked(sel, len(cand), m)]
                nxt.append(cand)
            lists = nxt
        for s, p in lists[0] if lists else []:
            kept[s].append(p)
        for s in range(len(segs)):
            taken = set(kept[s])
            remaining[s] = [p for p in remaining[s] if p not in taken]
    return [sorted(x) for x in kept]


@dataclass
class _Node:
    """A node of the buffered schedule's selection tree over flat ordinals ``[lo, hi)``: a leaf
    is one chunk (at most ``max_n`` tokens of one segment), an internal node a group of
    consecutive children. ``buf`` is the top ``len(buf)`` of the subtree's tokens not kept yet
    (flat order; kept tokens are dropped lazily), ``size`` how many such tokens the subtree
    holds."""

    lo: int
    hi: int
    children: list[_Node]
    level: int
    size: int
    buf: list[int]
    parent: _Node | None = None

    def live(self, taken: bytearray) -> list[int]:
        self.buf = [i for i in self.buf if not taken[i]]
        return self.buf

    def exhausted(self, taken: bytearray) -> bool:
        return len(self.live(taken)) == self.size


def _tree(segs: list[list[int]], m: int, max_n: int) -> list[list[_Node]]:
    """The levels of the selection tree (leaves first): chunks as in :func:`scan_chunks`, then
    groups as in :func:`merge_groups`, the same shape :func:`plan_round` prices."""
    leaves: list[_Node] = []
    base = 0
    for seg in segs:
        a = base
        for n in scan_chunks(len(seg), max_n):
            leaves.append(_Node(a, a + n, [], 0, n, []))
            a += n
        base += len(seg)
    levels = [leaves]
    while len(levels[-1]) > 1:
        kids = levels[-1]
        up = []
        for grp in merge_groups(len(kids), m, max_n):
            ch = [kids[i] for i in grp]
            node = _Node(ch[0].lo, ch[-1].hi, ch, len(levels), sum(c.size for c in ch), [])
            for c in ch:
                c.parent = node
            up.append(node)
        levels.append(up)
    return levels


def sorter_schedule(keys: Sequence[Sequence[int]], k: int, *, max_n: int,
                    max_k: int) -> Schedule:
    """Run the global top ``k`` of ``keys`` (unsigned sorter keys per segment) as Stage I jobs.

    A generator: it yields :class:`SelectJob` s in the order the sorter runs them and must be
    sent, for each, the labels the sorter selected (ascending); it returns the kept positions
    per segment, equal to :func:`global_topk` (``keys``, ``k``). Drive it with
    :func:`run_schedule` (any job runner) or by hand (the cocotb testbench). Every job has
    ``n <= max_n`` and ``k <= max_k``.

    The *buffered* schedule (docs/sorter.md, "G-AdaKV"): the first round is :func:`plan_round`'s
    pass (every chunk scanned for its top ``m = min(K, max_k, max_n // 2)``, the candidate
    lists merged up a tree of ``max_n // m`` children per node), and every node keeps its
    list. A later round takes the next ``min(m, K - kept)`` at the root from the lists that
    are left and refills a child only when the round may need more of it than its list holds:
    the child is not exhausted, its list is shorter than the round's ``k`` and the parent's
    selection took all of it (otherwise some listed token lost, so every unlisted token of
    that child loses too). The refill (a re-scan of a chunk's tokens not kept yet, or a merge
    one level down, recursively) and one repeat of the parent's job then make it exact; a
    repeat never finds another short child, because refilled lists only grow the candidates.
    """
    segs = _sorter_keys(keys)
    _check_sorter(max_n, max_k)
    total = sum(len(s) for s in segs)
    want = min(_check_k(k), total)
    kept: list[list[int]] = [[] for _ in segs]
    if want == 0:
        return kept
    m = min(max_k, max_n // 2, want)
    flat = [v for seg in segs for v in seg]
    levels = _tree(segs, m, max_n)
    root = levels[-1][0]
    taken = bytearray(total)
    rnd = 0

    def select(cand: list[int], kk: int, phase: str, level: int) -> Schedule:
        if len(cand) <= kk:
            return list(cand)
        sel = yield SelectJob(tuple(flat[i] for i in cand), kk, phase, rnd, level)
        return [cand[j] for j in _checked(sel, len(cand), kk)]

    def fill(v: _Node, kk: int) -> Schedule:
        """``v.buf`` = the top ``kk`` of ``v``'s tokens not kept yet."""
        if not v.children:
            rem = [i for i in range(v.lo, v.hi) if not taken[i]]
            v.buf = yield from select(rem, kk, "scan", 0)
            return v.buf
        for repeat in range(2):
            cand = [i for c in v.children for i in c.live(taken)]
            sel = yield from select(cand, kk, "merge", v.level)
            chosen = set(sel)
            short = [c for c in v.children if len(c.buf) < kk and not c.exhausted(taken)
                     and all(i in chosen for i in c.buf)]
            if not short:
                break
            if repeat:
                raise AssertionError("a repeated merge found another short child")
            for c in short:
                yield from fill(c, m)
        v.buf = sel
        return sel

    for nodes in levels:                                 # the first round: plan_round's pass
        for v in nodes:
            if v.children:
                cand = [i for c in v.children for i in c.buf]
                v.buf = yield from select(cand, m, "merge", v.level)
            else:
                v.buf = yield from select(list(range(v.lo, v.hi)), m, "scan", 0)
    done = 0
    while True:
        for i in root.buf:
            taken[i] = 1
            node: _Node | None = _leaf_of(levels[0], i)
            while node is not None:
                node.size -= 1
                node = node.parent
        done += len(root.buf)
        if done >= want:
            break
        rnd += 1
        yield from fill(root, min(m, want - done))
    base = 0
    for s, seg in enumerate(segs):
        kept[s] = [i - base for i in range(base, base + len(seg)) if taken[i]]
        base += len(seg)
    return kept


def _leaf_of(leaves: list[_Node], i: int) -> _Node:
    lo, hi = 0, len(leaves)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if leaves[mid].lo <= i:
            lo = mid
        else:
            hi = mid
    return leaves[lo]


def schedule_cycles(keys: Sequence[Sequence[int]], k: int, params: Any, *,
                    schedule: Callable[..., Schedule] | None = None) -> dict[str, int]:
    """Run ``schedule`` (default :func:`sorter_schedule`) on ``keys`` with :func:`fast_runner`
    and sum :meth:`~hikv.hw.sorter_timing.SorterTiming.stage1_cycles` over its jobs (the
    sorter runs one job at a time; idle cycles between jobs not counted): ``cycles``, ``jobs``,
    ``scan_jobs``, ``merge_jobs``, ``rounds``, ``items`` (scores streamed)."""
    t = SorterTiming.from_params(params)
    sched = (schedule or sorter_schedule)(keys, k, max_n=t.max_n, max_k=t.max_k)
    out = {"cycles": 0, "jobs": 0, "scan_jobs": 0, "merge_jobs": 0, "rounds": 0, "items": 0}
    try:
        job = next(sched)
        while True:
            out["cycles"] += t.stage1_cycles(len(job.keys), job.k)
            out["jobs"] += 1
            out[f"{job.phase}_jobs"] += 1
            out["rounds"] = max(out["rounds"], job.round + 1)
            out["items"] += len(job.keys)
            job = sched.send(fast_runner(job))
    except StopIteration:
        pass
    return out


def global_topk_cycles(params: SorterParams, *, segments: int, length: int,
                       k: int, keys: Any = None) -> dict[str, int | bool]:
    """Sorter cycles of G-AdaKV's global top ``k`` over ``segments`` score vectors of
    ``length`` tokens each (one per (layer, KV head)) as Stage I jobs (docs/sorter.md,
    "G-AdaKV"): the sum of :meth:`~hikv.hw.sorter_timing.SorterTiming.stage1_cycles` over the
    jobs (the sorter runs one job at a time; the few idle cycles between jobs are not counted).

    Without ``keys`` (sizes only) the jobs are those of :func:`round_schedule`, which
    re-streams every token not kept yet in each of its ``ceil(k / min(max_k, max_n // 2))``
    rounds: its first round is exact and is also the first round of the buffered
    :func:`sorter_schedule` (``exact`` true for one round); its later rounds, priced with whole
    segments, are an upper bound of the round schedule (``exact`` false). With ``keys`` (the sorter
    keys, ``segments`` lists of ``length``) the buffered schedule is run on them and its cycles are
    exact for that data (``exact`` true): later rounds re-scan or re-merge only what they use up.

    Returns ``rounds``, ``jobs``, ``scan_jobs``, ``merge_jobs``, ``cycles``, ``exact`` and, with
    ``keys``, ``items`` (scores streamed into the sorter).
    """
    check_job_arg("segments", segments, 1, 1 << 40)
    check_job_arg("length", length, 1, 1 << 40)
    check_job_arg("k (global budget)", k, 0, segments * length)
    t = SorterTiming.from_params(params)
    if keys is not None:
        if len(keys) != segments or any(len(s) != length for s in keys):
            raise ParamError(f"keys must be {segments} segments of {length} sorter keys")
        return {**schedule_cycles(keys, k, params), "exact": True}
    budgets = round_budgets(segments * length, k, t.max_n, t.max_k)
    scan = merge = cycles = 0
    for m in budgets:
        for phase, n, kk in plan_round([length] * segments, m, t.max_n):
            cycles += t.stage1_cycles(n, kk)
            scan += phase == "scan"
            merge += phase == "merge"
    return {"rounds": len(budgets), "jobs": scan + merge, "scan_jobs": scan,
            "merge_jobs": merge, "cycles": cycles, "exact": len(budgets) <= 1}


def fast_runner(job: SelectJob) -> list[int]:
    """A job run by its definition (top ``k`` by key, ties to the lower label; labels
    ascending): what :func:`stage1_runner` returns, fast enough for paper-scale problems."""
    keys = job.keys
    return sorted(sorted(range(len(keys)), key=lambda i: (-keys[i], i))[:job.k])


def _checked(sel: Any, n: int, m: int) -> list[int]:
    """The labels a job returned, checked: ``min(m, n)`` distinct, ascending, in ``[0, n)``."""
    out = [int(x) for x in (sel if sel is not None else [])]
    ok = len(out) == min(m, n) and all(0 <= a < b < n for a, b in zip(out, out[1:], strict=False))
    if not ok or (out and not 0 <= out[0] < n):
        raise ParamError(f"a Stage I job of n = {n}, k = {m} must return {min(m, n)} distinct "
                         f"ascending labels in [0, {n}), got {out[:8]}")
    return out


def run_schedule(schedule: Schedule, runner: Callable[[SelectJob], list[int]]) -> \
        tuple[list[list[int]], list[SelectJob]]:
    """Drive :func:`sorter_schedule` with ``runner`` (a job -> selected labels); return the kept
    positions per segment and the jobs run, in order."""
    jobs: list[SelectJob] = []
    try:
        job = next(schedule)
        while True:
            jobs.append(job)
            job = schedule.send(runner(job))
    except StopIteration as stop:
        return stop.value, jobs


def stage1_runner(job: SelectJob) -> list[int]:
    """A job run by the sorter's golden model (:func:`hikv.model.refs.sorter.stage1_topk`)."""
    from hikv.model.refs.sorter import stage1_topk

    return [i for _, i in stage1_topk(list(job.keys), list(job.labels), job.k)]
