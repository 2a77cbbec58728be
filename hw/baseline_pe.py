"""The baseline attention accelerator's arithmetic units, for like-for-like area.

HiKV's sorter and loader are measured against an attention accelerator of ``pe_lanes`` MAC
lanes and ``softmax_lanes`` softmax lanes (:class:`~hikv.params.AcceleratorParams`). To make the
overhead ratio like for like, the baseline's lanes are real RTL synthesised by the same flow
(:mod:`hikv.sim.eda.area`) as the sorter and the loader:

* :class:`Fp16MacLane`: binary16 x binary16 product accumulated in binary32, two pipeline
  stages (product register, accumulator);
* :class:`ExpUnit`: exp(-|x|) for binary16 ``x`` (softmax numerator after max subtraction),
  two pipeline stages.

The arithmetic (and its simplifications: flush to zero, truncation) is defined by the bit-exact
references in :mod:`hikv.model.refs.baseline_pe`, which the tests check these blocks against. A
softmax lane is modelled as one :class:`ExpUnit` plus one :class:`Fp16MacLane` (an fp32 adder and
multiplier for the running max subtraction, sum and final scaling).

No ``from __future__ import annotations`` here: Amaranth reads the port annotations.
"""

from amaranth import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hikv.model.refs.baseline_pe import (
    EXP_BASE,
    EXP_DELTA,
    EXP_LATENCY,
    LOG2E_Q15,
    MAC_LATENCY,
)

__all__ = ["Fp16MacLane", "ExpUnit", "MAC_LATENCY", "EXP_LATENCY", "make_mac_lane",
           "make_exp_unit"]


class Fp16MacLane(wiring.Component):
    """``acc <- (0 if clear else acc) + a * b`` on every cycle with ``valid``.

    Ports: ``a``, ``b`` (binary16 bits), ``valid``, ``clear`` (start a new dot product; with
    ``valid`` low it zeroes the accumulator), ``acc`` (binary32 bits, registered). An input
    reaches ``acc`` :data:`MAC_LATENCY` cycles later. Arithmetic:
    :func:`hikv.model.refs.baseline_pe.mac`.
    """

    a: In(16)
    b: In(16)
    valid: In(1)
    clear: In(1)
    acc: Out(32)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        # ---------------------------------------------------------------- stage 1: product
        ea, eb = self.a[10:15], self.b[10:15]
        ma = Cat(self.a[:10], Const(1, 1))
        mb = Cat(self.b[:10], Const(1, 1))
        prod = Signal(22)
        m.d.comb += prod.eq(ma * mb)
        p_zero = Signal(reset_less=True)
        p_sign = Signal(reset_less=True)
        p_exp = Signal(8, reset_less=True)
        p_man = Signal(24, reset_less=True)
        v1 = Signal()
        c1 = Signal()
        m.d.sync += [
            v1.eq(self.valid), c1.eq(self.clear),
            p_zero.eq((ea == 0) | (eb == 0)),
            p_sign.eq(self.a[15] ^ self.b[15]),
            p_exp.eq(ea + eb + Mux(prod[21], 98, 97)),
            p_man.eq(Mux(prod[21], prod << 2, prod << 3)),
        ]
        # ---------------------------------------------------------------- stage 2: add
        acc = Signal(32)
        x = Signal(32)
        m.d.comb += x.eq(Mux(c1, 0, acc))
        sx, ex = x[31], x[23:31]
        mx = Cat(x[:23], Const(1, 1))
        x_zero = ex == 0
        y_big = Signal()
        m.d.comb += y_big.eq(Cat(p_man, p_exp) > Cat(mx, ex))
        sb, eb_, mb_ = Signal(), Signal(8), Signal(24)
        es, ms = Signal(8), Signal(24)
        with m.If(y_big):
            m.d.comb += [sb.eq(p_sign), eb_.eq(p_exp), mb_.eq(p_man), es.eq(ex), ms.eq(mx)]
        with m.Else():
            m.d.comb += [sb.eq(sx), eb_.eq(ex), mb_.eq(mx), es.eq(p_exp), ms.eq(p_man)]
        d = Signal(8)
        m.d.comb += d.eq(eb_ - es)
        sh = Signal(5)
        m.d.comb += sh.eq(Mux(d > 31, 31, d[:5]))
        aligned = Signal(24)
        m.d.comb += aligned.eq(ms >> sh)
        same = p_sign == sx
        total = Signal(25)
        m.d.comb += total.eq(Mux(same, mb_ + aligned, mb_ - aligned))
        # add path
        add_exp = Signal(9)
        add_man = Signal(24)
        m.d.comb += [add_exp.eq(eb_ + total[24]), add_man.eq(Mux(total[24], total[1:], total))]
        add_res = Signal(32)
        with m.If(add_exp >= 255):
            m.d.comb += add_res.eq(Cat(Const((1 << 23) - 1, 23), Const(254, 8), sb))
        with m.Else():
            m.d.comb += add_res.eq(Cat(add_man[:23], add_exp[:8], sb))
        # subtract path: leading-zero count, normalise
        lz = Signal(5)
        for i in range(24):
            with m.If(total[i]):
                m.d.comb += lz.eq(23 - i)
        norm = Signal(24)
        m.d.comb += norm.eq(total[:24] << lz)
        sub_exp = Signal(9)
        m.d.comb += sub_exp.eq(eb_ - lz)
        sub_res = Signal(32)
        with m.If((total[:24] == 0) | (eb_ <= lz)):
            m.d.comb += sub_res.eq(0)
        with m.Else():
            m.d.comb += sub_res.eq(Cat(norm[:23], sub_exp[:8], sb))
        result = Signal(32)
        with m.If(p_zero):
            m.d.comb += result.eq(Mux(x_zero, 0, x))
        with m.Elif(x_zero):
            m.d.comb += result.eq(Cat(p_man[:23], p_exp, p_sign))
        with m.Elif(same):
            m.d.comb += result.eq(add_res)
        with m.Else():
            m.d.comb += result.eq(sub_res)
        with m.If(v1):
            m.d.sync += acc.eq(result)
        with m.Elif(c1):
            m.d.sync += acc.eq(0)
        m.d.comb += self.acc.eq(acc)
        return m


class ExpUnit(wiring.Component):
    """``y = exp(-|x|)`` in binary16, :data:`EXP_LATENCY` cycles after ``valid``.

    Ports: ``x`` (binary16 bits), ``valid``; ``y`` (binary16 bits), ``y_valid``. Arithmetic:
    :func:`hikv.model.refs.baseline_pe.exp_neg`.
    """

    x: In(16)
    valid: In(1)
    y: Out(16)
    y_valid: Out(1)

    def elaborate(self, platform: object) -> Module:
        m = Module()
        # ---------------------------------------------------------------- stage 1: |x| log2 e
        e = self.x[10:15]
        prod = Signal(27)
        m.d.comb += prod.eq(Cat(self.x[:10], Const(1, 1)) * Const(LOG2E_Q15, 16))
        y_fix = Signal(32)
        with m.If(e >= 30):
            m.d.comb += y_fix.eq(prod << (e - 30)[:1])
        with m.Else():
            m.d.comb += y_fix.eq(prod >> (30 - e)[:5])
        one = Signal(reset_less=True)
        big = Signal(reset_less=True)
        i_r = Signal(4, reset_less=True)
        f_r = Signal(10, reset_less=True)
        v1 = Signal()
        m.d.sync += [v1.eq(self.valid), one.eq(e == 0), big.eq(y_fix[10:] >= 15),
                     i_r.eq(y_fix[10:14]), f_r.eq(y_fix[:10])]
        # ---------------------------------------------------------------- stage 2: 2^-F, pack
        seg, t = f_r[6:10], f_r[:6]
        base = Array(Const(v, 16) for v in EXP_BASE)[seg]
        delta = Array(Const(v, 11) for v in EXP_DELTA)[seg]
        step = Signal(17)
        m.d.comb += step.eq(delta * t)
        r = Signal(16)
        m.d.comb += r.eq(base - step[6:])
        exp = Signal(5)
        mant = Signal(10)
        full = r[15]
        m.d.comb += [exp.eq(Mux(full, 15 - i_r, 14 - i_r)),
                     mant.eq(Mux(full, 0, r[4:14]))]
        out = Signal(16)
        with m.If(one):
            m.d.comb += out.eq(0x3C00)
        with m.Elif(big | (Mux(full, 15, 14) <= i_r)):
            m.d.comb += out.eq(0)
        with m.Else():
            m.d.comb += out.eq(Cat(mant, exp, Const(0, 1)))
        y = Signal(16, reset_less=True)
        yv = Signal()
        m.d.sync += [y.eq(out), yv.eq(v1)]
        m.d.comb += [self.y.eq(y), self.y_valid.eq(yv)]
        return m


def make_mac_lane(cfg: object = None) -> Fp16MacLane:
    """A MAC lane (the configuration does not change it: binary16 operands)."""
    return Fp16MacLane()


def make_exp_unit(cfg: object = None) -> ExpUnit:
    return ExpUnit()
