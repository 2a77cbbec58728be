"""The closed forms of hikv.sim.cost.closed_form (sequence state) against the golden byte accounts.

Each case runs a real golden-model cache (random tensors, local generator) through a prefill
of ``N`` tokens and ``STEPS`` decode steps, and compares every step's ByteAccount of every KV
head with the closed form at ``(prompt=N, step=j)``: bytes read (ideal and at burst
granularity, K / V / metadata), tokens read, resident tokens and resident bytes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from hikv.method_spec import Stage1Scorer, Stage1Variant, Stage2Kind, Stage2Rule
from hikv.model.methods.registry import hikv_resident_bytes, make_cache
from hikv.params import HiKVPolicy, KVLayout, Method, MethodSpec
from hikv.presets import BASELINES, METHOD_NAMES, get_preset, method_specs, resolve_methods
from hikv.sim.cost.closed_form import closed_form

STEPS = 24
Q_HEADS, KV_HEADS = 4, 2


def small_cfg(align: int = 64):
    """The default preset's layout (d = 64, 64-byte bursts) with a small budget so that short
    prompts cross it, and a compaction interval that cycles within STEPS."""
    cfg = get_preset("default")
    policy = dataclasses.replace(cfg.policy, budget=48, sinks=4, recent=8, obs_window=8,
                                 pool_kernel=3, compact_interval=5)
    layout = dataclasses.replace(cfg.layout, align_bytes=align)
    return cfg.replace(policy=policy, layout=layout)


def _hikv_variants(policy: HiKVPolicy) -> dict[str, MethodSpec]:
    v = {
        "hikv-lowbit": dataclasses.replace(policy, stage1=Stage1Variant.QUERY_AWARE,
                                           scorer=Stage1Scorer.LOWBIT_KEYS),
        "hikv-none": dataclasses.replace(policy, stage1=Stage1Variant.NONE),
        "hikv-kstatic": dataclasses.replace(policy, stage1=Stage1Variant.EVICT,
                                            k_rule=Stage2Rule(Stage2Kind.STATIC, 40)),
        "hikv-kchan": dataclasses.replace(policy, k_rule=Stage2Rule(Stage2Kind.QUERY_CHANNELS,
                                                                    32)),
        "hikv-delta1": dataclasses.replace(policy, stage1=Stage1Variant.EVICT,
                                           compact_interval=1),
    }
    return {k: MethodSpec.for_hikv(p) for k, p in v.items()}


def _run_golden(spec: MethodSpec, cfg, n_prompt: int, seed: int):
    """Accounts [step][head] and resident tokens after prefill and after each step."""
    g = torch.Generator().manual_seed(seed)
    d = cfg.layout.head_dim
    cache = make_cache(spec, cfg, q_heads=Q_HEADS, kv_heads=KV_HEADS)

    def rnd(h, t):
        return torch.randn(h, t, d, generator=g)

    cache.prefill(rnd(Q_HEADS, n_prompt), rnd(KV_HEADS, n_prompt), rnd(KV_HEADS, n_prompt))
    resident = [cache.resident_tokens]
    accounts = []
    for _ in range(STEPS):
        _, acc = cache.decode(rnd(Q_HEADS, 1), rnd(KV_HEADS, 1), rnd(KV_HEADS, 1))
        accounts.append(acc)
        resident.append(cache.resident_tokens)
    return accounts, resident


FIELDS = ("k_ideal", "v_ideal", "meta_ideal", "k_burst", "v_burst", "meta_burst", "resident",
          "tokens")


#: methods whose KV heads keep different numbers of tokens: the closed form is their mean
PER_HEAD_BUDGETS = (Method.ADAKV, Method.G_ADAKV)


def _head_mean(acc: list) -> list:
    """One account, the mean over the KV heads (fields may be fractional)."""
    total = acc[0]
    for a in acc[1:]:
        total = total + a
    return [dataclasses.replace(total, **{f.name: getattr(total, f.name) / len(acc)
                                          for f in dataclasses.fields(total)})]


def check_closed_form(name: str, spec: MethodSpec, cfg, n_prompt: int, seed: int) -> None:
    """The closed form of ``spec`` equals the golden cache's byte accounts at every step of a
    prefill of ``n_prompt`` random tokens and ``STEPS`` decode steps (upper bounds, close to
    them, where the closed form is not exact)."""
    model = closed_form(spec, cfg.layout)
    accounts, resident = _run_golden(spec, cfg, n_prompt, seed)
    if spec.method in PER_HEAD_BUDGETS:
        accounts = [_head_mean(acc) for acc in accounts]
    steps = np.arange(1, STEPS + 1)
    closed = model.decode_read(np.full(STEPS, n_prompt), steps)
    res_tok = model.resident_after_step(np.full(STEPS + 1, n_prompt), np.arange(STEPS + 1))
    ctx = f"{name} ({spec.label}) N={n_prompt} seed={seed} align={cfg.layout.align_bytes}"
    assert list(res_tok) == resident, f"{ctx}: resident tokens {list(res_tok)} != {resident}"
    res_bytes = model.storage_bytes(res_tok[1:])
    exact = model.exact
    for j, acc in enumerate(accounts):
        for h, a in enumerate(acc):
            where = f"{ctx} step={j + 1} head={h}"
            assert a.resident == res_bytes[j], f"{where}: resident {a.resident} != {res_bytes[j]}"
            got = {f: float(getattr(closed, f)[j]) for f in FIELDS}
            want = {f: getattr(a, f) for f in FIELDS}
            if exact:
                assert got == want, f"{where}: closed form {got} != golden {want}"
                continue
            # upper bounds: never below the golden count, and close to it
            for f in FIELDS:
                assert got[f] >= want[f], f"{where}: {f} bound {got[f]} < golden {want[f]}"
            pt = cfg.layout.page_tokens
            assert got["tokens"] - want["tokens"] <= 2 * pt, f"{where}: {got} vs {want}"


@pytest.mark.parametrize("n_prompt", [5, 40, 90])
@pytest.mark.parametrize("name", METHOD_NAMES)
def test_closed_form_matches_golden(name: str, n_prompt: int) -> None:
    cfg = small_cfg()
    check_closed_form(name, method_specs(cfg)[name], cfg, n_prompt, seed=1000 + n_prompt)


@pytest.mark.parametrize("n_prompt", [5, 90])
@pytest.mark.parametrize("name", ["hikv-lowbit", "hikv-none", "hikv-kstatic", "hikv-kchan",
                                  "hikv-delta1"])
def test_hikv_variants_match_golden(name: str, n_prompt: int) -> None:
    cfg = small_cfg()
    check_closed_form(name, _hikv_variants(cfg.policy)[name], cfg, n_prompt, seed=2000 + n_prompt)


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_tiny_preset_matches_golden(name: str) -> None:
    cfg = get_preset("tiny")
    check_closed_form(name, method_specs(cfg)[name], cfg, 40, seed=3000)


@pytest.mark.parametrize("name", ["full", "quest", "sparq", "hikv", "hikv-evict"])
def test_unaligned_records_are_bounded(name: str) -> None:
    """align_bytes < burst_bytes: neighbours share bursts; the closed form is a bound."""
    cfg = small_cfg(align=16)
    check_closed_form(name, method_specs(cfg)[name], cfg, 90, seed=4000)


def test_storage_matches_golden_resident_function() -> None:
    cfg = get_preset("default")
    for spec in _hikv_variants(cfg.policy).values():
        model = closed_form(spec, cfg.layout)
        assert spec.hikv is not None
        for n in (0, 1, 15, 16, 17, 255, 1000):
            assert int(model.storage_bytes(n)) == hikv_resident_bytes(spec.hikv, cfg.layout, n)


def test_residency_during_prefill() -> None:
    """Capacity methods: H2O evicts after each chunk; SnapKV and HiKV only after the last."""
    cfg = small_cfg()
    specs = method_specs(cfg)
    b = cfg.policy.budget
    h2o = closed_form(specs["h2o"], cfg.layout)
    snap = closed_form(specs["snapkv"], cfg.layout)
    hev = closed_form(specs["hikv-evict"], cfg.layout)
    full = closed_form(specs["full"], cfg.layout)
    total = 200
    assert h2o.resident_after_prefill(100, total) == b
    assert h2o.prefill_peak(100, 50) == b + 50
    for m in (snap, hev):
        assert m.resident_after_prefill(100, total) == 100
        assert m.prefill_peak(100, 100) == 200
        assert m.resident_after_prefill(total, total) == b
    assert full.resident_after_prefill(total, total) == total
    assert (h2o.evicts, snap.evicts, hev.evicts, full.evicts) == (True, True, True, False)


def test_resolve_methods_rejects_unknown_names() -> None:
    cfg = get_preset("default")
    with pytest.raises(ValueError, match="not one of"):
        resolve_methods(cfg, "fullkv")
    names = list(resolve_methods(cfg, "all"))
    assert names[:8] == ["full", "h2o", "snapkv", "quest", "sparq", "ds", "streamingllm", "tova"]
    assert names[len(BASELINES) + 1] == "hikv" and names[-1] == "h2o-avg"
    assert "hikv-query" not in names     # the preset's hikv already is query-aware
    assert list(resolve_methods(cfg, "hikv,full")) == ["hikv", "full"]
    by_label = resolve_methods(cfg, "tova@64,h2o@128/avg")
    assert [s.label for s in by_label.values()] == ["tova@64", "h2o@128/avg"]
    with pytest.raises(ValueError, match="only allowed for h2o"):
        resolve_methods(cfg, "tova@64/avg")


def test_layout_defaults_are_aligned() -> None:
    """The presets' records start bursts, so their closed forms are exact (bar page bounds)."""
    for name in ("tiny", "default", "paper"):
        lay: KVLayout = get_preset(name).layout
        assert lay.align_bytes >= lay.burst_bytes


def test_h2o_counts_its_scores_like_hikv() -> None:
    """H2O stores and reads one accumulated score per resident token, as HiKV's evicting
    Stage I does, and the golden model counts both."""
    from hikv.model.methods.registry import SCORE_BYTES

    cfg = small_cfg()
    specs = method_specs(cfg)
    for name in ("h2o", "hikv-evict"):
        accounts, resident = _run_golden(specs[name], cfg, 90, seed=5)
        for j, acc in enumerate(accounts):
            cached = resident[j]      # tokens before the step's append
            assert acc[0].meta_ideal == cached * SCORE_BYTES, (name, j)


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_decode_key_determines_the_step(name: str) -> None:
    """Everything a decode step reads and keeps is a function of decode_key alone."""
    cfg = small_cfg()
    model = closed_form(method_specs(cfg)[name], cfg.layout)
    rng = np.random.default_rng(7)
    prompt = rng.integers(0, 300, 2000)
    step = rng.integers(1, 200, 2000)
    x = model.decode_key(prompt, step)
    p2, s2 = model.by_key(x)
    assert (s2 >= 1).all() and (model.decode_key(p2, s2) == x).all()
    a, b = model.decode_read(prompt, step), model.decode_read(p2, s2)
    for f in FIELDS:
        assert (getattr(a, f) == getattr(b, f)).all(), f
    assert (model.step_peak(prompt, step) == model.step_peak(p2, s2)).all()
    assert (model.resident_after_step(prompt, step) == model.resident_after_step(p2, s2)).all()
    assert (model.scoring_macs(prompt, step, 3) == model.scoring_macs(p2, s2, 3)).all()


@pytest.mark.parametrize("preset", ["tiny", "default", "paper"])
def test_serving_and_cost_model_views_agree(preset: str) -> None:
    """One module, two views: the serving model's per-sequence reads (KVBytes.decode_read at
    the first decode step after a prompt of n tokens) equal the cost model's step_bytes with n
    cached tokens for every method where both are exact (the presets' burst-aligned records;
    evicting HiKV is compared per state, since step_bytes averages it over a compaction
    cycle)."""
    from hikv.sim.cost.closed_form import Geometry, step_bytes

    cfg = get_preset(preset)
    g = Geometry.of(cfg.layout, cfg.loader)
    b = cfg.policy.budget
    ns = np.array([1, 3, b // 2, b - 1, b, b + 1, 2 * b + 5, 4 * b + 17])
    for name, spec in method_specs(cfg).items():
        model = closed_form(spec, cfg.layout)
        hikv_evicts = spec.hikv is not None and spec.hikv.stage1 is Stage1Variant.EVICT
        if hikv_evicts:
            ns_e = np.array([1, b - 3, b])             # no eviction yet: a prefix of n tokens
            got = model.decode_read(ns_e, np.ones_like(ns_e))
            want = step_bytes(spec, g, ns_e)
        else:
            got = model.decode_read(ns, np.ones_like(ns))
            want = step_bytes(spec, g, ns)
        for f in FIELDS:
            np.testing.assert_array_equal(np.asarray(getattr(got, f), dtype=float),
                                          np.asarray(getattr(want, f), dtype=float),
                                          err_msg=f"{preset} {name} {f}")
        r = model.storage_bytes(ns + 1)
        if spec.hikv is not None and not hikv_evicts:
            np.testing.assert_array_equal(r, step_bytes(spec, g, ns).resident,
                                          err_msg=f"{preset} {name} resident")


# --------------------------------------------------------------------------- packed layout
def _packed_case(seed: int):
    """A random case of the seed's packed layout: evicting Stage I (compacted cache), masked V
    records (or whole rows) and K as whole rows, masked records or ThinK rows, records 2- or
    8-byte aligned so neighbours share 64-byte bursts; random budget, windows, Δ, keeps and
    prompt length."""
    rng = np.random.default_rng(seed)
    cfg = get_preset("default")
    d = cfg.layout.head_dim
    budget = int(rng.integers(12, 64))
    sinks = int(rng.integers(0, 5))
    recent = int(rng.integers(0, min(16, budget - sinks) + 1))
    k_kind = (Stage2Kind.NONE, Stage2Kind.STATIC, Stage2Kind.THINK)[seed % 3]
    keep_k, keep_v = (int(x) for x in rng.integers(1, d + 1, 2))
    k_rule = Stage2Rule() if k_kind is Stage2Kind.NONE else Stage2Rule(k_kind, keep_k)
    v_rule = Stage2Rule(Stage2Kind.STATIC, keep_v) if rng.random() < 0.75 else Stage2Rule()
    policy = HiKVPolicy(budget=budget, sinks=sinks, recent=recent, obs_window=8, pool_kernel=3,
                        compact_interval=int(rng.integers(1, 7)), stage1=Stage1Variant.EVICT,
                        k_rule=k_rule, v_rule=v_rule)
    layout = dataclasses.replace(cfg.layout, align_bytes=int(rng.choice([2, 8])))
    return cfg.replace(policy=policy, layout=layout), int(rng.integers(1, 3 * budget))


@pytest.mark.parametrize("seed", range(9))
def test_packed_evicting_records_match_golden(seed: int) -> None:
    """The compacted evicting cache with packed records: the closed form's sequence state
    equals the golden accounts exactly at every step (one contiguous run per region, a burst
    shared by two records counted once, masks and ThinK's channel mask counted)."""
    cfg, n_prompt = _packed_case(seed)
    spec = MethodSpec.for_hikv(cfg.policy)
    model = closed_form(spec, cfg.layout)
    assert model.exact, spec.label
    check_closed_form(f"packed seed={seed}", spec, cfg, n_prompt, seed=6000 + seed)


def test_packed_evicting_query_channels_are_bounded() -> None:
    """K channels by |q| per step keep the channel-major page layout (its masks are per step,
    so there are no per-token records to pack): with packed V records the closed form bounds
    the golden count."""
    cfg, _ = _packed_case(1)
    p = dataclasses.replace(cfg.policy, k_rule=Stage2Rule(Stage2Kind.QUERY_CHANNELS, 24))
    cfg = cfg.replace(policy=p)
    check_closed_form("packed query channels", MethodSpec.for_hikv(p), cfg, 90, seed=6100)


def _variant_specs() -> dict[str, MethodSpec]:
    """The variants a seed suite adds with ``--variants`` (:func:`variant_families`), at the
    small configuration's budget."""
    from hikv.model.accuracy.seed_spec import variant_families
    from hikv.params import parse_method

    cfg = small_cfg()
    out = {}
    for fam in variant_families(cfg.layout.head_dim):
        head, _, rest = fam.partition("/")
        out[fam] = parse_method(f"{head}@{cfg.policy.budget}/{rest}", cfg.policy,
                                cfg.layout.head_dim)
    return out


@pytest.mark.parametrize("n_prompt", [5, 90])
@pytest.mark.parametrize("name", sorted(_variant_specs()))
def test_variants_match_golden(name: str, n_prompt: int) -> None:
    """Double Sparsity at r = d/8 4-bit and r = d/2 2-bit labels, SparQ's r sweep, HiKV's
    query-aware Stage I from 2/3-bit keys and from keys of a calibrated channel subset, and the
    seed HiKV's Stage II on it: the closed form equals the golden byte accounts."""
    cfg = small_cfg()
    spec = _variant_specs()[name]
    family = spec.label.replace(f"@{cfg.policy.budget}", "")
    assert family.replace("hikv-query_aware", "hikv-qa") == name
    check_closed_form(name, spec, cfg, n_prompt, seed=3000 + n_prompt)


def test_lowbit_channel_subset_reads_fewer_metadata_bytes() -> None:
    """Keys of c channels: c b / 8 + 2 elements of metadata per token instead of d b / 8 + 2."""
    from hikv.params import parse_method

    cfg = small_cfg()
    lay = cfg.layout
    n = 90
    whole = closed_form(parse_method("hikv-qa@48/lowbit4", cfg.policy, lay.head_dim), lay)
    half = closed_form(parse_method("hikv-qa@48/lowbit4c32", cfg.policy, lay.head_dim), lay)
    a = whole.decode_read(np.array([n]), np.array([1]))
    b = half.decode_read(np.array([n]), np.array([1]))
    assert float(a.meta_ideal[0]) == n * (64 * 4 // 8 + 2 * lay.elem_bytes)
    assert float(b.meta_ideal[0]) == n * (32 * 4 // 8 + 2 * lay.elem_bytes)
    assert float(a.k_ideal[0]) == float(b.k_ideal[0])
