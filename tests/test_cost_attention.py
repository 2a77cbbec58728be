"""Decode-attention time and energy model (hikv.sim.cost.attention_model): limits, overlap rule,
vectorisation and energy bookkeeping."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from hikv.hw.blocks import loader_instances
from hikv.params import MemoryType, Method, MethodSpec, ParamError, Stage2Rule
from hikv.presets import baseline_specs, get_preset
from hikv.sim.cost import energy as E
from hikv.sim.cost.attention_model import Overrides, attention_cost, step_work
from hikv.sim.cost.timing import RtlTiming


def _accel(cfg, **kw):
    return cfg.replace(accel=dataclasses.replace(cfg.accel, **kw))


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_full_kv_time_is_the_phase_maximum(preset):
    """Full-KV decode attention: the attend phase is the maximum of memory, loader, MAC and
    softmax time plus the drain; the presets are memory-bound and their loaders
    (:func:`loader_instances`) keep up with the memory, so the loader term exceeds the memory
    term by at most its own pipeline fill and drain (2 + 1 cycles before the first request,
    hold + 1 + 2 after the last beat: 7 cycles for dense rows), never by a bandwidth shortfall.
    """
    cfg = get_preset(preset)
    c = attention_cost(MethodSpec(Method.FULL), cfg, schedule="serial")
    a, lay, m, lp = cfg.accel, cfg.layout, cfg.model, cfg.loader
    n, G = cfg.context, m.group
    bytes_head = 2 * n * lay.row_bytes
    requests = 2 * math.ceil(n * lay.row_bytes / (lp.max_burst_beats * lp.beat_bytes))
    lat = a.mem_latency_s * a.clock_hz
    mem = bytes_head / (a.mem_bandwidth_bytes_per_s / a.clock_hz) + lat
    macs = G * (n + 1) * 2 * lay.head_dim
    drain = np.ceil(G * 2 * lay.head_dim / a.pe_lanes) + 4
    inst = loader_instances(cfg)
    loader = float(RtlTiming().loader_cycles(
        lp, lay, bytes=bytes_head / inst, requests=math.ceil(requests / inst),
        mem_latency_cycles=lat))
    compute = max(np.ceil(macs / a.pe_lanes), np.ceil(G * (n + 1) / a.softmax_lanes))
    expect = max(mem, loader, compute) + drain
    assert float(c.attend_cycles) == pytest.approx(expect)
    assert bool(c.memory_bound) and mem > compute            # memory-bound, as sized
    assert loader <= mem + 7                                  # loaders keep up with memory
    assert float(c.select_cycles) == 0 and float(c.sort_cycles) == 0
    assert float(c.time_s) == pytest.approx(m.layers * m.kv_heads * expect / a.clock_hz)
    assert float(c.bytes_burst) == m.layers * m.kv_heads * bytes_head
    # with 4 reads of 4 beats in flight one loader streams 9.8 of 64 B/cycle and the rule
    # asks for 26 loaders instead of 4
    if preset == "default":
        few = cfg.replace(loader=dataclasses.replace(lp, max_outstanding=4))
        assert loader_instances(few) == 26 and loader_instances(cfg) == 4
        c4 = attention_cost(MethodSpec(Method.FULL), few, schedule="serial")
        assert float(c4.attend_cycles) <= float(c.attend_cycles) + 7


def test_memory_bound_speedup_approaches_the_bytes_ratio():
    cfg = _accel(get_preset("paper"), pe_lanes=1 << 16, softmax_lanes=1 << 16,
                 mem_latency_s=0.0)
    full = attention_cost(MethodSpec(Method.FULL), cfg)
    h2o = attention_cost(baseline_specs(cfg)[1], cfg)
    assert bool(full.memory_bound) and bool(h2o.memory_bound)
    ratio = float(full.bytes_burst / h2o.bytes_burst)
    assert float(full.roofline_s / h2o.roofline_s) == pytest.approx(ratio)
    assert float(full.time_s / h2o.time_s) == pytest.approx(ratio, rel=0.02)
    assert float(h2o.time_s) >= float(h2o.roofline_s)


def test_hikv_without_selection_costs_what_full_kv_costs():
    cfg = get_preset("default")
    p = dataclasses.replace(cfg.policy, v_rule=Stage2Rule())
    cfg = cfg.replace(policy=p, context=p.budget - 10)      # the budget covers the context
    h = attention_cost(MethodSpec.for_hikv(p), cfg)
    f = attention_cost(MethodSpec(Method.FULL), cfg)
    assert float(h.bytes_burst) == float(f.bytes_burst)
    assert float(h.time_s) == pytest.approx(float(f.time_s))
    assert float(h.sort_cycles) == 0


def test_sorter_bound_layers_follow_the_pipeline_rule():
    cfg = get_preset("default")
    cfg = cfg.replace(sorter=dataclasses.replace(cfg.sorter, lanes=2))
    spec = MethodSpec.for_hikv(cfg.policy)
    c = attention_cost(spec, cfg, schedule="serial")
    H = cfg.model.kv_heads
    a1, b, a2 = float(c.select_cycles), float(c.sort_cycles), float(c.attend_cycles)
    assert b > 0
    assert float(c.layer_cycles) == pytest.approx(max(H * (a1 + a2), a1 + H * b + a2))
    assert float(c.sorter_exposed_cycles) == pytest.approx(
        max(0.0, a1 + H * b + a2 - H * (a1 + a2)))
    fast = attention_cost(spec, get_preset("default"), schedule="serial")
    assert float(fast.layer_cycles) <= float(c.layer_cycles)


def test_vectorised_equals_scalar():
    cfg = get_preset("default")
    spec = MethodSpec.for_hikv(cfg.policy)
    ns = np.array([512, 2048, 4000])       # within sorter.max_n (Config checks it)
    lanes = np.array([32, 64, 512])
    nodes = np.array([45, 28, 7])
    mem = np.array(["hbm2", "ddr3", "lpddr4"])
    vec = attention_cost(spec, cfg, Overrides(context=ns, pe_lanes=lanes, tech_nm=nodes,
                                              memory=mem))
    for i in range(3):
        c1 = cfg.replace(context=int(ns[i]), accel=dataclasses.replace(
            cfg.accel, pe_lanes=int(lanes[i]), tech_nm=int(nodes[i]),
            memory=MemoryType(mem[i])))
        one = attention_cost(spec, c1)
        assert vec.time_s[i] == pytest.approx(float(one.time_s))
        assert vec.energy_j[i] == pytest.approx(float(one.energy_j))
        assert vec.bytes_burst[i] == pytest.approx(float(one.bytes_burst))


def test_energy_parts_are_counts_times_tables():
    cfg = get_preset("paper")
    for spec in baseline_specs(cfg):
        c = attention_cost(spec, cfg)
        parts = c.energy_parts_j
        assert set(parts) == {"dram", "sram", "mac", "softmax", "sorter", "loader", "scorer"}
        assert float(parts["dram"]) == pytest.approx(
            float(c.bytes_burst) * E.dram_energy_j_per_byte(cfg.accel.memory))
        assert float(parts["mac"]) == pytest.approx(float(E.mac_energy_j(c.macs, 28)))
        assert float(c.energy_j) == pytest.approx(sum(float(v) for v in parts.values()))
        assert all(float(v) >= 0 for v in parts.values())
        assert float(c.time_s) >= float(c.roofline_s)


def test_work_of_the_selecting_methods():
    cfg = get_preset("paper")
    specs = {s.method: s for s in baseline_specs(cfg)}
    G, d, n = cfg.model.group, cfg.layout.head_dim, cfg.context
    q = step_work(specs[Method.QUEST], cfg)
    pages = -(-(n + 1) // 16)
    assert float(q.score_macs) == G * pages * 2 * d
    assert [j.mode for j in q.sorts] == ["stage1"]
    s = step_work(specs[Method.SPARQ], cfg)
    assert float(s.score_macs) == G * n * specs[Method.SPARQ].channels
    assert specs[Method.SPARQ].channels == d // 4        # the operating point: r = d / 4
    assert sorted(j.mode for j in s.sorts) == ["stage1", "stage2"]
    h = step_work(specs[Method.HIKV], cfg)
    assert float(h.select_bytes) == float(h.bytes.meta_burst) > 0
    assert float(h.attended) == float(h.bytes.tokens) + 1


def test_override_errors():
    cfg = get_preset("default")
    spec = MethodSpec.for_hikv(cfg.policy)
    with pytest.raises(ParamError, match="keep_v"):
        attention_cost(spec, cfg, Overrides(keep_v=np.array([80]), head_dim=np.array([64])))
    with pytest.raises(ParamError, match="tech_nm"):
        attention_cost(spec, cfg, Overrides(tech_nm=np.array([22])))
    with pytest.raises(ParamError, match="context"):
        attention_cost(spec, cfg, Overrides(context=np.array([0])))


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_preset_lanes_reach_the_roofline_target_at_the_assumed_clock(preset):
    """The presets' query-aware HiKV reaches >= 90 % of its bytes roofline with every block at
    ``accel.clock_hz`` (the estimated clocks need synthesis: :mod:`hikv.sim.cost.clocks`),
    with the scoring unit as wide as the sorter (hw/scorer_sorter.py chains
    them only then); half the lanes do not reach it."""
    from hikv.sim.explore.tradeoff import ROOFLINE_TARGET

    cfg = get_preset(preset)
    assert cfg.scorer.lanes == cfg.sorter.lanes, preset
    spec = MethodSpec.for_hikv(cfg.policy)
    frac = float(attention_cost(spec, cfg).bytes_bound_fraction)
    assert frac >= ROOFLINE_TARGET, (preset, frac)
    half = cfg.sorter.lanes // 2
    frac_half = float(attention_cost(spec, cfg, Overrides(sorter_lanes=half,
                                                          scorer_lanes=half)
                                     ).bytes_bound_fraction)
    assert frac_half < ROOFLINE_TARGET, (preset, half, frac_half)
