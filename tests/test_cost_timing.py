"""The sorter/loader timing interface and its provisional implementation (hikv.sim.timing)."""

from __future__ import annotations

import numpy as np
import pytest

from hikv.params import KVLayout, LoaderParams, ParamError, SorterParams
from hikv.sim import timing as T


def test_provisional_is_a_timing_model_and_says_so():
    m = T.get_timing("provisional")
    assert isinstance(m, T.TimingModel)
    assert m.provisional and "PROVISIONAL" in m.source
    assert T.default_timing().name in T.TIMING_MODELS
    with pytest.raises(ParamError, match="unknown timing model"):
        T.get_timing("nope")


def test_provisional_sorter_formulas():
    m = T.ProvisionalTiming()
    p = SorterParams(lanes=8, key_width=16, max_n=4096, max_k=512, max_vec=128)
    lat = 3 * 4 / 2 + 2                    # log2 8 = 3: depth 6, plus 2
    assert m.sorter_cycles(p, "stage1", n=1000, k=100) == 2 * 125 + 13 + lat
    assert m.sorter_cycles(p, "stage2", d=64, k=48, count=5) == 5 * 8 + lat
    assert m.sorter_cycles(p, "stage1", n=0, k=0) == 0
    np.testing.assert_allclose(m.sorter_cycles(p, "stage1", n=np.array([8, 16]), k=8),
                               [2 + 1 + lat, 4 + 1 + lat])
    assert m.sorter_compares(p, "stage1", n=100, k=16) == pytest.approx(100 * (3 + 4))
    with pytest.raises(ParamError, match="sorter mode"):
        m.sorter_cycles(p, "stage3", n=1, k=1)


def test_provisional_loader_formula():
    m = T.ProvisionalTiming()
    ld = LoaderParams(data_width=128, max_burst_beats=16, max_outstanding=4)
    lay = KVLayout()
    # beat-bound: 4096 B = 256 beats; 16 requests / 4 outstanding x 50 = 200 < 256
    assert m.loader_cycles(ld, lay, bytes=4096, requests=16, mem_latency_cycles=50) == \
        256 + 50 + 2
    # latency-bound: 64 requests / 4 x 100 = 1600 > 256 beats
    assert m.loader_cycles(ld, lay, bytes=4096, requests=64, mem_latency_cycles=100) == \
        1600 + 100 + 2
    assert m.loader_cycles(ld, lay, bytes=0, requests=0, mem_latency_cycles=100) == 0
