"""Parameters of a serving cluster (:mod:`hikv.sim.cluster.engine`): the KV-transfer link, the
dynamic prefill/decode ratio and the cluster layout, as frozen dataclasses with named presets.

One source of truth: the CLI (``hikv cluster``), the benchmark (``benchmarks/cluster_bench.py``)
and the tests read these classes and :data:`LINKS`; no number is copied elsewhere.
Units are SI without prefixes (bytes, seconds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hikv.param_checks import ParamError, check_int, check_num

__all__ = ["KVLink", "LINKS", "get_link", "DynamicRatio", "ClusterParams", "ROUTERS",
           "DECODE_ROUTERS", "SCHEDULERS", "RATIO_POLICIES", "CLUSTER_PRESETS",
           "get_cluster_preset"]

#: Router names of an aggregated pool and of a P/D cluster's prefill pool (hikv.sim.cluster.router).
ROUTERS = ("round-robin", "least-tokens", "p2c", "quartz", "quartz-mean")
#: How a P/D cluster picks the decode instance of a prefilled request (hikv.sim.cluster.router).
DECODE_ROUTERS = ("round-robin", "least-kv", "maps")
#: Waiting-queue orders of the instances that prefill (hikv.sim.cluster.sched).
SCHEDULERS = ("fcfs", "ewsjf")


def _check(owner: str, name: str, value: Any, lo: float, hi: float | None = None, *,
           lo_open: bool = False, integer: bool = False, allow_inf: bool = False) -> None:
    """ParamError naming ``owner.name`` and the allowed range unless ``value`` is in it (the
    shared helpers of :mod:`hikv.param_checks`; ``allow_inf`` also admits ``+inf``)."""
    if integer:
        check_int(owner, name, value, int(lo), None if hi is None else int(hi))
    elif not (allow_inf and isinstance(value, float) and value == math.inf):
        check_num(owner, name, value, lo, hi, lo_open=lo_open)


@dataclass(frozen=True)
class KVLink:
    """The link a prefill instance ships KV caches over to a decode instance.

    Each prefill instance has one egress link; transfers on it run one after another (FIFO),
    each taking ``latency_s + bytes / bandwidth_bytes_per_s``. ``bandwidth_bytes_per_s`` may
    be ``inf`` (with ``latency_s = 0``: the ideal link, no transfer time).
    """

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    source: str = ""

    def __post_init__(self) -> None:
        _check("KVLink", "bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, 0, lo_open=True,
               allow_inf=True)
        _check("KVLink", "latency_s", self.latency_s, 0, 1.0)

    def transfer_s(self, nbytes: float) -> float:
        """Seconds to ship ``nbytes`` once the link is free."""
        return self.latency_s + (nbytes / self.bandwidth_bytes_per_s if nbytes else 0.0)


#: Named links. Bandwidths are the nominal per-direction line rates; latencies are stated
#: assumptions of one transfer's set-up (a few microseconds for RDMA and NVLink), not
#: measurements.
LINKS: dict[str, KVLink] = {k.name: k for k in (
    KVLink("nvlink", 450e9, 2e-6, "NVLink 4 (H100 SXM): 900 GB/s bidirectional, 450 GB/s "
                                  "per direction"),
    KVLink("rdma-400", 400e9 / 8, 5e-6, "400 Gb/s InfiniBand NDR / RoCE: 50 GB/s line rate"),
    KVLink("rdma-200", 200e9 / 8, 5e-6, "200 Gb/s InfiniBand HDR / RoCE: 25 GB/s line rate"),
    KVLink("ideal", math.inf, 0.0, "no transfer time (a P/D reference point)"),
)}


def get_link(name: str) -> KVLink:
    """The link preset ``name``; an unknown name lists the known ones."""
    try:
        return LINKS[name]
    except KeyError:
        raise ParamError(f"link = {name!r} is not one of: {', '.join(LINKS)}") from None


#: Rules of the dynamic P:D ratio (hikv.sim.cluster.ratio).
RATIO_POLICIES = ("dopd", "threshold")


@dataclass(frozen=True)
class DynamicRatio:
    """Dynamic prefill/decode ratio (:mod:`hikv.sim.cluster.ratio`). Every ``interval_s`` a
    monitor decides whether to move one instance between the pools; the moving instance is
    drained (no new work, its requests finish), idles ``reconfig_s`` (the reconfiguration
    cost) and joins the other pool. At most one instance moves at a time, none starts within
    ``cooldown_s`` of the previous move's end; each pool keeps at least one instance.

    ``policy = "dopd"`` (DOPD's rule): forecast the next interval's prefill and decode work
    (prompt tokens and predicted output tokens of the arrivals per second, Holt's
    double-exponential smoothing with level weight ``alpha`` and trend weight ``beta``, looking
    ``interval_s + reconfig_s`` ahead), divide each by its pool's measured rate per instance
    (tokens per busy second, an exponential average with weight ``alpha``), and set the
    prefill share of the instances to the prefill share of that work (in whole instances: the
    split with the lowest bottleneck utilisation); move one instance toward it when the
    current split's bottleneck is more than ``margin`` above the best one's.

    ``policy = "threshold"`` (the earlier heuristic): compare the prefill backlog (pending
    prompt tokens per prefill instance times the seconds per prefill token, over the TTFT SLO)
    with the decode pressure (mean KV use of the decode instances, queued decodes); when one
    side is over ``high`` and the other under ``low`` (``kv_low``/``kv_high`` for KV use),
    move one instance of the idle side."""

    policy: str = "dopd"
    interval_s: float = 2.0
    reconfig_s: float = 1.0
    cooldown_s: float = 30.0
    high: float = 0.5
    low: float = 0.25
    kv_high: float = 0.85
    kv_low: float = 0.5
    alpha: float = 0.3
    beta: float = 0.1
    margin: float = 0.1

    def __post_init__(self) -> None:
        o = "DynamicRatio"
        if self.policy not in RATIO_POLICIES:
            raise ParamError(f"{o}.policy = {self.policy!r} is not one of: "
                             f"{', '.join(RATIO_POLICIES)}")
        _check(o, "interval_s", self.interval_s, 0, 3600, lo_open=True)
        _check(o, "reconfig_s", self.reconfig_s, 0, 3600)
        _check(o, "cooldown_s", self.cooldown_s, 0, 86400)
        _check(o, "low", self.low, 0, 100)
        _check(o, "high", self.high, self.low, 100, lo_open=True)
        _check(o, "kv_low", self.kv_low, 0, 1)
        _check(o, "kv_high", self.kv_high, self.kv_low, 1, lo_open=True)
        _check(o, "alpha", self.alpha, 0, 1, lo_open=True)
        _check(o, "beta", self.beta, 0, 1)
        _check(o, "margin", self.margin, 0, 10)


@dataclass(frozen=True)
class ClusterParams:
    """A cluster of identical instances of one preset's accelerator and model.

    Aggregated (``prefill == 0``): ``replicas`` instances, each prefilling and decoding, behind
    ``router``. Disaggregated (``prefill >= 1``): ``prefill`` prefill instances behind ``router``
    and ``decode`` decode instances chosen per request by ``decode_router``; KV ships over
    ``link``; with ``dynamic`` the split moves (:class:`DynamicRatio`). ``scheduler`` orders the
    waiting queue of the instances that prefill (``ewsjf_tokens_per_s``: the tokens of
    predicted job size one second of waiting is worth). ``quantile`` is the QUARTZ router's
    conservative quantile of recent per-token service times; ``window`` how many recent
    completions per instance it keeps. ``seed`` seeds the power-of-two router's sampling.
    ``train_fraction`` of the workload trains the output-length predictor; the rest is served.
    """

    replicas: int = 1
    router: str = "round-robin"
    prefill: int = 0
    decode: int = 0
    decode_router: str = "round-robin"
    link: KVLink = field(default_factory=lambda: LINKS["rdma-200"])
    dynamic: DynamicRatio | None = None
    scheduler: str = "fcfs"
    ewsjf_tokens_per_s: float = 4096.0
    quantile: float = 0.9
    window: int = 64
    seed: int = 0
    train_fraction: float = 0.3

    def __post_init__(self) -> None:
        o = "ClusterParams"
        _check(o, "replicas", self.replicas, 1, 1024, integer=True)
        _check(o, "prefill", self.prefill, 0, 1024, integer=True)
        if self.prefill:
            _check(o, "decode", self.decode, 1, 1024, integer=True)
        elif self.decode:
            raise ParamError(f"{o}.decode = {self.decode} needs prefill >= 1 (a P/D cluster); "
                             "allowed 0 for an aggregated pool")
        for name, value, allowed in (("router", self.router, ROUTERS),
                                     ("decode_router", self.decode_router, DECODE_ROUTERS),
                                     ("scheduler", self.scheduler, SCHEDULERS)):
            if value not in allowed:
                raise ParamError(f"{o}.{name} = {value!r} is not one of: {', '.join(allowed)}")
        if not isinstance(self.link, KVLink):
            raise ParamError(f"{o}.link must be a KVLink, not {self.link!r}")
        if self.dynamic is not None and not isinstance(self.dynamic, DynamicRatio):
            raise ParamError(f"{o}.dynamic must be a DynamicRatio or None, not "
                             f"{self.dynamic!r}")
        if self.dynamic is not None and not self.prefill:
            raise ParamError(f"{o}.dynamic needs a P/D cluster (prefill >= 1)")
        _check(o, "ewsjf_tokens_per_s", self.ewsjf_tokens_per_s, 0, lo_open=True)
        _check(o, "quantile", self.quantile, 0, 1, lo_open=True)
        _check(o, "window", self.window, 1, 1 << 20, integer=True)
        _check(o, "seed", self.seed, 0, 2**63 - 1, integer=True)
        _check(o, "train_fraction", self.train_fraction, 0, 0.9)

    @property
    def disaggregated(self) -> bool:
        return self.prefill > 0

    @property
    def instances(self) -> int:
        """Instances in all (each one accelerator running the preset's model)."""
        return self.prefill + self.decode if self.prefill else self.replicas

    @property
    def label(self) -> str:
        """A short name of the layout, e.g. ``4x least-tokens`` or ``P/D 3:5 dyn``."""
        if not self.prefill:
            return f"{self.replicas}x {self.router}"
        dyn = ""
        if self.dynamic is not None:
            dyn = " dopd" if self.dynamic.policy == "dopd" else " dyn-threshold"
        return f"P/D {self.prefill}:{self.decode}{dyn}"


#: Named cluster layouts (``hikv serve --cluster NAME``); flags given beside one override its
#: fields. Four instances of the preset's accelerator, KV over 200 Gb/s RDMA.
CLUSTER_PRESETS: dict[str, ClusterParams] = {
    "agg4": ClusterParams(replicas=4, router="least-tokens"),
    "pd2:2": ClusterParams(prefill=2, decode=2, router="least-tokens"),
    "pd3:1": ClusterParams(prefill=3, decode=1, router="least-tokens"),
    "pd-dopd": ClusterParams(prefill=2, decode=2, router="least-tokens",
                             dynamic=DynamicRatio()),
}


def get_cluster_preset(name: str) -> ClusterParams:
    """The cluster layout preset ``name``; an unknown name lists the known ones."""
    try:
        return CLUSTER_PRESETS[name]
    except KeyError:
        raise ParamError(f"--cluster = {name!r} is not one of: "
                         f"{', '.join(CLUSTER_PRESETS)}") from None
