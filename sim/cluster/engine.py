"""Cluster serving: replicas behind a router, and prefill/decode (P/D) disaggregation with KV
transfer (docs/cluster.md).

:func:`simulate_cluster` runs several instances of the single-replica engine
(:class:`hikv.sim.serving.engine.Engine`, the same scheduler, paged KV, preemption and step-cost
models; not a copy) under one discrete-event loop. Every event, of the cluster (arrival, KV
transfer done, monitor tick, end of a reconfiguration) or of an engine (its arrivals and
iterations), is taken in time order; at equal times cluster events go first, so a request
routed at ``t`` is seen by its engine before an iteration that ends at ``t`` -- as preloaded
arrivals are in the lone engine. An engine's batched decode runs stop at the earliest time
anything could be injected into it (the engine's ``next_external`` hook), so they stay exact.

Aggregated (``ClusterParams.prefill == 0``): each request goes to one instance chosen by the
router (:mod:`hikv.sim.cluster.router`) when it arrives, and is served there from prefill to its
last token. One instance with round-robin is the lone engine, event for event.

Disaggregated: the router picks a prefill instance, which serves the request as a one-token
job (prefill and the first token; TTFT is measured there). The KV cache then ships to a decode
instance chosen by the decode router over the prefill instance's egress link
(:class:`~hikv.sim.cluster.params.KVLink`, transfers FIFO per link) while every instance keeps
computing (transfer overlaps decode). The bytes shipped per request are the closed form's
resident bytes after prefill, ``layers * kv_heads * storage_bytes(resident_after_prefill(P,
P))`` (:mod:`hikv.sim.cost.closed_form`): full KV ships all ``P`` tokens; HiKV-evict and every
evicting method ship the ``min(P, budget)`` tokens they keep; query-aware methods (Quest, SparQ,
DS, HiKV-query) ship every token plus their metadata. On arrival the sequence joins the decode
instance's waiting queue holding its KV (it needs its next decode step's blocks to be
admitted; decode-side memory pressure then preempts and recomputes as in the lone engine).
Simplifications, stated: a prefill instance frees a request's KV when its prefill ends (the
copy in flight or waiting for a decode slot is not charged to its memory), and transfer does
not start before the prefill's last chunk ends (no layer-wise streaming).

Dynamic ratio (:class:`~hikv.sim.cluster.params.DynamicRatio`, rules in
:mod:`hikv.sim.cluster.ratio`: DOPD's forecast-and-ratio rule or the threshold heuristic): a
monitor tick may move one instance between pools; the instance is drained (no new work),
idles ``reconfig_s`` and then serves its new role.

Little's law per pool (:attr:`ClusterResult.pools`): the pools are the job kinds -- prefill
jobs (arrival to the end of prefill), decode jobs (KV arrival at the decode instance to the
last token) or whole requests (aggregated). Each engine integrates its queues over the
steady window; the integral is split by pool at the moments an instance changes role (it is
empty then, after its drain), so an instance that moves counts in each pool for the time it
served it. Requests in flight on a link or held for a decode slot are in no pool. The check
(:func:`~hikv.sim.serving.result.little_window`) takes every term over the same window and
holds exactly, overloaded or not; the steady-state form is reported beside it.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hikv.params import Config, MethodSpec, ParamError
from hikv.sim.cluster.params import ClusterParams
from hikv.sim.cluster.ratio import RatioSample, make_ratio_policy
from hikv.sim.cluster.router import InstanceView, jain_index, make_decode_router, make_router
from hikv.sim.cluster.sched import EwsjfPolicy, OutputPredictor, PredictorEval
from hikv.sim.serving.engine import (
    Engine,
    RequestTimes,
    SeqState,
    ServingResult,
    engine_result,
    nan_percentile,
)
from hikv.sim.serving.result import LittleCheck, little_check, little_window
from hikv.sim.serving.scheduler import Policy, get_policy
from hikv.sim.serving.step_cost import (
    DEFAULT_STEP_COST,
    IterationBatch,
    StepCostModel,
    resolve_step_cost,
)
from hikv.sim.serving.workload import Workload

__all__ = ["ClusterResult", "simulate_cluster", "transfer_bytes", "PoolLittle"]

_ARRIVAL, _KV_READY, _TICK, _SWITCH = 0, 1, 2, 3
_ORDER0 = -(1 << 62)          # injected arrivals rank before every engine iteration event


def transfer_bytes(cfg: Config, spec: MethodSpec, prompt: Any) -> np.ndarray:
    """Bytes of KV a prefill instance ships for prompts of ``prompt`` tokens (all layers and
    KV heads): the closed form's resident bytes once the prompt is prefilled."""
    from hikv.sim.cost.closed_form import closed_form

    kv = closed_form(spec, cfg.layout)
    p = np.asarray(prompt, dtype=np.int64)
    heads = cfg.model.layers * cfg.model.kv_heads
    return heads * kv.storage_bytes(kv.resident_after_prefill(p, p)).astype(np.int64)


@dataclass(frozen=True)
class PoolLittle:
    """Little's law of one pool (``"prefill"``, ``"decode"`` or ``"mixed"``): ``window`` with
    every term over the steady window (:func:`~hikv.sim.serving.result.little_window`, exact
    under overload), ``steady_form`` the usual form (arrivals in the window, whole sojourns;
    valid when ``steady``: completions in the window keep up with its arrivals)."""

    pool: str
    window: LittleCheck
    steady_form: LittleCheck
    steady: bool


@dataclass(frozen=True)
class ClusterResult(RequestTimes):
    """One cluster run. Per-request arrays follow the served workload's order; times are
    seconds from its first arrival. ``instances`` holds each instance's own
    :class:`~hikv.sim.serving.engine.ServingResult` (its sequences, queues, Little's law)."""

    params: ClusterParams
    config: Config
    method: str
    spec: MethodSpec
    cost_model: str
    workload: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    completions: np.ndarray
    generated_tokens: np.ndarray
    preemptions: np.ndarray
    route: np.ndarray                # instance that prefilled the request
    route_score: np.ndarray          # the router's score of that choice
    decode_route: np.ndarray         # decode instance (-1: aggregated)
    transfer_bytes: np.ndarray       # KV shipped (0: aggregated or one-token output)
    transfer_start_s: np.ndarray
    transfer_end_s: np.ndarray
    isolated_s: np.ndarray           # end-to-end time served alone on one instance
    instances: tuple[ServingResult, ...]
    roles: tuple[tuple[float, int, str], ...]    # (time, instance, role) from the start
    pools: tuple[PoolLittle, ...]                # Little's law per pool (module docstring)
    ratio_samples: tuple[RatioSample, ...]       # DOPD's monitor ticks (empty otherwise)
    predictor: OutputPredictor
    predictor_eval: PredictorEval | None
    wall_s: float
    events: int

    @property
    def slowdown(self) -> np.ndarray:
        """End-to-end time over the time the request takes served alone."""
        return self.e2e_s / self.isolated_s

    def instance_tokens(self) -> np.ndarray:
        """Tokens each instance processed (prefill, recomputation included, plus decode)."""
        return np.asarray([r.prefill_tokens + r.decode_tokens for r in self.instances],
                          dtype=np.int64)

    def summary(self) -> dict[str, Any]:
        """Headline metrics as a flat dict (units in the keys)."""
        p = self.params
        n = len(self.arrival_s)
        span = self.makespan_s

        out: dict[str, Any] = {
            "layout": p.label, "method": self.method, "method_label": self.spec.label,
            "instances": p.instances, "replicas": p.replicas if not p.prefill else 0,
            "prefill": p.prefill, "decode": p.decode, "dynamic": p.dynamic is not None,
            "router": p.router, "decode_router": p.decode_router if p.prefill else "",
            "scheduler": p.scheduler, "link": p.link.name if p.prefill else "",
            "cost_model": self.cost_model, "workload": self.workload, "requests": n,
            "makespan_s": span, "throughput_req_per_s": n / span,
            "throughput_tok_per_s": float(self.output_tokens.sum()) / span,
        }
        for name, x in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2e", self.e2e_s),
                        ("slowdown", self.slowdown)):
            for q in (50, 90, 99):
                out[f"{name}_p{q}" + ("" if name == "slowdown" else "_s")] = nan_percentile(x, q)
        ship = self.transfer_bytes
        moved = self.transfer_end_s - self.transfer_start_s
        errs = [abs(q.window.rel_error) for q in self.pools if q.window.requests]
        steady = [abs(q.steady_form.rel_error) for q in self.pools if q.steady]
        out.update({
            "slo_attainment": float(self.slo_met().mean()),
            "preemptions": int(self.preemptions.sum()),
            "transfer_bytes_total": int(ship.sum()),
            "transfer_bytes_mean": float(ship.mean()),
            "transfer_s_p50": nan_percentile(np.where(ship > 0, moved, np.nan), 50),
            "transfer_s_p99": nan_percentile(np.where(ship > 0, moved, np.nan), 99),
            "jain_tokens": jain_index(self.instance_tokens()),
            "reconfigurations": sum(1 for i, (_, _, role) in enumerate(self.roles)
                                    if i >= p.instances and role in ("prefill", "decode")),
            "final_prefill_instances": _final_roles(self).count("prefill") if p.prefill else 0,
            "little_max_rel_error": max(errs) if errs else math.nan,
            "little_pools_checked": len(errs),
            "little_steady_max_rel_error": max(steady) if steady else math.nan,
            "sim_wall_s": self.wall_s,
        })
        if self.predictor_eval is not None:
            out.update(self.predictor_eval.as_dict())
        return out


def _final_roles(res: ClusterResult) -> list[str]:
    role = {}
    for _, k, r in res.roles:
        role[k] = r
    return [role[k] for k in sorted(role)]


class _Cluster:
    """State of one cluster run (built and used by :func:`simulate_cluster` only)."""

    def __init__(self, cfg: Config, spec: MethodSpec, wl: Workload, cost: StepCostModel,
                 params: ClusterParams, predictor: OutputPredictor, fast_forward: bool) -> None:
        self.cfg, self.p, self.wl, self.pred, self.cost = cfg, params, wl, predictor, cost
        base = get_policy(cfg.serving.policy)
        self.prefill_policy: Policy = base if params.scheduler == "fcfs" else EwsjfPolicy(
            name="ewsjf", description="effective-waiting-time SJF",
            waiting_order="ewsjf", admission=base.admission,
            watermark_fraction=base.watermark_fraction,
            tokens_per_s=params.ewsjf_tokens_per_s, predictor=predictor)
        self.decode_policy: Policy = base
        pd = params.disaggregated
        n = params.instances
        self.roles = (["prefill"] * params.prefill + ["decode"] * params.decode if pd
                      else ["mixed"] * n)
        self.engines = [Engine(cfg, spec, wl, cost,
                               self.decode_policy if r == "decode" else self.prefill_policy,
                               fast_forward, preload=False) for r in self.roles]
        self.views = [InstanceView(k, e, params.window) for k, e in enumerate(self.engines)]
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq_no = 0
        self.inject_no = 0
        for k, e in enumerate(self.engines):
            e.on_finish = self._finisher(k)
            e.next_external = self._external(k) if pd else self._cluster_next
        self.router = make_router(params.router, predictor=predictor,
                                  quantile=params.quantile, seed=params.seed)
        self.drouter = make_decode_router(params.decode_router)
        m = len(wl)
        self.first_token = np.full(m, np.nan)
        self.finish = np.full(m, np.nan)
        self.completions = np.zeros(m, np.int64)
        self.generated = np.zeros(m, np.int64)
        self.preempt = np.zeros(m, np.int64)
        self.route = np.full(m, -1, np.int64)
        self.score = np.full(m, np.nan)
        self.droute = np.full(m, -1, np.int64)
        self.tbytes = np.zeros(m, np.int64)
        self.tstart = np.full(m, np.nan)
        self.tend = np.full(m, np.nan)
        self.prompt = wl.prompt_tokens
        self.output = wl.output_tokens
        self.med = predictor.predict(self.prompt)
        self.high = np.asarray([predictor.predict_high(int(x)) for x in self.prompt]) \
            if params.router == "quartz" else self.med
        self.done = 0
        self.held: deque[tuple[int, int]] = deque()     # (request, prefill instance)
        self.link_free = [0.0] * n
        self.pending_prefill = [0] * n
        self.role_log: list[tuple[float, int, str]] = [
            (float(wl.arrival_s[0]), k, r) for k, r in enumerate(self.roles)]
        self.switching = -1
        self.switch_to = ""
        self.cool_until = -math.inf
        self.ratio = make_ratio_policy(params.dynamic) if params.dynamic is not None else None
        self.reset_tick()                             # work arrived since the last tick
        self.prefill_end = np.full(m, np.nan)
        # Little's law per pool: each engine's queue integral, split where its role changes
        self.pool_of = list(self.roles)
        self.seg0 = [0.0] * n
        self.pool_l = {"prefill": 0.0, "decode": 0.0, "mixed": 0.0}
        if pd:
            eng = self.engines[0]
            kv = eng.kv
            p = self.prompt
            self.ship = transfer_bytes(cfg, spec, p)
            self.now_blocks = eng.blk[kv.resident_after_prefill(p, p)] + 0
            pb = np.minimum(p, spec.budget) if kv.canonical_prompt else p
            self.base = pb
            x = pb + np.maximum(1, np.rint(self.med).astype(np.int64) - 1)
            x = np.minimum(x, len(eng.peak_blk) - 1)
            self.final_blocks = np.maximum(eng.peak_blk[x], self.now_blocks)
            mbt = cfg.serving.max_batched_tokens
            chunk = IterationBatch(prefill_done=[0], prefill_chunk=[mbt], prefill_total=[mbt])
            self.s_per_prefill_token = float(cost.iteration_time_s(chunk)) / mbt
        for i, a in enumerate(wl.arrival_s):
            self._push(float(a), _ARRIVAL, i)
        if params.dynamic is not None:
            self._push(float(wl.arrival_s[0]) + params.dynamic.interval_s, _TICK, None)

    # ----------------------------------------------------------------- events
    def _push(self, t: float, kind: int, payload: Any) -> None:
        heapq.heappush(self.heap, (t, self.seq_no, kind, payload))
        self.seq_no += 1

    def _cluster_next(self) -> float:
        return self.heap[0][0] if self.heap else math.inf

    def _external(self, k: int):
        """The earliest time anything may be injected into engine ``k`` of a P/D cluster: the
        next cluster event, or the next event of an engine whose completions dispatch KV
        (any engine that prefills; decode engines too while requests wait for a decode slot)."""
        engines, roles = self.engines, self.roles

        def nxt() -> float:
            t = self.heap[0][0] if self.heap else math.inf
            held = bool(self.held)
            for j, e in enumerate(engines):
                if j != k and e.heap and e.heap[0][0] < t and (held or roles[j] != "decode"):
                    t = e.heap[0][0]
            return t
        return nxt

    def run(self) -> int:
        heap, engines = self.heap, self.engines
        steps = 0
        while True:
            tc = heap[0][0] if heap else math.inf
            te, ei = math.inf, -1
            for k, e in enumerate(engines):
                if e.heap and e.heap[0][0] < te:
                    te, ei = e.heap[0][0], k
            if tc == math.inf and ei < 0:
                return steps
            steps += 1
            if tc <= te:
                t, _, kind, payload = heapq.heappop(heap)
                if kind == _ARRIVAL:
                    self._arrive(payload, t)
                elif kind == _KV_READY:
                    self._kv_ready(*payload, t)
                elif kind == _TICK:
                    self._tick(t)
                else:
                    self._switch(payload, t)
            else:
                engines[ei].step()

    def _inject(self, k: int, s: SeqState) -> None:
        self.engines[k].inject(s, _ORDER0 + self.inject_no)
        self.inject_no += 1

    def _active(self, role: str) -> list[InstanceView]:
        return [v for v, r in zip(self.views, self.roles, strict=True) if r == role]

    def _arrive(self, i: int, t: float) -> None:
        pd = self.p.disaggregated
        cands = self._active("prefill" if pd else "mixed")
        j, score = self.router.choose(int(self.prompt[i]), cands)
        v = cands[j]
        k = v.idx
        self.route[i] = k
        self.score[i] = score
        v.out_requests += 1
        v.out_tokens += self.prompt[i] + self.med[i]
        v.out_tokens_high += self.prompt[i] + self.high[i]
        self.pending_prefill[k] += int(self.prompt[i])
        self.tick_prompt += float(self.prompt[i])
        self.tick_decode += max(float(self.med[i]) - 1.0, 0.0)
        self.tick_med_sum += float(self.med[i])
        self.tick_n += 1
        self._inject(k, SeqState(i, t, int(self.prompt[i]), 1 if pd else int(self.output[i])))

    def _finisher(self, k: int):
        def on_finish(s: SeqState, t: float) -> None:
            i = s.rid
            v = self.views[k]
            v.out_requests -= 1
            self.preempt[i] += s.preemptions
            if not self.p.disaggregated or math.isnan(self.first_token[i]):
                # a whole request (aggregated) or a prefill job
                v.out_tokens -= self.prompt[i] + self.med[i]
                v.out_tokens_high -= self.prompt[i] + self.high[i]
                v.service.append((t - s.arrival) / (s.prompt + s.output))
                self.pending_prefill[k] -= int(self.prompt[i])
                self.first_token[i] = s.first_token
                self.prefill_end[i] = t
                if not self.p.disaggregated or self.output[i] == 1:
                    self._complete(i, t, s.generated)
                else:
                    self.held.append((i, k))
                    self._dispatch(t)
            else:
                # a decode job of a P/D cluster
                v.predicted_blocks -= int(self.final_blocks[i])
                self._complete(i, t, s.generated)
                self._dispatch(t)
            if self.roles[k].startswith("drain") and v.out_requests == 0:
                self._begin_switch(k, t)
        return on_finish

    def _complete(self, i: int, t: float, generated: int) -> None:
        self.finish[i] = t
        self.completions[i] += 1
        self.generated[i] = generated
        self.done += 1

    def _dispatch(self, t: float) -> None:
        """Send held prefilled requests to decode instances while the decode router takes
        them (FIFO: a request MAPS cannot place yet blocks those behind it)."""
        while self.held:
            i, src = self.held[0]
            cands = self._active("decode")
            maps = self.p.decode_router == "maps"
            j = self.drouter.choose(int(self.final_blocks[i] if maps else self.now_blocks[i]),
                                    cands)
            if j is None:
                return
            self.held.popleft()
            v = cands[j]
            v.out_requests += 1
            v.inflight_blocks += int(self.now_blocks[i])
            v.predicted_blocks += int(self.final_blocks[i])
            start = max(t, self.link_free[src])
            end = start + self.p.link.transfer_s(float(self.ship[i]))
            self.link_free[src] = end
            self.droute[i] = v.idx
            self.tbytes[i] = self.ship[i]
            self.tstart[i], self.tend[i] = start, end
            self._push(end, _KV_READY, (i, v.idx))

    def _kv_ready(self, i: int, k: int, t: float) -> None:
        p = int(self.prompt[i])
        s = SeqState(i, t, p, int(self.output[i]))
        s.done = s.prefilled = p
        s.generated = 1
        s.base = int(self.base[i])
        s.first_token = t
        self.views[k].inflight_blocks -= int(self.now_blocks[i])
        self._inject(k, s)

    # ----------------------------------------------------------------- dynamic ratio
    def reset_tick(self) -> None:
        """Start a monitor interval: the work arrived in it so far is none."""
        self.tick_prompt = self.tick_decode = 0.0
        self.tick_med_sum = 0.0
        self.tick_n = 0

    def _tick(self, t: float) -> None:
        assert self.p.dynamic is not None and self.ratio is not None
        # the rule sees every tick (DOPD's forecast needs the whole history); it acts only when
        # no instance is moving and the cooldown is over
        move = self.ratio.decide(self, t)
        if self.switching < 0 and t >= self.cool_until and move is not None:
            pf = [k for k, r in enumerate(self.roles) if r == "prefill"]
            dc = [k for k, r in enumerate(self.roles) if r == "decode"]
            eng = self.engines
            if move == "prefill" and len(dc) > 1:
                k = min(dc, key=lambda j: (len(eng[j].running), j))
                self._drain(k, "prefill", t)
            elif move == "decode" and len(pf) > 1:
                k = min(pf, key=lambda j: (self.pending_prefill[j], j))
                self._drain(k, "decode", t)
        if self.done < len(self.wl):
            self._push(t + self.p.dynamic.interval_s, _TICK, None)

    def _drain(self, k: int, to: str, t: float) -> None:
        self.roles[k] = f"drain-to-{to}"
        self.switching = k
        self.switch_to = to
        self.role_log.append((t, k, self.roles[k]))
        if self.views[k].out_requests == 0:
            self._begin_switch(k, t)

    def _begin_switch(self, k: int, t: float) -> None:
        to = self.roles[k].removeprefix("drain-to-")
        self.roles[k] = "switching"
        self.role_log.append((t, k, "switching"))
        assert self.p.dynamic is not None
        self._push(t + self.p.dynamic.reconfig_s, _SWITCH, (k, to))

    def _switch(self, payload: tuple[int, str], t: float) -> None:
        k, to = payload
        e = self.engines[k]
        # the engine is empty (drained): its queue integral so far belongs to its old pool
        self.pool_l[self.pool_of[k]] += e.l_integral - self.seg0[k]
        self.seg0[k] = e.l_integral
        self.pool_of[k] = to
        e.policy = self.decode_policy if to == "decode" else self.prefill_policy
        e.waiting = e.policy.new_queue()
        self.roles[k] = to
        self.switching = -1
        assert self.p.dynamic is not None
        self.cool_until = t + self.p.dynamic.cooldown_s
        self.role_log.append((t, k, to))
        if to == "decode":
            self._dispatch(t)


def _pools(cl: _Cluster) -> tuple[PoolLittle, ...]:
    """Little's law per pool of a finished cluster run (module docstring)."""
    from hikv.sim.serving.report import STEADY_STATE_TOL

    for k, e in enumerate(cl.engines):
        cl.pool_l[cl.pool_of[k]] += e.l_integral - cl.seg0[k]
    e0 = cl.engines[0]
    w0, w1 = e0.w0, e0.w1
    arr, fin = cl.wl.arrival_s, cl.finish
    if cl.p.disaggregated:
        dec = cl.output > 1
        jobs = {"prefill": (arr, cl.prefill_end), "decode": (cl.tend[dec], fin[dec])}
    else:
        jobs = {"mixed": (arr, fin)}
    out = []
    for pool, (a, f) in jobs.items():
        li = cl.pool_l[pool]
        arrived = int(((a >= w0) & (a <= w1)).sum())
        done = int(((f >= w0) & (f <= w1)).sum())
        steady = arrived > 0 and w1 > w0 and done >= (1 - STEADY_STATE_TOL) * arrived
        out.append(PoolLittle(pool, little_window(li, w0, w1, a, f),
                              little_check(li, w0, w1, a, f), steady))
    return tuple(out)


def _isolated_s(cfg: Config, cost: StepCostModel, prompt: np.ndarray, output: np.ndarray
                ) -> np.ndarray:
    """End-to-end seconds of each request served alone: prefill in chunks of
    ``max_batched_tokens`` then one decode iteration per further token (batch of one)."""
    mbt = cfg.serving.max_batched_tokens
    out = np.empty(len(prompt))
    cache: dict[tuple[int, int], float] = {}
    for i, (p, o) in enumerate(zip(prompt.tolist(), output.tolist(), strict=True)):
        hit = cache.get((p, o))
        if hit is None:
            done = np.arange(0, p, mbt)
            chunk = np.minimum(mbt, p - done)
            hit = sum(float(cost.iteration_time_s(IterationBatch(
                prefill_done=[d], prefill_chunk=[c], prefill_total=[p])))
                for d, c in zip(done.tolist(), chunk.tolist(), strict=True))
            if o > 1:
                hit += float(np.sum(cost.decode_run_times_s(
                    np.asarray([p], np.int64), np.asarray([1], np.int64), o - 1)))
            cache[(p, o)] = hit
        out[i] = hit
    return out


def simulate_cluster(cfg: Config, spec: MethodSpec, workload: Workload, params: ClusterParams,
                     *, predictor: OutputPredictor, method: str | None = None,
                     cost_model: str | Callable[[Config, MethodSpec], StepCostModel]
                     = DEFAULT_STEP_COST, fast_forward: bool = True,
                     predictor_eval: PredictorEval | None = None,
                     with_isolated: bool = True) -> ClusterResult:
    """Serve ``workload`` on the cluster ``params`` of ``cfg``'s accelerator and model with KV
    method ``spec`` (module docstring). ``predictor`` is the output-length predictor the
    routers and EWSJF use (train it on other requests: :func:`~hikv.sim.cluster.sched.
    split_workload`). ``cost_model`` names a step-cost model or is a factory ``(cfg, spec) ->
    StepCostModel`` (a measured device, a named system: :mod:`hikv.sim.serving.systems`).
    Pure: nothing is written, no global state is touched."""
    if not isinstance(params, ClusterParams):
        raise ParamError(f"params must be a ClusterParams, not {params!r}")
    cost, cost_name = resolve_step_cost(cost_model, cfg, spec)
    t0 = time.perf_counter()
    cl = _Cluster(cfg, spec, workload, cost, params, predictor, fast_forward)
    events = cl.run()
    wall = time.perf_counter() - t0
    name = method or spec.label
    if (cl.completions != 1).any():
        bad = np.nonzero(cl.completions != 1)[0]
        raise AssertionError(f"cluster lost or repeated requests {bad[:10].tolist()} "
                             f"(completions {cl.completions[bad[:10]].tolist()})")
    insts = tuple(engine_result(e, method=f"{name}@{k}", cost_name=cost_name,
                                workload=workload.source, wall_s=0.0)
                  for k, e in enumerate(cl.engines))
    iso = (_isolated_s(cfg, cost, workload.prompt_tokens, workload.output_tokens)
           if with_isolated else np.full(len(workload), np.nan))
    return ClusterResult(
        params=params, config=cfg, method=name, spec=spec, cost_model=cost_name,
        workload=workload.source, arrival_s=workload.arrival_s,
        prompt_tokens=workload.prompt_tokens, output_tokens=workload.output_tokens,
        first_token_s=cl.first_token, finish_s=cl.finish, completions=cl.completions,
        generated_tokens=cl.generated, preemptions=cl.preempt, route=cl.route,
        route_score=cl.score, decode_route=cl.droute, transfer_bytes=cl.tbytes,
        transfer_start_s=cl.tstart, transfer_end_s=cl.tend, isolated_s=iso,
        instances=insts, roles=tuple(cl.role_log), pools=_pools(cl),
        ratio_samples=tuple(getattr(cl.ratio, "samples", ())), predictor=predictor,
        predictor_eval=predictor_eval, wall_s=wall, events=events)
