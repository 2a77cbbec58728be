"""Our synthesised per-unit areas against published figures, and the published denominator.

``hikv/sim/data/published_areas.json`` holds, each with its source and node:

* per-unit areas: a comparator, an integer adder and multiplier, an fp32 multiply-add (Aladdin's
  40 nm functional units, the table Accelergy uses) and SRAM per MiB (CACTI 7 with Accelergy's
  SRAM configuration, 45 nm);
* the search for a published attention or LLM accelerator's area breakdown to measure HiKV's
  units against: ``available`` false with the reason where none was found.

:func:`unit_comparisons` scales each published figure to the report's node (40 nm figures to
45 nm by hwcomponents' area factor, then :func:`hikv.sim.tech.node_area_scale`; widths by
hwcomponents' rules) and sets it beside ours: the sorter's logic per compare-exchange unit
(:meth:`hikv.hw.sorter_timing.SorterTiming.comparators`), the scoring unit's
logic per multiply-accumulate (a lane does a whole ``d``-element dot product per cycle), one PE
MAC lane, and the SRAM capacity model per MiB. Units: m^2 (SI).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hikv.params import Config
from hikv.sim.eda.area import AcceleratorArea, logic_area_m2, sram_area_m2
from hikv.sim.tech import REFERENCE_NM, load_data, node_area_scale

__all__ = ["PUBLISHED_FILE", "UnitComparison", "published_unit_area_m2", "unit_comparisons",
           "published_denominator"]

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


def published_denominator() -> dict[str, Any]:
    """The published accelerator area HiKV's units are measured against: the file's
    ``denominator`` record (``available`` false with the reason and what was searched, where no
    breakdown was found)."""
    return dict(_table()["denominator"])
