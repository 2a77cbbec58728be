"""The 8k perplexity cell of seed-gemma, every method family (the suite's, the six new baselines
and ThinK alone): ``python run_ppl_families.py OUT [CACHE]``.

On an empty ``OUT`` it runs one family more per pass, so each pass's rows are on disk when it
ends (a perplexity cell is written when it finishes). A pass writes the cell with its own
families' methods only (it runs those the file lacks), so where ``OUT/cells`` already holds the
cell (a copy of ``cells/`` here, or an interrupted run) one pass with every family runs just
the missing methods and keeps the rest."""
import dataclasses
import sys
from pathlib import Path

from hikv.model.seed_spec import EXTRA_BASELINES_GEMMA
from hikv.model.seed_suite import SEED_SUITES, run_seed_suite

out = Path(sys.argv[1])
s = SEED_SUITES["seed-gemma"]
families = s.families + tuple(EXTRA_BASELINES_GEMMA)
first = len(families) if (out / "cells" / "ppl_8192.json").is_file() else 1
for i in range(first, len(families) + 1):
    suite = dataclasses.replace(s, lengths=(8192,), tasks=(), families=families[:i])
    print(f"pass {i}/{len(families)}: + {families[i - 1]}", flush=True)
    run_seed_suite(suite, out, cache=Path(sys.argv[2]) if len(sys.argv) > 2 else None,
                   threads=1, batch=8)
