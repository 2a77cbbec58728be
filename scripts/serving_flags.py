"""The flags of `hikv serve` and `hikv cluster`, defined once for both commands, and the
helpers both runs share: the serving overrides (:func:`serving_config`) and the workload
(:func:`check_workload_flags`, :func:`workload_from_flags`). A run is a cluster run when any
cluster flag is given (:func:`is_cluster_run`): `hikv serve` then runs
:func:`hikv.scripts.cmd_cluster.run_cluster`. Not a subcommand (no ``cmd_`` prefix).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

__all__ = ["add_arguments", "add_cluster_arguments", "add_system_arguments", "add_shared",
           "SHARED_FLAGS", "CLUSTER_FLAGS",
           "SERVE_ONLY", "is_cluster_run", "serving_config", "workload_from_flags",
           "check_workload_flags", "resolve_system", "gpu_system"]

#: The flags that make ``hikv serve`` a cluster run (their ``args`` names).
CLUSTER_FLAGS = ("cluster", "replicas", "pd", "dynamic_ratio", "reconfig_s", "router",
                 "decode_router", "link", "scheduler", "quantile", "train_fraction")

#: ``hikv serve`` flags a cluster run does not take (per-replica tables and policy options).
SERVE_ONLY = ("breakdown", "section", "export_vidur", "policy", "admission")

#: Flags that mean the same to `hikv serve`, `hikv cluster` and `hikv plan`, defined once:
#: flag -> ``add_argument`` keywords (:func:`add_shared`).
SHARED_FLAGS: dict[str, dict[str, Any]] = {
    "--set": dict(action="append", default=[], metavar="SECTION.FIELD=VALUE",
                  help="override a preset parameter, e.g. policy.scorer=page_bounds "
                       "(repeatable)"),
    "--max-requests": dict(type=int, metavar="N",
                           help="replay only the first N requests of --trace"),
    "--profile": dict(metavar="FILE",
                      help="Vidur-format mlp.csv for --device (default: "
                           "shared/data/vidur-profiles/<device>/<model>/mlp.csv above the "
                           "checkout, or $HIKV_DATA/vidur-profiles)"),
    "--link": dict(help="with --pd: KV link preset: nvlink, rdma-400, rdma-200, ideal "
                        "(default: rdma-200)"),
    "--force": dict(action="store_true",
                    help="replace the files of an earlier run in --out (they are deleted "
                         "first)"),
}


def add_shared(p: Any, *flags: str) -> None:
    """Add ``flags`` of :data:`SHARED_FLAGS` to the parser or argument group ``p``."""
    for flag in flags:
        p.add_argument(flag, **SHARED_FLAGS[flag])


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every flag of `hikv serve` and `hikv cluster`: the serving flags, then the cluster flags
    (:func:`add_cluster_arguments`)."""
    p.add_argument("--preset", default=None,
                   help="configuration preset (default: default; paper with --device)")
    add_shared(p, "--set")
    from hikv.presets import METHOD_NAMES

    p.add_argument("--method",
                   help=f"KV method(s), comma-separated, or 'all': {', '.join(METHOD_NAMES)}, "
                        "or method labels such as tova@128, h2o@256/avg (default: hikv; "
                        "full,hikv-evict in a cluster run)")
    p.add_argument("--trace", metavar="FILE",
                   help="Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,"
                        "GeneratedTokens)")
    p.add_argument("--rate", type=float, metavar="R",
                   help="arrival rate in requests/s: Poisson rate, or the rate a --trace is "
                        "rescaled to")
    p.add_argument("--requests", type=int, metavar="N",
                   help="Poisson requests (default: the preset's serving.synthetic.requests)")
    add_shared(p, "--max-requests")
    p.add_argument("--seed", type=int, default=0,
                   help="Poisson workload seed, and the p2c router's in a cluster run "
                        "(default: 0)")
    p.add_argument("--policy", help="scheduler policy: vllm-v1, sjf, serial, sarathi "
                                    "(default: the preset's serving.policy)")
    p.add_argument("--admission", choices=("chunk", "prompt"),
                   help="KV admission: chunk (first chunk's blocks, vLLM V1) or prompt (whole "
                        "prompt reserved, vLLM V0 / Sarathi) (default: the policy's)")
    p.add_argument("--cost-model", default=None,
                   help="per-iteration latency model: attention-model-eff (decode attention "
                        "from the attention cost model, the rest by a roofline with measured "
                        "efficiencies), attention-model (the same on a bare roofline), "
                        "roofline, roofline-eff (default: attention-model-eff; with --device "
                        "the measured device)")
    p.add_argument("--device", metavar="NAME",
                   help="serve on a measured GPU: a100 (operators from a Vidur mlp.csv "
                        "profile, attention fitted to published kernel times)")
    add_system_arguments(p)
    p.add_argument("--model", metavar="NAME",
                   help="model shape (hikv presets --list; default: the preset's)")
    add_shared(p, "--profile")
    p.add_argument("--device-memory", type=float, metavar="GIB",
                   help="with --device: memory per GPU in GiB (default: the device's, 80)")
    p.add_argument("--tp", type=int, default=1, metavar="N",
                   help="tensor-parallel degree of --device (rows of the profile; default 1)")
    p.add_argument("--breakdown", action="store_true",
                   help="with --device: print per-iteration times by operator (decode batches, "
                        "prefill chunks, mixed batches) before serving")
    p.add_argument("--section", action="store_true",
                   help="with --device: print the report's measured-device serving section "
                        "(markdown) instead of the serving table")
    p.add_argument("--max-batched-tokens", "--token-budget", dest="max_batched_tokens", type=int,
                   help="override serving.max_batched_tokens: tokens one iteration may batch "
                        "(prefill chunks plus decodes; --token-budget is an alias)")
    p.add_argument("--max-running", type=int, help="override serving.max_running (sequences)")
    p.add_argument("--ttft-slo", type=float, metavar="S", help="override the TTFT SLO (s)")
    p.add_argument("--tpot-slo", type=float, metavar="S", help="override the TPOT SLO (s)")
    p.add_argument("--goodput", action="store_true",
                   help="also search the goodput (highest rate with >= slo_attainment of "
                        "requests meeting both SLOs; runs the workload many times)")
    p.add_argument("--out", metavar="DIR", help="write CSVs and plots into DIR (checked before "
                   "the simulation; a DIR holding an earlier run's files needs --force)")
    p.add_argument("--export-vidur", metavar="DIR",
                   help="write DIR/<method>/attention.csv (Vidur's attention profile format: "
                        "decode from the attention cost model, prefill by roofline, per layer) "
                        "for each --method and exit without serving")
    add_shared(p, "--force")
    add_cluster_arguments(p)


def add_system_arguments(p: argparse.ArgumentParser, *, fleet: bool = False) -> None:
    """``--system``, ``--host-link`` and ``--assumed-clocks`` (`hikv serve`, `hikv cluster`,
    `hikv plan` with ``fleet``): which system a serving number belongs to
    (:mod:`hikv.sim.serving.systems`)."""
    p.add_argument("--system", metavar="NAME",
                   help="the served system: gpu (everything on the --device GPU), gpu+hikv "
                        "(the GPU, with decode attention on a HiKV accelerator beside it)"
                        + (", or both comma-separated (default: gpu; --device defaults to "
                           "a100)" if fleet else
                           " or hikv (the accelerator alone, the attention-level model) "
                           "(default: gpu with --device, hikv otherwise; gpu and gpu+hikv "
                           "default to --device a100)"))
    p.add_argument("--host-link", metavar="NAME",
                   help="with --system gpu+hikv: the GPU-accelerator link: nvlink-c2c, nvlink3, "
                        "pcie5 (default: nvlink-c2c)")
    p.add_argument("--assumed-clocks", action="store_true",
                   help="with --system gpu+hikv: time the accelerator at the assumed clocks "
                        "(accel.clock_hz) instead of the timing flow's estimate")


def resolve_system(args: argparse.Namespace, cfg):
    """The system of ``args`` for preset ``cfg`` (:func:`hikv.sim.serving.systems.system_cost`):
    ``--system`` or its default, the GPU flags, the link; returns its
    :class:`~hikv.sim.serving.systems.SystemCost`."""
    from hikv.params import ParamError
    from hikv.sim.serving.systems import check_system, default_system, system_cost

    system = check_system(args.system) if args.system else default_system(args.device)
    if system != "gpu+hikv" and (args.host_link or args.assumed_clocks):
        raise ParamError("--host-link and --assumed-clocks need --system gpu+hikv")
    if system == "hikv":
        return system_cost(cfg, "hikv", device=args.device, profile=args.profile,
                           tensor_parallel=args.tp, memory_gib=args.device_memory,
                           cost_model=args.cost_model)
    return system_cost(cfg, system, device=args.device, profile=args.profile,
                       tensor_parallel=args.tp, memory_gib=args.device_memory,
                       link=args.host_link, cost_model=args.cost_model,
                       estimated_clocks=not args.assumed_clocks)


def gpu_system(args: argparse.Namespace) -> bool:
    """Whether ``args`` name a GPU system (``--device``, or ``--system gpu`` / ``gpu+hikv``):
    its preset defaults to ``paper``, whose model has a measured profile."""
    return bool(args.device) or (args.system or "hikv") != "hikv"


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """The cluster flags (shared by `hikv serve` and `hikv cluster`); every default is None,
    so a run is a cluster run exactly when one is given."""
    g = p.add_argument_group("cluster (any of these makes hikv serve a cluster run; "
                             "default preset paper, methods full,hikv-evict)")
    g.add_argument("--cluster", metavar="NAME",
                   help="cluster layout preset: agg4, pd2:2, pd3:1, pd-dopd (flags below "
                        "override its fields)")
    g.add_argument("--replicas", type=int, metavar="N",
                   help="aggregated pool of N instances (default 4 when no --pd is given)")
    g.add_argument("--pd", metavar="P:D[,P:D...]",
                   help="disaggregated layouts: P prefill and D decode instances")
    g.add_argument("--dynamic-ratio", metavar="RULE",
                   help="with --pd: also run each P:D with a dynamic ratio: dopd (DOPD's "
                        "forecast-and-ratio rule) or threshold (backlog/KV thresholds)")
    g.add_argument("--dynamic", dest="dynamic_ratio", action="store_const", const="dopd",
                   help="the same as --dynamic-ratio dopd")
    g.add_argument("--reconfig-s", type=float, metavar="S",
                   help="with a dynamic ratio: seconds an instance is down to change role "
                        "(default: DynamicRatio's)")
    g.add_argument("--router",
                   help="router(s), comma-separated: round-robin, least-tokens, p2c, quartz, "
                        "quartz-mean, or 'all' (default: round-robin)")
    g.add_argument("--decode-router",
                   help="with --pd: round-robin, least-kv or maps (default: round-robin)")
    add_shared(g, "--link")
    g.add_argument("--scheduler",
                   help="waiting order(s) of the instances that prefill, comma-separated: "
                        "fcfs, ewsjf (default: fcfs)")
    g.add_argument("--quantile", type=float, help="QUARTZ quantile (default 0.9)")
    g.add_argument("--train-fraction", type=float, metavar="F",
                   help="fraction of the requests (the first ones) that trains the output-"
                        "length predictor; the rest is served (default 0.3; 0: train on all)")


def is_cluster_run(args: argparse.Namespace) -> bool:
    """Whether ``args`` (of `hikv serve`) hold a cluster flag."""
    return any(getattr(args, f, None) is not None for f in CLUSTER_FLAGS)


def serving_config(cfg, args: argparse.Namespace, *, model: bool = True):
    """``cfg`` with the serving flags of ``args`` applied (--model when ``model``,
    --max-batched-tokens, --max-running, --ttft-slo, --tpot-slo; checked by ServingParams);
    shared by the single-replica and the cluster run."""
    if model and args.model:
        from hikv.presets import get_model_shape

        cfg = cfg.replace(model=get_model_shape(args.model))
    changes = {k: v for k, v in (("max_batched_tokens", args.max_batched_tokens),
                                 ("max_running", args.max_running),
                                 ("ttft_slo_s", args.ttft_slo),
                                 ("tpot_slo_s", args.tpot_slo)) if v is not None}
    if changes:
        cfg = cfg.replace(serving=dataclasses.replace(cfg.serving, **changes))
    return cfg


def workload_from_flags(args: argparse.Namespace, cfg):
    """The workload of ``args`` and its seed: --trace (its first --max-requests, arrival times
    as recorded: the caller rescales to --rate) with seed None, or the preset's Poisson
    workload (--rate, --requests, --seed). Shared by the single-replica and the cluster run."""
    from hikv.params import ParamError
    from hikv.sim.serving.workload import poisson_workload, read_azure_trace

    if args.trace:
        if args.requests is not None:
            raise ParamError("--requests is for Poisson workloads; use --max-requests with "
                             "--trace")
        return read_azure_trace(args.trace, limit=args.max_requests), None
    if args.max_requests is not None:
        raise ParamError("--max-requests is for --trace; use --requests for Poisson")
    return poisson_workload(cfg.serving.synthetic, seed=args.seed, rate_per_s=args.rate,
                            requests=args.requests), args.seed


def check_workload_flags(args: argparse.Namespace) -> None:
    """The flags no parameter class checks, before any work (ParamError names the flag);
    --token-budget, --max-running and the SLOs are checked by ServingParams, --rate and
    --requests of a Poisson workload also by SyntheticWorkload. ``hikv cluster`` shares it."""
    import math

    from hikv.params import ParamError
    from hikv.sim.serving.workload import MAX_REQUESTS

    if args.rate is not None and not (math.isfinite(args.rate) and args.rate > 0):
        raise ParamError(f"--rate = {args.rate} is out of range: allowed a finite number > 0 "
                         "(requests per second)")
    for flag, v in (("--requests", args.requests), ("--max-requests", args.max_requests)):
        if v is not None and not 1 <= v <= MAX_REQUESTS:
            raise ParamError(f"{flag} = {v} is out of range: allowed [1, {MAX_REQUESTS}]")
    if not 0 <= args.seed < 2**63:
        raise ParamError(f"--seed = {args.seed} is out of range: allowed [0, 2**63 - 1]")


def require_rescalable(workload: Any, rate: float) -> None:
    """``--rate`` with a trace rescales its arrivals; a trace of one request has none to
    rescale, so the flag would be ignored: refuse it (``--goodput`` on such a trace is a
    labelled bound instead)."""
    from hikv.params import ParamError

    if len(workload) == 1:
        raise ParamError(f"--rate {rate:g}: {workload.source} holds one request, which has no "
                         "arrival rate to rescale; drop --rate or give a trace of several "
                         "requests")
