"""Rows, tables, decision logs and plots of cluster runs (``hikv cluster``,
``benchmarks/cluster_bench.py``). Nothing is written unless a function is given a path."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hikv.params import Config, ParamError
from hikv.presets import resolve_methods
from hikv.sim.cluster.engine import ClusterResult, simulate_cluster
from hikv.sim.cluster.goodput import cluster_goodput
from hikv.sim.cluster.params import ClusterParams
from hikv.sim.cluster.sched import OutputPredictor, PredictorEval
from hikv.sim.serving.report import code_version, config_fields, write_csv
from hikv.sim.serving.step_cost import DEFAULT_STEP_COST
from hikv.sim.serving.workload import Workload

__all__ = ["GridPoint", "run_grid", "result_row", "decision_rows", "format_table",
           "plot_tails", "parse_pd", "markdown_table", "run_cell", "shifting_workload"]


@dataclass(frozen=True)
class GridPoint:
    """One configuration of a sweep: a cluster layout and a KV method."""

    params: ClusterParams
    method: str


def parse_pd(text: str) -> tuple[int, int]:
    """``"P:D"`` -> (P, D), both integers >= 1 (ParamError naming ``--pd`` otherwise)."""
    a, sep, b = text.partition(":")
    try:
        p, d = int(a), int(b)
    except ValueError:
        p = d = 0
    if not sep or p < 1 or d < 1 or p > 1024 or d > 1024:
        raise ParamError(f"--pd = {text!r} is out of range: allowed P:D with integers P and D "
                         "in [1, 1024], e.g. 3:5")
    return p, d


def result_row(res: ClusterResult, *, seed: int | None, version: str,
               goodput: float | None = None, goodput_bracketed: bool | None = None
               ) -> dict[str, Any]:
    """One summary row: metrics, goodput (if searched), provenance, every config field."""
    row = res.summary()
    if goodput is not None:
        row["goodput_req_per_s"] = goodput
        row["goodput_bracketed"] = goodput_bracketed
    p = res.params
    row.update({"link_bandwidth_bytes_per_s": p.link.bandwidth_bytes_per_s,
                "link_latency_s": p.link.latency_s, "quantile": p.quantile,
                "ewsjf_tokens_per_s": p.ewsjf_tokens_per_s, "cluster_seed": p.seed,
                "train_fraction": p.train_fraction,
                "dynamic_interval_s": p.dynamic.interval_s if p.dynamic else math.nan,
                "dynamic_reconfig_s": p.dynamic.reconfig_s if p.dynamic else math.nan,
                "seed": seed, "code_version": version})
    row.update(config_fields(res.config))
    return row


def run_grid(cfg: Config, workload: Workload, points: Sequence[GridPoint], *,
             predictor: OutputPredictor, predictor_eval: PredictorEval | None,
             cost_model: Any = DEFAULT_STEP_COST, with_goodput: bool = False,
             seed: int | None = None, progress: Callable[[str], None] | None = None
             ) -> list[tuple[ClusterResult, dict[str, Any]]]:
    """Simulate every grid point on ``workload``; returns (result, row) per point."""
    version = code_version()
    out = []
    specs: dict[str, Any] = {}
    for gp in points:
        if gp.method not in specs:
            specs.update(resolve_methods(cfg, gp.method))
        spec = specs[gp.method]
        res = simulate_cluster(cfg, spec, workload, gp.params, predictor=predictor,
                               method=gp.method, cost_model=cost_model,
                               predictor_eval=predictor_eval)
        good = None
        if with_goodput:
            good = cluster_goodput(cfg, spec, workload, gp.params, predictor=predictor,
                                   cost_model=cost_model)
        row = result_row(res, seed=seed, version=version,
                         goodput=good.rate_per_s if good else None,
                         goodput_bracketed=good.bracketed if good else None)
        out.append((res, row))
        if progress is not None:
            progress(f"{gp.params.label} {gp.params.router} {gp.params.scheduler} {gp.method}")
    return out


def decision_rows(res: ClusterResult, *, run: int) -> list[dict[str, Any]]:
    """The router's decisions, one row per request: where it was prefilled (and the router's
    score), where it was decoded, the KV it shipped and when."""
    cols = {"request": np.arange(len(res.arrival_s)), "arrival_s": res.arrival_s,
            "prompt_tokens": res.prompt_tokens, "output_tokens": res.output_tokens,
            "instance": res.route, "router_score": res.route_score,
            "decode_instance": res.decode_route, "transfer_bytes": res.transfer_bytes,
            "transfer_start_s": res.transfer_start_s, "transfer_end_s": res.transfer_end_s,
            "first_token_s": res.first_token_s, "finish_s": res.finish_s,
            "slowdown": res.slowdown, "slo_met": res.slo_met()}
    fixed = {"run": run, "layout": res.params.label, "router": res.params.router,
             "scheduler": res.params.scheduler, "method": res.method}
    names = list(cols)
    data = [c.tolist() for c in cols.values()]
    return [{**fixed, **dict(zip(names, v, strict=True))} for v in zip(*data, strict=True)]


_TABLE = (
    ("layout", "layout", "{}"), ("router", "router", "{}"), ("decode", "decode_router", "{}"),
    ("sched", "scheduler", "{}"), ("method", "method", "{}"),
    ("TTFT p50 ms", "ttft_p50_s", "{:.1f}", 1e3), ("TTFT p90 ms", "ttft_p90_s", "{:.1f}", 1e3),
    ("TTFT p99 ms", "ttft_p99_s", "{:.1f}", 1e3), ("TPOT p50 ms", "tpot_p50_s", "{:.2f}", 1e3),
    ("TPOT p90 ms", "tpot_p90_s", "{:.2f}", 1e3), ("TPOT p99 ms", "tpot_p99_s", "{:.2f}", 1e3),
    ("SLO met", "slo_attainment", "{:.3f}"), ("goodput req/s", "goodput_req_per_s", "{:.2f}"),
    ("KV MB/req", "transfer_bytes_mean", "{:.2f}", 1e-6),
    ("xfer p99 ms", "transfer_s_p99", "{:.2f}", 1e3), ("preempt", "preemptions", "{}"),
    ("Jain", "jain_tokens", "{:.3f}"), ("slowdown p99", "slowdown_p99", "{:.2f}"),
    ("reconf", "reconfigurations", "{}"), ("Little err", "little_max_rel_error", "{:.1e}"),
    ("sim s", "sim_wall_s", "{:.1f}"),
)


def _cells(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    cols = [c for c in _TABLE if any(c[1] in r for r in rows)]
    body = []
    for r in rows:
        line = []
        for c in cols:
            v = r.get(c[1])
            if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
                line.append("-")
                continue
            if len(c) > 3:
                v = v * c[3]
            text = c[2].format(v)
            if c[1] == "goodput_req_per_s" and r.get("goodput_bracketed") is False:
                text = "bound " + text
            line.append(text)
        body.append(line)
    return [c[0] for c in cols], body


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A fixed-width table, one line per row."""
    head, body = _cells(rows)
    cells = [head] + body
    widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
    return "\n".join("  ".join(x.rjust(w) if i > 4 else x.ljust(w)
                               for i, (x, w) in enumerate(zip(row, widths, strict=True)))
                     for row in cells)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """The same table in markdown."""
    head, body = _cells(rows)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)


def plot_tails(results: Sequence[ClusterResult], path: str | os.PathLike[str]) -> Path:
    """TTFT and TPOT CDFs (log x), one curve per run, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hikv.io import save_figure

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        lab = f"{r.params.label} {r.params.router} {r.params.scheduler} {r.method}"
        for ax, x in zip(axes, (r.ttft_s, r.tpot_s), strict=True):
            x = np.sort(x[~np.isnan(x)])
            if x.size:
                ax.plot(x, np.arange(1, x.size + 1) / x.size, lw=0.9, label=lab)
    for ax, name in zip(axes, ("TTFT (s)", "TPOT (s)"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of requests")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=6)
    return save_figure(fig, Path(path), dpi=110)


def write_rows(path: str | os.PathLike[str], rows: Sequence[dict[str, Any]]) -> Path:
    """CSV of ``rows`` (NaN where a value does not apply is an empty cell)."""
    def cell(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return "" if math.isnan(v) else str(v)
        return v

    clean = [{k: cell(v) for k, v in r.items()} for r in rows]
    return write_csv(path, clean)


def shifting_workload(seed: int, n: int = 400, rate: float = 40.0) -> Workload:
    """Poisson arrivals at ``rate``/s whose mix shifts half-way: prompts of 2,500-3,500 tokens
    with 2-7 output tokens (prefill work), then prompts of 50-149 tokens with 300-499 output
    tokens (decode work); seeded by ``seed`` (a dynamic-ratio test and benchmark workload)."""
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1 / rate, n))
    arr -= arr[0]
    half = n // 2
    prompt = np.concatenate([rng.integers(2500, 3500, half), rng.integers(50, 150, n - half)])
    output = np.concatenate([rng.integers(2, 8, half), rng.integers(300, 500, n - half)])
    return Workload(arrival_s=arr, prompt_tokens=prompt.astype(np.int64),
                    output_tokens=output.astype(np.int64), rate_per_s=rate,
                    source=f"shifting mix, seed {seed}")


def run_cell(job: dict[str, Any]) -> dict[str, Any]:
    """Run one cell of a cluster sweep (``benchmarks/cluster_bench.py``), a picklable job for
    :func:`hikv.executor.run_tasks` (local processes or Ray): ``preset``, ``method``,
    ``params`` (:class:`ClusterParams`), ``trace`` (an Azure trace path, ``"shift"`` for
    :func:`shifting_workload`, or None for the preset's Poisson workload of ``requests`` at
    ``rate``; both seeded by ``params.seed``),
    ``requests`` (the first N of the trace), ``rate`` (requests/s), ``ttft_slo_s`` (or None),
    ``cost_model``, ``goodput`` (search it), ``version``, ``keep`` (return the result too),
    ``experiment``, ``trace_name``, ``command``. Returns ``{"row": ..., "result": ...}``."""
    import dataclasses
    import time

    from hikv.presets import get_preset
    from hikv.sim.cluster.sched import split_workload
    from hikv.sim.serving.workload import poisson_workload, read_azure_trace

    cfg = get_preset(job["preset"])
    if job.get("ttft_slo_s") is not None:
        cfg = cfg.replace(serving=dataclasses.replace(cfg.serving, ttft_slo_s=job["ttft_slo_s"]))
    spec = resolve_methods(cfg, job["method"])[job["method"]]
    params: ClusterParams = job["params"]
    if job["trace"] is None:
        wl = poisson_workload(cfg.serving.synthetic, seed=params.seed, rate_per_s=job["rate"],
                              requests=job["requests"])
    elif job["trace"] == "shift":
        wl = shifting_workload(params.seed, n=job["requests"], rate=job["rate"])
    else:
        wl = read_azure_trace(job["trace"], limit=job["requests"])
    pred, wl = split_workload(wl, params.train_fraction)
    wl = wl.at_rate(job["rate"])
    ev = pred.evaluate(wl.prompt_tokens, wl.output_tokens)
    t0 = time.perf_counter()
    res = simulate_cluster(cfg, spec, wl, params, predictor=pred, method=job["method"],
                           predictor_eval=ev, cost_model=job["cost_model"])
    good = None
    if job["goodput"]:
        good = cluster_goodput(cfg, spec, wl, params, predictor=pred,
                               cost_model=job["cost_model"])
    row = result_row(res, seed=None, version=job["version"],
                     goodput=good.rate_per_s if good else None,
                     goodput_bracketed=good.bracketed if good else None)
    row.update({"experiment": job["experiment"], "trace": job["trace_name"],
                "rate_per_s": job["rate"], "bench_wall_s": time.perf_counter() - t0,
                "command": job["command"]})
    return {"row": row, "result": res if job["keep"] else None}
