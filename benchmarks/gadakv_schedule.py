"""Sorter cycles of G-AdaKV's global top-K at a preset's scale: the buffered schedule
(:func:`hikv.model.methods.global_select.sorter_schedule`) on synthetic sorter keys against the
round schedule's sizes-only count (a benchmark, not CI; docs/sorter.md, "G-AdaKV").

Keys (``key_width`` bits, one local ``random.Random(seed)``): ``uniform`` (i.i.d.: every head
equally concentrated), ``skewed`` (head h's keys ``top * f_h * u**2`` with ``f_h`` log-uniform
over 1/16 .. 1: some heads dominate), ``banded`` (head h's keys all above head h + 1's: the
global top K is whole heads, each head's lists are used up in turn). Prints one line per
distribution: cycles, jobs, scans, merges, rounds, scores streamed::

    python benchmarks/gadakv_schedule.py --preset paper --length 32768     # ~25 min CPU
    python benchmarks/gadakv_schedule.py --preset default --with-rounds    # ~3 min CPU

The budget is ``layers x kv_heads x budget`` (HiKV's per-head budget, the preset's policy).
``--with-rounds`` also runs the round schedule on the same keys (slow at paper scale).
"""

from __future__ import annotations

import argparse
import random
import sys
import time


def keys_of(kind: str, segments: int, length: int, top: int, rng: random.Random
            ) -> list[list[int]]:
    if kind == "uniform":
        return [[rng.randint(0, top) for _ in range(length)] for _ in range(segments)]
    if kind == "skewed":
        out = []
        for _ in range(segments):
            f = 2.0 ** (-4 * rng.random())
            out.append([int(top * f * rng.random() ** 2) for _ in range(length)])
        return out
    w = max(1, top // segments)
    return [[top - h * w - rng.randint(0, w - 1) for _ in range(length)]
            for h in range(segments)]


def main(argv: list[str] | None = None) -> int:
    from hikv.model.methods.global_select import (
        global_topk_cycles,
        round_schedule,
        schedule_cycles,
    )
    from hikv.presets import get_preset

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="default")
    ap.add_argument("--length", type=int, default=None,
                    help="tokens per (layer, KV head) (default: the preset's context)")
    ap.add_argument("--kinds", nargs="+", default=["uniform", "skewed", "banded"],
                    choices=["uniform", "skewed", "banded"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--with-rounds", action="store_true",
                    help="also run the round schedule on the same keys")
    args = ap.parse_args(argv)
    cfg = get_preset(args.preset)
    n = args.length or cfg.context
    segs = cfg.model.layers * cfg.model.kv_heads
    k = min(segs * cfg.policy.budget, segs * n)
    if n < 1:
        ap.error(f"--length = {n} is out of range: allowed >= 1")
    top = (1 << cfg.sorter.key_width) - 1
    rng = random.Random(args.seed)
    print(f"{args.preset}: {segs} (layer, KV head) segments x {n} tokens, K = {k}, sorter "
          f"max_n = {cfg.sorter.max_n}, max_k = {cfg.sorter.max_k}")
    print("round schedule, sizes only (upper bound for several rounds):",
          global_topk_cycles(cfg.sorter, segments=segs, length=n, k=k))
    for kind in args.kinds:
        keys = keys_of(kind, segs, n, top, rng)
        t0 = time.perf_counter()
        got = schedule_cycles(keys, k, cfg.sorter)
        print(f"{kind}: buffered {got} ({time.perf_counter() - t0:.0f} s)", flush=True)
        if args.with_rounds:
            old = schedule_cycles(keys, k, cfg.sorter, schedule=round_schedule)
            print(f"{kind}: rounds {old}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
