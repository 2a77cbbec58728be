"""One cost record per RTL block (hikv.sim.cost.blocks): every registered block has one, its
numbers are the cost model's own (instances, cycles, clock, energy per action, area), in SI
units, positive and finite where known."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from cost_helpers import cells_or_skip

from hikv.hw.blocks import BLOCKS, get_block, loader_instances
from hikv.hw.loader_timing import LoaderGeometry, estimate_cycles
from hikv.hw.scorer_timing import ScorerTiming
from hikv.hw.sorter_timing import SorterTiming
from hikv.params import Method, ParamError
from hikv.presets import PRESETS, baseline_specs, get_preset
from hikv.sim.cost import energy as E
from hikv.sim.cost.attention_model import Overrides, attention_cost, step_work
from hikv.sim.cost.blocks import AREA_MODES, BlockCost, block_cost, block_costs
from hikv.sim.cost.clocks import accelerator_clocks, assumed_clocks
from hikv.sim.eda.area import COMPOSITE_BLOCKS, hikv_blocks


def _accel(cfg, **kw):
    return cfg.replace(accel=dataclasses.replace(cfg.accel, **kw))


def _positive(x: float) -> bool:
    return math.isfinite(x) and x > 0


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_registered_block_has_a_record(preset):
    cfg = get_preset(preset)
    costs = block_costs(cfg)
    assert list(costs) == list(BLOCKS)
    for name, r in costs.items():
        assert isinstance(r, BlockCost) and r.name == name and r.tech_nm == cfg.accel.tech_nm
        assert isinstance(r.instances, int) and r.instances >= 1
        assert _positive(r.clock_hz) and r.clock_origin in ("assumed", "user", "sta")
        assert r.energy_per_action_j and all(_positive(v)
                                             for v in r.energy_per_action_j.values())
        assert r.parts == get_block(name).parts
        assert r.used == (name in hikv_blocks(cfg))
        assert math.isnan(r.area_m2) and "no synthesis given" in r.area_source
        assert r.cycles_source and r.energy_source and r.clock_source
        assert r.has_cycles == (name != "sorter_loader")
    # the chained blocks are the area flow's composites, never counted beside their parts
    assert tuple(n for n, r in costs.items() if r.parts) == COMPOSITE_BLOCKS
    assert not any(costs[n].used for n in COMPOSITE_BLOCKS)
    assert set(costs["sorter_loader"].energy_per_action_j) == {
        "sorter.compare", "loader.request", "loader.beat"}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_instance_counts_are_the_timing_models(preset):
    """The loader count is the registry's rule at the loader's clock, the one the attention
    cost model uses: forcing that count changes nothing, one loader more or less does."""
    cfg = get_preset(preset)
    spec = next(s for s in baseline_specs(cfg) if s.method is Method.HIKV)
    for f_ld in (None, 4e8, 7.5e8):
        c = cfg if f_ld is None else _accel(cfg, loader_clock_hz=f_ld, clock_source="test")
        ck = assumed_clocks(c)
        r = block_cost("loader", c, clocks=ck)
        assert r.clock_hz == ck.hz("loader")
        assert r.instances == loader_instances(c, clock_hz=ck.hz("loader"))
        assert r.instances == get_block("loader").instances(c, clock_hz=r.clock_hz)
        free = attention_cost(spec, c, clocks=ck)
        forced = attention_cost(spec, c, Overrides(loader_instances=r.instances), clocks=ck)
        np.testing.assert_array_equal(free.time_s, forced.time_s)
        np.testing.assert_array_equal(free.busy_cycles["loaders"],
                                      forced.busy_cycles["loaders"])
        more = attention_cost(spec, c, Overrides(loader_instances=r.instances + 1), clocks=ck)
        assert not np.array_equal(free.busy_cycles["loaders"], more.busy_cycles["loaders"])
    assert all(block_cost(n, cfg).instances == 1 for n in BLOCKS if n != "loader")


def test_instance_counts_and_areas_are_the_area_models():
    """On `tiny` (quick to synthesise): each block's count and unit area are those of the
    accelerator's area table, at any loader clock."""
    cells_or_skip()
    from hikv.sim.eda.area import accelerator_area

    cfg = get_preset("tiny")
    for f_ld in (None, 2.5e8, 1.1e9):
        ar = accelerator_area(cfg, loader_clock_hz=f_ld)
        ck = assumed_clocks(cfg if f_ld is None else _accel(cfg, loader_clock_hz=f_ld,
                                                             clock_source="test"))
        costs = block_costs(cfg, clocks=ck, synth=ar.synth)
        for name in hikv_blocks(cfg):
            r = costs[name]
            rows = [i for i in ar.hikv if i.name == name or i.name.startswith(name + ".")]
            assert rows and all(i.count == r.instances for i in rows)
            assert _positive(r.area_m2) and "synthesised" in r.area_source
            assert r.area_m2 == pytest.approx(sum(i.unit_area_m2 for i in rows), rel=1e-12)
            assert r.total_area_m2 == pytest.approx(sum(i.area_m2 for i in rows), rel=1e-12)
        for name in set(BLOCKS) - set(ar.synth):
            assert math.isnan(costs[name].area_m2)
    # the synthesis cache gives the same record as the result passed in
    given = block_cost("topk", cfg, synth=ar.synth)
    assert block_cost("topk", cfg, area="cached") == given
    assert block_cost("topk", cfg, area="synthesise") == given


def test_clocks_are_the_cost_models():
    """The record's clock is the one the block runs at (hand-set, single policy, the timing
    flow's); a chained block runs at the slower of its parts'."""
    cfg = _accel(get_preset("default"), sorter_clock_hz=5e8, loader_clock_hz=8e8,
                 clock_source="test")
    ck = assumed_clocks(cfg)
    costs = block_costs(cfg, clocks=ck)
    assert (costs["sorter"].clock_hz, costs["sorter"].clock_origin) == (5e8, "user")
    assert costs["loader"].clock_hz == 8e8 and costs["scorer"].clock_hz == cfg.accel.clock_hz
    assert costs["sorter_loader"].clock_hz == 5e8 and "sorter" in costs[
        "sorter_loader"].clock_source
    assert costs["scorer_sorter"].clock_hz == 5e8
    single = _accel(cfg, clock_policy="single")
    for r in block_costs(single).values():
        assert r.clock_hz == 5e8
    assert "clock_policy 'single'" in block_cost("loader", single).clock_source
    # with the timing flow's clocks (cached on `tiny`)
    cells_or_skip()
    tiny = get_preset("tiny")
    sta = accelerator_clocks(tiny)
    for name in ("sorter", "loader"):
        r = block_cost(name, tiny, clocks=sta)
        assert r.clock_hz == sta.hz(name) and r.clock_origin == "sta"


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_cycles_are_the_timing_contracts(preset):
    cfg = get_preset(preset)
    costs = block_costs(cfg)
    st = SorterTiming.from_params(cfg.sorter)
    so = costs["sorter"]
    mn, mk = cfg.sorter.max_n, cfg.sorter.max_k
    for n, k in ((1, 1), (mn // 2, max(1, mk // 2)), (mn, mk)):
        assert so.cycles("stage1", n=n, k=k) == st.stage1_cycles(n, k)
    d = cfg.layout.head_dim
    for count, r in ((1, 1), (8, d // 4), (64, d)):
        assert so.cycles("stage2", d=d, k=r, count=count) == st.stage2_cycles(count, d, r)
    np.testing.assert_array_equal(so.cycles("stage1", n=np.array([mn // 2, mn]), k=mk),
                                  [st.stage1_cycles(mn // 2, mk), st.stage1_cycles(mn, mk)])
    ld = costs["loader"]
    geo = LoaderGeometry(cfg.layout, cfg.loader)
    for nbytes, req, lat in ((64, 1, 100), (4096, 4, 100), (65536, 64, 37)):
        beats = -(-nbytes // cfg.loader.beat_bytes)
        want = estimate_cycles(geo, beats=beats, requests=req, latency=lat)
        assert ld.cycles(bytes=nbytes, requests=req, mem_latency_cycles=lat) == want
    lat = cfg.accel.mem_latency_s * ld.clock_hz        # default: the memory at its clock
    assert ld.cycles(bytes=4096, requests=4) == ld.cycles(bytes=4096, requests=4,
                                                          mem_latency_cycles=lat)
    sc = ScorerTiming(cfg.scorer)
    for n, jobs in ((1, 1), (100, 1), (1000, 4)):
        want = sc.cycles(n) + (jobs - 1) * sc.throughput_cycles(n)
        assert costs["scorer"].cycles(tokens=n, jobs=jobs) == want
    with pytest.raises(ParamError, match="no timing contract of its own"):
        costs["sorter_loader"].cycles(n=10, k=2)


def test_chained_cycles_are_the_chain_contract():
    from hikv.hw.scorer_sorter import chain_cycles

    cfg = get_preset("tiny")
    r = block_cost("scorer_sorter", cfg)
    for n, k in ((30, 5), (cfg.sorter.max_n, cfg.sorter.max_k)):
        assert r.cycles(n=n, k=k) == chain_cycles(cfg, n, k)


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_energy_per_action_prices_as_the_energy_model(preset):
    """Count x energy per action is the energy model's component energy, and HiKV's step on
    the attention cost model prices its loader actions so."""
    cfg = get_preset(preset)
    costs = block_costs(cfg)
    t = cfg.accel.tech_nm
    x = np.array([1.0, 17.0, 1e6])
    w = SorterTiming.from_params(cfg.sorter).item_width
    np.testing.assert_allclose(costs["sorter"].energy_j(compare=x),
                               E.sorter_energy_j(x, w, t), rtol=1e-12)
    np.testing.assert_allclose(costs["loader"].energy_j(request=x, beat=3 * x),
                               E.loader_energy_j(x, 3 * x, t), rtol=1e-12)
    b, q, d = cfg.policy.lowbit_bits, cfg.scorer.query_bits, cfg.layout.head_dim
    np.testing.assert_allclose(costs["scorer"].energy_j(mac=x, token=2 * x),
                               E.scorer_energy_j(x, 2 * x, b, q, d, t), rtol=1e-12)
    np.testing.assert_allclose(costs["scorer_sorter"].energy_j(**{"sorter.compare": x}),
                               E.sorter_energy_j(x, w, t), rtol=1e-12)
    spec = next(s for s in baseline_specs(cfg) if s.method is Method.HIKV)
    c = attention_cost(spec, cfg)
    sb = step_work(spec, cfg).bytes
    units = cfg.model.layers * cfg.model.kv_heads
    beats = np.ceil(c.bytes_burst / cfg.loader.beat_bytes)
    assert costs["loader"].energy_j(request=units * sb.requests, beat=beats) == pytest.approx(
        float(c.energy_parts_j["loader"]), rel=1e-12)
    with pytest.raises(ParamError, match="no action"):
        costs["loader"].energy_j(compare=1)


def test_refusals():
    cfg = get_preset("tiny")
    with pytest.raises(ParamError, match="unknown block"):
        block_cost("nope", cfg)
    with pytest.raises(ParamError, match="area"):
        block_cost("sorter", cfg, area="guess")
    assert AREA_MODES == ("given", "cached", "synthesise")
