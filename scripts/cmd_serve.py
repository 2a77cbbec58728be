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
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

HELP = "simulate serving a trace or a Poisson workload with KV methods (latency, goodput)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="default", help="configuration preset (default: default)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                   help="override a preset parameter, e.g. policy.scorer=page_bounds "
                        "(repeatable)")
    p.add_argument("--method", default="hikv",
                   help="KV method(s), comma-separated, or 'all': full, h2o, snapkv, quest, "
                        "sparq, ds, hikv, hikv-evict, hikv-query (default: hikv)")
    p.add_argument("--trace", metavar="FILE",
                   help="Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,"
                        "GeneratedTokens)")
    p.add_argument("--rate", type=float, metavar="R",
                   help="arrival rate in requests/s: Poisson rate, or the rate a --trace is "
                        "rescaled to")
    p.add_argument("--requests", type=int, metavar="N",
                   help="Poisson requests (default: the preset's serving.synthetic.requests)")
    p.add_argument("--max-requests", type=int, metavar="N",
                   help="replay only the first N requests of --trace")
    p.add_argument("--seed", type=int, default=0, help="Poisson workload seed (default: 0)")
    p.add_argument("--policy", help="scheduler policy: vllm-v1, sjf, serial "
                                    "(default: the preset's serving.policy)")
    p.add_argument("--cost-model", default=None,
                   help="per-iteration latency model: attention-model (decode attention from "
                        "the attention cost model, the rest by roofline) or roofline "
                        "(default: attention-model)")
    p.add_argument("--max-batched-tokens", "--token-budget", dest="max_batched_tokens", type=int,
                   help="override serving.max_batched_tokens: tokens one iteration may batch "
                        "(prefill chunks plus decodes; --token-budget is its old name)")
    p.add_argument("--max-running", type=int, help="override serving.max_running (sequences)")
    p.add_argument("--ttft-slo", type=float, metavar="S", help="override the TTFT SLO (s)")
    p.add_argument("--tpot-slo", type=float, metavar="S", help="override the TPOT SLO (s)")
    p.add_argument("--goodput", action="store_true",
                   help="also search the goodput (highest rate with >= slo_attainment of "
                        "requests meeting both SLOs; runs the workload many times)")
    p.add_argument("--out", metavar="DIR", help="write CSVs and plots into DIR")


def run(args: argparse.Namespace) -> int:
    from hikv.params import ParamError
    from hikv.presets import get_preset, resolve_methods, with_overrides
    from hikv.sim.serving import block_bytes, kv_capacity_blocks
    from hikv.sim.serving_report import (
        _check_out_dir,
        code_version,
        format_table,
        plot_cdfs,
        request_rows,
        run_methods,
        write_csv,
    )
    from hikv.sim.step_cost import DEFAULT_STEP_COST
    from hikv.sim.workload import poisson_workload, read_azure_trace

    cfg = with_overrides(get_preset(args.preset), args.set)
    args.cost_model = args.cost_model or DEFAULT_STEP_COST
    sv = cfg.serving
    changes = {k: v for k, v in (("max_batched_tokens", args.max_batched_tokens),
                                 ("max_running", args.max_running),
                                 ("ttft_slo_s", args.ttft_slo),
                                 ("tpot_slo_s", args.tpot_slo)) if v is not None}
    if changes:
        cfg = cfg.replace(serving=dataclasses.replace(sv, **changes))
    resolve_methods(cfg, args.method)          # reject bad names before any work
    if args.trace:
        if args.requests is not None:
            raise ParamError("--requests is for Poisson workloads; use --max-requests with "
                             "--trace")
        wl = read_azure_trace(args.trace, limit=args.max_requests)
        if args.rate is not None:
            wl = wl.at_rate(args.rate)
        seed = None
    else:
        if args.max_requests is not None:
            raise ParamError("--max-requests is for --trace; use --requests for Poisson")
        wl = poisson_workload(cfg.serving.synthetic, seed=args.seed, rate_per_s=args.rate,
                              requests=args.requests)
        seed = args.seed
    out = _check_out_dir(args.out) if args.out else None
    cap = kv_capacity_blocks(cfg)
    print(f"preset {cfg.name}: model {cfg.model.name}, {cfg.accel.mem_bandwidth_bytes_per_s:.3g} "
          f"B/s, {cfg.accel.linear_flops_per_s:.3g} FLOP/s, KV capacity {cap} blocks of "
          f"{block_bytes(cfg)} B ({cap * cfg.serving.block_tokens} full-KV tokens)")
    print(f"workload {wl.source}: {len(wl)} requests at {wl.rate_per_s:.4g}/s; policy "
          f"{args.policy or cfg.serving.policy}, max batched tokens "
          f"{cfg.serving.max_batched_tokens}, "
          f"max running {cfg.serving.max_running}; SLOs TTFT {cfg.serving.ttft_slo_s} s, "
          f"TPOT {cfg.serving.tpot_slo_s} s; cost model {args.cost_model}")
    sys.stdout.flush()
    runs = run_methods(cfg, wl, args.method, cost_model=args.cost_model, policy=args.policy,
                       with_goodput=args.goodput, seed=seed,
                       progress=lambda name: print(f"  ... {name} done", file=sys.stderr,
                                                   flush=True))
    rows = [row for _, _, row in runs]
    print(format_table(rows))
    for res, _, _ in runs:
        lc = res.little
        print(f"Little's law [{res.method}]: window {lc.start_s:.1f}-{lc.end_s:.1f} s, "
              f"{lc.requests} requests: L = {lc.L:.4f}, lambda*W = {lc.lambda_w:.4f}, "
              f"relative error {lc.rel_error:+.3e}")
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
    fig.tight_layout()
    path = out / "kv_use.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
