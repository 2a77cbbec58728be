"""Peak memory of one perplexity pass of the accuracy harness (a benchmark, not a test): the
first ``--methods`` methods of a seed suite at ``--length`` tokens, decoded ``--batch`` side by
side, as a suite's perplexity cell runs them (:func:`hikv.model.accuracy.experiments.perplexity`).

    python benchmarks/accuracy_memory.py --length 4096 --methods 24 --batch 12 --decode 8

Prints the process's peak resident memory (``ru_maxrss``) after loading the model and after
the pass, and the pass's process CPU seconds. Each batch holds every method's K/V copy of the
window (``N x layers x KV heads x d x 4 B x 2`` per method: 188 MB at 4k on SmolLM2-135M), so
the peak shows how many batches' caches are alive at once. Run it in a fresh process per
setting (the peak is per process).
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="seed-smollm2")
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--methods", type=int, default=24, help="the suite's first M methods")
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--decode", type=int, default=8, help="decoded tokens of the window")
    ap.add_argument("--cache", default=None)
    a = ap.parse_args(argv)
    from pathlib import Path

    from hikv.model.accuracy import experiments as A
    from hikv.model.accuracy.seed_spec import EXTRA_BASELINES, SEED_SUITES, suite_specs
    from hikv.model.accuracy.seed_suite import worker_env
    from hikv.params import ParamError

    if a.suite not in SEED_SUITES:
        raise SystemExit(f"--suite {a.suite!r} is not one of {sorted(SEED_SUITES)}")
    suite = SEED_SUITES[a.suite]
    for name, v, lo in (("--length", a.length, 64), ("--methods", a.methods, 1),
                        ("--batch", a.batch, 1), ("--decode", a.decode, 1)):
        if v < lo:
            raise SystemExit(f"{name} = {v} is out of range: allowed >= {lo}")
    if a.decode >= a.length - 1:
        raise SystemExit(f"--decode = {a.decode} is out of range: allowed [1, {a.length - 2}]")
    env = worker_env(suite.model, Path(a.cache) if a.cache else None, "default", "cpu", 1)
    extra = EXTRA_BASELINES if a.suite == "seed-smollm2" else ()
    full = dataclasses.replace(suite, families=suite.families + extra)
    try:
        specs = [sp for sp, _ in suite_specs(full, env["cfg"], a.length)][: a.methods]
    except ParamError as e:
        raise SystemExit(str(e)) from None
    loaded = _peak_mb()
    wins = A.text_windows(env["lm"], env["text"], a.length, 1)
    t = time.process_time()
    A.perplexity(env["lm"], specs, env["cfg"], wins, a.length - a.decode, batch=a.batch)
    cpu = time.process_time() - t
    print(f"N = {a.length}, {len(specs)} methods, batch {a.batch}, {a.decode} decoded: "
          f"peak RSS {loaded:.0f} MB after loading, {_peak_mb():.0f} MB after the pass; "
          f"pass {cpu:.1f} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
