"""The task filter of seed-gemma at one length (full KV alone, adaptive):
``python run.py OUT [CACHE] [--length N]`` (N: 8192, the default, or 16384; README.md here;
resumes from ``OUT/cells``)."""

import argparse
import dataclasses
from pathlib import Path

from hikv.model.seed_suite import SEED_SUITES, run_seed_suite

ap = argparse.ArgumentParser()
ap.add_argument("out", type=Path)
ap.add_argument("cache", type=Path, nargs="?")
ap.add_argument("--length", type=int, default=8192, choices=SEED_SUITES["seed-gemma"].lengths)
a = ap.parse_args()
suite = dataclasses.replace(SEED_SUITES["seed-gemma"], lengths=(a.length,), families=())
run_seed_suite(suite, a.out, cache=a.cache, threads=1, batch=4)
