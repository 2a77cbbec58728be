"""DistServe's goodput of a serving cluster (:mod:`hikv.sim.cluster.engine`): the highest arrival
rate at which the cluster meets both SLOs for ``slo_attainment`` of the requests."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from hikv.params import Config, MethodSpec
from hikv.sim.cluster.engine import simulate_cluster
from hikv.sim.cluster.params import ClusterParams
from hikv.sim.cluster.sched import OutputPredictor
from hikv.sim.serving.step_cost import DEFAULT_STEP_COST, StepCostModel
from hikv.sim.serving.workload import Workload

__all__ = ["ClusterGoodput", "cluster_goodput"]


@dataclass(frozen=True)
class ClusterGoodput:
    """DistServe's goodput of a cluster: the highest arrival rate at which a fraction
    ``target`` of requests meets both SLOs (``bracketed`` False: ``rate_per_s`` is a bound,
    0 when nothing passed); ``runs`` every (rate, attainment) simulated."""

    rate_per_s: float
    target: float
    runs: tuple[tuple[float, float], ...]
    bracketed: bool


def cluster_goodput(cfg: Config, spec: MethodSpec, workload: Workload, params: ClusterParams,
                    *, predictor: OutputPredictor,
                    cost_model: str | Callable[[Config, MethodSpec], StepCostModel]
                    = DEFAULT_STEP_COST,
                    rel_tol: float = 0.05, max_doublings: int = 8) -> ClusterGoodput:
    """Search the rate (the workload's times rescaled): double or halve from its own rate
    until the attainment crosses ``cfg.serving.slo_attainment``, then bisect geometrically to
    ``rel_tol`` (attainment assumed to fall with the rate)."""
    target = cfg.serving.slo_attainment
    runs: list[tuple[float, float]] = []

    def ok(rate: float) -> bool:
        r = simulate_cluster(cfg, spec, workload.at_rate(rate), params, predictor=predictor,
                             cost_model=cost_model, with_isolated=False)
        a = float(r.slo_met().mean())
        runs.append((rate, a))
        return a >= target

    r0 = workload.rate_per_s
    lo, hi = (r0, math.nan) if ok(r0) else (math.nan, r0)
    for _ in range(max_doublings):
        if not (math.isnan(lo) or math.isnan(hi)):
            break
        r = lo * 2 if math.isnan(hi) else hi / 2
        if ok(r):
            lo = r
        else:
            hi = r
    if math.isnan(lo) or math.isnan(hi):
        return ClusterGoodput(0.0 if math.isnan(lo) else lo, target, tuple(runs), False)
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return ClusterGoodput(lo, target, tuple(runs), True)
