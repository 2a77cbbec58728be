"""Parameters of a serving cluster (:mod:`hikv.sim.cluster`): the KV-transfer link, the
dynamic prefill/decode ratio and the cluster layout, as frozen dataclasses with named presets.

One source of truth: the CLI (``hikv cluster``), the benchmark (``benchmarks/cluster_bench.py``)
and the tests read these classes and :data:`LINKS`; no number is copied elsewhere.
Units are SI without prefixes (bytes, seconds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hikv.params import ParamError

__all__ = ["KVLink", "LINKS", "get_link", "DynamicRatio", "ClusterParams", "ROUTERS",
           "DECODE_ROUTERS", "SCHEDULERS"]

#: Router names of an aggregated pool and of a P/D cluster's prefill pool (hikv.sim.router).
ROUTERS = ("round-robin", "least-tokens", "p2c", "quartz", "quartz-mean")
#: How a P/D cluster picks the decode instance of a prefilled request (hikv.sim.router).
DECODE_ROUTERS = ("round-robin", "least-kv", "maps")
#: Waiting-queue orders of the instances that prefill (hikv.sim.cluster_sched).
SCHEDULERS = ("fcfs", "ewsjf")


def _check(owner: str, name: str, value: Any, lo: float, hi: float | None = None, *,
           lo_open: bool = False, integer: bool = False, allow_inf: bool = False) -> None:
    """ParamError naming ``owner.name`` and the allowed range unless ``value`` is in it."""
    ok_type = (isinstance(value, int) if integer else isinstance(value, int | float)) \
        and not isinstance(value, bool)
    if not ok_type or math.isnan(value) or (math.isinf(value) and not allow_inf):
        kind = "an integer" if integer else ("a number" if allow_inf else "a finite number")
        raise ParamError(f"{owner}.{name} must be {kind}, not {value!r}")
    bad_lo = value <= lo if lo_open else value < lo
    if bad_lo or (hi is not None and value > hi):
        left = "(" if lo_open else "["
        right = f"{hi}]" if hi is not None else ("inf]" if allow_inf else "inf)")
        raise ParamError(f"{owner}.{name} = {value!r} is out of range: allowed "
                         f"{left}{lo}, {right}")


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


@dataclass(frozen=True)
class DynamicRatio:
    """DOPD-style dynamic prefill/decode ratio: every ``interval_s`` the cluster compares the
    prefill backlog (pending prompt tokens per prefill instance times the seconds per
    prefill token, against ``ttft_slo_s``) with the decode pressure (mean KV use of the
    decode instances, queued decodes); when one side is over ``high`` and the other under
    ``low`` it drains one instance of the idle side, which after ``reconfig_s`` of downtime
    joins the other pool. At most one instance is in reconfiguration at a time, none starts
    within ``cooldown_s`` of the previous one's end (hysteresis); each pool keeps at least one
    instance."""

    interval_s: float = 2.0
    reconfig_s: float = 1.0
    cooldown_s: float = 30.0
    high: float = 0.5
    low: float = 0.25
    kv_high: float = 0.85
    kv_low: float = 0.5

    def __post_init__(self) -> None:
        o = "DynamicRatio"
        _check(o, "interval_s", self.interval_s, 0, 3600, lo_open=True)
        _check(o, "reconfig_s", self.reconfig_s, 0, 3600)
        _check(o, "cooldown_s", self.cooldown_s, 0, 86400)
        _check(o, "low", self.low, 0, 100)
        _check(o, "high", self.high, self.low, 100, lo_open=True)
        _check(o, "kv_low", self.kv_low, 0, 1)
        _check(o, "kv_high", self.kv_high, self.kv_low, 1, lo_open=True)


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
        return f"P/D {self.prefill}:{self.decode}" + (" dyn" if self.dynamic else "")
