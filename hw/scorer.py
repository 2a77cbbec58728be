"""The low-bit scoring unit: Stage I scores of stored b-bit keys, as sorter keys.

Function (bit-exact with :mod:`hikv.model.lowbit`): for one integer query ``q`` (``d``
elements of ``query_bits`` signed bits, :func:`~hikv.model.lowbit.quantise_query`) and each
token's stored metadata (``d`` codes of ``b`` bits, ``lo`` and ``step`` as fp16 patterns,
:func:`~hikv.model.lowbit.store`)::

    D = sum_i q[i] * code[i]            (exact integer)
    Q = sum_i q[i]                      (once per job, at configuration)
    S = step * D + lo * Q               (exact, an integer in units of 2**-24)
    score = fp16(S * 2**-24)            (round to nearest even, overflow to infinity)
    key   = signed order-preserving map of the score's pattern, top key_width bits

which is ``q . (code * step + lo)``, the dot product of the query with the dequantised key,
mapped like :func:`hikv.model.keys.float_to_key` with ``signed=True``. Token ``t`` of the job
gets the index ``first + t``, so the output feeds the sorter's Stage I directly.

Microarchitecture (``L`` lanes, every lane one token per cycle; a global-stall pipeline of
:data:`~hikv.hw.scorer_timing.SCORER_STAGES` registers)::

    cfg (query, first) ──► query registers, Q = sum(q), index counter
    i ──► [1] L x (d multipliers b x query_bits + adder tree) = D; lo, step, Q, index
          [2] L x (M_step * D << e_step  +/-  M_lo * Q << e_lo) = S
          [3] L x (|S|, leading one, round to 11 bits, saturate, sign map) = key ──► o

Interfaces (``amaranth.lib.stream``):

* ``cfg``: ``query`` (``d`` signed elements), ``first`` (index of the job's first token).
  Accepted between jobs, or in the cycle the previous job's last beat is accepted.
* ``i``: ``lanes[L]`` of (``codes`` ``d`` x ``b`` bits, ``lo``, ``step`` fp16 patterns),
  ``valid`` (per-lane mask: all ones except on the last beat, where the low ``1..L`` lanes
  are set), ``last``. Metadata must be finite (no inf/NaN patterns).
* ``o``: the sorter's input layout (:func:`hikv.hw.sorter_compact.lanes_layout` with ``L``
  lanes): (``key``, ``index``) per lane, ``valid`` and ``last`` passed through.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hikv.params import Config, ParamError, ScorerParams, clog2

from .scorer_timing import SCORER_STAGES, ScorerTiming
from .sorter_compact import lanes_layout
from .uops import uadd, uge, une, usub

__all__ = ["ScorerGeometry", "Scorer", "make_scorer"]

_FP16_INF = 0x7C00


class ScorerGeometry:
    """Every width of the unit, from its parameters (one place for RTL and testbench).

    Parameters
    ----------
    params : ScorerParams
        Lanes ``L`` and query bits.
    head_dim : int
        ``d``, elements per key (``layout.head_dim``).
    bits : int
        ``b``, bits per stored code (``policy.lowbit_bits``), 1 to 8.
    key_width : int
        Sorter key bits (``sorter.key_width``), 1 to 16.
    index_width : int
        Sorter index bits (``sorter.index_width``).
    """

    def __init__(self, params: ScorerParams, *, head_dim: int, bits: int, key_width: int,
                 index_width: int) -> None:
        for name, v, lo, hi in (("head_dim", head_dim, 1, 4096), ("bits", bits, 1, 8),
                                ("key_width", key_width, 1, 16),
                                ("index_width", index_width, 1, 32)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ParamError(f"scorer {name} = {v!r} is out of range: allowed [{lo}, {hi}]")
        self.params = params
        self.lanes = params.lanes
        self.query_bits = params.query_bits
        self.head_dim = head_dim
        self.bits = bits
        self.key_width = key_width
        self.index_width = index_width

    @property
    def dot_width(self) -> int:
        """Signed bits of ``D``: |q * code| < 2**(qb + b - 1), summed over ``d``."""
        return self.query_bits + self.bits + clog2(self.head_dim) + 1

    @property
    def qsum_width(self) -> int:
        """Signed bits of ``Q``."""
        return self.query_bits + clog2(self.head_dim) + 1

    @property
    def score_width(self) -> int:
        """Signed bits of ``S``: an 11-bit significand times ``D`` or ``Q``, shifted by up to
        29, and one bit for the sum."""
        return 11 + max(self.dot_width, self.qsum_width) + 29 + 1

    def config_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "query": data.ArrayLayout(signed(self.query_bits), self.head_dim),
            "first": unsigned(self.index_width),
        })

    def token_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "codes": data.ArrayLayout(unsigned(self.bits), self.head_dim),
            "lo": unsigned(16),
            "step": unsigned(16),
        })

    def input_layout(self) -> data.StructLayout:
        return data.StructLayout({
            "lanes": data.ArrayLayout(self.token_layout(), self.lanes),
            "valid": unsigned(self.lanes),
            "last": unsigned(1),
        })

    def output_layout(self) -> data.StructLayout:
        return lanes_layout(self.lanes, self.key_width, self.index_width)

    @staticmethod
    def of(cfg: Config) -> ScorerGeometry:
        return ScorerGeometry(cfg.scorer, head_dim=cfg.layout.head_dim,
                              bits=cfg.policy.lowbit_bits, key_width=cfg.sorter.key_width,
                              index_width=cfg.sorter.index_width)


# Arithmetic helpers: every operator gets operands of its result's width (explicit sign
# extension, a log shifter of fixed width, the padded adders of :mod:`hikv.hw.uops`), so the
# Verilog lints clean under ``verilator -Wall`` (see uops for why).
def _sext(x: Value, width: int) -> Value:
    """The low ``width`` bits of ``x`` sign-extended (an unsigned view)."""
    x = Value.cast(x)
    if len(x) >= width:
        return x[:width]
    return Cat(x, x[-1].replicate(width - len(x)))


def _sadd(a: Value, b: Value, width: int) -> Value:
    """``a + b`` modulo ``2**width`` as ``signed(width)`` (exact when the sum fits)."""
    return uadd(_sext(a, width), _sext(b, width))[:width].as_signed()


def _neg(x: Value, width: int) -> Value:
    """``-x`` modulo ``2**width`` (unsigned view)."""
    return uadd(~_sext(x, width), 1)[:width]


def _shl(m: Module, x: Value, s: Value, width: int, name: str) -> Value:
    """``x << s`` modulo ``2**width``: a log shifter, one stage per bit of ``s``."""
    cur = Signal(width, name=f"{name}_in")
    m.d.comb += cur.eq(x)
    for k in range(len(s)):
        sh = 1 << k
        moved = Const(0, width) if sh >= width else Cat(Const(0, sh), cur[:width - sh])
        nxt = Signal(width, name=f"{name}_s{k}")
        m.d.comb += nxt.eq(Mux(s[k], moved, cur))
        cur = nxt
    return cur


def _tree_sum(m: Module, terms: list[Value], width: int, name: str) -> Signal:
    """Balanced adder tree of signed ``terms`` into a ``signed(width)`` signal."""
    level = 0
    while len(terms) > 1:
        nxt = []
        for j in range(0, len(terms) - 1, 2):
            s = Signal(signed(width), name=f"{name}_l{level}_{j // 2}")
            m.d.comb += s.eq(_sadd(terms[j], terms[j + 1], width))
            nxt.append(s)
        if len(terms) % 2:
            nxt.append(terms[-1])
        terms = nxt
        level += 1
    out = Signal(signed(width), name=name)
    m.d.comb += out.eq(_sext(terms[0], width).as_signed())
    return out


def _fp16_term(m: Module, pattern: Value, factor: Value, width: int, name: str) -> Value:
    """``fp16(pattern) * factor`` exactly, in units of 2**-24, as ``signed(width)``."""
    exp = pattern[10:15]
    normal = exp.any()
    sig = Cat(pattern[:10], normal)                       # 11-bit significand M
    shift = Signal(5, name=f"{name}_shift")               # max(exp, 1) - 1
    with m.If(normal):
        m.d.comb += shift.eq(usub(exp, 1))
    prod = Signal(signed(len(factor) + 12), name=f"{name}_prod")
    m.d.comb += prod.eq(factor * sig)
    mag = _shl(m, _sext(prod, width), shift, width, f"{name}_shl")
    out = Signal(signed(width), name=name)
    m.d.comb += out.eq(Mux(pattern[15], _neg(mag, width), mag))
    return out


def _leading_one(m: Module, x: Value, name: str) -> Signal:
    """Bit position of the most significant one of ``x`` (0 when ``x`` is 0 or 1)."""
    pos = Signal(range(len(x)), name=name)
    for b in range(len(x)):         # later statements win: the highest set bit
        with m.If(x[b]):
            m.d.comb += pos.eq(b)
    return pos


def _round_fp16(m: Module, s: Value, name: str) -> Signal:
    """fp16 pattern of ``s * 2**-24`` (``s`` signed): round to nearest even, overflow to
    infinity, zero to +0 (:func:`hikv.model.lowbit.round_fp16`)."""
    w = len(s)
    neg = s[-1]
    mag = Signal(w, name=f"{name}_abs")
    m.d.comb += mag.eq(Mux(neg, _neg(s, w), s.as_unsigned()))
    p = _leading_one(m, mag, f"{name}_lead")
    small = ~mag[11:].any()                               # |s| < 2**11: exact
    sh1 = Signal(range(w), name=f"{name}_sh1")            # bits dropped below the guard
    with m.If(~small):
        m.d.comb += sh1.eq(usub(p, 11))
    r12 = Signal(12, name=f"{name}_r12")                  # 11 kept bits and the guard bit
    m.d.comb += r12.eq(mag >> sh1)
    r12w = Signal(w, name=f"{name}_r12w")
    m.d.comb += r12w.eq(r12)
    back = _shl(m, r12w, sh1, w, f"{name}_back")
    sticky = une(back, mag)                               # a one below the guard bit
    up = Signal(name=f"{name}_up")
    m.d.comb += up.eq(~small & r12[0] & (sticky | r12[1]))
    # kept bits 1.mant, exponent field sh1 + 2: the pattern is a concatenation; a carry
    # out of the rounding increments the exponent
    wide = Signal(len(sh1) + 12, name=f"{name}_wide")
    m.d.comb += wide.eq(uadd(Cat(r12[1:11], uadd(sh1, 2)), up))
    bits = Signal(15, name=f"{name}_bits")
    with m.If(small):
        m.d.comb += bits.eq(mag[:11])
    with m.Elif(uge(wide, _FP16_INF)):
        m.d.comb += bits.eq(_FP16_INF)
    with m.Else():
        m.d.comb += bits.eq(wide[:15])
    out = Signal(16, name=name)
    m.d.comb += out.eq(Cat(bits, neg & bits.any()))
    return out


class Scorer(wiring.Component):
    """Low-bit scoring unit (see the module docstring for function and architecture).

    Parameters
    ----------
    geometry : ScorerGeometry
        Lanes, query bits, ``d``, ``b``, key and index widths.

    Members
    -------
    cfg : ``In(stream.Signature(geometry.config_layout()))``
    i : ``In(stream.Signature(geometry.input_layout()))``
    o : ``Out(stream.Signature(geometry.output_layout()))``
    """

    def __init__(self, geometry: ScorerGeometry) -> None:
        if not isinstance(geometry, ScorerGeometry):
            raise TypeError(f"Scorer needs a ScorerGeometry, not {geometry!r}")
        self.geometry = geometry
        self.timing = ScorerTiming(geometry.params)
        super().__init__({
            "cfg": In(stream.Signature(geometry.config_layout())),
            "i": In(stream.Signature(geometry.input_layout())),
            "o": Out(stream.Signature(geometry.output_layout())),
        })

    @property
    def latency(self) -> int:
        """Cycles from an accepted input beat to its output beat (no backpressure)."""
        return self.timing.latency

    def elaborate(self, platform: object) -> Module:
        m = Module()
        g = self.geometry
        lanes, d, iw = g.lanes, g.head_dim, g.index_width

        # ---------------------------------------------------------------- job state
        query = [Signal(signed(g.query_bits), name=f"q{j}", reset_less=True)
                 for j in range(d)]
        qsum = Signal(signed(g.qsum_width), reset_less=True)
        nxt = Signal(iw, reset_less=True)                 # index of the next token
        active = Signal()
        adv = Signal()                                    # global pipeline advance
        v = [Signal(name=f"v{s}") for s in range(1, SCORER_STAGES + 1)]
        m.d.comb += adv.eq(~v[-1] | self.o.ready)
        take = self.i.valid & self.i.ready
        m.d.comb += [
            self.i.ready.eq(active & adv),
            self.cfg.ready.eq(~active | (take & self.i.payload.last)),
        ]
        qsum_next = _tree_sum(m, [self.cfg.payload.query[j] for j in range(d)],
                              g.qsum_width, "qsum_cfg")
        with m.If(take):
            m.d.sync += nxt.eq(uadd(nxt, lanes)[:iw])
            with m.If(self.i.payload.last):
                m.d.sync += active.eq(0)
        with m.If(self.cfg.valid & self.cfg.ready):
            m.d.sync += [query[j].eq(self.cfg.payload.query[j]) for j in range(d)]
            m.d.sync += [qsum.eq(qsum_next), nxt.eq(self.cfg.payload.first), active.eq(1)]

        # ---------------------------------------------------------------- stage 1: D
        s1_dot = [Signal(signed(g.dot_width), name=f"s1_dot{j}", reset_less=True)
                  for j in range(lanes)]
        s1_lo = [Signal(16, name=f"s1_lo{j}", reset_less=True) for j in range(lanes)]
        s1_step = [Signal(16, name=f"s1_step{j}", reset_less=True) for j in range(lanes)]
        s1_qsum = Signal(signed(g.qsum_width), reset_less=True)
        s1_ctl = Signal(lanes + 1 + iw, reset_less=True)  # valid mask, last, first index
        for j in range(lanes):
            tok = self.i.payload.lanes[j]
            prods = []
            for e in range(d):
                pr = Signal(signed(g.query_bits + g.bits + 1), name=f"prod{j}_{e}")
                m.d.comb += pr.eq(query[e] * tok.codes[e])
                prods.append(pr)
            dot = _tree_sum(m, prods, g.dot_width, f"dot{j}")
            with m.If(adv):
                m.d.sync += [s1_dot[j].eq(dot), s1_lo[j].eq(tok.lo), s1_step[j].eq(tok.step)]
        with m.If(adv):
            m.d.sync += [v[0].eq(take), s1_qsum.eq(qsum),
                         s1_ctl.eq(Cat(self.i.payload.valid, self.i.payload.last, nxt))]

        # ---------------------------------------------------------------- stage 2: S
        s2_score = [Signal(signed(g.score_width), name=f"s2_score{j}", reset_less=True)
                    for j in range(lanes)]
        s2_ctl = Signal.like(s1_ctl, reset_less=True)
        for j in range(lanes):
            a = _fp16_term(m, s1_step[j], s1_dot[j], g.score_width - 1, f"step_term{j}")
            b = _fp16_term(m, s1_lo[j], s1_qsum, g.score_width - 1, f"lo_term{j}")
            with m.If(adv):
                m.d.sync += s2_score[j].eq(_sadd(a, b, g.score_width))
        with m.If(adv):
            m.d.sync += [v[1].eq(v[0]), s2_ctl.eq(s1_ctl)]

        # ---------------------------------------------------------------- stage 3: key
        out_key = [Signal(g.key_width, name=f"s3_key{j}", reset_less=True)
                   for j in range(lanes)]
        s3_ctl = Signal.like(s1_ctl, reset_less=True)
        for j in range(lanes):
            pat = _round_fp16(m, s2_score[j], f"fp16_{j}")
            mapped = Signal(16, name=f"mapped{j}")
            m.d.comb += mapped.eq(Mux(pat[15], ~pat, pat | 0x8000))
            with m.If(adv):
                m.d.sync += out_key[j].eq(mapped[16 - g.key_width:])
        with m.If(adv):
            m.d.sync += [v[2].eq(v[1]), s3_ctl.eq(s2_ctl)]

        base = s3_ctl[lanes + 1:]
        m.d.comb += [
            self.o.valid.eq(v[2]),
            self.o.payload.valid.eq(s3_ctl[:lanes]),
            self.o.payload.last.eq(s3_ctl[lanes]),
        ]
        for j in range(lanes):
            m.d.comb += [self.o.payload.lanes[j].key.eq(out_key[j]),
                         self.o.payload.lanes[j].index.eq(uadd(base, j)[:iw])]
        return m


def make_scorer(cfg: Config) -> Scorer:
    """The scoring unit of a configuration (``hikv verilog --block scorer``)."""
    return Scorer(ScorerGeometry.of(cfg))
