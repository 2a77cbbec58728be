"""The 8k perplexity cell of seed-smollm2 with every method family, the six extra baselines and
ThinK alone included, on the two tasks the filter decided (so it starts no other task
filter): ``python run_ppl_families.py OUT [CACHE]`` with this folder's ``cells/`` copied into
``OUT/cells`` (docs/RESULTS.md, "Every model and length")."""
import dataclasses
import sys
from pathlib import Path

from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite

s = SEED_SUITES["seed-smollm2"]
suite = dataclasses.replace(s, lengths=(8192,), tasks=("passkey", "niah_single"),
                            families=s.families + ("streamingllm", "tova", "adakv", "gadakv",
                                                   "pyramidkv", "h2o/avg",
                                                   "hikv-none/k:think32"))
run_seed_suite(suite, Path(sys.argv[1]), cache=Path(sys.argv[2]) if len(sys.argv) > 2 else None,
               threads=1, batch=8)
