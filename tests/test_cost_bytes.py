"""Closed-form bytes per step (hikv.sim.cost.closed_form.step_bytes, the operating point) against
the golden model's byte accounts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from hikv.method_spec import Stage1Scorer, Stage1Variant, Stage2Kind, Stage2Rule
from hikv.model.methods.registry import make_cache
from hikv.params import Method, MethodSpec, ParamError
from hikv.presets import get_preset
from hikv.sim.cost.closed_form import Geometry, step_bytes

FIELDS = ("k_ideal", "v_ideal", "meta_ideal", "k_burst", "v_burst", "meta_burst", "resident",
          "tokens")
N = 45          # prompt tokens (odd, not a multiple of the page size)
SEED = 7


def _cfg(layout: str):
    base = get_preset("tiny")
    if layout == "packed":       # records share bursts: align < burst
        return dataclasses.replace(base, layout=dataclasses.replace(
            base.layout, burst_bytes=32, align_bytes=4))
    return base


def _golden(spec, cfg, steps=1, n=N, seed=SEED):
    """Mean over ``steps`` decode steps and the KV heads of the golden byte accounts."""
    g = torch.Generator().manual_seed(seed)
    m, d = cfg.model, cfg.layout.head_dim
    c = make_cache(spec, cfg)
    c.prefill(torch.randn(m.q_heads, n, d, generator=g), torch.randn(m.kv_heads, n, d,
                                                                       generator=g),
              torch.randn(m.kv_heads, n, d, generator=g))
    acc = {f: 0.0 for f in FIELDS}
    for _ in range(steps):
        _, accounts = c.decode(torch.randn(m.q_heads, 1, d, generator=g),
                               torch.randn(m.kv_heads, 1, d, generator=g),
                               torch.randn(m.kv_heads, 1, d, generator=g))
        for a in accounts:
            for f in FIELDS:
                acc[f] += getattr(a, f) / (len(accounts) * steps)
    return acc


def _closed(spec, cfg):
    d = step_bytes(spec, cfg.layout, N, loader=cfg.loader).as_dict()
    return {f: float(d[f]) for f in FIELDS}


def _msg(spec, layout, g, c):
    return f"{spec.label} layout={layout} N={N} seed={SEED}: golden {g} closed {c}"


BASELINES = [(m, B) for m in Method if m is not Method.HIKV for B in (8, 16, 64)]


@pytest.mark.parametrize("layout", ["aligned", "packed"])
@pytest.mark.parametrize("method,budget", BASELINES)
def test_baselines_exact(layout, method, budget):
    cfg = _cfg(layout)
    spec = MethodSpec(method, budget=budget, recent=min(4, budget), channels=4, page_tokens=4,
                      label_bits=4 if method is Method.DOUBLE_SPARSITY else 16)
    g, c = _golden(spec, cfg), _closed(spec, cfg)
    assert g == pytest.approx(c), _msg(spec, layout, g, c)


K_EXACT = [Stage2Rule(), Stage2Rule(Stage2Kind.STATIC, 12), Stage2Rule(Stage2Kind.CHANNEL_GROUPS,
                                                                        8, 4),
           Stage2Rule(Stage2Kind.THINK, 10)]
#: K rules stored per token (rows or records): exact with scattered burst-aligned tokens
K_ROWS = [K_EXACT[0], K_EXACT[1], K_EXACT[3]]
V_RULES = [Stage2Rule(), Stage2Rule(Stage2Kind.STATIC, 12)]


def _hikv(cfg, stage1, scorer, kr, vr):
    p = dataclasses.replace(cfg.policy, stage1=stage1, scorer=scorer, k_rule=kr, v_rule=vr)
    return MethodSpec.for_hikv(p), dataclasses.replace(cfg, policy=p)


@pytest.mark.parametrize("layout", ["aligned", "packed"])
@pytest.mark.parametrize("kr", K_EXACT, ids=lambda r: f"k{r.kind.value}")
@pytest.mark.parametrize("vr", V_RULES, ids=lambda r: f"v{r.kind.value}")
@pytest.mark.parametrize("stage1", [Stage1Variant.NONE, Stage1Variant.EVICT])
def test_hikv_exact(layout, kr, vr, stage1):
    spec, cfg = _hikv(_cfg(layout), stage1, Stage1Scorer.PAGE_BOUNDS, kr, vr)
    steps = cfg.policy.compact_interval if stage1 is Stage1Variant.EVICT else 1
    g, c = _golden(spec, cfg, steps), _closed(spec, cfg)
    assert g == pytest.approx(c), _msg(spec, layout, g, c)


@pytest.mark.parametrize("kr", K_ROWS, ids=lambda r: f"k{r.kind.value}")
@pytest.mark.parametrize("vr", V_RULES, ids=lambda r: f"v{r.kind.value}")
def test_hikv_lowbit_exact_when_records_are_burst_aligned(kr, vr):
    spec, cfg = _hikv(_cfg("aligned"), Stage1Variant.QUERY_AWARE, Stage1Scorer.LOWBIT_KEYS, kr,
                      vr)
    g, c = _golden(spec, cfg), _closed(spec, cfg)
    assert g == pytest.approx(c), _msg(spec, "aligned", g, c)


@pytest.mark.parametrize("kr", K_ROWS, ids=lambda r: f"k{r.kind.value}")
@pytest.mark.parametrize("vr", V_RULES, ids=lambda r: f"v{r.kind.value}")
def test_hikv_lowbit_packed_scattered_is_an_expectation(kr, vr):
    """Packed records: neighbours share bursts; the closed form is the expectation over a
    uniformly random choice (the golden choice is one draw: within 15%)."""
    spec, cfg = _hikv(_cfg("packed"), Stage1Variant.QUERY_AWARE, Stage1Scorer.LOWBIT_KEYS, kr,
                      vr)
    g, c = _golden(spec, cfg), _closed(spec, cfg)
    for f in ("k_burst", "v_burst"):
        assert abs(c[f] - g[f]) <= 0.15 * g[f], _msg(spec, "packed", g, c)
    for f in ("k_ideal", "v_ideal", "meta_ideal", "meta_burst", "tokens", "resident"):
        assert g[f] == pytest.approx(c[f]), _msg(spec, "packed", g, c)


@pytest.mark.parametrize("layout", ["aligned", "packed"])
@pytest.mark.parametrize("kr", K_EXACT, ids=lambda r: f"k{r.kind.value}")
def test_hikv_page_bounds_nominal_is_an_upper_bound(layout, kr):
    """Chosen pages may hold sink/recent tokens: the golden model reads at most S % pt +
    pt - 1 tokens fewer than the nominal closed form."""
    spec, cfg = _hikv(_cfg(layout), Stage1Variant.QUERY_AWARE, Stage1Scorer.PAGE_BOUNDS, kr,
                      Stage2Rule(Stage2Kind.STATIC, 12))
    p, pt = cfg.policy, cfg.layout.page_tokens
    g, c = _golden(spec, cfg), _closed(spec, cfg)
    slack = p.sinks % pt + pt - 1
    assert c["tokens"] - slack <= g["tokens"] <= c["tokens"], _msg(spec, layout, g, c)
    assert g["meta_ideal"] == c["meta_ideal"] and g["meta_burst"] == c["meta_burst"]
    assert g["resident"] == c["resident"]
    for f in ("k_burst", "v_burst"):
        assert g[f] <= c[f], _msg(spec, layout, g, c)


@pytest.mark.parametrize("stage1", [Stage1Variant.NONE, Stage1Variant.QUERY_AWARE])
def test_hikv_query_channels_is_an_expectation(stage1):
    """Query-aware K channels: bursts are the mean over random channel sets (within 20%)."""
    spec, cfg = _hikv(_cfg("aligned"), stage1, Stage1Scorer.LOWBIT_KEYS,
                      Stage2Rule(Stage2Kind.QUERY_CHANNELS, 8), Stage2Rule())
    g, c = _golden(spec, cfg), _closed(spec, cfg)
    assert g["k_ideal"] == pytest.approx(c["k_ideal"]), _msg(spec, "aligned", g, c)
    assert abs(g["k_burst"] - c["k_burst"]) <= 0.2 * g["k_burst"], _msg(spec, "aligned", g, c)


def test_vectorised_equals_scalar_and_errors():
    cfg = get_preset("default")
    spec = MethodSpec.for_hikv(cfg.policy)
    ns = np.array([100, 300, 1000, 5000])
    bs = np.array([64, 256, 256, 512])
    vec = step_bytes(spec, Geometry.of(cfg.layout, cfg.loader), ns, budget=bs)
    for i, (n, b) in enumerate(zip(ns, bs, strict=True)):
        p = dataclasses.replace(cfg.policy, budget=int(b))
        one = step_bytes(MethodSpec.for_hikv(p), cfg.layout, int(n), loader=cfg.loader)
        for f, v in one.as_dict().items():
            assert float(vec.as_dict()[f][i]) == pytest.approx(float(v)), (f, n, b)
    with pytest.raises(ParamError, match="n"):
        step_bytes(spec, cfg.layout, 0)


def test_requests_of_a_contiguous_read():
    cfg = get_preset("default")   # 16 beats x 16 B = 256 B per request, rows of 128 B
    sb = step_bytes(MethodSpec(Method.FULL), cfg.layout, 1000, loader=cfg.loader)
    assert sb.k_burst == 1000 * 128 and sb.requests == 2 * 1000 * 128 / 256


@pytest.mark.parametrize("seed", range(8))
def test_packed_evicting_operating_point_is_exact(seed):
    """The seed's packed layout at the operating point: evicting Stage I, masked V records,
    K as rows, masked records or ThinK rows; records 2- or 8-byte aligned; random burst size,
    budget, Δ, keeps and prompt length. The golden mean over one compaction cycle equals
    step_bytes."""
    rng = np.random.default_rng(seed)
    base = get_preset("tiny")
    d = base.layout.head_dim
    layout = dataclasses.replace(base.layout, burst_bytes=int(rng.choice([16, 32, 64])),
                                 align_bytes=int(rng.choice([2, 8])))
    budget = int(rng.integers(8, 40))
    k_kind = (Stage2Kind.NONE, Stage2Kind.STATIC, Stage2Kind.THINK)[seed % 3]
    kr = Stage2Rule() if k_kind is Stage2Kind.NONE else Stage2Rule(k_kind,
                                                                    int(rng.integers(1, d + 1)))
    p = dataclasses.replace(base.policy, budget=budget, stage1=Stage1Variant.EVICT,
                            recent=min(base.policy.recent, budget - base.policy.sinks),
                            compact_interval=int(rng.integers(1, 7)), k_rule=kr,
                            v_rule=Stage2Rule(Stage2Kind.STATIC, int(rng.integers(1, d + 1))))
    cfg = dataclasses.replace(base, policy=p, layout=layout,
                              sorter=dataclasses.replace(base.sorter, max_k=64))
    spec = MethodSpec.for_hikv(p)
    n = int(rng.integers(budget + 1, 3 * budget))
    g = _golden(spec, cfg, p.compact_interval, n=n, seed=seed)
    c = step_bytes(spec, cfg.layout, n, loader=cfg.loader).as_dict()
    c = {f: float(c[f]) for f in FIELDS}
    assert g == pytest.approx(c), f"{spec.label} {layout} N={n} seed={seed}: {g} != {c}"
