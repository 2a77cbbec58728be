"""Decode-attention time and energy per step on the baseline accelerator, with and without HiKV.

**Machine** (:class:`~hikv.params.AcceleratorParams`): ``pe_lanes`` MAC lanes (q.k and p.v),
``softmax_lanes`` softmax lanes, an on-chip K/V buffer (``sram_kv_bytes``) and query buffer, an
external memory of ``mem_bandwidth_bytes_per_s`` and ``mem_latency_s``; HiKV adds one sorter,
:func:`~hikv.hw.blocks.loader_instances` loaders (enough that their steady-state rate, request
round trips included, takes the memory's bandwidth) and, for Stage I scored from low-bit keys,
the low-bit scoring unit. Each block runs at its own clock (:mod:`hikv.sim.cost.clocks`; cycles
below are counted in the PE array's clock, a block's own cycles scaled by ``f_pe / f_block``).
All
methods run on this machine; the baselines' selections use the same sorter (generous to them:
without it their top-k would run on the PE lanes or a host).

**Work per (layer, KV head) and step** (``G`` query heads share a KV head; ``n`` cached tokens):

* *select* phase (only for methods that choose per step what to load): read the scoring
  metadata (Quest/HiKV page bounds, HiKV low-bit keys, SparQ's K channels, Double Sparsity's
  labels), compute approximate scores on the PE lanes (``G x pages x 2d`` MACs for page bounds,
  ``G x n x r`` otherwise; a softmax for SparQ / DS), HiKV's low-bit scores on the scoring
  unit (``G`` jobs of ``n`` tokens, :class:`hikv.hw.scorer_timing.ScorerTiming`, streamed with
  the metadata; the group's softmax-sum on the softmax lanes when ``G > 1``);
* *sort*: the sorter jobs (Stage I top-k, Stage II vectors; HiKV's evicting compaction every
  ``Δ`` steps is amortised). Stage I runs on the engine ``sorter.kind`` names
  (:mod:`hikv.sim.cost.engines`): the merge sorter (:mod:`hikv.hw.sorter_timing`) or the
  radix-select top-k engine (:mod:`hikv.hw.topk_timing`, at its own clock where ``clocks``
  lists ``topk``); Stage II on the merge sorter, except HiKV's Stage II jobs on ``radix``,
  which run on the Stage II selection block (:mod:`hikv.hw.stage2_timing`, block ``stage2``,
  at its own clock where ``clocks`` lists it); the engines' cycles of a head add up (one sort
  unit per head, a bound where both run);
* *attend* phase: the loader reads the selected K/V; ``G x tokens x (d_k + d)`` MACs and
  ``G x tokens`` exponentials (online softmax, FlashDecoding style).

**Overlap, and why.** Within a phase memory transfer, loader, MACs and softmax overlap (tokens
are consumed as they stream in; online softmax needs no second pass), so a phase takes the
maximum of ``bytes / bandwidth + latency``, the loader's cycles (one instance's share of the
phase's bytes, requests, masked records and channel-page tokens, by the RTL timing model),
``MACs / pe_lanes`` and ``exps / softmax_lanes``, plus a drain (the last token's MACs and the
pipeline depth). Within one KV head the phases are serial: the sort needs all scores, and the
loads need the sort's result. Across the KV heads of a layer the work is independent, so the
sorter (its own resource) works on one head while the memory and PE lanes serve another: with
``H`` heads per layer, ``select`` ``a1``, sort ``b`` and attend ``a2`` cycles per head,
``T_serial = max(H (a1 + a2), a1 + H b + a2)`` (datapath-bound or sorter-bound, the two bounds
of this two-resource pipeline; ``schedule="serial"``). The default ``schedule="pipelined"``
runs the heads of a layer through the units as a pipeline (:func:`pipelined_layer_cycles`):
each unit (memory channel, loader pool, scoring unit, PE and softmax lanes, sorter) busy its
cycles per head, the memory latency paid once per layer (the next head's metadata read while
a head attends), bounded by the slowest unit plus the pipeline's fill and drain and never above
``T_serial``; it needs the double-buffered score and index SRAMs of :func:`pipeline_buffers`,
priced in area and energy. Layers are serial (layer l+1's query needs layer l's output).

**Roofline bound**: ``max(bytes / bandwidth, MACs / (pe_lanes x clock))`` per step (PE-lane
MACs), without latencies, the sorter, the scoring unit or the softmax lanes; the ratio of two
methods' roofline times is the speedup's physical bound (the bytes ratio when both are
memory-bound).

**Energy per step**: DRAM (burst bytes x J/byte of the memory type), SRAM (ideal bytes written
by the loader and read by the PE lanes, priced by buffer size), MACs, softmax elements, the
sorter's comparator evaluations (the RTL's per-job count, each comparing ``item_width`` bits;
on the top-k engine its key and digit comparisons, :class:`hikv.hw.topk_timing.TopKTiming`;
on the Stage II block its radix steps, each a popcount of ``d`` bits priced as ``ceil(d / 32)``
integer adds of ``min(d, 32)`` bits),
loader requests and beats, the scoring unit's integer MACs (:mod:`hikv.sim.cost.energy`). Writes of
the current token's K/V are not counted (one token per step, the same for every method).

Everything is vectorised: any numeric override may be a numpy array and the results broadcast.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hikv.hw.blocks import loader_instances
from hikv.hw.scorer_timing import ScorerTiming
from hikv.hw.sorter_timing import SorterTiming
from hikv.hw.stage2_timing import stage2_block_cycles, stage2_radix_steps
from hikv.hw.topk_timing import TopKTiming
from hikv.model.refs.baseline_pe import EXP_LATENCY, MAC_LATENCY
from hikv.params import (
    Config,
    MemoryType,
    Method,
    MethodSpec,
    ParamError,
    ScorerParams,
)
from hikv.sim.cost import energy as E
from hikv.sim.cost.bursts import Geometry
from hikv.sim.cost.clocks import Clocks, assumed_clocks
from hikv.sim.cost.closed_form import closed_form, step_bytes
from hikv.sim.cost.closed_form_base import SortJob, StepAccount
from hikv.sim.cost.engines import KINDS, hikv_stage2
from hikv.sim.cost.timing import TimingModel, default_timing, sorter_for_job, unique_apply
from hikv.sim.eda.area import pipeline_buffers
from hikv.sim.tech import node_energy_scale

__all__ = ["Overrides", "SortJob", "StepWork", "AttentionCost", "step_work", "attention_cost",
           "scorer_cycles", "SCHEDULES", "pipeline_buffers", "pipelined_layer_cycles",
           "pipeline_bounds"]

ArrayLike = Any
#: layer schedules of :func:`attention_cost`
SCHEDULES = ("pipelined", "serial")


@dataclass(frozen=True)
class Overrides:
    """Numeric parameters that may vary per design point (numpy arrays broadcast together).

    ``None`` takes the value from the :class:`~hikv.params.Config`. ``context`` is the prompt
    ``P`` and ``step`` the decode step ``j >= 1`` (default 1): the step attends ``P + j``
    tokens, the current one included (the serving model prices each sequence state this way).
    ``keep_v`` / ``keep_k`` are HiKV's Stage II keeps (``r``); ``memory`` is a MemoryType or an
    array of their values. ``loader_instances`` replaces the instance rule
    (:func:`~hikv.hw.blocks.loader_instances`: enough loaders for the bandwidth) by a count
    (fewer loaders make the attend and select phases loader-bound). ``sorter_kind``: the
    Stage I engine, ``"merge"`` or ``"radix"`` (``SorterParams.kind``; an array of them for
    sweeps).
    """

    context: ArrayLike | None = None
    step: ArrayLike | None = None
    budget: ArrayLike | None = None
    keep_k: ArrayLike | None = None
    keep_v: ArrayLike | None = None
    head_dim: ArrayLike | None = None
    pe_lanes: ArrayLike | None = None
    softmax_lanes: ArrayLike | None = None
    sorter_lanes: ArrayLike | None = None
    scorer_lanes: ArrayLike | None = None
    mem_bandwidth_bytes_per_s: ArrayLike | None = None
    memory: Any = None
    tech_nm: ArrayLike | None = None
    loader_instances: ArrayLike | None = None
    sorter_kind: ArrayLike | None = None


@dataclass(frozen=True)
class StepWork:
    """What one decode step does for one (layer, KV head)."""

    bytes: StepAccount
    select_bytes: ArrayLike       # burst bytes read before the selection is known
    select_requests: ArrayLike
    score_macs: ArrayLike
    score_exps: ArrayLike
    attended: ArrayLike           # tokens attended (cached tokens read + the current one)
    qk_dims: ArrayLike            # K elements per token in q.k
    attend_macs: ArrayLike
    attend_exps: ArrayLike
    sorts: tuple[SortJob, ...] = ()
    masked_records: ArrayLike = 0     # attend: Stage II records the loaders expand
    page_tokens: ArrayLike = 0        # attend: retained tokens read from channel pages
    scorer_tokens: ArrayLike = 0      # select on the low-bit scoring unit: tokens per query


def step_work(spec: MethodSpec, cfg: Config, ov: Overrides | None = None) -> StepWork:
    """Bytes, MACs, exponentials and sorter jobs of one step (see the module docstring), from
    the method's closed form (:data:`hikv.sim.cost.closed_form.CLOSED_FORMS`)."""
    ov = ov or Overrides()
    prompt = np.asarray(cfg.context if ov.context is None else ov.context)
    n = prompt if ov.step is None else prompt + np.asarray(ov.step) - 1
    d = np.asarray(cfg.layout.head_dim if ov.head_dim is None else ov.head_dim)
    B = np.asarray(spec.budget if ov.budget is None else ov.budget)
    g = Geometry.of(cfg.layout, cfg.loader, head_dim=d)
    sb = step_bytes(spec, g, n, budget=ov.budget, keep_k=ov.keep_k, keep_v=ov.keep_v,
                    prompt=None if ov.step is None else prompt)
    G = cfg.model.group
    zero = np.zeros_like(sb.burst)
    w = closed_form(spec).work(g, n, B, sb, G, keep_k=ov.keep_k, keep_v=ov.keep_v)
    qk = (d if w.qk_dims is None else w.qk_dims) + zero
    attended = sb.tokens + 1
    # the closed form scores n cached tokens per query head (score_macs = G n d); on the
    # scoring unit those are its jobs' tokens
    on_scorer = spec.method is Method.HIKV and spec.hikv is not None and _lowbit_qa(spec.hikv)
    scorer_tokens = np.where(np.asarray(w.score_macs) > 0, n, 0) + zero if on_scorer else zero
    return StepWork(bytes=sb, select_bytes=w.select_bytes + zero,
                    select_requests=w.select_requests + zero,
                    score_macs=w.score_macs + zero, score_exps=w.score_exps + zero,
                    attended=attended, qk_dims=qk, attend_macs=G * attended * (qk + d),
                    attend_exps=G * attended, sorts=w.sorts,
                    masked_records=w.masked_records + zero, page_tokens=w.page_tokens + zero,
                    scorer_tokens=scorer_tokens)


def _lowbit_qa(policy: Any) -> bool:
    from hikv.params import Stage1Scorer, Stage1Variant

    return (policy.stage1 is Stage1Variant.QUERY_AWARE
            and policy.scorer is Stage1Scorer.LOWBIT_KEYS)


@dataclass(frozen=True)
class AttentionCost:
    """Cost of one decode step (all layers and KV heads) of one method; arrays broadcast.

    Cycles are per (layer, KV head) unless named ``_layer``, counted in the *reference* clock
    (the PE array's, :attr:`hikv.sim.cost.clocks.Clocks.reference_hz`): a block at another clock
    has its own cycles scaled by ``reference / own``. ``time_s`` and ``energy_j`` are per
    decode step of the whole model. ``macs`` are the PE lanes' (``scorer_macs`` the scoring
    unit's integer MACs); ``bytes_bound_s`` is the bytes roofline ``bytes / bandwidth``.
    """

    label: str
    work: StepWork
    select_cycles: ArrayLike
    sort_cycles: ArrayLike
    attend_cycles: ArrayLike
    layer_cycles: ArrayLike
    time_s: ArrayLike
    roofline_s: ArrayLike
    memory_bound: ArrayLike           # roofline: bytes term >= MAC term
    bytes_burst: ArrayLike            # per step, all layers and heads
    bytes_ideal: ArrayLike
    macs: ArrayLike
    energy_parts_j: dict[str, ArrayLike] = field(default_factory=dict)
    timing: str = ""
    kv_heads: int = 1
    scorer_cycles: ArrayLike = 0.0    # per (layer, KV head), reference cycles (in select)
    scorer_macs: ArrayLike = 0.0
    bytes_bound_s: ArrayLike = 0.0
    clocks: Clocks | None = None
    schedule: str = "pipelined"
    serial_layer_cycles: ArrayLike = 0.0   # the serial schedule's layer (== layer if serial)
    busy_cycles: dict[str, ArrayLike] = field(default_factory=dict)  # per head, per unit

    bound_cycles: dict[str, ArrayLike] = field(default_factory=dict)  # per layer, per unit

    @property
    def bottleneck(self) -> ArrayLike:
        """The bound that sets the pipelined layer time (a unit of :attr:`busy_cycles`,
        ``"chain"`` for one head's phases, ``"serial"`` where the serial schedule is shorter;
        ``""`` for the serial schedule)."""
        if not self.bound_cycles:
            return ""
        names = [*self.bound_cycles, "serial"]
        vals = [*self.bound_cycles.values(), np.asarray(self.serial_layer_cycles) * 0.0]
        arr = np.stack(np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in vals)))
        top = np.asarray(names)[np.argmax(arr, axis=0)]
        out = np.where(np.asarray(self.layer_cycles) < arr.max(axis=0), "serial", top)
        return str(out) if out.ndim == 0 else out

    @property
    def energy_j(self) -> ArrayLike:
        return sum(self.energy_parts_j.values())

    @property
    def sorter_exposed_cycles(self) -> ArrayLike:
        """Layer cycles of the serial schedule beyond its datapath bound (sorter time not
        hidden), per layer."""
        return self.serial_layer_cycles - self.kv_heads * (self.select_cycles
                                                           + self.attend_cycles)

    @property
    def bytes_bound_fraction(self) -> ArrayLike:
        """``bytes / bandwidth`` over the modelled time: 1 = at the bytes roofline."""
        return self.bytes_bound_s / self.time_s


def scorer_cycles(params: ScorerParams, tokens: ArrayLike, jobs: int,
                  lanes: ArrayLike | None = None) -> ArrayLike:
    """Cycles of ``jobs`` back-to-back scoring jobs of ``tokens`` tokens each on the scoring
    unit (:class:`hikv.hw.scorer_timing.ScorerTiming`: the first job's ``cycles``, each further
    one its ``throughput_cycles``); 0 where ``tokens`` is 0. ``lanes`` overrides
    ``params.lanes`` (an array for sweeps)."""
    lanes = params.lanes if lanes is None else lanes

    def one(n: int, lane: int) -> float:
        if n <= 0:
            return 0.0
        t = ScorerTiming(dataclasses.replace(params, lanes=lane))
        return float(t.cycles(n) + (jobs - 1) * t.throughput_cycles(n))

    return unique_apply(one, tokens, lanes)


def attention_cost(spec: MethodSpec, cfg: Config, ov: Overrides | None = None, *,
                   timing: TimingModel | None = None, clocks: Clocks | None = None,
                   schedule: str = "pipelined") -> AttentionCost:
    """Time and energy of one decode step of ``spec`` on the accelerator of ``cfg``.

    ``clocks``: every block's clock (:func:`hikv.sim.cost.clocks.accelerator_clocks`); default
    :func:`hikv.sim.cost.clocks.assumed_clocks` (hand-set clocks, else ``accel.clock_hz``, no
    synthesis). ``schedule``: ``"pipelined"`` (default; the KV heads of a layer pipelined over
    the units, :func:`pipelined_layer_cycles`, with the double-buffered score and index SRAMs
    of :func:`pipeline_buffers` priced) or ``"serial"`` (the phases of each head serial, only
    the sorter overlapped across heads: the model before the pipeline)."""
    if schedule not in SCHEDULES:
        raise ParamError(f"schedule = {schedule!r} is not one of {SCHEDULES}")
    ov = ov or Overrides()
    _check_overrides(cfg, ov)
    timing = timing or default_timing()
    clocks = clocks or assumed_clocks(cfg)
    a, lay = cfg.accel, cfg.layout
    clock = clocks.reference_hz
    f_ld, f_so, f_sc = clocks.hz("loader"), clocks.hz("sorter"), clocks.hz("scorer")
    f_tk = clocks.hz("topk") if "topk" in clocks.blocks else f_so
    f_s2 = clocks.hz("stage2") if "stage2" in clocks.blocks else f_so
    bw = np.asarray(a.mem_bandwidth_bytes_per_s if ov.mem_bandwidth_bytes_per_s is None
                    else ov.mem_bandwidth_bytes_per_s, dtype=float)
    pe = np.asarray(a.pe_lanes if ov.pe_lanes is None else ov.pe_lanes)
    sm = np.asarray(a.softmax_lanes if ov.softmax_lanes is None else ov.softmax_lanes)
    tech = np.asarray(a.tech_nm if ov.tech_nm is None else ov.tech_nm)
    mem = a.memory if ov.memory is None else ov.memory
    sorter = cfg.sorter
    w = step_work(spec, cfg, ov)
    sb = w.bytes
    G = cfg.model.group
    lat = a.mem_latency_s * clock
    bw_cyc = bw / clock
    # the loaders run at their own clock: their latency in their cycles, their count from
    # their rate at that clock (loader_instances), their cycles scaled to the reference clock
    lat_ld = a.mem_latency_s * f_ld
    inst = (loader_instances(cfg, bw, clock_hz=f_ld) if ov.loader_instances is None
            else np.asarray(ov.loader_instances))
    r_ld, r_so, r_sc = clock / f_ld, clock / f_so, clock / f_sc

    def loader(bytes_: ArrayLike, req: ArrayLike, records: ArrayLike = 0,
               page_tokens: ArrayLike = 0) -> ArrayLike:
        # one instance's share; the bursts of a phase spread evenly over the instances
        share = lambda x: np.ceil(np.asarray(x, dtype=float) / inst)  # noqa: E731
        return timing.loader_cycles(cfg.loader, lay, bytes=np.asarray(bytes_) / inst,
                                    requests=share(req), mem_latency_cycles=lat_ld,
                                    records=share(records),
                                    page_tokens=share(page_tokens)) * r_ld

    def phase(bytes_: ArrayLike, req: ArrayLike, macs: ArrayLike, exps: ArrayLike,
              records: ArrayLike = 0, page_tokens: ArrayLike = 0) -> ArrayLike:
        memt = np.where(np.asarray(bytes_) > 0, np.asarray(bytes_) / bw_cyc + lat, 0.0)
        return np.maximum.reduce(np.broadcast_arrays(
            memt, loader(bytes_, req, records, page_tokens), np.ceil(macs / pe),
            np.ceil(exps / sm)))

    # select: the low-bit scores of query-aware HiKV run on the scoring unit (one job of n
    # tokens per query head of the group, streamed as the metadata arrives); with one query
    # head the sorter takes its keys directly, with G > 1 the group's softmax-sum (the golden
    # model's selection score) runs on the softmax lanes
    on_sc = np.asarray(w.scorer_tokens) > 0
    sc_macs = np.where(on_sc, w.score_macs, 0.0)
    pe_score_macs = np.where(on_sc, 0.0, w.score_macs)
    score_exps = np.where(on_sc & (G == 1), 0.0, w.score_exps)
    sc_cyc = scorer_cycles(cfg.scorer, w.scorer_tokens, G, ov.scorer_lanes) * r_sc
    sel = np.maximum(phase(w.select_bytes, w.select_requests, pe_score_macs, score_exps),
                     sc_cyc)
    attend_bytes = sb.burst - w.select_bytes
    attend_req = np.maximum(sb.requests - w.select_requests, 0)
    d = np.asarray(lay.head_dim if ov.head_dim is None else ov.head_dim)
    drain = np.ceil(G * (w.qk_dims + d) / pe) + MAC_LATENCY + EXP_LATENCY
    att = phase(attend_bytes, attend_req, w.attend_macs, w.attend_exps, w.masked_records,
                w.page_tokens) + drain
    if ov.sorter_lanes is not None:
        sorter_p = [dataclasses.replace(sorter, lanes=int(x)) for x in
                    np.unique(np.asarray(ov.sorter_lanes))]
    else:
        sorter_p = [sorter]
    sort_so = np.zeros_like(att)
    sort_tk = np.zeros_like(att)
    compares = np.zeros_like(att)
    tk_compares = np.zeros_like(att)
    tk_digits = np.zeros_like(att)
    sort_s2 = np.zeros_like(att)
    s2_energy = np.zeros_like(att)
    H = cfg.model.kv_heads
    radix = np.asarray(cfg.sorter.kind.value if ov.sorter_kind is None
                       else ov.sorter_kind) == "radix"
    # HiKV's Stage II jobs run on the Stage II block beside the top-k engine; a baseline's
    # stay on the merge sorter (engines.sort_blocks)
    s2_hikv = spec.method is Method.HIKV and spec.hikv is not None and hikv_stage2(spec.hikv)
    for job in w.sorts:
        per = job.per_step / H if job.per_layer else job.per_step
        c, q = _sorter_eval(timing, sorter_p, ov.sorter_lanes, job)
        if job.mode == "stage1" and radix.any():
            ct, qt, qd = _topk_eval(sorter_p, ov.sorter_lanes, job)
            sort_tk = sort_tk + np.where(radix, ct, 0.0) * per
            tk_compares = tk_compares + np.where(radix, qt, 0.0) * per
            tk_digits = tk_digits + np.where(radix, qd, 0.0) * per
            c, q = np.where(radix, 0.0, c), np.where(radix, 0.0, q)
        if job.mode == "stage2" and s2_hikv and radix.any():
            c2, e2 = _stage2_eval(sorter_p, ov.sorter_lanes, job, tech)
            sort_s2 = sort_s2 + np.where(radix, c2, 0.0) * per
            s2_energy = s2_energy + np.where(radix, e2, 0.0) * per
            c, q = np.where(radix, 0.0, c), np.where(radix, 0.0, q)
        sort_so = sort_so + c * per
        compares = compares + q * per
    sort = sort_so * r_so + sort_tk * (clock / f_tk) + sort_s2 * (clock / f_s2)
    L = cfg.model.layers
    serial = np.maximum(H * (sel + att), np.where(sort > 0, sel + H * sort + att, 0.0))
    if schedule == "serial":
        layer = serial
        busy: dict[str, ArrayLike] = {}
        bounds: dict[str, ArrayLike] = {}
    else:
        def one_job(bytes_: ArrayLike, req: ArrayLike, records: ArrayLike = 0,
                    page_tokens: ArrayLike = 0) -> ArrayLike:
            # a whole phase as one job on one loader instance (its latency included)
            return timing.loader_cycles(cfg.loader, lay, bytes=np.asarray(bytes_),
                                        requests=req, mem_latency_cycles=lat_ld,
                                        records=records, page_tokens=page_tokens) * r_ld

        busy = {
            "memory": (np.asarray(w.select_bytes) + attend_bytes) / bw_cyc,
            "loaders": (one_job(w.select_bytes, w.select_requests)
                        + one_job(attend_bytes, attend_req, w.masked_records, w.page_tokens)
                        ) / inst,
            "scorer": sc_cyc,
            "pe_lanes": np.ceil(pe_score_macs / pe) + np.ceil(w.attend_macs / pe),
            "softmax": np.ceil(score_exps / sm) + np.ceil(w.attend_exps / sm),
            "sorter": sort,
        }
        layer = pipelined_layer_cycles(H, sel, sort, att, busy, lat, drain, serial)
        bounds = pipeline_bounds(H, sel, sort, att, busy, lat, drain)
    time_s = L * layer / clock
    units = L * H
    bytes_burst = units * sb.burst
    bytes_ideal = units * sb.ideal
    macs = units * (pe_score_macs + w.attend_macs)
    roof_mem = bytes_burst / bw
    roof_pe = macs / (pe * clock)
    eb = lay.elem_bytes
    q_reads = units * G * d * eb * (1 + (np.asarray(w.select_bytes) > 0))
    if schedule == "pipelined":
        buf = pipeline_buffers(cfg)
        sw, iw = cfg.sorter.key_width / 8, cfg.sorter.index_width / 8
        keys = sum(np.asarray(j.n, dtype=float) * j.per_step for j in w.sorts
                   if j.mode == "stage1")
        picks = sum(np.asarray(j.k, dtype=float) * j.per_step for j in w.sorts
                    if j.mode == "stage1")
        buf_j = (E.sram_energy_j(units * keys * sw, units * keys * sw, buf["score"], tech)
                 + E.sram_energy_j(units * picks * iw, units * picks * iw, buf["index"], tech))
    else:
        buf_j = 0.0
    parts = {
        "dram": E.dram_energy_j(bytes_burst, mem) if isinstance(mem, MemoryType | str)
        else bytes_burst * _dram_per_byte_v(mem),
        "sram": E.sram_energy_j(bytes_ideal, bytes_ideal, a.sram_kv_bytes, tech)
        + E.sram_energy_j(0, q_reads, a.sram_q_bytes, tech) + buf_j,
        "mac": E.mac_energy_j(macs, tech),
        "softmax": E.softmax_energy_j(units * (score_exps + w.attend_exps), tech),
        "sorter": E.sorter_energy_j(units * compares,
                                    SorterTiming.from_params(sorter).item_width, tech)
        + E.sorter_energy_j(units * tk_compares, sorter.key_width, tech)
        + E.sorter_energy_j(units * tk_digits, TopKTiming.from_params(sorter).digit_bits, tech)
        + units * s2_energy,
        "loader": E.loader_energy_j(units * sb.requests,
                                    np.ceil(bytes_burst / cfg.loader.beat_bytes), tech),
        "scorer": E.scorer_energy_j(units * sc_macs, units * G * np.asarray(w.scorer_tokens),
                                    _lowbit_bits(spec), cfg.scorer.query_bits,
                                    spec.hikv.scored_channels(d) if spec.hikv else d, tech),
    }
    shape = np.broadcast(time_s, parts["dram"], parts["sram"]).shape
    parts = {k: np.broadcast_to(np.asarray(v, dtype=float), shape) for k, v in parts.items()}
    res = AttentionCost(
        label=spec.label, work=w, select_cycles=sel, sort_cycles=sort, attend_cycles=att,
        layer_cycles=layer, time_s=time_s, roofline_s=np.maximum(roof_mem, roof_pe),
        memory_bound=roof_mem >= roof_pe, bytes_burst=bytes_burst, bytes_ideal=bytes_ideal,
        macs=macs, energy_parts_j=parts, timing=timing.name, kv_heads=H,
        scorer_cycles=sc_cyc, scorer_macs=units * sc_macs, bytes_bound_s=roof_mem,
        clocks=clocks, schedule=schedule, serial_layer_cycles=serial, busy_cycles=busy,
        bound_cycles=bounds)
    return res


def pipelined_layer_cycles(heads: int, sel: ArrayLike, sort: ArrayLike, att: ArrayLike,
                           busy: dict[str, ArrayLike], latency: ArrayLike, drain: ArrayLike,
                           serial: ArrayLike) -> ArrayLike:
    """Cycles of one layer with its ``heads`` KV heads pipelined over the units.

    Each unit ``u`` (memory channel, loader pool, scoring unit, PE lanes, softmax lanes,
    sorter) is busy ``busy[u]`` cycles per head; a layer takes at least ``heads x busy[u]``
    plus the time before the unit can start on the first head and after it ends the last:

    * memory channel: ``latency + H busy + drain`` (the latency once: every later read's
      addresses are known before the channel frees: metadata at the layer's start, a head's
      K/V when its sort ends, while the channel serves the next head's metadata);
    * loader pool: ``H busy + drain`` (``busy`` = each phase as one job on one loader, its
      latency included, over the instances: a loader runs one job at a time, but the
      instances run different jobs at once);
    * scoring unit: ``H busy + sort + att`` (the last head's sort and attend follow it);
    * PE and softmax lanes: ``H busy + drain``;
    * sorter: ``sel + H sort + att`` (as in the serial schedule);
    * one head's chain ``sel + sort + att`` (its phases depend on each other).

    The layer time is the largest of these bounds (the bottleneck unit kept busy once the
    pipeline is full: an estimate that assumes the buffers of :func:`pipeline_buffers` let the
    units run ahead), and never more than ``serial`` (that schedule stays available). Units
    with no work (busy 0) give no bound.
    """
    bounds = pipeline_bounds(heads, sel, sort, att, busy, latency, drain)
    return np.minimum(serial, np.maximum.reduce(np.broadcast_arrays(*bounds.values())))


def pipeline_bounds(heads: int, sel: ArrayLike, sort: ArrayLike, att: ArrayLike,
                    busy: dict[str, ArrayLike], latency: ArrayLike, drain: ArrayLike
                    ) -> dict[str, ArrayLike]:
    """The per-unit layer bounds of :func:`pipelined_layer_cycles` (and ``"chain"``, one
    head's phases); 0 for a unit with no work."""
    H = heads
    b = {k: np.asarray(v, dtype=float) for k, v in busy.items()}
    has = lambda x: x > 0  # noqa: E731
    return {
        "chain": np.asarray(sel + sort + att, dtype=float),
        "memory": np.where(has(b["memory"]), latency + H * b["memory"] + drain, 0.0),
        "loaders": np.where(has(b["loaders"]), H * b["loaders"] + drain, 0.0),
        "scorer": np.where(has(b["scorer"]), H * b["scorer"] + sort + att, 0.0),
        "pe_lanes": np.where(has(b["pe_lanes"]), H * b["pe_lanes"] + drain, 0.0),
        "softmax": np.where(has(b["softmax"]), H * b["softmax"] + drain, 0.0),
        "sorter": np.where(has(b["sorter"]), sel + H * b["sorter"] + att, 0.0),
    }


def _lowbit_bits(spec: MethodSpec) -> int:
    return spec.hikv.lowbit_bits if spec.hikv is not None else 4


def _dram_per_byte_v(mem: ArrayLike) -> ArrayLike:
    arr = np.asarray(mem)
    vals = {m.value: E.dram_energy_j_per_byte(m) for m in MemoryType}
    out = np.vectorize(lambda x: vals[x.value if isinstance(x, MemoryType) else str(x)],
                       otypes=[float])(arr)
    return out


def _sorter_eval(timing: TimingModel, params: list, lanes: ArrayLike | None, job: SortJob
                 ) -> tuple[ArrayLike, ArrayLike]:
    kw = dict(n=job.n, k=job.k, d=job.d, count=job.count)
    if lanes is None:
        p = params[0]
        return (timing.sorter_cycles(p, job.mode, **kw),
                timing.sorter_compares(p, job.mode, **kw))
    lanes = np.asarray(lanes)
    cyc = 0.0
    cmp = 0.0
    for p in params:
        sel = lanes == p.lanes
        cyc = cyc + np.where(sel, timing.sorter_cycles(p, job.mode, **kw), 0.0)
        cmp = cmp + np.where(sel, timing.sorter_compares(p, job.mode, **kw), 0.0)
    return cyc, cmp


def stage2_step_energy_j(d: ArrayLike, tech_nm: ArrayLike) -> ArrayLike:
    """Energy of one radix step of the Stage II block: a popcount of ``d`` bits, priced as
    ``ceil(d / 32)`` integer adds of ``min(d, 32)`` bits (:func:`hikv.sim.cost.energy.
    sorter_energy_j`; registers and multiplexers not priced, as for the sorter)."""
    d = np.asarray(d, dtype=float)
    return E.sorter_energy_j(np.ceil(d / 32), np.minimum(d, 32), tech_nm)


def _stage2_eval(params: list, lanes: ArrayLike | None, job: SortJob, tech: ArrayLike
                 ) -> tuple[ArrayLike, ArrayLike]:
    """(cycles, energy) of a Stage II job on the Stage II selection block
    (:func:`hikv.hw.stage2_timing.stage2_block_cycles`: a job of another ``d`` than the built
    ``head_dim`` on a block built for it), the block's lanes the sorter's."""
    def one(p: Any) -> tuple[Any, Any]:
        cyc = unique_apply(lambda d, c: float(stage2_block_cycles(p, d=d, count=c)),
                           job.d, job.count)
        steps = unique_apply(lambda d, c: float(stage2_radix_steps(p, d=d, count=c)),
                             job.d, job.count)
        return cyc, np.asarray(steps) * stage2_step_energy_j(job.d, tech)

    if lanes is None:
        return one(params[0])
    lanes = np.asarray(lanes)
    cyc, en = 0.0, 0.0
    for p in params:
        sel = lanes == p.lanes
        c, e = one(p)
        cyc, en = cyc + np.where(sel, c, 0.0), en + np.where(sel, e, 0.0)
    return cyc, en


def _topk_eval(params: list, lanes: ArrayLike | None, job: SortJob
               ) -> tuple[ArrayLike, ArrayLike, ArrayLike]:
    """(cycles, key comparisons, digit comparisons) of a Stage I job on the top-k engine
    (:class:`hikv.hw.topk_timing.TopKTiming`; a job beyond the built ``max_n`` / ``max_k`` on
    an engine built for it, :func:`hikv.sim.cost.timing.sorter_for_job`)."""
    def one(p: Any, what: str) -> Any:
        def f(n: int, k: int) -> float:
            if n <= 0 or k <= 0:
                return 0.0
            t = TopKTiming.from_params(sorter_for_job(p, n=n, k=k))
            return float(getattr(t, what)(n, k))

        return unique_apply(f, job.n, job.k)

    whats = ("stage1_cycles", "stage1_compares", "stage1_digit_compares")
    if lanes is None:
        return tuple(one(params[0], w) for w in whats)  # type: ignore[return-value]
    lanes = np.asarray(lanes)
    out = [0.0, 0.0, 0.0]
    for p in params:
        sel = lanes == p.lanes
        out = [o + np.where(sel, one(p, w), 0.0) for o, w in zip(out, whats, strict=True)]
    return out[0], out[1], out[2]


def _check_overrides(cfg: Config, ov: Overrides) -> None:
    if ov.sorter_kind is not None:
        bad = sorted(set(np.asarray(ov.sorter_kind).reshape(-1).tolist()) - set(KINDS))
        if bad:
            raise ParamError(f"sorter_kind = {bad} is not one of {list(KINDS)}")
    if ov.keep_v is not None and ov.head_dim is not None:
        if (np.asarray(ov.keep_v) > np.asarray(ov.head_dim)).any():
            raise ParamError("keep_v (r) must be <= head_dim (d) at every design point")
    if ov.tech_nm is not None:
        node_energy_scale(ov.tech_nm)
    if ov.scorer_lanes is not None:
        for x in np.unique(np.asarray(ov.scorer_lanes)):
            ScorerParams(lanes=int(x), query_bits=cfg.scorer.query_bits)
    if ov.loader_instances is not None and (np.asarray(ov.loader_instances) < 1).any():
        raise ParamError("loader_instances must be >= 1 at every design point")
    if ov.context is not None and (np.asarray(ov.context) < 1).any():
        raise ParamError("context (N) must be >= 1 at every design point")
    if ov.step is not None and (np.asarray(ov.step) < 1).any():
        raise ParamError("step (decode step j) must be >= 1 at every design point")
