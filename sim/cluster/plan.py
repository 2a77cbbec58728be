"""Fleet sizing: the smallest number of replicas that serves a trace within SLOs
(``hikv plan``, docs/plan.md).

A fleet is ``N`` identical replicas of one system (:mod:`hikv.sim.serving.systems`: a GPU, or a
GPU with a HiKV accelerator beside it), aggregated behind a router, or a P/D split of ``N``
instances. :func:`smallest_fleet` finds the smallest ``N`` whose cluster run
(:func:`~hikv.sim.cluster.engine.simulate_cluster`) over the whole trace meets both SLOs for at
least ``attainment`` of the requests: it doubles ``N`` from ``start`` until a fleet passes (or the
cap fails), then bisects between the largest failing and the smallest passing count, assuming
attainment does not fall as replicas are added. A P/D fleet of ``N`` passes when one of its
splits does (:data:`PD_SHARES` of the instances prefill, rounded, each pool at least one). A
target no fleet up to the cap meets is *unmet*: the plan reports the best attainment it saw,
never a count.

Every request of the trace is served; the output-length predictor the routers use is trained
on the whole trace (it sees the future; only routing uses it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hikv.params import Config, MethodSpec, ParamError
from hikv.sim.cluster.engine import simulate_cluster
from hikv.sim.cluster.params import ClusterParams, KVLink
from hikv.sim.cluster.sched import OutputPredictor
from hikv.sim.serving.step_cost import StepCostModel
from hikv.sim.serving.workload import Workload

__all__ = ["parse_slo", "with_slo", "PD_SHARES", "Probe", "FleetPlan", "MemoCost",
           "smallest_fleet", "pd_splits", "attention_energy_j", "rates_around"]

#: Shares of a P/D fleet's instances that prefill, tried at every size.
PD_SHARES = (0.25, 0.5, 0.75)


def parse_slo(text: str) -> tuple[float, float]:
    """``"ttft=0.5,tpot=0.1"`` (seconds) -> (TTFT, TPOT); ParamError naming ``--slo`` and
    what is wrong."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in str(text).split(",")):
        key, eq, val = part.partition("=")
        key = key.strip().lower()
        if not eq or key not in ("ttft", "tpot"):
            raise ParamError(f"--slo {text!r}: {part!r} is not ttft=SECONDS or tpot=SECONDS "
                             "(e.g. --slo ttft=0.5,tpot=0.1)")
        try:
            v = float(val)
        except ValueError:
            raise ParamError(f"--slo {text!r}: {key} = {val!r} is not a number of "
                             "seconds") from None
        if not (math.isfinite(v) and 0 < v <= 3600):
            raise ParamError(f"--slo {text!r}: {key} = {v:g} is out of range: allowed "
                             "(0, 3600] seconds")
        if key in out:
            raise ParamError(f"--slo {text!r}: {key} is given twice")
        out[key] = v
    missing = [k for k in ("ttft", "tpot") if k not in out]
    if missing:
        raise ParamError(f"--slo {text!r}: {' and '.join(missing)} missing (give both, e.g. "
                         "--slo ttft=0.5,tpot=0.1)")
    return out["ttft"], out["tpot"]


def with_slo(cfg: Config, ttft_s: float, tpot_s: float, attainment: float) -> Config:
    """``cfg`` with the serving SLOs and the attainment target replaced (checked by
    :class:`~hikv.params.ServingParams`)."""
    return cfg.replace(serving=dataclasses.replace(cfg.serving, ttft_slo_s=ttft_s,
                                                   tpot_slo_s=tpot_s,
                                                   slo_attainment=attainment))


class MemoCost:
    """A step-cost factory that builds each method's step cost once (step costs are pure:
    their tables are caches), so the probes of a search share them; ``name`` is the wrapped
    factory's or model's."""

    def __init__(self, cost_model: Any) -> None:
        from hikv.sim.serving.step_cost import make_step_cost

        self._make: Callable[[Config, MethodSpec], StepCostModel] = (
            cost_model if callable(cost_model)
            else (lambda cfg, spec: make_step_cost(cost_model, cfg, spec)))
        self.name = str(getattr(cost_model, "name", cost_model))
        self._memo: dict[tuple[Config, MethodSpec], StepCostModel] = {}

    def __call__(self, cfg: Config, spec: MethodSpec) -> StepCostModel:
        key = (cfg, spec)
        if key not in self._memo:
            self._memo[key] = self._make(cfg, spec)
        return self._memo[key]


@dataclass(frozen=True)
class Probe:
    """One fleet simulated: ``instances`` in all (``prefill`` of them prefilling in a P/D
    split, 0 when aggregated) and the fraction of requests meeting both SLOs."""

    instances: int
    prefill: int
    attainment: float


@dataclass(frozen=True)
class FleetPlan:
    """The answer of :func:`smallest_fleet`: ``replicas`` (None when unmet), its ``layout``
    (``aggregated`` or ``P/D p:d``), the ``best`` probe seen (the passing one, or the best
    attainment when unmet), every probe, the rate served and the cap searched."""

    method: str
    rate_per_s: float
    target: float
    cap: int
    replicas: int | None
    layout: str
    best: Probe
    probes: tuple[Probe, ...]

    @property
    def met(self) -> bool:
        return self.replicas is not None


def pd_splits(n: int) -> list[int]:
    """Prefill instances to try for a P/D fleet of ``n`` (``n >= 2``)."""
    return sorted({min(n - 1, max(1, round(n * s))) for s in PD_SHARES}) if n >= 2 else []


def smallest_fleet(cfg: Config, spec: MethodSpec, workload: Workload, *, cost_model: Any,
                   predictor: OutputPredictor, method: str, router: str = "least-tokens",
                   cap: int = 64, start: int = 1, pd: bool = False,
                   link: KVLink | None = None,
                   progress: Callable[[Probe], None] | None = None) -> FleetPlan:
    """The smallest fleet of ``cfg``'s system serving ``workload`` with method ``spec`` at
    ``cfg.serving``'s SLOs for ``cfg.serving.slo_attainment`` of the requests (module
    docstring): aggregated, or P/D (``pd``: the best split of each size, over ``link``)."""
    if not 1 <= start <= cap <= 1024:
        raise ParamError(f"fleet search: need 1 <= start ({start}) <= cap ({cap}) <= 1024")
    if pd and cap < 2:
        raise ParamError("a P/D fleet needs at least 2 instances: raise --max-replicas")
    target = cfg.serving.slo_attainment
    probes: list[Probe] = []
    seen: dict[int, Probe] = {}

    def run(params: ClusterParams) -> float:
        r = simulate_cluster(cfg, spec, workload, params, predictor=predictor,
                             cost_model=cost_model, with_isolated=False)
        return float(r.slo_met().mean())

    def ok(n: int) -> bool:
        if n in seen:
            return seen[n].attainment >= target
        best = None
        if not pd:
            best = Probe(n, 0, run(ClusterParams(replicas=n, router=router)))
            probes.append(best)
            if progress is not None:
                progress(best)
        else:
            extra = {"link": link} if link is not None else {}
            for p in pd_splits(n):
                pr = Probe(n, p, run(ClusterParams(prefill=p, decode=n - p, router=router,
                                                   **extra)))
                probes.append(pr)
                if progress is not None:
                    progress(pr)
                if best is None or pr.attainment > best.attainment:
                    best = pr
                if pr.attainment >= target:
                    break
        assert best is not None
        seen[n] = best
        return best.attainment >= target

    lo = (1 if pd else 0) if start <= (2 if pd else 1) else None   # largest known failing
    n = max(start, 2) if pd else start
    if ok(n):
        hi = n
        if lo is None:                       # walk down until a fleet fails
            m = n
            while m > (2 if pd else 1):
                m = max(m // 2, 2 if pd else 1)
                if not ok(m):
                    lo = m
                    break
                hi = m
            if lo is None:
                lo = (1 if pd else 0)
    else:
        lo, hi = n, None
        while hi is None and n < cap:
            n = min(2 * n, cap)
            if ok(n):
                hi = n
            else:
                lo = n
    if hi is None:                           # unmet up to the cap
        best = max(seen.values(), key=lambda p: p.attainment)
        return FleetPlan(method, workload.rate_per_s, target, cap, None, _layout(best), best,
                         tuple(probes))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return FleetPlan(method, workload.rate_per_s, target, cap, hi, _layout(seen[hi]),
                     seen[hi], tuple(probes))


def _layout(p: Probe) -> str:
    return "aggregated" if not p.prefill else f"P/D {p.prefill}:{p.instances - p.prefill}"


def attention_energy_j(step_cost: Any, workload: Workload) -> float:
    """The decode attention energy of every decode step of ``workload``'s requests on the
    accelerator of a ``gpu+hikv`` step cost (its ``energy_per_step_j`` by decode key; each
    request's steps ``1 .. output - 1`` after its prompt, recomputation after preemption not
    counted)."""
    kv = step_cost.kv
    p = np.asarray(workload.prompt_tokens, dtype=np.int64)
    o = np.asarray(workload.output_tokens, dtype=np.int64)
    dec = o > 1
    if not dec.any():
        return 0.0
    first = kv.decode_key(p[dec], np.ones(int(dec.sum()), dtype=np.int64))
    last = kv.decode_key(p[dec], o[dec] - 1)
    e = step_cost.energy_per_step_j(np.arange(int(last.max()) + 1, dtype=np.int64))
    cum = np.concatenate([[0.0], np.cumsum(e)])
    return float((cum[last + 1] - cum[first]).sum())


def rates_around(rate: float, scales: Sequence[float] = (0.5, 1.0, 2.0)) -> list[float]:
    """Request rates ``rate x scales`` (the plot's x axis by default)."""
    return [rate * s for s in scales]

