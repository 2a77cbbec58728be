"""The scoring unit in Amaranth's simulator against hikv.model.refs.lowbit (quick; the cocotb
regression on Verilator is rtl_tests/test_scorer_rtl.py), and its geometry checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from amaranth.hdl import Const
from amaranth.sim import Simulator

from hikv.hw.scorer import Scorer, ScorerGeometry
from hikv.hw.scorer_timing import SCORER_DOT_STAGES, SCORER_STAGES, ScorerTiming
from hikv.params import ParamError, ScorerParams
from hikv.presets import get_preset
from hikv.rtl_tests.scorer_jobs import JOB_KINDS, ScorerCodec, expected_beats, make_job


def _cfg(bits: int, lanes: int = 4):
    cfg = get_preset("tiny")
    return cfg.replace(policy=dataclasses.replace(cfg.policy, lowbit_bits=bits),
                       scorer=ScorerParams(lanes=lanes, query_bits=8))


def _run(cfg, jobs, seed, p_in, p_out):
    """Stream ``jobs`` (config beat, then input beats) with random valid/ready; return the
    output beats and, per job, (first input cycle, last output cycle)."""
    rng = np.random.default_rng(seed)
    codec = ScorerCodec(cfg)
    dut = Scorer(codec.geometry)
    cfgs = [codec.config(j) for j in jobs]
    beats = [codec.inputs(j) for j in jobs]
    got, times = [], []

    async def bench(ctx):
        ji = bi = 0             # job and beat being offered
        ci = 0                  # configuration beats accepted
        out_job, out_beats = 0, 0
        cycle = 0
        while out_job < len(jobs):
            assert cycle < 20000, f"seed {seed}: timed out"
            # the next job's configuration is offered while the current one streams in
            offer_cfg = ci < len(jobs) and ci <= ji + 1
            ctx.set(dut.cfg.valid, offer_cfg)
            if offer_cfg:
                ctx.set(dut.cfg.payload.as_value(), cfgs[ci])
            offer = ji < len(jobs) and ci > ji and rng.random() < p_in
            ctx.set(dut.i.valid, offer)
            if offer:
                ctx.set(dut.i.payload.as_value(), beats[ji][bi])
            ctx.set(dut.o.ready, rng.random() < p_out)
            _, _, cv, cr, iv, ir, ov, orr, op = await ctx.tick().sample(
                dut.cfg.valid, dut.cfg.ready, dut.i.valid, dut.i.ready, dut.o.valid,
                dut.o.ready, dut.o.payload)
            if iv and ir:
                if bi == 0:
                    times.append([cycle, None])
                bi += 1
                if bi == len(beats[ji]):
                    ji, bi = ji + 1, 0
            if cv and cr:
                ci += 1
            if ov and orr:
                got.append(codec.output(Const.cast(op).value))
                out_beats += 1
                if out_beats == len(beats[out_job]):
                    times[out_job][1] = cycle
                    out_job, out_beats = out_job + 1, 0
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got, times


@pytest.mark.parametrize("bits", [4, 8])
def test_scorer_matches_reference_with_backpressure(bits):
    seed = 40 + bits
    cfg = _cfg(bits)
    rng = np.random.default_rng(seed)
    jobs = [make_job(cfg, rng, JOB_KINDS[i % len(JOB_KINDS)]) for i in range(15)]
    got, _ = _run(cfg, jobs, seed, p_in=0.7, p_out=0.6)
    want = [b for j in jobs for b in expected_beats(cfg, j)]
    assert len(got) == len(want), f"seed {seed}"
    for t, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"bits {bits} seed {seed} beat {t}: got {g}, want {w}"


def test_scorer_cycles_are_the_timing_contract():
    seed = 5
    cfg = _cfg(4, lanes=3)
    rng = np.random.default_rng(seed)
    jobs = [make_job(cfg, rng, "raw", n=n) for n in (1, 2, 3, 4, 7, 12, 30)]
    got, times = _run(cfg, jobs, seed, p_in=1.0, p_out=1.0)
    t = ScorerTiming(cfg.scorer)
    assert got == [b for j in jobs for b in expected_beats(cfg, j)], f"seed {seed}"
    for job, (first, last) in zip(jobs, times, strict=True):
        assert last - first + 1 == t.cycles(job.n), f"n {job.n}: {first}..{last}"
    # jobs stream back to back: the next job's first beat follows the last one directly
    for (f0, _), (f1, _), job in zip(times, times[1:], jobs, strict=False):
        assert f1 - f0 == t.throughput_cycles(job.n), (f0, f1, job.n)


def test_geometry_rejects_bad_widths():
    p = ScorerParams()
    with pytest.raises(ParamError, match="scorer bits = 9"):
        ScorerGeometry(p, head_dim=16, bits=9, key_width=8, index_width=6)
    with pytest.raises(ParamError, match="scorer key_width = 17"):
        ScorerGeometry(p, head_dim=16, bits=4, key_width=17, index_width=6)
    with pytest.raises(ParamError, match="tokens n = 0"):
        ScorerTiming(p).cycles(0)
    with pytest.raises(TypeError, match="ScorerGeometry"):
        Scorer(p)


def test_chain_needs_equal_lanes():
    from hikv.hw.scorer_sorter import ScorerSorter, chain_cycles
    from hikv.hw.sorter_timing import SorterTiming

    cfg = _cfg(4, lanes=2)
    with pytest.raises(ParamError, match="scorer.lanes = 2 must equal sorter.lanes = 4"):
        ScorerSorter(cfg)
    tiny = get_preset("tiny")
    assert SCORER_STAGES == SCORER_DOT_STAGES + 8 == 11
    assert chain_cycles(tiny, 30, 5) == (SorterTiming.from_params(tiny.sorter)
                                         .stage1_cycles(30, 5) + SCORER_STAGES)
