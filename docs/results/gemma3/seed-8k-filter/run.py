"""A part of seed-gemma at one length, run alone: by default the task filter (full KV alone,
adaptive): ``python run.py OUT [CACHE] [--length N] [--tasks T ...] [--families F ...]
[--batch B]`` (N: 8192, the default, or 16384; README.md here; resumes from ``OUT/cells``).

``--families`` runs those method families too (on a task cell: the ones the length's
perplexity cell in ``OUT/cells`` lets run); ``--tasks`` restricts the task cells. Cells of
another part can be copied into ``OUT/cells`` (or this part's into the whole suite's): a cell
file lacking some of a suite's methods runs just those."""

import argparse
import dataclasses
from pathlib import Path

from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite
from hikv.params import ParamError

s = SEED_SUITES["seed-gemma"]
ap = argparse.ArgumentParser()
ap.add_argument("out", type=Path)
ap.add_argument("cache", type=Path, nargs="?")
ap.add_argument("--length", type=int, default=8192, choices=s.lengths)
ap.add_argument("--tasks", nargs="+", default=list(s.tasks), choices=s.tasks)
ap.add_argument("--families", nargs="+", default=[])
ap.add_argument("--batch", type=int, default=4)
a = ap.parse_args()
if a.batch < 1:
    ap.error(f"--batch = {a.batch} is out of range: allowed >= 1")
suite = dataclasses.replace(s, lengths=(a.length,), tasks=tuple(a.tasks),
                            families=tuple(a.families))
try:
    run_seed_suite(suite, a.out, cache=a.cache, threads=1, batch=a.batch)
except ParamError as e:          # a bad family label, cache, ...
    ap.error(str(e))
