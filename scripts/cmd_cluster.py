"""Simulate serving on a cluster: replicas behind a router, or prefill/decode (P/D)
disaggregation with KV transfer, each instance the single-replica engine of `hikv serve`.

Layouts: --replicas N (aggregated: every instance prefills and decodes) and/or --pd P:D
(P prefill and D decode instances; comma-separated to compare several; --dynamic moves
instances between the pools). Every layout runs with every --router (round-robin,
least-tokens, p2c, quartz, quartz-mean), every --scheduler (fcfs, ewsjf) and every --method.

Workload: an Azure trace (--trace FILE, rescaled with --rate R requests/s) or Poisson arrivals
(--rate, --requests, --seed). The first --train-fraction of the requests trains the output-length
predictor (routers, EWSJF, MAPS); the rest is served, and the predictor's error on it is
printed first (against predicting the training median for every request).

Prints one line per configuration: TTFT and TPOT P50/P90/P99 (ms), the fraction meeting both
SLOs, goodput (requests/s, with --goodput), mean KV shipped per request (MB), P99 transfer
time, preemptions, Jain's index of the tokens processed per instance, P99 slowdown (time in
the system over the time served alone), reconfigurations (--dynamic), the worst Little's-law
error over the instances in a steady state, and the simulation time. --out DIR writes
summary.csv (every configuration field, seed, code version), decisions.csv (the router's
decision and the KV transfer of every request of every run) and tails.png (TTFT/TPOT CDFs).
"""

from __future__ import annotations

import argparse
import sys

HELP = "simulate a serving cluster: replicas and routers, P/D disaggregation, schedulers"

#: The files ``hikv cluster --out`` writes (cleared by --force).
OWNED = ("summary.csv", "decisions.csv", "tails.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="paper", help="configuration preset (default: paper)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a preset parameter (repeatable)")
    p.add_argument("--method", default="full,hikv-evict",
                   help="KV method(s), comma-separated (default: full,hikv-evict)")
    p.add_argument("--trace", metavar="FILE", help="Azure LLM inference trace CSV")
    p.add_argument("--rate", type=float, metavar="R",
                   help="arrival rate in requests/s (Poisson rate, or the trace rescaled)")
    p.add_argument("--requests", type=int, metavar="N", help="Poisson requests")
    p.add_argument("--max-requests", type=int, metavar="N",
                   help="use only the first N requests of --trace")
    p.add_argument("--seed", type=int, default=0,
                   help="Poisson workload seed and the p2c router's seed (default: 0)")
    p.add_argument("--train-fraction", type=float, default=0.3, metavar="F",
                   help="fraction of the requests (the first ones) that trains the output-"
                        "length predictor; the rest is served (default 0.3; 0: train on all)")
    p.add_argument("--replicas", type=int, metavar="N",
                   help="aggregated pool of N instances (default 4 when no --pd is given)")
    p.add_argument("--pd", metavar="P:D[,P:D...]",
                   help="disaggregated layouts: P prefill and D decode instances")
    p.add_argument("--dynamic", action="store_true",
                   help="with --pd: also run each P:D with the dynamic ratio")
    p.add_argument("--reconfig-s", type=float, metavar="S",
                   help="with --dynamic: seconds an instance is down to change role "
                        "(default: DynamicRatio's)")
    p.add_argument("--router", default="round-robin",
                   help="router(s), comma-separated: round-robin, least-tokens, p2c, quartz, "
                        "quartz-mean, or 'all' (default: round-robin)")
    p.add_argument("--decode-router", default="round-robin",
                   help="with --pd: round-robin, least-kv or maps (default: round-robin)")
    p.add_argument("--link", default="rdma-200",
                   help="with --pd: KV link preset: nvlink, rdma-400, rdma-200, ideal "
                        "(default: rdma-200)")
    p.add_argument("--scheduler", default="fcfs",
                   help="waiting order(s) of the instances that prefill, comma-separated: "
                        "fcfs, ewsjf (default: fcfs)")
    p.add_argument("--quantile", type=float, help="QUARTZ quantile (default 0.9)")
    p.add_argument("--cost-model", default=None, help="per-iteration latency model "
                   "(default: attention-model-eff, as hikv serve)")
    p.add_argument("--goodput", action="store_true",
                   help="also search each configuration's goodput (runs it many times)")
    p.add_argument("--out", metavar="DIR", help="write summary.csv, decisions.csv, tails.png")
    p.add_argument("--force", action="store_true",
                   help="replace the files of an earlier run in --out")


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from hikv.io import prepare_out_dir
    from hikv.params import ParamError
    from hikv.presets import get_preset, resolve_methods, with_overrides
    from hikv.sim.cluster_params import (
        ROUTERS,
        ClusterParams,
        DynamicRatio,
        get_link,
    )
    from hikv.sim.cluster_report import (
        GridPoint,
        decision_rows,
        format_table,
        parse_pd,
        plot_tails,
        run_grid,
        write_rows,
    )
    from hikv.sim.cluster_sched import split_workload
    from hikv.sim.step_cost import DEFAULT_STEP_COST
    from hikv.sim.workload import poisson_workload, read_azure_trace

    from .cmd_serve import check_workload_flags

    check_workload_flags(args)
    if args.replicas is not None and not 1 <= args.replicas <= 1024:
        raise ParamError(f"--replicas = {args.replicas} is out of range: allowed [1, 1024]")
    pds = [parse_pd(x.strip()) for x in args.pd.split(",")] if args.pd else []
    if not pds and (args.dynamic or args.reconfig_s is not None):
        raise ParamError("--dynamic and --reconfig-s need --pd P:D")
    routers = list(ROUTERS) if args.router == "all" else [
        r.strip() for r in args.router.split(",")]
    scheds = [s.strip() for s in args.scheduler.split(",")]
    link = get_link(args.link)
    dyn = None
    if args.dynamic:
        dyn = (DynamicRatio(reconfig_s=args.reconfig_s) if args.reconfig_s is not None
               else DynamicRatio())
    base = ClusterParams(seed=args.seed, train_fraction=args.train_fraction, link=link,
                         decode_router=args.decode_router,
                         **({"quantile": args.quantile} if args.quantile is not None else {}))
    layouts = []
    if args.replicas is not None or not pds:
        layouts.append({"replicas": args.replicas or 4})
    for p, d in pds:
        layouts.append({"prefill": p, "decode": d})
        if dyn is not None:
            layouts.append({"prefill": p, "decode": d, "dynamic": dyn})
    params = [dataclasses.replace(base, router=r, scheduler=s, **lay)
              for lay in layouts for r in routers for s in scheds]
    out = prepare_out_dir(args.out, OWNED, force=args.force) if args.out else None
    cfg = with_overrides(get_preset(args.preset), args.set)
    methods = list(resolve_methods(cfg, args.method))
    if args.trace:
        if args.requests is not None:
            raise ParamError("--requests is for Poisson workloads; use --max-requests with "
                             "--trace")
        wl = read_azure_trace(args.trace, limit=args.max_requests)
        seed = None
    else:
        if args.max_requests is not None:
            raise ParamError("--max-requests is for --trace; use --requests for Poisson")
        wl = poisson_workload(cfg.serving.synthetic, seed=args.seed, rate_per_s=args.rate,
                              requests=args.requests)
        seed = args.seed
    predictor, served = split_workload(wl, args.train_fraction, q=base.quantile)
    if args.trace and args.rate is not None:
        served = served.at_rate(args.rate)
    ev = predictor.evaluate(served.prompt_tokens, served.output_tokens)
    print(f"preset {cfg.name}: model {cfg.model.name}; SLOs TTFT {cfg.serving.ttft_slo_s} s, "
          f"TPOT {cfg.serving.tpot_slo_s} s; policy {cfg.serving.policy}")
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
                    cost_model=args.cost_model or DEFAULT_STEP_COST,
                    with_goodput=args.goodput, seed=seed,
                    progress=lambda s: print(f"  ... {s} done", file=sys.stderr, flush=True))
    rows = [row for _, row in runs]
    print(format_table(rows))
    if out is not None:
        written = [write_rows(out / "summary.csv", rows)]
        dec = [d for i, (res, _) in enumerate(runs) for d in decision_rows(res, run=i)]
        written.append(write_rows(out / "decisions.csv", dec))
        written.append(plot_tails([res for res, _ in runs], out / "tails.png"))
        for p in written:
            print(f"wrote {p}")
    return 0
