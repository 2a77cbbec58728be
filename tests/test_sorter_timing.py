"""The sorter's timing contract (hikv.hw.sorter_timing): a pure, stdlib-only function of the
parameters. The cocotb regression checks it against the RTL job by job; here its algebra."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from hikv.hw.sorter_timing import SorterTiming, ceil_log2, sorter_compares, sorter_cycles
from hikv.params import ParamError, SorterParams
from hikv.presets import PRESETS


def test_importable_without_amaranth_or_torch():
    code = ("import sys, hikv.hw.sorter_timing as t; "
            "bad = [m for m in ('amaranth', 'torch', 'cocotb') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_ceil_log2():
    assert [ceil_log2(n) for n in (1, 2, 3, 4, 5, 8, 9)] == [0, 1, 2, 2, 3, 3, 4]
    with pytest.raises(ValueError):
        ceil_log2(0)


def test_geometry_of_presets():
    t = SorterTiming.from_params(PRESETS["tiny"].sorter)  # P=4, W=8, max_n=64, k<=16, d<=16
    assert (t.item_width, t.presort_stages, t.levels, t.list_rows_max) == (15, 3, 2, 4)
    assert t.merge_pipeline == 2 and t.min_run_levels == 2
    assert t.latency == 3 + (2 + 2) * 2 + 5 + 2
    # hand-computed at 8 and 16 lanes (the presets have 32)
    d = SorterTiming.from_params(dataclasses.replace(PRESETS["default"].sorter, lanes=8))
    assert (d.presort_stages, d.levels, d.list_rows_max, d.ring_rows) == (6, 6, 64, 512)
    p = SorterTiming.from_params(dataclasses.replace(PRESETS["paper"].sorter, lanes=16))
    assert (p.presort_stages, p.levels, p.list_rows_max) == (10, 8, 256)
    for cfg in PRESETS.values():
        t = SorterTiming.from_params(cfg.sorter)
        assert t.ring_rows >= t.max_rows
        assert t.summary()["memory_bits_total"] == sum(t.memory_bits().values())


def test_stage1_formula_hand_computed():
    t = SorterTiming.from_params(PRESETS["tiny"].sorter)
    # n=64, k=16: D=16 rows, L=min(max(1,ceil_log2(4)), ceil_log2(16))=2, K=4
    # first pass D + K*(ceil(D/K)-1) = 16 + 12; + K + floor(15/4) + latency
    assert t.stage1_cycles(64, 16) == 16 + 12 + 4 + 3 + t.latency
    # n=1: D=1, L=0, K=1
    assert t.stage1_cycles(1, 1) == 1 + 0 + 1 + 0 + t.latency
    # k > n selects all: the threshold is the n-th item
    assert t.stage1_cycles(5, 16) == 2 + 2 * 0 + 2 + 1 + t.latency


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_stage1_meets_target_2n_over_p(name):
    """With D a multiple of K the count is exactly 2N/P + floor((k-1)/P) + latency, and it is
    never more than 2N/P + 3k/P + latency (the design target is about 2N/P + k/P)."""
    t = SorterTiming.from_params(PRESETS[name].sorter)
    p = t.lanes
    for n in sorted({min(p * 64, t.max_n), t.max_n, t.max_n // 2}):
        for k in (1, p, t.max_k // 2, t.max_k):
            cyc = t.stage1_cycles(n, k)
            kr = 1 << t.stage1_levels(n, k)
            rows = -(-n // p)
            if rows % kr == 0:
                assert cyc == 2 * rows + (min(k, n) - 1) // p + t.latency
            assert cyc <= 2 * rows + 3 * -(-k // p) + t.latency


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_stage2_one_vector_per_ceil_d_over_p(name):
    t = SorterTiming.from_params(PRESETS[name].sorter)
    for d in (1, t.lanes, t.max_vec // 2 + 1, t.max_vec):
        r = max(1, d // 2)
        one = t.stage2_cycles(1, d, r)
        for count in (2, 17, 100):
            assert t.stage2_cycles(count, d, r) - one == (count - 1) * t.stage2_interval(d)
        assert t.stage2_interval(d) == -(-d // t.lanes)


def test_job_range_errors_name_the_parameter():
    t = SorterTiming.from_params(SorterParams(lanes=4, key_width=8, max_n=64, max_k=16,
                                              max_vec=16))
    with pytest.raises(ParamError, match=r"k = 17 is out of range: allowed \[1, 16\]"):
        t.stage1_cycles(64, 17)
    with pytest.raises(ParamError, match=r"n \(Stage I count\) = 65"):
        t.stage1_cycles(65, 1)
    with pytest.raises(ParamError, match=r"d \(vector length\) = 0"):
        t.stage2_cycles(1, 0, 1)
    with pytest.raises(ParamError, match="count"):
        t.stage2_cycles(0, 4, 1)
    with pytest.raises(ParamError, match="must be an integer"):
        t.stage1_cycles(4.0, 1)  # type: ignore[arg-type]


def test_cost_model_adapters():
    prm = PRESETS["default"].sorter
    t = SorterTiming.from_params(prm)
    assert sorter_cycles(prm, "stage1", n=2048, k=220) == t.stage1_cycles(2048, 220)
    assert sorter_cycles(prm, "stage2", d=64, k=48, count=256) == t.stage2_cycles(256, 64, 48)
    assert sorter_cycles(prm, "stage1", n=0, k=5) == 0
    assert sorter_compares(prm, "stage2", d=64, k=48, count=0) == 0
    with pytest.raises(ParamError, match="sorter mode"):
        sorter_cycles(prm, "stage3", n=4, k=1)


def test_compares_count_every_unit_once_per_step():
    t = SorterTiming.from_params(PRESETS["tiny"].sorter)  # P=4: S=3, levels=2, 4 + 2*2 units
    rows, steps = 16, 4 + 4 * 3          # n=64, k=16: D=16, K=4 -> reducer 4 + 4*3 steps
    per_row = 2 * 3 + 2 * 8 + 4          # presort + tree levels + select
    assert t.merge_units == 8
    assert t.stage1_compares(64, 16) == rows * per_row + steps * 8
    assert t.stage2_compares(3, 16, 5) == 12 * per_row + 12 * 8


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_unaligned_cliff_is_bounded(name):
    """One row past a multiple of the run length K costs a whole run: the cliff is bounded by
    K - 1 cycles over 2D + floor((k-1)/P) + latency (docs/sorter.md, "Unaligned `n`")."""
    t = SorterTiming.from_params(PRESETS[name].sorter)
    p = t.lanes
    for k in sorted({1, p, t.max_k // 3 + 1, t.max_k}):
        for n in range(1, t.max_n + 1, max(1, t.max_n // 97)):
            rows = -(-n // p)
            kr = 1 << t.stage1_levels(n, k)
            extra = t.stage1_cycles(n, k) - (2 * rows + (min(k, n) - 1) // p + t.latency)
            assert extra == kr * -(-rows // kr) - rows, (name, n, k)
            assert 0 <= extra <= kr - 1, (name, n, k)
