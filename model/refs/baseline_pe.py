"""Bit-exact references of the baseline accelerator's arithmetic (hw/baseline_pe.py).

The baseline attention accelerator is modelled for area with two units, written from these
algorithms (integers only, no floating point):

**MAC lane** (q.k and p.v): ``acc <- acc + a * b`` with ``a``, ``b`` IEEE binary16 and ``acc``
binary32 bits. Simplifications, all documented and all in the area's favour of the baseline
(a full IEEE unit is larger): subnormal inputs and results are flushed to zero; exponent 31 of
binary16 is treated as an ordinary exponent (no infinities or NaNs); the product is exact (an
11 x 11-bit significand product fits binary32's 24 bits); the addition aligns the smaller
operand by a right shift that truncates, adds or subtracts, renormalises, and truncates (round
towards zero on the aligned operand); an exponent overflow saturates to the largest finite
binary32. Zero results are +0.

**Exp unit** (softmax lane): ``exp(-|x|)`` of a binary16 ``x`` as binary16, computed as
``2^-(|x| log2 e)``: ``|x| log2 e`` in fixed point with 10 fraction bits (a Q1.15 constant),
integer part ``I`` and fraction ``F``; ``2^-F`` from a 16-segment piecewise-linear table in Q1.15
(exact end points ``round(2^(-s/16) 2^15)``, interpolation on the low 6 bits of ``F``, truncated);
the result is truncated to binary16 and flushed to zero below its smallest normal. Relative
error below 1e-3 for every binary16 input whose result exceeds 2^-13 (measured against
``math.exp`` by the tests: 9.5e-4).
"""

from __future__ import annotations

import math

__all__ = ["MAC_LATENCY", "EXP_LATENCY", "LOG2E_Q15", "EXP_BASE", "EXP_DELTA", "fp16_product",
           "fp32_add", "mac", "exp_neg", "fp16_to_float", "fp32_to_float", "float_to_fp16"]

#: pipeline latencies of the RTL units (cycles from an input to the result reflecting it)
MAC_LATENCY = 2
EXP_LATENCY = 2

#: log2(e) in Q1.15
LOG2E_Q15 = round(math.log2(math.e) * 2**15)
#: 2^(-s/16) in Q1.15 for s = 0..16, and the per-segment differences
_POW = [round(2 ** (-s / 16) * 2**15) for s in range(17)]
EXP_BASE = tuple(_POW[:16])
EXP_DELTA = tuple(_POW[s] - _POW[s + 1] for s in range(16))

_M23 = (1 << 23) - 1


def fp16_product(a: int, b: int) -> tuple[int, int, int] | None:
    """Exact product of two binary16 values as (sign, binary32 biased exponent, 24-bit
    significand with the hidden one at bit 23); None if either input is zero or subnormal."""
    ea, eb = (a >> 10) & 31, (b >> 10) & 31
    if ea == 0 or eb == 0:
        return None
    p = ((1 << 10) | (a & 1023)) * ((1 << 10) | (b & 1023))   # 22 bits, top bit 21 or 20
    sign = ((a >> 15) ^ (b >> 15)) & 1
    if p >> 21:
        return sign, ea + eb + 98, p << 2
    return sign, ea + eb + 97, p << 3


def _unpack32(x: int) -> tuple[int, int, int] | None:
    e = (x >> 23) & 255
    if e == 0:
        return None
    return (x >> 31) & 1, e, (1 << 23) | (x & _M23)


def _pack32(s: int, e: int, m: int) -> int:
    return (s << 31) | (e << 23) | (m & _M23)


def fp32_add(x: int, y: tuple[int, int, int] | None) -> int:
    """binary32 bits ``x`` plus the unpacked operand ``y`` (see module docstring)."""
    ux = _unpack32(x)
    if y is None:
        return 0 if ux is None else x
    if ux is None:
        return _pack32(*y)
    (sx, ex, mx), (sy, ey, my) = ux, y
    if (ey, my) > (ex, mx):
        (sb, eb, mb), (ss, es, ms) = (sy, ey, my), (sx, ex, mx)
    else:
        (sb, eb, mb), (ss, es, ms) = (sx, ex, mx), (sy, ey, my)
    d = eb - es
    aligned = ms >> d if d < 32 else 0
    if sb == ss:
        s = mb + aligned
        e = eb
        if s >> 24:
            s >>= 1
            e += 1
        if e >= 255:
            return _pack32(sb, 254, (1 << 24) - 1)
        return _pack32(sb, e, s)
    s = mb - aligned
    if s == 0:
        return 0
    lz = 24 - s.bit_length()
    e = eb - lz
    if e <= 0:
        return 0
    return _pack32(sb, e, s << lz)


def mac(acc: int, a: int, b: int) -> int:
    """One MAC lane step: binary32 ``acc`` + binary16 ``a`` x binary16 ``b``."""
    return fp32_add(acc, fp16_product(a, b))


def exp_neg(x: int) -> int:
    """binary16 bits of exp(-|x|) for binary16 bits ``x`` (see module docstring)."""
    e = (x >> 10) & 31
    if e == 0:
        return 0x3C00
    prod = ((1 << 10) | (x & 1023)) * LOG2E_Q15          # 27 bits
    y_fix = prod << (e - 30) if e >= 30 else prod >> (30 - e)
    i, f = y_fix >> 10, y_fix & 1023
    if i >= 15:
        return 0
    s, t = f >> 6, f & 63
    r = EXP_BASE[s] - ((EXP_DELTA[s] * t) >> 6)
    if r == 1 << 15:
        exp, mant = 15 - i, 0
    else:
        exp, mant = 14 - i, (r >> 4) & 1023
    if exp <= 0:
        return 0
    return (exp << 10) | mant


# --------------------------------------------------------------------------- conversions
def fp16_to_float(x: int) -> float:
    e, f = (x >> 10) & 31, x & 1023
    sign = -1.0 if x >> 15 else 1.0
    if e == 0:
        return sign * f * 2.0**-24
    return sign * (1024 + f) * 2.0 ** (e - 25)


def fp32_to_float(x: int) -> float:
    e, f = (x >> 23) & 255, x & _M23
    sign = -1.0 if x >> 31 else 1.0
    if e == 0:
        return sign * f * 2.0**-149
    return sign * ((1 << 23) | f) * 2.0 ** (e - 150)


def float_to_fp16(v: float) -> int:
    """Nearest binary16 bits of a finite float (via the struct module's IEEE half)."""
    import struct

    return struct.unpack("<H", struct.pack("<e", v))[0]
