"""Simulate serving on a cluster: replicas behind a router, or prefill/decode (P/D)
disaggregation with KV transfer, each instance the single-replica engine of `hikv serve`.

`hikv cluster` is `hikv serve` with cluster flags: both take the same flag definitions
(:mod:`hikv.scripts.serving_flags`), and `hikv serve` runs this whenever a cluster flag is
given. Layouts: --cluster NAME (a preset of
:data:`hikv.sim.cluster.params.CLUSTER_PRESETS`; flags override its fields), --replicas N
(aggregated: every instance prefills and decodes) and/or --pd P:D (P prefill and D decode
instances; comma-separated to compare several; --dynamic-ratio dopd|threshold, or --dynamic for
dopd, moves instances between the pools). Every layout runs with every --router (round-robin,
least-tokens, p2c, quartz, quartz-mean), every --scheduler (fcfs, ewsjf) and every --method.

Workload: an Azure trace (--trace FILE, rescaled with --rate R requests/s) or Poisson arrivals
(--rate, --requests, --seed). The first --train-fraction of the requests trains the output-length
predictor (routers, EWSJF, MAPS, DOPD's decode work); the rest is served, and the predictor's
error on it is printed first (against predicting the training median for every request).

Prints one line per configuration: TTFT and TPOT P50/P90/P99 (ms), the fraction meeting both
SLOs, goodput (requests/s, with --goodput), mean KV shipped per request (MB), P99 transfer
time, preemptions, Jain's index of the tokens processed per instance, P99 slowdown (time in
the system over the time served alone), reconfigurations (dynamic ratio), the worst
Little's-law error over the pools (every term over the same window; exact under overload),
and the simulation time. --out DIR writes summary.csv (every configuration field, seed, code
version), decisions.csv (the router's decision and the KV transfer of every request of every
run) and tails.png (TTFT/TPOT CDFs).
"""

from __future__ import annotations

import argparse
import sys

from . import serving_flags

HELP = "simulate a serving cluster (hikv serve with cluster flags): routers, P/D, schedulers"

#: The files ``hikv cluster --out`` (``hikv serve`` with cluster flags) writes (cleared by
#: --force).
OWNED = ("summary.csv", "decisions.csv", "tails.png")

def add_arguments(p: argparse.ArgumentParser) -> None:
    """`hikv cluster`: every `hikv serve` flag (one set of definitions,
    :mod:`hikv.scripts.serving_flags`)."""
    serving_flags.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    """`hikv cluster`: a cluster run of `hikv serve`'s flags (default --replicas 4)."""
    return run_cluster(args)


def run_cluster(args: argparse.Namespace) -> int:
    """Run the cluster flags of ``args`` (module docstring)."""
    import dataclasses

    from hikv.io import prepare_out_dir
    from hikv.params import ParamError
    from hikv.presets import get_preset, resolve_methods, with_overrides
    from hikv.sim.cluster.params import (
        RATIO_POLICIES,
        ROUTERS,
        ClusterParams,
        DynamicRatio,
        get_cluster_preset,
        get_link,
    )
    from hikv.sim.cluster.report import (
        GridPoint,
        decision_rows,
        format_table,
        parse_pd,
        plot_tails,
        run_grid,
        write_rows,
    )
    from hikv.sim.cluster.sched import split_workload

    from .serving_flags import (
        SERVE_ONLY,
        check_workload_flags,
        require_rescalable,
        resolve_system,
        serving_config,
        workload_from_flags,
    )

    check_workload_flags(args)
    given = [f"--{f.replace('_', '-')}" for f in SERVE_ONLY
             if getattr(args, f, None) not in (None, False)]
    if given:
        raise ParamError(f"{', '.join(given)}: not available in a cluster run (a cluster flag "
                         "was given); the cluster's instances serve with the preset's policy "
                         "on the system of --system")
    if args.replicas is not None and not 1 <= args.replicas <= 1024:
        raise ParamError(f"--replicas = {args.replicas} is out of range: allowed [1, 1024]")
    pre = get_cluster_preset(args.cluster) if args.cluster else None
    pds = [parse_pd(x.strip()) for x in args.pd.split(",")] if args.pd else []
    dyn_rule = args.dynamic_ratio
    if dyn_rule is not None and dyn_rule not in RATIO_POLICIES:
        raise ParamError(f"--dynamic-ratio = {dyn_rule!r} is not one of: "
                         f"{', '.join(RATIO_POLICIES)}")
    if pre is not None and args.replicas is None and not pds:
        # the preset's layout (flags override every other field)
        if pre.prefill:
            pds = [(pre.prefill, pre.decode)]
            if pre.dynamic is not None and dyn_rule is None:
                dyn_rule = pre.dynamic.policy
    if not pds and (dyn_rule is not None or args.reconfig_s is not None):
        raise ParamError("--dynamic-ratio (--dynamic) and --reconfig-s need --pd P:D")
    base = pre or ClusterParams()
    router = args.router or base.router
    routers = list(ROUTERS) if router == "all" else [r.strip() for r in router.split(",")]
    scheds = [s.strip() for s in (args.scheduler or base.scheduler).split(",")]
    link = get_link(args.link) if args.link else base.link
    dyn = None
    if dyn_rule is not None:
        d0 = pre.dynamic if pre is not None and pre.dynamic is not None else DynamicRatio()
        dyn = dataclasses.replace(d0, policy=dyn_rule, **(
            {"reconfig_s": args.reconfig_s} if args.reconfig_s is not None else {}))
    over = {k: v for k, v in (("train_fraction", args.train_fraction),
                              ("quantile", args.quantile),
                              ("decode_router", args.decode_router)) if v is not None}
    base = dataclasses.replace(base, seed=args.seed, link=link, prefill=0, decode=0,
                               dynamic=None, **over)
    layouts = []
    if args.replicas is not None or not pds:
        layouts.append({"replicas": args.replicas or (pre.replicas if pre is not None
                                                      and not pre.prefill else 4)})
    for p, d in pds:
        layouts.append({"prefill": p, "decode": d})
        if dyn is not None:
            layouts.append({"prefill": p, "decode": d, "dynamic": dyn})
    params = [dataclasses.replace(base, router=r, scheduler=s, **lay)
              for lay in layouts for r in routers for s in scheds]
    out = prepare_out_dir(args.out, OWNED, force=args.force) if args.out else None
    cfg = serving_config(with_overrides(get_preset(args.preset or "paper"), args.set), args)
    sc = resolve_system(args, cfg)             # the served system, its configuration and cost
    cfg = sc.cfg
    methods = list(resolve_methods(cfg, args.method or "full,hikv-evict"))
    wl, seed = workload_from_flags(args, cfg)
    predictor, served = split_workload(wl, base.train_fraction, q=base.quantile)
    if args.trace and args.rate is not None:
        require_rescalable(served, args.rate)
        served = served.at_rate(args.rate)
    ev = predictor.evaluate(served.prompt_tokens, served.output_tokens)
    print(f"preset {cfg.name}: model {cfg.model.name}; SLOs TTFT {cfg.serving.ttft_slo_s} s, "
          f"TPOT {cfg.serving.tpot_slo_s} s; policy {cfg.serving.policy}")
    print(sc.description)
    print(f"workload {served.source}: {len(served)} requests served at "
          f"{served.rate_per_s:.4g}/s; predictor trained on {predictor.trained_on}")
    print(f"output-length predictor on the served requests: MAE {ev.mae_tokens:.1f} tokens "
          f"(global-median baseline {ev.baseline_mae_tokens:.1f}), median |rel err| "
          f"{ev.median_abs_rel_error:.2f}, within 2x {ev.within_2x:.2f}, Spearman "
          f"{ev.spearman:.2f}")
    if any(p.prefill for p in params):
        print(f"KV link {link.name}: {link.bandwidth_bytes_per_s:.4g} B/s, latency "
              f"{link.latency_s:.3g} s ({link.source})")
    sys.stdout.flush()
    points = [GridPoint(p, m) for p in params for m in methods]
    runs = run_grid(cfg, served, points, predictor=predictor, predictor_eval=ev,
                    cost_model=sc.cost_model,
                    with_goodput=args.goodput, seed=seed,
                    progress=lambda s: print(f"  ... {s} done", file=sys.stderr, flush=True))
    rows = [{"system": sc.system, **row} for _, row in runs]
    print(f"system {sc.system}:")
    print(format_table(rows))
    if out is not None:
        written = [write_rows(out / "summary.csv", rows)]
        dec = [d for i, (res, _) in enumerate(runs) for d in decision_rows(res, run=i)]
        written.append(write_rows(out / "decisions.csv", dec))
        written.append(plot_tails([res for res, _ in runs], out / "tails.png"))
        for p in written:
            print(f"wrote {p}")
    return 0
