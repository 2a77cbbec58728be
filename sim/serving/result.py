"""Result types of the serving simulator (:mod:`hikv.sim.serving.engine`): the per-request latency
mix-in :class:`RequestTimes`, one replica's :class:`ServingResult`, the Little's-law check
:class:`LittleCheck` (:func:`little_check`) and :func:`nan_percentile`. Split out of
``sim/serving/engine.py`` so that the engine module holds the engine only;
``hikv.sim.serving.engine`` re-exports every name here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hikv.params import Config, MethodSpec

__all__ = ["LittleCheck", "RequestTimes", "ServingResult", "nan_percentile", "little_check",
           "little_window"]


@dataclass(frozen=True)
class LittleCheck:
    """Little's law over ``[start_s, end_s]``: ``L`` integrated from the scheduler's queues,
    ``lambda * W`` from the per-request records of the ``requests`` arriving in the window."""

    start_s: float
    end_s: float
    requests: int
    L: float
    arrival_rate_per_s: float
    mean_time_in_system_s: float

    @property
    def lambda_w(self) -> float:
        return self.arrival_rate_per_s * self.mean_time_in_system_s

    @property
    def rel_error(self) -> float:
        """``(L - lambda W) / (lambda W)``; NaN when the window holds no request."""
        lw = self.lambda_w
        return (self.L - lw) / lw if lw > 0 else math.nan


def nan_percentile(x: np.ndarray, q: float) -> float:
    """The ``q``-th percentile of ``x`` ignoring NaNs (NaN when nothing is left)."""
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q)) if x.size else math.nan


class RequestTimes:
    """Per-request latencies of a result with ``arrival_s``, ``first_token_s``, ``finish_s``,
    ``output_tokens`` and ``config`` (one replica, :class:`ServingResult`, or a cluster,
    :class:`hikv.sim.cluster.engine.ClusterResult`)."""

    @property
    def ttft_s(self) -> np.ndarray:
        return self.first_token_s - self.arrival_s  # type: ignore[attr-defined]

    @property
    def e2e_s(self) -> np.ndarray:
        return self.finish_s - self.arrival_s  # type: ignore[attr-defined]

    @property
    def tpot_s(self) -> np.ndarray:
        """Mean time per output token after the first (NaN for one-token outputs); in a P/D
        cluster it includes the KV transfer and the wait for a decode slot."""
        out = self.output_tokens  # type: ignore[attr-defined]
        with np.errstate(invalid="ignore", divide="ignore"):
            t = (self.finish_s - self.first_token_s) / (out - 1)  # type: ignore[attr-defined]
        return np.where(out > 1, t, np.nan)

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max() - self.arrival_s.min())  # type: ignore[attr-defined]

    def slo_met(self) -> np.ndarray:
        """Requests meeting both the TTFT and the TPOT SLO (one-token outputs: TTFT only)."""
        s = self.config.serving  # type: ignore[attr-defined]
        tpot = self.tpot_s
        return (self.ttft_s <= s.ttft_slo_s) & (np.isnan(tpot) | (tpot <= s.tpot_slo_s))


@dataclass(frozen=True)
class ServingResult(RequestTimes):
    """One simulated run. Per-request arrays are indexed by request (workload order);
    times are seconds from the first arrival."""

    config: Config
    method: str
    spec: MethodSpec
    policy: str
    cost_model: str
    workload: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    first_scheduled_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    recomputed_tokens: np.ndarray
    generated_tokens: np.ndarray
    completions: np.ndarray          # times each request was recorded complete (must be 1)
    kv_time_s: np.ndarray            # event times
    kv_used_blocks: np.ndarray       # blocks held just after each event
    kv_capacity_blocks: int
    kv_block_seconds: float          # integral of blocks held over time
    iterations: int
    events: int
    prefill_tokens: int              # prompt tokens prefilled, recomputation included
    decode_tokens: int               # tokens produced by decode iterations
    prefill_completions: int         # tokens produced by last prefill chunks
    little: LittleCheck
    little_integral: float           # integral of |waiting| + |running| over the window
    wall_s: float
    admission: str = "chunk"         # the policy's admission rule (hikv.sim.serving.scheduler)

    @property
    def wait_s(self) -> np.ndarray:
        """Time from arrival to the first schedule."""
        return self.first_scheduled_s - self.arrival_s

    @property
    def kv_utilisation_mean(self) -> float:
        """Time-averaged fraction of KV blocks held over the makespan."""
        return self.kv_block_seconds / (self.kv_capacity_blocks * self.makespan_s)

    def summary(self) -> dict[str, Any]:
        """Headline metrics as a flat dict (units in the keys)."""
        n = len(self.arrival_s)
        span = self.makespan_s

        out: dict[str, Any] = {
            "method": self.method,
            "method_label": self.spec.label,
            "policy": self.policy,
            "admission": self.admission,
            "cost_model": self.cost_model,
            "workload": self.workload,
            "requests": n,
            "rate_per_s": float((n - 1) / (self.arrival_s[-1] - self.arrival_s[0]))
            if n > 1 and self.arrival_s[-1] > self.arrival_s[0] else math.nan,
            "makespan_s": span,
            "throughput_req_per_s": n / span,
            "throughput_tok_per_s": float(self.output_tokens.sum()) / span,
        }
        for name, x in (("ttft", self.ttft_s), ("tpot", self.tpot_s), ("e2e", self.e2e_s)):
            out[f"{name}_mean_s"] = float(np.nanmean(x)) if (~np.isnan(x)).any() else math.nan
            for q in (50, 90, 99):
                out[f"{name}_p{q}_s"] = nan_percentile(x, q)
        out.update({
            "slo_attainment": float(self.slo_met().mean()),
            "preemptions": int(self.preemptions.sum()),
            "recomputed_tokens": int(self.recomputed_tokens.sum()),
            "kv_capacity_blocks": self.kv_capacity_blocks,
            "kv_util_mean": self.kv_utilisation_mean,
            "kv_util_peak": float(self.kv_used_blocks.max() / self.kv_capacity_blocks),
            "iterations": self.iterations,
            "little_L": self.little.L,
            "little_lambda_w": self.little.lambda_w,
            "little_rel_error": self.little.rel_error,
            "little_window_requests": self.little.requests,
            "sim_wall_s": self.wall_s,
        })
        return out


def little_check(l_integral: float, start_s: float, end_s: float, arrival_s: np.ndarray,
                 finish_s: np.ndarray) -> LittleCheck:
    """Little's law over ``[start_s, end_s]``: ``l_integral`` is the integral of the number of
    requests in the system over the window (from the scheduler's queues); arrival rate and
    mean time in system come from the records of the requests arriving in the window."""
    in_win = (arrival_s >= start_s) & (arrival_s <= end_s)
    width = end_s - start_s
    n = int(in_win.sum())
    return LittleCheck(
        start_s=start_s, end_s=end_s, requests=n,
        L=l_integral / width if width > 0 else math.nan,
        arrival_rate_per_s=n / width if width > 0 else math.nan,
        mean_time_in_system_s=float((finish_s - arrival_s)[in_win].mean()) if n else math.nan)


def little_window(l_integral: float, start_s: float, end_s: float, arrival_s: np.ndarray,
                  finish_s: np.ndarray) -> LittleCheck:
    """Little's law on one window with every term over that same window, so it holds whether
    or not the queue is steady (overload, roles that move): ``L`` is ``l_integral`` (the
    integral of the number in the system, from the queues) over the window's width; the
    requests are those present in the window at some time (arrived before its end, finished
    after its start), ``lambda`` their number over the width and ``W`` their mean time in
    the system *within* the window (``min(finish, end) - max(arrival, start)``). Then
    ``lambda * W = L`` exactly when the queue integral and the per-request records agree (a
    request lost from the queues, counted twice or moved without its record breaks it);
    :func:`little_check` is the usual steady-state form (arrivals in the window, whole
    sojourns), off by the requests in flight at the window's edges."""
    width = end_s - start_s
    inside = np.clip(np.minimum(finish_s, end_s) - np.maximum(arrival_s, start_s), 0, None)
    present = (arrival_s <= end_s) & (finish_s >= start_s) & (inside > 0)
    n = int(present.sum())
    return LittleCheck(
        start_s=start_s, end_s=end_s, requests=n,
        L=l_integral / width if width > 0 else math.nan,
        arrival_rate_per_s=n / width if width > 0 else math.nan,
        mean_time_in_system_s=float(inside[present].mean()) if n else math.nan)
