"""Sweep the analytic cost model over design points: the cartesian product of the given axis
values (context N, budget B, Stage II keep r, head dim d, PE lanes, sorter lanes, memory type,
bandwidth, node), every method evaluated in one vectorised pass. Writes sweep.csv (one row per
design point and method, with every configuration field, the results and the code version) and
plots: energy vs speedup and area vs speedup Pareto fronts, speedup vs context length.
--bench instead times the analytic evaluation on random design points and prints design points
per second. Units: bytes, seconds, joules, m^2; bandwidth in bytes/s (e.g. 256e9)."""

from __future__ import annotations

import argparse

HELP = "sweep the cost model over B, r, d, N, lanes, memory, node (CSV + Pareto plots)"


def _ints(s: str) -> list[int]:
    return [int(float(x)) for x in s.split(",") if x]


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x]


def _strs(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="default", help="base configuration preset")
    p.add_argument("--context", type=_ints, help="context lengths N, e.g. 1024,4096,16384")
    p.add_argument("--budget", type=_ints, help="budgets B (tokens), e.g. 128,256,512")
    p.add_argument("--keep-v", type=_ints, help="HiKV Stage II V keep r (elements of d)")
    p.add_argument("--keep-k", type=_ints, help="HiKV Stage II K keep (if K is pruned)")
    p.add_argument("--head-dim", type=_ints, help="head dimensions d")
    p.add_argument("--pe-lanes", type=_ints, help="PE (MAC) lanes")
    p.add_argument("--sorter-lanes", type=_ints, help="sorter lanes P")
    p.add_argument("--memory", type=_strs, help="memory types: hbm2,lpddr4,gddr5,ddr3 "
                   "(energy per bit; bandwidth is --bandwidth)")
    p.add_argument("--bandwidth", type=_floats, help="memory bandwidths in bytes/s")
    p.add_argument("--node", type=_ints, help="technology nodes in nm: 45,28,16,7")
    p.add_argument("--methods", default="full,hikv",
                   help="methods: full,h2o,snapkv,quest,sparq,ds,hikv (default full,hikv)")
    p.add_argument("--out", help="output directory (default: out/sweep-PRESET)")
    p.add_argument("--no-area", action="store_true", help="skip area columns (no synthesis)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--bench", action="store_true",
                   help="benchmark: time the analytic evaluation on random points")
    p.add_argument("--points", type=int, default=100_000, help="--bench design points")
    p.add_argument("--seed", type=int, default=0, help="--bench sampling seed")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from hikv.params import ParamError
    from hikv.presets import baseline_specs, get_preset
    from hikv.sim import sweep as sw
    from hikv.sim.report import code_version

    cfg = get_preset(args.preset)
    if args.bench:
        if args.points < 1:
            raise ParamError(f"--points = {args.points} is out of range: allowed >= 1")
        r = sw.bench(cfg, points=args.points, seed=args.seed)
        print(f"hikv sweep --bench: {r['points']} design points x {len(r['methods'])} methods "
              f"({', '.join(r['methods'])}) in {r['seconds']:.3f} s (best of 3) = "
              f"{r['points_per_s']:,.0f} design points/s; preset {cfg.name}, "
              f"axes {', '.join(r['axes'])}; code {code_version()}")
        return 0
    axes = {k: v for k, v in (("context", args.context), ("budget", args.budget),
                              ("keep_v", args.keep_v), ("keep_k", args.keep_k),
                              ("head_dim", args.head_dim), ("pe_lanes", args.pe_lanes),
                              ("sorter_lanes", args.sorter_lanes), ("memory", args.memory),
                              ("bandwidth", args.bandwidth), ("tech_nm", args.node))
            if v}
    if not axes:
        axes = {"context": [1024, 2048, 4096, 8192, 16384],
                "budget": [128, 256, 512], "pe_lanes": [64, 256, 1024],
                "tech_nm": [45, 28, 7]}
        print("no axes given: default grid " + ", ".join(f"{k}={v}" for k, v in axes.items()))
    wanted = _strs(args.methods)
    by_name = {s.method.value: s for s in baseline_specs(cfg)}
    bad = [m for m in wanted if m not in by_name]
    if bad:
        raise ParamError(f"--methods {bad} unknown; allowed {sorted(by_name)}")
    if "full" not in wanted:
        wanted = ["full", *wanted]
    if "hikv" not in wanted:
        wanted.append("hikv")
    specs = [by_name["full"]] + [by_name[m] for m in wanted if m != "full"]
    pts = sw.grid(axes)
    res = sw.evaluate(cfg, pts, specs)
    area = None
    if not args.no_area:
        from hikv.sim.cells import CellsUnavailable, fetch_cells

        try:
            fetch_cells()
            area = sw.area_columns(cfg, pts, res.size)
        except CellsUnavailable as e:
            print(f"area columns skipped: {e}")
    out = Path(args.out or f"out/sweep-{args.preset}")
    rows = sw.write_csv(cfg, res, out / "sweep.csv", area)
    print(f"{res.size} design points x {len(specs)} methods evaluated in {res.seconds:.3f} s "
          f"(timing model {res.timing})")
    print(f"wrote {out / 'sweep.csv'} ({rows} rows)")
    if not args.no_plots:
        hl = specs[-1].label if specs[-1].method.value == "hikv" else by_name["hikv"].label
        for p in sw.plot_sweep(cfg, res, out, hl, area, specs):
            print(f"wrote {p}")
    h = res.methods[by_name["hikv"].label]
    i = int(h["speedup_vs_ref"].argmax())
    best = ", ".join(f"{k}={sw._val(v[i])}" for k, v in pts.items())
    print(f"largest HiKV speedup vs full KV: {h['speedup_vs_ref'][i]:.2f}x (roofline bound "
          f"{h['roofline_bound_vs_ref'][i]:.2f}x) at {best}")
    return 0
