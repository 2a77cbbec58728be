"""Iteration-level serving simulator of one replica (docs/serving.md).

:func:`simulate` replays a :class:`~hikv.sim.serving.workload.Workload` through a scheduler policy
(:mod:`hikv.sim.serving.scheduler`) on one accelerator serving one model with one KV method, and
returns a :class:`ServingResult` (per-request records, KV use over time, counters and the
Little's-law check). Iteration latency comes from a step-cost model
(:mod:`hikv.sim.serving.step_cost`); KV capacity and per-sequence residency from the method's byte
model (:mod:`hikv.sim.cost.closed_form`).

Mechanics. An event heap keyed ``(time, sequence number)`` holds request arrivals and the end
of the running iteration (ties: the event created first wins, so an arrival at the very end of
an iteration is seen by the next schedule). Whenever the engine is idle and there is work, it
schedules one iteration (see :mod:`hikv.sim.serving.scheduler`): running decodes first (one token
each), then running prefills, then waiting requests, within ``max_batched_tokens`` and the running
cap. KV is paged: a block is ``block_tokens`` tokens of full KV (all layers and KV heads at the
layout's row stride); a sequence under method ``m`` holds ``ceil(resident bytes / block
bytes)`` blocks, where the resident bytes (data, metadata, Stage II records) follow the
golden model; capacity is ``(device memory - weights - workspace) // block bytes``. Blocks are
allocated for an iteration's peak (after appending the iteration's tokens, before any
eviction) and released to the post-iteration residency afterwards (capacity methods free
blocks here). When a block cannot be allocated, the most recently admitted running sequence
is preempted (recompute). Admission follows the policy (:mod:`hikv.sim.serving.scheduler`): the
first chunk's blocks (``"chunk"``, vLLM V1) or the whole remaining prompt's blocks reserved
until its last chunk, plus a watermark (``"prompt"``, vLLM V0 / Sarathi-Serve).

Batched decode runs. When an iteration is pure decode of every running sequence and nothing
could change the next schedules (no completion, no allocation failure, no admissible waiting
request, no admissible arrival), the engine runs those iterations as one event, with their
latencies from :meth:`StepCostModel.decode_run_times_s`; this is exact (the test suite checks
it against the iteration-by-iteration engine) and is what makes a 19k-request trace take
seconds.

Cluster hooks. :mod:`hikv.sim.cluster.engine` drives several engines one event at a time
(:meth:`Engine.step`), injects routed requests (:meth:`Engine.inject`), bounds batched decode
runs by the earliest possible injection (``next_external``), hears completions
(``on_finish``) and hands a decode instance sequences that arrive with their KV (``done ==
kv_prompt``: admitted on their next decode step's blocks, decoded at once). A lone engine
leaves these unused.

Little's law. At every event the engine integrates ``L(t) = |waiting| + |running|`` of its
own queues over a steady-state window (the arrival span without ``steady_trim`` of it at each
end); independently, the per-request records give the arrival rate ``lambda`` and the mean
time in system ``W`` of the requests arriving in the window. :class:`LittleCheck` reports
``L`` against ``lambda * W``.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hikv.params import Config, MethodSpec, ParamError
from hikv.sim.cost.closed_form import closed_form
from hikv.sim.cost.closed_form_base import ClosedForm
from hikv.sim.serving.result import (
    LittleCheck,
    RequestTimes,
    ServingResult,
    little_check,
    nan_percentile,
)
from hikv.sim.serving.scheduler import Policy, get_policy
from hikv.sim.serving.step_cost import (
    DEFAULT_STEP_COST,
    IterationBatch,
    StepCostModel,
    resolve_step_cost,
)
from hikv.sim.serving.workload import Workload

__all__ = ["LittleCheck", "RequestTimes", "ServingResult", "nan_percentile", "simulate",
           "little_check", "kv_capacity_blocks", "block_bytes", "Engine", "SeqState",
           "engine_result"]

_ARRIVAL, _ITERATION = 0, 1


def block_bytes(cfg: Config) -> int:
    """Bytes of one KV block: ``block_tokens`` tokens of full KV, all layers and KV heads."""
    m = cfg.model
    return (cfg.serving.block_tokens * m.layers * m.kv_heads * 2
            * cfg.layout.stride(cfg.layout.row_bytes))


def kv_capacity_blocks(cfg: Config) -> int:
    """KV blocks that fit in device memory minus weights minus workspace."""
    room = cfg.accel.device_memory_bytes - cfg.model.weight_bytes - cfg.serving.workspace_bytes
    return int(room // block_bytes(cfg))


# =========================================================================== engine
class SeqState:
    """One request's state in an :class:`Engine`: its sizes (tokens), progress and times (s)."""

    __slots__ = ("rid", "arrival", "prompt", "output", "generated", "kv_prompt", "base", "done",
                 "step", "blocks", "first_sched", "first_token", "finish", "preemptions",
                 "prefilled", "completions", "reserve")

    def __init__(self, rid: int, arrival: float, prompt: int, output: int) -> None:
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.generated = 0
        self.kv_prompt = prompt      # P: tokens to prefill at the last (re)admission
        self.base = 0                # decode key of step j is base + j (ClosedForm.decode_key)
        self.done = 0                # tokens of P prefilled
        self.step = 0                # decode steps since the last (re)admission
        self.blocks = 0
        self.first_sched = math.nan
        self.first_token = math.nan
        self.finish = math.nan
        self.preemptions = 0
        self.prefilled = 0           # tokens prefilled in all, recomputation included
        self.completions = 0
        self.reserve = 0             # blocks reserved for the whole prompt ("prompt" admission)


class Engine:
    """The iteration-level engine of one replica: its event heap, queues and KV blocks (no
    global state). :func:`simulate` runs one alone; :mod:`hikv.sim.cluster.engine` drives
    several through the cluster hooks (module docstring)."""

    def __init__(self, cfg: Config, spec: MethodSpec, workload: Workload, cost: StepCostModel,
                 policy: Policy, fast_forward: bool, preload: bool = True) -> None:
        self.cfg = cfg
        self.sp = cfg.serving
        self.kv: ClosedForm = closed_form(spec, cfg.layout)
        self.cost = cost
        self.policy = policy
        self.fast = fast_forward
        self.max_running = policy.max_running(self.sp)
        self.max_batched = self.sp.max_batched_tokens
        self.capacity = kv_capacity_blocks(cfg)
        self.reserve_prompt = policy.admission == "prompt"
        self.watermark = int(policy.watermark_fraction * self.capacity)
        # blocks held for r resident tokens, r = 0 .. longest sequence
        longest = int((workload.prompt_tokens + workload.output_tokens).max()) + 2
        heads = cfg.model.layers * cfg.model.kv_heads
        r = np.arange(longest + 1, dtype=np.int64)
        self.blk = -(-(heads * self.kv.storage_bytes(r)) // block_bytes(cfg))
        self.blk[0] = 0
        # per decode key x: blocks during the step (peak) and after it
        x = np.maximum(r, 1)
        kp, ks = self.kv.by_key(x)
        self.peak_blk = self.blk[self.kv.step_peak(kp, ks)]
        self.after_blk = self.blk[self.kv.resident_after_step(kp, ks)]
        self.canonical = self.kv.canonical_prompt
        self.seqs = [SeqState(i, float(a), int(p), int(o)) for i, (a, p, o) in enumerate(
            zip(workload.arrival_s, workload.prompt_tokens, workload.output_tokens,
                strict=True))] if preload else []
        if int(self.blk[1]) > self.capacity:
            raise ParamError(f"KV capacity of {self.capacity} blocks cannot hold one token")
        self.waiting = policy.new_queue()
        self.running: list[SeqState] = []
        self.used = 0
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq_no = 0
        for s in self.seqs:
            self._push(s.arrival, _ARRIVAL, s)
        # Little window
        a = workload.arrival_s
        trim = self.sp.steady_trim * float(a[-1] - a[0])
        self.w0, self.w1 = float(a[0]) + trim, float(a[-1]) - trim
        self.l_integral = 0.0
        self.kv_block_seconds = 0.0
        self.kv_t: list[float] = []
        self.kv_u: list[int] = []
        self.iterations = 0
        self.events = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.prefill_completions = 0
        self.busy_s = 0.0                 # seconds of iterations applied
        # hooks of a cluster (hikv.sim.cluster.engine); a lone engine leaves them unset
        self.busy = False
        self.t_last = float(a[0])
        self.next_external: Callable[[], float] | None = None   # earliest possible inject()
        self.on_finish: Callable[[SeqState, float], None] | None = None

    # ----------------------------------------------------------------- events
    def _push(self, t: float, kind: int, payload: Any) -> None:
        heapq.heappush(self.heap, (t, self.seq_no, kind, payload))
        self.seq_no += 1

    def inject(self, s: SeqState, order: int) -> None:
        """Queue the arrival of ``s`` at ``s.arrival`` (a cluster routes requests one by one;
        ``order`` < 0 ranks it before every iteration event of the same time, as preloaded
        arrivals are)."""
        self.seqs.append(s)
        heapq.heappush(self.heap, (s.arrival, order, _ARRIVAL, s))

    def next_time(self) -> float:
        """Time of the next event (inf when there is none)."""
        return self.heap[0][0] if self.heap else math.inf

    def run(self) -> None:
        while self.heap:
            self.step()

    def step(self) -> None:
        """Process the next event."""
        t, _, kind, payload = heapq.heappop(self.heap)
        self.events += 1
        # integrate L = |waiting| + |running| over [t_last, t] within the window
        lo, hi = max(self.t_last, self.w0), min(t, self.w1)
        if hi > lo:
            self.l_integral += (len(self.waiting) + len(self.running)) * (hi - lo)
        self.t_last = t
        if kind == _ARRIVAL:
            self.waiting.push(payload)
        else:
            self._apply(payload, t)
            self.busy = False
        if not self.busy and (self.running or len(self.waiting)):
            plan = self._schedule(t)
            self._push(t + plan[0], _ITERATION, plan)
            self.busy = True
        self.kv_t.append(t)
        self.kv_u.append(self.used)

    # ----------------------------------------------------------------- scheduling
    def _preempt(self, victim: SeqState, dec: list[SeqState],
                 pre: list[tuple[SeqState, int]]) -> int:
        """Preempt ``victim`` (recompute); returns the batched tokens it gave back."""
        self.running.remove(victim)
        self.used -= victim.blocks
        victim.blocks = 0
        victim.reserve = 0
        victim.preemptions += 1
        victim.kv_prompt = victim.prompt + victim.generated
        victim.done = 0
        victim.step = 0
        self.waiting.push_front(victim)
        back = 0
        if victim in dec:
            dec.remove(victim)
            back = 1
        for i, (s, c) in enumerate(pre):
            if s is victim:
                del pre[i]
                back = c
                break
        return back

    def _allocate(self, s: SeqState, peak: int, dec: list[SeqState], pre: list[tuple[SeqState, int]]
                  ) -> tuple[bool, int, bool]:
        """Grow ``s`` to ``peak`` blocks, preempting from the tail of ``running`` as needed.
        Returns (allocated, batched tokens given back by victims, anything preempted)."""
        if peak > self.capacity:
            raise ParamError(
                f"serving cannot make progress: request {s.rid} alone needs {peak} KV blocks "
                f"(prompt {s.prompt} tokens, {s.generated} generated) but the capacity is "
                f"{self.capacity}; raise device memory or lower workspace_bytes")
        back = 0
        preempted = False
        while peak - s.blocks > self.capacity - self.used:
            victim = self.running[-1]
            back += self._preempt(victim, dec, pre)
            preempted = True
            if victim is s:
                return False, back, True
        self.used += peak - s.blocks
        s.blocks = peak
        return True, back, preempted

    def _admit_blocks(self, s: SeqState, chunk: int) -> int:
        """Free blocks the admission of waiting ``s`` with a first chunk of ``chunk`` tokens
        needs: that chunk's peak, or the whole remaining prompt's peak plus the watermark.
        A sequence that arrives with its KV (``done == kv_prompt``: the decode side of a P/D
        cluster) needs its next decode step's peak."""
        if s.done == s.kv_prompt:
            return (int(self.peak_blk[s.base + s.step + 1])
                    + (self.watermark if self.reserve_prompt else 0))
        if self.reserve_prompt:
            return (int(self.blk[self.kv.prefill_peak(s.done, s.kv_prompt - s.done)])
                    + self.watermark)
        return int(self.blk[self.kv.prefill_peak(s.done, chunk)])

    def _schedule(self, t: float) -> tuple:
        for _attempt in range(2):
            plan = self._schedule_once(t)
            if plan is not None:
                return plan
        head = self.waiting.peek() if len(self.waiting) else None
        raise ParamError(
            f"serving cannot make progress: request {getattr(head, 'rid', '?')} needs more KV "
            f"blocks than the capacity of {self.capacity} "
            f"(prompt {getattr(head, 'kv_prompt', '?')} tokens); raise device memory or lower "
            "workspace_bytes")

    def _schedule_once(self, t: float) -> tuple | None:
        kv, blk = self.kv, self.blk
        tokens_left = self.max_batched
        dec: list[SeqState] = []
        pre: list[tuple[SeqState, int]] = []
        preempted = False
        # 1. running decodes, in admission order
        decoding = [s for s in self.running if s.done == s.kv_prompt]
        if decoding:
            pk = self.peak_blk[np.fromiter((s.base + s.step + 1 for s in decoding), np.int64,
                                           len(decoding))]
            grow = int(pk.sum()) - sum(s.blocks for s in decoding)
            if grow <= self.capacity - self.used and len(decoding) <= tokens_left:
                for s, p in zip(decoding, pk.tolist(), strict=True):
                    s.blocks = p
                self.used += grow
                dec = decoding
                tokens_left -= len(decoding)
            else:
                for s, p in zip(decoding, pk.tolist(), strict=True):
                    if tokens_left == 0:
                        break
                    if s not in self.running:
                        continue            # preempted as a victim earlier in this loop
                    ok, back, pe = self._allocate(s, p, dec, pre)
                    preempted |= pe
                    tokens_left += back
                    if not ok:
                        break
                    dec.append(s)
                    tokens_left -= 1
        # 2. running prefills (chunked), in admission order
        for s in [s for s in self.running if s.done < s.kv_prompt]:
            if tokens_left == 0:
                break
            if s not in self.running:
                continue
            chunk = min(s.kv_prompt - s.done, tokens_left)
            peak = max(int(blk[kv.prefill_peak(s.done, chunk)]), s.reserve)
            ok, back, pe = self._allocate(s, peak, dec, pre)
            preempted |= pe
            tokens_left += back
            if not ok:
                break
            pre.append((s, chunk))
            tokens_left -= chunk
        # 3. waiting requests, unless this iteration preempted
        if not preempted:
            while len(self.waiting) and tokens_left > 0 and len(self.running) < self.max_running:
                s = self.waiting.peek()
                chunk = min(s.kv_prompt - s.done, tokens_left)
                need = self._admit_blocks(s, chunk)
                if need > self.capacity - self.used:
                    break
                peak = need - self.watermark if self.reserve_prompt else need
                self.waiting.pop()
                self.running.append(s)
                self.used += peak
                s.blocks = peak
                if self.reserve_prompt:
                    s.reserve = peak
                if math.isnan(s.first_sched):
                    s.first_sched = t
                if s.done == s.kv_prompt:      # arrived with its KV: decodes at once
                    s.reserve = 0
                    dec.append(s)
                    tokens_left -= 1
                    continue
                pre.append((s, chunk))
                tokens_left -= chunk
        if not dec and not pre:
            return None
        # batched decode run?
        if self.fast and not pre and not preempted and len(dec) == len(self.running):
            run = self._decode_run(t, dec)
            if run is not None:
                return run
        batch = IterationBatch(
            prefill_done=np.fromiter((s.done for s, _ in pre), np.int64, len(pre)),
            prefill_chunk=np.fromiter((c for _, c in pre), np.int64, len(pre)),
            prefill_total=np.fromiter((s.kv_prompt for s, _ in pre), np.int64, len(pre)),
            decode_prompt=np.fromiter((s.kv_prompt for s in dec), np.int64, len(dec)),
            decode_step=np.fromiter((s.step + 1 for s in dec), np.int64, len(dec)))
        dt = float(self.cost.iteration_time_s(batch))
        if not dt > 0:
            raise ParamError(f"step-cost model returned {dt} s for a non-empty iteration")
        self.kv_block_seconds += self.used * dt
        return (dt, 1, dec, pre)

    def _decode_run(self, t: float, dec: list[SeqState]) -> tuple | None:
        """Several pure-decode iterations as one event, or None if only one is certain."""
        k = min(s.output - s.generated for s in dec)   # the last one completes a sequence
        if k < 2:
            return None
        d = len(dec)
        can_admit = len(self.running) < self.max_running and self.max_batched - d > 0
        next_arrival = self.heap[0][0] if self.heap else math.inf
        if self.next_external is not None:
            next_arrival = min(next_arrival, self.next_external())
        # an arrival matters if it could be admitted: the queue is empty, or it may overtake
        # a blocked head (any order but FCFS)
        arrival_matters = can_admit and math.isfinite(next_arrival) and (
            not len(self.waiting) or self.policy.waiting_order != "fcfs")
        # a cap on how far to look ahead: a little past the next arrival when it matters
        if arrival_matters:
            prompt = np.fromiter((s.kv_prompt for s in dec), np.int64, d)
            step0 = np.fromiter((s.step + 1 for s in dec), np.int64, d)
            dt0 = float(self.cost.decode_run_times_s(prompt, step0, 1)[0])
            k = min(k, max(2, int(1.25 * (next_arrival - t) / dt0) + 2))
        k = min(k, 4096)
        prompt = np.fromiter((s.kv_prompt for s in dec), np.int64, d)
        step0 = np.fromiter((s.step + 1 for s in dec), np.int64, d)
        x0 = np.fromiter((s.base + s.step + 1 for s in dec), np.int64, d)
        peaks = self.peak_blk[x0[:, None] + np.arange(k, dtype=np.int64)[None, :]].sum(0)
        # allocation must succeed in every iteration of the run
        over = np.nonzero(peaks > self.capacity)[0]
        if over.size:
            k = int(over[0])
        # a waiting request that becomes admissible ends the run before that iteration
        if can_admit and len(self.waiting):
            head = self.waiting.peek()
            chunk = min(head.kv_prompt - head.done, self.max_batched - d)
            need = self._admit_blocks(head, chunk) - head.blocks
            ok = np.nonzero(self.capacity - peaks[1:k] >= need)[0]
            if ok.size:
                k = int(ok[0]) + 1
        if k < 2:
            return None
        times = np.asarray(self.cost.decode_run_times_s(prompt, step0, k), dtype=np.float64)
        ends = np.cumsum(times)
        # an arrival that could be admitted ends the run with the iteration it falls in
        if arrival_matters:
            m = int(np.searchsorted(t + ends, next_arrival, side="left"))
            if m < k:
                k = m + 1
                if k < 2:
                    return None
                ends = ends[:k]
        self.kv_block_seconds += float((peaks[:k] * times[:k]).sum())
        # hold the last iteration's peak while the run is in flight
        for s, p in zip(dec, self.peak_blk[x0 + (k - 1)].tolist(), strict=True):
            self.used += p - s.blocks
            s.blocks = p
        return (float(ends[k - 1]), k, dec, [])

    # ----------------------------------------------------------------- completion
    def _apply(self, plan: tuple, t: float) -> None:
        _, k, dec, pre = plan
        kv, blk = self.kv, self.blk
        self.iterations += k
        self.busy_s += plan[0]
        finished: list[SeqState] = []
        for s, chunk in pre:
            s.done += chunk
            self.prefill_tokens += chunk
            s.prefilled += chunk
            after = int(blk[kv.resident_after_prefill(s.done, s.kv_prompt)])
            if s.done < s.kv_prompt:
                after = max(after, s.reserve)
            else:
                s.reserve = 0
            self.used += after - s.blocks
            s.blocks = after
            if s.done == s.kv_prompt:
                s.base = min(s.kv_prompt, self.kv.spec.budget) if self.canonical else s.kv_prompt
                s.generated += 1
                self.prefill_completions += 1
                if math.isnan(s.first_token):
                    s.first_token = t
                if s.generated == s.output:
                    finished.append(s)
        if dec:
            for s in dec:
                s.step += k
                s.generated += k
            self.decode_tokens += k * len(dec)
            after = self.after_blk[np.fromiter((s.base + s.step for s in dec), np.int64,
                                               len(dec))].tolist()
            for s, a in zip(dec, after, strict=True):
                self.used += a - s.blocks
                s.blocks = a
                if s.generated == s.output:
                    finished.append(s)
        for s in finished:
            self.running.remove(s)
            self.used -= s.blocks
            s.blocks = 0
            s.finish = t
            s.completions += 1
            if self.on_finish is not None:
                self.on_finish(s, t)


def simulate(cfg: Config, spec: MethodSpec, workload: Workload, *, method: str | None = None,
             cost_model: str | Callable[[Config, MethodSpec], StepCostModel] = DEFAULT_STEP_COST,
             policy: str | Policy | None = None, admission: str | None = None,
             fast_forward: bool = True) -> ServingResult:
    """Serve ``workload`` with KV method ``spec`` on ``cfg``'s accelerator and model.

    ``policy`` (a name of :data:`hikv.sim.serving.scheduler.POLICIES`, or a
    :class:`~hikv.sim.serving.scheduler.Policy`) defaults to ``cfg.serving.policy``;
    ``admission`` (``"chunk"`` or ``"prompt"``, :mod:`hikv.sim.serving.scheduler`) overrides the
    policy's admission rule; ``cost_model`` names a step-cost model of
    :data:`hikv.sim.serving.step_cost.STEP_COST_MODELS`, or is a factory
    ``(cfg, spec) -> StepCostModel`` (its ``name`` attribute, if any, is recorded; e.g.
    :class:`hikv.sim.serving.device.DeviceCost`); ``method`` is the display name (default the
    spec's label). ``fast_forward=False`` simulates every iteration as its own event (slower,
    the same result). Pure: nothing is written, no global state is touched.
    """
    pol = policy if isinstance(policy, Policy) else get_policy(policy or cfg.serving.policy)
    if admission is not None and admission != pol.admission:
        pol = dataclasses.replace(pol, admission=admission)
    cost, cost_name = resolve_step_cost(cost_model, cfg, spec)
    t0 = time.perf_counter()
    eng = Engine(cfg, spec, workload, cost, pol, fast_forward)
    eng.run()
    wall = time.perf_counter() - t0
    return engine_result(eng, method=method or spec.label, cost_name=cost_name,
                         workload=workload.source, wall_s=wall)


def engine_result(eng: Engine, *, method: str, cost_name: str, workload: str, wall_s: float
                  ) -> ServingResult:
    """The :class:`ServingResult` of a finished engine (its sequences in ``eng.seqs`` order)."""
    seqs = eng.seqs
    cfg, spec, pol, wall = eng.cfg, eng.kv.spec, eng.policy, wall_s

    def col(name: str, dtype: type) -> np.ndarray:
        return np.fromiter((getattr(s, name) for s in seqs), dtype, len(seqs))

    arrival = col("arrival", np.float64)
    finish = col("finish", np.float64)
    little = little_check(eng.l_integral, eng.w0, eng.w1, arrival, finish)
    return ServingResult(
        config=cfg, method=method, spec=spec, policy=pol.name,
        cost_model=cost_name, workload=workload,
        arrival_s=arrival, prompt_tokens=col("prompt", np.int64),
        output_tokens=col("output", np.int64), first_scheduled_s=col("first_sched", np.float64),
        first_token_s=col("first_token", np.float64), finish_s=finish,
        preemptions=col("preemptions", np.int64),
        recomputed_tokens=col("prefilled", np.int64) - col("prompt", np.int64),
        generated_tokens=col("generated", np.int64), completions=col("completions", np.int64),
        kv_time_s=np.asarray(eng.kv_t), kv_used_blocks=np.asarray(eng.kv_u, dtype=np.int64),
        kv_capacity_blocks=eng.capacity, kv_block_seconds=eng.kv_block_seconds,
        iterations=eng.iterations, events=eng.events, prefill_tokens=eng.prefill_tokens,
        decode_tokens=eng.decode_tokens,
        prefill_completions=eng.prefill_completions, little=little,
        little_integral=eng.l_integral, wall_s=wall, admission=pol.admission)
