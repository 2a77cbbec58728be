"""Scheduling policies of the serving simulator, chosen by name from :data:`POLICIES`.

A policy fixes what the iteration-level engine (:mod:`hikv.sim.serving.engine`) may decide: the
order of the waiting queue, how many sequences may run at once, and whether prompts are
prefilled in chunks that share an iteration with decodes. The engine's mechanics are the same
for every policy: every iteration first gives each running decode one token, then continues
running prefills, then admits waiting requests, all within the batched-token limit; KV blocks are
allocated before an iteration, and when a block cannot be allocated the most recently admitted
running sequence is preempted (recompute: its KV is freed and it is re-queued at the front,
to prefill its prompt and the tokens generated so far again).

Policies:

* ``vllm-v1`` (default): FCFS, chunked prefill within ``ServingParams.max_batched_tokens``, at most
  ``ServingParams.max_running`` sequences (vLLM V1's scheduler with decodes first);
* ``sjf``: as ``vllm-v1`` but the waiting queue is ordered by shortest prompt first
  (preempted sequences still go first);
* ``serial``: batching disabled: one sequence at a time, FCFS, prefill then decode to the end
  (a single-server queue; tests compare it with the Pollaczek-Khinchine formula);
* ``sarathi``: as ``vllm-v1`` but with whole-prompt admission (below) and a watermark of 1%
  of the KV blocks (vLLM V0's block manager and Sarathi-Serve, as Vidur simulates them).

Admission (``Policy.admission``): ``"chunk"`` (vLLM V1) admits a waiting request when the
blocks of its first chunk are free and allocates the rest chunk by chunk; ``"prompt"`` (vLLM
V0, Sarathi-Serve) admits it only when the blocks of its whole remaining prompt (its peak if
prefilled in one chunk) plus ``watermark_fraction`` of the capacity are free, and reserves
them until its last chunk is prefilled. Decode growth and preemption are the same for both.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from hikv.params import ParamError, ServingParams

__all__ = ["Policy", "POLICIES", "ADMISSIONS", "get_policy", "WaitQueue"]


class _HasOrder(Protocol):
    rid: int
    prompt: int


class WaitQueue:
    """Waiting requests: FCFS (arrival order) or shortest prompt first; ``push_front`` puts a
    preempted sequence ahead of every request that was never admitted."""

    def __init__(self, order: str) -> None:
        if order not in ("fcfs", "shortest-prompt"):
            raise ParamError(f"waiting order = {order!r} is not one of: fcfs, shortest-prompt")
        self.order = order
        self._front: deque = deque()          # preempted, most recent first
        self._fifo: deque = deque()
        self._heap: list = []
        self._tie = itertools.count()

    def __len__(self) -> int:
        return len(self._front) + len(self._fifo) + len(self._heap)

    def push(self, seq: _HasOrder) -> None:
        if self.order == "fcfs":
            self._fifo.append(seq)
        else:
            heapq.heappush(self._heap, (seq.prompt, seq.rid, next(self._tie), seq))

    def push_front(self, seq: _HasOrder) -> None:
        self._front.appendleft(seq)

    def peek(self) -> _HasOrder:
        if self._front:
            return self._front[0]
        if self.order == "fcfs":
            return self._fifo[0]
        return self._heap[0][3]

    def pop(self) -> _HasOrder:
        if self._front:
            return self._front.popleft()
        if self.order == "fcfs":
            return self._fifo.popleft()
        return heapq.heappop(self._heap)[3]


#: Admission rules (module docstring).
ADMISSIONS = ("chunk", "prompt")


@dataclass(frozen=True)
class Policy:
    """A scheduling policy: waiting order, running cap, admission (see module docstring)."""

    name: str
    description: str
    waiting_order: str = "fcfs"
    serial: bool = False          # one sequence at a time
    admission: str = "chunk"      # one of ADMISSIONS
    watermark_fraction: float = 0.0   # of the KV blocks kept free at admission

    def __post_init__(self) -> None:
        if self.admission not in ADMISSIONS:
            raise ParamError(f"admission = {self.admission!r} is not one of: "
                             f"{', '.join(ADMISSIONS)}")
        if not 0.0 <= self.watermark_fraction < 1.0:
            raise ParamError(f"watermark_fraction = {self.watermark_fraction!r} is out of "
                             "range: allowed [0, 1)")

    def max_running(self, serving: ServingParams) -> int:
        return 1 if self.serial else serving.max_running

    def new_queue(self) -> WaitQueue:
        return WaitQueue(self.waiting_order)


#: Scheduling policies by name.
POLICIES: dict[str, Policy] = {
    p.name: p for p in (
        Policy("vllm-v1", "FCFS, decodes first, chunked prefill within max_batched_tokens"),
        Policy("sjf", "shortest prompt first, decodes first, chunked prefill",
               waiting_order="shortest-prompt"),
        Policy("serial", "no batching: one request at a time, FCFS", serial=True),
        Policy("sarathi", "FCFS, decodes first, chunked prefill, whole prompt reserved at "
                          "admission with a 1% watermark (vLLM V0 / Sarathi-Serve)",
               admission="prompt", watermark_fraction=0.01),
    )
}


def get_policy(name: str) -> Policy:
    """The policy called ``name``; an unknown name lists the known ones. ``NAME:ADMISSION``
    (e.g. ``vllm-v1:prompt``) is policy ``NAME`` with its admission rule replaced."""
    import dataclasses

    base, _, admission = name.partition(":")
    try:
        pol = POLICIES[base]
    except KeyError:
        raise ParamError(f"policy = {name!r} is not one of: {', '.join(POLICIES)} "
                         f"(optionally :{'/:'.join(ADMISSIONS)})") from None
    if admission and admission != pol.admission:
        pol = dataclasses.replace(pol, name=name, admission=admission)
    return pol
