"""cocotb 2.x testbench: G-AdaKV's global top-k run on the sorter RTL as a schedule of Stage I
jobs (run through :mod:`hikv.rtl_tests.gadakv_rtl`; ``hikv rtl --block sorter --traffic gadakv``).

The configuration arrives as JSON in ``HIKV_TB_CONFIG``::

    {"config": <hikv.params.config_to_json>, "seed": <int>, "jobs": <problems>,
     "result": <path of the JSON summary to write>}

Test ``gadakv``: ``jobs`` random problems, each several (layer, KV head) score segments (some
longer than ``max_n``, so they are cut into chunks) of random keys with many ties, and a global
budget ``K`` below, at and above ``max_k`` (several rounds). The schedule of
:func:`hikv.model.methods.global_select.sorter_schedule` is driven with the RTL: every job's output
is compared bit for bit with :mod:`hikv.model.refs.sorter`, every job's cycles with
:mod:`hikv.hw.sorter_timing`, and the final kept sets with
:func:`hikv.model.methods.global_select.global_topk`. One local ``random.Random(seed)`` draws all.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import cocotb

from hikv.model.methods.global_select import global_topk, sorter_schedule
from hikv.params import SorterParams, config_from_json
from hikv.rtl_tests.sorter_jobs import STAGE1, SorterJob, expected_output
from hikv.rtl_tests.tb_sorter import SorterTB

ENV = "HIKV_TB_CONFIG"


def random_problem(rng: random.Random, params: SorterParams) -> tuple[list[list[int]], int]:
    """Segments of keys (many ties) and a global budget ``K`` (often above ``max_k``)."""
    top = (1 << params.key_width) - 1
    hi = rng.choice([0, 1, 2, 3, 7, top])
    segs = [[rng.randint(0, hi) for _ in range(rng.randint(1, 2 * params.max_n + 5))]
            for _ in range(rng.randint(2, 8))]
    total = sum(map(len, segs))
    k = rng.choice([1, rng.randint(1, params.max_k), params.max_k, params.max_k + 1,
                    rng.randint(1, 3 * params.max_k), total])
    return segs, min(k, total)


@cocotb.test()
async def gadakv(dut: Any) -> None:
    conf = json.loads(os.environ[ENV])
    cfg = config_from_json(conf["config"])
    params = cfg.sorter
    seed = int(conf["seed"])
    rng = random.Random(seed)
    tb = SorterTB(dut, params)
    log = dut._log
    t0 = time.monotonic()
    await tb.reset()
    reset_cycles = tb.cycle
    failures: list[str] = []
    stats = {"problems": 0, "jobs": 0, "scan_jobs": 0, "merge_jobs": 0, "multi_round": 0,
             "cycle_checks": 0, "cycle_mismatches": 0, "cycles": 0, "items_in": 0}
    for prob in range(int(conf["jobs"])):
        segs, k = random_problem(rng, params)
        where = f"preset={cfg.name} seed={seed} problem={prob} K={k} segments={segs}"
        sched = sorter_schedule(segs, k, max_n=params.max_n, max_k=params.max_k)
        njobs = 0
        try:
            job = next(sched)
            while True:
                sj = SorterJob(STAGE1, job.k, (job.keys,), job.labels, kind="gadakv")
                run = await tb.run_job(sj, "always", "always", rng)
                exp = expected_output(sj)
                want = sj.cycles(tb.timing)
                njobs += 1
                stats[f"{job.phase}_jobs"] += 1
                stats["cycle_checks"] += 1
                stats["cycles"] += run.cycles
                stats["items_in"] += len(job.keys)
                if run.segments != exp or run.shape_errors or int(dut.error.value):
                    failures.append(f"{where} job={njobs} ({job.phase} round {job.round} level "
                                    f"{job.level}) input={sj.describe(8)} expected={exp} "
                                    f"actual={run.segments} error={int(dut.error.value)}")
                    break
                if run.cycles != want:
                    stats["cycle_mismatches"] += 1
                    failures.append(f"{where} job={njobs} ({job.phase}) n={len(job.keys)} "
                                    f"k={job.k}: measured {run.cycles} cycles, formula {want}")
                job = sched.send([i for _, i in run.segments[0]])
        except StopIteration as stop:
            kept = stop.value
            if kept != global_topk(segs, k):
                failures.append(f"{where}: kept {kept}, global_topk {global_topk(segs, k)}")
            stats["multi_round"] += k > min(params.max_k, params.max_n // 2)
        stats["problems"] += 1
        stats["jobs"] += njobs
        for f in failures[-1:]:
            log.error(f[:4000])
        if len(failures) > 10:
            break
    wall = time.monotonic() - t0
    stats["reset_cycles"] = reset_cycles
    with open(conf["result"], "w") as f:
        json.dump({"preset": cfg.name, "seed": seed, "stats": stats,
                   "failures": failures[:10], "n_failures": len(failures),
                   "sim_cycles": tb.cycle, "wall_s": wall}, f, indent=1)
    log.info(f"gadakv: {stats}, {len(failures)} failures, {wall:.1f} s")
    assert not failures, "\n".join(x[:2000] for x in failures[:3])
