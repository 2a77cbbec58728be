"""The dynamic prefill/decode ratio of a P/D cluster (:mod:`hikv.sim.cluster.engine`): when to move
one instance between the pools (:class:`~hikv.sim.cluster.params.DynamicRatio`).

:class:`DopdRatio` is DOPD's rule (Liao et al., "DOPD: A Dynamic PD-Disaggregation
Architecture for Maximizing Goodput in LLM Inference Serving", 2025, as its text describes
it): monitor the load, forecast it from its history, and set the P:D ratio to the ratio of
the forecast prefill work to the forecast decode work, each in instances of its pool's
measured rate:

* work per monitor interval, from what the router sees: the prompt tokens of the arrivals
  (prefill) and their predicted output tokens minus the first (decode, the cluster's
  output-length predictor);
* forecast: Holt's double exponential smoothing of each series (level weight ``alpha``, trend
  weight ``beta``), ``h = (interval_s + reconfig_s) / interval_s`` intervals ahead, the time
  a move takes to take effect (proactive, from the history);
* rates per instance: prefill, the prompt tokens the prefill pool processed per second its
  instances were busy, over the interval, exponentially averaged (weight ``alpha``; until
  the pool was busy the split stays); decode, the tokens per second one decode instance
  sustains at the TPOT SLO: the largest batch whose iteration (step-cost model) fits the
  SLO and whose KV fits the instance, at the *measured* context (mean prompt and decode step
  of the sequences the decode pool runs; before any, the arrivals' mean prompt and half
  their predicted output). Tokens per busy second would understate a decode instance at
  light load, when its batches are small, and move instances to the wrong pool;
* target: the ratio ``n_p : n_d = x_p : x_d`` with ``x = forecast work / rate`` (instances
  each pool needs), i.e. ``n_p = N * x_p / (x_p + x_d)`` (logged); in whole instances, the
  split ``n_p in [1, N - 1]`` that minimises the bottleneck utilisation
  ``max(x_p / n_p, x_d / (N - n_p))`` (the rounding of that ratio that equalises the two pools'
  load best). One instance moves toward it when the current split's bottleneck exceeds the
  best one's by more than ``margin`` (a fraction; hysteresis).

What DOPD also does and this does not: its request scheduler for mixed lengths (here
EWSJF is a separate option) and its exact forecaster (the paper names no parameters we
could copy); the reconfiguration cost is the drain plus ``reconfig_s`` of downtime.

:class:`ThresholdRatio` is the simpler backlog/KV-threshold heuristic, ``policy = "threshold"``.

Both return ``"prefill"`` (move a decode instance to the prefill pool), ``"decode"`` or
``None``; :class:`hikv.sim.cluster.engine._Cluster` drains and switches the instance and charges
the cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hikv.sim.cluster.params import DynamicRatio

__all__ = ["RatioPolicy", "DopdRatio", "ThresholdRatio", "make_ratio_policy", "RatioSample"]


class RatioPolicy(Protocol):
    def decide(self, cl: Any, t: float) -> str | None:
        """``"prefill"``, ``"decode"`` or ``None`` for the cluster ``cl`` at time ``t``."""
        ...


@dataclass(frozen=True)
class RatioSample:
    """One DOPD monitor tick: the forecast work (tokens/s), the measured rates per instance
    (tokens/s per instance, NaN before known), the proportional target ``n_p`` (NaN before
    known), the prefill instances now (a moving one counted in its new pool) and the whole
    split it chose."""

    t: float
    prefill_work: float
    decode_work: float
    prefill_rate: float
    decode_rate: float
    target_prefill: float
    current_prefill: int
    chosen_prefill: int


class _Holt:
    """Holt's linear (double exponential) smoothing of one series."""

    def __init__(self, alpha: float, beta: float) -> None:
        self.a, self.b = alpha, beta
        self.level = math.nan
        self.trend = 0.0

    def update(self, x: float) -> None:
        if math.isnan(self.level):
            self.level = x
            return
        prev = self.level
        self.level = self.a * x + (1 - self.a) * (prev + self.trend)
        self.trend = self.b * (self.level - prev) + (1 - self.b) * self.trend

    def forecast(self, h: float) -> float:
        return max(0.0, self.level + h * self.trend)


@dataclass
class DopdRatio:
    """DOPD's forecast-and-ratio rule (module docstring)."""

    dr: DynamicRatio
    samples: list[RatioSample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.p_work = _Holt(self.dr.alpha, self.dr.beta)
        self.d_work = _Holt(self.dr.alpha, self.dr.beta)
        self.rate = {"prefill": math.nan, "decode": math.nan}
        self.last: dict[int, tuple[int, int, float]] = {}
        self.mean_prompt = math.nan

    def _measure(self, cl: Any, role: str, kind: str) -> None:
        """Update the pool's tokens-per-busy-second from its engines' counters."""
        tok = busy = 0.0
        for k, e in enumerate(cl.engines):
            now = (e.prefill_tokens, e.decode_tokens + e.prefill_completions, e.busy_s)
            p0, d0, b0 = self.last.get(k, (0, 0, 0.0))
            if cl.roles[k] == role:
                tok += (now[0] - p0) if kind == "prefill" else (now[1] - d0)
                busy += now[2] - b0
        if busy > 0 and tok > 0:
            x = tok / busy
            r = self.rate[kind]
            self.rate[kind] = x if math.isnan(r) else self.dr.alpha * x + (1 - self.dr.alpha) * r

    def _prefill_at_slo(self, cl: Any) -> float:
        """Prompt tokens/s one prefill instance takes within the TTFT SLO: its measured rate
        times ``1 - S / ttft_slo`` (M/M/1: the time in system ``1 / (mu - lambda)`` stays
        under the SLO), ``S`` the mean prompt's prefill time at that rate."""
        rp = self.rate["prefill"]
        if cl.tick_n:
            self.mean_prompt = cl.tick_prompt / cl.tick_n
        if math.isnan(rp) or math.isnan(self.mean_prompt):
            return math.nan
        return rp * max(0.05, 1 - self.mean_prompt / rp / cl.cfg.serving.ttft_slo_s)

    def _decode_capacity(self, cl: Any) -> float:
        """Tokens/s one decode instance sustains at the TPOT SLO at the measured context."""
        from hikv.sim.serving.step_cost import IterationBatch

        seqs = [s for k, e in enumerate(cl.engines) if cl.roles[k] == "decode"
                for s in e.running]
        if seqs:
            p = float(np.mean([s.kv_prompt for s in seqs]))
            j = float(np.mean([s.step for s in seqs])) + 1
        elif cl.tick_n:
            p, j = cl.tick_prompt / cl.tick_n, max(1.0, cl.tick_med_sum / cl.tick_n / 2)
        else:
            return self.rate["decode"]
        pi, ji = int(round(p)), int(round(j))
        e0 = cl.engines[0]
        x = min(pi + ji, len(e0.peak_blk) - 1)
        per_seq = max(1, int(e0.peak_blk[x]))
        hi = max(1, min(e0.max_running, e0.capacity // per_seq))
        slo = cl.cfg.serving.tpot_slo_s

        def t_of(b: int) -> float:
            return float(cl.cost.iteration_time_s(IterationBatch(
                decode_prompt=np.full(b, pi, np.int64), decode_step=np.full(b, ji, np.int64))))
        lo = 1
        if t_of(hi) <= slo:
            lo = hi
        else:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if t_of(mid) <= slo:
                    lo = mid
                else:
                    hi = mid
        return lo / t_of(lo)

    def decide(self, cl: Any, t: float) -> str | None:
        dr = self.dr
        self.p_work.update(cl.tick_prompt / dr.interval_s)
        self.d_work.update(cl.tick_decode / dr.interval_s)
        self._measure(cl, "prefill", "prefill")
        self.rate["decode"] = self._decode_capacity(cl)
        rp, rd = self._prefill_at_slo(cl), self.rate["decode"]
        self.last = {k: (e.prefill_tokens, e.decode_tokens + e.prefill_completions, e.busy_s)
                     for k, e in enumerate(cl.engines)}
        cl.reset_tick()
        h = (dr.interval_s + dr.reconfig_s) / dr.interval_s
        wp, wd = self.p_work.forecast(h), self.d_work.forecast(h)
        n = cl.p.instances
        cur = sum(1 for r in cl.roles if r in ("prefill", "drain-to-prefill"))
        cur += 1 if cl.switching >= 0 and cl.roles[cl.switching] == "switching" and \
            cl.switch_to == "prefill" else 0
        target = math.nan
        best = cur
        if not (math.isnan(rp) or math.isnan(rd)) and wp + wd > 0:
            xp, xd = wp / rp, wd / rd
            target = float(np.clip(n * xp / (xp + xd), 1, n - 1))

            def load(k: int) -> float:
                return max(xp / k, xd / (n - k))
            best = min(range(1, n), key=lambda k: (load(k), abs(k - cur)))
            if not load(cur) > (1 + dr.margin) * load(best):
                best = cur
        self.samples.append(RatioSample(t, wp, wd, rp, rd, target, cur, best))
        if best > cur:
            return "prefill"
        if best < cur:
            return "decode"
        return None


@dataclass
class ThresholdRatio:
    """The backlog/KV-threshold heuristic (:class:`DynamicRatio`, ``policy="threshold"``)."""

    dr: DynamicRatio
    samples: list[RatioSample] = field(default_factory=list)

    def decide(self, cl: Any, t: float) -> str | None:
        dr = self.dr
        cl.reset_tick()
        pf = [k for k, r in enumerate(cl.roles) if r == "prefill"]
        dc = [k for k, r in enumerate(cl.roles) if r == "decode"]
        slo = cl.cfg.serving.ttft_slo_s
        p_load = (sum(cl.pending_prefill[k] for k in pf) / len(pf)
                  * cl.s_per_prefill_token / slo)
        eng = cl.engines
        kv = float(np.mean([eng[k].used / eng[k].capacity for k in dc]))
        queued = len(cl.held) + sum(len(eng[k].waiting) for k in dc)
        if p_load > dr.high and kv < dr.kv_low and len(dc) > 1:
            return "prefill"
        if (kv > dr.kv_high or queued > 0) and p_load < dr.low and len(pf) > 1:
            return "decode"
        return None


def make_ratio_policy(dr: DynamicRatio) -> DopdRatio | ThresholdRatio:
    """The rule ``dr.policy`` names."""
    return DopdRatio(dr) if dr.policy == "dopd" else ThresholdRatio(dr)
