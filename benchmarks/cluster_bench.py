"""Cluster serving benchmark: aggregated pool vs static P/D vs dynamic P/D, full KV vs HiKV,
routers on the tails, FCFS vs EWSJF, round-robin vs MAPS decode admission, on the Azure
conversation and code traces (rate scaled). Writes results.csv, results.md (markdown tables),
tails_<trace>.png and goodput.png into --out.

    python benchmarks/cluster_bench.py --out out/cluster            # about 15 min of CPU
    python benchmarks/cluster_bench.py --out out/cluster --quick    # under 2 min

Every number comes from :func:`hikv.sim.cluster.engine.simulate_cluster` (and
:func:`hikv.sim.cluster.goodput.cluster_goodput`), one cell per configuration
(:func:`hikv.sim.cluster.report.run_cell`); the command line and code version are recorded in
every row. ``--jobs N`` spreads the cells over N local processes, ``--executor ray`` over a
Ray cluster (the accuracy suite's executor, :mod:`hikv.executor`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from hikv.executor import run_tasks
from hikv.params import ParamError
from hikv.sim.cluster.params import RATIO_POLICIES, ClusterParams, DynamicRatio, get_link
from hikv.sim.cluster.report import markdown_table, plot_tails, run_cell, write_rows
from hikv.sim.serving.report import code_version
from hikv.sim.serving.step_cost import DEFAULT_STEP_COST
from hikv.sim.serving.workload import find_azure_trace

METHODS = ("full", "hikv-evict")


def grid(instances: int, quick: bool) -> list[tuple[str, ClusterParams, str]]:
    """(experiment, cluster params, method) of the benchmark."""
    agg = ClusterParams(replicas=instances, router="least-tokens")
    ratios = [(p, instances - p) for p in range(1, instances)]
    if quick:
        ratios = ratios[:1]
    pts: list[tuple[str, ClusterParams, str]] = []
    for m in METHODS:
        pts.append(("layout", agg, m))
        for p, d in ratios:
            pts.append(("layout", ClusterParams(prefill=p, decode=d, router="least-tokens"), m))
        # the dynamic ratio (DOPD's rule and the threshold rule) from the middle split and
        # from the most prefill-starved one
        for p0, d0 in dict.fromkeys([ratios[len(ratios) // 2], ratios[0]]):
            for rule in RATIO_POLICIES:
                pts.append(("layout", ClusterParams(prefill=p0, decode=d0,
                                                    router="least-tokens",
                                                    dynamic=DynamicRatio(policy=rule)), m))
    routers = ("round-robin", "least-tokens", "p2c", "quartz", "quartz-mean")
    for r in routers[:2] if quick else routers:
        pts.append(("router", dataclasses.replace(agg, router=r), "full"))
    pts.append(("scheduler", dataclasses.replace(agg, scheduler="ewsjf"), "full"))
    p0, d0 = ratios[len(ratios) // 2]
    for dr in ("round-robin", "maps"):
        pts.append(("decode-admission", ClusterParams(prefill=p0, decode=d0,
                                                      router="least-tokens",
                                                      decode_router=dr), "full"))
    return pts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--traces", default="conv,code",
                    help="Azure traces (conv, code) or shift (a Poisson workload whose mix "
                         "shifts from prefill to decode work half-way, "
                         "hikv.sim.cluster.report.shifting_workload)")
    ap.add_argument("--requests", type=int, default=4000,
                    help="first N requests of each trace (30%% train the predictor)")
    ap.add_argument("--rate", default="conv=10,code=6",
                    help="arrival rate per trace, requests/s (trace=rate,...)")
    ap.add_argument("--ttft-slo", default="",
                    help="TTFT SLO per trace in s (trace=s,...; default: the preset's)")
    ap.add_argument("--cost-model", default=DEFAULT_STEP_COST,
                    help=f"per-iteration latency model (default {DEFAULT_STEP_COST})")
    ap.add_argument("--instances", type=int, default=4, help="instances per cluster")
    ap.add_argument("--link", default="rdma-200", help="KV link preset")
    ap.add_argument("--goodput", action="store_true",
                    help="search goodput for the layout experiment (8-12 runs each)")
    ap.add_argument("--quick", action="store_true", help="a small grid (CI-sized)")
    ap.add_argument("--jobs", type=int, default=1, help="local worker processes")
    ap.add_argument("--executor", default="process", choices=("process", "ray"),
                    help="run the cells on local processes (--jobs) or on Ray (the accuracy "
                         "suite's executor, hikv.executor; needs the 'ray' extra)")
    ap.add_argument("--experiments", default="layout,router,scheduler,decode-admission",
                    help="experiments to run (comma-separated)")
    args = ap.parse_args(argv)
    rates = dict(x.split("=") for x in args.rate.split(","))
    slos = dict(x.split("=") for x in args.ttft_slo.split(",")) if args.ttft_slo else {}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    version = code_version()
    link = get_link(args.link)
    command = "python benchmarks/cluster_bench.py " + " ".join(argv if argv is not None
                                                               else sys.argv[1:])
    jobs = []
    for tr in args.traces.split(","):
        path = "shift" if tr == "shift" else find_azure_trace(tr)
        if path is None:
            raise ParamError(f"trace {tr!r} not found (HIKV_DATA or shared/data/azure-llm-2023)")
        if tr not in rates:
            raise ParamError(f"--rate gives no rate for trace {tr!r}")
        for exp, params, m in grid(args.instances, args.quick):
            if exp not in args.experiments.split(","):
                continue
            if params.prefill:
                params = dataclasses.replace(params, link=link)
            if tr == "shift":
                # the predictor is trained on the whole workload (its first 30 % holds only
                # the first phase, whose outputs say nothing of the second's)
                params = dataclasses.replace(params, train_fraction=0.0)
            jobs.append({"preset": args.preset, "trace": str(path), "trace_name": tr,
                         "requests": args.requests, "rate": float(rates[tr]),
                         "ttft_slo_s": float(slos[tr]) if tr in slos else None,
                         "cost_model": args.cost_model,
                         "params": params, "method": m, "experiment": exp,
                         "goodput": args.goodput and exp == "layout", "version": version,
                         "keep": exp in ("layout", "router"), "command": command})
    t0 = time.time()
    if args.jobs > 1 or args.executor == "ray":
        done = run_tasks(run_cell, jobs, executor=args.executor, workers=args.jobs)
    else:
        done = []
        for j in jobs:
            done.append(run_cell(j))
            r = done[-1]["row"]
            print(f"  {r['trace']} {r['experiment']} {r['layout']} {r['router']} "
                  f"{r['scheduler']} {r['decode_router']} {r['method']}: "
                  f"{r['bench_wall_s']:.1f} s", file=sys.stderr, flush=True)
    rows = [d["row"] for d in done]
    write_rows(out / "results.csv", rows)
    md = [f"# Cluster benchmark\n\n`{command}` ({time.time() - t0:.0f} s wall, code "
          f"{version}); preset {args.preset}, {args.instances} instances, link {link.name}, "
          f"cost model {args.cost_model}.\n"]
    for tr in args.traces.split(","):
        tr_rows = [r for r in rows if r["trace"] == tr]
        if tr_rows:
            r0 = tr_rows[0]
            md.append(f"\n## {tr} trace at {rates[tr]} requests/s, SLOs TTFT "
                      f"{r0['config.serving.ttft_slo_s']} s, TPOT "
                      f"{r0['config.serving.tpot_slo_s']} s ({r0['requests']} requests "
                      f"served; predictor MAE {r0['predictor_mae_tokens']:.1f} tokens vs "
                      f"{r0['predictor_baseline_mae_tokens']:.1f} for the global median, "
                      f"Spearman {r0['predictor_spearman']:.2f})\n")
        for exp in ("layout", "router", "scheduler", "decode-admission"):
            sel = [r for r in tr_rows if r["experiment"] == exp]
            if sel:
                md.append(f"\n### {exp}\n\n" + markdown_table(sel) + "\n")
        res = [d["result"] for d in done if d["result"] is not None
               and d["row"]["trace"] == tr]
        if res:
            plot_tails(res, out / f"tails_{tr}.png")
    if args.goodput:
        _plot_goodput(rows, out / "goodput.png")
    (out / "results.md").write_text("".join(md))
    print("".join(md))
    return 0


def _plot_goodput(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hikv.io import save_figure

    sel = [r for r in rows if r["experiment"] == "layout" and "goodput_req_per_s" in r]
    labels = sorted({f"{r['trace']} {r['layout']}" for r in sel})
    fig, ax = plt.subplots(figsize=(10, 4))
    w = 0.4
    for k, m in enumerate(METHODS):
        ys = [next((r["goodput_req_per_s"] for r in sel if r["method"] == m
                    and f"{r['trace']} {r['layout']}" == lab), 0.0) for lab in labels]
        ax.bar([i + k * w for i in range(len(labels))], ys, w, label=m)
    ax.set_xticks([i + w / 2 for i in range(len(labels))], labels, rotation=30, ha="right",
                  fontsize=7)
    ax.set_ylabel("goodput (requests/s)")
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    save_figure(fig, path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
