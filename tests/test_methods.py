"""Golden-model KV methods on seeded random tensors."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from hikv.model.methods.registry import SCORE_BYTES, make_cache, static_mask
from hikv.model.refs.keys import float_to_key
from hikv.model.refs.sorter import stage1_topk
from hikv.params import (
    HiKVPolicy,
    KeyFormat,
    Method,
    MethodSpec,
    ParamError,
    Stage1Scorer,
    Stage1Variant,
    Stage2Kind,
    Stage2Rule,
)
from hikv.presets import get_preset

CFG = get_preset("default")          # d = 64, 9 query heads, 3 KV heads, burst 64, align 64
HQ, HKV, D = CFG.model.q_heads, CFG.model.kv_heads, CFG.layout.head_dim
ROW = CFG.layout.row_bytes
NO_STAGE2 = dataclasses.replace(CFG.policy, v_rule=Stage2Rule(), k_rule=Stage2Rule())


def _qkv(n, seed=0, v=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(HQ, n, D, generator=g)
    k = torch.randn(HKV, n, D, generator=g)
    if v is None:
        v = torch.randn(HKV, n, D, generator=g)
    return q, k, v


def _run(spec, q, k, v, n_prompt):
    cache = make_cache(spec, CFG)
    outs = [cache.prefill(q[:, :n_prompt], k[:, :n_prompt], v[:, :n_prompt])]
    accounts = []
    for t in range(n_prompt, q.shape[1]):
        o, acc = cache.decode(q[:, t: t + 1], k[:, t: t + 1], v[:, t: t + 1])
        outs.append(o)
        accounts.append(acc)
    return torch.cat(outs, 1), accounts, cache


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                          is_causal=True, enable_gqa=True).squeeze(0)


ALL_SPECS_AT_FULL_BUDGET = [
    MethodSpec(Method.FULL),
    MethodSpec(Method.H2O, budget=4096),
    MethodSpec(Method.SNAPKV, budget=4096),
    MethodSpec(Method.QUEST, budget=4096),
    MethodSpec(Method.SPARQ, budget=4096, channels=8),
    MethodSpec(Method.DOUBLE_SPARSITY, budget=4096, channels=8),
    MethodSpec.for_hikv(dataclasses.replace(NO_STAGE2, budget=4096)),
    MethodSpec.for_hikv(dataclasses.replace(NO_STAGE2, budget=4096,
                                            scorer=Stage1Scorer.LOWBIT_KEYS)),
    MethodSpec.for_hikv(dataclasses.replace(NO_STAGE2, budget=4096,
                                            stage1=Stage1Variant.EVICT)),
    MethodSpec.for_hikv(dataclasses.replace(NO_STAGE2, budget=4096, stage1=Stage1Variant.NONE)),
]


def test_full_kv_equals_sdpa():
    q, k, v = _qkv(150)
    out, accounts, _ = _run(MethodSpec(Method.FULL), q, k, v, 100)
    torch.testing.assert_close(out, _sdpa(q, k, v), rtol=1e-5, atol=1e-5)
    assert len(accounts) == 50 and len(accounts[0]) == HKV


@pytest.mark.parametrize("spec", ALL_SPECS_AT_FULL_BUDGET, ids=lambda s: s.label)
def test_every_method_equals_full_kv_when_budget_covers_context(spec):
    q, k, v = _qkv(140, seed=1)
    full, _, _ = _run(MethodSpec(Method.FULL), q, k, v, 120)
    out, _, _ = _run(spec, q, k, v, 120)
    torch.testing.assert_close(out, full, rtol=1e-5, atol=2e-6)


def _attended(out_step):
    """Tokens with non-zero attention, read off an output whose V rows are one-hot."""
    return [set(torch.nonzero(out_step[h, 0].abs() > 0).squeeze(1).tolist())
            for h in range(out_step.shape[0])]


BYTE_SPECS = [
    MethodSpec(Method.FULL),
    MethodSpec(Method.H2O, budget=24, recent=8),
    MethodSpec(Method.SNAPKV, budget=24, recent=8),
    MethodSpec(Method.QUEST, budget=16, page_tokens=4),
    MethodSpec(Method.DOUBLE_SPARSITY, budget=12, channels=8),
    MethodSpec.for_hikv(dataclasses.replace(NO_STAGE2, budget=24, sinks=2, recent=6)),
    MethodSpec.for_hikv(dataclasses.replace(NO_STAGE2, budget=24, sinks=2, recent=6,
                                            scorer=Stage1Scorer.LOWBIT_KEYS)),
    MethodSpec.for_hikv(dataclasses.replace(NO_STAGE2, budget=24, sinks=2, recent=6,
                                            stage1=Stage1Variant.EVICT, compact_interval=4,
                                            obs_window=4)),
    MethodSpec.for_hikv(dataclasses.replace(CFG.policy, budget=24, sinks=2, recent=6)),
]


@pytest.mark.parametrize("spec", BYTE_SPECS, ids=lambda s: s.label)
def test_kv_bytes_equal_an_independent_count_of_attended_tokens(spec):
    """V rows are one-hot by token, so the output reveals which tokens each head attended;
    every attended token but the current one is read: one row of K and one of V (or one
    masked record of V) per token. The golden model's bookkeeping is not consulted."""
    n_prompt, n = 40, 60
    v = torch.eye(D)[:n].expand(HKV, n, D).clone()
    q, k, _ = _qkv(n, seed=2)
    out, accounts, _ = _run(spec, q, k, v, n_prompt)
    g = HQ // HKV
    lay = CFG.layout
    v_rule = spec.hikv.v_rule if spec.hikv else Stage2Rule()
    v_rec = ROW if v_rule.kind is Stage2Kind.NONE else lay.record_bytes(v_rule.keep)
    for step, acc in enumerate(accounts):
        t = n_prompt + step
        att = _attended(out[:, n_prompt + step: n_prompt + step + 1])
        for h in range(HKV):
            heads = att[h * g: (h + 1) * g]
            assert all(a == heads[0] for a in heads), "a KV head's query heads share tokens"
            read = heads[0] - {t}
            assert t in heads[0], "the current token is always attended"
            a = acc[h]
            assert a.tokens == len(read)
            assert a.k_ideal == a.k_burst == len(read) * ROW
            assert a.v_ideal == len(read) * v_rec
            assert a.v_burst == len(read) * lay.stride(v_rec)   # records are burst-aligned


def test_quest_sparq_ds_metadata_bytes():
    n_prompt, n = 100, 103
    q, k, v = _qkv(n, seed=3)
    lay = CFG.layout
    _, acc, _ = _run(MethodSpec(Method.QUEST, budget=32, page_tokens=16), q, k, v, n_prompt)
    for step, a in enumerate(acc):
        pages = -(-(n_prompt + step + 1) // 16)
        assert a[0].meta_ideal == (pages - 1) * lay.stride(2 * ROW)
    _, acc, _ = _run(MethodSpec(Method.SPARQ, budget=20, channels=8), q, k, v, n_prompt)
    for step, a in enumerate(acc):
        cached = n_prompt + step
        assert a[0].tokens == 19
        assert a[0].k_ideal == 19 * ROW + 8 * cached * lay.elem_bytes
        assert a[0].meta_ideal == ROW                       # mean V
        per_channel_burst = -(-cached * lay.elem_bytes // 64) * 64
        assert a[0].k_burst == 19 * ROW + 8 * per_channel_burst
    _, acc, _ = _run(MethodSpec(Method.DOUBLE_SPARSITY, budget=20, channels=8, label_bits=4),
                     q, k, v, n_prompt)
    for step, a in enumerate(acc):
        cached = n_prompt + step
        assert a[0].meta_ideal == cached * (8 * 4 // 8 + 4)  # 4-bit labels + fp16 min, step


def _ds_pseudo_quantize(x, bits):
    """Double Sparsity's label quantiser as its code defines it: per row, asymmetric min/max,
    ``2^bits - 1`` steps, rounded and mapped back."""
    top = 2 ** bits - 1
    lo, hi = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    scale = top / torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    return torch.round((x - lo) * scale).clamp(0, top) / scale + lo


@pytest.mark.parametrize("bits", [2, 4])
def test_ds_labels_are_quantised_as_its_code_does(bits):
    """Below 16 bits the key labels and the query's label channels are quantised per row,
    asymmetric min/max with 2^bits levels (its code's ``pseudo_quantize``)."""
    q, k, v = _qkv(40, seed=3)
    spec = MethodSpec(Method.DOUBLE_SPARSITY, budget=12, channels=8, label_bits=bits)
    _, _, cache = _run(spec, q, k, v, 30)
    lab = torch.gather(cache.k, 2, cache.channels.unsqueeze(1).expand(-1, cache.k.shape[1], -1))
    got = cache._label(cache.k)
    assert torch.allclose(got, _ds_pseudo_quantize(lab, bits), atol=1e-5)
    assert all(len(torch.unique(row)) <= 2 ** bits for row in got.reshape(-1, got.shape[-1]))
    x = torch.randn(3, 4, 8)
    assert torch.allclose(cache._quantise(x), _ds_pseudo_quantize(x, bits), atol=1e-5)


def test_resident_bytes():
    n_prompt, n = 64, 70
    q, k, v = _qkv(n, seed=4)
    stride = CFG.layout.stride(ROW)
    _, acc, _ = _run(MethodSpec(Method.FULL), q, k, v, n_prompt)
    assert [a[0].resident for a in acc] == [(n_prompt + i + 1) * 2 * stride for i in range(6)]
    _, acc, cache = _run(MethodSpec(Method.H2O, budget=32, recent=8), q, k, v, n_prompt)
    # H2O keeps an accumulated score per resident token, as evicting HiKV does
    assert all(a[0].resident == 32 * (2 * stride + SCORE_BYTES) for a in acc)
    assert all(a[0].meta_ideal == a[0].tokens * SCORE_BYTES for a in acc)
    assert cache.resident_tokens == 32
    _, acc, _ = _run(MethodSpec(Method.SNAPKV, budget=32, recent=8), q, k, v, n_prompt)
    assert [a[0].resident for a in acc] == [(33 + i) * 2 * stride for i in range(6)]


def test_h2o_keeps_recent_window_and_budget():
    q, k, v = _qkv(90, seed=5)
    cache = make_cache(MethodSpec(Method.H2O, budget=20, recent=5), CFG)
    cache.prefill(q[:, :60], k[:, :60], v[:, :60])
    for t in range(60, 90):
        cache.decode(q[:, t: t + 1], k[:, t: t + 1], v[:, t: t + 1])
        assert cache.resident_tokens == 20
        for h in range(HKV):
            assert set(range(t - 4, t + 1)) <= set(cache.pos[h].tolist())
            assert cache.pos[h].tolist() == sorted(cache.pos[h].tolist())


def _evicting_hikv(budget: int, recent: int, interval: int, obs: int, n: int, prompt: int,
                   seed: int):
    """An evicting HiKV cache (2 sinks, pooling 3) prefilled with ``prompt`` of ``n`` random
    tokens; returns the cache and the tensors."""
    pol = dataclasses.replace(NO_STAGE2, stage1=Stage1Variant.EVICT, budget=budget, sinks=2,
                              recent=recent, compact_interval=interval, obs_window=obs,
                              pool_kernel=3)
    q, k, v = _qkv(n, seed=seed)
    cache = make_cache(MethodSpec.for_hikv(pol), CFG)
    cache.prefill(q[:, :prompt], k[:, :prompt], v[:, :prompt])
    return cache, q, k, v


def test_hikv_evicting_compaction_and_sorter_exact_selection():
    cache, q, k, v = _evicting_hikv(24, 4, 5, 8, 100, 60, seed=6)
    assert cache.resident_tokens == 24
    sizes = []
    for t in range(60, 100):
        imp_before = cache.imp.clone()
        pos_before = cache.pos.clone()
        _, acc = cache.decode(q[:, t: t + 1], k[:, t: t + 1], v[:, t: t + 1])
        sizes.append(cache.resident_tokens)
        assert acc[0].meta_ideal == (acc[0].tokens) * SCORE_BYTES
        if cache.resident_tokens == 24 and len(sizes) > 1 and sizes[-2] == 28:
            # a compaction happened: the kept middle tokens are the sorter's Stage I answer
            for h in range(HKV):
                pos = torch.cat([pos_before[h], torch.tensor([t])])
                kept = set(cache.pos[h].tolist())
                assert set(pos[:2].tolist()) <= kept and set(pos[-4:].tolist()) <= kept
                assert imp_before.shape[1] + 1 == pos.numel()
    assert max(sizes) == 24 + 5 - 1 and min(sizes) == 24
    assert sizes[:5] == [25, 26, 27, 28, 24]


def test_hikv_compaction_uses_the_sorter_reference():
    cache, q, k, v = _evicting_hikv(16, 3, 1, 4, 50, 40, seed=7)
    for t in range(40, 50):
        pos = torch.cat([cache.pos, torch.full((HKV, 1), t)], 1)
        imp_prev = torch.cat([cache.imp, torch.zeros(HKV, 1)], 1)
        _, _ = cache.decode(q[:, t: t + 1], k[:, t: t + 1], v[:, t: t + 1])
        # recompute this step's importance from the attention of the full resident cache
        g = HQ // HKV
        qs = q[:, t].reshape(HKV, g, D)
        kk = torch.cat([k[h: h + 1, pos[h]] for h in range(HKV)])
        probs = torch.softmax(qs @ kk.transpose(-1, -2) * CFG.layout.head_dim ** -0.5, -1)
        imp = imp_prev + probs.sum(1)
        for h in range(HKV):
            mid = list(range(2, pos.shape[1] - 3))
            keys = float_to_key(imp[h, mid], KeyFormat.FP16, 16).tolist()
            want = [pos[h, i].item() for _, i in stage1_topk(keys, mid, 16 - 5)]
            got = cache.pos[h, 2:-3].tolist()
            assert got == want


def test_hikv_query_aware_selection_respects_budget_and_forced_tokens():
    pol = dataclasses.replace(NO_STAGE2, budget=48, sinks=4, recent=8)
    for scorer in Stage1Scorer:
        p = dataclasses.replace(pol, scorer=scorer)
        q, k, v = _qkv(200, seed=8)
        cache = make_cache(MethodSpec.for_hikv(p), CFG)
        cache.prefill(q[:, :190], k[:, :190], v[:, :190])
        for t in range(190, 200):
            qg = q[:, t: t + 1].reshape(HKV, HQ // HKV, D)
            cache.decode(q[:, t: t + 1], k[:, t: t + 1], v[:, t: t + 1])
            sel = cache._select_query_aware(qg)
            assert cache.resident_tokens == t + 1
            for h in range(HKV):
                chosen = set(torch.nonzero(sel[h]).squeeze(1).tolist())
                assert len(chosen) <= 48
                assert set(range(4)) <= chosen and set(range(t - 7, t + 1)) <= chosen


def test_static_mask_is_sorter_stage2_on_magnitudes():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(20, 64, generator=g)
    x[0, :] = 0.5                                           # all ties: lowest indices win
    m = static_mask(x, 48, KeyFormat.FP16, 16)
    assert m.sum(-1).tolist() == [48] * 20
    assert m[0].tolist() == [True] * 48 + [False] * 16
    thresh = torch.where(m, x.abs(), torch.inf).amin(-1, keepdim=True)
    assert bool((torch.where(~m, x.abs(), -torch.inf) <= thresh).all())


def test_stage2_rules_change_bytes_as_layout_says():
    q, k, v = _qkv(130, seed=10)
    base = dataclasses.replace(CFG.policy, budget=64, sinks=4, recent=8)
    lay = CFG.layout
    for rule in (Stage2Rule(Stage2Kind.QUERY_CHANNELS, 32),
                 Stage2Rule(Stage2Kind.CHANNEL_GROUPS, 32, 8)):
        _, acc, _ = _run(MethodSpec.for_hikv(dataclasses.replace(base, k_rule=rule)),
                         q, k, v, 128)
        a = acc[-1][0]
        assert a.k_ideal == a.tokens * 32 * lay.elem_bytes
        assert a.k_burst % lay.burst_bytes == 0 and a.k_burst >= a.k_ideal
    _, acc, _ = _run(MethodSpec.for_hikv(dataclasses.replace(
        base, k_rule=Stage2Rule(Stage2Kind.STATIC, 48))), q, k, v, 128)
    a = acc[-1][0]
    assert a.k_ideal == a.tokens * lay.record_bytes(48)


def test_methods_are_deterministic():
    q, k, v = _qkv(90, seed=11)
    for spec in BYTE_SPECS:
        o1, a1, _ = _run(spec, q, k, v, 80)
        o2, a2, _ = _run(spec, q, k, v, 80)
        assert torch.equal(o1, o2) and a1 == a2


def test_bad_shapes_are_rejected():
    cache = make_cache(MethodSpec(Method.FULL), CFG)
    q, k, v = _qkv(4)
    with pytest.raises(ParamError, match="expected q"):
        cache.prefill(q[:3], k, v)
    with pytest.raises(ParamError, match="one token per step"):
        cache.prefill(q, k, v)
        cache.decode(q[:, :2], k[:, :2], v[:, :2])
    with pytest.raises(ParamError, match="prefill must come first"):
        cache.prefill(q, k, v)
    with pytest.raises(ParamError, match="needs a spec of method"):
        from hikv.model.methods.registry import H2O
        H2O(MethodSpec(Method.FULL), CFG.layout, q_heads=HQ, kv_heads=HKV)


def test_hikv_policy_must_fit_head_dim():
    pol = HiKVPolicy(k_rule=Stage2Rule(Stage2Kind.CHANNEL_GROUPS, keep=30, group=10))
    with pytest.raises(ParamError, match="group = 10 must divide head_dim = 64"):
        make_cache(MethodSpec.for_hikv(pol), CFG)


@pytest.mark.parametrize("label", ["hikv-query_aware@32/lowbit4",
                                   "hikv-query_aware@32/lowbit8/v:static48",
                                   "hikv-query_aware@32/lowbit4/k:think16"])
def test_lowbit_keys_kept_incrementally_equal_a_full_requantisation(label, monkeypatch):
    """The query-aware scorer's low-bit keys are quantised once per token (only the tokens
    appended since the last step), through capacity-buffer growth and ThinK's pruning at the
    end of prefill: at every step bit-identical to quantising the whole cache again, so the
    selections and outputs do not change."""
    from hikv.model.methods import hikv as hikv_cache
    from hikv.params import parse_method

    spec = parse_method(label, CFG.policy, D)
    q, k, v = _qkv(200, seed=7)
    seen = []
    incremental = hikv_cache.HiKV._lowbit_keys

    def checked(self, bits):
        got = incremental(self, bits)
        assert torch.equal(got, hikv_cache.lowbit_keys(self.k, bits)), self.resident_tokens
        seen.append(self.resident_tokens)
        return got

    monkeypatch.setattr(hikv_cache.HiKV, "_lowbit_keys", checked)
    out, _, cache = _run(spec, q, k, v, 40)
    assert seen == list(range(41, 201))         # every step, through three capacity buffers
    monkeypatch.setattr(hikv_cache.HiKV, "_lowbit_keys",
                        lambda self, bits: hikv_cache.lowbit_keys(self.k, bits))
    again, _, _ = _run(spec, q, k, v, 40)
    assert torch.equal(out, again)


@pytest.mark.parametrize("label", ["ds@32/r16", "ds@32/r8/b4", "ds@32/r32/b2"])
def test_ds_labels_kept_incrementally_equal_a_full_relabelling(label, monkeypatch):
    """Double Sparsity's labels (its channels of every key, quantised per token below 16
    bits) are made once per token, only for the tokens appended since the last step, through
    capacity-buffer growth: at every step bit-identical to labelling the whole cache again,
    so the selections and outputs do not change."""
    from hikv.model.methods import baselines
    from hikv.params import parse_method

    spec = parse_method(label, CFG.policy, D)
    q, k, v = _qkv(200, seed=11)
    seen = []
    incremental = baselines.DoubleSparsity._labels

    def checked(self):
        got = incremental(self)
        assert torch.equal(got, self._label(self.k)), self.resident_tokens
        seen.append(self.resident_tokens)
        return got

    monkeypatch.setattr(baselines.DoubleSparsity, "_labels", checked)
    out, _, _ = _run(spec, q, k, v, 40)
    assert seen == list(range(41, 201))         # every step, through three capacity buffers
    monkeypatch.setattr(baselines.DoubleSparsity, "_labels", lambda self: self._label(self.k))
    again, _, _ = _run(spec, q, k, v, 40)
    assert torch.equal(out, again)
