"""The co-design frontier of one model and context length: every method, budget and variant of
the accuracy cells as a point (attention time and energy per decode step from the cost model at
the preset's clocks, against the perplexity increase over full KV with its non-inferiority
bounds), the Pareto fronts, per family the iso-accuracy point and its interval, the lowest-time
configuration at iso-accuracy per method, and the best HiKV configuration's time over the best
other method's, with the preset's area beside them.

Reads the finished cells of a seed suite (`hikv accuracy run --suite seed-...`); runs no model,
so it takes seconds (the first run after an RTL change synthesises the preset's blocks for the
area and clocks: minutes; --no-area skips the area). Missing, unfinished, partial or mismatched
cells (another model, length, protocol, preset, or with --code-version another code version)
exit 2 naming the file and what is missing; no plot is drawn from what could be read. So do a
folder whose run did not finish (a run's lock but no MANIFEST.json) and a cell that differs from
what the folder's MANIFEST.json lists; a folder with neither (written before manifests) is read
with a warning that its completeness cannot be verified.

Iso-accuracy: one-sided 95 % bounds; the perplexity increase's upper bound below 1 % (paired
block bootstrap of per-block NLLs; the point rule, said in the rows, for cells measured
without them) and, on every kept task, the score difference's lower bound above -5 points
(paired over the same trials). Writes frontier_<model>_<protocol>_<N>_<preset>.csv (every
point), ..._families.csv, .json (the summary) and .png into --out. Units: seconds and joules
per decode step of the layers the methods manage (us and uJ in the plot and the printout)."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "co-design frontier: iso-accuracy configurations by attention time, energy and area"

#: The committed cells of each model in a checkout of the kit (``--cells`` default).
DEFAULT_CELLS = {"smollm2-135m": "docs/results/smollm2/seed",
                 "gemma3-270m": "docs/results/gemma3/seed"}

def owned(model: str, protocol: str, length: int) -> tuple[str, ...]:
    """The files one ``hikv frontier`` writes into --out (glob patterns; cleared by --force):
    those of its model, protocol and length at any preset, so the frontiers of other lengths
    or models in the same folder stay."""
    import glob

    from hikv.sim.explore.frontier import stem_prefix

    stem = glob.escape(stem_prefix(model, protocol, length))
    return tuple(f"{stem}*.{ext}" for ext in ("csv", "json", "png"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True,
                   help=f"the model whose cells to read ({', '.join(DEFAULT_CELLS)})")
    p.add_argument("--length", type=int, required=True, help="context length N (tokens)")
    p.add_argument("--protocol", choices=("prompt", "follow-up"), default="prompt",
                   help="the task cells' protocol (default prompt)")
    p.add_argument("--cells", type=Path, default=None, metavar="DIR",
                   help="a seed suite's output folder (or its cells/) (default: the "
                        "committed cells of --model in this checkout, docs/results/...)")
    p.add_argument("--preset", default=None,
                   help="accelerator preset to price the points on (default: the cells')")
    p.add_argument("--code-version", default=None, metavar="V",
                   help="refuse cells written by another code version")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the perplexity bootstrap (default 0)")
    p.add_argument("--no-area", action="store_true",
                   help="skip the preset's area (no synthesis)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG")
    p.add_argument("--out", default=None,
                   help="output folder (default: out/frontier-MODEL-N); one holding this "
                        "model, protocol and length's frontier needs --force (other "
                        "frontiers there stay)")
    p.add_argument("--force", action="store_true",
                   help="replace this model, protocol and length's earlier frontier "
                        "files in --out (deleted first)")


def _cells(args: argparse.Namespace) -> Path:
    from hikv.params import ParamError

    if args.cells is not None:
        return args.cells
    if args.model not in DEFAULT_CELLS:
        raise ParamError(f"--model {args.model!r} has no committed cells: pass --cells DIR "
                         f"(committed: {', '.join(DEFAULT_CELLS)})")
    root = Path(__file__).resolve().parents[1]
    path = root / DEFAULT_CELLS[args.model]
    if not path.is_dir():
        raise ParamError(f"{path}: the committed cells are not in this installation (a "
                         "checkout of the kit has them): pass --cells DIR")
    return path


def run(args: argparse.Namespace) -> int:
    import sys

    from hikv.io import prepare_out_dir
    from hikv.sim.explore.frontier import describe, frontier, load_cells, write_frontier

    cells = load_cells(_cells(args), model=args.model, length=args.length,
                       protocol=args.protocol, code_version=args.code_version)
    for note in cells.notes:
        print(f"hikv frontier: warning: {note}", file=sys.stderr)
    out = prepare_out_dir(args.out or f"out/frontier-{args.model}-{args.length}",
                          owned(args.model, args.protocol, args.length), force=args.force)
    fr = frontier(cells, args.preset, area=not args.no_area, seed=args.seed)
    for line in describe(fr):
        print(line)
    for f in write_frontier(fr, out, plot=not args.no_plots):
        print(f"wrote {f}")
    return 0
