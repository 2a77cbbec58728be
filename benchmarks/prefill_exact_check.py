"""One real seed-suite trial (``--task``, both protocols sharing the prompt pass, the methods the
length's perplexity cell lets run) with the current prompt pass and with the earlier one that
masked the full square (kept in ``tests/test_accuracy_prefill.py``): are the rows identical?

    python benchmarks/prefill_exact_check.py --length 2048 --ppl-rows RUN/cells/ppl_2048.json

Prints the rows' count, whether they are equal (answers, scores, stops) and each side's
process CPU seconds (on a loaded machine these carry contention; the first side also pays
the warm-up). Not a test: it needs the real model.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--task", default="passkey")
    ap.add_argument("--suite", default="seed-smollm2")
    ap.add_argument("--ppl-rows", default=None)
    ap.add_argument("--cache", default=None)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_accuracy_prefill import masked_square_pass

    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import SEED_SUITES, Cell, run_cells, worker_env
    from hikv.model.lm import route as lm_route

    ppl = read_rows(Path(a.ppl_rows))[0] if a.ppl_rows else []
    suite = dataclasses.replace(SEED_SUITES[a.suite], trials=1, lengths=(a.length,))
    env = worker_env(suite.model, Path(a.cache) if a.cache else None, "default", "cpu", 1)
    pair = [Cell("task", a.length, p, a.task) for p in ("prompt", "follow-up")]
    t = time.process_time()
    new = run_cells(pair, suite, env, seed=0, ppl_rows=ppl)
    t_new = time.process_time() - t
    lm_route.prefill_pass = masked_square_pass
    t = time.process_time()
    old = run_cells(pair, suite, env, seed=0, ppl_rows=ppl)
    t_old = time.process_time() - t
    print(f"N = {a.length}, {a.task}: {sum(len(v) for v in new.values())} rows, identical: "
          f"{new == old}; trial CPU s: current pass {t_new:.1f}, earlier pass {t_old:.1f}")
    return 0 if new == old else 1


if __name__ == "__main__":
    sys.exit(main())
