"""cocotb 2.x testbench of the sorter (run through :mod:`hikv.rtl_tests.sorter_rtl`).

The configuration arrives as JSON in ``HIKV_TB_CONFIG``::

    {"config": <hikv.params.config_to_json>, "seed": <int>, "jobs": <random jobs per mode>,
     "result": <path of the JSON summary to write>, "replay": <path of jobs to replay>}

Tests:

Streams are driven by the shared kit (:mod:`hikv.rtl_tests.streams`).

* ``regression``: directed corner cases, then ``jobs`` random jobs per mode, modes interleaved
  back to back, valid/ready patterns (always, random, bursty) on both sides, and resets in the
  middle of jobs each followed by a clean job. Every output beat is compared with the golden
  model; every job run without backpressure must take exactly the cycles of the timing contract.
* ``replay``: runs the jobs of a file without backpressure and records outputs and cycles.

Seeds: the launcher's seed (in the JSON; also cocotb's ``COCOTB_RANDOM_SEED``) seeds one local
``random.Random``; the same seed replays the same jobs, patterns and resets.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from hikv.hw.sorter_timing import SorterTiming
from hikv.params import SorterParams, config_from_json
from hikv.rtl_tests.sorter_jobs import (
    STAGE1,
    STAGE2,
    BeatCodec,
    SorterJob,
    directed_jobs,
    expected_output,
    random_job,
)
from hikv.rtl_tests.streams import PATTERNS, Pattern, StreamBench

ENV = "HIKV_TB_CONFIG"


@dataclass
class JobRun:
    segments: list[list[tuple[int, int]]]
    cycles: int
    first_in: int
    aborted: bool = False
    shape_errors: int = 0     # beats that are not dense (full, or the segment's last: low lanes)


class SorterTB(StreamBench):
    """Owns clock, reset, the cfg and input sources and the output sink."""

    def __init__(self, dut: Any, params: SorterParams) -> None:
        super().__init__(dut, RisingEdge(dut.clk), ReadOnly())
        self.params = params
        self.codec = BeatCodec(params)
        self.timing = SorterTiming.from_params(params)
        Clock(dut.clk, 10, unit="ns").start()

    async def run_job(self, job: SorterJob, in_kind: str, out_kind: str, rng: random.Random,
                      *, abort_after: int | None = None, deadline: int = 100_000) -> JobRun:
        self.cfg.pattern = self.inp.pattern = Pattern(in_kind, rng)
        self.out.pattern = Pattern(out_kind, rng)
        self.cfg.queue.append(self.codec.config(job))
        self.inp.queue.extend(self.codec.beats(job))
        segs: list[list[tuple[int, int]]] = [[]]
        first = last = None
        shape_errors = 0
        full = (1 << self.params.lanes) - 1
        start = self.cycle
        nsegs = len(job.segments)
        while len(segs) <= nsegs:
            _, took, beat = await self.step()
            if took and first is None:
                first = self.cycle
            if beat is not None:
                items, is_last, mask = self.codec.unpack(beat)
                if not (mask == full or (is_last and mask and mask & (mask + 1) == 0)):
                    shape_errors += 1
                segs[-1].extend(items)
                if is_last:
                    segs.append([])
                    last = self.cycle
            if abort_after is not None and self.cycle - start >= abort_after:
                await self.reset(rng.randint(1, 3))
                return JobRun(segs[:-1], 0, -1, aborted=True)
            if self.cycle - start > deadline:
                raise AssertionError(f"job {job.describe(8)} hangs: {len(segs) - 1} of "
                                     f"{nsegs} segments out after {deadline} cycles")
        assert first is not None and last is not None
        return JobRun(segs[:-1], last - first + 1, first, shape_errors=shape_errors)


def _load() -> dict[str, Any]:
    raw = os.environ.get(ENV)
    if not raw:
        raise RuntimeError(f"{ENV} is not set: run through hikv.rtl_tests.sorter_rtl")
    return json.loads(raw)


def _write(path: str | None, data: dict[str, Any]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=1)


async def check_job(tb: SorterTB, job: SorterJob, ik: str, ok_: str, rng: random.Random,
                    st: dict[str, int], failures: list[str], cycle_failures: list[str],
                    where: str, *, directed: bool, formula: Any) -> tuple[Any, int | None]:
    """Run ``job`` under the valid/ready patterns ``ik``/``ok_`` and check it: outputs equal to
    the golden reference, dense beats, no error flag and, without backpressure, cycles equal to
    ``formula(job)``. Counts go to ``st``; problems to ``failures`` / ``cycle_failures``
    prefixed with ``where``. Returns the run and the formula's cycles (``None`` under
    backpressure). Shared by the sorter's and the top-k engine's testbenches."""
    log = tb.dut._log
    exp = expected_output(job)
    run = await tb.run_job(job, ik, ok_, rng)
    st["jobs"] += 1
    st["directed" if directed else "random"] += 1
    st["beats_in"] += len(tb.codec.beats(job))
    st["items_out"] += sum(len(s) for s in run.segments)
    if run.segments != exp:
        msg = (f"{where} patterns={ik}/{ok_} input={job.describe()} expected={exp} "
               f"actual={run.segments}")
        failures.append(msg)
        log.error(msg[:4000])
    if run.shape_errors:
        failures.append(f"{where} input={job.describe(8)}: {run.shape_errors} output beats "
                        "not dense")
    if int(tb.dut.error.value):
        failures.append(f"{where}: error flag set")
    if (ik, ok_) != ("always", "always"):
        return run, None
    want = formula(job)
    st["cycle_checks"] += 1
    st["cycle_sum"] += run.cycles
    if run.cycles != want:
        msg = f"{where} {job.describe(4)}: measured {run.cycles} cycles, formula {want}"
        cycle_failures.append(msg)
        log.error(msg)
    return run, want


@cocotb.test()
async def regression(dut: Any) -> None:
    conf = _load()
    cfg = config_from_json(conf["config"])
    params = cfg.sorter
    seed = int(conf["seed"])
    rng = random.Random(seed)
    per_mode = int(conf["jobs"])
    tb = SorterTB(dut, params)
    log = dut._log
    log.info(f"sorter regression: preset={cfg.name} seed={seed} jobs per mode={per_mode}")
    t0 = time.monotonic()
    await tb.reset()

    plan: list[tuple[SorterJob, str, str]] = []
    directed = directed_jobs(params, rng)
    for job in directed:
        plan.append((job, "always", "always"))
    modes = [STAGE1] * per_mode + [STAGE2] * per_mode
    # mostly alternating modes back to back, with occasional runs of one mode
    order: list[str] = []
    s1, s2 = modes.count(STAGE1), modes.count(STAGE2)
    while s1 or s2:
        pick = STAGE1 if (s1 and (not s2 or (len(order) % 2 == 0) ^ (rng.random() < 0.2))) \
            else STAGE2
        order.append(pick)
        if pick == STAGE1:
            s1 -= 1
        else:
            s2 -= 1
    max_n = None if cfg.name == "tiny" else min(params.max_n, 64 * params.lanes)
    for mode in order:
        job = random_job(rng, params, mode, max_n=max_n)
        r = rng.random()
        if r < 0.5:
            kinds = ("always", "always")
        else:
            kinds = (rng.choice(PATTERNS), rng.choice(PATTERNS))
        plan.append((job, *kinds))

    stats = {m: {"jobs": 0, "random": 0, "directed": 0, "beats_in": 0, "items_out": 0,
                 "cycle_checks": 0, "cycle_sum": 0}
             for m in (STAGE1, STAGE2)}
    failures: list[str] = []
    cycle_failures: list[str] = []
    examples: list[dict[str, Any]] = []
    resets = 0
    measured: dict[tuple[Any, ...], dict[str, Any]] = {}
    n_directed = len(directed)
    for n, (job, ik, ok_) in enumerate(plan):
        if n >= n_directed and (n == n_directed or rng.random() < 0.01):
            # a reset in the middle of a job, then the same job again, clean
            est = job.cycles(tb.timing)
            aborted = await tb.run_job(job, ik, ok_, rng, abort_after=rng.randint(1, est))
            assert aborted.aborted
            resets += 1
            await tb._edge
            tb.cycle += 1
            if int(dut.busy.value) or int(dut.error.value):
                failures.append(f"preset={cfg.name} seed={seed} job={n}: busy/error set after "
                                f"a reset in the middle of {job.describe(8)}")
        st = stats[job.mode]
        run, want = await check_job(tb, job, ik, ok_, rng, st, failures, cycle_failures,
                                    f"preset={cfg.name} seed={seed} job={n}",
                                    directed=n < n_directed,
                                    formula=lambda j: j.cycles(tb.timing))
        if want is not None:
            if job.mode == STAGE1:
                args = {"mode": STAGE1, "n": job.length, "k": job.k}
            else:
                args = {"mode": STAGE2, "d": job.length, "k": job.k,
                        "count": len(job.segments)}
            measured.setdefault(tuple(args.values()), {"block": "sorter", "preset": cfg.name,
                                                       **args, "cycles": run.cycles})
            if job.kind.startswith("bench"):
                examples.append({"mode": job.mode, "k": job.k, "length": job.length,
                                 "count": job.count, "vectors": len(job.segments),
                                 "cycles": run.cycles, "formula": want, "kind": job.kind})
        if (n + 1) % 2000 == 0:
            log.info(f"{n + 1}/{len(plan)} jobs, {len(failures)} failures, "
                     f"{time.monotonic() - t0:.0f} s")
        if len(failures) > 50:
            break
    wall = time.monotonic() - t0
    _write(conf.get("result"), {
        "preset": cfg.name, "seed": seed, "per_mode": per_mode, "stats": stats,
        "failures": failures[:20], "n_failures": len(failures),
        "cycle_failures": cycle_failures[:20], "n_cycle_failures": len(cycle_failures),
        "resets": resets, "examples": examples, "sim_cycles": tb.cycle, "wall_s": wall,
        "measurements": list(measured.values()),
        "latency": tb.timing.latency,
    })
    log.info(f"done: {sum(s['jobs'] for s in stats.values())} jobs, {tb.cycle} cycles, "
             f"{wall:.1f} s, {len(failures)} mismatches, {len(cycle_failures)} cycle "
             f"mismatches, {resets} resets")
    assert not failures, "\n".join(f[:2000] for f in failures[:5])
    assert not cycle_failures, "\n".join(cycle_failures[:5])


@cocotb.test()
async def replay(dut: Any) -> None:
    conf = _load()
    cfg = config_from_json(conf["config"])
    with open(conf["replay"]) as f:
        jobs = [SorterJob.from_dict(d) for d in json.load(f)]
    tb = SorterTB(dut, cfg.sorter)
    rng = random.Random(0)
    await tb.reset()
    out = []
    for job in jobs:
        run = await tb.run_job(job, "always", "always", rng)
        out.append({"segments": run.segments, "cycles": run.cycles,
                    "formula": job.cycles(tb.timing), "error": int(dut.error.value)})
    _write(conf.get("result"), {"preset": cfg.name, "results": out})
