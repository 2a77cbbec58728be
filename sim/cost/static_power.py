"""Static power of the accelerator and the static energy of a decode step.

A decode step's static energy is the leakage power of the hardware the method runs on times the
step's time (:func:`static_step_energy_j`). Every method runs on the baseline system (PE lanes,
softmax lanes, K/V and query SRAMs); HiKV also on its units (sorter, loaders, scoring unit where
the preset uses it, pipeline SRAMs), which leak the whole step. The baselines' selections use
the same sorter in the time model (generous to them) but are charged the baseline system only.

Leakage of one area row (:class:`hikv.sim.eda.area.AreaItem`) is its logic area x leakage per
square metre at the node, or its SRAM capacity x leakage per bit
(:mod:`hikv.sim.cost.energy`, ``leakage.json``). Areas come from synthesis
(:func:`hikv.sim.eda.area.accelerator_area`): without it there is no static number.
Units: W, J, s, m^2 (SI).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hikv.params import Method
from hikv.sim.cost import energy as E
from hikv.sim.eda.area import AcceleratorArea, AreaItem

__all__ = ["LeakagePower", "item_leakage_w", "accelerator_leakage", "method_leakage_w",
           "static_step_energy_j"]


@dataclass(frozen=True)
class LeakagePower:
    """Leakage of the accelerator at ``tech_nm`` (W): the baseline system and HiKV's units, each
    split into logic and SRAM; HiKV's are NaN while one of its blocks is not registered."""

    tech_nm: int
    baseline_logic_w: float
    baseline_sram_w: float
    hikv_logic_w: float
    hikv_sram_w: float

    @property
    def baseline_w(self) -> float:
        return self.baseline_logic_w + self.baseline_sram_w

    @property
    def hikv_w(self) -> float:
        return self.hikv_logic_w + self.hikv_sram_w

    def to_dict(self) -> dict[str, Any]:
        return {"tech_nm": self.tech_nm, "baseline_w": self.baseline_w,
                "baseline_logic_w": self.baseline_logic_w,
                "baseline_sram_w": self.baseline_sram_w, "hikv_w": self.hikv_w,
                "hikv_logic_w": self.hikv_logic_w, "hikv_sram_w": self.hikv_sram_w,
                "logic_w_per_m2": float(E.logic_leakage_w_per_m2(self.tech_nm)),
                "sources": dict(E.load_leakage().sources)}


def item_leakage_w(item: AreaItem, tech_nm: int) -> tuple[float, float]:
    """(logic, SRAM) leakage of all ``item.count`` units of one area row: an SRAM row
    (``sram_bytes > 0``) by its capacity, any other by its area."""
    if item.sram_bytes > 0:
        return 0.0, item.count * float(E.sram_leakage_w(item.sram_bytes, tech_nm))
    return float(E.logic_leakage_w(item.area_m2, tech_nm)), 0.0


def accelerator_leakage(area: AcceleratorArea) -> LeakagePower:
    """Leakage of the baseline system and of HiKV's units of ``area``."""
    t = area.tech_nm

    def split(items: tuple[AreaItem, ...]) -> tuple[float, float]:
        parts = [item_leakage_w(i, t) for i in items]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)

    bl, bs = split(area.baseline)
    hl, hs = split(area.hikv) if area.complete else (math.nan, math.nan)
    return LeakagePower(tech_nm=t, baseline_logic_w=bl, baseline_sram_w=bs, hikv_logic_w=hl,
                        hikv_sram_w=hs)


def method_leakage_w(leak: LeakagePower, method: Method | str) -> float:
    """Leakage of the hardware ``method`` runs on: the baseline system, plus HiKV's units for
    HiKV (every row of method ``hikv``, ThinK's included)."""
    m = method.value if isinstance(method, Method) else str(method)
    return leak.baseline_w + (leak.hikv_w if m == Method.HIKV.value else 0.0)


def static_step_energy_j(leak: LeakagePower, method: Method | str, time_s: Any) -> Any:
    """Static energy of one decode step of ``method`` lasting ``time_s``."""
    return E.static_energy_j(method_leakage_w(leak, method), time_s)
