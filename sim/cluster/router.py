"""Routers of a serving cluster (:mod:`hikv.sim.cluster.engine`), chosen by name.

A router sees only what a real front end sees: the request's prompt length, the output-length
predictor (:class:`~hikv.sim.cluster.sched.OutputPredictor`), and per instance the requests it
was sent and has not finished, and recent completions. Never the true output length.

Request routers (aggregated pool, or a P/D cluster's prefill pool), :data:`make_router`:

* ``round-robin``: instances in turn;
* ``least-tokens``: fewest outstanding tokens (prompt plus predicted output of every request
  sent and not finished);
* ``p2c``: power of two choices: two distinct instances drawn by a seeded local RNG, the one
  with fewer outstanding tokens (Mitzenmacher);
* ``quartz``: QUARTZ-like: the predicted cost of the request on instance ``r`` is
  ``s_r * (backlog_r + prompt + O_q)``, where ``O_q`` is the ``q``-quantile of the output length
  of prompts like this one, ``backlog_r`` the same conservative token count summed over the
  outstanding requests of ``r``, and ``s_r`` the ``q``-quantile of the per-token service times
  (time in the instance / (prompt + output)) of its last ``window`` completions (the pool's
  median before any completion); the least predicted cost wins;
* ``quartz-mean``: the point-estimate counterpart: median output, mean service time.

Decode routers (P/D), :data:`make_decode_router`: ``round-robin``; ``least-kv`` (fewest KV
blocks held now plus in flight to it); ``maps`` (MAPS-style memory-aware admission: fewest
*predicted* blocks, each decode request counted at its predicted final length; a request that
fits no decode instance's predicted room waits at the cluster until one does).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from hikv.params import ParamError
from hikv.sim.cluster.params import DECODE_ROUTERS, ROUTERS
from hikv.sim.cluster.sched import OutputPredictor

__all__ = ["InstanceView", "make_router", "make_decode_router", "jain_index"]


class InstanceView:
    """What routers know of one instance (kept by the cluster)."""

    __slots__ = ("idx", "engine", "out_requests", "out_tokens", "out_tokens_high",
                 "service", "inflight_blocks", "predicted_blocks")

    def __init__(self, idx: int, engine: Any, window: int) -> None:
        self.idx = idx
        self.engine = engine
        self.out_requests = 0
        self.out_tokens = 0.0          # prompt + median predicted output, outstanding
        self.out_tokens_high = 0.0     # prompt + q-quantile predicted output, outstanding
        self.service: deque[float] = deque(maxlen=window)   # s per token, recent completions
        self.inflight_blocks = 0       # decode side: blocks of KV on the way to it
        self.predicted_blocks = 0      # decode side: predicted final blocks of its requests


def jain_index(x: Any) -> float:
    """Jain's fairness index ``(sum x)^2 / (n sum x^2)`` (1 = equal shares, 1/n = one takes
    all); 1 for all zeros."""
    x = np.asarray(x, dtype=np.float64)
    s2 = float((x * x).sum())
    return float(x.sum() ** 2 / (x.size * s2)) if s2 > 0 else 1.0


class _RoundRobin:
    def __init__(self) -> None:
        self.n = 0

    def choose(self, prompt: int, cands: list[InstanceView]) -> tuple[int, float]:
        i = self.n % len(cands)
        self.n += 1
        return i, float(cands[i].out_requests)


class _LeastTokens:
    def choose(self, prompt: int, cands: list[InstanceView]) -> tuple[int, float]:
        i = min(range(len(cands)), key=lambda j: (cands[j].out_tokens, j))
        return i, cands[i].out_tokens


class _PowerOfTwo:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def choose(self, prompt: int, cands: list[InstanceView]) -> tuple[int, float]:
        if len(cands) == 1:
            return 0, cands[0].out_tokens
        a, b = (int(x) for x in self.rng.choice(len(cands), 2, replace=False))
        i = a if (cands[a].out_tokens, a) <= (cands[b].out_tokens, b) else b
        return i, cands[i].out_tokens


class _Quartz:
    def __init__(self, predictor: OutputPredictor, q: float | None) -> None:
        self.pred = predictor
        self.q = q                      # None: point estimate (mean service, median output)

    def _per_token_s(self, v: InstanceView) -> float:
        x = np.fromiter(v.service, np.float64, len(v.service))
        return float(np.quantile(x, self.q)) if self.q is not None else float(x.mean())

    def choose(self, prompt: int, cands: list[InstanceView]) -> tuple[int, float]:
        est = [self._per_token_s(v) if v.service else None for v in cands]
        known = [e for e in est if e is not None]
        prior = float(np.median(known)) if known else 1.0
        if self.q is not None:
            size = prompt + self.pred.predict_high(prompt)
            cost = [(e if e is not None else prior) * (v.out_tokens_high + size)
                    for e, v in zip(est, cands, strict=True)]
        else:
            size = prompt + self.pred.predict_one(prompt)
            cost = [(e if e is not None else prior) * (v.out_tokens + size)
                    for e, v in zip(est, cands, strict=True)]
        i = min(range(len(cands)), key=lambda j: (cost[j], j))
        return i, cost[i]


def make_router(name: str, *, predictor: OutputPredictor, quantile: float, seed: int) -> Any:
    """A request router by name (module docstring)."""
    if name == "round-robin":
        return _RoundRobin()
    if name == "least-tokens":
        return _LeastTokens()
    if name == "p2c":
        return _PowerOfTwo(seed)
    if name == "quartz":
        return _Quartz(predictor, quantile)
    if name == "quartz-mean":
        return _Quartz(predictor, None)
    raise ParamError(f"router = {name!r} is not one of: {', '.join(ROUTERS)}")


class _DecodeRoundRobin:
    def __init__(self) -> None:
        self.n = 0

    def choose(self, need_blocks: int, cands: list[InstanceView]) -> int | None:
        i = self.n % len(cands)
        self.n += 1
        return i


class _LeastKV:
    def choose(self, need_blocks: int, cands: list[InstanceView]) -> int | None:
        return min(range(len(cands)), key=lambda j: (
            (cands[j].engine.used + cands[j].inflight_blocks) / cands[j].engine.capacity, j))


class _Maps:
    def choose(self, need_blocks: int, cands: list[InstanceView]) -> int | None:
        room = [v.engine.capacity - v.predicted_blocks for v in cands]
        i = max(range(len(cands)), key=lambda j: (room[j], -j))
        # an instance with nothing predicted takes any request (else a request larger than
        # every predicted room would wait for ever)
        return i if room[i] >= need_blocks or cands[i].predicted_blocks == 0 else None


def make_decode_router(name: str) -> Any:
    """A decode-instance router by name (module docstring)."""
    if name == "round-robin":
        return _DecodeRoundRobin()
    if name == "least-kv":
        return _LeastKV()
    if name == "maps":
        return _Maps()
    raise ParamError(f"decode router = {name!r} is not one of: {', '.join(DECODE_ROUTERS)}")
