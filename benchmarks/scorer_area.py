"""The low-bit scoring unit's area by the area flow, flat and hierarchical.

    python benchmarks/scorer_area.py --preset default --lanes 8 --mode hier flat

For each (lanes, mode): the ``scorer`` block built for the preset with ``scorer.lanes``
overridden, synthesised as :func:`hikv.sim.eda.area.block_synth` does (its Verilog converted once
here): ``hier`` is the cost model's path (one lane and the top with the lanes as black boxes,
:func:`hikv.sim.eda.area.hierarchical_synthesis` of the unflattened Verilog), ``flat`` the flat
flow (``block_synth(..., flat=True)``: :func:`hikv.sim.eda.area.synthesize` of the flat Verilog).

Prints one JSON line per run: the Amaranth Verilog conversion time (``verilog_s``, not in
``wall_s``), NAND2 equivalents, flip-flops, the synthesis wall time, the CPU time of Yosys
(``yosys_cpu_s``: children of this process) and of this process (``python_cpu_s``), and
whether the result was already cached. Results are cached under ``$HIKV_CACHE/synth``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from hikv.hw.blocks import get_block
from hikv.hw.verilog import to_verilog
from hikv.presets import get_preset, with_overrides
from hikv.sim.eda.area import cached_synthesis, hierarchical_synthesis, synthesize


def run(preset: str, lanes: int, mode: str) -> dict:
    cfg = with_overrides(get_preset(preset), [f"scorer.lanes={lanes}"])
    flat = mode == "flat"
    block = get_block("scorer")
    # the Verilog once (block_synth would convert it again for each call)
    t0 = time.time()
    v = to_verilog(block.component(cfg), block.toplevel, flatten=flat)
    verilog_s = time.time() - t0
    if flat:
        def synth(cached_only: bool):
            f = cached_synthesis if cached_only else synthesize
            return f(v, block.toplevel)
    else:
        def synth(cached_only: bool):
            return hierarchical_synthesis(v, block.toplevel, cached_only=cached_only)
    cached = synth(True) is not None
    def cpu(who: int) -> float:
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    c0, s0 = cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF)
    t0 = time.time()
    res = synth(False)
    wall = time.time() - t0
    yosys_cpu = cpu(resource.RUSAGE_CHILDREN) - c0
    self_cpu = cpu(resource.RUSAGE_SELF) - s0
    return {"preset": preset, "lanes": lanes, "mode": mode, "cached": cached,
            "nand2_equivalents": round(res.nand2_equivalents, 1),
            "area_um2": round(res.area_m2 * 1e12, 1),
            "flip_flops": res.flipflops, "cells": res.cell_count,
            "parts": [list(p) for p in res.parts], "key": res.key,
            "flow_version": res.flow_version,
            "verilog_s": round(verilog_s, 1), "wall_s": round(wall, 1),
            "yosys_cpu_s": round(yosys_cpu, 1),
            "python_cpu_s": round(self_cpu, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="default")
    ap.add_argument("--lanes", type=int, nargs="+", default=[8])
    ap.add_argument("--mode", nargs="+", choices=("hier", "flat"), default=["hier"])
    args = ap.parse_args(argv)
    for n in args.lanes:
        for mode in args.mode:
            print(json.dumps(run(args.preset, n, mode)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
