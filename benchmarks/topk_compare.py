"""The merge sorter and the radix-select top-k engine side by side, per preset.

    python benchmarks/topk_compare.py --preset tiny default paper [--share] [--json OUT]

For each preset and engine (``sorter``: :mod:`hikv.hw.sorter`; ``topk``: :mod:`hikv.hw.topk`,
``SorterParams.digit_bits`` of the preset unless ``--digit-bits``): the area flow's synthesis
(:func:`hikv.sim.eda.area.block_synth`: logic in NAND2 equivalents, flip-flops, SRAM macro bits,
one instance's area at the preset's node), the timing flow's clock at the node
(:func:`hikv.sim.eda.sta.block_clock`), the cycles and time of a Stage I job at the preset's
``N = context`` and ``k = policy.budget`` (each engine's timing contract, checked in cocotb), and
the energy of that job's comparisons (:func:`hikv.sim.cost.energy.sorter_energy_j`: an integer
add per comparison of the compared width, the sorter's ``{valid, key, ~index}`` items, the
engine's keys and digits; buffer reads and writes not counted).

``--share``: HiKV's units as a share of the system (baseline accelerator + HiKV, the report's
``share_of_system``) with the sorter, and with the top-k engine in its place (the presets'
policies have no Stage II rule, so Stage I is the sorter's only job; the pipeline's score and
index buffers are counted in both), the loaders at the timing flow's loader clock; where the
preset scores Stage I with the low-bit scoring unit, also without that unit.

Results come from the synthesis and timing caches where present (``$HIKV_CACHE``); a miss runs
Yosys (``default`` and ``paper`` take minutes per block on two cores). Prints a Markdown table
and, with ``--json``, writes every number.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from hikv.hw.sorter_timing import SorterTiming
from hikv.hw.topk_timing import TopKTiming
from hikv.params import Config
from hikv.presets import get_preset, with_overrides
from hikv.sim.cost.energy import sorter_energy_j
from hikv.sim.eda.area import (
    accelerator_area,
    area_items,
    block_synth,
    hikv_blocks,
    pipeline_buffer_items,
)
from hikv.sim.eda.sta import block_clock

ENGINES = ("sorter", "topk")


def engine_row(cfg: Config, engine: str) -> dict[str, Any]:
    """Area, clock, cycles and comparison energy of one engine for ``cfg``."""
    res = block_synth(engine, cfg)
    t = cfg.accel.tech_nm
    unit_m2 = sum(i.unit_area_m2 for i in area_items(engine, 1, res, t, "synthesised"))
    clk = block_clock(engine, cfg)
    n, k = cfg.context, cfg.policy.budget
    if engine == "sorter":
        st = SorterTiming.from_params(cfg.sorter)
        cycles, compares = st.stage1_cycles(n, k), st.stage1_compares(n, k)
        energy = sorter_energy_j(compares, st.item_width, t)
    else:
        tt = TopKTiming.from_params(cfg.sorter)
        cycles, compares = tt.stage1_cycles(n, k), tt.stage1_compares(n, k)
        energy = (sorter_energy_j(compares, cfg.sorter.key_width, t)
                  + sorter_energy_j(tt.stage1_digit_compares(n, k), tt.digit_bits, t))
    return {"preset": cfg.name, "engine": engine, "digit_bits": cfg.sorter.digit_bits,
            "nand2_equivalents": res.nand2_equivalents, "flipflops": res.flipflops,
            "sram_bits": sum(mm.bits for mm in res.macros), "unit_area_m2": unit_m2,
            "tech_nm": t, "clock_hz": clk["clock_hz"], "critical_path": clk["critical_path"],
            "n": n, "k": k, "cycles": cycles, "time_s": cycles / clk["clock_hz"],
            "compares": compares, "compare_energy_j": float(energy),
            "synth_origin": res.origin, "sta_origin": clk["origin"]}


def shares(cfg: Config, engines: tuple[str, ...] = ENGINES) -> dict[str, float]:
    """HiKV's share of the system area with each engine (see the module docstring); where the
    preset scores Stage I with the low-bit scoring unit, also without it (``ENGINE_no_scorer``:
    a Stage I scored from the attention the PE array computes needs no scoring unit)."""
    f_ld = block_clock("loader", cfg)["clock_hz"]
    out = {}
    for engine in engines:
        full = tuple(engine if b == "sorter" else b for b in hikv_blocks(cfg))
        variants = {engine: full}
        if "scorer" in full:
            variants[f"{engine}_no_scorer"] = tuple(b for b in full if b != "scorer")
        for name, blocks in variants.items():
            ar = accelerator_area(cfg, blocks=blocks, loader_clock_hz=f_ld)
            hikv = ar.hikv_m2 + (0.0 if "sorter" in blocks
                                 else sum(i.area_m2 for i in pipeline_buffer_items(cfg)))
            out[name] = hikv / (ar.baseline_m2 + hikv)
            out[f"{name}_hikv_m2"] = hikv
            out["baseline_m2"] = ar.baseline_m2
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", nargs="+", default=["tiny"])
    ap.add_argument("--engine", nargs="+", choices=ENGINES, default=list(ENGINES))
    ap.add_argument("--digit-bits", type=int, help="override sorter.digit_bits")
    ap.add_argument("--share", action="store_true", help="also HiKV's share of the system")
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args(argv)
    rows, share = [], {}
    for name in args.preset:
        cfg = get_preset(name)
        if args.digit_bits is not None:
            cfg = dataclasses.replace(with_overrides(cfg, [f"sorter.digit_bits={args.digit_bits}"]),
                                      name=name)
        for engine in args.engine:
            rows.append(engine_row(cfg, engine))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if args.share:
            share[name] = shares(cfg, tuple(args.engine))
    print("| preset | engine | logic (NAND2 eq.) | flip-flops | SRAM bits | area (mm^2) | "
          "clock (MHz) | Stage I cycles (N, k) | time (ns) | compare energy (nJ) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        eng = r["engine"] + (f" (b = {r['digit_bits']})" if r["engine"] == "topk" else "")
        print(f"| {r['preset']} | {eng} | {r['nand2_equivalents']:,.0f} | {r['flipflops']:,} | "
              f"{r['sram_bits']:,} | {r['unit_area_m2'] * 1e6:.4f} at {r['tech_nm']} nm | "
              f"{r['clock_hz'] / 1e6:,.0f} | {r['cycles']:,} ({r['n']:,}, {r['k']:,}) | "
              f"{r['time_s'] * 1e9:,.0f} | {r['compare_energy_j'] * 1e9:.3f} |")
    for name, s in share.items():
        parts = [f"{k.replace('_no_scorer', ' without the scoring unit')} "
                 f"{100 * v:.1f} %" for k, v in s.items() if not k.endswith("_m2")]
        print(f"{name}: HiKV's share of the system area with " + ", ".join(parts))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "share": share}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
