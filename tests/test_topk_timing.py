"""The top-k engine's timing contract (hikv.hw.topk_timing), its parameters, and the radix-select
algorithm it implements, modelled naively beside the golden reference. The cocotb regression
(rtl_tests/test_topk_rtl.py) checks the formula against the RTL job by job; here its algebra."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys

import pytest

from hikv.hw.topk_timing import TopKTiming, topk_compares, topk_cycles, topk_digit_compares
from hikv.model.refs.sorter import stage1_topk
from hikv.params import ParamError, SorterKind, SorterParams, config_from_json, config_to_json
from hikv.presets import PRESETS, get_preset, with_overrides


def test_importable_without_amaranth_or_torch():
    code = ("import sys, hikv.hw.topk_timing as t; "
            "bad = [m for m in ('amaranth', 'torch', 'cocotb') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_geometry_of_presets():
    t = TopKTiming.from_params(PRESETS["tiny"].sorter)      # P=4, W=8, b=4
    assert (t.digits, t.buckets, t.counters, t.max_rows, t.row_bits) == (2, 16, 15, 16, 56)
    assert t.latency == 4 * 2 + 4
    d = TopKTiming.from_params(PRESETS["default"].sorter)   # P=32, W=16, max_n=4096
    assert (d.digits, d.max_rows, d.row_bits) == (4, 128, 32 * (16 + 12))
    assert d.memory_bits() == {"keys": 128 * 32 * 28}
    # a digit wider than the key is the key
    w = TopKTiming.from_params(SorterParams(key_width=3, digit_bits=8, max_n=64, max_k=8))
    assert (w.digit_bits, w.digits, w.padded_width) == (3, 1, 3)
    # a key that is not a whole number of digits is padded below
    o = TopKTiming.from_params(SorterParams(key_width=10, digit_bits=4))
    assert (o.digits, o.padded_width) == (3, 12)
    for cfg in PRESETS.values():
        t = TopKTiming.from_params(cfg.sorter)
        assert t.summary()["memory_bits_total"] == sum(t.memory_bits().values())


def test_stage1_formula_hand_computed():
    t = TopKTiming.from_params(PRESETS["tiny"].sorter)
    # n=64: D=16 rows; load 16 + 3, one digit pass 16 + 4, emit 16 + 5
    assert t.stage1_cycles(64, 16) == 19 + 20 + 21 == 60
    assert t.stage1_cycles(1, 1) == (1 + 3) + (1 + 4) + (1 + 5)
    # k does not change the count (k > n selects every key)
    assert {t.stage1_cycles(5, k) for k in range(1, 17)} == {3 * 2 + 12}
    d = TopKTiming.from_params(PRESETS["default"].sorter)
    assert d.stage1_cycles(4096, 512) == 5 * 128 + 4 * 4 + 4
    assert d.stage1_passes(4096, 512) == 5


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_cost_model_convention(name):
    p = PRESETS[name].sorter
    t = TopKTiming.from_params(p)
    assert topk_cycles(p, "stage1", n=0, k=0) == 0
    assert topk_cycles(p, "stage1", n=p.max_n, k=p.max_k) == t.stage1_cycles(p.max_n, p.max_k)
    assert topk_compares(p, "stage1", n=p.lanes, k=1) == p.lanes * (t.digits + 2)
    assert topk_digit_compares(p, "stage1", n=p.lanes, k=1) == p.lanes * t.digits * 15
    with pytest.raises(ParamError, match="stage1"):
        topk_cycles(p, "stage2", n=16, k=1)
    with pytest.raises(ParamError, match="Stage II"):
        topk_cycles(p, "stage1", n=4, k=1, d=16)


@pytest.mark.parametrize("n,k,words", [(0, 1, ["n (Stage I count)", "[1,"]),
                                       (65, 1, ["n (Stage I count)", "65"]),
                                       (4, 0, ["k", "[1, 16]"]), (4, 17, ["k", "17"]),
                                       (4.0, 1, ["integer"])])
def test_rejected_jobs(n, k, words):
    t = TopKTiming.from_params(PRESETS["tiny"].sorter)
    with pytest.raises(ParamError) as exc:
        t.stage1_cycles(n, k)
    for w in words:
        assert w in str(exc.value)


def test_kind_and_digit_bits_are_parameters():
    assert get_preset("tiny").sorter.kind is SorterKind.RADIX      # each preset's own engine
    cfg = get_preset("default")
    assert cfg.sorter.kind is SorterKind.MERGE and cfg.sorter.digit_bits == 4
    radix = with_overrides(cfg, ["sorter.kind=radix", "sorter.digit_bits=2"])
    assert radix.sorter.kind is SorterKind.RADIX and radix.sorter.digit_bits == 2
    assert config_from_json(config_to_json(radix)) == radix
    with pytest.raises(ParamError, match="kind.*'merge', 'radix'"):
        with_overrides(cfg, ["sorter.kind=bitonic"])
    assert TopKTiming.from_params(radix.sorter).digits == 8      # 16-bit keys, 2-bit digits


def _radix_select(keys: list[int], k: int, width: int, b: int) -> list[int]:
    """The engine's algorithm, naively: positions selected, in arrival order."""
    digits = -(-width // b)
    pad = digits * b - width
    r, prefix = min(k, len(keys)), 0
    for j in range(digits):
        shift = (digits - 1 - j) * b
        live = [(x << pad) for x in keys if (x << pad) >> (shift + b) == prefix]
        ge = [sum(1 for x in live if (x >> shift) & ((1 << b) - 1) >= g)
              for g in range((1 << b) + 1)]
        t = max(g for g in range(1 << b) if ge[g] >= r)
        r -= ge[t + 1]
        prefix = (prefix << b) | t
    thr = prefix >> pad
    out, ties = [], r
    for i, x in enumerate(keys):
        if x > thr or (x == thr and ties > 0):
            ties -= x == thr
            out.append(i)
    return out


@pytest.mark.parametrize("b", [1, 2, 3, 4, 8])
def test_radix_select_is_the_golden_topk(b):
    """The algorithm the RTL implements selects exactly stage1_topk's keys for any digit
    width, including widths that do not divide the key."""
    rng = random.Random(7 + b)
    for trial in range(300):
        width = rng.choice([1, 5, 8, 10, 16])
        n = rng.randint(1, 70)
        pool = [rng.randint(0, (1 << width) - 1) for _ in range(rng.choice([1, 2, 3, n]))]
        keys = [rng.choice(pool) for _ in range(n)]
        k = rng.randint(1, n + 3)
        want = [i for _, i in stage1_topk(keys, list(range(n)), k)]
        got = _radix_select(keys, k, width, min(b, width))
        assert got == want, f"b={b} trial={trial} width={width} keys={keys} k={k}"


def test_formula_scales_with_digits():
    base = dataclasses.replace(PRESETS["default"].sorter)
    for b, g in ((1, 16), (2, 8), (4, 4), (8, 2)):
        t = TopKTiming.from_params(dataclasses.replace(base, digit_bits=b))
        assert t.digits == g
        assert t.stage1_cycles(4096, 512) == (g + 1) * 128 + 4 * g + 4


def test_cost_record_is_the_contract():
    """The cost model's record of the engine: its cycles are the contract's, its clock the
    sorter's (it takes the sorter's Stage I jobs), one instance, not counted with the merge
    sorter."""
    from hikv.sim.cost.blocks import block_cost
    from hikv.sim.cost.engines import with_kind

    cfg = with_kind(get_preset("tiny"), "merge")
    r = block_cost("topk", cfg)
    assert r.cycles("stage1", n=64, k=16) == 60 and r.instances == 1 and not r.used
    assert r.clock_hz == block_cost("sorter", cfg).clock_hz and "sorter" in r.clock_source
    e = r.energy_j(compare=topk_compares(cfg.sorter, "stage1", n=64, k=16),
                   digit_compare=topk_digit_compares(cfg.sorter, "stage1", n=64, k=16))
    assert e > 0 and r.energy_per_action_j["digit_compare"] <= r.energy_per_action_j["compare"]
