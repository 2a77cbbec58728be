"""One operating point: the spec builder, labels that round-trip, Stage I's k, a torch-free
cost model."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from hikv.model.accuracy import experiments as A
from hikv.model.methods.registry import make_cache
from hikv.params import MethodSpec, ParamError, Stage1Scorer, Stage1Variant, parse_method
from hikv.presets import PRESETS, baselines_at, get_preset, method_specs


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_spec_of_the_builder_round_trips_its_label(preset: str) -> None:
    cfg = get_preset(preset)
    d = cfg.layout.head_dim
    specs = list(method_specs(cfg).values())
    specs += [s for b in (16, 64, cfg.policy.budget) for s in baselines_at(b, cfg.policy, d)
              .values()]
    specs += A.baseline_specs([32, 128], cfg.policy, d)
    for s in specs:
        assert MethodSpec.from_label(s.label, cfg.policy, d) == s, f"{preset}: {s.label}"
    distinct = {s for s in specs}
    assert len({s.label for s in distinct}) == len(distinct), f"{preset}: two specs, one label"


def test_label_names_what_distinguishes_specs() -> None:
    cfg = get_preset("default")
    ds = method_specs(cfg)["ds"]
    ds4 = dataclasses.replace(ds, label_bits=4)
    assert ds.label != ds4.label and ds4.label.endswith("/b4")
    assert parse_method(ds4.label, cfg.policy, 64) == ds4
    q = method_specs(get_preset("tiny"))["quest"]
    assert q.page_tokens == 4 and q.label == "quest@16/p4"


@pytest.mark.parametrize("alias", ["hikv-query@256/lowbit4", "hikv-qa@256/lowbit4",
                                   "hikv-query_aware@256/lowbit4"])
def test_old_spellings_of_query_aware(alias: str) -> None:
    cfg = get_preset("default")
    assert parse_method(alias, cfg.policy, 64) == method_specs(cfg)["hikv-query"]
    assert A.parse_method(alias, cfg.policy, 64) == method_specs(cfg)["hikv-query"]


def test_unknown_label_names_the_grammar() -> None:
    with pytest.raises(ParamError, match="not a method label"):
        parse_method("h2o", get_preset("default").policy, 64)


@pytest.mark.parametrize("recent", [0, 1, 3])
@pytest.mark.parametrize("stage1", [Stage1Variant.QUERY_AWARE, Stage1Variant.EVICT])
def test_stage1_k_is_what_the_golden_model_selects(recent: int, stage1: Stage1Variant) -> None:
    """HiKVPolicy.important (Stage I's k) equals the tokens the golden model keeps by
    importance: B minus sinks minus the recent window, which for the query-aware Stage I holds
    the current token even when recent = 0 (so k = B - S - 1 there, not B - S)."""
    cfg = get_preset("tiny")
    seed = 11 + recent
    pol = dataclasses.replace(cfg.policy, recent=recent, stage1=stage1, compact_interval=1,
                              scorer=Stage1Scorer.LOWBIT_KEYS)
    spec = MethodSpec.for_hikv(pol)
    cache = make_cache(spec, cfg)
    g = torch.Generator().manual_seed(seed)
    h, hk, d, n = cfg.model.q_heads, cfg.model.kv_heads, cfg.layout.head_dim, 3 * pol.budget
    rnd = lambda heads, t: torch.randn(heads, t, d, generator=g)  # noqa: E731
    cache.prefill(rnd(h, n), rnd(hk, n), rnd(hk, n))
    _, acc = cache.decode(rnd(h, 1), rnd(hk, 1), rnd(hk, 1))
    window = max(recent, 1) if stage1 is Stage1Variant.QUERY_AWARE else recent
    assert pol.important == pol.budget - pol.sinks - window, f"seed={seed}"
    # attended = sinks + window + important = B; the current token is not read
    attended = acc[0].tokens + 1
    if stage1 is Stage1Variant.QUERY_AWARE:
        assert attended == pol.sinks + window + pol.important == pol.budget, f"seed={seed}"
    else:   # evicting: B + 1 resident during the step (compaction after it), all attended
        assert attended == pol.budget + 1, f"seed={seed}"


def test_cost_model_imports_no_torch() -> None:
    code = ("import hikv.sim.explore.report, hikv.sim.explore.sweep, hikv.sim.serving.engine, sys; "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, cwd="/")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("change,names", [
    ({"context": 4097}, ["Config.context", "Config.sorter.max_n"]),
    ({"policy": {"budget": 513}}, ["Config.policy.budget", "Config.sorter.max_k"]),
    ({"context": 3000, "loader": {"max_tokens": 2048}},
     ["Config.context", "Config.loader.max_tokens"]),
    ({"loader": {"addr_width": 12, "max_tokens": 16}, "context": 2048},
     ["Config.context", "Config.loader.max_tokens"]),
    ({"loader": {"addr_width": 16}}, ["Config.context", "Config.loader.addr_width"]),
])
def test_config_checks_the_operating_point_fits_sorter_and_loader(change, names) -> None:
    cfg = get_preset("default")
    kw = {k: (dataclasses.replace(getattr(cfg, k), **v) if isinstance(v, dict) else v)
          for k, v in change.items()}
    with pytest.raises(ParamError) as e:
        cfg.replace(**kw)
    for n in names:
        assert n in str(e.value), str(e.value)


def test_presets_fit_their_hardware() -> None:
    for cfg in PRESETS.values():
        assert cfg.policy.budget <= cfg.sorter.max_k and cfg.context <= cfg.sorter.max_n
        assert cfg.context <= cfg.loader.max_tokens
