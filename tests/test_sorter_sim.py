# amaranth: UnusedElaboratable=no
"""The whole sorter in Amaranth's simulator (tiny preset): outputs against the golden model,
cycles against the timing contract, the error flag, and the beat codec against the layouts.

The cocotb/Verilator regression (rtl_tests/) runs 10^4 jobs per mode; this is the quick check.
"""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from hikv.hw.sorter import Sorter, SorterMode
from hikv.hw.sorter_timing import SorterTiming
from hikv.params import ParamError, SorterParams
from hikv.presets import get_preset
from hikv.rtl_tests.sorter_jobs import (
    STAGE1,
    STAGE2,
    BeatCodec,
    SorterJob,
    directed_jobs,
    expected_output,
    random_job,
)

PARAMS = get_preset("tiny").sorter


def simulate(params: SorterParams, jobs: list[SorterJob], *, seed: int, backpressure: bool,
             bad_beats: bool = False):
    """Run ``jobs`` back to back; return per job (segments out, cycles, error flag)."""
    dut = Sorter(params)
    codec = BeatCodec(params)
    rng = random.Random(seed)
    results = []

    async def tb(ctx):
        for job in jobs:
            ctx.set(dut.cfg.payload.as_value(), codec.config(job))
            ctx.set(dut.cfg.valid, 1)
            await ctx.tick().until(dut.cfg.ready)
            ctx.set(dut.cfg.valid, 0)
            beats = codec.beats(job)
            if bad_beats:
                beats[0] ^= 1 << codec._last  # flip the first beat's last flag
            segs_out: list[list[tuple[int, int]]] = [[]]
            bi, cycle, first, last = 0, 0, None, None
            while len(segs_out) <= len(job.segments):
                offer = bi < len(beats) and (not backpressure or rng.random() < 0.7)
                ctx.set(dut.i.valid, offer)
                if offer:
                    ctx.set(dut.i.payload.as_value(), beats[bi])
                ctx.set(dut.o.ready, not backpressure or rng.random() < 0.6)
                _, _, iv, ir, ov, orr, op = await ctx.tick().sample(
                    dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload)
                if iv and ir:
                    first = cycle if first is None else first
                    bi += 1
                if ov and orr:
                    items, is_last, _ = codec.unpack(op.as_bits())
                    segs_out[-1] += items
                    if is_last:
                        segs_out.append([])
                        last = cycle
                cycle += 1
                assert cycle < 20_000, f"seed={seed}: job {job.describe()} hangs"
            ctx.set(dut.i.valid, 0)
            results.append((segs_out[:-1], last - first + 1, ctx.get(dut.error)))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    return results


@pytest.mark.parametrize("backpressure", [False, True])
def test_sorter_jobs_match_golden_and_timing(backpressure):
    seed = 2024 + backpressure
    rng = random.Random(seed)
    jobs = [j for j in directed_jobs(PARAMS, rng)[::9]]
    jobs += [random_job(rng, PARAMS, rng.choice([STAGE1, STAGE2]), max_count=3)
             for _ in range(20)]
    timing = SorterTiming.from_params(PARAMS)
    for n, (job, (out, cycles, err)) in enumerate(zip(jobs, simulate(
            PARAMS, jobs, seed=seed, backpressure=backpressure), strict=True)):
        exp = expected_output(job)
        assert out == exp, (f"preset=tiny seed={seed} job={n} input={job.describe()} "
                            f"expected={exp} actual={out}")
        assert not err, f"seed={seed} job={n}: error flag set"
        if not backpressure:
            assert cycles == job.cycles(timing), (
                f"seed={seed} job={n} {job.describe()}: {cycles} cycles, formula "
                f"{job.cycles(timing)}")


def test_error_flag_on_bad_last():
    job = SorterJob(STAGE1, 2, ((3, 1, 2, 5, 4, 0),), tuple(range(6)))
    [(out, _, err)] = simulate(PARAMS, [job], seed=1, backpressure=False, bad_beats=True)
    assert err == 1
    assert out == expected_output(job)  # the flag reports; the job itself still runs


@pytest.mark.parametrize("labels", [(0, 1, 2, 3, 9, 8), (4, 5, 6, 7, 1, 2), (0, 2, 1, 3, 4, 5)])
def test_error_flag_on_labels_out_of_order(labels):
    """Stage I output is in arrival order, so labels must increase; the RTL flags it."""
    job = SorterJob(STAGE1, 3, ((3, 1, 2, 5, 4, 0),), labels)
    [(out, _, err)] = simulate(PARAMS, [job], seed=1, backpressure=False)
    assert err == 1
    assert sorted(out[0], key=lambda t: t[1]) == expected_output(job)[0]  # the same set


def test_no_error_flag_on_increasing_labels():
    job = SorterJob(STAGE1, 3, ((3, 1, 2, 5, 4, 0),), (2, 3, 5, 7, 11, 13))
    [(out, _, err)] = simulate(PARAMS, [job], seed=1, backpressure=False)
    assert err == 0 and out == expected_output(job)


def test_bad_configuration_is_dropped_with_error():
    dut = Sorter(PARAMS)
    codec = BeatCodec(PARAMS)
    good = SorterJob(STAGE2, 2, ((5, 1, 7),), (), "t")

    async def tb(ctx):
        bad = codec.config(good) & ~(((1 << codec._cfg["k"][1]) - 1) << codec._cfg["k"][0])
        ctx.set(dut.cfg.payload.as_value(), bad)  # k = 0
        ctx.set(dut.cfg.valid, 1)
        await ctx.tick()
        ctx.set(dut.cfg.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.error) == 1
        assert ctx.get(dut.busy) == 0
        assert ctx.get(dut.cfg.ready) == 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()


def test_codec_matches_amaranth_layout_const():
    codec = BeatCodec(PARAMS)
    job = SorterJob(STAGE2, 3, ((9, 8, 7, 6, 5),), (), "t")
    cfg = codec.config_layout.const({"mode": SorterMode.STAGE2, "k": 3, "length": 5,
                                     "count": 1})
    assert codec.config(job) == cfg.as_bits()
    beat = codec.io_layout.const({
        "lanes": [{"key": 9, "index": 0}, {"key": 8, "index": 1}, {"key": 7, "index": 2},
                  {"key": 6, "index": 3}], "valid": 0b1111, "last": 0})
    assert codec.beats(job)[0] == beat.as_bits()
    items, last, mask = codec.unpack(beat.as_bits())
    assert items == [(9, 0), (8, 1), (7, 2), (6, 3)] and not last and mask == 0b1111


def test_job_checks():
    with pytest.raises(ParamError, match="strictly increasing"):
        SorterJob(STAGE1, 1, ((1, 2),), (3, 2)).check(PARAMS)
    with pytest.raises(ParamError, match="k = 17"):
        SorterJob(STAGE1, 17, ((1, 2),), (0, 1)).check(PARAMS)
    with pytest.raises(ParamError, match="keys must be integers"):
        SorterJob(STAGE2, 1, ((1, 256),)).check(PARAMS)
    with pytest.raises(ParamError, match="same length"):
        SorterJob(STAGE2, 1, ((1, 2), (3,))).check(PARAMS)


def test_sorter_rejects_wrong_params():
    with pytest.raises(TypeError, match="SorterParams"):
        Sorter(get_preset("tiny"))  # type: ignore[arg-type]
