"""The 8k task filter of seed-gemma (full KV alone, adaptive): ``python run.py OUT [CACHE]``
(README.md here; resumes from ``OUT/cells``)."""

import dataclasses
import sys
from pathlib import Path

from hikv.model.seed_suite import SEED_SUITES, run_seed_suite

suite = dataclasses.replace(SEED_SUITES["seed-gemma"], lengths=(8192,), families=())
run_seed_suite(suite, Path(sys.argv[1]), cache=Path(sys.argv[2]) if len(sys.argv) > 2 else None,
               threads=1, batch=4)
