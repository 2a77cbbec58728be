"""Energy per action and one energy function per hardware component.

Energy = action counts x energy per action (the Accelergy / hwcomponents approach). The tables
are data files in ``hikv/sim/data`` (read by :func:`hikv.sim.tech.load_data`) with their source
and technology node:

* ``energy_actions_45nm.json``: arithmetic and SRAM reads at 45 nm (Horowitz, ISSCC 2014);
* ``dram_energy.json``: external memory, joules per bit by memory type (Accelergy's CACTI table);
* ``node_scaling.json``: energy (and area) multipliers from 45 nm to 28 / 16 / 7 nm
  (Stillmaker and Baas 2017, as used by Accelergy's hwcomponents; :mod:`hikv.sim.tech`).

* ``leakage.json``: static power, leakage per square metre of logic (Aladdin's 40 nm
  functional units, the table Accelergy uses) and per bit of SRAM (CACTI 7 with Accelergy's SRAM
  configuration), each with its source, node and corner.

All energies are joules, powers watts, capacities bytes, areas square metres (SI without
prefixes). Every function accepts numpy arrays as well as scalars (they broadcast), so the sweep
evaluates many design points at once. On-chip energies scale with the node; DRAM energy does not
(it is an off-chip interface). Energy per action is dynamic; static energy is leakage power x
time (:func:`logic_leakage_w`, :func:`sram_leakage_w`, :func:`static_energy_j`): a
component's leakage scales with the node like its energy per action (hwcomponents'
``tech_node_leak``), so leakage per square metre of logic scales by the node's energy factor over
its area factor. Clock-tree energy is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from hikv.params import MemoryType, ParamError
from hikv.sim.tech import (
    REFERENCE_NM,
    load_data,
    node_area_scale,
    node_energy_scale,
    node_scaling,
)

__all__ = [
    "EnergyTables",
    "load_tables",
    "action_energy_j",
    "sram_access_energy_j",
    "dram_energy_j_per_byte",
    "MAC_ACTIONS",
    "SOFTMAX_ACTIONS",
    "mac_energy_j",
    "softmax_energy_j",
    "sram_energy_j",
    "dram_energy_j",
    "sorter_energy_j",
    "loader_energy_j",
    "SCORER_TOKEN_ACTIONS",
    "scorer_energy_j",
    "scorer_mac_energy_j",
    "LeakageTables",
    "load_leakage",
    "logic_leakage_w_per_m2",
    "logic_leakage_w",
    "sram_leakage_w_per_bit",
    "sram_leakage_w",
    "static_energy_j",
]

ArrayLike = Any  # int, float or numpy array

#: One MAC lane operation (q.k or p.v): fp16 x fp16 product, accumulated in fp32.
MAC_ACTIONS: dict[str, int] = {"fp16_mult": 1, "fp32_add": 1}

#: One softmax element on our softmax lane (hw/baseline_pe.py): subtract the running max and
#: accumulate the sum (2 fp32 adds), exp as 2^(x log2 e) with two 16-bit fixed-point multiplies
#: (by log2 e and the table interpolation), and the final scaling by 1/sum (one fp32 mult).
SOFTMAX_ACTIONS: dict[str, int] = {"fp32_add": 2, "int16_mult": 2, "fp32_mult": 1}


#: Per token and query on the low-bit scoring unit (hw/scorer.py stage 2 and 3): the exact
#: score ``S = step * D + lo * Q`` (two multiplies of an 11-bit mantissa by a 16- to 24-bit
#: integer, priced as int32 multiplies, and one int32 add); the fp16 rounding is not priced.
SCORER_TOKEN_ACTIONS: dict[str, int] = {"int32_mult": 2, "int32_add": 1}


@dataclass(frozen=True)
class EnergyTables:
    """The energy tables, parsed. Energies in joules."""

    action_j_45nm: dict[str, float]
    sram_points: tuple[tuple[float, float], ...]   # (capacity_bytes, joules per 64-bit read)
    dram_j_per_bit: dict[str, float]
    node_energy: dict[int, float]
    node_area: dict[int, float]
    sources: dict[str, str]


@lru_cache(maxsize=1)
def load_tables() -> EnergyTables:
    """Parse the data files (cached); the node factors are :func:`hikv.sim.tech.node_scaling`'s."""
    act = load_data("energy_actions_45nm.json")
    dram = load_data("dram_energy.json")
    if act["tech_nm"] != REFERENCE_NM:
        raise ParamError(f"energy tables must be referenced to {REFERENCE_NM} nm")
    node = node_scaling()
    pts = tuple(sorted((float(p["capacity_bytes"]), float(p["energy_j"]))
                       for p in act["sram_read_64b"]["points"]))
    return EnergyTables(
        action_j_45nm={k: float(v["energy_j"]) for k, v in act["actions"].items()},
        sram_points=pts,
        dram_j_per_bit={k: float(v["energy_j_per_bit"]) for k, v in dram["memories"].items()},
        node_energy=dict(node.energy),
        node_area=dict(node.area),
        sources={"actions": act["source"], "dram": dram["source"], "node": node.source},
    )


def action_energy_j(action: str, tech_nm: ArrayLike = 45) -> ArrayLike:
    """Energy of one ``action`` (a key of energy_actions_45nm.json) at ``tech_nm``."""
    tab = load_tables().action_j_45nm
    if action not in tab:
        raise ParamError(f"unknown action {action!r}; known: {sorted(tab)}")
    return tab[action] * node_energy_scale(tech_nm)


def _actions_j(actions: dict[str, int], tech_nm: ArrayLike) -> ArrayLike:
    tab = load_tables().action_j_45nm
    return sum(n * tab[a] for a, n in actions.items()) * node_energy_scale(tech_nm)


def sram_access_energy_j(capacity_bytes: ArrayLike, tech_nm: ArrayLike = 45) -> ArrayLike:
    """Energy of one 64-bit SRAM access in an array of ``capacity_bytes``.

    Piecewise linear in log(capacity) and log(energy) between the table's points (8 KiB, 32 KiB,
    1 MiB); beyond either end the nearest segment is extended. Writes cost as much as reads.
    """
    cap = np.asarray(capacity_bytes, dtype=float)
    if (cap <= 0).any():
        raise ParamError("SRAM capacity_bytes must be > 0")
    pts = load_tables().sram_points
    lx = np.log([p[0] for p in pts])
    ly = np.log([p[1] for p in pts])
    x = np.log(cap)
    seg = np.clip(np.searchsorted(lx, x) - 1, 0, len(lx) - 2)
    slope = (ly[seg + 1] - ly[seg]) / (lx[seg + 1] - lx[seg])
    e = np.exp(ly[seg] + slope * (x - lx[seg])) * node_energy_scale(tech_nm)
    return float(e) if np.ndim(e) == 0 else e


def dram_energy_j_per_byte(memory: MemoryType | str) -> float:
    """External-memory energy per byte transferred (8 x the per-bit table value)."""
    key = memory.value if isinstance(memory, MemoryType) else str(memory)
    tab = load_tables().dram_j_per_bit
    if key not in tab:
        raise ParamError(f"memory = {key!r} has no DRAM energy entry; known: {sorted(tab)}")
    return 8.0 * tab[key]


# --------------------------------------------------------------------------- components
def mac_energy_j(macs: ArrayLike, tech_nm: ArrayLike) -> ArrayLike:
    """PE lanes: ``macs`` multiply-accumulates (:data:`MAC_ACTIONS` each)."""
    return np.asarray(macs, dtype=float) * _actions_j(MAC_ACTIONS, tech_nm)


def softmax_energy_j(elements: ArrayLike, tech_nm: ArrayLike) -> ArrayLike:
    """Softmax lanes: ``elements`` exponentials, each with its max, sum and scaling
    (:data:`SOFTMAX_ACTIONS`)."""
    return np.asarray(elements, dtype=float) * _actions_j(SOFTMAX_ACTIONS, tech_nm)


def sram_energy_j(bytes_written: ArrayLike, bytes_read: ArrayLike, capacity_bytes: ArrayLike,
                  tech_nm: ArrayLike) -> ArrayLike:
    """On-chip buffer of ``capacity_bytes``: 64-bit accesses for the bytes written and read."""
    accesses = (np.asarray(bytes_written, dtype=float) + np.asarray(bytes_read, dtype=float)) / 8
    return accesses * sram_access_energy_j(capacity_bytes, tech_nm)


def dram_energy_j(bytes_moved: ArrayLike, memory: MemoryType | str) -> ArrayLike:
    """External memory: ``bytes_moved`` (burst granular) x energy per byte of ``memory``."""
    return np.asarray(bytes_moved, dtype=float) * dram_energy_j_per_byte(memory)


def sorter_energy_j(compares: ArrayLike, key_bits: ArrayLike, tech_nm: ArrayLike) -> ArrayLike:
    """Sorter: comparator evaluations (the RTL's per-job count,
    :meth:`hikv.hw.sorter_timing.SorterTiming.stage1_compares`), each priced as one integer add
    of the compared width ``key_bits`` (the sorter compares ``{valid, key, ~index}`` items of
    ``item_width`` bits; int8 / int16 / int32 add, the next width up). Registers and
    multiplexers are not priced (no entry in the source table): a lower bound, and small beside
    the memory energy it saves."""
    tab = load_tables().action_j_45nm
    kb = np.asarray(key_bits)
    per = np.where(kb <= 8, tab["int8_add"], np.where(kb <= 16, tab["int16_add"],
                                                       tab["int32_add"]))
    return np.asarray(compares, dtype=float) * per * node_energy_scale(tech_nm)


def loader_energy_j(requests: ArrayLike, beats: ArrayLike, tech_nm: ArrayLike) -> ArrayLike:
    """Loader logic: per AXI request an address add and a length compare, per data beat a byte
    counter add (int32 adds). The data itself is priced by :func:`dram_energy_j` and
    :func:`sram_energy_j`."""
    adds = 2 * np.asarray(requests, dtype=float) + np.asarray(beats, dtype=float)
    return adds * action_energy_j("int32_add", tech_nm)


def _add_by_width(bits: ArrayLike) -> ArrayLike:
    """Energy at 45 nm of one integer add of ``bits`` bits (int8 / int16 / int32, the next
    width up, as :func:`sorter_energy_j`)."""
    tab = load_tables().action_j_45nm
    b = np.asarray(bits)
    return np.where(b <= 8, tab["int8_add"], np.where(b <= 16, tab["int16_add"],
                                                      tab["int32_add"]))


def scorer_mac_energy_j(key_bits: ArrayLike, query_bits: ArrayLike, head_dim: ArrayLike,
                        tech_nm: ArrayLike) -> ArrayLike:
    """Energy of one integer MAC of the scoring unit: a ``key_bits x query_bits`` multiply
    and one add of the dot product's accumulator (``key_bits + query_bits + log2 head_dim``
    bits, :func:`_add_by_width`).

    The source table (Horowitz, ISSCC 2014) has an 8 x 8-bit multiply; a ``b x q``-bit one is
    priced as ``int8_mult x b q / 64`` (an array multiplier's energy grows with its partial
    product bits): *derived*, not in the source. A 4 x 8-bit MAC with a 64-element dot product
    costs 0.1 + 0.1 = 0.2 pJ at 45 nm against 2.0 pJ for the fp16 MAC lane's
    (:data:`MAC_ACTIONS`)."""
    tab = load_tables().action_j_45nm
    kb, qb = np.asarray(key_bits, dtype=float), np.asarray(query_bits, dtype=float)
    acc = kb + qb + np.ceil(np.log2(np.maximum(np.asarray(head_dim, dtype=float), 1)))
    return (tab["int8_mult"] * kb * qb / 64 + _add_by_width(acc)) * node_energy_scale(tech_nm)


def scorer_energy_j(macs: ArrayLike, tokens: ArrayLike, key_bits: ArrayLike,
                    query_bits: ArrayLike, head_dim: ArrayLike, tech_nm: ArrayLike
                    ) -> ArrayLike:
    """Low-bit scoring unit: ``macs`` integer MACs (:func:`scorer_mac_energy_j`) and, per
    scored (token, query), :data:`SCORER_TOKEN_ACTIONS`. Registers are not priced (as for the
    sorter): a lower bound."""
    return (np.asarray(macs, dtype=float)
            * scorer_mac_energy_j(key_bits, query_bits, head_dim, tech_nm)
            + np.asarray(tokens, dtype=float) * _actions_j(SCORER_TOKEN_ACTIONS, tech_nm))


# --------------------------------------------------------------------------- static power
@dataclass(frozen=True)
class LeakageTables:
    """``leakage.json``, parsed: leakage at the reference node (45 nm)."""

    logic_w_per_m2: float                             # per square metre of logic
    sram_points: tuple[tuple[float, float], ...]      # (capacity_bytes, watts per bit)
    sources: dict[str, str]


@lru_cache(maxsize=1)
def load_leakage() -> LeakageTables:
    """Parse ``leakage.json`` (cached). Logic: the components' summed leakage over their summed
    area at the table's node, brought to the reference node by the table's own leakage and area
    factors; SRAM: watts per bit by capacity at the reference node."""
    tab = load_data("leakage.json")
    lo, sr = tab["logic"], tab["sram"]
    ref = lo["to_reference"]
    if ref["tech_nm"] != REFERENCE_NM or sr["tech_nm"] != REFERENCE_NM:
        raise ParamError(f"leakage tables must be referenced to {REFERENCE_NM} nm")
    comps = lo["components"].values()
    density = (sum(float(c["leakage_w"]) for c in comps)
               / sum(float(c["area_m2"]) for c in comps))
    pts = tuple(sorted((float(p["capacity_bytes"]), float(p["leakage_w_per_bit"]))
                       for p in sr["points"]))
    return LeakageTables(logic_w_per_m2=density * float(ref["leakage"]) / float(ref["area"]),
                         sram_points=pts,
                         sources={"logic": lo["source"], "sram": sr["source"],
                                  "sram_corner": sr["corner"], "node": tab["node_scaling"]})


def logic_leakage_w_per_m2(tech_nm: ArrayLike = 45) -> ArrayLike:
    """Leakage power per square metre of logic at ``tech_nm``: the reference value x the node's
    energy factor / its area factor (a component leaks like its energy scales, its area shrinks
    by the area factor)."""
    return (load_leakage().logic_w_per_m2 * node_energy_scale(tech_nm)
            / node_area_scale(tech_nm))


def logic_leakage_w(area_m2: ArrayLike, tech_nm: ArrayLike) -> ArrayLike:
    """Leakage power of ``area_m2`` of logic (its area at ``tech_nm``)."""
    area = np.asarray(area_m2, dtype=float)
    if (area < 0).any():
        raise ParamError("logic area_m2 must be >= 0")
    out = area * logic_leakage_w_per_m2(tech_nm)
    return float(out) if np.ndim(out) == 0 else out


def sram_leakage_w_per_bit(capacity_bytes: ArrayLike, tech_nm: ArrayLike = 45) -> ArrayLike:
    """Leakage power per bit of an SRAM of ``capacity_bytes`` at ``tech_nm``: piecewise linear
    in log(capacity) between the table's points (the end values beyond them), x the node's
    energy factor."""
    cap = np.asarray(capacity_bytes, dtype=float)
    if (cap <= 0).any():
        raise ParamError("SRAM capacity_bytes must be > 0")
    pts = load_leakage().sram_points
    w = np.interp(np.log(cap), np.log([p[0] for p in pts]), [p[1] for p in pts])
    out = w * node_energy_scale(tech_nm)
    return float(out) if np.ndim(out) == 0 else out


def sram_leakage_w(capacity_bytes: ArrayLike, tech_nm: ArrayLike) -> ArrayLike:
    """Leakage power of an SRAM of ``capacity_bytes`` (0 bytes leak 0 W)."""
    cap = np.asarray(capacity_bytes, dtype=float)
    if (cap < 0).any():
        raise ParamError("SRAM capacity_bytes must be >= 0")
    per_bit = sram_leakage_w_per_bit(np.where(cap > 0, cap, 1.0), tech_nm)
    out = 8 * cap * per_bit
    return float(out) if np.ndim(out) == 0 else out


def static_energy_j(leakage_w: ArrayLike, time_s: ArrayLike) -> ArrayLike:
    """Static energy: leakage power x the time it leaks."""
    p, t = np.asarray(leakage_w, dtype=float), np.asarray(time_s, dtype=float)
    if (p < 0).any() or (t < 0).any():
        raise ParamError("leakage_w and time_s must be >= 0")
    out = p * t
    return float(out) if np.ndim(out) == 0 else out
