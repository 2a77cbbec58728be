"""Simulate serving one model on one accelerator replica with KV methods, iteration by
iteration (continuous batching, chunked prefill, paged KV, recompute preemption).

Workload: an Azure LLM inference trace (--trace FILE, columns TIMESTAMP,ContextTokens,
GeneratedTokens; --rate R rescales its arrival times to R requests/s), or Poisson arrivals at
--rate R requests/s with the preset's lognormal lengths (without --trace; without --rate the
preset's rate). Prints one summary line per method: throughput (requests/s, output tokens/s),
TTFT / TPOT / end-to-end latency percentiles (ms or s as labelled), the fraction meeting both
SLOs, goodput (requests/s, with --goodput), preemptions, KV utilisation, and the Little's-law
check (L from the scheduler's queues against lambda*W from the request records, over the
steady-state window; relative error). Files are written only with --out DIR: summary.csv (one
row per method, every configuration field, seed, code version), requests_<method>.csv (one row
per request), latency_cdf.png and kv_use.png.

Cluster flags (--cluster PRESET, --replicas, --pd, --dynamic-ratio, --router, --decode-router,
--link, --scheduler, ...; scripts/serving_flags.py defines them for both commands) make it
a cluster run: replicas behind a router or P/D disaggregation (docs/cluster.md).

--device a100 serves on a measured GPU (docs/serving.md, "Measured device"): every
non-attention operator from a Vidur-format mlp.csv profile (--profile, default found under
shared/data/vidur-profiles), attention and the LM head modelled; --breakdown prints
per-iteration times by operator, --section the report's measured-device serving section.
"""

from __future__ import annotations

import argparse
import math
import sys

from . import serving_flags

HELP = "simulate serving a trace or a Poisson workload with KV methods (latency, goodput)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every flag of `hikv serve`, cluster flags included (one set of definitions, shared with
    `hikv cluster`: :mod:`hikv.scripts.serving_flags`)."""
    serving_flags.add_arguments(p)

def run(args: argparse.Namespace) -> int:
    from .cmd_cluster import run_cluster
    from .serving_flags import (
        check_workload_flags,
        is_cluster_run,
        require_rescalable,
        serving_config,
        workload_from_flags,
    )

    if is_cluster_run(args):
        return run_cluster(args)
    args.method = args.method or "hikv"
    from hikv.io import prepare_out_dir
    from hikv.params import ParamError
    from hikv.presets import get_preset, resolve_methods, with_overrides
    from hikv.sim.serving.engine import block_bytes, kv_capacity_blocks
    from hikv.sim.serving.report import (
        code_version,
        format_table,
        plot_cdfs,
        request_rows,
        run_methods,
        write_csv,
    )

    from .serving_flags import gpu_system, resolve_system

    check_workload_flags(args)
    out = (prepare_out_dir(args.out, OWNED, force=args.force) if args.out else None)
    cfg = with_overrides(get_preset(args.preset or ("paper" if gpu_system(args) else "default")),
                         args.set)
    if args.model:
        from hikv.presets import get_model_shape

        cfg = cfg.replace(model=get_model_shape(args.model))
    if (args.breakdown or args.section) and not gpu_system(args):
        raise ParamError("--breakdown and --section need --device (or --system gpu or "
                         "gpu+hikv)")
    sc = resolve_system(args, cfg)             # the served system, its configuration and cost
    cfg = sc.cfg
    device_cost = sc.cost_model if callable(sc.cost_model) else None
    args.cost_model = sc.cost_model
    if args.admission:
        args.policy = f"{args.policy or cfg.serving.policy}:{args.admission}"
    cfg = serving_config(cfg, args, model=False)
    resolve_methods(cfg, args.method)          # reject bad names before any work
    if args.export_vidur:
        from hikv.sim.serving.vidur_export import export_methods

        for p in export_methods(cfg, args.method, args.export_vidur):
            print(f"wrote {p}")
        return 0
    wl, seed = workload_from_flags(args, cfg)
    if args.trace and args.rate is not None:
        require_rescalable(wl, args.rate)
        wl = wl.at_rate(args.rate)
    if device_cost is not None and (args.breakdown or args.section):
        from hikv.sim.serving.device_report import breakdown_table, device_section

        if args.breakdown:                        # one table per method asked for
            from hikv.presets import resolve_methods

            print("\n\n".join(breakdown_table(cfg, device_cost, m)
                                for m in resolve_methods(cfg, args.method)))
        if args.section:
            print(device_section(cfg, wl, device_cost, methods=args.method,
                                 policy=args.policy))
            return 0
    cap = kv_capacity_blocks(cfg)
    print(f"preset {cfg.name}: model {cfg.model.name}, {cfg.accel.mem_bandwidth_bytes_per_s:.3g} "
          f"B/s, {cfg.accel.linear_flops_per_s:.3g} FLOP/s, KV capacity {cap} blocks of "
          f"{block_bytes(cfg)} B ({cap * cfg.serving.block_tokens} full-KV tokens)")
    if args.goodput and len(wl) > 1 and wl.span_s == 0:
        raise ParamError(f"--goodput: {wl.source} has all {len(wl)} requests at one instant "
                         "(zero span), so its arrival rate cannot be searched; give a trace "
                         "whose arrivals span time")
    rate = (f"{wl.rate_per_s:.4g}/s" if len(wl) > 1 and wl.span_s > 0 else
            "one instant (zero span: no arrival rate)")
    print(f"workload {wl.source}: {len(wl)} requests at {rate}; policy "
          f"{args.policy or cfg.serving.policy}, max batched tokens "
          f"{cfg.serving.max_batched_tokens}, "
          f"max running {cfg.serving.max_running}; SLOs TTFT {cfg.serving.ttft_slo_s} s, "
          f"TPOT {cfg.serving.tpot_slo_s} s; cost model "
          f"{getattr(args.cost_model, 'name', args.cost_model)}")
    print(sc.description)
    sys.stdout.flush()
    runs = run_methods(cfg, wl, args.method, cost_model=args.cost_model, policy=args.policy,
                       with_goodput=args.goodput, seed=seed,
                       progress=lambda name: print(f"  ... {name} done", file=sys.stderr,
                                                   flush=True))
    rows = [{"system": sc.system, **row} for _, _, row in runs]
    print(f"system {sc.system}:")
    print(format_table(rows))
    for res, _, _ in runs:
        lc = res.little
        note = next(r["little_note"] for r2, _, r in runs if r2 is res)
        head = (f"Little's law [{res.method}]: window {lc.start_s:.1f}-{lc.end_s:.1f} s, "
                f"{lc.requests} requests")
        if lc.requests == 0 or not lc.end_s > lc.start_s or not math.isfinite(lc.rel_error):
            print(f"{head}: not checked ({note or 'the window is empty'})")
        else:
            print(f"{head}: L = {lc.L:.4f}, lambda*W = {lc.lambda_w:.4f}, relative error "
                  f"{lc.rel_error:+.3e}" + (f" -- {note}" if note else ""))
    for _, good, row in runs:
        if good is not None and row["goodput_bound"] != "measured":
            print(f"goodput [{row['method']}]: {row['goodput_bound']} -- "
                  + ("every rate tried up to the search cap met the SLOs"
                     if row["goodput_bound"] == "lower bound" else
                     f"no rate tried (lowest {row['goodput_min_rate_tried_req_per_s']:.4g}/s) "
                     "met the SLOs"))
    if out is not None:
        version = code_version()
        written = [write_csv(out / "summary.csv", rows)]
        for res, _, _ in runs:
            written.append(write_csv(out / f"requests_{res.method}.csv",
                                     request_rows(res, seed=seed, version=version)))
        written.append(plot_cdfs([r for r, _, _ in runs], out))
        written.append(_plot_kv([r for r, _, _ in runs], out))
        for p in written:
            print(f"wrote {p}")
    return 0


#: The files ``hikv serve --out`` writes (cleared by --force).
OWNED = ("summary.csv", "requests_*.csv", "latency_cdf.png", "kv_use.png")


def _plot_kv(results, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.5))
    for r in results:
        ax.step(r.kv_time_s, r.kv_used_blocks / r.kv_capacity_blocks, where="post",
                label=r.method, lw=0.8)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("KV blocks held / capacity")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    from hikv.io import save_figure

    return save_figure(fig, out / "kv_use.png", dpi=110)
