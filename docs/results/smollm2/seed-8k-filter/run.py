"""The 8k task filter of seed-smollm2 (full KV alone, adaptive): ``python run.py OUT [CACHE]``
(README.md here; resumes from ``OUT/cells``)."""

import dataclasses
import sys
from pathlib import Path

from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite

suite = dataclasses.replace(SEED_SUITES["seed-smollm2"], lengths=(8192,), families=(),
                            tasks=("passkey", "niah_single"))
run_seed_suite(suite, Path(sys.argv[1]), cache=Path(sys.argv[2]) if len(sys.argv) > 2 else None,
               threads=1)
