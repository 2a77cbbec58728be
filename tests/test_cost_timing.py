"""The sorter/loader timing interface and the RTL adapter (hikv.sim.cost.timing): every formula is
the RTL helpers' own (hikv.hw.sorter_timing, hikv.hw.loader_timing), vectorised."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hikv.hw.blocks import loader_instances
from hikv.hw.loader_timing import LoaderGeometry, estimate_cycles, job_timing
from hikv.hw.sorter_timing import SorterTiming
from hikv.params import KVLayout, LoaderParams, ParamError
from hikv.presets import PRESETS, get_preset
from hikv.sim.cost import timing as T


def test_rtl_is_the_default_timing_model():
    m = T.default_timing()
    assert isinstance(m, T.TimingModel) and m.name == "rtl"
    assert T.get_timing("rtl").name == "rtl"
    assert "sorter_timing" in m.source and "loader_timing" in m.source
    with pytest.raises(ParamError, match="unknown timing model"):
        T.get_timing("nope")


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_sorter_cycles_and_compares_are_the_rtl_formulas(preset):
    p = get_preset(preset).sorter
    t = SorterTiming.from_params(p)
    m = T.RtlTiming()
    rng = np.random.default_rng(1)
    n = rng.integers(1, p.max_n + 1, 40)
    k = np.minimum(rng.integers(1, p.max_k + 1, 40), n)
    got = m.sorter_cycles(p, "stage1", n=n, k=k)
    cmp_ = m.sorter_compares(p, "stage1", n=n, k=k)
    for i in range(40):
        assert got[i] == t.stage1_cycles(int(n[i]), int(k[i]))
        assert cmp_[i] == t.stage1_compares(int(n[i]), int(k[i]))
    for d, r, c in itertools.product((p.max_vec // 2, p.max_vec), (1, p.max_vec // 4), (1, 7)):
        assert m.sorter_cycles(p, "stage2", d=d, k=r, count=c) == t.stage2_cycles(c, d, r)
        assert m.sorter_compares(p, "stage2", d=d, k=r, count=c) == t.stage2_compares(c, d, r)
    # empty jobs take nothing; scalars in, floats out
    assert m.sorter_cycles(p, "stage1", n=0, k=0) == 0
    assert m.sorter_cycles(p, "stage1", n=10, k=0) == 0
    assert m.sorter_cycles(p, "stage2", d=8, k=4, count=0) == 0
    assert isinstance(m.sorter_cycles(p, "stage1", n=8, k=2), float)
    with pytest.raises(ParamError, match="sorter mode"):
        m.sorter_cycles(p, "stage3", n=1, k=1)


def test_sorter_jobs_beyond_the_build_use_a_larger_build():
    p = get_preset("paper").sorter                      # max_n = 32768
    m = T.RtlTiming()
    n = p.max_n + 1                                     # SparQ's N + 1 tokens
    big = T.sorter_for_job(p, n=n, k=2048)
    assert big.max_n == n and big.lanes == p.lanes
    assert m.sorter_cycles(p, "stage1", n=n, k=2048) == \
        SorterTiming.from_params(big).stage1_cycles(n, 2048)
    assert not bool(m.fits(p, "stage1", n=n, k=2048)) and bool(m.fits(p, "stage1", n=8, k=2))
    assert T.sorter_for_job(p, n=8, k=2) is p


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_loader_closed_form_is_estimate_cycles(preset):
    """The vectorised closed form equals hikv.hw.loader_timing.estimate_cycles point by point."""
    cfg = get_preset(preset)
    geo = LoaderGeometry(cfg.layout, cfg.loader)
    m = T.RtlTiming()
    bb = cfg.loader.beat_bytes
    cases = []
    for beats, req, lat in itertools.product((1, 7, 64, 1000), (1, 3, 40), (1, 32, 100)):
        if req > beats:
            continue
        cases.append((beats, req, lat, "dense", 0, 0))
        cases.append((beats, req, lat, "masked", max(1, beats // 4), 0))
        cases.append((beats, req, lat, "channel_pages", 0, max(1, beats // 3)))
    for beats, req, lat, mode, rec, pt in cases:
        want = estimate_cycles(geo, beats=beats, requests=req, latency=lat, mode=mode,
                               records=rec, page_tokens=pt)
        got = m.loader_cycles(cfg.loader, cfg.layout, bytes=beats * bb, requests=req,
                              mem_latency_cycles=lat, records=rec, page_tokens=pt)
        assert float(got) == pytest.approx(want), (preset, beats, req, lat, mode)
    vec = m.loader_cycles(cfg.loader, cfg.layout, bytes=np.array([0, bb, 64 * bb]),
                          requests=np.array([0, 1, 4]), mem_latency_cycles=10)
    assert vec[0] == 0 and vec[1] == estimate_cycles(geo, beats=1, requests=1, latency=10)


def test_loader_job_cycles_is_job_timing_and_the_closed_form_is_close():
    cfg = get_preset("default")
    geo = LoaderGeometry(cfg.layout, cfg.loader)
    m = T.RtlTiming()
    for lat, o in ((1, 1), (32, 4), (100, 8)):
        slots = list(range(512))
        jt = job_timing(geo, mode="dense", slots=slots, latency=lat, outstanding=o)
        assert m.loader_job_cycles(cfg.loader, cfg.layout, mode="dense", slots=slots,
                                   mem_latency_cycles=lat, outstanding=o) == jt.cycles
        est = estimate_cycles(geo, beats=jt.beats, requests=len(jt.requests), latency=lat,
                              outstanding=o)
        assert abs(est - jt.cycles) <= 0.1 * jt.cycles


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_loader_instances_sustain_the_memory_bandwidth(preset):
    from hikv.hw.loader_timing import steady_bytes_per_cycle

    cfg = get_preset(preset)
    a, lp = cfg.accel, cfg.loader
    n = loader_instances(cfg)
    lat = round(a.mem_latency_s * a.clock_hz)
    per = steady_bytes_per_cycle(LoaderGeometry(cfg.layout, lp), latency=lat)
    need = a.mem_bandwidth_bytes_per_s / a.clock_hz
    assert n * per >= need > (n - 1) * per            # the fewest that suffice
    assert per == lp.beat_bytes * min(1.0, lp.max_outstanding * lp.max_burst_beats
                                      / (lat + lp.max_burst_beats))
    # the presets keep enough reads in flight to cover the latency: a loader streams its bus
    assert per == lp.beat_bytes
    assert n == math.ceil(need / lp.beat_bytes - 1e-9)
    bws = np.array([64e9, 256e9, 1e12])
    np.testing.assert_array_equal(loader_instances(cfg, bws),
                                  np.maximum(1, np.ceil(bws / a.clock_hz / per - 1e-9)))


def test_loader_instances_grow_when_latency_is_not_covered():
    import dataclasses

    cfg = get_preset("default")
    few = cfg.replace(loader=dataclasses.replace(cfg.loader, max_outstanding=4))
    # 4 x 4 beats of 64 B per 104 cycles: 9.8 of 64 B/cycle, so 26 loaders for 256 B/cycle;
    # 64 in flight cover the latency: 4 loaders of 64 B/cycle
    assert loader_instances(few) == 26 and loader_instances(cfg) == 4
    assert loader_instances(get_preset("paper")) == 8   # 460 B/cycle


def test_unique_apply_broadcasts():
    calls = []

    def f(a, b):
        calls.append((a, b))
        return a * 10 + b

    out = T.unique_apply(f, np.array([[1, 2, 1]]), np.array([[3], [3]]))
    assert out.shape == (2, 3) and out[1, 2] == 13 and len(calls) == 2
    assert T.unique_apply(f, 2, 5) == 25.0


def test_bad_loader_geometry_is_an_error():
    with pytest.raises(ParamError, match="beat"):
        T.RtlTiming().loader_cycles(LoaderParams(data_width=1024), KVLayout(), bytes=64,
                                    requests=1, mem_latency_cycles=1)
