"""How many trials would decide a task cell's undecided configurations, at the rates measured.

For every configuration of a committed task cell (``cells/<task>_<protocol>_<N>.json``) whose
non-inferiority verdict against full KV is ``undecided`` on the trials both ran, the measured
per-trial scores of both are repeated whole (60, 120, 180, ... trials for a 60-trial cell: the
same rates, the same discordant pairs per 60) until the lower bound of the paired difference
(:func:`hikv.model.accuracy.iso.task_difference_bound`, Newcombe's hybrid score interval,
one-sided ``--level``) clears ``-margin``. It prints the smallest such trial count, or that none
up to ``--max-repeats`` times the cell's trials does. A projection from the measured rates, not
a measurement: the next trials' scores are what they will be. Usage::

    python benchmarks/task_trials_needed.py \
        docs/results/gemma3/seed-ni/cells/niah_single_prompt_8192.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hikv.model.accuracy import iso as NI


def trials_needed(scores: list[float], full: list[float], *, level: float, margin: float,
                  max_repeats: int) -> int | None:
    """The smallest whole repeat of the paired trials whose bound clears ``-margin``."""
    k = min(len(scores), len(full))
    a, b = scores[:k], full[:k]
    for m in range(1, max_repeats + 1):
        if NI.task_difference_bound(a * m, b * m, level=level).low > -margin:
            return m * k
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cell", type=Path, help="a task cell's JSON (rows with per-trial scores)")
    ap.add_argument("--level", type=float, default=NI.NI_LEVEL,
                    help="one-sided confidence level (default %(default)s)")
    ap.add_argument("--margin", type=float, default=NI.TASK_MARGIN,
                    help="non-inferiority margin as a score fraction (default %(default)s)")
    ap.add_argument("--max-repeats", type=int, default=20,
                    help="largest multiple of the cell's trials tried (default %(default)s)")
    a = ap.parse_args(argv)
    if not 0.5 < a.level < 1:
        ap.error(f"--level {a.level} is out of range: allowed (0.5, 1)")
    if not 0 < a.margin < 1:
        ap.error(f"--margin {a.margin} is out of range: allowed (0, 1)")
    if a.max_repeats < 1:
        ap.error(f"--max-repeats {a.max_repeats} is out of range: allowed >= 1")
    try:
        rows = {r["label"]: r for r in json.loads(a.cell.read_text())["rows"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"{a.cell}: not a task cell ({e})", file=sys.stderr)
        return 2
    full = rows.get("full")
    if full is None or full.get("scores") is None:
        print(f"{a.cell}: no full-KV row with per-trial scores", file=sys.stderr)
        return 2
    f = full["scores"]
    print(f"{a.cell}: full KV {full['score_sum']:g}/{full['trials']}; one-sided {a.level:g}, "
          f"margin -{100 * a.margin:g} points")
    for label, r in rows.items():
        s = r.get("scores")
        if label == "full" or not s:
            continue
        b = NI.task_difference_bound(s, f, level=a.level)
        if NI.task_bound_verdict(b, a.margin) != "undecided":
            continue
        n = trials_needed(s, f, level=a.level, margin=a.margin, max_repeats=a.max_repeats)
        k = min(len(s), len(f))
        print(f"  {label}: {sum(s[:k]):g}/{k} against {sum(f[:k]):g}/{k}, lower bound "
              f"{100 * b.low:+.1f} points; decides at "
              + (f"{n} trials" if n else f"no count up to {a.max_repeats * k} trials"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
