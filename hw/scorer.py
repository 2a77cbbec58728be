"""The low-bit scoring unit: Stage I scores of stored b-bit keys, as sorter keys.

Function (bit-exact with :mod:`hikv.model.refs.lowbit`): for one integer query ``q`` (``d``
elements of ``query_bits`` signed bits, :func:`~hikv.model.refs.lowbit.quantise_query`) and each
token's stored metadata (``d`` codes of ``b`` bits, ``lo`` and ``step`` as fp16 patterns,
:func:`~hikv.model.refs.lowbit.store`)::

    D = sum_i q[i] * code[i]            (exact integer)
    Q = sum_i q[i]                      (once per job, at configuration)
    S = step * D + lo * Q               (exact, an integer in units of 2**-24)
    score = fp16(S * 2**-24)            (round to nearest even, overflow to infinity)
    key   = signed order-preserving map of the score's pattern, top key_width bits

which is ``q . (code * step + lo)``, the dot product of the query with the dequantised key,
mapped like :func:`hikv.model.refs.keys.float_to_key` with ``signed=True``. Token ``t`` of the job
gets the index ``first + t``, so the output feeds the sorter's Stage I directly.

Microarchitecture (``L`` lanes, every lane one token per cycle; a global-stall pipeline of
:data:`~hikv.hw.scorer_timing.SCORER_STAGES` = 11 registers, cut so that no stage holds a carry
chain longer than a 12-bit slice: 1 GHz at 28 nm on the kit's ASIC estimate, docs/timing.md)::

    cfg (query, first) ──► query registers, index counter
    i ──► [1-2] L x d x b partial products q << k (code bit k), 3:2 compressors; Q alike
          [3]   carry-select adders: D per lane, Q (shared); lo, step decoded (M, shift, sign)
          [4]   L x (M_step x D, M_lo x Q) as carry-save pairs (modulo 2**W, W = score_width)
          [5]   each pair shifted by its exponent, inverted for a negative sign
          [6]   reduced to one pair for S and one for -S (the inversions' ones as constants)
          [7-8] carry-select adders (12-bit slices, then the carries): S, -S; |S|
          [9]   leading one of |S|: sh1 = p - 11 (0 when |S| < 2**11)
          [10]  11 kept bits and the guard (|S| >> sh1), sticky, round-up bit
          [11]  rounded fp16 pattern (overflow to infinity), sign map = key ──► o

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

from .scorer_timing import SCORER_DOT_STAGES, SCORER_STAGES, ScorerTiming
from .sorter_compact import lanes_layout
from .uops import popcount, uadd, uge, ult, usub

__all__ = ["ScorerGeometry", "ScorerLane", "Scorer", "make_scorer"]

_FP16_INF = 0x7C00
#: bits per slice of the carry-select adders (one slice adder per pipeline stage)
_CPA_CHUNK = 12


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


def _csa(a: Value, b: Value, c: Value, width: int) -> tuple[Value, Value]:
    """3:2 compressor (carry-save adder): ``(s, cy)`` with ``s + cy == a + b + c``
    modulo ``2**width`` (bitwise logic only, no carry chain)."""
    s = a ^ b ^ c
    cy = (a & b) | (a & c) | (b & c)
    return s, Cat(Const(0, 1), cy[:width - 1])


def _csa_levels(vecs: list[Value], width: int) -> int:
    """3:2 levels that reduce ``len(vecs)`` vectors to two."""
    n, lv = len(vecs), 0
    while n > 2:
        n, lv = n - n // 3, lv + 1
    return lv


def _csa_reduce(m: Module, vecs: list[Value], width: int, levels: int, name: str
                ) -> list[Value]:
    """Up to ``levels`` 3:2 levels (each level compresses every full triple)."""
    for lv in range(levels):
        if len(vecs) <= 2:
            break
        nxt: list[Value] = []
        for j in range(0, len(vecs) - 2, 3):
            s, cy = _csa(vecs[j], vecs[j + 1], vecs[j + 2], width)
            ss = Signal(width, name=f"{name}_l{lv}_s{j // 3}")
            cc = Signal(width, name=f"{name}_l{lv}_c{j // 3}")
            m.d.comb += [ss.eq(s), cc.eq(cy)]
            nxt += [ss, cc]
        nxt += vecs[len(vecs) - len(vecs) % 3:]
        vecs = nxt
    return vecs


def _csa_mul(m: Module, x: Value, factor: Value, width: int, name: str) -> list[Value]:
    """``x * factor`` modulo ``2**width`` (``x`` an unsigned view of a ``width``-bit value,
    ``factor`` unsigned) as a carry-save pair."""
    pps = [Mux(factor[k], Cat(Const(0, k), x[:width - k]) if k else x, Const(0, width))
           for k in range(len(factor)) if k < width]
    return _csa_reduce(m, pps, width, _csa_levels(pps, width), name)


def _chunk_sums(m: Module, x: Value, y: Value, chunk: int, name: str
                ) -> list[tuple[Signal, Signal]]:
    """Carry-select adder, first half: per ``chunk``-bit slice the sums with carry-in 0 and 1
    (one bit wider: the carry out)."""
    out = []
    for k, lo in enumerate(range(0, len(x), chunk)):
        hi = min(lo + chunk, len(x))
        s0 = Signal(hi - lo + 1, name=f"{name}_c{k}_s0")
        s1 = Signal(hi - lo + 1, name=f"{name}_c{k}_s1")
        m.d.comb += [s0.eq(uadd(x[lo:hi], y[lo:hi])),
                     # (2x + 1) + (2y + 1) = 2 (x + y + 1): one adder with a carry-in
                     s1.eq(uadd(Cat(Const(1, 1), x[lo:hi]), Cat(Const(1, 1), y[lo:hi]))[1:])]
        out.append((s0, s1))
    return out


def _chunk_select(m: Module, sums: list[tuple[Value, Value]], name: str) -> Signal:
    """Carry-select adder, second half: the carries between slices and the selected sums."""
    parts = []
    cin: Value = Const(0, 1)
    for k, (s0, s1) in enumerate(sums):
        w = len(s0) - 1
        part = Signal(w, name=f"{name}_p{k}")
        m.d.comb += part.eq(Mux(cin, s1[:w], s0[:w]))
        parts.append(part)
        c = Signal(name=f"{name}_cy{k}")
        m.d.comb += c.eq(Mux(cin, s1[w], s0[w]))
        cin = c
    out = Signal(sum(len(p) for p in parts), name=name)
    m.d.comb += out.eq(Cat(*parts))
    return out


class _Pipe:
    """Pipeline registers named by their stage: :meth:`reg` registers a value as
    ``s<stage>_<name>``, loaded when ``adv`` (the pipeline advances); :attr:`stage` is set
    by the caller as it walks the stages."""

    def __init__(self, m: Module, adv: Value) -> None:
        self.m, self.adv, self.stage = m, adv, 0

    def reg(self, x: Value, name: str) -> Signal:
        """``x`` registered in the current stage (advances with the pipeline)."""
        r = Signal(len(Value.cast(x)), name=f"s{self.stage}_{name}", reset_less=True)
        with self.m.If(self.adv):
            self.m.d.sync += r.eq(x)
        return r


def _pipelined_sum(m: Module, p: _Pipe, vecs: list[Value], width: int, name: str,
                   adder: str, out: str, *, ride: list[Value] | None = None
                   ) -> tuple[Signal, list[Value]]:
    """``sum(vecs)`` modulo ``2**width`` over stages 1..:data:`SCORER_DOT_STAGES`: 3:2
    compressors spread over the first ``DOT - 1`` stages (later stages take the extra level
    when the levels do not divide evenly; registers ``s<k>_<name>_<i>``), the carry-save pair
    added by a carry-select adder (``adder``) and registered in the last stage (``out``). ``ride``:
    values registered beside the vectors in each compressor stage (``s<k>_f_<i>``), returned
    as they leave the last one."""
    ride = list(ride or [])
    csa_stages = SCORER_DOT_STAGES - 1
    levels = _csa_levels(vecs, width)
    for s in range(csa_stages):
        p.stage = s + 1
        hi, lo = levels * (s + 1) // csa_stages, levels * s // csa_stages
        vec = _csa_reduce(m, vecs, width, hi - lo, f"{name}_{s}")
        vecs = [p.reg(x, f"{name}_{i}") for i, x in enumerate(vec)]
        ride = [p.reg(x, f"f_{i}") for i, x in enumerate(ride)]
    p.stage = SCORER_DOT_STAGES
    if len(vecs) == 1:
        return p.reg(vecs[0], out), ride
    return p.reg(_chunk_select(m, _chunk_sums(m, vecs[0], vecs[1], _CPA_CHUNK, adder), adder),
                 out), ride


def _suffix_or(m: Module, x: Value, name: str) -> Signal:
    """``above[i] = x[i] | x[i + 1] | ...``: a log-depth OR scan."""
    w = len(x)
    cur: Value = x
    k, lv = 1, 0
    while k < w:
        shifted = Cat(cur[k:], Const(0, k))
        nxt = Signal(w, name=f"{name}_l{lv}")
        m.d.comb += nxt.eq(cur | shifted)
        cur, k, lv = nxt, 2 * k, lv + 1
    out = Signal(w, name=name)
    m.d.comb += out.eq(cur)
    return out


def _onehot_index(m: Module, onehot: Value, name: str) -> Signal:
    """Binary index of a one-hot (or zero) vector (0 when zero)."""
    w = len(onehot)
    out = Signal(range(max(2, w)), name=name)
    m.d.comb += out.eq(Cat(*[
        Cat(*[onehot[i] for i in range(w) if (i >> b) & 1]).any()
        for b in range(len(out))]))
    return out


class ScorerLane(wiring.Component):
    """One lane of the scoring unit: one token's key per cycle, stages 1 to 11 of the module
    docstring (a submodule, so the area flow can synthesise one lane and count ``L`` copies,
    :func:`hikv.sim.eda.area.block_synth`).

    Parameters
    ----------
    geometry : ScorerGeometry
        Query bits, ``d``, ``b``, key width (the lane count is the parent's).

    Members
    -------
    token : ``In(geometry.token_layout())``
        The token's codes, ``lo`` and ``step`` (the input beat's lane).
    query : ``In(ArrayLayout(signed(query_bits), d))``
        The job's query (the parent's registers).
    qsum : ``In(qsum_width)``
        ``Q``, registered by the parent in stage :data:`SCORER_DOT_STAGES`.
    adv : ``In(1)``
        The global pipeline advance.
    key : ``Out(key_width)``
        The sorter key, registered in stage :data:`SCORER_STAGES`.
    """

    def __init__(self, geometry: ScorerGeometry) -> None:
        if not isinstance(geometry, ScorerGeometry):
            raise TypeError(f"ScorerLane needs a ScorerGeometry, not {geometry!r}")
        self.geometry = geometry
        g = geometry
        super().__init__({
            "token": In(g.token_layout()),
            "query": In(data.ArrayLayout(signed(g.query_bits), g.head_dim)),
            "qsum": In(unsigned(g.qsum_width)),
            "adv": In(1),
            "key": Out(unsigned(g.key_width)),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        g = self.geometry
        d, qb = g.head_dim, g.query_bits
        wd, ws = g.dot_width, g.score_width
        query = Value.cast(self.query)
        p = _Pipe(m, self.adv)
        reg = p.reg

        # ------------------------------------------- stages 1..DOT: D in carry-save
        # D = sum_e q[e] code[e] = sum_e sum_k code[e][k] (q[e] << k): d x b partial
        # products reduced by 3:2 compressors over the first DOT - 1 stages (modulo
        # 2**dot_width: D fits), the carry-save pair added by a carry-select adder in the last
        # stage (Q, shared by the lanes, is the parent's).
        def qext(e: int, width: int) -> Value:
            return _sext(query[e * qb:(e + 1) * qb], width)

        tok = self.token
        dot_vecs = [Mux(tok.codes[e][k],
                        Cat(Const(0, k), qext(e, wd)[:wd - k]) if k else qext(e, wd),
                        Const(0, wd))
                    for e in range(d) for k in range(g.bits)]
        # fp16 fields of lo and step: significand M, shift max(exp, 1) - 1, sign
        fields = []
        for pat in (tok.step, tok.lo):
            exp = pat[10:15]
            normal = exp.any()
            fields.append(Cat(pat[:10], normal, Mux(normal, usub(exp, 1), 0)[:5], pat[15]))
        dot, fields = _pipelined_sum(m, p, dot_vecs, wd, "dot", "dotsum", "dot", ride=fields)
        fields = [reg(x, f"f_{i}") for i, x in enumerate(fields)]

        # ------------------------------------------------------- the exact score S (W bits)
        # S = (-1)^s_step M_step D 2^e_step + (-1)^s_lo M_lo Q 2^e_lo, all modulo 2**W (S
        # fits): P1 the two products as carry-save pairs, P2 each shifted and inverted for a
        # negative sign, P3 reduced to one pair for S and one for N = -S (~x = -x - 1, the
        # missing ones as a small constant), C1/C2 both added by carry-select adders.
        base = SCORER_DOT_STAGES
        p.stage = base + 1
        st, lo = fields
        a = _csa_mul(m, _sext(dot, ws), st[:11], ws, "pa")
        b = _csa_mul(m, _sext(self.qsum, ws), lo[:11], ws, "pb")
        pairs = ([reg(x, f"pa_{i}") for i, x in enumerate(a)]
                 + [reg(x, f"pb_{i}") for i, x in enumerate(b)])
        shifts = [reg(st[11:16], "sha")] * len(a) + [reg(lo[11:16], "shb")] * len(b)
        signs = [reg(st[16], "sga")] * len(a) + [reg(lo[16], "sgb")] * len(b)

        p.stage = base + 2
        terms = []
        for i, (x, sh, sg) in enumerate(zip(pairs, shifts, signs, strict=True)):
            moved = _shl(m, x, sh, ws, f"sh_{i}")
            terms.append(reg(moved ^ sg.replicate(ws), f"t_{i}"))
        # -x = ~x + 1: one 1 per inverted vector
        k = reg(popcount(signs), "k")

        p.stage = base + 3
        nt = len(terms)
        kw = Signal(ws, name="kw")
        m.d.comb += kw.eq(k)
        knw = Signal(ws, name="knw")       # -S = sum(~t) + nt - k
        m.d.comb += knw.eq(usub(Const(nt, len(k) + 1), k))
        sv = _csa_reduce(m, terms + [kw], ws, 99, "rs")
        nv = _csa_reduce(m, [~t for t in terms] + [knw], ws, 99, "rn")
        ssum = [reg(x, f"s_{i}") for i, x in enumerate(sv)]
        nsum = [reg(x, f"n_{i}") for i, x in enumerate(nv)]

        p.stage = base + 4
        sparts = [(reg(a, f"sc_{k}_0"), reg(b, f"sc_{k}_1")) for k, (a, b)
                  in enumerate(_chunk_sums(m, ssum[0], ssum[1], _CPA_CHUNK, "ssum"))]
        nparts = [(reg(a, f"nc_{k}_0"), reg(b, f"nc_{k}_1")) for k, (a, b)
                  in enumerate(_chunk_sums(m, nsum[0], nsum[1], _CPA_CHUNK, "nsum"))]

        p.stage = base + 5
        sc = _chunk_select(m, sparts, "score")
        nc = _chunk_select(m, nparts, "nscore")
        neg = reg(sc[ws - 1], "neg")
        mag = reg(Mux(sc[ws - 1], nc, sc), "mag")

        # ------------------------------------------ fp16 rounding of S * 2**-24, the key
        # R1: leading one p, sh1 = p - 11 (0 when |S| < 2**11); R2: the 11 kept bits and
        # the guard bit mag[sh1], sticky = a one below the guard, the round-up bit;
        # R3: the pattern (a carry out of the rounding increments the exponent field),
        # overflow to infinity, the signed order-preserving key map.
        p.stage = base + 6
        above = _suffix_or(m, mag, "above")
        lead = mag & ~Cat(above[1:], Const(0, 1))
        small = ~mag[11:].any()
        # the leading one at position p >= 11 gives sh1 = p - 11; none above 10: 0
        sh1 = _onehot_index(m, lead[11:], "sh1")
        mag, sh1, small, neg = (reg(mag, "mag"), reg(sh1, "sh1"), reg(small, "small"),
                                reg(neg, "neg"))

        p.stage = base + 7
        r12 = Signal(12, name="r12")
        m.d.comb += r12.eq(mag >> sh1)
        # sticky: a one in mag[:sh1], below the guard bit (a thermometer mask of sh1)
        sticky = Cat(*[mag[i] & ult(i, sh1) for i in range(ws - 12)]).any()
        up = ~small & r12[0] & (sticky | r12[1])
        e2 = uadd(sh1, 2)                             # the exponent field, before a carry
        e3 = uadd(sh1, 3)                             # ... after a carry out of rounding
        r12, e2, e3, ovf2, ovf3, small, up, neg = (
            reg(r12, "r12"), reg(e2, "e2"), reg(e3, "e3"), reg(uge(e2, 31), "ovf2"),
            reg(uge(e3, 31), "ovf3"), reg(small, "small"), reg(up, "up"), reg(neg, "neg"))

        p.stage = base + 8
        mant = Signal(11, name="mant")                # the kept bits + up, and a carry
        m.d.comb += mant.eq(uadd(r12[1:11], up))
        carry = mant[10]
        bits = Signal(15, name="bits")
        with m.If(small):
            m.d.comb += bits.eq(r12[:11])
        with m.Elif(Mux(carry, ovf3, ovf2)):
            m.d.comb += bits.eq(_FP16_INF)
        with m.Else():
            m.d.comb += bits.eq(Cat(mant[:10], Mux(carry, e3, e2)[:5]))
        pat = Cat(bits, neg & bits.any())
        mapped = Signal(16, name="mapped")
        m.d.comb += mapped.eq(Mux(pat[15], ~pat, pat | 0x8000))
        m.d.comb += self.key.eq(reg(mapped[16 - g.key_width:], "key"))
        return m


class Scorer(wiring.Component):
    """Low-bit scoring unit (see the module docstring for function and architecture): the
    job state, the control pipeline and the shared query sum ``Q``, and ``L``
    :class:`ScorerLane` submodules ``lane0 .. lane{L-1}``.

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
        wq = g.qsum_width

        # ---------------------------------------------------------------- job state
        query = [Signal(signed(g.query_bits), name=f"q{j}", reset_less=True)
                 for j in range(d)]
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
        with m.If(take):
            m.d.sync += nxt.eq(uadd(nxt, lanes)[:iw])
            with m.If(self.i.payload.last):
                m.d.sync += active.eq(0)
        with m.If(self.cfg.valid & self.cfg.ready):
            m.d.sync += [query[j].eq(self.cfg.payload.query[j]) for j in range(d)]
            m.d.sync += [nxt.eq(self.cfg.payload.first), active.eq(1)]

        p = _Pipe(m, adv)
        reg = p.reg

        # control: valid bit and (lane mask, last, first index) through every stage
        ctl: Value = Cat(self.i.payload.valid, self.i.payload.last, nxt)
        vin: Value = take
        for s in range(SCORER_STAGES):
            p.stage = s + 1
            with m.If(adv):
                m.d.sync += v[s].eq(vin)
            vin = v[s]
            ctl = reg(ctl, "ctl")

        # ---------------------- stages 1..DOT: Q = sum_e q[e] (per beat, shared by the lanes)
        q_vecs = [_sext(query[e].as_unsigned(), wq) for e in range(d)]
        qsum, _ = _pipelined_sum(m, p, q_vecs, wq, "qs", "qsum", "qsum")

        # --------------------------------------------- the lanes: D, S, the rounded key
        first = ctl[lanes + 1:]
        m.d.comb += [
            self.o.valid.eq(v[-1]),
            self.o.payload.valid.eq(ctl[:lanes]),
            self.o.payload.last.eq(ctl[lanes]),
        ]
        for j in range(lanes):
            lane = ScorerLane(g)
            m.submodules[f"lane{j}"] = lane
            m.d.comb += [lane.token.eq(self.i.payload.lanes[j]),
                         lane.qsum.eq(qsum),
                         lane.adv.eq(adv)]
            m.d.comb += [lane.query[e].eq(query[e]) for e in range(d)]
            m.d.comb += [self.o.payload.lanes[j].key.eq(lane.key),
                         self.o.payload.lanes[j].index.eq(uadd(first, j)[:iw])]
        return m


def make_scorer(cfg: Config) -> Scorer:
    """The scoring unit of a configuration (``hikv verilog --block scorer``)."""
    return Scorer(ScorerGeometry.of(cfg))
