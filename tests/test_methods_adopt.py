"""KVCache.adopt_prefill (one prompt attention pass shared by several caches) leaves exactly
the state KVCache.prefill leaves: the same decode outputs and byte accounts afterwards."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hikv.method_spec import Stage1Scorer, Stage1Variant, Stage2Kind, Stage2Rule
from hikv.model.methods.attention import causal_prefill
from hikv.model.methods.registry import make_cache
from hikv.params import HiKVPolicy, Method, MethodSpec, ParamError
from hikv.presets import get_preset

SEED = 99
CFG = get_preset("tiny")
POL = HiKVPolicy(budget=16, sinks=2, recent=4, obs_window=4, pool_kernel=3, compact_interval=4,
                 v_rule=Stage2Rule())

SPECS = [
    MethodSpec(),
    MethodSpec(Method.H2O, budget=12, recent=4),
    MethodSpec(Method.SNAPKV, budget=12, recent=4),
    MethodSpec(Method.QUEST, budget=12, recent=4, page_tokens=4),
    MethodSpec(Method.SPARQ, budget=12, recent=4, channels=4),
    MethodSpec(Method.DOUBLE_SPARSITY, budget=12, recent=4, channels=4),
    MethodSpec.for_hikv(dataclasses.replace(POL, stage1=Stage1Variant.EVICT)),
    MethodSpec.for_hikv(dataclasses.replace(POL, v_rule=Stage2Rule(Stage2Kind.STATIC, 12))),
    MethodSpec.for_hikv(dataclasses.replace(POL, scorer=Stage1Scorer.LOWBIT_KEYS,
                                            k_rule=Stage2Rule(Stage2Kind.QUERY_CHANNELS, 8))),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.label)
def test_adopt_prefill_equals_prefill(spec: MethodSpec) -> None:
    g = torch.Generator().manual_seed(SEED)
    n, steps = 40, 12
    q = torch.randn(4, n + steps, 16, generator=g) * 2
    k = torch.randn(2, n + steps, 16, generator=g) * 2
    v = torch.randn(2, n + steps, 16, generator=g)
    a = make_cache(spec, CFG)
    b = make_cache(spec, CFG)
    out_a = a.prefill(q[:, :n], k[:, :n], v[:, :n])
    want_sums, window = b.prefill_stats
    out_b, sums, obs = causal_prefill(q[:, :n], k[:, :n], v[:, :n], b.scale,
                                      col_sums=want_sums, window=window)
    b.adopt_prefill(q[:, :n], k[:, :n], v[:, :n], sums, obs)
    assert torch.equal(out_a, out_b)
    for t in range(n, n + steps):
        oa, acc_a = a.decode(q[:, t: t + 1], k[:, t: t + 1], v[:, t: t + 1])
        ob, acc_b = b.decode(q[:, t: t + 1], k[:, t: t + 1], v[:, t: t + 1])
        assert torch.equal(oa, ob), f"{spec.label} seed {SEED} step {t}"
        assert acc_a == acc_b, f"{spec.label} seed {SEED} step {t}"


def test_adopt_prefill_rejects_missing_statistics() -> None:
    g = torch.Generator().manual_seed(SEED)
    q, k, v = torch.randn(4, 8, 16, generator=g), torch.randn(2, 8, 16, generator=g), \
        torch.randn(2, 8, 16, generator=g)
    h2o = make_cache(MethodSpec(Method.H2O, budget=4, recent=2), CFG)
    with pytest.raises(ParamError, match="col_sums=True"):
        h2o.adopt_prefill(q, k, v, None, None)
    full = make_cache(MethodSpec(), CFG)
    full.adopt_prefill(q, k, v, None, None)
    with pytest.raises(ParamError, match="once per cache"):
        full.adopt_prefill(q, k, v, None, None)
