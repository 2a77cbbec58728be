"""cocotb 2.x testbench of the low-bit scoring unit (run through
:mod:`hikv.rtl_tests.scorer_launch`).

The configuration arrives as JSON in ``HIKV_TB_CONFIG``::

    {"config": <hikv.params.config_to_json>, "seed": <int>, "jobs": <random jobs>,
     "result": <path of the JSON summary to write>}

Test ``regression``: ``jobs`` jobs cycling through the generators of
:data:`~hikv.rtl_tests.scorer_jobs.JOB_KINDS` (random keys, raw fp16 metadata, extreme scales,
all-zero keys, saturation), one at a time with valid/ready patterns (always, random, bursty) on
both sides; then batches of jobs streamed back to back; then a reset in the middle of a job
followed by a clean job. Every output beat is compared with :mod:`hikv.model.refs.lowbit`; every job
run without backpressure must take exactly :meth:`~hikv.hw.scorer_timing.ScorerTiming.cycles`,
and a back-to-back batch exactly the sum of its beats plus the latency.

Seeds: the launcher's seed seeds one local ``numpy`` generator and one ``random.Random``.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from hikv.hw.scorer_timing import ScorerTiming
from hikv.params import config_from_json
from hikv.rtl_tests.scorer_jobs import (
    JOB_KINDS,
    ScorerCodec,
    ScorerJob,
    expected_beats,
    make_job,
)
from hikv.rtl_tests.streams import PATTERNS, Pattern, StreamBench, StreamSink, StreamSource

ENV = "HIKV_TB_CONFIG"


class ScorerTB(StreamBench):
    """Owns clock, reset, the cfg and input sources and the output sink."""

    def __init__(self, dut: Any, cfg: Any) -> None:
        super().__init__(dut, RisingEdge(dut.clk), ReadOnly())
        self.cfg_obj = cfg
        self.codec = ScorerCodec(cfg)
        self.timing = ScorerTiming(cfg.scorer)
        Clock(dut.clk, 10, unit="ns").start()

    async def run(self, jobs: list[ScorerJob], in_kind: str, out_kind: str,
                  rng: random.Random, *, abort_after: int | None = None
                  ) -> tuple[list[Any], int] | None:
        """Stream ``jobs`` back to back; return (output beats, cycles from the first input
        beat to the last output beat), or None after an abort (reset)."""
        self.cfg.pattern = self.inp.pattern = Pattern(in_kind, rng)
        self.out.pattern = Pattern(out_kind, rng)
        want = 0
        for job in jobs:
            self.cfg.queue.append(self.codec.config(job))
            beats = self.codec.inputs(job)
            self.inp.queue.extend(beats)
            want += len(beats)
        got: list[Any] = []
        first = last = None
        start = self.cycle
        while len(got) < want:
            _, took, beat = await self.step()
            if took and first is None:
                first = self.cycle
            if beat is not None:
                got.append(self.codec.output(beat))
                last = self.cycle
            if abort_after is not None and self.cycle - start >= abort_after:
                await self.reset(rng.randint(1, 3))
                return None
            if self.cycle - start > 50 * want + 100:
                raise AssertionError(f"{len(got)} of {want} beats out after "
                                     f"{self.cycle - start} cycles: the unit hangs")
        assert first is not None and last is not None
        return got, last - first + 1


def _describe(job: ScorerJob) -> str:
    return f"{job.kind} n={job.n} first={job.first} query={list(job.query)[:8]}..."


@cocotb.test()
async def regression(dut: Any) -> None:
    raw = os.environ.get(ENV)
    if not raw:
        raise RuntimeError(f"{ENV} is not set: run through hikv.rtl_tests.scorer_launch")
    conf = json.loads(raw)
    cfg = config_from_json(conf["config"])
    seed = int(conf["seed"])
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    tb = ScorerTB(dut, cfg)
    t0 = time.time()
    await tb.reset()
    failures: list[str] = []
    cycle_failures: list[str] = []
    stats = {k: 0 for k in JOB_KINDS}
    checks = {"single": 0, "batch": 0}
    examples = []
    measurements = []

    def compare(what: str, jobs: list[ScorerJob], got: list[Any]) -> None:
        want = [b for j in jobs for b in expected_beats(cfg, j)]
        if len(got) != len(want):
            failures.append(f"seed {seed} {what}: {len(got)} beats out, want {len(want)}")
            return
        for t, (g, w) in enumerate(zip(got, want, strict=True)):
            if g != w:
                failures.append(f"seed {seed} {what} beat {t}: got {g}, want {w}; jobs "
                                f"{[_describe(j) for j in jobs]}")
                return

    n_jobs = int(conf["jobs"])
    for i in range(n_jobs):
        kind = JOB_KINDS[i % len(JOB_KINDS)]
        job = make_job(cfg, nrng, kind)
        stats[kind] += 1
        in_kind = "always" if i % 3 == 0 else rng.choice(PATTERNS)
        out_kind = "always" if i % 3 == 0 else rng.choice(PATTERNS)
        res = await tb.run([job], in_kind, out_kind, rng)
        assert res is not None
        got, cycles = res
        compare(f"job {i} ({in_kind}/{out_kind})", [job], got)
        if in_kind == out_kind == "always":
            checks["single"] += 1
            formula = tb.timing.cycles(job.n)
            measurements.append({"n": job.n, "cycles": cycles, "formula": formula})
            if len(examples) < 6:
                examples.append({"n": job.n, "cycles": cycles, "formula": formula})
            if cycles != formula:
                cycle_failures.append(f"seed {seed} job {i} n={job.n}: {cycles} cycles, "
                                      f"contract {formula}")
    for b in range(max(2, n_jobs // 20)):
        jobs = [make_job(cfg, nrng, rng.choice(JOB_KINDS)) for _ in range(rng.randint(2, 6))]
        kinds = ("always", "always") if b % 2 == 0 else (rng.choice(PATTERNS),
                                                         rng.choice(PATTERNS))
        res = await tb.run(jobs, *kinds, rng)
        assert res is not None
        got, cycles = res
        compare(f"batch {b} ({kinds[0]}/{kinds[1]})", jobs, got)
        if kinds == ("always", "always"):
            checks["batch"] += 1
            formula = sum(tb.timing.throughput_cycles(j.n) for j in jobs) + tb.timing.latency
            if cycles != formula:
                cycle_failures.append(f"seed {seed} batch {b} n={[j.n for j in jobs]}: "
                                      f"{cycles} cycles back to back, contract {formula}")
    # a reset in the middle of a job, then a clean job
    big = make_job(cfg, nrng, "raw", n=min(cfg.sorter.max_n, 6 * cfg.scorer.lanes))
    assert await tb.run([big], "random", "random", rng, abort_after=4) is None
    clean = make_job(cfg, nrng, "random")
    res = await tb.run([clean], "always", "always", rng)
    assert res is not None
    compare("job after reset", [clean], res[0])

    summary = {"jobs": n_jobs, "stats": stats, "cycle_checks": checks, "examples": examples,
               "measurements": measurements, "latency": tb.timing.latency,
               "n_failures": len(failures), "failures": failures[:10],
               "n_cycle_failures": len(cycle_failures), "cycle_failures": cycle_failures[:10],
               "sim_cycles": tb.cycle, "wall_s": time.time() - t0}
    if conf.get("result"):
        with open(conf["result"], "w") as f:
            json.dump(summary, f, indent=1)
    assert not failures, "\n".join(failures[:5])
    assert not cycle_failures, "\n".join(cycle_failures[:5])


@cocotb.test()
async def chain(dut: Any) -> None:
    """``scorer_sorter``: random and adversarial scoring jobs, each a sorter Stage I job with a
    random ``k``; the selection must be :func:`~hikv.model.refs.sorter.stage1_topk` of the
    reference keys, the cycles ``chain_cycles(n, k)`` without backpressure."""
    from hikv.hw.scorer_sorter import chain_cycles
    from hikv.model.refs.sorter import stage1_topk
    from hikv.rtl_tests.scorer_jobs import expected_keys
    from hikv.rtl_tests.sorter_jobs import STAGE1, BeatCodec, SorterJob

    conf = json.loads(os.environ[ENV])
    cfg = config_from_json(conf["config"])
    seed = int(conf["seed"])
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    codec = ScorerCodec(cfg)
    scodec = BeatCodec(cfg.sorter)
    qcfg, scfg, inp = StreamSource(dut, "qcfg"), StreamSource(dut, "scfg"), StreamSource(dut, "i")
    out = StreamSink(dut, "o")
    Clock(dut.clk, 10, unit="ns").start()
    edge, ro = RisingEdge(dut.clk), ReadOnly()
    dut.rst.value = 1
    for s in (qcfg, scfg, inp):
        s.drive()
    out.drive()
    for _ in range(2):
        await edge
    dut.rst.value = 0
    t0 = time.time()
    failures: list[str] = []
    cycle_failures: list[str] = []
    checks = cycles_total = 0
    examples = []
    n_jobs = int(conf["jobs"])
    for i in range(n_jobs):
        kind = JOB_KINDS[i % len(JOB_KINDS)]
        job = make_job(cfg, nrng, kind, n=int(nrng.integers(1, cfg.sorter.max_n + 1)))
        k = int(nrng.integers(1, min(cfg.sorter.max_k, job.n) + 1))
        keys = expected_keys(cfg, job)
        labels = list(range(job.first, job.first + job.n))
        want = [(int(a), int(b)) for a, b in stage1_topk(keys, labels, k)]
        timed = i % 3 == 0
        pats = [Pattern("always" if timed else rng.choice(PATTERNS), rng) for _ in range(2)]
        qcfg.pattern = scfg.pattern = inp.pattern = pats[0]
        out.pattern = pats[1]
        qcfg.queue.append(codec.config(job))
        scfg.queue.append(scodec.config(SorterJob(STAGE1, k, (tuple(keys),), tuple(labels))))
        inp.queue.extend(codec.inputs(job))
        got: list[tuple[int, int]] = []
        first = None
        cyc = 0
        while True:
            await edge
            cyc += 1
            for s in (qcfg, scfg, inp):
                s.drive()
            out.drive()
            await ro
            qcfg.sample()
            scfg.sample()
            if inp.sample() and first is None:
                first = cyc
            beat = out.sample()
            if int(dut.sorter_error.value):
                failures.append(f"seed {seed} job {i}: sorter error")
                break
            if beat is not None:
                items, is_last, _ = scodec.unpack(beat)
                got.extend(items)
                if is_last:
                    break
            if cyc > 100 * job.n + 1000:
                failures.append(f"seed {seed} job {i}: hangs ({len(got)} items out)")
                break
        if got != want:
            failures.append(f"seed {seed} job {i} ({_describe(job)} k={k}): got {got}, "
                            f"want {want}")
        if timed and first is not None:
            checks += 1
            cycles = cyc - first + 1
            formula = chain_cycles(cfg, job.n, k)
            cycles_total += cycles
            if len(examples) < 4:
                examples.append({"n": job.n, "k": k, "cycles": cycles, "formula": formula})
            if cycles != formula:
                cycle_failures.append(f"seed {seed} job {i} n={job.n} k={k}: {cycles} cycles, "
                                      f"contract {formula}")
        if failures and len(failures) > 10:
            break
    summary = {"jobs": n_jobs, "cycle_checks": checks, "examples": examples,
               "n_failures": len(failures), "failures": failures[:10],
               "n_cycle_failures": len(cycle_failures), "cycle_failures": cycle_failures[:10],
               "wall_s": time.time() - t0}
    if conf.get("result"):
        with open(conf["result"], "w") as f:
            json.dump(summary, f, indent=1)
    assert not failures, "\n".join(failures[:5])
    assert not cycle_failures, "\n".join(cycle_failures[:5])
