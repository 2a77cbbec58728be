"""Unsigned arithmetic, comparisons and bit-vector selection whose Verilog operands have equal
widths: the one helper module of every RTL block (sorter, loader).

Amaranth's RTLIL back end strips constant-zero extensions from operator operands, so
``a + b`` or ``a < 5`` with operands of different widths becomes Verilog that
``verilator -Wall`` flags (WIDTHEXPAND / WIDTHTRUNC). Two families avoid it:

* exact: :func:`ult` ... :func:`usub`, :func:`popcount` pad both operands to one width and put
  a constant ``1`` above them: a compare is unchanged, the ``1``s cancel in a difference and
  drop out of a sum by truncation, and synthesis removes the constant bit;
* fixed width: :func:`zext` zero-extends (or truncates) to a given width, opaque to operand
  shortening (``^ 0``); :func:`add_w`, :func:`sub_w`, :func:`mul_w` compute modulo
  ``2**width``; :func:`eq_const` compares with a constant without a shortened operand.

Selection helpers (:func:`onehot`, :func:`lowest`, :func:`highest`, :func:`select`) build the
one-hot, priority-encoder and mux-tree logic the blocks share. All cost nothing after
synthesis beyond the logic they describe.
"""

from __future__ import annotations

from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, ValueLike

__all__ = ["pad1", "ult", "ule", "ugt", "uge", "ueq", "une", "uadd", "usub", "is_zero",
           "popcount", "log2_int", "zext", "add_w", "sub_w", "add_cs", "sub_cs", "ult_cs",
           "mul_w", "eq_const", "onehot", "lowest", "highest", "select"]

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


# ------------------------------------------------------------------------ fixed width
def log2_int(n: int) -> int:
    """Bits to index ``n`` items: ``ceil(log2(n))``, 0 for ``n <= 1`` (a Python int)."""
    return (n - 1).bit_length() if n > 1 else 0


def zext(v: ValueLike, width: int) -> Value:
    """``v`` zero-extended (or truncated) to ``width`` bits, opaque to operand shortening."""
    v = Value.cast(v)
    e = Cat(v, Const(0, width - len(v))) if width > len(v) else v[:width]
    return e ^ Const(0, width)


def add_w(a: ValueLike, b: ValueLike, width: int) -> Value:
    """``(a + b) mod 2**width``, ``width`` bits."""
    return (zext(a, width) + zext(b, width))[:width]


def sub_w(a: ValueLike, b: ValueLike, width: int) -> Value:
    """``(a - b) mod 2**width``, ``width`` bits."""
    return (zext(a, width) - zext(b, width))[:width]


def add_cs(a: ValueLike, b: ValueLike, width: int, *, cin: ValueLike = 0,
           slice_bits: int = 8) -> Value:
    """``(a + b + cin) mod 2**width`` as a carry-select adder, ``width`` bits: ``slice_bits``-bit
    slices, each after the first added for both carries in, the carry chosen slice by slice
    (one ripple slice and a multiplexer per further slice instead of a ``width``-bit ripple;
    about twice the adder cells). ``cin``: one bit."""
    a, b = zext(a, width), zext(b, width)
    one = Const(1, 1)

    def with_carry(x: Value, y: Value, c: ValueLike) -> Value:    # x + y + c, carry on top
        n = len(x)
        return add_w(Cat(one, x), Cat(Value.cast(c)[:1] if not isinstance(c, int)
                                      else Const(c, 1), y), n + 2)[1:]

    parts, carry = [], None
    for lo in range(0, width, slice_bits):
        hi = min(width, lo + slice_bits)
        x, y = a[lo:hi], b[lo:hi]
        if carry is None:
            sm = with_carry(x, y, cin)
            parts.append(sm[:hi - lo])
            carry = sm[hi - lo]
        else:
            s0, s1 = with_carry(x, y, 0), with_carry(x, y, 1)
            parts.append(Mux(carry, s1[:hi - lo], s0[:hi - lo]))
            carry = Mux(carry, s1[hi - lo], s0[hi - lo])
    return Cat(*parts)


def sub_cs(a: ValueLike, b: ValueLike, width: int, *, slice_bits: int = 8) -> Value:
    """``(a - b) mod 2**width`` by :func:`add_cs` (``a + ~b + 1``)."""
    return add_cs(a, ~zext(b, width), width, cin=1, slice_bits=slice_bits)


def ult_cs(a: ValueLike, b: ValueLike, width: int, *, slice_bits: int = 8) -> Value:
    """``a < b`` over ``width`` bits (both zero-extended or truncated), compared in
    ``slice_bits``-bit slices in parallel (each slice's ``<`` and ``==``), then combined from
    the top slice down (``lt_hi | eq_hi & lt_lo``): one slice compare and a chain of and-or
    gates instead of a ``width``-bit ripple compare."""
    a, b = zext(a, width), zext(b, width)
    res = None
    for lo in range(0, width, slice_bits):
        hi = min(width, lo + slice_bits)
        lt = ult(a[lo:hi], b[lo:hi])
        res = lt if res is None else lt | (ueq(a[lo:hi], b[lo:hi]) & res)
    return res


def mul_w(a: ValueLike, b: ValueLike, width: int) -> Value:
    """``(a * b) mod 2**width``, ``width`` bits."""
    return (zext(a, width) * zext(b, width))[:width]


def eq_const(v: ValueLike, c: int) -> Value:
    """``v == c`` for a constant ``c`` that fits ``v`` (no shortened constant operand)."""
    v = Value.cast(v)
    if not 0 <= c < 1 << len(v):
        raise ValueError(f"constant {c} does not fit a {len(v)}-bit value")
    return ~(v ^ Const(c, len(v))).any()


# ------------------------------------------------------------------------ selection
def onehot(m: Module, idx: Value, n: int, name: str) -> Signal:
    """``1 << idx`` as ``n`` bits (a signal named ``name``; zero when ``idx >= n``)."""
    oh = Signal(n, name=name)
    m.d.comb += oh.eq(Cat(*[eq_const(idx, i) if i < 1 << len(idx) else Const(0, 1)
                            for i in range(n)]))
    return oh


def lowest(m: Module, vec: Value, name: str) -> Signal:
    """Index of the lowest set bit of ``vec`` (0 when none is set)."""
    idx = Signal(range(max(2, len(vec))), name=name)
    for i in reversed(range(len(vec))):
        with m.If(vec[i]):
            m.d.comb += idx.eq(i)
    return idx


def highest(m: Module, vec: Value, name: str) -> Signal:
    """Index of the highest set bit of ``vec`` (0 when none is set)."""
    idx = Signal(range(max(2, len(vec))), name=name)
    for i in range(len(vec)):
        with m.If(vec[i]):
            m.d.comb += idx.eq(i)
    return idx


def select(items: Sequence[Value], idx: Value) -> Value:
    """``items[idx]`` as a binary mux tree on the bits of ``idx`` (zeros past the end)."""
    width = max(len(v) for v in items)
    level = [zext(v, width) for v in items]
    for bit in range(len(idx)):
        nxt = []
        for i in range(0, len(level), 2):
            hi = level[i + 1] if i + 1 < len(level) else Const(0, width)
            nxt.append(Mux(idx[bit], hi, level[i]))
        level = nxt
    return level[0]
