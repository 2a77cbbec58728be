"""G-AdaKV's global top-k (hikv.model.methods.global_select): the definition, the exactness of its
mapping to Stage I sorter jobs (per-chunk top-k, then merges), and the cycle count of that plan
(hikv.model.methods.global_select.global_topk_cycles)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from hikv.hw.sorter_timing import SorterTiming
from hikv.model.methods.global_select import (
    SelectJob,
    fast_runner,
    global_topk,
    global_topk_cycles,
    plan_round,
    round_budgets,
    round_schedule,
    run_schedule,
    sorter_schedule,
    stage1_runner,
)
from hikv.model.refs.sorter import stage1_topk
from hikv.params import ParamError
from hikv.presets import get_preset


def _brute(scores: list[list[float]], k: int) -> list[list[int]]:
    """Rank every (score, flat index) by hand: the slow, obvious reading of the definition."""
    flat = []
    base = 0
    for s, seg in enumerate(scores):
        for i, v in enumerate(seg):
            flat.append((v, base + i, s, i))
        base += len(seg)
    chosen = set()
    for _ in range(min(k, len(flat))):
        best = None
        for item in flat:
            if item[1] in chosen:
                continue
            if best is None or item[0] > best[0] or (item[0] == best[0] and item[1] < best[1]):
                best = item
        chosen.add(best[1])
    return [[i for v, f, ss, i in flat if ss == s and f in chosen] for s in range(len(scores))]


def _random_scores(rng: random.Random, ties: bool) -> list[list[int]]:
    hi = rng.choice([1, 3]) if ties else 1000
    return [[rng.randint(0, hi) for _ in range(rng.randint(0, 40))]
            for _ in range(rng.randint(1, 6))]


@pytest.mark.parametrize("seed", range(4))
def test_global_topk_is_the_definition(seed: int) -> None:
    rng = random.Random(seed)
    for case in range(60):
        scores = _random_scores(rng, ties=case % 2 == 0)
        k = rng.randint(0, 1 + sum(map(len, scores)))
        got = global_topk(scores, k)
        assert got == _brute(scores, k), f"seed={seed} case={case} k={k} scores={scores}"
        assert sum(map(len, got)) == min(k, sum(map(len, scores)))


def test_global_topk_takes_numpy_and_torch_and_floats() -> None:
    rng = np.random.default_rng(5)
    scores = [rng.standard_normal(30).round(1) for _ in range(4)]
    want = global_topk([s.tolist() for s in scores], 25)
    assert global_topk(scores, 25) == want
    assert global_topk([torch.from_numpy(s) for s in scores], 25) == want
    # ties across segments: the earlier segment wins, then the lower position
    assert global_topk([[1.0, 2.0], [2.0, 2.0]], 2) == [[1], [0]]


@pytest.mark.parametrize("bad, match", [
    (([[1.0, float("nan")]], 1), "NaN"),
    (([[1.0]], -1), "global budget k = -1"),
    (([[[1.0]]], 1), "one-dimensional"),
    (([["a"]], 1), "real numbers"),
])
def test_global_topk_rejects_bad_input(bad: tuple, match: str) -> None:
    with pytest.raises(ParamError, match=match):
        global_topk(*bad)


@pytest.mark.parametrize("seed", range(3))
def test_chunk_topk_contains_the_global_members_of_the_chunk(seed: int) -> None:
    """The lemma the mapping rests on: cut the flat order into any contiguous chunks; each
    chunk's own top min(K, |chunk|) (ties to the lower label) holds every global member of it,
    and the top K of the union of those candidates (labels = flat ordinals) is the global top K.
    """
    rng = random.Random(100 + seed)
    for case in range(80):
        keys = [rng.randint(0, rng.choice([0, 2, 50])) for _ in range(rng.randint(1, 120))]
        k = rng.randint(1, len(keys) + 2)
        want = set(global_topk([keys], k)[0])
        cuts = sorted(rng.sample(range(1, len(keys) + 1), rng.randint(0, min(6, len(keys)))))
        cand: list[int] = []
        a = 0
        for b in [*cuts, len(keys)]:
            if b <= a:
                continue
            top = {a + i for _, i in stage1_topk(keys[a:b], list(range(b - a)), k)}
            members = {f for f in want if a <= f < b}
            assert members <= top, f"seed={seed} case={case} chunk=[{a},{b}) k={k} keys={keys}"
            cand.extend(sorted(top))
            a = b
        merged = stage1_topk([keys[f] for f in cand], list(range(len(cand))), k)
        assert {cand[i] for _, i in merged} == want, f"seed={seed} case={case} k={k}"


@pytest.mark.parametrize("max_n, max_k", [(64, 16), (16, 8), (8, 16), (4096, 512)])
def test_sorter_schedule_equals_global_topk(max_n: int, max_k: int) -> None:
    rng = random.Random(max_n * 7 + max_k)
    for case in range(40):
        keys = [[rng.randint(0, rng.choice([1, 3, 255])) for _ in range(rng.randint(0, 150))]
                for _ in range(rng.randint(1, 7))]
        k = rng.randint(0, sum(map(len, keys)) + 3)
        got, jobs = run_schedule(sorter_schedule(keys, k, max_n=max_n, max_k=max_k),
                                 stage1_runner)
        msg = f"max_n={max_n} max_k={max_k} case={case} k={k} keys={keys}"
        assert got == global_topk(keys, k), msg
        assert all(1 <= j.k <= max_k and j.k < len(j.keys) <= max_n for j in jobs), msg
        rounds = round_budgets(sum(map(len, keys)), k, max_n, max_k)
        assert sum(rounds) == min(k, sum(map(len, keys))), msg
        # the first round's jobs are the size-only plan the cost model prices
        first = [(j.phase, len(j.keys), j.k) for j in jobs if j.round == 0]
        if rounds:
            assert first == plan_round([len(s) for s in keys], rounds[0], max_n), msg


def test_schedule_checks_what_the_runner_returns() -> None:
    sched = sorter_schedule([[3, 1, 2, 5, 4]], 2, max_n=64, max_k=16)
    next(sched)
    with pytest.raises(ParamError, match="must return 2 distinct ascending labels"):
        sched.send([3, 0])


def test_global_topk_cycles_is_the_sum_over_the_jobs_run() -> None:
    cfg = get_preset("tiny")
    t = SorterTiming.from_params(cfg.sorter)
    rng = random.Random(9)
    segs, length = cfg.model.layers * cfg.model.kv_heads * 3, cfg.context
    for k in (1, 5, t.max_k, t.max_k + 1, 3 * t.max_k):
        keys = [[rng.randint(0, 3) for _ in range(length)] for _ in range(segs)]
        _, jobs = run_schedule(sorter_schedule(keys, k, max_n=t.max_n, max_k=t.max_k),
                               stage1_runner)
        got = global_topk_cycles(cfg.sorter, segments=segs, length=length, k=k)
        run = sum(t.stage1_cycles(len(j.keys), j.k) for j in jobs)
        assert got["jobs"] == got["scan_jobs"] + got["merge_jobs"]
        if got["exact"]:
            assert got["rounds"] == 1 and got["cycles"] == run and got["jobs"] == len(jobs)
        else:
            assert got["rounds"] > 1 and got["cycles"] >= run and got["jobs"] >= len(jobs)


def test_global_topk_cycles_rejects_bad_sizes() -> None:
    p = get_preset("tiny").sorter
    with pytest.raises(ParamError, match=r"k \(global budget\) = 65 is out of range"):
        global_topk_cycles(p, segments=1, length=64, k=65)
    with pytest.raises(ParamError, match="segments = 0 is out of range"):
        global_topk_cycles(p, segments=0, length=64, k=1)


def _problem(rng: random.Random, shape: str, max_n: int) -> list[list[int]]:
    """Random segments of sorter keys: ``ties`` (two to four distinct keys), ``wide`` (distinct
    keys mostly), ``banded`` (segment s entirely above segment s + 1: the global top K is
    whole segments, every list is used up in turn), ``one`` (one segment holds the best keys),
    ``equal`` (every key the same: flat order alone decides)."""
    n_seg = rng.randint(1, 7)
    lens = [rng.randint(0, 3 * max_n + 3) for _ in range(n_seg)]
    if shape == "ties":
        hi = rng.choice([1, 3])
        return [[rng.randint(0, hi) for _ in range(n)] for n in lens]
    if shape == "wide":
        return [[rng.randint(0, 1 << 16) for _ in range(n)] for n in lens]
    if shape == "banded":
        return [[(n_seg - s) * 64 + rng.randint(0, 63) for _ in range(n)]
                for s, n in enumerate(lens)]
    if shape == "one":
        hot = rng.randrange(n_seg)
        return [[rng.randint(0, 7) + (100 if s == hot else 0) for _ in range(n)]
                for s, n in enumerate(lens)]
    return [[5] * n for n in lens]


@pytest.mark.parametrize("max_n, max_k", [(64, 16), (16, 8), (8, 16), (32, 4), (256, 32)])
@pytest.mark.parametrize("shape", ["ties", "wide", "banded", "one", "equal"])
def test_buffered_schedule_equals_global_topk(max_n: int, max_k: int, shape: str) -> None:
    """The buffered schedule (lists kept, refilled only when used up) keeps exactly
    global_topk's sets (and the round schedule's), also for budgets of many rounds; its jobs
    fit the sorter; its first round is plan_round's pass."""
    seed = max_n * 1000 + max_k * 10 + len(shape)
    rng = random.Random(seed)
    for case in range(25):
        keys = _problem(rng, shape, max_n)
        total = sum(map(len, keys))
        k = rng.choice([0, 1, max_k, max_k + 1, rng.randint(0, total + 2), total,
                        rng.randint(total // 2, total + 1)])
        msg = f"seed={seed} shape={shape} case={case} k={k} lens={[len(s) for s in keys]}"
        got, jobs = run_schedule(sorter_schedule(keys, k, max_n=max_n, max_k=max_k),
                                 stage1_runner)
        assert got == global_topk(keys, k), msg
        assert all(1 <= j.k <= max_k and j.k < len(j.keys) <= max_n for j in jobs), msg
        rounds = round_budgets(total, k, max_n, max_k)
        first = [(j.phase, len(j.keys), j.k) for j in jobs if j.round == 0]
        if rounds:
            assert first == plan_round([len(s) for s in keys], rounds[0], max_n), msg
        old, _ = run_schedule(round_schedule(keys, k, max_n=max_n, max_k=max_k),
                                     fast_runner)
        assert old == got, msg


def test_fast_runner_is_the_sorter_reference() -> None:
    rng = random.Random(5)
    for case in range(200):
        n = rng.randint(1, 80)
        keys = tuple(rng.randint(0, rng.choice([1, 3, 255])) for _ in range(n))
        job = SelectJob(keys, rng.randint(1, n), "scan", 0, 0)
        assert fast_runner(job) == stage1_runner(job), f"seed=5 case={case} {keys} k={job.k}"


def test_global_topk_cycles_with_keys_is_the_buffered_run() -> None:
    """With the keys, global_topk_cycles prices the buffered schedule's jobs exactly; it is
    far below the round schedule's count when the budget takes many rounds."""
    cfg = get_preset("tiny")
    t = SorterTiming.from_params(cfg.sorter)
    rng = random.Random(11)
    segs, length = 12, cfg.context
    for k in (1, t.max_k, t.max_k + 1, segs * length // 4, segs * length):
        keys = [[rng.randint(0, 255) for _ in range(length)] for _ in range(segs)]
        _, jobs = run_schedule(sorter_schedule(keys, k, max_n=t.max_n, max_k=t.max_k),
                               stage1_runner)
        got = global_topk_cycles(cfg.sorter, segments=segs, length=length, k=k, keys=keys)
        assert got["exact"] and got["jobs"] == len(jobs), f"seed=11 k={k}"
        assert got["cycles"] == sum(t.stage1_cycles(len(j.keys), j.k) for j in jobs)
        before = global_topk_cycles(cfg.sorter, segments=segs, length=length, k=k)
        assert got["cycles"] <= before["cycles"], f"seed=11 k={k}"
    with pytest.raises(ParamError, match="keys must be 12 segments"):
        global_topk_cycles(cfg.sorter, segments=12, length=length, k=1, keys=keys[:3])
