"""Technology data, below the EDA flows (:mod:`hikv.sim.eda`) and the cost model
(:mod:`hikv.sim.cost`): the tables shipped in ``hikv/sim/data`` and the scaling of energy and
area from 45 nm to other nodes.

* :func:`load_data` reads a shipped JSON table: ``energy_actions_45nm.json``,
  ``dram_energy.json`` (the energy model), ``node_scaling.json`` (below),
  ``area_reference.json`` (NAND2 and SRAM area), ``sky130_hd_cells.json``,
  ``sky130_delays.json`` and ``delay_scaling.json`` (the area and timing flows);
* :func:`node_energy_scale` and :func:`node_area_scale` are the multipliers from 45 nm to 28 /
  16 / 7 nm of ``node_scaling.json`` (Stillmaker and Baas 2017, as used by Accelergy's
  hwcomponents); :func:`node_scaling` is that table, parsed.

Standard library and numpy; every scaling function accepts numpy arrays as well as scalars.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from hikv.params import ParamError

__all__ = ["REFERENCE_NM", "load_data", "NodeScaling", "node_scaling", "node_energy_scale",
           "node_area_scale"]

ArrayLike = Any  # int, float or numpy array

#: the node the scaling tables start from (nm)
REFERENCE_NM = 45


def load_data(name: str) -> dict[str, Any]:
    """A JSON table shipped in ``hikv/sim/data`` (read once per process)."""
    return _read_data(name)


@cache
def _read_data(name: str) -> dict[str, Any]:
    text = resources.files("hikv.sim").joinpath("data", name).read_text()
    return json.loads(text)


@dataclass(frozen=True)
class NodeScaling:
    """Energy and area multipliers from 45 nm (``node -> factor``, 1.0 at 45 nm)."""

    energy: dict[int, float]
    area: dict[int, float]
    source: str


@cache
def node_scaling() -> NodeScaling:
    """``node_scaling.json``, parsed (cached)."""
    node = load_data("node_scaling.json")
    if node["reference_nm"] != REFERENCE_NM:
        raise ParamError(f"node scaling must be referenced to {REFERENCE_NM} nm")
    return NodeScaling(energy={int(k): float(v["energy"]) for k, v in node["nodes"].items()},
                       area={int(k): float(v["area"]) for k, v in node["nodes"].items()},
                       source=node["source"])


def _node_lookup(table: dict[int, float], tech_nm: ArrayLike, what: str) -> ArrayLike:
    t = np.asarray(tech_nm)
    known = np.array(sorted(table))
    if not np.isin(t, known).all():
        bad = sorted(set(np.atleast_1d(t).tolist()) - set(known.tolist()))
        raise ParamError(f"tech_nm = {bad} has no {what} scaling factor: allowed "
                         f"{known.tolist()}")
    vals = np.array([table[int(k)] for k in known])
    out = vals[np.searchsorted(known, t)]
    return float(out) if out.ndim == 0 else out


def node_energy_scale(tech_nm: ArrayLike) -> ArrayLike:
    """On-chip energy multiplier from 45 nm to ``tech_nm`` (1.0 at 45 nm)."""
    return _node_lookup(node_scaling().energy, tech_nm, "energy")


def node_area_scale(tech_nm: ArrayLike) -> ArrayLike:
    """Area multiplier from 45 nm to ``tech_nm`` (1.0 at 45 nm)."""
    return _node_lookup(node_scaling().area, tech_nm, "area")
