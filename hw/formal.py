"""Formal properties of the RTL blocks' interfaces: one harness per block, and its mutants.

A *harness* instantiates a block of a configuration, drives every input from the solver
(``AnySeq``), assumes the interface rules of its inputs and asserts the rules of its outputs as
Amaranth ``Assume`` / ``Assert`` statements over the block's ports. :func:`harness` builds the
one of a block with one property asserted; the flow that proves it with SymbiYosys and an SMT
solver is :mod:`hikv.sim.eda.formal` (``hikv prove``); docs/formal.md lists every property with
its method, depth and time.

* **Streams** (``amaranth.lib.stream``): on an input the solver keeps ``valid`` high and the
  payload unchanged until ``ready`` (assumed); on an output the block must (asserted,
  property ``o.stable``).
* The clock domain has no reset: a block starts from its registers' initial values.
* **Lemmas.** A property proven by k-induction may need facts about the state behind the
  ports (a counter equal to a queue's fill level, a pointer one ahead of another). The harness
  elaborates the block itself and reads those registers by name (:class:`_Inside`), asserting
  each fact beside the property: the lemmas are proven with it, and the RTL is unchanged.
* **Mutants.** ``mutant=`` the property's :attr:`FormalProperty.mutant` injects one deliberate
  bug at the block's ports (an AXI master that drops ARVALID before ARREADY, a burst that
  crosses 4 KiB, a sorter that emits one entry too many, ...). Each property must reject its
  mutant with a counterexample (bounded model checking to the block's job depth).

Blocks and properties (:data:`PROPERTIES`):

* ``scorer``: ``o`` stable; latency (with ``o`` ready, each input beat leaves exactly
  :data:`~hikv.hw.scorer_timing.SCORER_STAGES` cycles later); beat count (under any
  backpressure every input beat gives one output beat, in order, with its lane mask, ``last``
  and indices ``first + b * L + j``): all by induction.
* ``loader``: ``o`` stable; the AXI4 read master: AR legal (INCR, ARSIZE the bus width, ARLEN
  within ``max_burst_beats``, aligned, ARID 0), no burst crossing 4 KiB, AR held stable until
  ARREADY, never more reads in flight than ``max_outstanding`` nor than the job's limit, each
  burst's beats consumed exactly (the master's count agrees with RLAST), RREADY only while a
  read is outstanding: all by induction, against a legal AXI4 slave (R beats only for
  accepted bursts, in order, RLAST on each burst's last beat, R held until RREADY) and a job
  region inside the address space.
* ``sorter``: ``o`` stable by induction; for a Stage I job without ``error``: exactly
  ``min(k, n)`` entries, indices strictly ascending (the contract's order), each an input
  (key, index), no unselected input beating a selected one (larger key, or equal key and
  earlier arrival), and idle again :data:`SORTER_IDLE_CYCLES` after the job's last beat,
  nothing emitted while idle. Selection is checked against one input label the solver picks
  (``AnyConst``), which covers every label. These are bounded: one whole job of up to
  :data:`SORTER_BMC_ITEMS` items at full rate (labels ``0 .. n - 1``, keys wide enough for
  every order of the items; the sorter only compares keys), as deeper checks of the whole
  sorter are beyond the solver. :class:`SorterJob` sets another job (more items, fewer key
  bits) for a longer bounded check.
* ``topk``: the radix-select top-k engine (:class:`~hikv.hw.topk.TopK`) has the sorter's
  Stage I contract (ports, layouts, ``busy``, sticky ``error``, outputs and tie order), so
  :class:`TopKHarness` is :class:`SorterHarness` around it, with the same properties and
  mutants: ``o`` stable by induction, the Stage I ones bounded to one whole job of the same
  kind (:class:`SorterJob`), whose depth comes from the engine's timing contract
  (:class:`~hikv.hw.topk_timing.TopKTiming`; :meth:`SorterJob.depth` takes the engine) and
  its idle cycles, :data:`TOPK_IDLE_CYCLES` (``busy`` is low in the cycle after a job's last
  output beat). It refuses Stage II configurations with ``error``; the job's configuration is
  assumed Stage I, as the sorter's is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import (
    Assert,
    Assume,
    Cat,
    ClockDomain,
    Const,
    Elaboratable,
    Fragment,
    Module,
    Mux,
    Signal,
    Value,
    unsigned,
)

from hikv.params import Config, ParamError

from .uops import log2_int, popcount

__all__ = ["FormalProperty", "PROPERTIES", "properties", "find_property", "harness", "Harness",
           "SorterHarness", "TopKHarness", "SorterJob", "STAGE1_ENGINES", "stage1_engine",
           "SORTER_IDLE_CYCLES", "TOPK_IDLE_CYCLES", "LoaderHarness", "ScorerHarness"]


@dataclass(frozen=True)
class FormalProperty:
    """One property of a block's interface.

    Parameters
    ----------
    block : str
        Registered block name (:data:`hikv.hw.blocks.BLOCKS`).
    name : str
        Short name, ``<port or function>.<rule>``.
    text : str
        What is asserted, one sentence.
    method : str
        ``"induction"`` (k-induction: proven for every reachable state) or ``"bmc"`` (bounded
        model checking: no violation within ``depth`` cycles from the initial state).
    depth : Callable[[Config], int]
        Induction length or BMC depth (cycles) for a configuration.
    depth_note : str
        Why that depth (for BMC: the job it covers).
    mutant : str
        Name of the bug injected to check that the proof rejects it.
    mutant_text : str
        The bug, one sentence.
    mutant_depth : Callable[[Config], int]
        Depth of the bounded check that must find the mutant's counterexample (an induction
        step that fails is no counterexample, so mutants are always checked by BMC).
    """

    block: str
    name: str
    text: str
    method: str
    depth: Callable[[Config], int]
    depth_note: str
    mutant: str
    mutant_text: str
    mutant_depth: Callable[[Config], int]


def _const(n: int) -> Callable[[Config], int]:
    return lambda cfg: n


def _stage1_job_depth(block: str) -> Callable[[Config], int]:
    """A whole Stage I job of ``n <= SORTER_BMC_ITEMS`` items (any ``k``) on ``block``'s
    engine from its configuration beat to ``busy`` low: cfg handshake, the job's cycles (first
    input beat to last output beat), the return to idle, one more."""
    return lambda cfg: SorterJob(max_items=min(SORTER_BMC_ITEMS, cfg.sorter.max_n)).depth(
        cfg, block)


def _scorer_job_depth(cfg: Config) -> int:
    """A scoring job of ``sorter.max_n`` tokens (the most one Stage I job takes): cfg
    handshake, its beats and the pipeline, one more."""
    from .scorer_timing import SCORER_STAGES

    return 1 + -(-cfg.sorter.max_n // cfg.scorer.lanes) + SCORER_STAGES + 1


def _loader_job_depth(cfg: Config) -> int:
    """A one-token dense job with a one-cycle memory (:func:`~hikv.hw.loader_timing.job_timing`,
    configuration beat to ``status.done``), and one more cycle."""
    from .loader_timing import LoaderGeometry, job_timing

    t = job_timing(LoaderGeometry(cfg.layout, cfg.loader), mode="dense", slots=[0], latency=1)
    return 1 + t.cycles + 1


def _scorer_induction(cfg: Config) -> int:
    from .scorer_timing import SCORER_STAGES

    return SCORER_STAGES + 2


#: items of the Stage I job the sorter's bounded checks follow (an assumption, with labels
#: ``0 .. n - 1`` and keys of ``clog2`` of it bits: every order of the items, ties included)
SORTER_BMC_ITEMS = 8


@dataclass(frozen=True)
class SorterJob:
    """The Stage I job the sorter's bounded checks follow: one job at full rate of
    ``min_items .. max_items`` items, labels ``0 .. n - 1``, keys below ``2**key_bits``.

    Parameters
    ----------
    max_items, min_items : int
        Items of the job, ``1 <= min_items <= max_items <= max_n``.
    key_bits : int or None
        Key bits the solver may set (the rest are zero), ``1 .. key_width``; None:
        ``clog2(max_items)`` (every order of the items, ties included).
    """

    max_items: int = SORTER_BMC_ITEMS
    min_items: int = 1
    key_bits: int | None = None

    def check(self, cfg: Config) -> None:
        """:class:`~hikv.params.ParamError` naming a field outside ``cfg``'s sorter."""
        s = cfg.sorter
        for name, v, lo, hi in (("max_items", self.max_items, 1, s.max_n),
                                ("min_items", self.min_items, 1, self.max_items),
                                ("key_bits", self.key_bits, 1, s.key_width)):
            if name == "key_bits" and v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ParamError(f"Stage I bounded job {name} = {v!r} is out of range: "
                                 f"allowed [{lo}, {hi}]")

    def keys(self) -> int:
        """Key bits the solver sets."""
        return self.key_bits if self.key_bits is not None \
            else max(1, (self.max_items - 1).bit_length())

    def depth(self, cfg: Config, block: str = "sorter") -> int:
        """Cycles of the longest job (``max_items``, any ``k``) on the Stage I engine
        ``block`` (``"sorter"`` or ``"topk"``, :data:`STAGE1_ENGINES`) from its configuration
        beat to ``busy`` low: cfg handshake, the job's cycles (the engine's timing contract),
        the return to idle (its idle cycles), one more."""
        timing, idle = stage1_engine(block)
        t = timing.from_params(cfg.sorter)
        n = min(self.max_items, cfg.sorter.max_n)
        return 1 + max(t.stage1_cycles(n, k) for k in range(1, min(n, cfg.sorter.max_k) + 1)) \
            + idle + 1


#: cycles from the last output beat of a sorter job until ``busy`` is low (the last beat leaves
#: the compactor's output register; the completion test and ``busy`` are registers behind it)
SORTER_IDLE_CYCLES = 2
#: cycles from the last output beat of a top-k engine job until ``busy`` is low: none (the
#: beat itself returns the phase register from DRAIN to IDLE, and ``busy`` is that register
#: decoded, so ``busy`` is low in the next cycle)
TOPK_IDLE_CYCLES = 0


def stage1_engine(block: str) -> tuple[type, int]:
    """(timing contract class, idle cycles) of the Stage I engine ``block``: ``"sorter"``
    (:class:`~hikv.hw.sorter_timing.SorterTiming`, :data:`SORTER_IDLE_CYCLES`) or ``"topk"``
    (:class:`~hikv.hw.topk_timing.TopKTiming`, :data:`TOPK_IDLE_CYCLES`);
    :class:`~hikv.params.ParamError` for another block."""
    from .sorter_timing import SorterTiming
    from .topk_timing import TopKTiming

    engines = {_S: (SorterTiming, SORTER_IDLE_CYCLES), _T: (TopKTiming, TOPK_IDLE_CYCLES)}
    if block not in engines:
        raise ParamError(f"block {block!r} runs no Stage I job; Stage I engines: "
                         f"{sorted(engines)}")
    return engines[block]


_S, _T, _L, _C = "sorter", "topk", "loader", "scorer"
#: the blocks that run the sorter's Stage I contract (their bounded job is a SorterJob)
STAGE1_ENGINES = (_S, _T)
_JOB = {_S: _stage1_job_depth(_S), _T: _stage1_job_depth(_T), _L: _loader_job_depth,
        _C: _scorer_job_depth}
_STAGE1_JOB = ("a whole Stage I job of n <= SORTER_BMC_ITEMS items at full rate, "
               "configuration to idle")
_JOB_NOTE = {_S: _STAGE1_JOB, _T: _STAGE1_JOB,
             _L: "a one-token dense job with a one-cycle memory, configuration to done",
             _C: "a job of sorter.max_n tokens, configuration to its last output beat"}


def _p(block: str, name: str, text: str, method: str, mutant: str, mutant_text: str,
       depth: Callable[[Config], int] | None = None) -> FormalProperty:
    """A property; BMC ones (and every mutant) are checked to the block's job depth."""
    job = _JOB[block]
    if method == "bmc":
        return FormalProperty(block, name, text, method, job, _JOB_NOTE[block], mutant,
                              mutant_text, job)
    return FormalProperty(block, name, text, method, depth or _const(2), "", mutant,
                          mutant_text, job)


_STABLE = "valid held and payload unchanged until ready"
_DROP = "o.valid drops after one cycle of waiting for ready"


def _stage1(block: str, engine: str, idle: str) -> tuple[FormalProperty, ...]:
    """The Stage I contract's properties on ``block`` (``engine``: its name in the mutants'
    text; ``idle``: its idle-cycles constant)."""
    b = block
    return (
        _p(b, "o.stable", f"o: {_STABLE}", "induction", "o_valid_drop", _DROP),
        _p(b, "s1.count", "a Stage I job outputs exactly min(k, n) entries, its last beat "
           "marked last", "bmc", "extra_entry",
           "the last beat of a job carries one valid lane too many"),
        _p(b, "s1.order", "Stage I output indices strictly ascend within a job", "bmc",
           "lanes_swapped", "lanes 0 and 1 of a full output beat are exchanged"),
        _p(b, "s1.member", "every Stage I output (key, index) is an input item of the job",
           "bmc", "key_plus_one", "lane 0's key leaves one larger than it came in"),
        _p(b, "s1.topk", "no unselected input beats a selected one (larger key, or equal key "
           "and earlier arrival)", "bmc", "smallest_k",
           f"the {engine} selects the k smallest keys (keys inverted into and out of it)"),
        _p(b, "idle", f"busy falls within {idle} of a job's last output beat; "
           "cfg.ready == ~busy; no output while idle", "bmc", "stuck_busy",
           "busy stays high after the first job"),
    )


#: Every property, by block.
PROPERTIES: dict[str, tuple[FormalProperty, ...]] = {
    _S: _stage1(_S, "sorter", "SORTER_IDLE_CYCLES"),
    _T: _stage1(_T, "engine", "TOPK_IDLE_CYCLES"),
    _L: (
        _p(_L, "o.stable", f"o: {_STABLE}", "induction", "o_valid_drop", _DROP),
        _p(_L, "ar.legal", "while ARVALID: ARBURST INCR, ARSIZE the bus width, ARLEN < "
           "max_burst_beats, ARADDR beat-aligned, ARID 0", "induction", "arsize_wide",
           "ARSIZE one step wider than the bus"),
        _p(_L, "ar.4k", "no burst crosses a 4 KiB boundary", "induction", "cross_4k",
           "a burst that ends at a 4 KiB boundary gets one beat more"),
        _p(_L, "ar.stable", "ARVALID held and AR payload unchanged until ARREADY", "induction",
           "arvalid_drop", "ARVALID drops after one cycle of waiting for ARREADY"),
        _p(_L, "ar.outstanding", "reads in flight (AR accepted, RLAST not yet) never exceed "
           "max_outstanding", "induction", "built_one_more",
           "the master is built for max_outstanding + 1 reads in flight"),
        _p(_L, "ar.limit", "reads in flight never exceed the job's limit (cfg.outstanding; "
           "0 or above max_outstanding: max_outstanding)", "induction", "limit_plus_one",
           "the master reads its job limit one too high"),
        _p(_L, "r.rlast", "the master's beat count of every burst agrees with RLAST "
           "(status.rlast_error never rises under a legal slave)", "induction",
           "arlen_plus_one", "ARLEN one larger than the beats the master takes"),
        _p(_L, "r.ready", "RREADY only while a read is outstanding", "induction",
           "rready_always", "RREADY held high at all times"),
    ),
    _C: (
        _p(_C, "o.stable", f"o: {_STABLE}", "induction", "o_valid_drop", _DROP),
        _p(_C, "latency", "with o ready, every input beat leaves exactly SCORER_STAGES "
           "cycles after it was accepted, with its lane mask and last flag, and no other "
           "beat leaves", "induction", "extra_stage",
           "a register stage in front of the unit (latency one cycle longer)",
           _scorer_induction),
        _p(_C, "count", "every input beat gives one output beat, in order, with its lane "
           "mask, last flag and indices first + b * L + j", "induction", "extra_entry",
           "the last beat of a job carries one valid lane too many"),
    ),
}


def properties(block: str) -> tuple[FormalProperty, ...]:
    """The properties of ``block``; :class:`~hikv.params.ParamError` for a block without."""
    try:
        return PROPERTIES[block]
    except KeyError:
        raise ParamError(f"block {block!r} has no formal properties; blocks with: "
                         f"{sorted(PROPERTIES)}") from None


def find_property(block: str, name: str) -> FormalProperty:
    """Property ``name`` of ``block``; :class:`~hikv.params.ParamError` naming the known ones."""
    for p in properties(block):
        if p.name == name:
            return p
    raise ParamError(f"block {block!r} has no property {name!r}; its properties: "
                     f"{[p.name for p in properties(block)]}")


# --------------------------------------------------------------------------- common parts
class Harness(Elaboratable):
    """A block of ``cfg`` under formal properties (base of the per-block harnesses).

    Parameters
    ----------
    cfg : Config
        The configuration the block is built from.
    only : str or None
        Assert only this property (its name in :data:`PROPERTIES`); None: all of them.
    mutant : str or None
        Inject this property's bug (:attr:`FormalProperty.mutant`); None: the block as built.
    """

    block = ""

    def __init__(self, cfg: Config, *, only: str | None = None,
                 mutant: str | None = None) -> None:
        if not isinstance(cfg, Config):
            raise TypeError(f"Harness needs a Config, not {cfg!r}")
        names = [p.name for p in properties(self.block)]
        if only is not None and only not in names:
            raise ParamError(f"block {self.block!r} has no property {only!r}; its properties: "
                             f"{names}")
        mutants = [p.mutant for p in properties(self.block)]
        if mutant is not None and mutant not in mutants:
            raise ParamError(f"block {self.block!r} has no mutant {mutant!r}; its mutants: "
                             f"{mutants}")
        self.cfg = cfg
        self.only = only
        self.mutant = mutant
        self._cd = ClockDomain("sync", reset_less=True)

    @property
    def clock(self) -> Signal:
        """The clock: the harness's only port (without it Yosys would see registers clocked
        by an undriven wire, which it folds into constants)."""
        return self._cd.clk

    def _check(self, m: Module, name: str, cond: Value) -> None:
        """Assert ``cond`` every cycle for property ``name`` (when it is the one proven)."""
        if self.only is None or self.only == name:
            m.d.comb += Assert(cond, name)

    @staticmethod
    def _free(m: Module, sig: Value) -> None:
        """Drive ``sig`` from the solver, a new value every cycle."""
        m.d.comb += sig.eq(AnySeq(len(Value.cast(sig))))

    def _domain(self, m: Module) -> Signal:
        """The ``sync`` domain (no reset) and ``past``: low in the first cycle only."""
        m.domains.sync = self._cd
        past = Signal(name="f_past")
        m.d.sync += past.eq(1)
        return past

    @staticmethod
    def _held(m: Module, past: Signal, valid: Value, ready: Value, payload: Value,
              name: str) -> Value:
        """The stream rule at this cycle: if valid waited for ready in the previous cycle,
        valid is still high and the payload unchanged."""
        pv = Signal(name=f"f_{name}_pv")
        pr = Signal(name=f"f_{name}_pr")
        pp = Signal(len(Value.cast(payload)), name=f"f_{name}_pp")
        m.d.sync += [pv.eq(valid), pr.eq(ready), pp.eq(payload)]
        return ~(past & pv & ~pr) | (valid & (payload == pp))

    def _input_stream(self, m: Module, past: Signal, port: object, name: str) -> None:
        """Drive an input stream port from the solver under the stream rule (assumed)."""
        self._free(m, port.valid)
        self._free(m, port.payload.as_value() if hasattr(port.payload, "as_value")
                   else port.payload)
        pay = port.payload.as_value() if hasattr(port.payload, "as_value") else port.payload
        m.d.comb += Assume(self._held(m, past, port.valid, port.ready, pay, name))

    def _waited(self, m: Module, valid: Value, ready: Value, name: str) -> Signal:
        """High while ``valid`` has waited for ``ready`` for at least one cycle (mutants)."""
        w = Signal(name=f"f_{name}_waited")
        m.d.sync += w.eq(valid & ~ready)
        return w


class _Inside:
    """Registers inside an elaborated block, by name (for induction lemmas).

    The harness elaborates the block itself (``Fragment.get``) and reads signals of its
    sub-blocks by path (``"inflight.count"``, ``"coal.coal_left"``), so a lemma can tie the
    harness's view of the ports to the state behind them without changing the RTL. A name that
    is not found raises :class:`LookupError` naming the candidates.
    """

    def __init__(self, frag: Fragment) -> None:
        self.frag = frag

    @staticmethod
    def signals(frag: Fragment) -> dict[str, Signal]:
        out: dict[str, Signal] = {}
        for stmts in frag.statements.values():
            for st in stmts:
                for sig in [*st._lhs_signals(), *st._rhs_signals()]:
                    out.setdefault(sig.name, sig)
        return out

    def fragment(self, path: str) -> Fragment:
        frag = self.frag
        for part in [p for p in path.split(".") if p]:
            subs = {name: f for f, name, _ in frag.subfragments}
            if part not in subs:
                raise LookupError(f"no sub-block {part!r} in {path!r}; there are {sorted(subs)}")
            frag = subs[part]
        return frag

    def __call__(self, path: str) -> Signal:
        where, _, name = path.rpartition(".")
        sigs = self.signals(self.fragment(where))
        if name not in sigs:
            raise LookupError(f"no signal {name!r} in {where or 'the block'}; there are "
                              f"{sorted(sigs)}")
        return sigs[name]


# --------------------------------------------------------------------------- scorer
class ScorerHarness(Harness):
    """The low-bit scoring unit (:class:`~hikv.hw.scorer.Scorer`) under its properties."""

    block = _C

    def elaborate(self, platform: object) -> Module:
        from .scorer import make_scorer
        from .scorer_timing import SCORER_STAGES

        m = Module()
        past = self._domain(m)
        dut = make_scorer(self.cfg)
        frag = Fragment.get(dut, platform)
        m.submodules.dut = frag
        lanes = dut.geometry.lanes
        iw = dut.geometry.index_width

        # the unit's ports as the environment sees them (mutants change them here)
        cfg_v, cfg_r = Signal(name="cfg_valid"), Signal(name="cfg_ready")
        cfg_p = Signal(len(dut.cfg.payload.as_value()), name="cfg_payload")
        i_v, i_r = Signal(name="i_valid"), Signal(name="i_ready")
        i_p = Signal(len(dut.i.payload.as_value()), name="i_payload")
        o_v, o_r = Signal(name="o_valid"), Signal(name="o_ready")
        o_p = Signal(dut.geometry.output_layout(), name="o_payload")
        for s in (cfg_v, cfg_p, i_v, i_p, o_r):
            self._free(m, s)
        m.d.comb += [Assume(self._held(m, past, cfg_v, cfg_r, cfg_p, "cfg")),
                     Assume(self._held(m, past, i_v, i_r, i_p, "i")),
                     dut.cfg.valid.eq(cfg_v), dut.cfg.payload.eq(cfg_p),
                     cfg_r.eq(dut.cfg.ready)]
        if self.mutant == "extra_stage":
            # a stream register in front of the unit: one cycle more latency
            rv = Signal(name="mut_valid")
            rp = Signal(len(i_p), name="mut_payload")
            m.d.comb += [i_r.eq(~rv | dut.i.ready), dut.i.valid.eq(rv), dut.i.payload.eq(rp)]
            with m.If(i_r):
                m.d.sync += [rv.eq(i_v), rp.eq(i_p)]
        else:
            m.d.comb += [dut.i.valid.eq(i_v), dut.i.payload.eq(i_p), i_r.eq(dut.i.ready)]
        m.d.comb += [o_v.eq(dut.o.valid), o_p.eq(dut.o.payload), dut.o.ready.eq(o_r)]
        if self.mutant == "o_valid_drop":
            m.d.comb += o_v.eq(dut.o.valid & ~self._waited(m, dut.o.valid, o_r, "o"))
        if self.mutant == "extra_entry":
            mask = dut.o.payload.valid
            m.d.comb += o_p.valid.eq(Mux(dut.o.payload.last, mask | (mask << 1)[:lanes], mask))

        # ---- o.stable
        self._check(m, "o.stable", self._held(m, past, o_v, o_r, o_p.as_value(), "o"))

        # the environment's view of the job: the expected index of the next input beat's lane 0
        cfg_fire = cfg_v & cfg_r
        i_fire = i_v & i_r
        o_fire = o_v & o_r
        ip = dut.i.payload.shape()(i_p)      # a view of the input payload
        first = dut.cfg.payload.shape()(cfg_p).first
        nxt = Signal(iw, name="f_next_index")
        with m.If(i_fire):
            m.d.sync += nxt.eq(nxt + lanes)
        with m.If(cfg_fire):
            m.d.sync += nxt.eq(first)
        meta_in = Cat(ip.valid, ip.last, nxt)
        meta_out = Cat(o_p.valid, o_p.last, o_p.lanes[0].index)
        flags_in, flags_out = meta_in[:lanes + 1], meta_out[:lanes + 1]
        idx_ok = Cat(*[o_p.lanes[j].index == (o_p.lanes[0].index + j)[:iw]
                       for j in range(lanes)]).all()

        # ---- latency: a history of the last SCORER_STAGES cycles (accept, its beat, ready)
        s = SCORER_STAGES
        h_acc = [Signal(name=f"f_acc{t}") for t in range(s)]
        h_meta = [Signal(lanes + 1, name=f"f_meta{t}") for t in range(s)]
        h_rdy = [Signal(name=f"f_rdy{t}") for t in range(s)]
        h_ok = [Signal(name=f"f_hist{t}") for t in range(s)]
        m.d.sync += [h_acc[0].eq(i_fire), h_meta[0].eq(flags_in), h_rdy[0].eq(o_r),
                     h_ok[0].eq(1)]
        for t in range(1, s):
            m.d.sync += [h_acc[t].eq(h_acc[t - 1]), h_meta[t].eq(h_meta[t - 1]),
                         h_rdy[t].eq(h_rdy[t - 1]), h_ok[t].eq(h_ok[t - 1])]
        flowing = Cat(*h_rdy, *h_ok).all()
        self._check(m, "latency", ~flowing | ((o_v == h_acc[-1])
                                             & (~o_v | (flags_out == h_meta[-1]))))

        # ---- count: beats in flight, and one tagged beat followed through the unit
        fw = (s + 2).bit_length()
        inflight = Signal(fw, name="f_inflight")
        m.d.sync += inflight.eq(inflight + i_fire - o_fire)
        tagged = Signal(name="f_tagged")
        ahead = Signal(fw, name="f_ahead")
        t_meta = Signal(len(meta_in), name="f_tag_meta")
        pick = AnySeq(1)
        with m.If(o_fire & tagged):
            m.d.sync += ahead.eq(ahead - 1)
            with m.If(ahead == 0):
                m.d.sync += tagged.eq(0)
        with m.If(i_fire & ~tagged & pick):
            m.d.sync += [tagged.eq(1), ahead.eq(inflight - o_fire), t_meta.eq(meta_in)]
        self._check(m, "count",
                    (inflight <= s) & ~(o_fire & (inflight == 0))
                    & (~tagged | (ahead < inflight))
                    & (~(o_fire & tagged & (ahead == 0)) | (meta_out == t_meta))
                    & (~o_v | idx_ok))
        if self.only == "count" and self.mutant is None:
            # lemmas (proven with the property): the harness's index and beats in flight are
            # the unit's, and the tagged beat sits in the stage with ``ahead`` valid stages
            # after it
            inside = _Inside(frag)
            v = [inside(f"v{t}") for t in range(1, s + 1)]
            ctl = [inside(f"s{t}_ctl") for t in range(1, s + 1)]
            facts = [nxt == inside("nxt"), inflight == popcount(v)]
            for t in range(s):
                after = popcount(v[t + 1:]) if t + 1 < s else Const(0, 1)
                facts.append(~(tagged & v[t] & (after == ahead)) | (ctl[t] == t_meta))
            for i, f in enumerate(facts):
                m.d.comb += Assert(f, f"lemma{i}")
        return m


# --------------------------------------------------------------------------- loader
class LoaderHarness(Harness):
    """The KV loader (:class:`~hikv.hw.loader.KVLoader`) and its AXI4 read master under their
    properties, against a legal AXI4 slave kept by assumptions."""

    block = _L

    def elaborate(self, platform: object) -> Module:
        from .loader import make_loader
        from .loader_timing import AXI_BOUNDARY

        m = Module()
        past = self._domain(m)
        nmax = self.cfg.loader.max_outstanding
        built = self.cfg
        if self.mutant == "built_one_more":
            built = dataclasses.replace(self.cfg, loader=dataclasses.replace(
                self.cfg.loader, max_outstanding=nmax + 1))
        dut = make_loader(built)
        frag = Fragment.get(dut, platform)
        m.submodules.dut = frag
        g = dut.geometry
        lp = g.loader
        ax = dut.axi
        size = g.beat_shift

        # ---- inputs: cfg and tokens under the stream rule
        cfg_p = Signal(dut.cfg.payload.shape(), name="cfg_payload")
        cfg_v = Signal(name="cfg_valid")
        self._free(m, cfg_v)
        self._free(m, cfg_p.as_value())
        m.d.comb += Assume(self._held(m, past, cfg_v, dut.cfg.ready, cfg_p.as_value(), "cfg"))
        # the job's region lies inside the address space (the region LoaderGeometry checks
        # against it, from the configured base)
        region = lp.max_tokens * g.layout.stride(g.record_bytes_max)
        m.d.comb += Assume(cfg_p.base <= (1 << lp.addr_width) - region)
        m.d.comb += [dut.cfg.valid.eq(cfg_v), dut.cfg.payload.eq(cfg_p)]
        if self.mutant == "limit_plus_one":
            o = cfg_p.outstanding
            m.d.comb += dut.cfg.payload.outstanding.eq(
                Mux((o == 0) | (o >= nmax), o, o + 1))
        self._input_stream(m, past, dut.tokens, "tokens")

        # ---- the master's ports as the slave sees them (mutants change them here)
        arvalid, arready = Signal(name="arvalid"), Signal(name="arready")
        araddr = Signal(lp.addr_width, name="araddr")
        arlen, arsize, arburst = Signal(8, name="arlen"), Signal(3, name="arsize"), \
            Signal(2, name="arburst")
        arid = Signal(lp.id_width, name="arid")
        rready = Signal(name="rready")
        m.d.comb += [arvalid.eq(ax.arvalid), araddr.eq(ax.araddr), arlen.eq(ax.arlen),
                     arsize.eq(ax.arsize), arburst.eq(ax.arburst), arid.eq(ax.arid),
                     rready.eq(ax.rready), ax.arready.eq(arready)]
        if self.mutant == "arvalid_drop":
            m.d.comb += arvalid.eq(ax.arvalid & ~self._waited(m, ax.arvalid, arready, "ar"))
        if self.mutant == "arsize_wide":
            m.d.comb += arsize.eq(ax.arsize + 1)
        if self.mutant == "cross_4k":
            end = ax.araddr[:12] + ((ax.arlen + 1) << size)
            m.d.comb += arlen.eq(ax.arlen + (end == AXI_BOUNDARY))
        if self.mutant == "arlen_plus_one":
            m.d.comb += arlen.eq(Mux(ax.arlen < lp.max_burst_beats - 1, ax.arlen + 1, ax.arlen))
        if self.mutant == "rready_always":
            m.d.comb += rready.eq(1)
        self._free(m, arready)
        ar_fire = arvalid & arready

        # ---- the legal slave: accepted bursts in order (lengths in a queue), R beats only
        # for them, RLAST on each burst's last beat, R held until RREADY
        depth = nmax + 2
        qlen = [Signal(8, name=f"f_len{q}") for q in range(depth)]
        cnt = Signal(range(depth + 1), name="f_outstanding")
        beat = Signal(8, name="f_beat")
        rvalid = Signal(name="rvalid")
        rpay = Signal(len(ax.rdata) + 2, name="r_payload")
        self._free(m, rvalid)
        self._free(m, rpay)
        rlast = Signal(name="rlast")
        m.d.comb += [rlast.eq(beat == qlen[0]),
                     Assume(~rvalid | (cnt != 0)),
                     Assume(self._held(m, past, rvalid, ax.rready, rpay, "r")),
                     ax.rvalid.eq(rvalid), ax.rdata.eq(rpay[:len(ax.rdata)]),
                     ax.rresp.eq(rpay[len(ax.rdata):]), ax.rlast.eq(rlast), ax.rid.eq(0)]
        r_fire = rvalid & ax.rready
        done = r_fire & rlast
        with m.If(r_fire):
            m.d.sync += beat.eq(Mux(rlast, 0, beat + 1))
        # pop the head on a burst's last beat, push the accepted burst at the tail
        shifted = [qlen[q + 1] for q in range(depth - 1)] + [Const(0, 8)]
        base = [Mux(done, shifted[q], qlen[q]) for q in range(depth)]
        slot = Mux(done, cnt - 1, cnt)
        for q in range(depth):
            m.d.sync += qlen[q].eq(Mux(ar_fire & (slot == q), arlen, base[q]))
        with m.If(ar_fire & ~done & (cnt < depth)):
            m.d.sync += cnt.eq(cnt + 1)
        with m.If(done & ~ar_fire):
            m.d.sync += cnt.eq(cnt - 1)

        # ---- o: any backpressure
        o_v = Signal(name="o_valid")
        o_r = Signal(name="o_ready")
        self._free(m, o_r)
        m.d.comb += [dut.o.ready.eq(o_r), o_v.eq(dut.o.valid)]
        if self.mutant == "o_valid_drop":
            m.d.comb += o_v.eq(dut.o.valid & ~self._waited(m, dut.o.valid, o_r, "o"))
        self._check(m, "o.stable",
                    self._held(m, past, o_v, o_r, dut.o.payload.as_value(), "o"))

        # ---- AR channel
        aligned = (araddr[:size] == 0) if size else Const(1, 1)
        self._check(m, "ar.legal", ~arvalid | ((arburst == 1) & (arsize == size)
                                               & (arlen < lp.max_burst_beats) & aligned
                                               & (arid == 0)))
        end = araddr[:12] + ((arlen + 1) << arsize)
        self._check(m, "ar.4k", ~arvalid | (end <= AXI_BOUNDARY))
        ar_pay = Cat(araddr, arlen, arsize, arburst, arid)
        self._check(m, "ar.stable", self._held(m, past, arvalid, arready, ar_pay, "ar"))

        # ---- reads in flight against the job's limit (taken with the job's configuration)
        limit = Signal(range(nmax + 1), name="f_limit")
        o = cfg_p.outstanding
        with m.If(cfg_v & dut.cfg.ready):
            m.d.sync += limit.eq(Mux((o == 0) | (o > nmax), nmax, o))
        self._check(m, "ar.outstanding", cnt <= nmax)
        self._check(m, "ar.limit", cnt <= limit)

        # ---- R channel
        self._check(m, "r.rlast", ~dut.status.rlast_error)
        self._check(m, "r.ready", ~rready | (cnt != 0))

        # ---- lemmas: what the properties above need to be inductive (proven with them)
        if self.mutant is None and self.only in _LOADER_LEMMA_USERS:
            self._lemmas(m, _Inside(frag), dut, cnt=cnt, qlen=qlen, beat=beat)
        if self.mutant is None and self.only in ("ar.stable", "ar.limit"):
            self._ar_lemmas(m, _Inside(frag), dut, limit=limit)
        return m

    def _ar_lemmas(self, m: Module, inside: _Inside, dut: object, *, limit: Signal) -> None:
        """Invariants of the address side behind the ports (asserted beside the property):

        * idle: while not busy, the address generator is idle or done, the range slice and
          the coalescer's run empty and no read in flight, so a configuration (taken only
          then) never starts a job over a waiting request;
        * records: while the generator runs, its record end is ``base + rec_len - 1``, the
          stride the aligned record length and the base inside the address space, so a
          record's first burst is never after its last;
        * the slice holds ranges in order (the skid only behind the main entry, nothing
          after an ``end``), and once the coalescer took ``end`` nothing more comes;
        * the coalescer's registers agree (remaining run ``q = end - 1 - addr``, ``addr +
          longest request``, a run only when one was started);
        * the job limit the master uses is the configured one, and at least the reads in
          flight.
        """
        from .loader_addr import AgenState
        from .loader_ports import range_layout

        g = dut.geometry
        lp, lay = g.loader, g.layout
        busy = dut.status.busy
        st = inside("agen.agen_state")
        run = (st == AgenState.RUN.value) | (st == AgenState.FLUSH.value)
        idle_or_done = (st == AgenState.IDLE.value) | (st == AgenState.DONE.value)
        done = st == AgenState.DONE.value
        flushed = done | ((st == AgenState.FLUSH.value) & inside("agen.agen_r_sent"))
        base, rec_len, stride = inside("agen.base"), inside("agen.rec_len"), \
            inside("agen.stride")
        rec_last = inside("agen.agen_rec_last")
        aw = lp.addr_width
        al = log2_int(lay.align_bytes)
        region = lp.max_tokens * lay.stride(g.record_bytes_max)
        main_v, skid_v = inside("slice_main_valid"), inside("slice_skid_valid")
        rl = range_layout(g)
        main_r, skid_r = rl(inside("slice_main")), rl(inside("slice_skid"))
        q = inside("coal.coal_left")
        empty = q[-1]
        have = inside("coal.coal_have")
        a, am, e = (inside("coal.coal_addr"), inside("coal.coal_addr_big"),
                    inside("coal.coal_run_end"))
        bl = g.burst_shift
        big = min(g.max_request_bytes >> bl, 1 << (12 - bl))    # as the coalescer cuts
        w, qw = len(a), len(q)
        level = inside("inflight.count")
        dut_limit = _job_limit(inside, dut)
        aligned = Cat(Const(0, al), (rec_len + lay.align_bytes - 1)[al:])
        facts = [
            busy | (idle_or_done & ~main_v & ~skid_v & empty & (level == 0)),
            base <= (1 << aw) - region,
            ~run | ((rec_last == (base + rec_len - 1)[:aw]) & (stride == aligned)
                    & (rec_len >= 1) & (rec_len <= g.record_bytes_max)),
            ~skid_v | main_v,
            ~main_v | main_r.end | (main_r.b0 <= main_r.b1),
            ~skid_v | skid_r.end | (skid_r.b0 <= skid_r.b1),
            ~(main_v & main_r.end) | (flushed & ~skid_v),
            ~(skid_v & skid_r.end) | flushed,
            ~inside("coal.coal_ending") | (flushed & ~main_v & ~skid_v),
            ~have | (am == (a + big)[:w]),
            q == (Cat(e, Const(0, qw - w)) - 1 - Cat(a, Const(0, qw - w)))[:qw],
            ~empty | (q == (1 << qw) - 1),
            empty | have,
            dut_limit == limit,
            level <= dut_limit,
            limit <= lp.max_outstanding,
        ]
        for i, f in enumerate(facts):
            m.d.comb += Assert(f, f"ar_lemma{i}")

    def _lemmas(self, m: Module, inside: _Inside, dut: object, *, cnt: Value,
                qlen: list[Signal], beat: Signal) -> None:
        """Invariants of the read side behind the ports, asserted beside the property (so
        proven with it) and giving the induction what it cannot see at the ports: the
        master's in-flight queue holds exactly the bursts the slave has accepted and not
        finished (count, the head and second entries' lengths, pointers consistent), its beat
        counter is the slave's beat within the head burst, and the job limit it uses is at
        most ``max_outstanding``."""
        from .loader_ports import request_layout

        g = dut.geometry
        nmax = g.loader.max_outstanding
        level = inside("inflight.count")
        rd_ptr, wr_ptr = inside("inflight.rd_ptr"), inside("inflight.wr_ptr")
        rd1 = inside("inflight.rd1")
        depth = g.inflight_depth
        rq = request_layout(g)
        head = rq(inside("inflight.head"))
        second = rq(inside("inflight.rp__data"))
        k = inside("k")
        dut_limit = _job_limit(inside, dut)

        def wrap(v: Value) -> Value:
            return Mux(v >= depth, v - depth, v)[:len(rd_ptr)]

        def burst(entry: object) -> Value:
            return (entry.beats != 0) & (entry.beats <= g.loader.max_burst_beats)

        facts = [
            level == cnt,
            level <= depth,
            dut_limit <= nmax,
            rd1 == wrap(rd_ptr + 1),
            wr_ptr == wrap(rd_ptr + level),
            beat == k,
            (level != 0) | (k == 0),
            (level == 0) | ((qlen[0] == head.beats - 1) & (beat < head.beats) & burst(head)),
            (level < 2) | ((qlen[1] == second.beats - 1) & burst(second)),
        ]
        if depth > 2 or nmax > 2:
            raise ParamError("the loader's read-side lemmas follow two entries of the in-flight "
                             f"queue; this loader has {depth} (max_outstanding = {nmax})")
        for i, f in enumerate(facts):
            m.d.comb += Assert(f, f"lemma{i}")


#: loader properties proven with the lemmas of :meth:`LoaderHarness._lemmas`
_LOADER_LEMMA_USERS = ("ar.outstanding", "ar.limit", "r.rlast", "r.ready")


def _job_limit(inside: _Inside, dut: object) -> Signal:
    """The loader's job limit register (unnamed in the RTL): the signal beside the in-flight
    level in the ARVALID assignment."""
    for st in inside.frag.statements.get("comb", ()):
        if any(sig is dut.axi.arvalid for sig in st._lhs_signals()):
            rest = [sig for sig in st._rhs_signals()
                    if sig.name not in ("requests__valid", "level", "axi__arvalid")]
            if len(rest) == 1:
                return rest[0]
    raise LookupError("the loader's job limit was not found beside ARVALID")


# --------------------------------------------------------------------------- sorter
class SorterHarness(Harness):
    """The importance sorter (:class:`~hikv.hw.sorter.Sorter`) under its properties. The
    Stage I function is checked against one input label ``X`` the solver picks (``AnyConst``):
    whatever holds for it holds for every label.

    ``job`` (:class:`SorterJob`) is the Stage I job the bounded properties follow; None: up to
    :data:`SORTER_BMC_ITEMS` items, keys wide enough for every order of them.

    Another engine with the sorter's Stage I contract (ports, layouts, ``busy``, ``error``)
    is checked by a subclass that names its block, builds it (:meth:`engine`) and states its
    idle cycles (:attr:`idle_cycles`); :class:`TopKHarness` is one.
    """

    block = _S
    #: cycles from a job's last output beat until ``busy`` is low (property ``idle``)
    idle_cycles = SORTER_IDLE_CYCLES

    def engine(self) -> Elaboratable:
        """The block under check, built from the configuration."""
        from .sorter import make_sorter

        return make_sorter(self.cfg)

    def __init__(self, cfg: Config, *, only: str | None = None, mutant: str | None = None,
                 job: SorterJob | None = None) -> None:
        super().__init__(cfg, only=only, mutant=mutant)
        if job is None:
            job = SorterJob(max_items=min(SORTER_BMC_ITEMS, cfg.sorter.max_n))
        if not isinstance(job, SorterJob):
            raise TypeError(f"{type(self).__name__} job must be a SorterJob, not {job!r}")
        job.check(cfg)
        self.job = job

    def elaborate(self, platform: object) -> Module:
        from .sorter import SorterMode

        m = Module()
        past = self._domain(m)
        m.submodules.dut = dut = self.engine()
        prm = dut.params
        p, kw, iw = prm.lanes, prm.key_width, prm.index_width

        # ---- inputs (the solver's), as the sorter receives them after a mutant's change
        cfg = Signal(dut.cfg_layout, name="cfg_payload")
        cfg_v = Signal(name="cfg_valid")
        ib = Signal(dut.io_layout, name="i_payload")
        i_v = Signal(name="i_valid")
        for s in (cfg_v, cfg.as_value(), i_v, ib.as_value()):
            self._free(m, s)
        cfg_r = Signal(name="cfg_ready")
        m.d.comb += [Assume(self._held(m, past, cfg_v, cfg_r, cfg.as_value(), "cfg")),
                     Assume(self._held(m, past, i_v, dut.i.ready, ib.as_value(), "i")),
                     dut.cfg.valid.eq(cfg_v), dut.cfg.payload.eq(cfg),
                     dut.i.valid.eq(i_v), dut.i.payload.eq(ib)]
        if self.mutant == "smallest_k":
            m.d.comb += [dut.i.payload.lanes[j].key.eq(~ib.lanes[j].key) for j in range(p)]
        if self.only in _SORTER_FULL_RATE:
            # one job at full rate: its configuration offered from reset until taken, an input
            # beat offered every cycle, the output always ready (keys, labels, k and n free)
            taken = Signal(name="f_cfg_taken")
            with m.If(cfg_v & cfg_r):
                m.d.sync += taken.eq(1)
            m.d.comb += [Assume(cfg_v == ~taken), Assume(i_v)]
            # a Stage I job of min_items .. max_items items (SorterJob), its labels 0 .. n - 1
            # and keys of key_bits bits (by default clog2(max_items): every order of its items,
            # ties included)
            job = self.job
            beat_no = Signal(range(job.max_items + 1), name="f_beat_no")
            with m.If(i_v & dut.i.ready):
                m.d.sync += beat_no.eq(beat_no + 1)
            m.d.comb += [Assume(cfg.mode == SorterMode.STAGE1),
                         Assume((cfg.count >= job.min_items) & (cfg.count <= job.max_items))]
            m.d.comb += [Assume(ib.lanes[j].key < (1 << job.keys())) for j in range(p)]
            # (wrapped to the index width: after the job's last beat the labels offered
            # are never taken)
            m.d.comb += [Assume(ib.lanes[j].index == (beat_no * p + j)[:iw]) for j in range(p)]

        # ---- outputs as the environment sees them
        o = Signal(dut.io_layout, name="o_payload")
        o_v, o_r = Signal(name="o_valid"), Signal(name="o_ready")
        busy = Signal(name="busy")
        self._free(m, o_r)
        if self.only in _SORTER_FULL_RATE:
            m.d.comb += Assume(o_r)
        m.d.comb += [o.eq(dut.o.payload), o_v.eq(dut.o.valid), dut.o.ready.eq(o_r),
                     busy.eq(dut.busy), cfg_r.eq(dut.cfg.ready)]
        if self.mutant == "smallest_k":
            m.d.comb += [o.lanes[j].key.eq(~dut.o.payload.lanes[j].key) for j in range(p)]
        if self.mutant == "o_valid_drop":
            m.d.comb += o_v.eq(dut.o.valid & ~self._waited(m, dut.o.valid, o_r, "o"))
        if self.mutant == "extra_entry":
            mask = dut.o.payload.valid
            m.d.comb += o.valid.eq(Mux(dut.o.payload.last, mask | (mask << 1)[:p], mask))
        if self.mutant == "lanes_swapped":
            full = dut.o.payload.valid.all()
            a, b = dut.o.payload.lanes[0].as_value(), dut.o.payload.lanes[1].as_value()
            m.d.comb += [o.lanes[0].eq(Mux(full, b, a)), o.lanes[1].eq(Mux(full, a, b))]
        if self.mutant == "key_plus_one":
            m.d.comb += o.lanes[0].key.eq(dut.o.payload.lanes[0].key + 1)
        if self.mutant == "stuck_busy":
            seen = Signal(name="mut_seen")
            with m.If(dut.o.valid & o_r & dut.o.payload.last):
                m.d.sync += seen.eq(1)
            m.d.comb += [busy.eq(dut.busy | seen), cfg_r.eq(dut.cfg.ready & ~seen)]
            m.d.comb += dut.cfg.valid.eq(cfg_v & ~seen)

        # ---- o.stable
        self._check(m, "o.stable", self._held(m, past, o_v, o_r, o.as_value(), "o"))

        # ---- the job as the environment configured it
        cfg_fire = cfg_v & cfg_r
        i_fire = i_v & dut.i.ready
        o_fire = o_v & o_r
        ok = ~dut.error
        s1 = Signal(name="f_stage1")        # the job (or the last one) is Stage I
        want = Signal(range(prm.max_k + 1), name="f_want")   # min(k, n)
        with m.If(cfg_fire):
            m.d.sync += [s1.eq(cfg.mode == SorterMode.STAGE1),
                         want.eq(Mux(cfg.k < cfg.count, cfg.k, cfg.count))]

        # the watched label X: whether and with which key it came in
        x = AnyConst(iw)
        seen_x = Signal(name="f_seen_x")
        key_x = Signal(kw, name="f_key_x")
        with m.If(i_fire):
            for j in range(p):
                with m.If(ib.valid[j] & (ib.lanes[j].index == x)):
                    m.d.sync += [seen_x.eq(1), key_x.eq(ib.lanes[j].key)]

        # the output so far: entries, last index, X emitted, smallest keys below / above X
        count = Signal(range(prm.max_k + p + 1), name="f_count")
        last_idx = Signal(iw, name="f_last_index")
        any_out = Signal(name="f_any_out")
        x_out = Signal(name="f_x_out")
        lo_min = Signal(kw, name="f_lo_min", init=(1 << kw) - 1)
        hi_min = Signal(kw, name="f_hi_min", init=(1 << kw) - 1)
        hi_any = Signal(name="f_hi_any")
        order_ok = []
        member_ok = []
        prev_idx, prev_valid = last_idx, any_out
        nlo, nhi, nhany, nxo = lo_min, hi_min, hi_any, x_out
        for j in range(p):
            ln, v = o.lanes[j], o.valid[j]
            order_ok.append(~v | ~prev_valid | (ln.index > prev_idx))
            member_ok.append(~v | (ln.index != x) | (seen_x & (ln.key == key_x)))
            is_lo = v & (ln.index < x)
            is_hi = v & (ln.index > x)
            nlo = Mux(is_lo & (ln.key < nlo), ln.key, nlo)
            nhi = Mux(is_hi & (ln.key < nhi), ln.key, nhi)
            nhany = nhany | is_hi
            nxo = nxo | (v & (ln.index == x))
            prev_idx = Mux(v, ln.index, prev_idx)
            prev_valid = prev_valid | v
        new_count = count + popcount([o.valid[j] for j in range(p)])
        with m.If(o_fire):
            m.d.sync += [count.eq(new_count), last_idx.eq(prev_idx), any_out.eq(prev_valid),
                         x_out.eq(nxo), lo_min.eq(nlo), hi_min.eq(nhi), hi_any.eq(nhany)]
            with m.If(o.last):
                m.d.sync += [count.eq(0), any_out.eq(0), x_out.eq(0), hi_any.eq(0),
                             lo_min.eq((1 << kw) - 1), hi_min.eq((1 << kw) - 1)]
        with m.If(cfg_fire):
            m.d.sync += [seen_x.eq(0), count.eq(0), any_out.eq(0), x_out.eq(0), hi_any.eq(0),
                         lo_min.eq((1 << kw) - 1), hi_min.eq((1 << kw) - 1)]

        checking = o_fire & s1 & ok
        end = checking & o.last
        self._check(m, "s1.count", ~checking | ((new_count <= want)
                                                & (~o.last | (new_count == want))))
        self._check(m, "s1.order", ~checking | Cat(*order_ok).all())
        self._check(m, "s1.member", ~checking | Cat(*member_ok).all())
        # X not selected: every entry below X (which wins ties) is at least as large and every
        # entry above X larger
        self._check(m, "s1.topk", ~end | ~seen_x | nxo
                    | ((nlo >= key_x) & (~nhany | (nhi > key_x))))

        # ---- idle: busy falls within idle_cycles of a job's last beat (Stage I: the beat
        # marked last; Stage II: the last beat of its last vector)
        segs = Signal(unsigned(prm.count_width), name="f_segments_left")
        job_end = o_fire & o.last & (segs == 1)
        with m.If(o_fire & o.last):
            m.d.sync += segs.eq(segs - 1)
        with m.If(cfg_fire):
            m.d.sync += segs.eq(Mux(cfg.mode == SorterMode.STAGE1, 1, cfg.count))
        idle = self.idle_cycles
        since = Signal(range(idle + 2), name="f_since_last")
        after = Signal(name="f_after_last")
        with m.If(job_end):
            m.d.sync += [after.eq(1), since.eq(0)]
        with m.Elif(after & (since <= idle)):
            m.d.sync += since.eq(since + 1)
        with m.If(cfg_fire):
            m.d.sync += after.eq(0)
        self._check(m, "idle", (cfg_r == ~busy) & (busy | ~o_v)
                    & (~after | ~busy | (since < idle)))
        return m


class TopKHarness(SorterHarness):
    """The radix-select top-k engine (:class:`~hikv.hw.topk.TopK`) under the sorter's Stage I
    properties (:class:`SorterHarness`: the same ports, layouts, job, checks and mutants). It
    refuses Stage II configurations with ``error``; the Stage I job's configuration is assumed
    Stage I, as the sorter's is. Its ``busy`` is low :data:`TOPK_IDLE_CYCLES` after a job's
    last output beat."""

    block = _T
    idle_cycles = TOPK_IDLE_CYCLES

    def engine(self) -> Elaboratable:
        from .topk import make_topk

        return make_topk(self.cfg)


#: sorter properties checked on one job at full rate (bounded model checking of the whole
#: sorter is out of reach otherwise)
_SORTER_FULL_RATE = ("s1.count", "s1.order", "s1.member", "s1.topk", "idle")

_HARNESSES: dict[str, type[Harness]] = {_S: SorterHarness, _T: TopKHarness, _L: LoaderHarness,
                                        _C: ScorerHarness}


def harness(block: str, cfg: Config, *, only: str | None = None,
            mutant: str | None = None, job: SorterJob | None = None) -> Harness:
    """The harness of ``block`` built from ``cfg``, asserting ``only`` (None: every property)
    with ``mutant``'s bug injected (None: none); ``job``: the bounded Stage I job of a Stage I
    engine (:data:`STAGE1_ENGINES`: sorter, topk; :class:`SorterJob`; None: the default one)."""
    properties(block)
    if job is not None:
        if block not in STAGE1_ENGINES:
            raise ParamError(f"a bounded job (job=) is the Stage I engines' "
                             f"({', '.join(STAGE1_ENGINES)}); block {block!r} has none")
        return _HARNESSES[block](cfg, only=only, mutant=mutant, job=job)
    return _HARNESSES[block](cfg, only=only, mutant=mutant)
