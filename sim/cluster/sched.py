"""Output-length prediction and the EWSJF waiting order of a serving cluster.

* :class:`OutputPredictor`: the output length a request will generate, predicted from its
  prompt length alone (the only router-visible signal of a trace) as the median output of the
  training requests whose prompt falls in the same log2 bin (the global median for an empty
  bin). :func:`split_workload` trains it on the first part of a trace and returns the rest;
  :meth:`OutputPredictor.evaluate` says how good it is on that rest, beside the baseline that
  predicts the global median for every request.
* :class:`EwsjfPolicy`: effective-waiting-time shortest job first. A waiting request's key is
  ``size - a * waited`` (``size`` = prompt tokens plus predicted output tokens, ``a`` tokens per
  second of waiting); the smallest key goes first. Because ``size - a * (t - arrival)`` orders
  requests like ``size + a * arrival`` at every instant ``t``, the queue is a plain heap.
  Starvation protection: a request of size ``S`` arriving at ``t0`` can only be overtaken by
  requests arriving before ``t0 + S / a``, so its wait is bounded by the work that arrives in
  that window. Preempted sequences still go first (as in
  :class:`~hikv.sim.serving.scheduler.WaitQueue`).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hikv.params import ParamError
from hikv.sim.serving.scheduler import Policy
from hikv.sim.serving.workload import Workload

__all__ = ["OutputPredictor", "PredictorEval", "split_workload", "EwsjfQueue", "EwsjfPolicy"]


@dataclass(frozen=True)
class PredictorEval:
    """Errors of an output-length predictor on held-out requests (tokens)."""

    requests: int
    mae_tokens: float
    median_abs_rel_error: float
    within_2x: float                 # fraction with prediction in [output / 2, 2 * output]
    spearman: float                  # rank correlation of prediction and output
    baseline_mae_tokens: float       # predicting the training median for everyone

    def as_dict(self) -> dict[str, float]:
        return {f"predictor_{k}": v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class OutputPredictor:
    """Median output tokens per log2 bin of the prompt length (module docstring)."""

    bin_median: tuple[float, ...]
    global_median: float
    trained_on: int
    q: float = 0.9
    bin_high: tuple[float, ...] = ()   # the q-quantile per bin (QUARTZ's conservative cost)
    global_high: float = 1.0

    @classmethod
    def train(cls, prompt: np.ndarray, output: np.ndarray, *, q: float = 0.9,
              min_count: int = 8) -> OutputPredictor:
        """Fit on ``prompt``/``output`` token arrays (bins with fewer than ``min_count``
        requests fall back to the global median / ``q``-quantile)."""
        prompt = np.asarray(prompt, dtype=np.int64)
        output = np.asarray(output, dtype=np.float64)
        if prompt.size == 0:
            raise ParamError("output predictor: no training requests (train_fraction too "
                             "small for this workload)")
        glob, ghigh = float(np.median(output)), float(np.quantile(output, q))
        b = _bins(prompt)
        med, high = [], []
        for i in range(int(b.max()) + 1):
            sel = output[b == i]
            med.append(float(np.median(sel)) if sel.size >= min_count else glob)
            high.append(float(np.quantile(sel, q)) if sel.size >= min_count else ghigh)
        return cls(tuple(med), glob, int(prompt.size), float(q), tuple(high), ghigh)

    def predict_high(self, prompt: int) -> float:
        """The ``q``-quantile of the output tokens of prompts like ``prompt``."""
        b = int(prompt).bit_length() - 1
        return max(1.0, self.bin_high[b] if b < len(self.bin_high) else self.global_high)

    def predict(self, prompt: Any) -> np.ndarray:
        """Predicted output tokens (>= 1) for each prompt length."""
        b = _bins(np.asarray(prompt, dtype=np.int64))
        table = np.asarray(self.bin_median + (self.global_median,))
        return np.maximum(1.0, table[np.minimum(b, len(self.bin_median))])

    def predict_one(self, prompt: int) -> float:
        b = int(prompt).bit_length() - 1
        return max(1.0, self.bin_median[b] if b < len(self.bin_median) else self.global_median)

    def evaluate(self, prompt: np.ndarray, output: np.ndarray) -> PredictorEval:
        """Errors on held-out requests (see :class:`PredictorEval`)."""
        out = np.asarray(output, dtype=np.float64)
        pred = self.predict(prompt)
        if out.size == 0:
            raise ParamError("output predictor: no evaluation requests")
        ratio = pred / out
        rank = lambda x: np.argsort(np.argsort(x, kind="stable"), kind="stable")  # noqa: E731
        rp, ro = rank(pred).astype(float), rank(out).astype(float)
        sp = float(np.corrcoef(rp, ro)[0, 1]) if rp.std() > 0 and ro.std() > 0 else 0.0
        return PredictorEval(
            requests=int(out.size), mae_tokens=float(np.abs(pred - out).mean()),
            median_abs_rel_error=float(np.median(np.abs(pred - out) / out)),
            within_2x=float(((ratio >= 0.5) & (ratio <= 2.0)).mean()), spearman=sp,
            baseline_mae_tokens=float(np.abs(self.global_median - out).mean()))


def _bins(prompt: np.ndarray) -> np.ndarray:
    """log2 bin of each prompt length (prompt >= 1): floor(log2(p))."""
    return np.floor(np.log2(np.maximum(prompt, 1))).astype(np.int64)


def split_workload(wl: Workload, train_fraction: float, *, q: float = 0.9
                   ) -> tuple[OutputPredictor, Workload]:
    """Train the predictor on the first ``train_fraction`` of ``wl``'s requests and return it
    with the rest (arrival times shifted to start at 0). ``train_fraction = 0`` trains on the
    whole workload and serves all of it (the predictor then sees the future: say so)."""
    n = len(wl)
    k = int(round(train_fraction * n))
    if train_fraction > 0 and not 1 <= k <= n - 1:
        raise ParamError(f"train_fraction = {train_fraction} leaves no request to train on or "
                         f"to serve among {n}; allowed (0, 0.9] with enough requests, or 0")
    if k == 0:
        return OutputPredictor.train(wl.prompt_tokens, wl.output_tokens, q=q), wl
    pred = OutputPredictor.train(wl.prompt_tokens[:k], wl.output_tokens[:k], q=q)
    a = wl.arrival_s[k:] - wl.arrival_s[k]
    m = n - k
    rate = (m - 1) / float(a[-1]) if m > 1 and a[-1] > 0 else wl.rate_per_s
    return pred, Workload(a, wl.prompt_tokens[k:], wl.output_tokens[k:], float(rate),
                          f"{wl.source}[{k}:]")


class EwsjfQueue:
    """Waiting queue ordered by ``size + a * arrival`` (module docstring); preempted
    sequences first, most recent first."""

    def __init__(self, tokens_per_s: float, predictor: OutputPredictor) -> None:
        self.a = float(tokens_per_s)
        self.predictor = predictor
        self._front: deque = deque()
        self._heap: list = []
        self._tie = itertools.count()

    def __len__(self) -> int:
        return len(self._front) + len(self._heap)

    def key(self, seq: Any) -> float:
        size = seq.prompt + self.predictor.predict_one(seq.prompt)
        return size + self.a * seq.arrival

    def push(self, seq: Any) -> None:
        heapq.heappush(self._heap, (self.key(seq), next(self._tie), seq))

    def push_front(self, seq: Any) -> None:
        self._front.appendleft(seq)

    def peek(self) -> Any:
        return self._front[0] if self._front else self._heap[0][2]

    def pop(self) -> Any:
        return self._front.popleft() if self._front else heapq.heappop(self._heap)[2]


@dataclass(frozen=True)
class EwsjfPolicy(Policy):
    """``vllm-v1``'s mechanics with the EWSJF waiting order (module docstring)."""

    tokens_per_s: float = 4096.0
    predictor: OutputPredictor | None = field(default=None, compare=False)

    def new_queue(self) -> EwsjfQueue:  # type: ignore[override]
        if self.predictor is None:
            raise ParamError("EwsjfPolicy needs an output predictor")
        return EwsjfQueue(self.tokens_per_s, self.predictor)
