"""Low-bit Stage I scoring: the integer arithmetic, defined once (numpy, no torch).

The bit-exact reference of the scoring unit (:mod:`hikv.hw.scorer`) and the quantisation the
golden model's low-bit scorer uses (``HiKV`` with ``scorer = lowbit_keys``).

1. **Keys** (:func:`quantise_keys`): per token, asymmetric min/max quantisation to ``b`` bits:
   ``lo = min(k)``, ``step = max((max(k) - lo) / (2**b - 1), 1e-8)``, ``code = round((k - lo) /
   step)`` (round half to even), all in float32; :func:`dequantise` gives ``code * step + lo``,
   bit-identical to the golden model's dequantised keys.
2. **Stored metadata** (:func:`store`): the codes (``b`` bits each) and ``lo`` and ``step`` in
   the element format, fp16 (the ``2 * elem_bytes`` per token of the byte account), as raw
   16-bit patterns. This is what the scoring unit reads.
3. **Query** (:func:`quantise_query`): symmetric, ``query_bits``-bit signed integers
   ``q_int = round(q / s)`` with ``s = max|q| / (2**(query_bits-1) - 1)`` (one scale per query;
   a positive common factor does not change the order of the scores).
4. **Integer dot product** (:func:`dot`): ``D = sum_i q_int[i] * code[i]`` (exact) and
   ``Q = sum_i q_int[i]``.
5. **Score** (:func:`exact_score`): ``step * D + lo * Q`` is exactly ``q_int . dequantised key``
   with the stored ``lo`` and ``step``; it is computed exactly as an integer ``S`` in units of
   ``2**-24`` (the fp16 grid: a finite fp16 value is ``M * 2**(e - 25)``, ``M`` the 11-bit
   significand, ``e = max(exponent field, 1)``).
6. **Rounding** (:func:`round_fp16`): ``S * 2**-24`` to fp16, round to nearest even, beyond the
   largest finite value to infinity (one correct rounding, as numpy's float64 -> float16).
7. **Key** (:func:`fp16_key`): the signed order-preserving map of :mod:`hikv.model.refs.keys`
   (``float_to_key(x, FP16, width, signed=True)``): negative patterns inverted, non-negative
   ones with the sign bit set, the top ``width`` bits kept.

:func:`score_keys` chains 4 to 7 for a whole stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hikv.params import ParamError

__all__ = [
    "FP16_GRID_EXP",
    "LowbitMeta",
    "quantise_keys",
    "dequantise",
    "store",
    "quantise_query",
    "fp16_fields",
    "dot",
    "exact_score",
    "round_fp16",
    "fp16_key",
    "score_keys",
]

#: exact scores are integers in units of 2**-FP16_GRID_EXP (the fp16 subnormal step)
FP16_GRID_EXP = 24
_FP16_INF = 0x7C00


def _bits(bits: int) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ParamError(f"lowbit bits = {bits!r} is out of range: allowed [1, 8]")


def quantise_keys(k: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-token codes (uint8, ``[..., d]``), ``lo`` and ``step`` (float32, ``[..., 1]``).

    ``k`` is cast to float32 (the golden model's compute type); the last axis is the head
    dimension.
    """
    _bits(bits)
    k = np.asarray(k, dtype=np.float32)
    lo = k.min(-1, keepdims=True)
    hi = k.max(-1, keepdims=True)
    step = np.maximum((hi - lo) / np.float32(2**bits - 1), np.float32(1e-8))
    codes = np.rint((k - lo) / step)
    if codes.size and (codes.min() < 0 or codes.max() > 2**bits - 1):
        raise ParamError(f"lowbit codes out of [0, {2**bits - 1}] (non-finite keys?)")
    return codes.astype(np.uint8), lo, step


def dequantise(codes: np.ndarray, lo: np.ndarray, step: np.ndarray) -> np.ndarray:
    """``code * step + lo`` in float32 (the golden model's quantised keys)."""
    return codes.astype(np.float32) * step + lo


@dataclass(frozen=True)
class LowbitMeta:
    """Stored Stage I metadata of ``n`` tokens: what the scoring unit reads."""

    codes: np.ndarray     # uint8 [n, d], each < 2**bits
    lo16: np.ndarray      # uint16 [n], fp16 bit patterns of the per-token offset
    step16: np.ndarray    # uint16 [n], fp16 bit patterns of the per-token scale
    bits: int


def store(k: np.ndarray, bits: int) -> LowbitMeta:
    """Quantise keys ``[n, d]`` and store ``lo``/``step`` as fp16 (the element format)."""
    codes, lo, step = quantise_keys(k, bits)
    with np.errstate(over="ignore"):
        lo16 = lo[..., 0].astype(np.float16).view(np.uint16)
        step16 = step[..., 0].astype(np.float16).view(np.uint16)
    return LowbitMeta(codes=codes, lo16=lo16, step16=step16, bits=bits)


def quantise_query(q: np.ndarray, query_bits: int) -> tuple[np.ndarray, float]:
    """``(q_int, s)``: ``q_int = round(q / s)`` (int64, ``|q_int| <= 2**(query_bits-1) - 1``),
    ``s = max|q| / (2**(query_bits-1) - 1)`` (1.0 for an all-zero query)."""
    if isinstance(query_bits, bool) or not isinstance(query_bits, int) or not (
            2 <= query_bits <= 16):
        raise ParamError(f"query_bits = {query_bits!r} is out of range: allowed [2, 16]")
    q = np.asarray(q, dtype=np.float64)
    qmax = 2 ** (query_bits - 1) - 1
    peak = float(np.abs(q).max()) if q.size else 0.0
    s = peak / qmax if peak > 0 else 1.0
    return np.clip(np.rint(q / s), -qmax, qmax).astype(np.int64), s


def fp16_fields(pattern: int) -> tuple[int, int, int]:
    """``(sign, M, e)`` of a finite fp16 pattern: value ``(-1)**sign * M * 2**(e - 25)``."""
    pattern = int(pattern)
    if not 0 <= pattern < 1 << 16:
        raise ParamError(f"fp16 pattern {pattern!r} out of range: allowed [0, 65535]")
    exp = (pattern >> 10) & 0x1F
    if exp == 0x1F:
        raise ParamError(f"fp16 pattern {pattern:#06x} is not finite (inf or NaN metadata)")
    mant = pattern & 0x3FF
    return pattern >> 15, mant | (1 << 10 if exp else 0), max(exp, 1)


def dot(q_int: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, int]:
    """``(D, Q)``: ``D[t] = sum_i q_int[i] * codes[t, i]`` (int64) and ``Q = sum_i q_int[i]``."""
    q_int = np.asarray(q_int, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    if codes.shape[-1] != q_int.shape[-1]:
        raise ParamError(f"query has {q_int.shape[-1]} elements, keys {codes.shape[-1]}")
    return codes @ q_int, int(q_int.sum())


def exact_score(d_dot: int, q_sum: int, lo16: int, step16: int) -> int:
    """``S`` with ``S * 2**-24 == step * D + lo * Q`` exactly (a Python int)."""
    ss, ms, es = fp16_fields(step16)
    sl, ml, el = fp16_fields(lo16)
    a = (-1) ** ss * ms * int(d_dot) << (es - 1)
    b = (-1) ** sl * ml * int(q_sum) << (el - 1)
    return a + b


def round_fp16(s: int) -> int:
    """fp16 pattern of ``s * 2**-24``: round to nearest even, overflow to infinity, 0 -> +0."""
    s = int(s)
    mag = abs(s)
    if mag < 1 << 11:                   # subnormal or the first binade: exact
        bits = mag
    else:
        sh = mag.bit_length() - 11      # keep 11 significant bits
        r = mag >> sh
        rem = mag - (r << sh)
        half = 1 << (sh - 1)
        if rem > half or (rem == half and r & 1):
            r += 1
        bits = min((sh << 10) + r, _FP16_INF)   # r = 2**11 carries into the exponent
    return bits | (0x8000 if s < 0 and bits else 0)


def fp16_key(pattern: np.ndarray | int, width: int) -> np.ndarray:
    """Signed order-preserving sorter key of fp16 patterns (``keys.float_to_key`` with
    ``signed=True``): the top ``width`` bits of the mapped pattern."""
    if not 1 <= width <= 16:
        raise ParamError(f"key width = {width} is out of range: allowed [1, 16]")
    b = np.asarray(pattern, dtype=np.int64) & 0xFFFF
    b = np.where(b == 0x8000, 0, b)     # -0.0 -> +0.0
    b = np.where(b & 0x8000, b ^ 0xFFFF, b | 0x8000)
    return b >> (16 - width)


def score_keys(q_int: np.ndarray, meta: LowbitMeta, key_width: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """``(fp16 score patterns, sorter keys)`` of every stored token for one integer query."""
    d_dot, q_sum = dot(q_int, meta.codes)
    pats = np.array([round_fp16(exact_score(int(d_dot[t]), q_sum, int(meta.lo16[t]),
                                            int(meta.step16[t])))
                     for t in range(len(d_dot))], dtype=np.int64)
    return pats, fp16_key(pats, key_width)
