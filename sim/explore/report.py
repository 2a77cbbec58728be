"""The attention-level result table of one operating point (``hikv report``).

For a preset: every method's external bytes, attention time and energy per decode step (dynamic,
and static where the areas are synthesised: :mod:`hikv.sim.cost.static_power`), the speedups of
HiKV against full KV and against each baseline with the roofline bound beside each speedup, the
area overhead of HiKV's units (sorter, loaders, scoring unit) with our per-unit areas against
published ones (:mod:`hikv.sim.eda.published`), every block's clock, and where the seed's
reference claims stand against ours. Numbers are labelled by where they come from:

* ``reference``: the seed paper's headline claims (docs/cost_model.md), not computed here;
* ``model``: this project's analytic cost model (:mod:`hikv.sim.cost.attention_model`) with the byte
  closed forms checked against the golden model, energy tables from the literature, and the
  sorter / loader cycles of the RTL's timing contracts (:class:`hikv.sim.cost.timing.RtlTiming`,
  checked against cocotb measurements);
* ``synthesised``: area from Yosys synthesis of our generated Verilog (:mod:`hikv.sim.eda.area`);
* clocks (:mod:`hikv.sim.cost.clocks`): each block's clock from the timing flow's ASIC estimate of
  our Verilog at the preset's node (when synthesis is allowed), hand-set with a source, or
  assumed (``accel.clock_hz``, not checked); every clock is printed with its source and path.

Budgets are *nominal* (the preset's budget for every method) unless an iso-accuracy operating
point file is given (:func:`load_iso_accuracy`, written by the accuracy study).

Extra sections (the serving model's) plug in through :data:`REPORT_SECTIONS`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hikv.hw.blocks import loader_instances
from hikv.hw.scorer_timing import SCORER_STAGES
from hikv.params import (
    Config,
    Method,
    MethodSpec,
    ParamError,
    from_dict,
    to_dict,
)
from hikv.presets import baseline_specs, method_specs
from hikv.report_section import ReportSection, code_version, flatten
from hikv.sim.cost.attention_model import AttentionCost, Overrides, attention_cost
from hikv.sim.cost.clocks import Clocks, accelerator_clocks, assumed_clocks
from hikv.sim.cost.timing import TimingModel, default_timing
from hikv.sim.serving.report import report_section

__all__ = [
    "REFERENCE_CLAIMS",
    "REPORT_SECTIONS",
    "ReportSection",
    "IsoAccuracy",
    "MethodRow",
    "Report",
    "code_version",
    "flatten",
    "load_iso_accuracy",
    "build_report",
]

#: The seed's headline claims (docs/cost_model.md): references, not results of this project.
REFERENCE_CLAIMS: dict[str, dict[str, Any]] = {
    "attention_speedup_vs_full": {"value": 7.95, "text": "up to 7.95x attention speedup",
                                  "conditions": "vs an uncompressed KV baseline, ~1% accuracy "
                                                "loss"},
    "attention_energy_reduction_vs_full": {"value": 0.90, "text": "90% lower attention energy",
                                           "conditions": "vs an uncompressed KV baseline"},
    "bytes_reduction_vs_sota": {"value": (1.82, 4.87),
                                "text": "1.82x to 4.87x fewer external memory accesses",
                                "conditions": "vs state-of-the-art importance-based methods at "
                                              "equal accuracy"},
    "area_share": {"value": 0.08, "text": "about 8% of system area",
                   "conditions": "dedicated sorter + loader hardware"},
}

#: What the baseline accelerator (the system the overhead is measured against) stands for.
BASELINE_SYSTEM = (
    "our assumption, not a published design: a decode-attention engine of accel.pe_lanes "
    "fp16 MAC lanes (fp32 accumulate), accel.softmax_lanes softmax lanes (exp unit + MAC "
    "lane each) and accel.sram_kv_bytes + accel.sram_q_bytes of on-chip SRAM, its PE lanes "
    "sized so full-KV decode attention is memory-bound on the preset's memory (hikv/presets.py "
    "comments); no host interface, NoC, DMA or control is counted, so the overhead is "
    "against the attention datapath alone (an upper bound on the share of a whole chip)")

#: Importance-based baselines the bytes claim is held against.
SOTA_METHODS = tuple(m for m in Method if m not in (Method.FULL, Method.HIKV))

#: Extra sections by name, appended to the Markdown and JSON in this order:
#: ``fn(cfg, report, **options) -> ReportSection``, the options from
#: ``build_report(section_options={name: {...}})``.
REPORT_SECTIONS: dict[str, Callable[..., ReportSection]] = {
    "serving": report_section,
    "serving-device": lambda cfg, rep, **kw: _device_section(cfg, rep, **kw),
}


def _device_section(cfg: Config, rep: Any, **options: Any) -> ReportSection:
    """Serving on a measured GPU (:func:`hikv.sim.serving.device_report.report_section`; that
    module builds on the serving model, so it is imported when the section is asked for)."""
    from hikv.sim.serving.device_report import report_section as device_report_section

    return device_report_section(cfg, rep, **options)


@dataclass(frozen=True)
class IsoAccuracy:
    """Iso-accuracy operating points (one MethodSpec per method family: full KV first, HiKV's
    reference point last) from the accuracy study."""

    specs: tuple[MethodSpec, ...]
    metric: str
    tolerance: float
    source: str
    context: int | None
    path: str
    unreached: tuple[str, ...] = ()    # families with points, none within tolerance
    families: tuple[str, ...] = ()     # the family label of each spec


ISO_SCHEMA = "hikv.iso_accuracy/1"


def load_iso_accuracy(path: str | Path, cfg: Config) -> IsoAccuracy:
    """Read an iso-accuracy operating-point file (JSON).

    Format (``schema`` ``"hikv.iso_accuracy/1"``)::

        {"schema": "hikv.iso_accuracy/1", "preset": "paper", "model": "smollm2-135m",
         "head_dim": 64, "context": 2048, "metric": "ppl_increase_pct", "tolerance": 1.0,
         "source": "hikv accuracy ... (command)",
         "points": [{"spec": {...MethodSpec as hikv.params.to_dict...},
                     "metric_value": 0.8, "within_tolerance": true}, ...]}

    Points are keyed by their method *family* (a point's ``family``, else its spec's label
    without the budget, :func:`hikv.model.accuracy.iso.family`), so variants of one method
    (``h2o`` and ``h2o/avg``; ThinK, a HiKV Stage II kind, beside HiKV) each get a row. Per
    family the point used is, among those ``within_tolerance``, the one with the smallest
    budget (then the fewest channels); full KV needs no point. A family whose points are all
    outside the tolerance is left out of the table and named in its notes. HiKV's reference
    row (the last one, what every ``this / HiKV`` column divides by) is the family the file
    names in ``hikv_family``; older files without that field: the HiKV family of the
    smallest-budget HiKV point within tolerance (ThinK families excepted). ``head_dim``, when
    given, must be the preset's. Errors name the field.
    """
    from hikv.io import read_json
    from hikv.model.accuracy.iso import family, is_think

    p = Path(path)
    data = read_json(p, what=f"an iso-accuracy file ({ISO_SCHEMA})")
    if not isinstance(data, dict):
        raise ParamError(f"iso-accuracy file {p}: not a JSON object (expected {ISO_SCHEMA})")
    if data.get("schema") != ISO_SCHEMA:
        raise ParamError(f"iso-accuracy file {p}: schema = {data.get('schema')!r}, expected "
                         f"{ISO_SCHEMA!r}")
    for key in ("metric", "tolerance", "points"):
        if key not in data:
            raise ParamError(f"iso-accuracy file {p}: missing field {key!r}")
    hd = data.get("head_dim")
    if hd is not None and hd != cfg.layout.head_dim:
        raise ParamError(f"iso-accuracy file {p}: head_dim = {hd} (model {data.get('model')!r}) "
                         f"but preset {cfg.name!r} has head_dim = {cfg.layout.head_dim}; use "
                         "points measured on a model of the preset's shape")
    best: dict[str, MethodSpec] = {}
    seen: set[str] = set()
    for i, pt in enumerate(data["points"]):
        if "spec" not in pt:
            raise ParamError(f"iso-accuracy file {p}: points[{i}] has no 'spec'")
        spec = from_dict(MethodSpec, pt["spec"])
        if spec.method is Method.FULL:
            continue
        fam = str(pt.get("family") or family(spec))
        seen.add(fam)
        if not pt.get("within_tolerance", False):
            continue
        cur = best.get(fam)
        if cur is None or (spec.budget, spec.channels) < (cur.budget, cur.channels):
            best[fam] = spec
    if "hikv_family" in data:
        ref = data["hikv_family"]
        if ref is not None and best.get(ref) is not None and best[ref].method is not Method.HIKV:
            raise ParamError(f"iso-accuracy file {p}: hikv_family = {ref!r} is not a HiKV "
                             "family")
    else:
        own = [(s.budget, s.channels, f) for f, s in best.items()
               if s.method is Method.HIKV and not is_think(s)]
        ref = min(own)[2] if own else None
    if ref is None or ref not in best:
        raise ParamError(f"iso-accuracy file {p}: no HiKV point within tolerance")
    order = {m: i for i, m in enumerate(Method)}
    others = sorted((f for f in best if f != ref),
                    key=lambda f: (order[best[f].method], f))
    fams = ["full", *others, ref]
    specs = [method_specs(cfg)["full"], *(best[f] for f in fams[1:])]
    unreached = tuple(sorted(seen - set(best)))
    return IsoAccuracy(specs=tuple(specs), metric=str(data["metric"]),
                       tolerance=float(data["tolerance"]), source=str(data.get("source", "")),
                       context=data.get("context"), path=str(p), unreached=unreached,
                       families=tuple(fams))


# --------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class MethodRow:
    """One method at the operating point; per decode step of the whole model (all layers and KV
    heads) unless the name says ``per_head``."""

    method: str
    label: str
    budget: int
    bytes_burst: float
    bytes_ideal: float
    resident_bytes_per_head: float
    time_s: float
    roofline_s: float
    bound: str                         # "memory" or "compute" (roofline)
    energy_j: float
    energy_parts_j: dict[str, float]
    select_cycles_per_head: float
    sort_cycles_per_head: float
    attend_cycles_per_head: float
    layer_cycles: float
    scorer_cycles_per_head: float = 0.0
    bytes_bound_s: float = math.nan
    bytes_bound_fraction: float = math.nan   # (bytes / bandwidth) / time: 1 = at the bound
    speedup_vs_full: float = math.nan
    roofline_bound_vs_full: float = math.nan
    bytes_reduction_vs_full: float = math.nan
    energy_reduction_vs_full: float = math.nan
    hikv_speedup_vs_this: float = math.nan
    hikv_roofline_bound_vs_this: float = math.nan
    hikv_bytes_reduction_vs_this: float = math.nan
    hikv_energy_reduction_vs_this: float = math.nan
    #: static energy (leakage of the hardware the method runs on x ``time_s``) and the energy
    #: with it; NaN where the areas are not synthesised (:mod:`hikv.sim.cost.static_power`)
    static_energy_j: float = math.nan
    energy_with_static_j: float = math.nan
    energy_with_static_reduction_vs_full: float = math.nan
    hikv_energy_with_static_reduction_vs_this: float = math.nan


@dataclass(frozen=True)
class Report:
    preset: str
    config: dict[str, Any]
    code_version: str
    timing_model: str
    timing_source: str
    budgets: str                       # "nominal" or "iso-accuracy (...)"
    rows: tuple[MethodRow, ...]
    area: dict[str, Any]
    claims: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]
    sections: tuple[ReportSection, ...] = ()
    context_curve: dict[str, Any] = field(default_factory=dict)
    clocks: dict[str, Any] = field(default_factory=dict)
    baseline_system: str = BASELINE_SYSTEM
    #: with iso-accuracy budgets: the nominal-budget view beside them (``rows``: label and
    #: time / energy / bytes relative to full KV; ``context_curve``); empty otherwise
    nominal: dict[str, Any] = field(default_factory=dict)
    #: where each synthesis (``area``) and timing estimate (``clocks``) came from: ``cache``,
    #: ``shipped`` or ``synthesised`` (:mod:`hikv.sim.eda.shipped`)
    provenance: dict[str, Any] = field(default_factory=dict)
    #: HiKV's Stage I engine (``sorter.kind``) and the sort blocks it builds
    #: (:mod:`hikv.sim.cost.engines`)
    engine: dict[str, Any] = field(default_factory=dict)

    def row(self, method: Method) -> MethodRow:
        """The first row of ``method``; for HiKV the reference row (the last HiKV one: ThinK,
        a HiKV Stage II kind, may have rows of its own before it)."""
        if method is Method.HIKV:
            return _hikv_row(self.rows)
        for r in self.rows:
            if r.method == method.value:
                return r
        raise KeyError(method)


def _hikv_row(rows: Sequence[MethodRow]) -> MethodRow:
    """HiKV's reference row: the last row of method ``hikv`` (:func:`load_iso_accuracy` and
    :func:`hikv.presets.baseline_specs` put it last)."""
    own = [r for r in rows if r.method == Method.HIKV.value]
    if not own:
        raise KeyError(Method.HIKV)
    return own[-1]


def _f(x: Any) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def _engine(cfg: Config) -> dict[str, Any]:
    from hikv.sim.cost.engines import describe, engine_block, sort_blocks

    return {"kind": cfg.sorter.kind.value, "stage1_block": engine_block(cfg),
            "sort_blocks": list(sort_blocks(cfg)), "text": describe(cfg)}


def _row(spec: MethodSpec, c: AttentionCost) -> MethodRow:
    return MethodRow(
        method=spec.method.value, label=spec.label, budget=spec.budget,
        bytes_burst=_f(c.bytes_burst), bytes_ideal=_f(c.bytes_ideal),
        resident_bytes_per_head=_f(c.work.bytes.resident), time_s=_f(c.time_s),
        roofline_s=_f(c.roofline_s), bound="memory" if bool(np.all(c.memory_bound))
        else "compute", energy_j=_f(c.energy_j),
        energy_parts_j={k: _f(v) for k, v in c.energy_parts_j.items()},
        select_cycles_per_head=_f(c.select_cycles), sort_cycles_per_head=_f(c.sort_cycles),
        attend_cycles_per_head=_f(c.attend_cycles), layer_cycles=_f(c.layer_cycles),
        scorer_cycles_per_head=_f(c.scorer_cycles), bytes_bound_s=_f(c.bytes_bound_s),
        bytes_bound_fraction=_f(c.bytes_bound_fraction))


def _with_cells(run: Callable[[], Any], fetch: bool) -> Any:
    """``run()``; when it needs the cell library and that is not fetched, fetch it (where
    ``fetch``) and run again. Shipped and cached results need no library."""
    from hikv.sim.eda.cells import CellsUnavailable, fetch_cells

    try:
        return run()
    except CellsUnavailable:
        if not fetch:
            raise
        fetch_cells()
        return run()


def _area_section(cfg: Config, fetch: bool, clocks: Clocks,
                  origins: dict[str, str] | None = None) -> dict[str, Any]:
    """The area section; ``origins`` receives where each synthesis result came from."""
    from hikv.sim.cost.engines import engine_area
    from hikv.sim.eda.cells import CellsUnavailable

    f_ld = clocks.hz("loader")
    try:
        ar = _with_cells(lambda: engine_area(cfg, loader_clock_hz=f_ld), fetch)
    except CellsUnavailable as e:
        return {"available": False, "reason": str(e)}
    if origins is not None:
        origins.update({k: v.origin for k, v in ar.synth.items()})
    items = [{"part": "baseline", "name": i.name, "count": i.count,
              "unit_area_m2": i.unit_area_m2, "area_m2": i.area_m2,
              "nand2_equivalents_per_unit": i.nand2_equivalents, "origin": i.origin,
              "sram_bytes_per_unit": i.sram_bytes}
             for i in ar.baseline]
    items += [{"part": "hikv", "name": i.name, "count": i.count, "unit_area_m2": i.unit_area_m2,
               "area_m2": i.area_m2, "nand2_equivalents_per_unit": i.nand2_equivalents,
               "origin": i.origin, "sram_bytes_per_unit": i.sram_bytes} for i in ar.hikv]
    from hikv.sim.cost.static_power import accelerator_leakage
    from hikv.sim.eda.published import published_denominator, unit_comparisons

    published = {"units": [{"unit": u.unit, "ours_m2": u.ours_m2,
                            "published_m2": u.published_m2, "ours_over_published": u.ratio,
                            "published_what": u.published_what, "source": u.source}
                           for u in unit_comparisons(cfg, ar)],
                 "denominator": published_denominator(ar, cfg)}
    return {"available": True, "tech_nm": ar.tech_nm, "items": items,
            "static_power": accelerator_leakage(ar).to_dict(), "published": published,
            "baseline_m2": ar.baseline_m2, "hikv_m2": ar.hikv_m2,
            "missing_blocks": list(ar.missing), "overhead_vs_baseline": ar.overhead,
            "share_of_system": ar.share, "loader_instances": loader_instances(cfg, clock_hz=f_ld),
            "loader_clock_hz": f_ld,
            "synthesis": {k: {"top": v.top, "cells": v.cell_count, "flipflops": v.flipflops,
                              "area_sky130_m2": v.area_m2,
                              "sequential_area_sky130_m2": v.sequential_area_m2,
                              "nand2_equivalents": v.nand2_equivalents, "yosys": v.yosys,
                              "sram_macros": [dataclasses.asdict(m) for m in v.macros]}
                          for k, v in ar.synth.items()}}


def _engine_section(cfg: Config, spec: MethodSpec, timing: TimingModel, clocks: Clocks,
                    fetch: bool, full_time_s: float) -> dict[str, Any]:
    """HiKV with each Stage I engine (``sorter.kind``, :mod:`hikv.sim.cost.engines`): the
    sort blocks, HiKV's area and share of the system, and the step's sort cycles per head,
    time, energy and speedup, each engine at its clocks (the engine not in use timed by the
    timing flow where ``clocks`` are, :func:`hikv.sim.cost.clocks.engine_clocks`)."""
    from hikv.sim.cost.clocks import engine_clocks
    from hikv.sim.cost.engines import (
        KINDS,
        describe,
        engine_shares,
        favoured_kind,
        with_kind,
    )
    from hikv.sim.eda.cells import CellsUnavailable

    own = cfg.sorter.kind.value
    try:
        shares = _with_cells(lambda: engine_shares(cfg, loader_clock_hz=clocks.hz("loader")),
                             fetch)
    except CellsUnavailable as e:
        return {"available": False, "reason": str(e)}
    out: dict[str, Any] = {"available": True, "in_use": own, "kinds": {}}
    for k in KINDS:
        c = with_kind(cfg, k)
        ck = clocks if k == own else _with_cells(lambda k=k: engine_clocks(clocks, cfg, k), fetch)
        cost = attention_cost(spec, c, timing=timing, clocks=ck)
        blk = shares[k]["engine"]
        out["kinds"][k] = {**shares[k], "text": describe(c),
                           "stage1_clock_hz": float(ck.hz(blk)),
                           "sort_cycles_per_head": _f(cost.sort_cycles),
                           "time_s": _f(cost.time_s), "energy_j": _f(cost.energy_j),
                           "sorter_energy_j": _f(cost.energy_parts_j["sorter"]),
                           "speedup_vs_full": full_time_s / _f(cost.time_s),
                           "bottleneck": str(np.asarray(cost.bottleneck).reshape(-1)[0])}
    out["favoured"], out["favoured_why"] = favoured_kind(out["kinds"])
    return out


def build_report(cfg: Config, *, iso: IsoAccuracy | None = None, area: bool = True,
                 fetch_cells: bool = True, timing: TimingModel | None = None,
                 sections: bool | tuple[str, ...] = False,
                 section_options: dict[str, dict[str, Any]] | None = None,
                 resynthesise: bool = False) -> Report:
    """Evaluate every method of the operating point and assemble the report (no file I/O
    except the synthesis cache and, with ``fetch_cells``, the cell download where a result is
    neither cached nor shipped).

    ``sections``: True for every section of :data:`REPORT_SECTIONS` (the serving simulation
    takes a minute or more), or the names to add; ``section_options`` their keyword options.
    ``resynthesise``: run the synthesis and timing flows even where the user cache or the
    shipped results hold them (:func:`hikv.sim.eda.shipped.resynthesis`). The report's
    ``provenance`` says where each area and clock came from.
    """
    from hikv.sim.eda.shipped import resynthesis

    timing = timing or default_timing()
    with resynthesis(resynthesise):
        clocks = _clocks(cfg, area, fetch_cells)
    specs = list(iso.specs) if iso else baseline_specs(cfg)
    with np.errstate(all="ignore"):           # a degenerate input is refused just below
        costs = [(s, attention_cost(s, cfg, timing=timing, clocks=clocks)) for s in specs]
    rows = [_row(s, c) for s, c in costs]
    full = next(r for r in rows if r.method == Method.FULL.value)
    hikv = _hikv_row(rows)
    out = []
    for r in rows:
        out.append(dataclasses.replace(
            r,
            speedup_vs_full=full.time_s / r.time_s,
            roofline_bound_vs_full=full.roofline_s / r.roofline_s,
            bytes_reduction_vs_full=full.bytes_burst / r.bytes_burst,
            energy_reduction_vs_full=1.0 - r.energy_j / full.energy_j,
            hikv_speedup_vs_this=r.time_s / hikv.time_s,
            hikv_roofline_bound_vs_this=r.roofline_s / hikv.roofline_s,
            hikv_bytes_reduction_vs_this=r.bytes_burst / hikv.bytes_burst,
            hikv_energy_reduction_vs_this=1.0 - hikv.energy_j / r.energy_j))
    rows = out
    _check_finite_rows(cfg, rows)
    hikv = _hikv_row(rows)
    origins: dict[str, str] = {}
    with resynthesis(resynthesise):
        area_d = _area_section(cfg, fetch_cells, clocks, origins) if area else {
            "available": False, "reason": "not requested"}
        if area_d.get("available"):
            hspec = next(s for s, _ in costs if s.label == hikv.label)
            area_d["engines"] = _engine_section(cfg, hspec, timing, clocks, fetch_cells,
                                                full.time_s)
    rows = _with_static(rows, area_d)
    hikv = _hikv_row(rows)
    provenance = {"area": origins,
                  "clocks": {b: c.provenance for b, c in clocks.blocks.items() if c.provenance}}
    claims = _claims(rows, hikv, area_d, cfg, timing, iso)
    notes = _notes(cfg, rows, timing, iso, specs, clocks)
    curve = _context_curve(cfg, specs, timing, clocks)
    rep = Report(preset=cfg.name, config=to_dict(cfg), code_version=code_version(),
                 timing_model=timing.name, timing_source=timing.source,
                 budgets=(f"iso-accuracy ({iso.metric} within {iso.tolerance}; {iso.path})"
                          if iso else "nominal (every method at the preset's budget B)"),
                 rows=tuple(rows), area=area_d, claims=tuple(claims), notes=tuple(notes),
                 context_curve=curve, clocks=clocks.to_dict(),
                 nominal=_nominal_view(cfg, timing, clocks) if iso else {},
                 provenance=provenance, engine=_engine(cfg))
    names = tuple(REPORT_SECTIONS) if sections is True else tuple(sections or ())
    if names:
        extra = []
        for name in names:
            if name not in REPORT_SECTIONS:
                raise ParamError(f"report section {name!r} is not one of "
                                 f"{sorted(REPORT_SECTIONS)}")
            fn = REPORT_SECTIONS[name]
            extra.append(fn(cfg, rep, **(section_options or {}).get(name, {})))
        rep = dataclasses.replace(rep, sections=tuple(extra))
    return rep


def _with_static(rows: list[MethodRow], area: dict[str, Any]) -> list[MethodRow]:
    """``rows`` with their static energy (leakage of the hardware each method runs on x its step
    time, :mod:`hikv.sim.cost.static_power`) and the energy and ratios with it; unchanged (NaN)
    where the area section is not available."""
    sp = area.get("static_power") if area.get("available") else None
    if not sp:
        return rows

    def leak(r: MethodRow) -> float:
        return sp["baseline_w"] + (sp["hikv_w"] if r.method == Method.HIKV.value else 0.0)

    with_static = [dataclasses.replace(r, static_energy_j=leak(r) * r.time_s,
                                       energy_with_static_j=r.energy_j + leak(r) * r.time_s)
                   for r in rows]
    full = next(r for r in with_static if r.method == Method.FULL.value)
    hikv = _hikv_row(with_static)
    return [dataclasses.replace(
        r, energy_with_static_reduction_vs_full=1.0 - r.energy_with_static_j
        / full.energy_with_static_j,
        hikv_energy_with_static_reduction_vs_this=1.0 - hikv.energy_with_static_j
        / r.energy_with_static_j) for r in with_static]


#: The fields of a report row that are measurements: each must be finite.
FINITE_FIELDS = ("bytes_burst", "bytes_ideal", "time_s", "roofline_s", "energy_j",
                 "speedup_vs_full", "roofline_bound_vs_full", "bytes_reduction_vs_full",
                 "energy_reduction_vs_full", "hikv_speedup_vs_this")


def _check_finite_rows(cfg: Config, rows: list[MethodRow]) -> None:
    """Refuse a degenerate configuration (an infinite time, a NaN ratio, a MAC/byte balance that
    overflows) instead of writing it as a result: :class:`~hikv.io.NonFiniteError` naming the
    row, the field and the accelerator parameters that set its scale."""
    from hikv.io import NonFiniteError

    a = cfg.accel
    scale = (f"accel.clock_hz = {a.clock_hz:g}, accel.mem_bandwidth_bytes_per_s = "
             f"{a.mem_bandwidth_bytes_per_s:g}, accel.pe_lanes = {a.pe_lanes}")
    balance = a.pe_lanes * a.clock_hz / a.mem_bandwidth_bytes_per_s
    if not math.isfinite(balance):
        raise NonFiniteError(f"report: the accelerator's MAC/byte balance is {balance} ({scale}): "
                             "use realistic accel values (--set)")
    for r in rows:
        for f in FINITE_FIELDS:
            v = getattr(r, f)
            if not math.isfinite(v):
                raise NonFiniteError(f"report: row {r.label}: {f} = {v} is not a finite number "
                                     f"({scale}): the configuration is degenerate; use "
                                     "realistic values (--set)")


def _clocks(cfg: Config, synthesis: bool, fetch: bool) -> Clocks:
    """Every block's clock: the timing flow's estimate when synthesis is allowed (and the cell
    library is there), else assumed (:mod:`hikv.sim.cost.clocks`)."""
    if not synthesis:
        return accelerator_clocks(cfg, check=False)
    from hikv.sim.eda.cells import CellsUnavailable

    try:
        return _with_cells(lambda: accelerator_clocks(cfg), fetch)
    except CellsUnavailable as e:
        return assumed_clocks(cfg, f"no cell library for the timing flow: {e}")


def _nominal_view(cfg: Config, timing: TimingModel, clocks: Clocks) -> dict[str, Any]:
    """Every method at the preset's budget (the report's rows without ``--iso``), relative to
    full KV, and its context curve: drawn beside an iso-accuracy report's own view."""
    specs = baseline_specs(cfg)
    costs = [attention_cost(s, cfg, timing=timing, clocks=clocks) for s in specs]
    full = costs[0]
    rows = [{"label": s.label, "time": c.time_s / full.time_s,
             "energy": c.energy_j / full.energy_j, "bytes": c.bytes_burst / full.bytes_burst}
            for s, c in zip(specs, costs, strict=True)]
    return {"rows": rows, "context_curve": _context_curve(cfg, specs, timing, clocks)}


def _context_curve(cfg: Config, specs: list[MethodSpec], timing: TimingModel,
                   clocks: Clocks | None = None) -> dict[str, Any]:
    """Speedup vs full KV over context lengths (powers of two up to 4x the preset's)."""
    hi = max(cfg.context * 4, 2 * cfg.policy.budget)
    ns = np.unique(np.geomspace(max(cfg.policy.budget // 2, 16), hi, 12).astype(int))
    ov = Overrides(context=ns)
    full = attention_cost(specs[0], cfg, ov, timing=timing, clocks=clocks)
    curves = {}
    for s in specs[1:]:
        c = attention_cost(s, cfg, ov, timing=timing, clocks=clocks)
        curves[s.label] = (full.time_s / c.time_s).tolist()
    return {"context": ns.tolist(), "speedup_vs_full": curves}


def _claims(rows: list[MethodRow], hikv: MethodRow, area: dict[str, Any], cfg: Config,
            timing: TimingModel, iso: IsoAccuracy | None) -> list[dict[str, Any]]:
    cond = (f"preset {cfg.name}, N = {cfg.context}, B = {cfg.policy.budget}, "
            f"{cfg.model.name}, {cfg.accel.memory.value} "
            f"{cfg.accel.mem_bandwidth_bytes_per_s / 1e9:g} GB/s, {cfg.accel.pe_lanes} PE lanes,"
            f" {cfg.accel.tech_nm} nm; sorter/loader timing: {timing.name}")
    sota = [r for r in rows if r.method in {m.value for m in SOTA_METHODS}]
    red = [r.hikv_bytes_reduction_vs_this for r in sota]
    budgets = "iso-accuracy" if iso else "nominal budgets (no accuracy matching)"
    ref = REFERENCE_CLAIMS
    share = area.get("share_of_system", math.nan) if area.get("available") else math.nan
    if area.get("available") and area.get("missing_blocks"):
        area_txt = ("pending: " + ", ".join(area["missing_blocks"]) +
                    " not registered yet (no RTL to synthesise)")
    elif area.get("available"):
        area_txt = (f"{', '.join(_units(area))}: {100 * share:.1f}% of system "
                    f"({100 * area['overhead_vs_baseline']:.1f}% over the baseline), "
                    f"{area['tech_nm']} nm")
        from hikv.sim.cost.engines import ENGINE_NAMES

        eng = area.get("engines", {})
        if eng.get("available"):
            alt = [(k, v) for k, v in eng["kinds"].items() if k != cfg.sorter.kind.value]
            area_txt += "; " + ", ".join(f"with the {ENGINE_NAMES[k]} (sorter.kind = {k}): "
                                         f"{100 * v['share_of_system']:.1f}%" for k, v in alt)
    else:
        area_txt = "unavailable: " + str(area.get("reason", ""))
    return [
        {"claim": "attention speedup vs full KV", "reference": ref[
            "attention_speedup_vs_full"]["text"],
         "ours": f"{hikv.speedup_vs_full:.2f}x (roofline bound {hikv.roofline_bound_vs_full:.2f}x"
                 f", {hikv.bound}-bound)", "ours_value": hikv.speedup_vs_full,
         "origin": "model", "conditions": cond},
        {"claim": "attention energy vs full KV",
         "reference": ref["attention_energy_reduction_vs_full"]["text"],
         "ours": f"{-100 * hikv.energy_reduction_vs_full:+.1f}%",
         "ours_value": hikv.energy_reduction_vs_full, "origin": "model", "conditions": cond},
        {"claim": "attention energy vs full KV, static included",
         "reference": ref["attention_energy_reduction_vs_full"]["text"],
         "ours": (f"{-100 * hikv.energy_with_static_reduction_vs_full:+.1f}% (dynamic + "
                  "leakage x step time)" if math.isfinite(hikv.energy_with_static_reduction_vs_full)
                  else "unavailable: static energy needs the synthesised areas"),
         "ours_value": hikv.energy_with_static_reduction_vs_full,
         "origin": "model + synthesised" if area.get("available") else "unavailable",
         "conditions": cond + "; leakage: hikv/sim/data/leakage.json"},
        {"claim": "external bytes vs importance-based baselines",
         "reference": ref["bytes_reduction_vs_sota"]["text"],
         "ours": (f"baseline bytes / HiKV bytes = {min(red):.2f} to {max(red):.2f} (below 1: "
                  "HiKV reads more; " + ", ".join(
                      f"{r.label} {r.hikv_bytes_reduction_vs_this:.2f}" for r in sota) + ")"),
         "ours_value": [min(red), max(red)], "origin": "model", "conditions": cond + "; "
                                                                               + budgets},
        {"claim": "HiKV units' area", "reference": ref["area_share"]["text"],
         "ours": area_txt, "ours_value": share,
         "origin": "synthesised" if area.get("available") else "unavailable",
         "conditions": "Yosys -> sky130_fd_sc_hd -> NAND2 eq. -> FreePDK45 x node factor; "
                       "SRAM 3.5 mm^2/MiB at 45 nm x node factor; loaders replicated to the "
                       "memory bandwidth, baseline DMA not subtracted; baseline: "
                       + BASELINE_SYSTEM},
    ]


def _units(area: dict[str, Any]) -> list[str]:
    """The HiKV units of the area section (sorter or top-k engine, loader, scorer), or the
    default two."""
    names = [i["name"] for i in area.get("items", ()) if i["part"] == "hikv"
             and "." not in i["name"]]
    return names or ["sorter", "loader"]


def _sorter_jobs_beyond_limits(cfg: Config, specs: list[MethodSpec]) -> list[str]:
    """The methods whose sorter jobs exceed the preset's sorter (``max_n``, ``max_k``,
    ``max_vec``), with the job."""
    from hikv.sim.cost.attention_model import step_work
    from hikv.sim.cost.timing import RtlTiming

    out = []
    for s in specs:
        for job in step_work(s, cfg).sorts:
            ok = RtlTiming.fits(cfg.sorter, job.mode, n=job.n, k=job.k, d=job.d)
            if not bool(np.all(ok)):
                what = (f"top-{int(np.max(job.k))} of {int(np.max(job.n))}"
                        if job.mode == "stage1" else f"vectors of {int(np.max(job.d))}")
                out.append(f"{s.label} ({job.mode} {what})")
    return out


def _notes(cfg: Config, rows: list[MethodRow], timing: TimingModel, iso: IsoAccuracy | None,
           specs: list[MethodSpec], clocks: Clocks | None = None) -> list[str]:
    a = cfg.accel
    clocks = clocks or assumed_clocks(cfg)
    f_pe, f_ld = clocks.reference_hz, clocks.hz("loader")
    notes = []
    full = next(r for r in rows if r.method == Method.FULL.value)
    inten = (cfg.model.group * 2 * cfg.layout.head_dim) / (2 * cfg.layout.row_bytes)
    balance = a.pe_lanes * f_pe / a.mem_bandwidth_bytes_per_s
    notes.append(f"Full-KV decode attention does {inten:.2f} MAC per KV byte (GQA group "
                 f"{cfg.model.group}); this accelerator balances at {balance:.2f} MAC/byte "
                 f"({a.pe_lanes} lanes x {f_pe / 1e9:.3g} GHz / "
                 f"{a.mem_bandwidth_bytes_per_s / 1e9:g} GB/s), so it is "
                 f"{full.bound}-bound: speedups follow the "
                 f"{'bytes' if full.bound == 'memory' else 'MAC'} ratio.")
    if clocks.assumed:
        notes.append("Clocks of " + ", ".join(clocks.assumed) + f": assumed at "
                     f"{a.clock_hz / 1e9:g} GHz (accel.clock_hz), not checked against the RTL "
                     "(synthesis not allowed or not possible; run without --no-area for the "
                     "timing flow's estimate).")
    pol = ("each phase at its own block's clock, cycles counted in the PE array's"
           if clocks.policy == "per_block" else
           f"one clock for the whole accelerator, the slowest block's "
           f"({clocks.single_hz / 1e6:.0f} MHz)")
    notes.append(f"Clock policy {clocks.policy!r}: {pol}.")
    notes.append(f"Sorter, loader and scoring-unit cycles: {timing.source}; scoring unit: "
                 f"hikv.hw.scorer_timing (ceil(n / L) + {SCORER_STAGES} per job, jobs back to "
                 "back). Loaders: "
                 f"{loader_instances(cfg, clock_hz=f_ld)} instances at {f_ld / 1e6:.0f} MHz, "
                 "enough that their steady rate (beat_bytes x min(1, outstanding x burst beats / "
                 "(latency + burst beats)) per loader cycle) takes the memory bandwidth.")
    if any(r.scorer_cycles_per_head > 0 for r in rows):
        notes.append(f"Query-aware HiKV's low-bit scores run on the scoring unit "
                     f"({cfg.scorer.lanes} lanes, {cfg.scorer.query_bits}-bit query; one job "
                     f"per query head of the GQA group of {cfg.model.group}), streamed as the "
                     "metadata arrives; the group's softmax-sum runs on the softmax lanes; "
                     "energy per integer MAC: hikv.sim.cost.energy.scorer_mac_energy_j (Horowitz "
                     "int8 multiply scaled by b x q / 64, derived).")
    big = _sorter_jobs_beyond_limits(cfg, specs)
    if big:
        notes.append("Sorter jobs larger than the built sorter accepts (max_n = "
                     f"{cfg.sorter.max_n}, max_k = {cfg.sorter.max_k}) are priced on the same "
                     "sorter built large enough for them: " + "; ".join(big) + ".")
    if iso is None:
        notes.append("Budgets are nominal: every method keeps the preset's budget B; no "
                     "iso-accuracy operating-point file was given (--iso).")
    else:
        if iso.context is not None and iso.context != cfg.context:
            notes.append(f"The iso-accuracy points were measured at context {iso.context}, "
                         f"the table is evaluated at {cfg.context} with the same budgets.")
        if iso.unreached:
            notes.append("Left out: no tested budget of " + ", ".join(iso.unreached) +
                         f" kept {iso.metric} within {iso.tolerance:g} ({iso.path}).")
    from hikv.sim.cost.engines import describe

    notes.append(f"Stage I engine: {describe(cfg)} (hikv.sim.cost.engines).")
    notes.append("Baselines use the same sorter and loader hardware (generous to them; a "
                 "baseline's Stage II jobs run on the merge sorter with either engine).")
    notes.append("Energy per step is dynamic (energy per action; no clock tree) in the first "
                 "table; static energy (leakage x step time) is added beside it where the areas "
                 "are synthesised; DRAM energy is not scaled with the logic node.")
    return notes
