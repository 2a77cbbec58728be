"""Our synthesised per-unit areas against published figures, and the published denominator.

``hikv/sim/data/published_areas.json`` holds, each with its source and node:

* per-unit areas: a comparator, an integer adder and multiplier, an fp32 multiply-add (Aladdin's
  40 nm functional units, the table Accelergy uses) and SRAM per MiB (CACTI 7 with Accelergy's
  SRAM configuration, 45 nm);
* the published accelerator area HiKV's units are measured against (``denominator``): NVDLA's
  configurations of the NVDLA Primer (estimated synthesis area at 28 nm, all memories
  included), with what the search for an attention or LLM accelerator's breakdown found.

:func:`unit_comparisons` scales each published figure to the report's node (40 nm figures to
45 nm by hwcomponents' area factor, then :func:`hikv.sim.tech.node_area_scale`; widths by
hwcomponents' rules) and sets it beside ours: the sorter's logic per compare-exchange unit
(:meth:`hikv.hw.sorter_timing.SorterTiming.comparators`), the scoring unit's
logic per multiply-accumulate (a lane does a whole ``d``-element dot product per cycle), one PE
MAC lane, and the SRAM capacity model per MiB.

:func:`denominator_shares` sets the HiKV units' area (:attr:`AcceleratorArea.hikv_m2`, the
report's) beside each published configuration scaled to the report's node,
:func:`denominator_share` picks the configuration comparable to the preset's PE array, and
:func:`published_denominator` is the record the report prints. Units: m^2 (SI).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hikv.params import Config
from hikv.sim.eda.area import AcceleratorArea, logic_area_m2, sram_area_m2
from hikv.sim.tech import REFERENCE_NM, load_data, node_area_scale

__all__ = ["PUBLISHED_FILE", "UnitComparison", "published_unit_area_m2", "unit_comparisons",
           "DenominatorShare", "published_area_at_node_m2", "denominator_shares",
           "denominator_share", "published_denominator"]

#: the data file of this module
PUBLISHED_FILE = "published_areas.json"


@dataclass(frozen=True)
class UnitComparison:
    """One unit's area: ours (synthesised, at ``tech_nm``) and the published figure scaled to
    ``tech_nm`` (m^2)."""

    unit: str
    tech_nm: int
    ours_m2: float
    published_m2: float
    published_what: str        # the published unit and how it was scaled
    source: str

    @property
    def ratio(self) -> float:
        """ours / published."""
        return self.ours_m2 / self.published_m2


def _table() -> dict[str, Any]:
    return load_data(PUBLISHED_FILE)


def published_unit_area_m2(key: str, tech_nm: int) -> float:
    """The published area of unit ``key`` (a key of the file's ``units``) at ``tech_nm``, at its
    own width."""
    tab = _table()
    u = tab["units"][key]
    area = float(u["area_m2"])
    if u["tech_nm"] == 40:
        area *= float(tab["node_scaling"]["from_40nm_to_45nm_area"])
    elif u["tech_nm"] != REFERENCE_NM:
        raise ValueError(f"published unit {key!r} at {u['tech_nm']} nm has no scaling rule")
    return area * float(node_area_scale(tech_nm))


def unit_comparisons(cfg: Config, area: AcceleratorArea) -> tuple[UnitComparison, ...]:
    """Our per-unit areas of ``cfg``'s accelerator against the published ones at its node: the
    sorter per compare-exchange unit, the scoring unit per multiply-accumulate (where the
    preset uses it), the PE array per MAC lane, SRAM per MiB."""
    from hikv.hw.sorter_timing import SorterTiming

    t = area.tech_nm
    units = _table()["units"]
    out = []

    def ours(block: str) -> float:
        return float(logic_area_m2(area.synth[block].nand2_equivalents, t))

    if "sorter" in area.synth:
        st = SorterTiming.from_params(cfg.sorter)
        w, n = st.item_width, sum(st.comparators().values())
        out.append(UnitComparison(
            f"sorter: logic per compare-exchange unit ({n} units of {w} bits)", t,
            ours("sorter") / n, published_unit_area_m2("comparator_32b", t) * w / 32,
            f"one {w}-bit comparator (32-bit comparator x {w}/32); ours also carries its "
            "share of the sorter's registers, multiplexers and control",
            units["comparator_32b"]["source"]))
    if "scorer" in area.synth:
        b, q = cfg.policy.lowbit_bits, cfg.scorer.query_bits
        d = cfg.layout.head_dim
        acc = b + q + math.ceil(math.log2(max(d, 2)))
        pub = (published_unit_area_m2("int32_mult", t) * b * q / (32 * 32)
               + published_unit_area_m2("int32_add", t) * acc / 32)
        out.append(UnitComparison(
            f"scoring unit: logic per {b} x {q}-bit MAC ({cfg.scorer.lanes} lanes x d = {d})",
            t, ours("scorer") / (cfg.scorer.lanes * d), pub,
            f"a {b} x {q}-bit multiplier (32 x 32 x {b}x{q}/1024) and a {acc}-bit adder "
            f"(32-bit x {acc}/32)", units["int32_mult"]["source"]))
    if "mac_lane" in area.synth:
        out.append(UnitComparison(
            "PE array: one MAC lane (fp16 x fp16, fp32 accumulate)", t, ours("mac_lane"),
            published_unit_area_m2("fp32_mac", t),
            "an fp32 multiplier and adder (3-stage DesignWare; fp32 x fp32, so larger than "
            "fp16 x fp16)", units["fp32_mac"]["source"]))
    out.append(UnitComparison(
        "SRAM: per MiB", t, float(sram_area_m2(2**20, t)),
        published_unit_area_m2("sram_per_mib", t),
        "CACTI 7 data array of a 1 MiB SRAM at 45 nm x node factor",
        units["sram_per_mib"]["source"]))
    return tuple(out)


@dataclass(frozen=True)
class DenominatorShare:
    """The HiKV units of one preset beside one published accelerator configuration, both at
    ``tech_nm`` (m^2)."""

    accelerator: str
    configuration: str         # e.g. "1024 MACs, 256 KB convolution buffer"
    macs: int                  # the published MAC count (NVDLA: 8-bit MACs)
    macs_16bit: float          # the same array counted in 16-bit MACs
    tech_nm: int
    published_m2: float        # the published total, scaled to tech_nm
    published_tech_nm: int
    hikv_m2: float             # HiKV's units (AcceleratorArea.hikv_m2)
    baseline_m2: float         # the kit's own baseline accelerator (AcceleratorArea.baseline_m2)
    complete: bool             # every HiKV block synthesised
    source: str

    @property
    def over_published(self) -> float:
        """HiKV's units / the published accelerator (NaN while a HiKV block is missing)."""
        return self.hikv_m2 / self.published_m2 if self.complete else math.nan

    @property
    def share(self) -> float:
        """HiKV's units / (published accelerator + HiKV's units): the fraction of the area of
        the published accelerator with HiKV's units added (NaN while a block is missing)."""
        return self.hikv_m2 / (self.published_m2 + self.hikv_m2) if self.complete else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"accelerator": self.accelerator, "configuration": self.configuration,
                "macs": self.macs, "macs_16bit": self.macs_16bit, "tech_nm": self.tech_nm,
                "published_m2": self.published_m2, "published_tech_nm": self.published_tech_nm,
                "hikv_m2": self.hikv_m2, "baseline_m2": self.baseline_m2,
                "hikv_over_published": self.over_published, "hikv_share": self.share,
                "source": self.source}


def published_area_at_node_m2(area_m2: float, from_nm: int, tech_nm: int) -> float:
    """A published area at ``from_nm`` scaled to ``tech_nm``: 40 nm by hwcomponents' factor to
    45 nm, other nodes by the area factors of ``node_scaling.json`` (45, 28, 16, 7 nm)."""
    if from_nm == 40:
        at_45 = area_m2 * float(_table()["node_scaling"]["from_40nm_to_45nm_area"])
    else:
        at_45 = area_m2 / float(node_area_scale(from_nm))
    return at_45 * float(node_area_scale(tech_nm))


def denominator_shares(area: AcceleratorArea) -> tuple[DenominatorShare, ...]:
    """HiKV's units of ``area`` (the report's :class:`AcceleratorArea`) over every configuration
    of the published denominator, scaled to ``area.tech_nm``; empty where the file has none."""
    den = _table()["denominator"]
    if not den.get("available"):
        return ()
    t0, per16 = int(den["tech_nm"]), float(den["macs_per_16bit_mac"])
    return tuple(DenominatorShare(
        accelerator=den["accelerator"],
        configuration=f"{c['macs']} MACs, {c['conv_buffer_kb']} KB convolution buffer",
        macs=int(c["macs"]), macs_16bit=c["macs"] / per16, tech_nm=area.tech_nm,
        published_m2=published_area_at_node_m2(float(c["area_m2"]), t0, area.tech_nm),
        published_tech_nm=t0, hikv_m2=area.hikv_m2, baseline_m2=area.baseline_m2,
        complete=area.complete, source=den["source"]) for c in den["configurations"])


def denominator_share(cfg: Config, area: AcceleratorArea) -> DenominatorShare | None:
    """HiKV's units over the published configuration comparable to ``cfg``'s baseline: the one
    whose MAC array, counted in 16-bit MACs, is nearest to ``cfg.accel.pe_lanes`` in ratio (the
    larger on a tie); None where the file has no denominator."""
    shares = denominator_shares(area)
    if not shares:
        return None
    lanes = cfg.accel.pe_lanes
    return min(shares, key=lambda s: (abs(math.log(s.macs_16bit / lanes)), -s.macs))


def _shares_text(den: dict[str, Any], shares: tuple[DenominatorShare, ...],
                 comparable: DenominatorShare | None) -> str:
    head = f"{den['accelerator']}, {den['what']}; {den['scope']}. Source: {den['source']}."
    if not shares:
        return head
    lines = [head, "",
             f"| {den['name']} configuration | published at {shares[0].tech_nm} nm (mm^2) | "
             "HiKV's units (mm^2) | HiKV / published | HiKV's share of published + HiKV |",
             "|---|---|---|---|---|"]
    for s in shares:
        mark = " (nearest to the PE lanes)" if s == comparable else ""
        lines.append(f"| {s.configuration}{mark} | {s.published_m2 * 1e6:.3g} | "
                     f"{s.hikv_m2 * 1e6:.3g} | {100 * s.over_published:.1f}% | "
                     f"{100 * s.share:.1f}% |")
    return "\n".join(lines)


def published_denominator(area: AcceleratorArea | None = None,
                          cfg: Config | None = None) -> dict[str, Any]:
    """The published accelerator area HiKV's units are measured against: the file's
    ``denominator`` record with ``text`` (its description, and with ``area`` a markdown table of
    :func:`denominator_shares`), ``shares`` (their dicts, with ``area``) and ``comparable``
    (:func:`denominator_share`'s dict, with ``area`` and ``cfg``; else None). ``available``
    false with the reason and what was searched where the file has none."""
    den = dict(_table()["denominator"])
    if not den.get("available"):
        return den
    shares = denominator_shares(area) if area is not None else ()
    comparable = denominator_share(cfg, area) if area is not None and cfg is not None else None
    den["text"] = _shares_text(den, shares, comparable)
    den["shares"] = [s.to_dict() for s in shares]
    den["comparable"] = comparable.to_dict() if comparable is not None else None
    return den

