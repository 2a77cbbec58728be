"""Where a loader's area is: its parts synthesised one by one, and what one shared address side
would save: a loader whose cost need not scale by copying it.

    python benchmarks/loader_parts.py [--preset tiny default paper] [--json FILE]

The loader's unflattened Verilog (one module per part: ``agen`` address generator, ``coal``
coalescer, ``entries`` entry queue, ``inflight`` in-flight request queue, ``pack`` packer and
expander, and the top's job registers, statistics and glue) goes through the area flow's
hierarchical synthesis (:func:`hikv.sim.eda.area.hierarchical_synthesis`: each part by the flat
flow, the top with the parts as black boxes; nothing is optimised across a part boundary, so
the sum is an upper bound of the flat area). Areas at the preset's node as the cost model
prices them (logic: NAND2 equivalents x the node's NAND2; macros: the SRAM model).

The cost model replicates the loader until the copies carry the memory bandwidth (``I``
copies at the loader's own clock, :func:`hikv.hw.blocks.loader_instances`). A single loader with
``P`` memory ports (docs/loader.md, "Area and clock" and "Limits")
would keep one address generator, one coalescer and one top, but its in-flight queues, entry
queue and packer must still carry ``I`` copies' worth of requests and bytes per cycle. So the
area it can save is at most ``(I - 1) x (agen + coal + top)``: the bound printed here (an
upper bound: the multi-port coalescer and the reorder stage it needs are not counted).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

#: the loader's parts (submodule names in hikv.hw.loader) that one shared address side keeps once
SHARED = ("top", "agen", "coal")


def parts(preset: str) -> dict[str, Any]:
    from hikv.hw.blocks import get_block, loader_instances
    from hikv.hw.verilog import to_verilog
    from hikv.presets import get_preset
    from hikv.sim.eda.area import (
        area_items,
        block_synth,
        canonical_module,
        hierarchical_synthesis,
        load_cells,
        synthesize,
        verilog_modules,
    )
    from hikv.sim.eda.sta import block_sta

    cfg = get_preset(preset)
    blk = get_block("loader")
    node = cfg.accel.tech_nm
    t0 = time.time()
    v = to_verilog(blk.component(cfg), blk.toplevel, flatten=False)
    hier = hierarchical_synthesis(v, blk.toplevel)
    cells = load_cells()
    mods = verilog_modules(v)
    subs = {n: t for n, t in mods.items() if n != blk.toplevel}
    rows: dict[str, dict[str, Any]] = {}
    # each part by itself (cached by the hierarchical run above under the same keys)
    for (ptop, _, n), name in zip(hier.parts, subs, strict=True):
        res = synthesize(canonical_module(subs[name], ptop), ptop, cells=cells)
        rows[name.split(".")[-1]] = _row(res, n, node, area_items)
    top = synthesize(mods[blk.toplevel], blk.toplevel, cells=cells, blackboxes="".join(
        subs.values()))
    rows = {"top": _row(top, 1, node, area_items), **rows}
    flat = block_synth("loader", cfg, cached_only=True)
    total = sum(r["area_mm2"] for r in rows.values())
    for r in rows.values():
        r["share"] = r["area_mm2"] / total
    sta = block_sta("loader", cfg)
    inst = loader_instances(cfg, clock_hz=sta.node_clock_hz)
    shared = sum(rows[k]["area_mm2"] for k in SHARED)
    return {"bench": "loader-parts", "preset": preset, "tech_nm": node, "parts": rows,
            "hierarchical_mm2": total,
            "flat_mm2": (None if flat is None else
                         sum(i.area_m2 for i in area_items("loader", 1, flat, node, "flat")) * 1e6),
            "loader_clock_mhz": sta.node_clock_hz / 1e6, "instances": inst,
            "replicated_mm2": inst * total, "shared_per_copy_mm2": shared,
            "one_loader_saving_bound_mm2": (inst - 1) * shared,
            "wall_s": round(time.time() - t0, 1)}


def _row(res: Any, copies: int, node: int, item: Any) -> dict[str, Any]:
    items = item("part", copies, res, node, "part")
    logic = items[0].area_m2 * 1e6
    sram = sum(i.area_m2 for i in items[1:]) * 1e6
    return {"nand2_equivalents": round(res.nand2_equivalents * copies, 1),
            "flip_flops": res.flipflops * copies,
            "macros": [f"{m.name} {m.depth}x{m.width}" for m in res.macros],
            "logic_mm2": logic, "sram_mm2": sram, "area_mm2": logic + sram}


def show(r: dict[str, Any]) -> None:
    print(f"\nloader @ {r['preset']} ({r['tech_nm']} nm; hierarchical synthesis, "
          f"{r['wall_s']:.0f} s)")
    print(f"  {'part':9} {'NAND2 eq.':>10} {'flip-flops':>10} {'mm^2':>8} {'share':>6}  macros")
    for k, p in r["parts"].items():
        print(f"  {k:9} {p['nand2_equivalents']:10,.0f} {p['flip_flops']:10,} "
              f"{p['area_mm2']:8.4f} {100 * p['share']:5.1f}%  {', '.join(p['macros']) or '-'}")
    flat = r["flat_mm2"]
    print(f"  sum {r['hierarchical_mm2']:.4f} mm^2 per loader"
          + ("" if flat is None else f" (flat synthesis {flat:.4f} mm^2, "
             f"{100 * (r['hierarchical_mm2'] / flat - 1):+.1f} %)"))
    print(f"  {r['instances']} loaders at the loader's clock ({r['loader_clock_mhz']:.0f} MHz): "
          f"{r['replicated_mm2']:.3f} mm^2; one shared address side ({' + '.join(SHARED)}, "
          f"{r['shared_per_copy_mm2']:.4f} mm^2 a copy) saves at most "
          f"{r['one_loader_saving_bound_mm2']:.3f} mm^2 "
          f"({100 * r['one_loader_saving_bound_mm2'] / r['replicated_mm2']:.0f} % of the loaders)")


def main(argv: list[str] | None = None) -> int:
    from hikv.presets import PRESETS

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", nargs="+", default=["tiny", "default", "paper"],
                    choices=sorted(PRESETS))
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    out = []
    for p in args.preset:
        r = parts(p)
        show(r)
        out.append(r)
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
