"""Cluster serving benchmark: aggregated pool vs static P/D vs dynamic P/D, full KV vs HiKV,
routers on the tails, FCFS vs EWSJF, round-robin vs MAPS decode admission, on the Azure
conversation and code traces (rate scaled). Writes results.csv, results.md (markdown tables),
tails_<trace>.png and goodput.png into --out.

    python benchmarks/cluster_bench.py --out out/cluster            # about 15 min of CPU
    python benchmarks/cluster_bench.py --out out/cluster --quick    # under 2 min

Every number comes from :func:`hikv.sim.cluster.simulate_cluster` (and
:func:`hikv.sim.cluster_goodput.cluster_goodput`); the command line and code version are recorded in
every row. Run ``--jobs N`` to spread configurations over N local processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from hikv.params import ParamError
from hikv.presets import get_preset, resolve_methods
from hikv.sim.cluster import simulate_cluster
from hikv.sim.cluster_goodput import cluster_goodput
from hikv.sim.cluster_params import ClusterParams, DynamicRatio, get_link
from hikv.sim.cluster_report import markdown_table, plot_tails, result_row, write_rows
from hikv.sim.cluster_sched import split_workload
from hikv.sim.serving_report import code_version
from hikv.sim.step_cost import DEFAULT_STEP_COST
from hikv.sim.workload import find_azure_trace, read_azure_trace

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
        # the dynamic ratio from the middle split and from the most prefill-starved one
        for p0, d0 in dict.fromkeys([ratios[len(ratios) // 2], ratios[0]]):
            pts.append(("layout", ClusterParams(prefill=p0, decode=d0, router="least-tokens",
                                                dynamic=DynamicRatio()), m))
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


def one(job: dict[str, Any]) -> dict[str, Any]:
    """Run one configuration (a picklable job) and return its row."""
    cfg = get_preset(job["preset"])
    if job["ttft_slo_s"] is not None:
        cfg = cfg.replace(serving=dataclasses.replace(cfg.serving, ttft_slo_s=job["ttft_slo_s"]))
    spec = resolve_methods(cfg, job["method"])[job["method"]]
    pred, wl = split_workload(read_azure_trace(job["trace"], limit=job["requests"]),
                              job["params"].train_fraction)
    wl = wl.at_rate(job["rate"])
    ev = pred.evaluate(wl.prompt_tokens, wl.output_tokens)
    t0 = time.perf_counter()
    res = simulate_cluster(cfg, spec, wl, job["params"], predictor=pred, method=job["method"],
                           predictor_eval=ev, cost_model=job["cost_model"])
    good = None
    if job["goodput"]:
        good = cluster_goodput(cfg, spec, wl, job["params"], predictor=pred,
                               cost_model=job["cost_model"])
    row = result_row(res, seed=None, version=job["version"],
                     goodput=good.rate_per_s if good else None,
                     goodput_bracketed=good.bracketed if good else None)
    row.update({"experiment": job["experiment"], "trace": job["trace_name"],
                "rate_per_s": job["rate"], "bench_wall_s": time.perf_counter() - t0,
                "command": job["command"]})
    return {"row": row, "result": res if job["keep"] else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--traces", default="conv,code", help="Azure traces (conv, code)")
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
        path = find_azure_trace(tr)
        if path is None:
            raise ParamError(f"trace {tr!r} not found (HIKV_DATA or shared/data/azure-llm-2023)")
        if tr not in rates:
            raise ParamError(f"--rate gives no rate for trace {tr!r}")
        for exp, params, m in grid(args.instances, args.quick):
            if params.prefill:
                params = dataclasses.replace(params, link=link)
            jobs.append({"preset": args.preset, "trace": str(path), "trace_name": tr,
                         "requests": args.requests, "rate": float(rates[tr]),
                         "ttft_slo_s": float(slos[tr]) if tr in slos else None,
                         "cost_model": args.cost_model,
                         "params": params, "method": m, "experiment": exp,
                         "goodput": args.goodput and exp == "layout", "version": version,
                         "keep": exp in ("layout", "router"), "command": command})
    t0 = time.time()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            done = list(ex.map(one, jobs))
    else:
        done = []
        for j in jobs:
            done.append(one(j))
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
