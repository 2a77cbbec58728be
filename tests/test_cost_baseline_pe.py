"""The baseline accelerator's MAC lane and exp unit (hw/baseline_pe.py) against their bit-exact
references (model/refs/baseline_pe.py), and the references against real arithmetic."""

from __future__ import annotations

import math
import random
import struct

from amaranth_sim import run_sim

from hikv.hw.baseline_pe import ExpUnit, Fp16MacLane
from hikv.model.refs import baseline_pe as ref

SEED = 20240611


def _rand16(rng: random.Random) -> int:
    # mostly moderate exponents, sometimes zero/subnormal/huge ones
    e = rng.randrange(0, 32) if rng.random() < 0.15 else rng.randrange(8, 22)
    return (rng.randrange(2) << 15) | (e << 10) | rng.randrange(1024)


def test_mac_lane_matches_reference():
    rng = random.Random(SEED)
    ins = []
    for _ in range(30):
        n = rng.randrange(1, 9)
        ins += [(_rand16(rng), _rand16(rng), i == 0) for i in range(n)]
    expect, acc = [], 0
    for a, b, clear in ins:
        acc = ref.mac(0 if clear else acc, a, b)
        expect.append(acc)
    dut = Fp16MacLane()
    got: list[int] = []

    async def bench(ctx):
        for a, b, clear in ins:
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.valid, 1)
            ctx.set(dut.clear, clear)
            await ctx.tick()
            got.append(ctx.get(dut.acc))
        ctx.set(dut.valid, 0)
        ctx.set(dut.clear, 1)
        for _ in range(ref.MAC_LATENCY):
            await ctx.tick()
            got.append(ctx.get(dut.acc))

    run_sim(dut, bench)
    obs = got[ref.MAC_LATENCY - 1:]
    assert len(obs) >= len(expect)
    for i, (e, g) in enumerate(zip(expect, obs, strict=False)):
        assert e == g, (f"seed {SEED} input {i} {tuple(hex(x) for x in ins[i][:2])}: "
                        f"expected {e:#010x}, got {g:#010x}")
    assert len({x for x in expect}) > len(expect) // 2      # not a trivial stream
    assert got[-1] == 0                                      # clear without valid zeroes


def test_exp_unit_matches_reference():
    rng = random.Random(SEED + 1)
    xs = [rng.randrange(1 << 16) for _ in range(200)]
    xs += [0, 0x3C00, 0x7BFF, 0x0400, 0x4B00, 0x4A00, 0x4880, 0x8000, 0x0001]
    dut = ExpUnit()
    got: list[tuple[int, int]] = []

    async def bench(ctx):
        for x in xs + [0] * ref.EXP_LATENCY:
            ctx.set(dut.x, x)
            ctx.set(dut.valid, 1)
            await ctx.tick()
            got.append((ctx.get(dut.y), ctx.get(dut.y_valid)))

    run_sim(dut, bench)
    obs = got[ref.EXP_LATENCY - 1:]
    for x, (y, valid) in zip(xs, obs, strict=False):
        assert valid == 1
        assert y == ref.exp_neg(x), f"seed {SEED + 1} x={x:#06x}: expected " \
                                    f"{ref.exp_neg(x):#06x}, got {y:#06x}"


def test_exp_reference_accuracy_over_all_fp16():
    worst = 0.0
    for x in range(0x7C00):
        true = math.exp(-ref.fp16_to_float(x))
        if true > 2.0**-13:
            got = ref.fp16_to_float(ref.exp_neg(x))
            worst = max(worst, abs(got - true) / true)
    assert worst < 1e-3
    assert ref.exp_neg(0x7BFF) == 0          # exp(-65504) flushes to zero
    assert ref.exp_neg(0) == 0x3C00          # exp(0) = 1


def test_mac_reference_against_exact_arithmetic():
    rng = random.Random(SEED + 2)
    for _ in range(2000):
        a = ref.float_to_fp16(rng.uniform(-4, 4))
        b = ref.float_to_fp16(rng.uniform(-4, 4))
        acc = struct.unpack("<I", struct.pack("<f", rng.uniform(-100, 100)))[0]
        exact = ref.fp32_to_float(acc) + ref.fp16_to_float(a) * ref.fp16_to_float(b)
        got = ref.fp32_to_float(ref.mac(acc, a, b))
        # truncation of the aligned operand and of the result: within 2 ulp of binary32
        assert abs(got - exact) <= 2 * 2.0**-23 * max(abs(exact), abs(got)) + 1e-30
    # the product is exact in binary32
    p = ref.fp16_product(ref.float_to_fp16(1.5), ref.float_to_fp16(-2.25))
    assert ref.fp32_to_float(ref.fp32_add(0, p)) == -3.375
    assert ref.fp16_product(0, 0x3C00) is None
