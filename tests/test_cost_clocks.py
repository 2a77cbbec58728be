"""Per-block clocks in the cost model and the low-bit scoring unit's select phase:
hikv.sim.cost.clocks and hikv.sim.cost.attention_model."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from cost_helpers import cells_or_skip

from hikv.hw.blocks import loader_instances
from hikv.hw.scorer_timing import ScorerTiming
from hikv.params import CLOCK_BLOCKS, Method, ParamError
from hikv.presets import baseline_specs, get_preset
from hikv.sim.cost import energy as E
from hikv.sim.cost.attention_model import Overrides, attention_cost, scorer_cycles, step_work
from hikv.sim.cost.clocks import Clocks, accelerator_clocks, assumed_clocks, scorer_used


def _accel(cfg, **kw):
    return cfg.replace(accel=dataclasses.replace(cfg.accel, **kw))


def _specs(cfg):
    return {s.method: s for s in baseline_specs(cfg)}


def test_assumed_clocks_are_the_accelerator_clock():
    cfg = get_preset("default")
    ck = assumed_clocks(cfg)
    assert set(ck.blocks) == set(CLOCK_BLOCKS)
    assert all(c.hz == cfg.accel.clock_hz and c.origin == "assumed" for c in ck.blocks.values())
    assert ck.assumed == CLOCK_BLOCKS               # the default preset uses the scorer
    off = accelerator_clocks(cfg, check=False)
    assert "synthesis not allowed" in off.blocks["sorter"].source
    assert not scorer_used(get_preset("tiny")) and scorer_used(cfg)
    assert "scorer" not in assumed_clocks(get_preset("tiny")).assumed


def test_hand_set_clock_is_used_with_its_source():
    cfg = _accel(get_preset("default"), sorter_clock_hz=5e8, clock_source="our P&R")
    ck = accelerator_clocks(cfg, check=False)
    s = ck.blocks["sorter"]
    assert (s.hz, s.origin, s.checked) == (5e8, "user", True) and "our P&R" in s.source
    assert ck.reference_hz == cfg.accel.clock_hz and ck.single_hz == 5e8
    single = accelerator_clocks(cfg.replace(accel=dataclasses.replace(
        cfg.accel, clock_policy="single")), check=False)
    assert all(single.hz(b) == 5e8 for b in CLOCK_BLOCKS)


@pytest.mark.parametrize("preset", ["tiny", "default", "paper"])
def test_default_clocks_give_the_same_cost(preset):
    """Every block at clock_hz (assumed) costs what the same clocks given by hand do: one clock."""
    cfg = get_preset(preset)
    for spec in baseline_specs(cfg):
        a = attention_cost(spec, cfg)
        given = {k: dataclasses.replace(v, origin="user")
                 for k, v in assumed_clocks(cfg).blocks.items()}
        b = attention_cost(spec, cfg, clocks=Clocks("per_block", given))
        assert float(a.time_s) == float(b.time_s), spec.label


def test_sorter_phase_at_its_own_clock():
    """A sorter at half the clock takes twice the reference cycles; the other phases stay."""
    seed = 0
    cfg = get_preset("default")
    slow = _accel(cfg, sorter_clock_hz=cfg.accel.clock_hz / 2, clock_source="test")
    for spec in baseline_specs(cfg):
        a = attention_cost(spec, cfg, schedule="serial")
        b = attention_cost(spec, slow, schedule="serial")
        msg = f"{spec.label} (seed {seed})"
        assert float(b.sort_cycles) == pytest.approx(2 * float(a.sort_cycles)), msg
        assert float(b.select_cycles) == float(a.select_cycles), msg
        assert float(b.attend_cycles) == float(a.attend_cycles), msg
        H, L = cfg.model.kv_heads, cfg.model.layers
        sel, att, srt = float(b.select_cycles), float(b.attend_cycles), float(b.sort_cycles)
        layer = max(H * (sel + att), sel + H * srt + att if srt > 0 else 0.0)
        assert float(b.time_s) == pytest.approx(L * layer / cfg.accel.clock_hz), msg


def test_single_clock_equals_every_block_at_the_slowest():
    cfg = get_preset("paper")
    f = 0.6 * cfg.accel.clock_hz
    single = _accel(cfg, clock_policy="single", loader_clock_hz=f, clock_source="test")
    every = _accel(cfg, **{f"{b}_clock_hz": f for b in CLOCK_BLOCKS}, clock_source="test")
    for spec in baseline_specs(cfg):
        a, b = attention_cost(spec, single), attention_cost(spec, every)
        assert float(a.time_s) == pytest.approx(float(b.time_s), rel=1e-12), spec.label
        assert float(a.time_s) > float(attention_cost(spec, cfg).time_s), spec.label


def test_slow_loader_needs_more_instances_and_time():
    cfg = get_preset("default")
    f = cfg.accel.clock_hz / 2
    slow = _accel(cfg, loader_clock_hz=f, clock_source="test")
    assert loader_instances(_accel(cfg, clock_hz=f)) >= loader_instances(cfg)
    full = _specs(cfg)[Method.FULL]
    assert float(attention_cost(full, slow).attend_cycles) >= float(
        attention_cost(full, cfg).attend_cycles)


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_lowbit_select_runs_on_the_scorer(preset):
    cfg = get_preset(preset)
    spec = _specs(cfg)[Method.HIKV]
    assert scorer_used(cfg)
    G, n, d = cfg.model.group, cfg.context, cfg.layout.head_dim
    w = step_work(spec, cfg)
    assert float(w.scorer_tokens) == n and float(w.score_macs) == G * n * d
    c = attention_cost(spec, cfg)
    t = ScorerTiming(cfg.scorer)
    want = t.cycles(n) + (G - 1) * t.throughput_cycles(n)
    assert float(c.scorer_cycles) == want == G * math.ceil(n / cfg.scorer.lanes) + t.latency
    assert float(c.select_cycles) >= want
    units = cfg.model.layers * cfg.model.kv_heads
    assert float(c.scorer_macs) == units * G * n * d
    assert float(c.macs) == units * float(w.attend_macs)      # the PE lanes do not score
    e = E.scorer_energy_j(units * G * n * d, units * G * n, spec.hikv.lowbit_bits,
                          cfg.scorer.query_bits, d, cfg.accel.tech_nm)
    assert float(c.energy_parts_j["scorer"]) == pytest.approx(float(e))
    # more lanes, fewer scorer cycles; a sweep axis
    lanes = np.array([4, 8, 16, 32, 64])
    cs = attention_cost(spec, cfg, Overrides(scorer_lanes=lanes))
    sc = np.asarray(cs.scorer_cycles)
    assert (np.diff(sc) < 0).all() and (np.diff(np.asarray(cs.time_s)) <= 0).all()
    assert sc[0] == float(scorer_cycles(cfg.scorer, n, G, 4))


def test_scorer_energy_is_below_the_fp16_lanes():
    # 4 x 8-bit MAC with a 64-element dot product: int8_mult / 2 + int32_add (18-bit acc)
    tab = E.load_tables().action_j_45nm
    assert float(E.scorer_mac_energy_j(4, 8, 64, 45)) == pytest.approx(
        tab["int8_mult"] / 2 + tab["int32_add"])
    assert float(E.scorer_mac_energy_j(4, 8, 64, 45)) < float(E.mac_energy_j(1, 45)) / 5


def test_scorer_lanes_override_is_checked():
    cfg = get_preset("default")
    spec = _specs(cfg)[Method.HIKV]
    with pytest.raises(ParamError, match="lanes"):
        attention_cost(spec, cfg, Overrides(scorer_lanes=np.array([0, 8])))


def test_sta_clocks_of_tiny():
    """With synthesis, each used block's clock is the timing flow's estimate at the node."""
    cells_or_skip()
    from hikv.sim.eda.sta import block_clock

    cfg = get_preset("tiny")
    ck = accelerator_clocks(cfg)
    for b in ("sorter", "loader"):
        c = ck.blocks[b]
        assert c.origin == "sta" and c.hz == pytest.approx(block_clock(b, cfg)["clock_hz"])
        assert c.critical_path and "Stillmaker-Baas" in c.source
    pe = ck.blocks["pe_array"]   # the reference: clock_hz, with our lanes' estimate beside it
    assert pe.origin == "assumed" and pe.hz == cfg.accel.clock_hz
    assert "would close" in pe.source and pe.critical_path.startswith("not used")
    assert ck.blocks["scorer"].origin == "assumed" and not ck.blocks["scorer"].used
    spec = _specs(cfg)[Method.HIKV]
    a = attention_cost(spec, cfg, clocks=ck)
    assert float(a.time_s) > 0 and a.clocks is ck


def test_scorer_clock_from_a_one_lane_build(monkeypatch):
    """The scoring unit's clock is estimated on a 1-lane build (the lanes are copies), stated
    in its source; no synthesis here (block_clock is replaced)."""
    from hikv.sim.cost import clocks as C
    from hikv.sim.eda import sta

    seen = []

    def fake(block, cfg):
        seen.append((block, cfg.scorer.lanes))
        return {"clock_hz": 4e8, "source": "fake STA", "critical_path": "a -> b"}

    monkeypatch.setattr(sta, "block_clock", fake)
    cfg = get_preset("paper")
    c = C._sta(cfg, "scorer")
    assert seen == [("scorer", 1)] and c.hz == 4e8 and c.origin == "sta"
    n = cfg.scorer.lanes
    stages = math.ceil(math.log(n, 4))
    assert "1-lane build" in c.source and f"{n} lanes" in c.source
    assert f"{stages} buffer" in c.source
