"""Size a fleet: the smallest number of replicas (GPUs, and HiKV accelerators beside them) that
serves a whole trace within SLOs, for each KV method and system, and what each method saves
against full KV (docs/plan.md).

For every --system (gpu, gpu+hikv; comma-separated for both) and every --method (full KV is
always added as the reference), :func:`hikv.sim.cluster.plan.smallest_fleet` searches the replica
count with the cluster simulator over the whole --trace (aggregated behind --router; with --pd
also the best prefill/decode split of each size): the smallest count whose requests meet both
--slo targets for at least --attainment of them. A target that no fleet up to --max-replicas
meets is printed as unmet with the best attainment seen, never as a count.

Prints per (system, method): the layout, replicas, GPUs and accelerators, the attainment
reached, the GPUs' board power (datasheet TDP), the accelerators' area (the preset's
synthesised units counted as sized; --no-area skips it) and their average decode-attention
power over the trace (the cost model's dynamic energy), and the saving in replicas against
full KV. With --out DIR: plan.csv (one row per system, method and rate) and
replicas_vs_rate.png (replicas needed against the request rate, the trace rescaled to --rates,
default half, once and twice its own rate).
"""

from __future__ import annotations

import argparse
import math
import sys

from . import serving_flags

HELP = "size a fleet: replicas (GPUs, accelerators) meeting SLOs on a trace, per method"

#: The files ``hikv plan --out`` writes (cleared by --force).
OWNED = ("plan.csv", "replicas_vs_rate.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", required=True, metavar="FILE",
                   help="Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,"
                        "GeneratedTokens); every request is served")
    p.add_argument("--slo", metavar="ttft=S,tpot=S",
                   help="SLOs in seconds, e.g. ttft=0.5,tpot=0.1 (default: the preset's)")
    p.add_argument("--attainment", type=float, metavar="F",
                   help="fraction of requests that must meet both SLOs (default: the "
                        "preset's serving.slo_attainment)")
    p.add_argument("--method", default="full,hikv",
                   help="KV method(s), comma-separated (full KV is always added as the "
                        "reference; default: full,hikv)")
    p.add_argument("--preset", default="paper", help="configuration preset (default: paper)")
    serving_flags.add_shared(p, "--set")
    p.add_argument("--device", metavar="NAME", help="the GPU: a100 (default)")
    serving_flags.add_shared(p, "--profile")
    serving_flags.add_system_arguments(p, fleet=True)
    serving_flags.add_shared(p, "--max-requests")
    p.add_argument("--max-replicas", type=int, default=64, metavar="N",
                   help="the search cap: a target no fleet of up to N replicas meets is "
                        "unmet (default 64)")
    p.add_argument("--router", default="least-tokens",
                   help="request router: round-robin, least-tokens, p2c, quartz, quartz-mean "
                        "(default: least-tokens)")
    p.add_argument("--pd", action="store_true",
                   help="also search prefill/decode splits of each size (slower: up to three "
                        "runs per size)")
    serving_flags.add_shared(p, "--link")
    p.add_argument("--rates", metavar="R,R,...",
                   help="request rates (req/s) of the replicas-vs-rate plot, the trace "
                        "rescaled (default: half, once and twice its own rate; with --out)")
    p.add_argument("--no-area", action="store_true",
                   help="skip the accelerators' area (it needs the preset's synthesis results)")
    p.add_argument("--out", metavar="DIR", help="write plan.csv and replicas_vs_rate.png")
    serving_flags.add_shared(p, "--force")


def _rates(text: str | None, own: float) -> list[float]:
    from hikv.params import ParamError
    from hikv.sim.cluster.plan import rates_around

    if text is None:
        return rates_around(own)
    out = []
    for part in text.split(","):
        try:
            r = float(part)
        except ValueError:
            raise ParamError(f"--rates {text!r}: {part.strip()!r} is not a number of requests "
                             "per second") from None
        if not (math.isfinite(r) and r > 0):
            raise ParamError(f"--rates {text!r}: {r:g} is out of range: allowed > 0")
        out.append(r)
    return sorted(set(out))


def run(args: argparse.Namespace) -> int:
    from hikv.io import prepare_out_dir
    from hikv.params import ParamError
    from hikv.presets import get_preset, resolve_methods, with_overrides
    from hikv.sim.cluster.params import get_link
    from hikv.sim.cluster.plan import MemoCost, parse_slo, smallest_fleet, with_slo
    from hikv.sim.cluster.sched import split_workload
    from hikv.sim.serving.systems import check_system
    from hikv.sim.serving.workload import read_azure_trace

    systems = [check_system(s.strip()) for s in (args.system or "gpu").split(",") if s.strip()]
    if not systems or "hikv" in systems:
        raise ParamError("hikv plan sizes fleets of GPUs: --system gpu, gpu+hikv or "
                         "gpu,gpu+hikv")
    if args.host_link and "gpu+hikv" not in systems:
        raise ParamError("--host-link needs --system gpu+hikv")
    if not 1 <= args.max_replicas <= 1024:
        raise ParamError(f"--max-replicas = {args.max_replicas} is out of range: allowed "
                         "[1, 1024]")
    if args.max_requests is not None and args.max_requests < 1:
        raise ParamError(f"--max-requests = {args.max_requests} is out of range: allowed >= 1")
    if args.link and not args.pd:
        raise ParamError("--link is the KV link of a P/D fleet: give --pd")
    link = get_link(args.link) if args.link else None
    base = with_overrides(get_preset(args.preset), args.set)
    ttft, tpot = (parse_slo(args.slo) if args.slo is not None
                  else (base.serving.ttft_slo_s, base.serving.tpot_slo_s))
    att = base.serving.slo_attainment if args.attainment is None else args.attainment
    if not (math.isfinite(att) and 0 < att <= 1):
        raise ParamError(f"--attainment = {att:g} is out of range: allowed (0, 1]")
    base = with_slo(base, ttft, tpot, att)
    names = list(resolve_methods(base, args.method))
    names = ["full"] + [n for n in names if n != "full"]
    wl = read_azure_trace(args.trace, limit=args.max_requests)
    if len(wl) < 2 or wl.span_s <= 0:
        raise ParamError(f"--trace {args.trace}: {len(wl)} request(s) over {wl.span_s:g} s "
                         "have no arrival rate to serve; give a trace whose arrivals span time")
    own = wl.rate_per_s                       # a rate within 0.5 % of the trace's is the trace's
    rates = sorted({own if abs(r / own - 1) < 5e-3 else r for r in _rates(args.rates, own)}
                   | {own})
    out = prepare_out_dir(args.out, OWNED, force=args.force) if args.out else None
    predictor, _ = split_workload(wl, 0.0)
    print(f"trace {wl.source}: {len(wl)} requests at {wl.rate_per_s:.4g}/s; SLOs TTFT "
          f"{ttft:g} s and TPOT {tpot:g} s for {100 * att:g}% of requests; preset {base.name}, "
          f"router {args.router}, {'aggregated and P/D' if args.pd else 'aggregated'} fleets "
          f"of up to {args.max_replicas} replicas")
    rows = []
    for system in systems:
        sc = serving_flags.resolve_system(_system_args(args, system), base)
        cfg = sc.cfg
        specs = resolve_methods(cfg, ",".join(names))
        cost = MemoCost(sc.cost_model)
        print(sc.description)
        sys.stdout.flush()
        area = _area(sc, args.no_area)
        for name in names:
            prev = None
            for rate in rates:
                w = wl.at_rate(rate) if rate != wl.rate_per_s else wl
                start = 1
                if prev is not None and prev.met:
                    start = max(1, math.floor(prev.replicas * rate / prev.rate_per_s))
                    start = min(start, args.max_replicas)
                plan = smallest_fleet(
                    cfg, specs[name], w, cost_model=cost, predictor=predictor, method=name,
                    router=args.router, cap=args.max_replicas, start=start, pd=args.pd,
                    link=link, progress=lambda p, n=name, r=rate, s=system: print(
                        f"  ... {s} {n} at {r:.3g}/s: {p.instances} instances"
                        + (f" (P/D {p.prefill}:{p.instances - p.prefill})" if p.prefill else "")
                        + f" -> attainment {p.attainment:.4f}", file=sys.stderr, flush=True))
                prev = plan
                rows.append(_row(system, sc, cfg, specs[name], cost, w, plan, area,
                                 own=rate == wl.rate_per_s))
    _print(rows)
    if out is not None:
        from hikv.sim.serving.report import write_csv

        cells = [{k: "" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
                 for r in rows]
        written = [write_csv(out / "plan.csv", cells),
                   _plot(rows, out / "replicas_vs_rate.png", wl.source, ttft, tpot, att)]
        for p in written:
            print(f"wrote {p}")
    return 0


def _system_args(args: argparse.Namespace, system: str) -> argparse.Namespace:
    ns = argparse.Namespace(**vars(args))
    ns.system = system
    ns.tp, ns.device_memory, ns.cost_model = 1, None, None
    if system != "gpu+hikv":
        ns.host_link, ns.assumed_clocks = None, False
    return ns


def _area(sc, skip: bool) -> tuple[float, str]:
    """The accelerator's area (m^2) and how it was obtained, or NaN and why not."""
    if sc.accelerator is None:
        return 0.0, ""
    if skip:
        return math.nan, "not computed (--no-area)"
    from hikv.sim.serving.systems import offload_area_m2

    return offload_area_m2(sc.accelerator)


def _row(system, sc, cfg, spec, cost, wl, plan, area, *, own: bool) -> dict:
    from hikv.sim.cluster.plan import attention_energy_j
    from hikv.sim.serving.device import get_device

    n = plan.replicas
    dev = get_device(sc.device.device) if sc.device is not None else None
    accel = sc.accelerator is not None
    row = {"system": system, "method": plan.method, "method_label": spec.label,
           "trace": wl.source, "requests": len(wl), "rate_req_per_s": wl.rate_per_s,
           "own_rate": own, "ttft_slo_s": cfg.serving.ttft_slo_s,
           "tpot_slo_s": cfg.serving.tpot_slo_s, "attainment_target": plan.target,
           "met": plan.met, "replicas": n if n is not None else "",
           "layout": plan.layout if plan.met else "",
           "attainment": plan.best.attainment,
           "best_instances_tried": plan.best.instances, "probes": len(plan.probes),
           "cap": plan.cap, "gpus": n if n is not None else "",
           "accelerators": (n if accel else 0) if n is not None else "",
           "gpu_board_power_w": dev.board_power_w if dev else math.nan,
           "accelerator_area_mm2": area[0] * 1e6 if accel else math.nan,
           "accelerator_area_source": area[1],
           "accelerator_power_w": math.nan, "step_cost": sc.cost_name}
    if accel and n is not None:
        step = cost(cfg, spec)
        row["accelerator_power_w"] = attention_energy_j(step, wl) / max(wl.span_s, 1e-9) / n
    from hikv.sim.serving.report import code_version, config_fields

    row["code_version"] = code_version()
    row.update(config_fields(sc.accelerator.cfg if accel else cfg))
    return row


def _print(rows: list[dict]) -> None:
    full = {(r["system"], r["rate_req_per_s"]): r for r in rows if r["method"] == "full"}
    head = ("system", "method", "rate/s", "replicas", "layout", "GPUs", "accels", "attain",
            "GPU W", "accel mm2", "accel W", "vs full KV")
    cells = [list(head)]
    for r in rows:
        f = full.get((r["system"], r["rate_req_per_s"]))
        if not r["met"]:
            reps = f"unmet (best {r['attainment']:.3f} at {r['best_instances_tried']})"
            save = "n/a"
        else:
            reps = str(r["replicas"])
            save = "n/a"
            if f is not None and f["met"]:
                d = f["replicas"] - r["replicas"]
                save = (f"{r['replicas'] / f['replicas']:.2f}x ("
                        + (f"{d} saved)" if d >= 0 else f"{-d} more)"))
        gw = r["gpu_board_power_w"] * r["gpus"] if r["met"] and r["gpus"] else math.nan
        cells.append([r["system"], r["method"], f"{r['rate_req_per_s']:.3g}", reps,
                      r["layout"] or "-", str(r["gpus"] or "-"), str(r["accelerators"] or "-"),
                      f"{r['attainment']:.3f}", _num(gw, "{:,.0f}"),
                      _num(r["accelerator_area_mm2"], "{:.1f}"),
                      _num(r["accelerator_power_w"], "{:.1f}"), save])
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    for c in cells:
        print("  ".join(x.ljust(w) if i < 2 else x.rjust(w)
                        for i, (x, w) in enumerate(zip(c, widths, strict=True))))
    print("GPU W: the GPUs' datasheet board power (TDP) in all; accel mm2: one accelerator's "
          "area; accel W: one accelerator's decode-attention power averaged over the trace "
          "(dynamic energy of the cost model, no leakage); vs full KV: replicas over full "
          "KV's on the same system and rate, and how many that saves")
    src = {r["accelerator_area_source"] for r in rows if r["accelerator_area_source"]}
    for s in sorted(src):
        print(f"accelerator area: {s}")


def _num(x: float, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def _plot(rows: list[dict], path, source: str, ttft: float, tpot: float, att: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hikv.io import save_figure

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    keys = sorted({(r["system"], r["method"]) for r in rows})
    for system, method in keys:
        rs = sorted((r for r in rows if r["system"] == system and r["method"] == method),
                    key=lambda r: r["rate_req_per_s"])
        met = [r for r in rs if r["met"]]
        line, = ax.plot([r["rate_req_per_s"] for r in met], [r["replicas"] for r in met],
                        marker="o", ls="-" if system == "gpu" else "--",
                        label=f"{method} ({system})")
        un = [r for r in rs if not r["met"]]
        if un:
            ax.plot([r["rate_req_per_s"] for r in un], [r["cap"] for r in un], marker="x",
                    ls="none", color=line.get_color())
    ax.set_xlabel("request rate (req/s, the trace rescaled)")
    ax.set_ylabel("replicas needed")
    ax.set_title(f"{source}: TTFT {ttft:g} s, TPOT {tpot:g} s for {100 * att:g}% "
                 "(x: unmet up to the cap)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, path, dpi=110)
