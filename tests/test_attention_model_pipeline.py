"""The pipelined layer schedule of hikv.sim.cost.attention_model (KV heads of a layer pipelined over
the memory channel, loader pool, scoring unit, PE and softmax lanes and sorter): its bounds
against the bytes roofline, every unit's busy time and the serial schedule, and the buffers
it adds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hikv.params import Method, MethodSpec, ParamError
from hikv.presets import baseline_specs, get_preset
from hikv.sim.cost.attention_model import (
    Overrides,
    attention_cost,
    pipeline_buffers,
    pipelined_layer_cycles,
)


def _specs(cfg):
    return [MethodSpec(Method.FULL), *baseline_specs(cfg)[1:], MethodSpec.for_hikv(cfg.policy)]


def _random_point(rng, cfg):
    a = cfg.accel
    return Overrides(
        context=int(rng.integers(cfg.policy.budget + 1, 4 * cfg.context)),
        sorter_lanes=int(rng.choice([2, 4, 8, 16, 32, 64])),
        scorer_lanes=int(rng.choice([4, 8, 16, 32, 64])),
        pe_lanes=int(rng.choice([64, 256, 1024, 4096])),
        mem_bandwidth_bytes_per_s=float(a.mem_bandwidth_bytes_per_s * rng.uniform(0.25, 4)))


@pytest.mark.parametrize("preset", ["tiny", "default", "paper"])
def test_pipelined_between_every_bound_and_the_serial_schedule(preset):
    """Never below the bytes roofline or any unit's busy time (x KV heads), never above the
    serial schedule; on random design points for every method."""
    seed = 1234
    rng = np.random.default_rng(seed)
    cfg = get_preset(preset)
    H, L = cfg.model.kv_heads, cfg.model.layers
    clock = cfg.accel.clock_hz
    for i in range(12):
        ov = _random_point(rng, cfg)
        for spec in _specs(cfg):
            c = attention_cost(spec, cfg, ov)
            s = attention_cost(spec, cfg, ov, schedule="serial")
            msg = f"seed {seed}, point {i} {ov}, {spec.label}"
            layer = float(c.layer_cycles)
            assert layer <= float(s.layer_cycles) * (1 + 1e-12), msg
            assert float(c.serial_layer_cycles) == pytest.approx(float(s.layer_cycles)), msg
            assert float(c.time_s) * (1 + 1e-12) >= float(c.bytes_bound_s), msg
            assert layer * L / clock == pytest.approx(float(c.time_s)), msg
            for unit, busy in c.busy_cycles.items():
                assert layer * (1 + 1e-12) >= H * float(busy), (msg, unit)
            # the same bytes, MACs and, apart from the pipeline's buffers, the same energy
            assert float(c.bytes_burst) == float(s.bytes_burst), msg
            assert float(c.energy_j) >= float(s.energy_j), msg


@pytest.mark.parametrize("preset", ["default", "paper"])
def test_one_kv_head_has_nothing_to_overlap(preset):
    """With H = 1 KV head per layer the pipelined schedule is the serial one."""
    cfg = get_preset(preset)
    m = cfg.model
    one = cfg.replace(model=dataclasses.replace(m, kv_heads=1, q_heads=m.group))
    for spec in _specs(one):
        c = attention_cost(spec, one)
        s = attention_cost(spec, one, schedule="serial")
        assert float(c.layer_cycles) == pytest.approx(float(s.layer_cycles)), spec.label


def test_memory_latency_is_paid_once_per_layer():
    """Full KV on `default` (memory-bound, no select or sort): the layer is the larger of the
    memory channel's bound (H x bytes / bandwidth + one latency + the drain) and the loader
    pool's (H x one loader's job, its latency included, over the instances + the drain); the
    serial schedule pays the latency and the drain once per head."""
    cfg = get_preset("default")
    c = attention_cost(MethodSpec(Method.FULL), cfg)
    s = attention_cost(MethodSpec(Method.FULL), cfg, schedule="serial")
    H = cfg.model.kv_heads
    lat = cfg.accel.mem_latency_s * cfg.accel.clock_hz
    mem, ld = float(c.busy_cycles["memory"]), float(c.busy_cycles["loaders"])
    drain = float(c.attend_cycles) - max(mem + lat, _split_loader(cfg, c))
    assert 0 < drain < 50
    assert mem < ld < mem + lat                  # a loader's latency, shared by the pool
    assert float(c.layer_cycles) == pytest.approx(max(lat + H * mem, H * ld) + drain)
    assert float(s.layer_cycles) - float(c.layer_cycles) >= (H - 1) * drain
    assert float(c.bytes_bound_fraction) > 0.95 > float(s.bytes_bound_fraction)


def _split_loader(cfg, c):
    """The serial schedule's loader term of the attend phase (the phase split over the
    instances), recomputed from the timing model."""
    from hikv.hw.blocks import loader_instances
    from hikv.sim.cost.timing import RtlTiming

    inst = loader_instances(cfg)
    w = c.work
    lat = cfg.accel.mem_latency_s * cfg.accel.clock_hz
    return float(RtlTiming().loader_cycles(
        cfg.loader, cfg.layout, bytes=float(w.bytes.burst) / inst,
        requests=np.ceil(float(w.bytes.requests) / inst), mem_latency_cycles=lat))


def test_scorer_bound_hikv_follows_the_scorer_rule():
    """`default`'s query-aware HiKV with 8 scorer and 8 sorter lanes (a quarter of its
    32): the scoring unit (G jobs of n tokens per head) is the bottleneck: H x scorer + the last
    head's sort and attend."""
    cfg = get_preset("default")
    cfg = cfg.replace(sorter=dataclasses.replace(cfg.sorter, lanes=8),
                      scorer=dataclasses.replace(cfg.scorer, lanes=8))
    c = attention_cost(MethodSpec.for_hikv(cfg.policy), cfg)
    H = cfg.model.kv_heads
    assert c.bottleneck == "scorer"
    assert float(c.layer_cycles) == pytest.approx(
        H * float(c.scorer_cycles) + float(c.sort_cycles) + float(c.attend_cycles))
    # more scorer and sorter lanes move it to the loaders / memory: >= 90 % of the bytes bound
    fast = attention_cost(MethodSpec.for_hikv(cfg.policy), cfg,
                          Overrides(scorer_lanes=32, sorter_lanes=16))
    assert fast.bottleneck in ("memory", "loaders")
    assert float(fast.bytes_bound_fraction) >= 0.9
    # the binding bound, not the busiest unit: with P = 8 the sorter's a1 + H b + a2 binds
    mid = attention_cost(MethodSpec.for_hikv(cfg.policy), cfg, Overrides(scorer_lanes=16))
    assert mid.bottleneck == "sorter"
    assert float(mid.layer_cycles) == pytest.approx(float(mid.bound_cycles["sorter"]))
    assert attention_cost(MethodSpec(Method.FULL), cfg, schedule="serial").bottleneck == ""


def test_pipelined_layer_cycles_vectorised_and_bounds():
    rng = np.random.default_rng(7)
    n = 50
    sel, sort, att = (rng.uniform(0, 1000, n) for _ in range(3))
    busy = {k: rng.uniform(0, 500, n) for k in
            ("memory", "loaders", "scorer", "pe_lanes", "softmax", "sorter")}
    busy["sorter"] = sort
    H = 4
    serial = np.maximum(H * (sel + att), np.where(sort > 0, sel + H * sort + att, 0.0))
    out = pipelined_layer_cycles(H, sel, sort, att, busy, 100.0, 5.0, serial)
    assert out.shape == (n,)
    assert (out <= serial).all(), "seed 7"
    assert (out >= np.minimum(serial, sel + sort + att)).all(), "seed 7"


def test_pipeline_buffers_from_the_sorter_and_priced():
    cfg = get_preset("default")
    so = cfg.sorter
    buf = pipeline_buffers(cfg)
    assert buf["score"] == 2 * so.max_n * so.key_width // 8
    assert buf["index"] == -(-2 * so.max_k * so.index_width // 8)
    # the buffers' accesses are in the SRAM energy of a method that sorts, not of full KV
    spec = MethodSpec.for_hikv(cfg.policy)
    c, s = attention_cost(spec, cfg), attention_cost(spec, cfg, schedule="serial")
    assert float(c.energy_parts_j["sram"]) > float(s.energy_parts_j["sram"])
    f = MethodSpec(Method.FULL)
    assert float(attention_cost(f, cfg).energy_j) == float(
        attention_cost(f, cfg, schedule="serial").energy_j)


def test_unknown_schedule_is_rejected():
    cfg = get_preset("tiny")
    with pytest.raises(ParamError, match="schedule"):
        attention_cost(MethodSpec(Method.FULL), cfg, schedule="overlapped")
