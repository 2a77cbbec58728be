"""cocotb 2.x testbench of the radix-select top-k engine (run through
:mod:`hikv.rtl_tests.topk_rtl`).

The engine has the sorter's Stage I contract, so this bench drives it with the sorter's bench
(:class:`~hikv.rtl_tests.tb_sorter.SorterTB`: clock, reset, ``cfg``/``i`` sources, ``o`` sink,
the job codec built from the RTL's own layouts) and checks it against the same golden model
(:func:`hikv.model.refs.sorter.stage1_topk`); only the cycle contract is the engine's own
(:class:`~hikv.hw.topk_timing.TopKTiming`).

The configuration arrives as JSON in ``HIKV_TB_CONFIG``::

    {"config": <hikv.params.config_to_json>, "seed": <int>, "jobs": <random jobs>,
     "result": <path of the JSON summary to write>}

``regression``: configurations the engine must refuse (a Stage II job, ``k`` zero, ``k`` above
``max_k``, ``n`` above ``max_n``: the sticky ``error``, cleared by a reset), the directed corner
cases, then ``jobs`` random Stage I jobs with valid/ready patterns (always, random, bursty) on
both sides and resets in the middle of jobs, each followed by a clean job. Every output beat is
compared with the golden model; every job run without backpressure must take exactly the
contract's cycles. The launcher's seed seeds one local ``random.Random``.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import cocotb
from amaranth.hdl import Shape

from hikv.hw.topk_timing import TopKTiming
from hikv.params import config_from_json
from hikv.rtl_tests.sorter_jobs import STAGE1, STAGE2, SorterJob
from hikv.rtl_tests.streams import PATTERNS
from hikv.rtl_tests.tb_sorter import SorterTB, check_job
from hikv.rtl_tests.topk_jobs import directed_topk_jobs, random_topk_job

ENV = "HIKV_TB_CONFIG"


def _load() -> dict[str, Any]:
    raw = os.environ.get(ENV)
    if not raw:
        raise RuntimeError(f"{ENV} is not set: run through hikv.rtl_tests.topk_rtl")
    return json.loads(raw)


async def _refused(tb: SorterTB, fields: dict[str, int]) -> bool:
    """Offer one configuration beat; True when the engine takes it, raises ``error`` and
    stays idle (then reset)."""
    dut = tb.dut
    cfg_layout = tb.codec.config_layout
    bits = 0
    for name, value in fields.items():
        f = cfg_layout[name]
        bits |= value << f.offset
    tb.cfg.queue.append(bits)
    for _ in range(4):
        await tb.step()
    ok = bool(int(dut.error.value)) and not int(dut.busy.value) and not tb.cfg.queue
    await tb.reset()
    await tb.step()
    return ok and not int(dut.error.value)


@cocotb.test()
async def regression(dut: Any) -> None:
    conf = _load()
    cfg = config_from_json(conf["config"])
    params = cfg.sorter
    seed = int(conf["seed"])
    rng = random.Random(seed)
    jobs = int(conf["jobs"])
    tb = SorterTB(dut, params)
    timing = TopKTiming.from_params(params)
    log = dut._log
    log.info(f"top-k regression: preset={cfg.name} seed={seed} random jobs={jobs} "
             f"digits={timing.digits} of {timing.digit_bits} bits")
    t0 = time.monotonic()
    await tb.reset()
    failures: list[str] = []
    cycle_failures: list[str] = []

    s1, s2 = tb.codec.mode_values[STAGE1], tb.codec.mode_values[STAGE2]
    refused = {
        "stage2": {"mode": s2, "k": 1, "length": 1, "count": 1},
        "k=0": {"mode": s1, "k": 0, "length": 0, "count": 1},
        "count=0": {"mode": s1, "k": 1, "length": 0, "count": 0},
    }
    widths = {name: Shape.cast(tb.codec.config_layout[name].shape).width
              for name in ("k", "count")}
    if params.max_k + 1 < 1 << widths["k"]:
        refused["k>max_k"] = {"mode": s1, "k": params.max_k + 1, "length": 0, "count": 1}
    if params.max_n + 1 < 1 << widths["count"]:
        refused["n>max_n"] = {"mode": s1, "k": 1, "length": 0, "count": params.max_n + 1}
    for what, fields in refused.items():
        if not await _refused(tb, fields):
            failures.append(f"preset={cfg.name} seed={seed}: configuration {what} {fields} "
                            "not refused with error (or error not cleared by reset)")

    plan: list[tuple[SorterJob, str, str]] = [
        (job, "always", "always") for job in directed_topk_jobs(params, rng)]
    n_directed = len(plan)
    max_n = None if cfg.name == "tiny" else min(params.max_n, 64 * params.lanes)
    for _ in range(jobs):
        job = random_topk_job(rng, params, max_n=max_n)
        kinds = (("always", "always") if rng.random() < 0.5
                 else (rng.choice(PATTERNS), rng.choice(PATTERNS)))
        plan.append((job, *kinds))

    stats = {"jobs": 0, "random": 0, "directed": 0, "beats_in": 0, "items_out": 0,
             "cycle_checks": 0, "cycle_sum": 0, "resets": 0}
    examples: list[dict[str, Any]] = []
    measured: dict[tuple[int, int], dict[str, Any]] = {}
    for n, (job, ik, ok_) in enumerate(plan):
        if n >= n_directed and (n == n_directed or rng.random() < 0.01):
            # a reset in the middle of a job, then the same job again, clean
            est = timing.stage1_cycles(job.length, job.k)
            aborted = await tb.run_job(job, ik, ok_, rng, abort_after=rng.randint(1, est))
            assert aborted.aborted
            stats["resets"] += 1
            await tb.step()
            if int(dut.busy.value) or int(dut.error.value):
                failures.append(f"preset={cfg.name} seed={seed} job={n}: busy/error set after "
                                f"a reset in the middle of {job.describe(8)}")
        run, want = await check_job(tb, job, ik, ok_, rng, stats, failures, cycle_failures,
                                    f"preset={cfg.name} seed={seed} job={n}",
                                    directed=n < n_directed,
                                    formula=lambda j: timing.stage1_cycles(j.length, j.k))
        if want is not None:
            measured.setdefault((job.length, job.k), {
                "block": "topk", "preset": cfg.name, "mode": STAGE1, "n": job.length,
                "k": job.k, "cycles": run.cycles})
            if job.kind.startswith("bench"):
                examples.append({"n": job.length, "k": job.k, "cycles": run.cycles,
                                 "formula": want})
        if (n + 1) % 2000 == 0:
            log.info(f"{n + 1}/{len(plan)} jobs, {len(failures)} failures, "
                     f"{time.monotonic() - t0:.0f} s")
        if len(failures) > 50:
            break
    wall = time.monotonic() - t0
    out = {"preset": cfg.name, "seed": seed, "jobs": jobs, "stats": stats,
           "refused": sorted(refused), "failures": failures[:20],
           "n_failures": len(failures), "cycle_failures": cycle_failures[:20],
           "n_cycle_failures": len(cycle_failures), "examples": examples,
           "sim_cycles": tb.cycle, "wall_s": wall, "measurements": list(measured.values()),
           "latency": timing.latency}
    if conf.get("result"):
        with open(conf["result"], "w") as f:
            json.dump(out, f, indent=1)
    log.info(f"done: {stats['jobs']} jobs, {tb.cycle} cycles, {wall:.1f} s, "
             f"{len(failures)} mismatches, {len(cycle_failures)} cycle mismatches, "
             f"{stats['resets']} resets")
    assert not failures, "\n".join(f[:2000] for f in failures[:5])
    assert not cycle_failures, "\n".join(cycle_failures[:5])
