"""Area and clock of the Stage II selection block (hw/stage2_select.py) per preset.

    python benchmarks/stage2_area.py --preset default --bits-per-cycle 1 2 [--json OUT]

For each preset and ``B`` (radix steps per engine cycle): the block built for the preset's
sorter lanes and key width and vectors of ``layout.head_dim`` elements, synthesised by the area
flow (:func:`hikv.sim.eda.area.synthesize`: logic in NAND2 equivalents, flip-flops, SRAM macro
bits, one instance's area at the preset's node) and timed by the timing flow
(:func:`hikv.sim.eda.sta.design_sta`: the clock at the node), with its engines, cycles per
vector and the time per vector at that clock. Results come from the synthesis cache where
present (``$HIKV_CACHE``); a miss runs Yosys (``default`` with ``B = 1``: about 100 s on two
cores). Prints a Markdown table and, with ``--json``, writes every number.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hikv.hw.stage2_select import stage2_select_from_params
from hikv.hw.verilog import to_verilog
from hikv.params import Config
from hikv.presets import get_preset
from hikv.sim.eda.area import area_items, synthesize
from hikv.sim.eda.sta import design_sta

TOP = "hikv_stage2_select"


def block_row(cfg: Config, bits_per_cycle: int) -> dict[str, Any]:
    """Area, clock and rate of the block for ``cfg`` with ``bits_per_cycle``."""
    d = cfg.layout.head_dim
    dut = stage2_select_from_params(cfg.sorter, d, bits_per_cycle=bits_per_cycle)
    row = {"preset": cfg.name, "lanes": dut.lanes, "d": d, "bits_per_cycle": bits_per_cycle,
           "engines": dut.engines, "cycles_per_vector": dut.rows, "latency": dut.latency}
    verilog = to_verilog(dut, TOP)
    res = synthesize(verilog, TOP, netlist=True)
    t = cfg.accel.tech_nm
    sta = design_sta(verilog, TOP, t)
    row.update({"nand2_equivalents": res.nand2_equivalents, "flipflops": res.flipflops,
                "sram_bits": sum(mm.bits for mm in res.macros),
                "unit_area_m2": sum(i.unit_area_m2 for i in area_items(
                    "stage2_select", 1, res, t, "synthesised")),
                "tech_nm": t, "clock_hz": sta.node_clock_hz,
                "critical_path": sta.critical.describe(),
                "time_per_vector_s": dut.rows / sta.node_clock_hz})
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", nargs="+", default=["tiny"])
    ap.add_argument("--bits-per-cycle", nargs="+", type=int, default=[1],
                    help="radix steps per engine cycle (B), 1 to W + ceil(log2 d)")
    ap.add_argument("--json", help="write every number to this file")
    args = ap.parse_args(argv)
    rows = []
    for name in args.preset:
        cfg = get_preset(name)
        for b in args.bits_per_cycle:
            rows.append(block_row(cfg, b))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| preset | `P` | `d` | `B` | engines | logic (NAND2 eq.) | flip-flops | area (mm^2) | "
          "clock (MHz) | cycles per vector | time per vector (ns) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['preset']} | {r['lanes']} | {r['d']} | {r['bits_per_cycle']} | "
              f"{r['engines']} | {r['nand2_equivalents']:,.0f} | {r['flipflops']:,} | "
              f"{r['unit_area_m2'] * 1e6:.4f} at {r['tech_nm']} nm | "
              f"{r['clock_hz'] / 1e6:,.0f} | {r['cycles_per_vector']} | "
              f"{r['time_per_vector_s'] * 1e9:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
