"""Sweep the analytic cost model over design points: the cartesian product of the given axis
values (context N, budget B, Stage II keep r, head dim d, PE lanes, sorter lanes, scoring-unit
lanes, Stage I engine, memory type, bandwidth, node), every method evaluated in one vectorised
pass. Writes sweep.csv (one row per design point and method, with every configuration field,
the results and the code version) and plots: energy vs speedup and area vs speedup Pareto
fronts, speedup vs context length.
--bench instead times the analytic evaluation on random design points and prints design points
per second. Units: bytes, seconds, joules, m^2; bandwidth in bytes/s (e.g. 256e9)."""

from __future__ import annotations

import argparse
import math

HELP = "sweep the cost model over B, r, d, N, lanes, memory, node (CSV + Pareto plots)"


def _items(s: str) -> list[str]:
    items = [x.strip() for x in s.split(",")]
    if not s.strip() or any(not x for x in items):
        raise argparse.ArgumentTypeError(f"{s!r} is not a comma-separated list of values "
                                         "(empty item)")
    return items


def _int(x: str) -> int:
    """An integer, exactly (:func:`hikv.flags.parse_int`: ASCII, ``8.9`` an error, ``1e3``
    1000)."""
    from hikv.flags import parse_int
    from hikv.params import ParamError

    try:
        return parse_int(x)
    except ParamError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _float(x: str) -> float:
    """A finite number (:func:`hikv.flags.parse_float`)."""
    from hikv.flags import parse_float
    from hikv.params import ParamError

    try:
        return parse_float(x)
    except ParamError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _ints(s: str) -> list[int]:
    return [_int(x) for x in _items(s)]


def _floats(s: str) -> list[float]:
    return [_float(x) for x in _items(s)]


def _strs(s: str) -> list[str]:
    return _items(s)


#: The flag of each sweep axis (for messages).
_FLAGS = {"context": "--context", "budget": "--budget", "keep_v": "--keep-v",
          "keep_k": "--keep-k", "head_dim": "--head-dim", "pe_lanes": "--pe-lanes",
          "sorter_lanes": "--sorter-lanes", "scorer_lanes": "--scorer-lanes",
          "sorter_kind": "--sorter-kind",
          "memory": "--memory", "bandwidth": "--bandwidth",
          "tech_nm": "--node"}


def _check_stage2_axes(cfg, axes: dict[str, list]) -> None:
    """``--keep-k`` / ``--keep-v`` set how many elements HiKV's Stage II keeps of each K / V
    vector; on a preset whose rule for that side keeps every element (kind ``none``) they would
    change nothing, so they are refused rather than swept as a flat line."""
    from hikv.params import ParamError

    for axis, side, rule in (("keep_k", "k", cfg.policy.k_rule),
                             ("keep_v", "v", cfg.policy.v_rule)):
        if axis in axes and rule.kind.value == "none":
            pruned = _presets_pruning(side)
            raise ParamError(
                f"{_FLAGS[axis]}: preset {cfg.name}'s HiKV Stage II {side.upper()} rule "
                f"(policy.{side}_rule.kind) is 'none': every element is kept, so "
                f"{_FLAGS[axis]} would change nothing; presets that prune {side.upper()}: "
                f"{', '.join(pruned) or 'none'}")


def _presets_pruning(side: str) -> list[str]:
    from hikv.presets import PRESETS

    return [n for n, c in PRESETS.items()
            if getattr(c.policy, f"{side}_rule").kind.value != "none"]


def check_axes(cfg, axes: dict[str, list]) -> None:
    """Validate every axis value through the parameter classes: the preset with that one
    value set (every configuration column the axis sets) must be a valid configuration as far
    as that field's own range goes. A violation is a :class:`~hikv.params.ParamError` naming
    the flag, the value and the allowed range; constraints between two fields (a budget below
    the preset's recent window) are left to the per-point model."""
    import json
    import re

    from hikv.params import ParamError
    from hikv.presets import with_overrides
    from hikv.sim.explore.sweep import AXES

    for name, vals in axes.items():
        flag = _FLAGS.get(name, name)
        if not vals:
            raise ParamError(f"{flag} has no values: give at least one")
        cols = AXES[name][1]
        fields = {c.rsplit(".", 1)[-1] for c in cols}
        for v in vals:
            try:
                with_overrides(cfg, [f"{c}={json.dumps(v)}" for c in cols])
            except ParamError as e:
                msg = str(e)
                own = any(re.search(rf"\.{re.escape(f)} (=|must|is not)", msg) for f in fields)
                if own:
                    raise ParamError(f"{flag} value {v!r}: {msg}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="default", help="base configuration preset")
    p.add_argument("--context", type=_ints, help="context lengths N, e.g. 1024,4096,16384")
    p.add_argument("--budget", type=_ints, help="budgets B (tokens), e.g. 128,256,512")
    p.add_argument("--keep-v", type=_ints, help="HiKV Stage II V keep r (elements of d)")
    p.add_argument("--keep-k", type=_ints, help="HiKV Stage II K keep (if K is pruned)")
    p.add_argument("--head-dim", type=_ints, help="head dimensions d")
    p.add_argument("--pe-lanes", type=_ints, help="PE (MAC) lanes")
    p.add_argument("--sorter-lanes", type=_ints, help="sorter lanes P (the Stage I engine's "
                   "lanes)")
    p.add_argument("--sorter-kind", type=_strs, help="Stage I engines (sorter.kind): merge "
                   "(the merge sorter), radix (the radix-select top-k engine; the merge sorter "
                   "kept beside it for a policy with a Stage II rule), e.g. merge,radix; "
                   "also a --tradeoff axis")
    p.add_argument("--scorer-lanes", type=_ints, help="low-bit scoring unit lanes L (tokens "
                   "scored per cycle; query-aware HiKV with low-bit keys)")
    p.add_argument("--memory", type=_strs, help="memory types: hbm2,lpddr4,gddr5,ddr3 "
                   "(energy per bit; bandwidth is --bandwidth)")
    p.add_argument("--bandwidth", type=_floats, help="memory bandwidths in bytes/s")
    p.add_argument("--node", type=_ints, help="technology nodes in nm: 45,28,16,7")
    p.add_argument("--methods", default="full,hikv", type=_strs,
                   help="methods: full,h2o,snapkv,quest,sparq,ds,hikv (default full,hikv)")
    p.add_argument("--out", help="output directory (default: out/sweep-PRESET); one holding "
                   "an earlier sweep's files needs --force")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier sweep's files in --out (deleted first)")
    p.add_argument("--no-area", action="store_true", help="skip area columns (no synthesis)")
    p.add_argument("--clocks", choices=("assumed", "sta"), default="assumed",
                   help="block clocks: 'assumed' (accel.clock_hz or hand-set, default) or "
                   "'sta' (the timing flow's ASIC estimate of the preset's blocks, synthesised "
                   "once; lane overrides keep the preset's build's clock, except with "
                   "--tradeoff: each sorter lane count at its own synthesised build's clock)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--bench", action="store_true",
                   help="benchmark: time the analytic evaluation on random points")
    p.add_argument("--tradeoff", action="store_true",
                   help="the area / throughput trade-off curve instead of a sweep: the "
                   "preset's HiKV over --sorter-kind x --sorter-lanes x --scorer-lanes x "
                   "--loaders (defaults the preset's engine x 4,8,16,32 x 4,8,16,32,64 x "
                   "1,2,4,8), HiKV units' share of the system area "
                   "(cached syntheses; other lane counts interpolated) vs attention throughput; "
                   "writes tradeoff.csv, tradeoff.md (table with the 8 %% line) and "
                   "tradeoff.png")
    p.add_argument("--loaders", type=_ints, help="--tradeoff: loader instances I")
    p.add_argument("--synthesise", action="store_true",
                   help="--tradeoff: synthesise lane counts not in the cache (slow: minutes "
                   "to an hour per build) instead of interpolating their area")
    p.add_argument("--resynthesise", action="store_true",
                   help="run synthesis and timing even where the cache or the results shipped "
                   "with the kit hold them")
    p.add_argument("--points", type=int, default=100_000, help="--bench design points")
    p.add_argument("--seed", type=int, default=0, help="--bench sampling seed")


def run(args: argparse.Namespace) -> int:
    from hikv.sim.eda.shipped import resynthesis

    with resynthesis(args.resynthesise):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from hikv.io import prepare_out_dir
    from hikv.params import ParamError
    from hikv.presets import baseline_specs, get_preset
    from hikv.sim.explore import sweep as sw
    from hikv.sim.explore.report import code_version

    cfg = get_preset(args.preset)
    if not 0 <= args.seed < 2**63:
        raise ParamError(f"--seed = {args.seed} is out of range: allowed [0, 2**63 - 1]")
    if args.bench:
        if not 1 <= args.points <= MAX_POINTS:
            raise ParamError(f"--points = {args.points} is out of range: allowed "
                             f"[1, {MAX_POINTS}]")
        r = sw.bench(cfg, points=args.points, seed=args.seed)
        print(f"hikv sweep --bench: {r['points']} design points x {len(r['methods'])} methods "
              f"({', '.join(r['methods'])}) in {r['seconds']:.3f} s (best of 3) = "
              f"{r['points_per_s']:,.0f} design points/s; preset {cfg.name}, "
              f"axes {', '.join(r['axes'])}; code {code_version()}")
        return 0
    if args.tradeoff:
        return _tradeoff(args, cfg)
    if args.loaders is not None or args.synthesise:
        raise ParamError("--loaders and --synthesise apply only with --tradeoff")
    axes = {k: v for k, v in (("context", args.context), ("budget", args.budget),
                              ("keep_v", args.keep_v), ("keep_k", args.keep_k),
                              ("head_dim", args.head_dim), ("pe_lanes", args.pe_lanes),
                              ("sorter_lanes", args.sorter_lanes),
                              ("sorter_kind", args.sorter_kind),
                              ("scorer_lanes", args.scorer_lanes), ("memory", args.memory),
                              ("bandwidth", args.bandwidth), ("tech_nm", args.node))
            if v is not None}
    check_axes(cfg, axes)
    _check_stage2_axes(cfg, axes)
    if not axes:
        axes = {"context": [1024, 2048, 4096, 8192, 16384],
                "budget": [128, 256, 512], "pe_lanes": [64, 256, 1024],
                "tech_nm": [45, 28, 7]}
        print("no axes given: default grid " + ", ".join(f"{k}={v}" for k, v in axes.items()))
    wanted = list(args.methods)
    by_name = {s.method.value: s for s in baseline_specs(cfg)}
    bad = [m for m in wanted if m not in by_name]
    if bad:
        raise ParamError(f"--methods {bad} unknown; allowed {sorted(by_name)}")
    if "full" not in wanted:
        wanted = ["full", *wanted]
    if "hikv" not in wanted:
        wanted.append("hikv")
    specs = [by_name["full"]] + [by_name[m] for m in wanted if m != "full"]
    size = math.prod(len(v) for v in axes.values())
    if size > MAX_POINTS:
        raise ParamError(f"the axes make {size:,} design points: allowed at most {MAX_POINTS:,} "
                         "(use fewer values per axis)")
    out = prepare_out_dir(args.out or f"out/sweep-{args.preset}", OWNED, force=args.force)
    pts = sw.grid(axes)
    clocks = None
    if args.clocks == "sta":
        from hikv.sim.cost.clocks import accelerator_clocks

        clocks = accelerator_clocks(cfg, kinds=tuple(args.sorter_kind or ()))
        print("clocks: " + ", ".join(f"{b} {clocks.hz(b) / 1e6:.0f} MHz ({c.origin})"
                                     for b, c in clocks.blocks.items()))
    res = sw.evaluate(cfg, pts, specs, clocks=clocks)
    _check_results(res)
    area = None
    if not args.no_area:
        from hikv.sim.eda.cells import CellsUnavailable, fetch_cells

        try:
            try:
                area = sw.area_columns(cfg, pts, res.size, clocks)
            except CellsUnavailable:     # neither cached nor shipped: the flow needs the cells
                fetch_cells()
                area = sw.area_columns(cfg, pts, res.size, clocks)
        except CellsUnavailable as e:
            print(f"area columns skipped: {e}")
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


def _tradeoff(args: argparse.Namespace, cfg) -> int:
    """``hikv sweep --tradeoff``: area share vs throughput (hikv.sim.explore.tradeoff)."""
    from hikv.io import prepare_out_dir
    from hikv.params import ParamError
    from hikv.sim.explore import tradeoff as to

    other = [f"--{k.replace('_', '-')}" for k in ("context", "budget", "keep_v", "keep_k",
                                                  "head_dim", "pe_lanes", "memory",
                                                  "bandwidth", "node")
             if getattr(args, k) is not None]
    if other:
        raise ParamError(f"--tradeoff varies only --sorter-kind, --sorter-lanes, "
                         f"--scorer-lanes and --loaders; not allowed with it: "
                         f"{', '.join(other)}")
    check_axes(cfg, {k: v for k, v in (("sorter_lanes", args.sorter_lanes),
                                       ("scorer_lanes", args.scorer_lanes),
                                       ("sorter_kind", args.sorter_kind)) if v is not None})
    for v in args.loaders or []:
        if v < 1:
            raise ParamError(f"--loaders {v} is out of range: allowed >= 1")
    out = prepare_out_dir(args.out or f"out/tradeoff-{args.preset}", OWNED, force=args.force)
    clocks = None
    if args.clocks == "sta":
        from hikv.sim.cost.clocks import accelerator_clocks

        clocks = accelerator_clocks(cfg, kinds=tuple(args.sorter_kind or ()))
    r = to.tradeoff(cfg, sorter_lanes=args.sorter_lanes or [4, 8, 16, 32],
                    scorer_lanes=args.scorer_lanes or [4, 8, 16, 32, 64],
                    loaders=args.loaders or [1, 2, 4, 8], clocks=clocks,
                    synthesise=args.synthesise, kinds=args.sorter_kind)
    for p in to.write_tradeoff(r, out):
        print(f"wrote {p}")
    if not args.no_plots:
        print(f"wrote {to.plot_tradeoff(r, out)}")
    for line in to.summary(r):
        print(line)
    return 0


#: Most design points one sweep or --bench evaluates (the arrays are held in memory).
MAX_POINTS = 10_000_000
#: The files ``hikv sweep`` writes into --out (cleared by --force).
OWNED = ("sweep.csv", "*.png", "tradeoff.csv", "tradeoff.md")


def _check_results(res) -> None:
    """Every result finite: a NaN or infinity is an error naming method, column and point."""
    import numpy as np

    from hikv.io import NonFiniteError

    for label, cols in res.methods.items():
        for col, arr in cols.items():
            a = np.asarray(arr, dtype=float)
            bad = ~np.isfinite(a)
            if bad.any():
                i = int(np.flatnonzero(bad.reshape(-1))[0])
                point = {k: v.reshape(-1)[i % v.size].item() for k, v in res.points.items()}
                raise NonFiniteError(f"sweep result {label} {col} is {a.reshape(-1)[i]} at "
                                     f"design point {point}: the point is degenerate")
