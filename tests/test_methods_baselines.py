"""The defining property of each baseline added for issue 15, on seeded random tensors and on
the tiny random LM: StreamingLLM keeps sinks + recent, TOVA evicts the layer's argmin, H2O's
averaged score is kvpress's ObservedAttention rule."""

from __future__ import annotations

import pytest
import torch

from hikv.model.attention import causal_prefill, group_queries
from hikv.model.methods import make_cache
from hikv.params import Method, MethodSpec
from hikv.presets import get_preset

CFG = get_preset("default")          # d = 64, 9 query heads, 3 KV heads
HQ, HKV, D = CFG.model.q_heads, CFG.model.kv_heads, CFG.layout.head_dim


def _qkv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(HQ, n, D, generator=g), torch.randn(HKV, n, D, generator=g),
            torch.randn(HKV, n, D, generator=g))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n_prompt", [10, 60])
def test_streamingllm_keeps_sinks_and_recent(seed: int, n_prompt: int) -> None:
    spec = MethodSpec(Method.STREAMING_LLM, budget=24, sinks=4)
    q, k, v = _qkv(n_prompt + 30, seed)
    c = make_cache(spec, CFG)
    c.prefill(q[:, :n_prompt], k[:, :n_prompt], v[:, :n_prompt])
    for t in range(n_prompt, q.shape[1]):
        c.decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1])
        seen = t + 1
        want = list(range(seen)) if seen <= 24 else [*range(4), *range(seen - 20, seen)]
        assert c.pos is not None
        for h in range(HKV):
            assert c.pos[h].tolist() == want, f"seed={seed} step={t} head={h}"
        # the cache's K rows are those of the kept positions
        assert c.k is not None
        torch.testing.assert_close(c.k, k[:, want], msg=f"seed={seed} t={t}")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tova_evicts_the_layer_argmin(seed: int) -> None:
    """Each step over budget drops exactly one token, in every KV head the same: the one whose
    attention from the current query, averaged over all query heads, is lowest."""
    b = 16
    spec = MethodSpec(Method.TOVA, budget=b)
    q, k, v = _qkv(60, seed)
    c = make_cache(spec, CFG)
    c.prefill(q[:, :40], k[:, :40], v[:, :40])
    # prefill: the b tokens the last prompt query attends most (mean over all heads)
    _, _, obs = causal_prefill(q[:, :40], k[:, :40], v[:, :40], c.scale, window=1)
    assert obs is not None
    want = sorted(torch.argsort(obs.sum(0), descending=True, stable=True)[:b].tolist())
    assert c.pos is not None and c.pos[0].tolist() == want, f"seed={seed}"
    for t in range(40, 60):
        before = c.pos[0].tolist() + [t]
        assert c.k is not None
        kk = torch.cat([c.k, k[:, t:t + 1]], 1)
        qg = group_queries(q[:, t:t + 1], HKV)
        probs = torch.softmax((qg @ kk.transpose(-1, -2)) * c.scale, -1).mean((0, 1))
        c.decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1])
        after = c.pos[0].tolist()
        gone = set(before) - set(after)
        assert len(after) == b and len(gone) == 1, f"seed={seed} t={t}"
        dropped = before.index(gone.pop())
        assert float(probs[dropped]) == pytest.approx(float(probs.min()), abs=1e-7), \
            f"seed={seed} t={t}: evicted slot {dropped} is not the argmin"
        assert all(c.pos[h].tolist() == after for h in range(HKV)), f"seed={seed} t={t}"


@pytest.mark.parametrize("seed", [0, 3])
def test_h2o_averaged_is_observed_attention(seed: int) -> None:
    """Prefill keeps the top-B of (attention summed over the queries that see a key) / (their
    number), no recent window; decode keeps the same rule with counts growing by one."""
    b, n = 20, 50
    spec = MethodSpec(Method.H2O, budget=b, recent=0, averaged=True)
    q, k, v = _qkv(n + 10, seed)
    c = make_cache(spec, CFG)
    c.prefill(q[:, :n], k[:, :n], v[:, :n])
    _, sums, _ = causal_prefill(q[:, :n], k[:, :n], v[:, :n], c.scale, col_sums=True)
    assert sums is not None
    avg = sums / torch.arange(n, 0, -1)
    assert c.pos is not None
    for h in range(HKV):
        want = sorted(torch.topk(avg[h], b).indices.tolist())
        assert c.pos[h].tolist() == want, f"seed={seed} head={h}"
    summed = make_cache(MethodSpec(Method.H2O, budget=b, recent=0), CFG)
    summed.prefill(q[:, :n], k[:, :n], v[:, :n])
    assert summed.pos is not None and not torch.equal(summed.pos, c.pos), \
        f"seed={seed}: the averaged and summed rules chose the same tokens"
    for t in range(n, n + 10):
        _, acc = c.decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1])
        assert c.resident_tokens == b
        # counts: queries that could see each resident token
        torch.testing.assert_close(c.cnt, (t + 1 - c.pos).float())
        assert acc[0].meta_ideal == b * 2 * 2, f"seed={seed}: score + count per cached token"


def test_labels_round_trip_and_reject() -> None:
    from hikv.params import ParamError, parse_method

    p, d = CFG.policy, D
    for text in ("streamingllm@64", "tova@64", "h2o@64/avg"):
        spec = parse_method(text, p, d)
        assert spec.label == text and parse_method(spec.label, p, d) == spec
    assert parse_method("h2o@64/avg", p, d).recent == 0
    assert parse_method("streamingllm@2", p, d).sinks == 2
    with pytest.raises(ParamError, match="only allowed for h2o"):
        parse_method("snapkv@64/avg", p, d)
