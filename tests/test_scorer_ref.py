"""The low-bit scoring reference (hikv.model.refs.lowbit) against the golden model and exact
maths."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
import torch

from hikv.model.methods.hikv import lowbit_keys
from hikv.model.methods.registry import make_cache
from hikv.model.refs import lowbit as LB
from hikv.model.refs.keys import float_to_key
from hikv.model.refs.sorter import topk_indices
from hikv.params import (
    KeyFormat,
    MethodSpec,
    ParamError,
    ScorerParams,
    Stage1Scorer,
    Stage2Rule,
)
from hikv.presets import get_preset


def _lowbit_formula(k: torch.Tensor, bits: int) -> torch.Tensor:
    """The algorithm as stated (per-token asymmetric min/max quantisation, dequantised), in
    torch float32: what the golden model computed before it used :mod:`hikv.model.refs.lowbit`."""
    lo = k.amin(-1, keepdim=True)
    hi = k.amax(-1, keepdim=True)
    step = ((hi - lo) / (2**bits - 1)).clamp_min(1e-8)
    return torch.round((k - lo) / step) * step + lo


@pytest.mark.parametrize("bits", [4, 8])
def test_dequantised_keys_are_the_golden_models(bits):
    """quantise + dequantise is bit-identical to the algorithm's torch statement, and the golden
    model's ``lowbit_keys`` is that reference."""
    seed = 100 + bits
    rng = np.random.default_rng(seed)
    k = (rng.standard_normal((3, 50, 64)) * rng.uniform(0.01, 100, (3, 50, 1))
         ).astype(np.float32)
    k[0, 0] = 0.0                        # constant token: step clamps to 1e-8
    k[0, 1] = 7.25
    k[1, 2, :] = np.float32(65504.0) * np.sign(rng.standard_normal(64))   # extreme
    codes, lo, step = LB.quantise_keys(k, bits)
    assert codes.max() <= 2**bits - 1
    ref = LB.dequantise(codes, lo, step)
    gold = _lowbit_formula(torch.from_numpy(k), bits).numpy()
    np.testing.assert_array_equal(lowbit_keys(torch.from_numpy(k), bits).numpy(), gold)
    assert ref.dtype == np.float32
    np.testing.assert_array_equal(ref.view(np.uint32), gold.view(np.uint32),
                                  err_msg=f"seed {seed} bits {bits}")


@pytest.mark.parametrize("width", [16, 11, 8])
def test_fp16_key_is_the_golden_key_mapping(width):
    """Every finite fp16 pattern maps like ``keys.float_to_key(signed=True)``."""
    pats = np.arange(1 << 16, dtype=np.uint16)
    finite = (pats & 0x7C00) != 0x7C00
    pats = pats[finite]
    gold = float_to_key(torch.from_numpy(pats.view(np.float16).copy()), KeyFormat.FP16,
                        width, signed=True).numpy()
    np.testing.assert_array_equal(LB.fp16_key(pats, width), gold)
    inf = float_to_key(torch.tensor([float("inf"), -float("inf")], dtype=torch.float16),
                       KeyFormat.FP16, width, signed=True).numpy()
    np.testing.assert_array_equal(LB.fp16_key(np.array([0x7C00, 0xFC00]), width), inf)


def test_round_fp16_is_the_correctly_rounded_exact_value():
    """Against numpy's float64 -> float16 (one correct rounding; torch goes through float32
    and rounds twice just below 65520). ``S * 2**-24`` is exact in float64 for these ``S``."""
    seed = 7
    rng = np.random.default_rng(seed)
    specials = [0, 1, -1, 1023, 1024, 2047, 2048, 2049, 2050, 2051, 4095, 4097, 6143, 6145,
                (65504 << 24), (65504 << 24) + (1 << 28), (65520 << 24) - 1, 65520 << 24,
                1 << 60, -(1 << 60)]
    for s in specials + [int(x) for x in rng.integers(-(1 << 50), 1 << 50, 3000)] + [
            int(x) >> int(r) for x, r in zip(rng.integers(-(1 << 62), 1 << 62, 2000),
                                              rng.integers(10, 62, 2000), strict=True)]:
        got = LB.round_fp16(s)
        x = Fraction(s, 1 << 24)
        assert Fraction(float(x)) == x
        with np.errstate(over="ignore"):
            want = int(np.float64(x).astype(np.float16).view(np.uint16))
        want = 0 if s == 0 else want
        assert got == want, f"seed {seed}: S = {s}: got {got:#06x}, want {want:#06x}"


def test_exact_score_is_step_dot_plus_lo_sum():
    seed = 11
    rng = np.random.default_rng(seed)
    pats = rng.integers(0, 1 << 16, 4000)
    pats = pats[(pats & 0x7C00) != 0x7C00]
    for i in range(0, len(pats) - 1, 2):
        d_dot, q_sum = (int(x) for x in rng.integers(-(1 << 22), 1 << 22, 2))
        lo, step = int(pats[i]), int(pats[i + 1])
        val = Fraction(float(np.uint16(step).view(np.float16))) * d_dot + Fraction(
            float(np.uint16(lo).view(np.float16))) * q_sum
        assert Fraction(LB.exact_score(d_dot, q_sum, lo, step), 1 << 24) == val, (
            f"seed {seed}: D {d_dot} Q {q_sum} lo {lo:#06x} step {step:#06x}")


@pytest.mark.parametrize("name,value,words", [
    ("lanes", 0, ["ScorerParams.lanes", "[1, 64]"]),
    ("lanes", 65, ["ScorerParams.lanes", "[1, 64]"]),
    ("query_bits", 1, ["ScorerParams.query_bits", "[2, 16]"]),
    ("query_bits", 17, ["ScorerParams.query_bits", "[2, 16]"]),
])
def test_scorer_params_reject(name, value, words):
    with pytest.raises(ParamError) as exc:
        ScorerParams(**{name: value})
    assert all(w in str(exc.value) for w in words), str(exc.value)


def test_every_scorer_field_is_rejection_tested():
    tested = {"lanes", "query_bits"}
    assert {f.name for f in dataclasses.fields(ScorerParams)} == tested


def test_rejects_bad_parameters():
    with pytest.raises(ParamError, match="lowbit bits = 9"):
        LB.quantise_keys(np.zeros((2, 4)), 9)
    with pytest.raises(ParamError, match="query_bits = 1"):
        LB.quantise_query(np.zeros(4), 1)
    with pytest.raises(ParamError, match="not finite"):
        LB.fp16_fields(0x7C00)
    with pytest.raises(ParamError, match="key width = 17"):
        LB.fp16_key(0, 17)
    with pytest.raises(ParamError, match="query has 4 elements, keys 5"):
        LB.dot(np.zeros(4), np.zeros((2, 5)))


def _representable_keys(rng, n, d, bits):
    """Keys whose min/max quantisation is exact in fp16: ``lo`` on a coarse grid, ``step`` a
    power of two, one element at ``lo`` and one at ``lo + (2**b - 1) * step`` per token, the
    others within 0.3 steps of a code."""
    lo = rng.integers(-64, 64, (n, 1)) / 64.0
    step = 2.0 ** rng.integers(-2 - bits, -bits, (n, 1))
    codes = rng.integers(0, 2**bits, (n, d))
    codes[:, 0], codes[:, 1] = 0, 2**bits - 1
    noise = rng.uniform(-0.3, 0.3, (n, d))
    noise = np.where(codes == 0, np.abs(noise), noise)          # never below lo
    noise = np.where(codes == 2**bits - 1, -np.abs(noise), noise) * step
    noise[:, :2] = 0
    return (lo + codes * step + noise).astype(np.float32)


QEXP = 4     # query = 8-bit integers x 2**-QEXP


@pytest.mark.parametrize("bits", [4, 8])
def test_reference_selects_what_the_golden_scorer_selects(bits):
    """The integer pipeline (stored fp16 lo/step, int query, exact score, fp16 key) chooses the
    golden model's Stage I tokens (one query per KV head) whenever neither side has a tie at
    the selection boundary. Keys and query are drawn so that the stored formats hold them
    exactly (fp16 lo/step, 8-bit query): the two differ only in float rounding."""
    cfg = get_preset("default")
    d, hkv = cfg.layout.head_dim, 2
    pol = dataclasses.replace(cfg.policy, budget=64, sinks=4, recent=8,
                              scorer=Stage1Scorer.LOWBIT_KEYS, lowbit_bits=bits,
                              k_rule=Stage2Rule(), v_rule=Stage2Rule())
    checked = trials = 0
    for seed in range(20):
        rng = np.random.default_rng(1000 * bits + seed)
        n = 200
        k = np.stack([_representable_keys(rng, n, d, bits) for _ in range(hkv)])
        q_int = rng.integers(-127, 128, (hkv, d))
        q_int[:, 0] = 127
        qf = (q_int * 2.0**-QEXP).astype(np.float32)
        cache = make_cache(MethodSpec.for_hikv(pol), cfg, q_heads=hkv, kv_heads=hkv)
        kt = torch.from_numpy(k)
        cache.prefill(torch.zeros(hkv, n, d), kt, torch.zeros(hkv, n, d))
        gold_sel = cache._select_query_aware(torch.from_numpy(qf)[:, None, :])
        forced = cache._forced(n)
        cand = np.nonzero(~forced.numpy())[0]
        n_imp = pol.budget - int(forced.sum())
        for h in range(hkv):
            trials += 1
            meta = LB.store(k[h], bits)
            qi, s = LB.quantise_query(qf[h], 8)
            assert s == 2.0**-QEXP and np.array_equal(qi, q_int[h]), f"seed {seed}"
            lo32 = np.uint16(meta.lo16).view(np.float16).astype(np.float32)
            assert np.array_equal(lo32, LB.quantise_keys(k[h], bits)[1][:, 0]), f"seed {seed}"
            _, keys = LB.score_keys(qi, meta, cfg.sorter.key_width)
            kc = torch.from_numpy(keys[cand])
            ours = set(cand[topk_indices(kc, n_imp).numpy()].tolist())
            # golden keys of the candidates, for the tie check
            kq = lowbit_keys(kt[h], bits)
            s_hat = torch.softmax((torch.from_numpy(qf[h]) @ kq.T * cache.scale).float(), -1)
            gk = float_to_key(s_hat[cand], cfg.key_format, cfg.sorter.key_width)
            if _boundary_tie(gk, n_imp) or _boundary_tie(kc, n_imp):
                continue
            checked += 1
            gold = set(torch.nonzero(gold_sel[h] & ~forced).squeeze(1).tolist())
            assert ours == gold, (f"bits {bits} seed {1000 * bits + seed} head {h}: "
                                  f"only ours {sorted(ours - gold)}, only golden "
                                  f"{sorted(gold - ours)}")
    assert checked >= 0.7 * trials, f"only {checked} of {trials} trials free of ties"


def _boundary_tie(keys: torch.Tensor, k: int) -> bool:
    s = torch.sort(keys, descending=True).values
    return bool(s[k - 1] == s[k])


def test_golden_model_unchanged_when_its_quantiser_is_the_reference(monkeypatch):
    """The golden model's quantiser (model/refs/lowbit.py's) against the plain torch formula:
    swapping them leaves a HiKV query-aware decode (4-bit scorer, GQA-3, the default preset's
    shape) bit-identical."""
    from hikv.model.methods import hikv as hikv_cache
    cfg = get_preset("default")
    pol = dataclasses.replace(cfg.policy, budget=48, sinks=4, recent=8,
                              scorer=Stage1Scorer.LOWBIT_KEYS, lowbit_bits=4)
    g = torch.Generator().manual_seed(21)
    hq, hkv, d = cfg.model.q_heads, cfg.model.kv_heads, cfg.layout.head_dim
    q, k, v = (torch.randn(h, 140, d, generator=g) for h in (hq, hkv, hkv))

    def run():
        cache = make_cache(MethodSpec.for_hikv(pol), cfg)
        outs = [cache.prefill(q[:, :120], k[:, :120], v[:, :120])]
        for t in range(120, 140):
            outs.append(cache.decode(q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1])[0])
        return torch.cat(outs, 1)

    ref = run()
    monkeypatch.setattr(hikv_cache, "lowbit_keys", _lowbit_formula)
    swapped = run()
    assert torch.equal(ref, swapped), "seed 21: the swap changed the golden model's output"
