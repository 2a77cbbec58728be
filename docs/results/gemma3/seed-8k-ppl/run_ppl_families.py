"""A perplexity cell of seed-gemma with every method family (the suite's, the six extra baselines
and ThinK alone): ``python run_ppl_families.py OUT [CACHE] [--length N] [--per-pass K]``
(N: 8192, the default, or 16384).

On an empty ``OUT`` it runs ``K`` families more per pass (default 1), so each pass's rows are on
disk when it ends (a perplexity cell is written when it finishes). A pass writes the cell with
its own families' methods only (it runs those the file lacks), so where ``OUT/cells`` already
holds the cell (a copy of ``cells/`` here, or an interrupted run) one pass with every family
runs just the missing methods and keeps the rest. ``--families A B ...`` runs only those (a part
of the cell, to run side by side with other parts and merge with ``merge_cells.py``)."""
import argparse
import dataclasses
from pathlib import Path

from hikv.model.accuracy.seed_spec import EXTRA_BASELINES_GEMMA
from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite
from hikv.params import ParamError

s = SEED_SUITES["seed-gemma"]
ap = argparse.ArgumentParser()
ap.add_argument("out", type=Path)
ap.add_argument("cache", type=Path, nargs="?")
ap.add_argument("--length", type=int, default=8192, choices=s.lengths)
ap.add_argument("--per-pass", type=int, default=1)
ap.add_argument("--families", nargs="+")
a = ap.parse_args()
if a.per_pass < 1:
    ap.error(f"--per-pass = {a.per_pass} is out of range: allowed >= 1")
families = tuple(a.families) if a.families else s.families + tuple(EXTRA_BASELINES_GEMMA)
first = len(families) if (a.out / "cells" / f"ppl_{a.length}.json").is_file() \
    else min(a.per_pass, len(families))
ends = list(range(first, len(families), a.per_pass)) + [len(families)]
for prev, i in zip([0, *ends[:-1]], ends, strict=True):
    suite = dataclasses.replace(s, lengths=(a.length,), tasks=(), families=families[:i])
    print(f"pass to {i}/{len(families)}: + {families[prev:i]}", flush=True)
    try:
        run_seed_suite(suite, a.out, cache=a.cache, threads=1, batch=8)
    except ParamError as e:          # a bad family label, cache, ...
        ap.error(str(e))
