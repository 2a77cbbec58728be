# amaranth: UnusedElaboratable=no
"""The whole sorter in Amaranth's simulator (tiny preset): outputs against the golden model,
cycles against the timing contract, the error flag, and the beat codec against the layouts.

The cocotb/Verilator regression (rtl_tests/) runs 10^4 jobs per mode; this is the quick check.
"""

from __future__ import annotations

import random

import pytest
from amaranth_sim import pump, run_sim, stream_put

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


def _segments_done(n: int):
    """``pump``'s stop condition: ``n`` output beats with ``last`` (decoded by the codec)."""
    return lambda got: sum(is_last for _, is_last, _ in got) == n


def simulate(params: SorterParams, jobs: list[SorterJob], *, seed: int, backpressure: bool,
             bad_beats: bool = False):
    """Run ``jobs`` back to back; return per job (segments out, cycles, error flag)."""
    dut = Sorter(params)
    codec = BeatCodec(params)
    rng = random.Random(seed)
    results = []

    async def tb(ctx):
        for job in jobs:
            await stream_put(ctx, dut.cfg, codec.config(job))
            beats = codec.beats(job)
            if bad_beats:
                beats[0] ^= 1 << codec._last  # flip the first beat's last flag
            got: list[tuple[list[tuple[int, int]], bool, int]] = []
            events: dict[str, int] = {}
            p = 0.7 if backpressure else 1.0
            await pump(ctx, rng, dut.i, dut.o, beats, got, None,
                       lambda op: codec.unpack(op.as_bits()), p_in=p,
                       p_out=0.6 if backpressure else 1.0, seed=seed, events=events,
                       until=_segments_done(len(job.segments)),
                       deadline=20_000)
            segs_out: list[list[tuple[int, int]]] = [[]]
            for items, is_last, _ in got:
                segs_out[-1] += items
                if is_last:
                    segs_out.append([])
            results.append((segs_out[:-1], events["last_out"] - events["first"] + 1,
                            ctx.get(dut.error)))

    run_sim(dut, tb)
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

    run_sim(dut, tb)


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
