"""cocotb 2.x testbench of the Stage II selection block (run through
:mod:`hikv.rtl_tests.stage2_rtl`).

The block (:mod:`hikv.hw.stage2_select`, block ``stage2``) has no configuration stream: ``r`` is
a plain input sampled with each vector's first beat. This bench drives ``i`` from a source that
sets ``r`` with the first beat of every vector, takes ``o`` with a sink, both under seeded
valid/ready patterns (:mod:`hikv.rtl_tests.streams`), and compares every vector's output with
:func:`hikv.model.refs.sorter.stage2_topr` item for item; beats are packed and unpacked by the
sorter's :class:`~hikv.rtl_tests.sorter_jobs.BeatCodec` (the block's beats are the sorter's
``io_layout``). Every job run without backpressure must take exactly
:meth:`hikv.hw.stage2_timing.Stage2Timing.cycles` of its vector count.

The configuration arrives as JSON in ``HIKV_TB_CONFIG``::

    {"config": <hikv.params.config_to_json>, "seed": <int>, "jobs": <random jobs>,
     "result": <path of the JSON summary to write>}

``regression``: the refused inputs (``r = 0``, ``r > max_r`` where the port can carry it, a
beat whose ``valid`` or ``last`` disagrees: the sticky ``error``, one output vector still
leaving, cleared by a reset), the directed jobs, then ``jobs`` random jobs of 1 to 6 vectors
with valid/ready patterns (always, random, bursty) on both sides and resets in the middle of
jobs, each followed by the same job clean. The launcher's seed seeds one local
``random.Random``.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from hikv.hw.stage2_select import make_stage2
from hikv.params import config_from_json
from hikv.rtl_tests.sorter_jobs import BeatCodec
from hikv.rtl_tests.stage2_jobs import Stage2Job, directed_stage2_jobs, random_stage2_job
from hikv.rtl_tests.streams import PATTERNS, Pattern, StreamSink

ENV = "HIKV_TB_CONFIG"


def _load() -> dict[str, Any]:
    raw = os.environ.get(ENV)
    if not raw:
        raise RuntimeError(f"{ENV} is not set: run through hikv.rtl_tests.stage2_rtl")
    return json.loads(raw)


class VectorSource:
    """Drives ``i__valid/payload`` from a queue of (beat, ``r`` or None) and sets ``r`` while a
    vector's first beat is offered; an offered beat is held until taken."""

    def __init__(self, dut: Any) -> None:
        self.dut = dut
        self.queue: deque[tuple[int, int | None]] = deque()
        self.pattern: Pattern | None = None
        self.offering = False

    def clear(self) -> None:
        self.queue.clear()
        self.offering = False

    def drive(self) -> None:
        if not self.offering and self.queue and (self.pattern is None or self.pattern()):
            self.offering = True
            bits, r = self.queue[0]
            self.dut.i__payload.value = bits
            if r is not None:
                self.dut.r.value = r
        self.dut.i__valid.value = int(self.offering)

    def sample(self) -> bool:
        if self.offering and self.dut.i__ready.value:
            self.queue.popleft()
            self.offering = False
            return True
        return False


@dataclass
class Run:
    """What came out of one job: per vector its (key, index) items; cycles from the first
    input beat taken to the last output beat taken (inclusive); malformed output beats."""

    vectors: list[list[tuple[int, int]]]
    cycles: int
    shape_errors: int = 0
    aborted: bool = False


class Stage2TB:
    """Clock, reset, the ``i`` source and the ``o`` sink of the block."""

    def __init__(self, dut: Any, cfg: Any) -> None:
        self.dut = dut
        self.block = make_stage2(cfg)
        self.timing = self.block.timing
        self.codec = BeatCodec(cfg.sorter)
        self.inp = VectorSource(dut)
        self.out = StreamSink(dut, "o")
        self.cycle = 0
        self._edge, self._ro = RisingEdge(dut.clk), ReadOnly()
        Clock(dut.clk, 10, unit="ns").start()

    async def step(self) -> tuple[bool, int | None]:
        await self._edge
        self.cycle += 1
        self.inp.drive()
        self.out.drive()
        await self._ro
        return self.inp.sample(), self.out.sample()

    async def reset(self, cycles: int = 2) -> None:
        await self._edge
        self.dut.rst.value = 1
        self.inp.clear()
        for _ in range(cycles):
            self.inp.drive()
            self.out.drive()
            await self._edge
            self.cycle += 1
        self.dut.rst.value = 0

    def beats(self, vec: tuple[int, ...], r: int, *,
              bad: str = "") -> list[tuple[int, int | None]]:
        """The beats of one vector, ``r`` on the first; ``bad`` = ``"valid"`` drops the first
        beat's top lane from its mask, ``"last"`` inverts the first beat's ``last``."""
        p = self.codec.lanes
        out: list[tuple[int, int | None]] = []
        for b in range(0, len(vec), p):
            items = [(k, 0) for k in vec[b:b + p]]
            last = b + p >= len(vec)
            if b == 0 and bad == "valid":
                items = items[:-1]
            if b == 0 and bad == "last":
                last = not last
            out.append((self.codec.beat(items, last), r if b == 0 else None))
        return out

    async def run_job(self, job: Stage2Job, in_kind: str, out_kind: str, rng: random.Random,
                      *, abort_after: int | None = None, bad: str = "",
                      deadline: int = 100_000) -> Run:
        self.inp.pattern = Pattern(in_kind, rng)
        self.out.pattern = Pattern(out_kind, rng)
        for n, (v, r) in enumerate(zip(job.vectors, job.rs, strict=True)):
            self.inp.queue.extend(self.beats(v, r, bad=bad if n == 0 else ""))
        vecs: list[list[tuple[int, int]]] = [[]]
        first = last = None
        shape_errors = 0
        full = (1 << self.codec.lanes) - 1
        start = self.cycle
        while len(vecs) <= job.count:
            took, beat = await self.step()
            if took and first is None:
                first = self.cycle
            if beat is not None:
                items, is_last, mask = self.codec.unpack(beat)
                if not (mask == full or (is_last and mask and mask & (mask + 1) == 0)):
                    shape_errors += 1
                vecs[-1].extend(items)
                if is_last:
                    vecs.append([])
                    last = self.cycle
            if abort_after is not None and self.cycle - start >= abort_after:
                await self.reset(rng.randint(1, 3))
                return Run(vecs[:-1], 0, aborted=True)
            if self.cycle - start > deadline:
                raise AssertionError(f"job {job.describe()} hangs: {len(vecs) - 1} of "
                                     f"{job.count} vectors out after {deadline} cycles")
        assert first is not None and last is not None
        # the next job starts with the block idle (the contract's cycles are from idle)
        for _ in range(64):
            if int(self.dut.idle.value):
                break
            await self.step()
        return Run(vecs[:-1], last - first + 1, shape_errors)


async def _refused(tb: Stage2TB, rng: random.Random, d: int, width: int, r: int,
                   bad: str) -> str:
    """Run one vector with a refused ``r`` or a malformed beat; '' when ``error`` rises, one
    vector leaves and a reset clears ``error``, else what went wrong."""
    job = Stage2Job((tuple(rng.randint(0, (1 << width) - 1) for _ in range(d)),), (r,), "bad")
    run = await tb.run_job(job, "always", "always", rng, bad=bad, deadline=1000)
    what = []
    if len(run.vectors) != 1:
        what.append(f"{len(run.vectors)} vectors out")
    if not int(tb.dut.error.value):
        what.append("error not raised")
    await tb.reset()
    await tb.step()
    if int(tb.dut.error.value):
        what.append("error not cleared by reset")
    return ", ".join(what)


@cocotb.test()
async def regression(dut: Any) -> None:
    conf = _load()
    cfg = config_from_json(conf["config"])
    seed = int(conf["seed"])
    rng = random.Random(seed)
    jobs = int(conf["jobs"])
    tb = Stage2TB(dut, cfg)
    t = tb.timing
    d, width, max_r = t.length, t.key_width, tb.block.max_r
    log = dut._log
    log.info(f"Stage II regression: preset={cfg.name} seed={seed} random jobs={jobs} "
             f"d={d} P={t.lanes} B={t.bits_per_cycle} engines={t.engines} max_r={max_r}")
    t0 = time.monotonic()
    dut.r.value = 1
    await tb.reset()
    failures: list[str] = []
    cycle_failures: list[str] = []

    # what -> (r, malformed beat)
    refused = {"r=0": (0, ""), "valid": (1, "valid"), "last": (1, "last")}
    if max_r + 1 < 1 << max_r.bit_length():          # r > max_r fits the port
        refused["r>max_r"] = (max_r + 1, "")
    for what, (r, bad) in refused.items():
        msg = await _refused(tb, rng, d, width, r, bad)
        if msg:
            failures.append(f"preset={cfg.name} seed={seed}: refused input {what} (r={r}): "
                            f"{msg}")

    plan: list[tuple[Stage2Job, str, str]] = [
        (job, "always", "always") for job in directed_stage2_jobs(rng, d, width, max_r)]
    n_directed = len(plan)
    for _ in range(jobs):
        job = random_stage2_job(rng, d, width, max_r)
        kinds = (("always", "always") if rng.random() < 0.5
                 else (rng.choice(PATTERNS), rng.choice(PATTERNS)))
        plan.append((job, *kinds))

    stats = {"jobs": 0, "random": 0, "directed": 0, "vectors": 0, "items_out": 0,
             "cycle_checks": 0, "resets": 0, "r_above_d": 0, "r_changes": 0}
    measured: dict[int, dict[str, Any]] = {}
    examples: list[dict[str, Any]] = []
    for n, (job, ik, ok_) in enumerate(plan):
        where = f"preset={cfg.name} seed={seed} job={n}"
        if n >= n_directed and (n == n_directed or rng.random() < 0.01):
            # a reset in the middle of a job, then the same job again, clean
            est = t.cycles(job.count)
            aborted = await tb.run_job(job, ik, ok_, rng, abort_after=rng.randint(1, est))
            assert aborted.aborted
            stats["resets"] += 1
            await tb.step()
            if int(dut.error.value) or not int(dut.idle.value):
                failures.append(f"{where}: error set or not idle after a reset in the middle "
                                f"of {job.describe()}")
        run = await tb.run_job(job, ik, ok_, rng)
        want = job.expected()
        stats["jobs"] += 1
        stats["directed" if n < n_directed else "random"] += 1
        stats["vectors"] += job.count
        stats["items_out"] += sum(len(v) for v in run.vectors)
        stats["r_above_d"] += sum(r > d for r in job.rs)
        stats["r_changes"] += sum(a != b for a, b in zip(job.rs, job.rs[1:], strict=False))
        for i, (exp, act) in enumerate(zip(want, run.vectors, strict=True)):
            if exp != act:
                failures.append(f"{where} vector {i} (in={ik} out={ok_}): input "
                                f"{list(job.vectors[i])} r={job.rs[i]}: expected {exp}, "
                                f"got {act}")
                break
        if run.shape_errors:
            failures.append(f"{where}: {run.shape_errors} output beats not dense")
        if int(dut.error.value):
            failures.append(f"{where}: error raised on a well-formed job {job.describe()}")
            await tb.reset()
        if ik == "always" and ok_ == "always":
            formula = t.cycles(job.count)
            stats["cycle_checks"] += 1
            if run.cycles != formula:
                cycle_failures.append(f"{where}: {job.count} vectors took {run.cycles} "
                                      f"cycles, formula {formula}")
            if job.count not in measured:
                measured[job.count] = {"block": "stage2", "preset": cfg.name, "mode": "stage2",
                                       "d": d, "count": job.count, "cycles": run.cycles}
                examples.append({"count": job.count, "cycles": run.cycles,
                                 "formula": formula})
        if (n + 1) % 2000 == 0:
            log.info(f"{n + 1}/{len(plan)} jobs, {len(failures)} failures, "
                     f"{time.monotonic() - t0:.0f} s")
        if len(failures) > 50:
            break
    wall = time.monotonic() - t0
    out = {"preset": cfg.name, "seed": seed, "jobs": jobs, "stats": stats,
           "refused": sorted(refused), "failures": failures[:20],
           "n_failures": len(failures), "cycle_failures": cycle_failures[:20],
           "n_cycle_failures": len(cycle_failures),
           "examples": sorted(examples, key=lambda e: e["count"]),
           "sim_cycles": tb.cycle, "wall_s": wall,
           "measurements": [measured[c] for c in sorted(measured)], "latency": t.latency,
           "timing": t.summary()}
    if conf.get("result"):
        with open(conf["result"], "w") as f:
            json.dump(out, f, indent=1)
    log.info(f"done: {stats['jobs']} jobs, {stats['vectors']} vectors, {tb.cycle} cycles, "
             f"{wall:.1f} s, {len(failures)} mismatches, {len(cycle_failures)} cycle "
             f"mismatches, {stats['resets']} resets")
    assert not failures, "\n".join(f[:2000] for f in failures[:5])
    assert not cycle_failures, "\n".join(cycle_failures[:5])
