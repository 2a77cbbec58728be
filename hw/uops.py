"""Unsigned arithmetic and comparisons whose Verilog operands have equal widths.

Amaranth's RTLIL back end strips constant-zero extensions from operator operands, so
``a + b`` or ``a < 5`` with operands of different widths becomes Verilog that
``verilator -Wall`` flags (WIDTHEXPAND / WIDTHTRUNC). These helpers pad both operands to one
width and put a constant ``1`` above them: a compare is unchanged, the ``1``s cancel in a
difference and drop out of a sum by truncation, and synthesis removes the constant bit.
"""

from __future__ import annotations

from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Value

__all__ = ["pad1", "ult", "ule", "ugt", "uge", "ueq", "une", "uadd", "usub", "is_zero",
           "popcount"]

Operand = Value | int


def _val(v: Operand) -> Value:
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"unsigned operand must be >= 0, not {v}")
        return Const(v, max(1, v.bit_length()))
    return Value.cast(v)


def pad1(v: Operand, width: int) -> Value:
    """``v`` zero-extended to ``width`` bits with a constant 1 above (``width + 1`` bits)."""
    v = _val(v)
    if len(v) > width:
        raise ValueError(f"cannot pad a {len(v)}-bit value to {width} bits")
    parts = [v]
    if width > len(v):
        parts.append(Const(0, width - len(v)))
    parts.append(Const(1, 1))
    return Cat(*parts)


def _prep(a: Operand, b: Operand) -> tuple[Value, Value, int]:
    a, b = _val(a), _val(b)
    n = max(len(a), len(b))
    return pad1(a, n), pad1(b, n), n


def ult(a: Operand, b: Operand) -> Value:
    x, y, _ = _prep(a, b)
    return x < y


def ule(a: Operand, b: Operand) -> Value:
    x, y, _ = _prep(a, b)
    return x <= y


def ugt(a: Operand, b: Operand) -> Value:
    x, y, _ = _prep(a, b)
    return x > y


def uge(a: Operand, b: Operand) -> Value:
    x, y, _ = _prep(a, b)
    return x >= y


def ueq(a: Operand, b: Operand) -> Value:
    x, y, _ = _prep(a, b)
    return x == y


def une(a: Operand, b: Operand) -> Value:
    x, y, _ = _prep(a, b)
    return x != y


def is_zero(a: Value) -> Value:
    return ~Value.cast(a).any()


def uadd(a: Operand, b: Operand) -> Value:
    """``a + b`` exactly, ``max(len) + 1`` bits."""
    x, y, n = _prep(a, b)
    return (x + y)[:n + 1]


def usub(a: Operand, b: Operand) -> Value:
    """``a - b`` modulo ``2**max(len)`` (exact when ``a >= b``), ``max(len)`` bits."""
    x, y, n = _prep(a, b)
    return (x - y)[:n]


def popcount(bits: Sequence[Value]) -> Value:
    """Number of set bits, a balanced tree of equal-width adders."""
    level = [Value.cast(b) for b in bits]
    if not level:
        return Const(0, 1)
    while len(level) > 1:
        nxt = [uadd(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]
