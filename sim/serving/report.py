"""Goodput search, result rows, per-request CSV and latency CDF plots for serving runs.

Nothing here writes a file unless a function is given a path. Rows record every configuration
field (flattened, ``serving.max_batched_tokens``), the seed, the workload and the code version.
:func:`serving_summary` and :func:`report_section` make ``hikv report``'s serving section.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import hikv.io as _io
from hikv.params import Config, MethodSpec, ParamError, to_dict
from hikv.presets import BASELINES, resolve_methods
from hikv.report_section import ReportSection, code_version, flatten
from hikv.sim.serving.engine import ServingResult, simulate
from hikv.sim.serving.step_cost import DEFAULT_STEP_COST
from hikv.sim.serving.workload import Workload, read_azure_trace

__all__ = [
    "Goodput",
    "goodput",
    "goodput_bound",
    "goodput_cell",
    "steady_state",
    "STEADY_STATE_TOL",
    "MISSING_OK",
    "code_version",
    "config_fields",
    "result_row",
    "request_rows",
    "write_csv",
    "plot_cdfs",
    "run_methods",
    "serving_summary",
    "best_baseline",
    "format_table",
    "report_section",
    "REPORT_METHODS",
    "DEFAULT_REPORT_REQUESTS",
]


# --------------------------------------------------------------------------- goodput
@dataclass(frozen=True)
class Goodput:
    """DistServe's goodput: the highest arrival rate at which a fraction ``target`` of the
    requests meets both SLOs. ``runs`` lists every (rate, attainment) simulated; ``bracketed``
    is False when the search stopped at its rate limits without seeing both a pass and a
    fail (then ``rate_per_s`` is a bound: 0 if nothing passed)."""

    rate_per_s: float
    attainment: float
    target: float
    runs: tuple[tuple[float, float], ...]
    bracketed: bool


def goodput(cfg: Config, spec: MethodSpec, workload: Workload, *,
            cost_model: str = DEFAULT_STEP_COST, policy: str | None = None, rel_tol: float = 0.02,
            max_doublings: int = 12) -> Goodput:
    """Search the arrival rate (the workload's times rescaled, :meth:`Workload.at_rate`).

    From the workload's own rate, double (or halve) until attainment crosses
    ``cfg.serving.slo_attainment``, then bisect geometrically until the bracket is within
    ``rel_tol``. Assumes attainment falls with rate (true of FCFS queues in practice; a
    non-monotone case is found only where the search happens to look).
    """
    target = cfg.serving.slo_attainment
    runs: list[tuple[float, float]] = []

    def att(rate: float) -> float:
        r = simulate(cfg, spec, workload.at_rate(rate), cost_model=cost_model, policy=policy)
        a = float(r.slo_met().mean())
        runs.append((rate, a))
        return a

    r0 = workload.rate_per_s
    a0 = att(r0)
    lo, hi = (r0, math.nan) if a0 >= target else (math.nan, r0)
    for _ in range(max_doublings):
        if not (math.isnan(hi) or math.isnan(lo)):
            break
        r = lo * 2 if math.isnan(hi) else hi / 2
        try:
            ok = att(r) >= target
        except ParamError:      # the rate left the workload's range: the search's edge
            break
        if ok:
            lo = r
        else:
            hi = r
    if math.isnan(lo) or math.isnan(hi):
        best = 0.0 if math.isnan(lo) else lo
        return Goodput(best, max((a for r, a in runs if r == best), default=0.0), target,
                       tuple(runs), False)
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        if att(mid) >= target:
            lo = mid
        else:
            hi = mid
    return Goodput(lo, max(a for r, a in runs if r == lo), target, tuple(runs), True)


def goodput_bound(good: Goodput) -> str:
    """What ``good.rate_per_s`` is: ``"measured"`` (bracketed within the tolerance),
    ``"lower bound"`` (every rate tried met the SLOs: the search stopped at its cap) or
    ``"upper bound"`` (no rate tried met them: goodput is below the lowest rate tried, and the
    reported 0 is not a measurement)."""
    if good.bracketed:
        return "measured"
    return "lower bound" if good.rate_per_s > 0 else "upper bound"


#: A windowed Little's-law check needs a steady state: in the window, completions must keep up
#: with arrivals to within this fraction (an overloaded run's queue grows without bound, so
#: ``L`` and ``lambda*W`` measure a transient and their difference is no model error).
STEADY_STATE_TOL = 0.1


def steady_state(result: ServingResult) -> tuple[bool, str]:
    """Whether ``result``'s Little's-law window is in a steady state, and a note saying why
    not (empty when it is): the window holds requests, and completions in the window are at
    least ``1 - STEADY_STATE_TOL`` of the arrivals in it."""
    lc = result.little
    if lc.requests == 0 or not lc.end_s > lc.start_s:
        return False, "no request arrives in the window: Little's law not checked"
    arr, fin = result.arrival_s, result.finish_s
    arrived = int(((arr >= lc.start_s) & (arr <= lc.end_s)).sum())
    done = int(((fin >= lc.start_s) & (fin <= lc.end_s)).sum())
    if done < (1 - STEADY_STATE_TOL) * arrived:
        return False, (f"not in a steady state (overloaded): {arrived} arrivals but {done} "
                       "completions in the window, so the queue grows and the windowed check "
                       "does not apply")
    return True, ""


# --------------------------------------------------------------------------- provenance
def config_fields(cfg: Config) -> dict[str, Any]:
    """Every configuration field, flattened with dotted names (``config.`` first)."""
    return flatten(to_dict(cfg), "config.")


def _spec_fields(spec: MethodSpec) -> dict[str, Any]:
    return flatten(to_dict(spec), "spec.")


def result_row(result: ServingResult, *, seed: int | None, version: str,
               good: Goodput | None = None) -> dict[str, Any]:
    """One summary row: metrics, goodput (if searched), seed, version, spec and config."""
    row = result.summary()
    if good is not None:
        row["goodput_req_per_s"] = good.rate_per_s
        row["goodput_bracketed"] = good.bracketed
        row["goodput_runs"] = len(good.runs)
        row["goodput_bound"] = goodput_bound(good)
        row["goodput_min_rate_tried_req_per_s"] = min(rate for rate, _ in good.runs)
    steady, why = steady_state(result)
    row["little_steady_state"] = steady
    row["little_note"] = why
    row["seed"] = seed
    row["code_version"] = version
    row.update(_spec_fields(result.spec))
    row.update(config_fields(result.config))
    return row


def request_rows(result: ServingResult, *, seed: int | None, version: str
                 ) -> list[dict[str, Any]]:
    """Per-request rows (times in seconds from the first arrival)."""
    r = result
    cols = {
        "request": np.arange(len(r.arrival_s)),
        "arrival_s": r.arrival_s,
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": r.output_tokens,
        "first_scheduled_s": r.first_scheduled_s,
        "first_token_s": r.first_token_s,
        "finish_s": r.finish_s,
        "ttft_s": r.ttft_s,
        "tpot_s": r.tpot_s,
        "e2e_s": r.e2e_s,
        "preemptions": r.preemptions,
        "recomputed_tokens": r.recomputed_tokens,
        "slo_met": r.slo_met(),
    }
    fixed = {"method": r.method, "policy": r.policy, "cost_model": r.cost_model,
             "preset": r.config.name, "workload": r.workload, "seed": seed,
             "code_version": version}
    names = list(cols)
    data = [c.tolist() for c in cols.values()]
    return [{**dict(zip(names, vals, strict=True)), **fixed} for vals in zip(*data, strict=True)]


def write_csv(path: str | os.PathLike[str], rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``rows`` (union of their keys, first-seen order) as CSV atomically; returns the
    path. Non-finite values are errors, except NaN where a value does not apply
    (:data:`MISSING_OK`, written as an empty cell)."""
    return _io.write_csv(path, rows, missing_ok=MISSING_OK)


#: Columns whose NaN means "does not apply" (e.g. TPOT of a one-token output, a percentile or
#: Little's-law figure of an empty window), written as an empty cell rather than refused.
MISSING_OK = ("rate_per_s", "tpot_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "tpot_mean_s",
              "little_L", "little_lambda_w", "little_rel_error", "goodput_req_per_s",
              "goodput_slo_attainment")


def plot_cdfs(results: Sequence[ServingResult], out_dir: str | os.PathLike[str],
              stem: str = "latency_cdf") -> Path:
    """TTFT, TPOT and end-to-end latency CDFs of ``results``, one curve per method, as one
    PNG in ``out_dir``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (title, attr) in zip(axes, (("TTFT", "ttft_s"), ("TPOT", "tpot_s"),
                                        ("end-to-end latency", "e2e_s")), strict=True):
        for r in results:
            x = np.sort(getattr(r, attr))
            x = x[~np.isnan(x)]
            if x.size:
                ax.plot(x, np.arange(1, x.size + 1) / x.size, label=r.method)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(f"{title} (s)")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    r0 = results[0]
    fig.suptitle(f"{r0.workload} | preset {r0.config.name} | policy {r0.policy} | "
                 f"cost model {r0.cost_model}", fontsize=9)
    return _io.save_figure(fig, Path(out_dir) / f"{stem}.png", dpi=110)


# --------------------------------------------------------------------------- runs
def run_methods(cfg: Config, workload: Workload, methods: str | Sequence[str], *,
                cost_model: str = DEFAULT_STEP_COST, policy: str | None = None,
                with_goodput: bool = False, seed: int | None = None,
                progress: Callable[[str], None] | None = None
                ) -> list[tuple[ServingResult, Goodput | None, dict[str, Any]]]:
    """Simulate ``workload`` under each method; returns (result, goodput, row) per method."""
    version = code_version()
    out = []
    for name, spec in resolve_methods(cfg, methods).items():
        res = simulate(cfg, spec, workload, method=name, cost_model=cost_model, policy=policy)
        good = goodput(cfg, spec, workload, cost_model=cost_model,
                       policy=policy) if with_goodput else None
        row = result_row(res, seed=seed, version=version, good=good)
        out.append((res, good, row))
        if progress is not None:
            progress(name)
    return out


def serving_summary(cfg: Config, trace_path: str | os.PathLike[str],
                    methods: str | Sequence[str] = "all", *, with_goodput: bool = True,
                    max_requests: int | None = None, cost_model: str = DEFAULT_STEP_COST
                    ) -> list[dict[str, Any]]:
    """Rows for ``hikv report``'s serving section: each method on an Azure trace.

    One row per method (see :func:`result_row`: throughput, TTFT/TPOT/end-to-end
    percentiles, goodput, the Little's-law error, every configuration field). Pick HiKV, full
    KV and :func:`best_baseline` from them.
    """
    wl = read_azure_trace(trace_path)
    if max_requests is not None:
        wl = wl.head(max_requests)
    return [row for _, _, row in run_methods(cfg, wl, methods, cost_model=cost_model,
                                             with_goodput=with_goodput)]


def best_baseline(rows: Iterable[dict[str, Any]], key: str = "goodput_req_per_s"
                  ) -> dict[str, Any] | None:
    """The row of the best method other than full KV and HiKV by ``key`` (higher is better;
    falls back to ``throughput_tok_per_s`` when ``key`` is missing)."""
    cands = [r for r in rows if r["method"] not in ("full",) and
             not str(r["method"]).startswith("hikv")]
    if not cands:
        return None
    k = key if all(key in r for r in cands) else "throughput_tok_per_s"
    return max(cands, key=lambda r: r[k])


_TABLE = (
    ("method", "method", "{}"),
    ("req/s", "throughput_req_per_s", "{:.3f}"),
    ("tok/s", "throughput_tok_per_s", "{:.0f}"),
    ("TTFT p50 ms", "ttft_p50_s", "{:.2f}", 1e3),
    ("TTFT p99 ms", "ttft_p99_s", "{:.2f}", 1e3),
    ("TPOT p50 ms", "tpot_p50_s", "{:.3f}", 1e3),
    ("TPOT p99 ms", "tpot_p99_s", "{:.3f}", 1e3),
    ("E2E p90 s", "e2e_p90_s", "{:.3f}"),
    ("E2E p99 s", "e2e_p99_s", "{:.3f}"),
    ("SLO met", "slo_attainment", "{:.3f}"),
    ("goodput req/s", "goodput_req_per_s", "{:.3f}"),
    ("preempt", "preemptions", "{}"),
    ("KV util mean", "kv_util_mean", "{:.3f}"),
    ("KV util peak", "kv_util_peak", "{:.3f}"),
    ("Little L", "little_L", "{:.3f}"),
    ("lambda*W", "little_lambda_w", "{:.3f}"),
    ("Little err", "little_rel_error", "{:+.2e}"),
    ("sim s", "sim_wall_s", "{:.2f}"),
)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A fixed-width summary table, one line per row (columns without data are left out)."""
    cols = [c for c in _TABLE if any(c[1] in r for r in rows)]
    cells = [[c[0] for c in cols]]
    for r in rows:
        line = []
        for c in cols:
            v = r.get(c[1])
            if v is None or (isinstance(v, float) and math.isnan(v)):
                line.append("-" if v is None else "n/a")
                continue
            bound = r.get("goodput_bound") if c[1] == "goodput_req_per_s" else None
            if bound == "upper bound":
                low = r.get("goodput_min_rate_tried_req_per_s")
                line.append(f"<{low:.3g}" if low else "<min")
                continue
            if len(c) > 3 and isinstance(v, float):
                v = v * c[3]
            try:
                text = c[2].format(v)
            except (ValueError, TypeError):
                text = str(v)
            if bound == "lower bound":
                text = ">=" + text
            elif c[1].startswith("little_") and r.get("little_steady_state") is False:
                text += "*"
            line.append(text)
        cells.append(line)
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(x.rjust(w) if i else x.ljust(w)
                               for i, (x, w) in enumerate(zip(row, widths, strict=True)))
                     for row in cells)


def _check_out_dir(out: str | os.PathLike[str]) -> Path:
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise ParamError(f"--out {p} exists and is not a directory")
    p.mkdir(parents=True, exist_ok=True)
    return p


#: Methods the report's serving section simulates: full KV, the importance-based baselines
#: (the best of them by goodput is shown) and HiKV as the preset configures it.
REPORT_METHODS = ("full", *BASELINES, "hikv")
#: Requests of the conversation trace the report replays by default (its first N): keeps
#: ``hikv report --preset default`` near a minute with the goodput searches of 7 methods.
DEFAULT_REPORT_REQUESTS = 1000


def report_section(cfg: Config, report: Any = None, *, max_requests: int | None =
                   DEFAULT_REPORT_REQUESTS, trace: str | os.PathLike[str] | None = None,
                   system: str = "hikv", device: str | None = None) -> ReportSection:
    """``hikv report``'s serving section: HiKV against full KV and the best importance-based
    baseline (by goodput) on the Azure conversation trace (first ``max_requests`` requests;
    None for all 19,366): throughput, TTFT and TPOT P99, goodput under the preset's SLOs, on
    ``system`` (:mod:`hikv.sim.serving.systems`; ``gpu`` and ``gpu+hikv`` on ``device``,
    default a100, with the ``paper`` preset when ``cfg``'s model has no measured profile).

    The trace is ``trace`` or found by :func:`hikv.sim.serving.workload.find_azure_trace`; without
    it the section says so and how to provide it.
    """
    from hikv.sim.serving.workload import find_azure_trace

    title = "Serving (model): Azure conversation trace" + (
        "" if system == "hikv" else f", system {system}")
    path = trace if trace is not None else find_azure_trace("conv")
    if path is None or not Path(path).is_file():
        return ReportSection(title, "Skipped: the Azure LLM inference conversation trace "
                             "(AzureLLMInferenceTrace_conv.csv) was not found. Set HIKV_DATA to "
                             "a directory holding azure-llm-2023/, or place it in "
                             "shared/data/azure-llm-2023 above the source tree.", [])
    if max_requests is not None and max_requests < 1:
        raise ParamError(f"max_requests = {max_requests} is out of range: allowed >= 1 "
                         "(or None for the whole trace)")
    t0 = time.perf_counter()
    try:
        from hikv.sim.serving.systems import system_cost

        if system != "hikv":
            from hikv.presets import get_preset
            from hikv.sim.serving.device import PROFILE_MODELS

            if cfg.model.name not in PROFILE_MODELS:
                cfg = get_preset("paper")
        sc = system_cost(cfg, system, device=device)
        cfg = sc.cfg
        rows = serving_summary(cfg, path, list(REPORT_METHODS), max_requests=max_requests,
                               cost_model=sc.cost_model)
    except ParamError as e:
        return ReportSection(title, f"Skipped: the trace cannot be served on preset "
                             f"{cfg.name}: {e}", [])
    wall = time.perf_counter() - t0
    by = {r["method"]: r for r in rows}
    best = best_baseline(rows)
    show = [by["full"]] + ([best] if best else []) + [by["hikv"]]
    n = int(by["full"]["requests"]) if "requests" in by["full"] else max_requests
    sv = cfg.serving
    head = (f"Preset {cfg.name} ({cfg.model.name}), {Path(path).name}: "
            + (f"the first {n:,} requests" if max_requests is not None else "every request")
            + f" (`hikv report --serving-requests N` sets how many); scheduler {sv.policy}, "
            f"max batched tokens {sv.max_batched_tokens}, step cost `{sc.cost_name}` on "
            f"system `{sc.system}` ({sc.description}); "
            f"SLOs TTFT "
            f"{sv.ttft_slo_s * 1e3:g} ms and TPOT {sv.tpot_slo_s * 1e3:g} ms for "
            f"{100 * sv.slo_attainment:g}% of requests. Best baseline: the highest goodput "
            f"among {', '.join(m for m in REPORT_METHODS if m not in ('full', 'hikv'))}. "
            f"Throughput and latencies at the trace's own arrival rate; goodput is the highest "
            f"rate meeting the SLOs (DistServe). Simulated in {wall:.0f} s.")
    lines = [head, "", "| method | throughput (req/s) | tokens/s | TTFT P99 (ms) | "
             "TPOT P99 (ms) | goodput (req/s) | goodput vs full KV | Little's-law error |",
             "|---|---|---|---|---|---|---|---|"]
    keys = ("method", "throughput_req_per_s", "throughput_tok_per_s", "ttft_p99_s",
            "tpot_p99_s", "goodput_req_per_s", "goodput_bracketed", "goodput_bound",
            "little_rel_error", "little_steady_state", "slo_attainment", "preemptions",
            "kv_util_peak")
    out = []
    full = by["full"]
    for r in show:
        role = ("full KV" if r["method"] == "full" else "HiKV" if r["method"] == "hikv"
                else "best baseline")
        measured = (r.get("goodput_bound", "measured") == "measured"
                    and full.get("goodput_bound", "measured") == "measured"
                    and full["goodput_req_per_s"] > 0)
        g = f"{r['goodput_req_per_s'] / full['goodput_req_per_s']:.2f}x" if measured else "n/a"
        le = r["little_rel_error"]
        little = f"{le:+.1e}" if math.isfinite(le) else "n/a"
        if r.get("little_steady_state") is False:
            little += "*"
        lines.append(f"| {r['method']} ({role}) | {r['throughput_req_per_s']:.3f} | "
                     f"{r['throughput_tok_per_s']:.0f} | {r['ttft_p99_s'] * 1e3:.2f} | "
                     f"{r['tpot_p99_s'] * 1e3:.3f} | {goodput_cell(r)} | "
                     f"{g} | {little} |")
        out.append({**{k: r.get(k) for k in keys}, "role": role, "requests": n,
                    "trace": str(path), "system": sc.system})
    notes = []
    if any(r.get("goodput_bound", "measured") != "measured" for r in show):
        notes.append("`>=`: the goodput search reached its cap (a lower bound); `<`: no rate "
                     "tried met the SLOs (an upper bound); ratios of bounds are n/a.")
    if any(r.get("little_steady_state") is False for r in show):
        notes.append("`*`: not in a steady state at the trace's own rate (arrivals outpace "
                     "completions in the window), so the windowed Little's-law check does "
                     "not apply.")
    if notes:
        lines += ["", *notes]
    return ReportSection(title, "\n".join(lines), out)


def goodput_cell(r: dict[str, Any]) -> str:
    """A goodput table cell: the rate, or the bound it is (``>=x`` / ``<y``)."""
    bound = r.get("goodput_bound", "measured")
    if bound == "lower bound":
        return f">={r['goodput_req_per_s']:.3f}"
    if bound == "upper bound":
        return f"<{r.get('goodput_min_rate_tried_req_per_s', math.nan):.3g}"
    return f"{r['goodput_req_per_s']:.3f}"
