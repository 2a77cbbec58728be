"""ASIC timing estimate: static timing analysis of the mapped sky130 netlist, scaled to a node.

**Netlist.** The area flow's own synthesis (:func:`hikv.sim.eda.area.synthesize` with
``netlist=True``: Yosys to ``sky130_fd_sc_hd`` cells, memories of at least ``sram_min_bits``
bits cut out as SRAM macros) writes the mapped netlist as Yosys JSON; this module reads it.

**Delays** (``sim/data/sky130_delays.json``, written by ``benchmarks/characterize_sky130.py``):
every mapped cell characterised with ngspice from the PDK's own SPICE netlists and transistor
models (corner tt, 25 C, 1.8 V). A cell's delay from input pin ``p`` is
``d0[p] + slope[p] * (fanout - 1)``, with ``fanout`` the number of cell inputs (and ports) its
output drives; flip-flops start paths with their clock-to-Q delay and end them with their setup
time. Wires are not modelled (no placement), so the estimate is optimistic by the wire share.

**Timing endpoints.** Paths start at flip-flop outputs and at input ports and end at flip-flop
inputs and output ports. The block's ports and the ports of cut-out SRAM macros count as
registers at the boundary (a synchronous SRAM's read data comes from its output latch; the
block's neighbours register what they exchange with it), with zero delay: the reported path is
the longest register-to-register path of the logic.

**Node.** The critical path in sky130 is scaled to the configuration's node with the
Stillmaker-Baas delay equations (``sim/data/delay_scaling.json``, the paper the energy and area
factors of :mod:`hikv.sim.tech` come from): :func:`node_delay_scale`.

Public entry points: :func:`analyse` (a netlist), :func:`block_sta` (a registered block for a
configuration; cached), :func:`unit_sta` (a baseline unit) and :func:`block_clock` (the
estimated clock of a block at the preset's node, with its source and critical path: what the
cost model can price phases with). Results are found in the user cache, then in the shipped
files (:mod:`hikv.sim.eda.shipped`), before the flow runs; each says where it came from
(``origin``).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hikv.params import Config, ParamError
from hikv.sim.eda.shipped import (
    cache_origin,
    forced,
    made,
    record_sta,
    remember,
    remembered,
    rtl_key,
    shipped_sta,
)
from hikv.sim.tech import load_data
from hikv.toolchain import cache_dir, text_hash

__all__ = ["DelayTable", "PathStep", "TimingPath", "StaResult", "load_delays",
           "node_delay_scale", "analyse", "design_sta", "block_sta", "unit_sta", "block_clock",
           "STA_VERSION"]

#: bump when the analysis changes (part of the cache key)
STA_VERSION = "2"
#: nets driving more inputs than this are assumed buffered (a fan-out-of-4 buffer tree)
MAX_FANOUT = 4
BUFFER = "sky130_fd_sc_hd__buf_1"


@dataclass(frozen=True)
class DelayTable:
    """Per-pin delays of the library (ps): ``cells[cell][pin] = (d0, slope)``."""

    cells: dict[str, dict[str, tuple[float, float]]]
    clk_to_q: tuple[float, float]
    setup_ps: float
    flipflop: str
    fo4_ps: float
    source: str
    corner: dict[str, Any]
    digest: str

    def delay(self, cell: str, pin: str, fanout: int) -> float:
        """Delay from ``pin`` of ``cell`` driving ``fanout`` inputs (:func:`buffered`)."""
        try:
            d0, slope = self.cells[cell][pin]
        except KeyError:
            raise ParamError(f"no delay for {cell} pin {pin} in sky130_delays.json") from None
        return self.buffered(d0, slope, fanout)

    def buffered(self, d0: float, slope: float, fanout: int) -> float:
        """``d0 + slope * (fanout - 1)`` up to fan-out ``MAX_FANOUT``; a larger fan-out is
        driven through a tree of ``buf_1`` at fan-out ``MAX_FANOUT`` (what buffering after
        placement inserts; an unbuffered net of fan-out 1000 would be meaningless), adding one
        buffer delay per factor of ``MAX_FANOUT``."""
        if fanout <= MAX_FANOUT:
            return d0 + slope * max(0, fanout - 1)
        b0, bs = self.cells[BUFFER]["A"]
        stages = math.ceil(math.log(fanout / MAX_FANOUT) / math.log(MAX_FANOUT) - 1e-9)
        return d0 + slope * (MAX_FANOUT - 1) + stages * (b0 + bs * (MAX_FANOUT - 1))


def load_delays() -> DelayTable:
    """The committed characterisation table (``sim/data/sky130_delays.json``)."""
    d = load_data("sky130_delays.json")
    cells = {c: {p: (float(v["d0_ps"]), float(v["slope_ps"])) for p, v in pins.items()}
             for c, pins in d["cells"].items()}
    ff = d["flipflop"]
    ck = ff["clk_to_q"]
    return DelayTable(cells=cells, clk_to_q=(float(ck["d0_ps"]), float(ck["slope_ps"])),
                      setup_ps=float(ff["setup_ps"]), flipflop=ff["cell"],
                      fo4_ps=float(d["fo4_inverter_ps"]), source=d["source"],
                      corner=d["corner"],
                      digest=text_hash(json.dumps(d, sort_keys=True)))


def _delay_fit(node: dict[str, Any]) -> float:
    a, b, c, d = (float(x) for x in node["coeffs"])
    v = float(node["vdd"])
    return ((a * v + b) * v + c) * v + d


def node_delay_scale(tech_nm: float, source_nm: float = 130) -> float:
    """Gate-delay factor from ``source_nm`` to ``tech_nm`` (Stillmaker-Baas, nominal supplies).

    Nodes between two fitted nodes are interpolated linearly in nm; outside the table it is a
    :class:`ParamError`.
    """
    tab = {int(k): _delay_fit(v) for k, v in load_data("delay_scaling.json")["nodes"].items()}

    def at(nm: float) -> float:
        if nm in tab:
            return tab[int(nm)]
        nodes = sorted(tab)
        if not nodes[0] < nm < nodes[-1]:
            raise ParamError(f"tech_nm = {nm} is out of range for delay scaling: allowed "
                             f"[{nodes[0]}, {nodes[-1]}] nm")
        lo = max(n for n in nodes if n < nm)
        hi = min(n for n in nodes if n > nm)
        w = (nm - lo) / (hi - lo)
        return tab[lo] * (1 - w) + tab[hi] * w

    return at(tech_nm) / at(source_nm)


# --------------------------------------------------------------------------- analysis
@dataclass(frozen=True)
class PathStep:
    """One stage of a path: the cell (type without library prefix), the input pin the path
    enters by, the net it drives (RTL name where Yosys kept one) and the arrival there (ps)."""

    cell: str
    pin: str
    net: str
    arrival_ps: float


@dataclass(frozen=True)
class TimingPath:
    """A register-to-register path of the sky130 netlist (delays in ps, no wires)."""

    delay_ps: float                  # arrival at the endpoint + setup (0 at a port)
    start: str                       # RTL name of the launching register (or port)
    start_kind: str                  # "flip-flop" | "port"
    end: str                         # RTL name of the capturing register (or port)
    end_kind: str
    steps: tuple[PathStep, ...] = ()

    @property
    def levels(self) -> int:
        """Combinational cells on the path."""
        return len(self.steps)

    @property
    def named(self) -> tuple[str, ...]:
        """RTL signal names the path passes through (in order, deduplicated)."""
        out: list[str] = []
        for s in self.steps:
            base = s.net.split("[")[0]
            if not s.net.startswith("$") and (not out or out[-1] != base):
                out.append(base)
        return tuple(out)

    def describe(self) -> str:
        return (f"{self.start} ({self.start_kind}) -> {self.end} ({self.end_kind}): "
                f"{self.delay_ps:.0f} ps, {self.levels} cells")


@dataclass(frozen=True)
class StaResult:
    """Static timing of one design in sky130 (tt, 25 C, 1.8 V) and at a node."""

    top: str
    key: str
    critical: TimingPath
    reg_to_reg: TimingPath | None     # the longest path between two flip-flops
    flipflops: int
    cells: int
    tech_nm: int
    node_scale: float
    delays_source: str
    corner: dict[str, Any]
    fo4_ps: float
    top_paths: tuple[TimingPath, ...] = ()   # longest path to each of the worst endpoints
    version: str = STA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    #: where this result came from (:data:`hikv.sim.eda.shipped.ORIGINS`); not stored
    origin: str = field(default="", compare=False)

    @property
    def critical_ps(self) -> float:
        return self.critical.delay_ps

    @property
    def node_period_s(self) -> float:
        """Critical path scaled to ``tech_nm`` (s)."""
        return self.critical.delay_ps * 1e-12 * self.node_scale

    @property
    def node_clock_hz(self) -> float:
        return 1.0 / self.node_period_s

    @property
    def fo4_depth(self) -> float:
        """Critical path in FO4 inverter delays (node independent)."""
        return self.critical.delay_ps / self.fo4_ps

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["origin"]
        d["critical_ps"] = self.critical_ps
        d["node_period_s"] = self.node_period_s
        d["node_clock_hz"] = self.node_clock_hz
        return d

    @staticmethod
    def from_dict(d: dict[str, Any], origin: str = "") -> StaResult:
        d = {k: v for k, v in d.items()
             if k not in ("critical_ps", "node_period_s", "node_clock_hz", "origin")}

        def path(p: dict[str, Any] | None) -> TimingPath | None:
            if p is None:
                return None
            p = dict(p)
            p["steps"] = tuple(PathStep(**s) for s in p["steps"])
            return TimingPath(**p)

        d["critical"] = path(d["critical"])
        d["reg_to_reg"] = path(d["reg_to_reg"])
        d["top_paths"] = tuple(path(p) for p in d.get("top_paths", ()))
        return StaResult(**d, origin=origin)


_MEMREG = re.compile(r"^\$\\?(.+?)\$rdreg\[(\d+)\]\$q(\[\d+\])?$")


def _pretty(name: str) -> str:
    """RTL-style name: ``$\\ring.mem$rdreg[0]$q[3]`` -> ``ring.mem.read0[3]`` (the output
    register of a memory read port mapped to flip-flops)."""
    m = _MEMREG.match(name)
    if m:
        return f"{m.group(1)}.read{m.group(2)}{m.group(3) or ''}"
    return name.lstrip("\\")


def _short(cell: str) -> str:
    return cell.removeprefix("sky130_fd_sc_hd__")


def _outputs() -> dict[str, str]:
    spec = load_data("sky130_hd_cells.json")
    out = {f"sky130_fd_sc_hd__{n}": c["output"] for n, c in spec["combinational"].items()}
    ff = spec["flipflop"]
    out[f"sky130_fd_sc_hd__{ff['cell']}"] = ff["output"]
    return out


def analyse(netlist: dict[str, Any], top: str, delays: DelayTable | None = None,
            *, paths: int = 5) -> dict[str, Any]:
    """Longest paths of a mapped netlist (Yosys JSON of sky130_fd_sc_hd cells).

    Returns ``{"critical": TimingPath, "reg_to_reg": TimingPath | None, "top_paths": [...],
    "flipflops": n, "cells": n}``. Raises :class:`ParamError` on a combinational loop or an
    unknown cell.
    """
    delays = delays or load_delays()
    mods = netlist["modules"]
    mod = mods.get(top) or mods.get(f"\\{top}")
    if mod is None:
        raise ParamError(f"module {top!r} not in the netlist (has {sorted(mods)[:5]})")
    outs = _outputs()
    spec = load_data("sky130_hd_cells.json")
    tie = f"sky130_fd_sc_hd__{spec['tie']['cell']}"
    ff = delays.flipflop
    ff_spec = spec["flipflop"]

    # best RTL name of every bit
    names: dict[int, tuple[int, str]] = {}
    for name, nn in mod.get("netnames", {}).items():
        rank = 2 if nn.get("hide_name") else (1 if "$" in name else 0)
        bits = nn["bits"]
        for i, b in enumerate(bits):
            if isinstance(b, int):
                label = name if len(bits) == 1 else f"{name}[{i}]"
                if b not in names or (rank, len(label)) < names[b][:1] + (len(names[b][1]),):
                    names[b] = (rank, label)

    def net(b: int) -> str:
        return _pretty(names[b][1]) if b in names else f"${b}"

    fanout: dict[int, int] = defaultdict(int)
    readers: dict[int, list[str]] = defaultdict(list)
    arrival: dict[int, float | None] = {}
    pred: dict[int, tuple[str, str, int | None]] = {}   # bit -> (cell name, pin, from bit)
    start_kind: dict[int, str] = {}
    comb: dict[str, tuple[str, list[tuple[str, int | str]], int]] = {}
    ends: list[tuple[int, float, str, str]] = []   # (bit, setup, end name, kind)

    for pname, port in mod.get("ports", {}).items():
        for i, b in enumerate(port["bits"]):
            if not isinstance(b, int):
                continue
            label = pname if len(port["bits"]) == 1 else f"{pname}[{i}]"
            if port["direction"] == "input":
                arrival[b] = 0.0
                start_kind[b] = "port"
                names[b] = (-1, label)
            else:
                fanout[b] += 1
                ends.append((b, 0.0, label, "port"))
    ffs = 0
    for cname, c in mod.get("cells", {}).items():
        typ = c["type"]
        conn = c["connections"]
        if typ == tie:
            for b in (x for bits in conn.values() for x in bits):
                if isinstance(b, int):
                    arrival[b] = None
            continue
        if typ == ff:
            ffs += 1
            (q,) = conn[ff_spec["output"]]
            (d,) = conn[ff_spec["data"]]
            if isinstance(d, int):
                fanout[d] += 1
                ends.append((d, delays.setup_ps, q if isinstance(q, int) else -1, "flip-flop"))
            if isinstance(q, int):
                start_kind[q] = "flip-flop"
                arrival[q] = 0.0  # clock-to-Q added once the fan-out is known
            continue
        if typ not in outs:
            raise ParamError(f"{top}: cell type {typ} has no delay model (not a mapped "
                             "sky130_fd_sc_hd cell)")
        opin = outs[typ]
        (o,) = conn[opin]
        ins = [(p, bits[0]) for p, bits in conn.items() if p != opin]
        for _, b in ins:
            if isinstance(b, int):
                fanout[b] += 1
                readers[b].append(cname)
        if isinstance(o, int):
            comb[cname] = (typ, ins, o)
    for b, kind in start_kind.items():
        if kind == "flip-flop":
            arrival[b] = delays.buffered(*delays.clk_to_q, fanout[b])

    # topological propagation
    driven = {o for _, _, o in comb.values()}
    for _, ins, _ in comb.values():
        for _, b in ins:   # undriven nets (no cell, no port) are constants
            if isinstance(b, int) and b not in arrival and b not in driven:
                arrival[b] = None
    waiting = {n: sum(1 for _, b in ins if isinstance(b, int) and b not in arrival)
               for n, (_, ins, _) in comb.items()}
    ready = [n for n, w in waiting.items() if w == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        typ, ins, o = comb[n]
        best: float | None = None
        how: tuple[str, str, int | None] = (n, "", None)
        for pin, b in ins:
            a = arrival.get(b) if isinstance(b, int) else None
            if a is None:
                continue
            t = a + delays.delay(typ, pin, fanout[o])
            if best is None or t > best:
                best, how = t, (n, pin, b)
        arrival[o] = best
        pred[o] = how
        for r in readers.get(o, ()):
            waiting[r] -= 1
            if waiting[r] == 0:
                ready.append(r)
    if done != len(comb):
        stuck = [n for n, w in waiting.items() if w > 0][:3]
        raise ParamError(f"{top}: combinational loop through {stuck}")

    def trace(b: int, end_delay: float, end: str, end_kind: str) -> TimingPath:
        steps: list[PathStep] = []
        cur: int | None = b
        while cur is not None and cur in pred:
            cname, pin, frm = pred[cur]
            steps.append(PathStep(cell=_short(comb[cname][0]), pin=pin, net=net(cur),
                                  arrival_ps=round(float(arrival[cur] or 0.0), 2)))
            cur = frm
        steps.reverse()
        start = net(cur) if cur is not None else "?"
        kind = start_kind.get(cur, "constant") if cur is not None else "constant"
        return TimingPath(delay_ps=round(end_delay, 2), start=start, start_kind=kind, end=end,
                          end_kind=end_kind, steps=tuple(steps))

    scored = []
    for b, setup, endname, kind in ends:
        a = arrival.get(b)
        if a is None:
            continue
        label = net(endname) if kind == "flip-flop" and isinstance(endname, int) else endname
        scored.append((a + setup, b, label, kind))
    if not scored:
        raise ParamError(f"{top}: no timed path in the netlist")
    scored.sort(key=lambda x: -x[0])
    traced = [trace(b, t, lab, k) for t, b, lab, k in scored[:max(1, paths)]]
    r2r = None
    for t, b, lab, k in scored:
        if k != "flip-flop":
            continue
        p = trace(b, t, lab, k)
        if p.start_kind == "flip-flop":
            r2r = p
            break
    return {"critical": traced[0], "reg_to_reg": r2r, "top_paths": traced, "flipflops": ffs,
            "cells": len(comb) + ffs}


# --------------------------------------------------------------------------- blocks
def _read_netlist(path: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))


def design_sta(verilog: str, top: str, tech_nm: int, *, sram_min_bits: int | None = None,
               use_cache: bool = True) -> StaResult:
    """Synthesise (through the area flow's cache) and analyse ``verilog``; cached."""
    return _sta(lambda: verilog, None, top, tech_nm, sram_min_bits=sram_min_bits,
                use_cache=use_cache)


def _sta(verilog: Callable[[], str], rtl: str | None, top: str, tech_nm: int, *,
         sram_min_bits: int | None = None, use_cache: bool = True, what: str = ""
         ) -> StaResult:
    """:func:`design_sta` of the Verilog ``verilog()`` generates; with the RTL key ``rtl``
    (:func:`hikv.sim.eda.shipped.rtl_key`) a stored result is found without generating it.
    Lookup: the user cache, then the shipped files, then the flow."""
    from hikv.sim.eda.area import (
        DEFAULT_SRAM_MIN_BITS,
        netlist_path,
        rtl_synth_key,
        synth_key,
        synthesize,
    )

    smb = DEFAULT_SRAM_MIN_BITS if sram_min_bits is None else sram_min_bits
    delays = load_delays()
    cache = cache_dir() / "sta"
    cache.mkdir(parents=True, exist_ok=True)
    scale = node_delay_scale(tech_nm)

    def cached(synth: str) -> StaResult | None:
        key = text_hash(synth, delays.digest, STA_VERSION)
        hit = cache / f"{top}-{key}.json"
        if not use_cache or forced(key):
            return None
        if hit.exists():
            d, origin = json.loads(hit.read_text()), cache_origin(key)
        elif (d := shipped_sta(key)) is not None:
            origin = "shipped"
        else:
            return None
        record_sta(key, d, origin)
        return StaResult.from_dict({**d, "tech_nm": tech_nm, "node_scale": scale}, origin)

    skey = None
    if rtl is not None:
        # an analysis known by the RTL key needs neither the Verilog nor the synthesis
        skey = rtl_synth_key(rtl, top, sram_min_bits=smb)
        known = remembered(top, skey, what)
        if known is not None and (done := cached(known)) is not None:
            return done
    text = verilog()
    k = synth_key(text, top, sram_min_bits=smb)
    if skey is not None:
        remember(top, skey, k, what)
    # an analysis cached under the synthesis key needs neither the synthesis nor its netlist
    if (done := cached(k)) is not None:
        return done
    res = synthesize(text, top, sram_min_bits=smb, netlist=True, use_cache=use_cache)
    key = text_hash(res.key, delays.digest, STA_VERSION)
    hit = cache / f"{top}-{key}.json"
    a = analyse(_read_netlist(netlist_path(res)), top, delays)
    out = StaResult(top=top, key=key, critical=a["critical"], reg_to_reg=a["reg_to_reg"],
                    flipflops=a["flipflops"], cells=a["cells"], tech_nm=tech_nm,
                    node_scale=scale, delays_source=delays.source, corner=delays.corner,
                    fo4_ps=delays.fo4_ps, top_paths=tuple(a["top_paths"]),
                    extra={"sram_min_bits": smb, "synth_key": res.key}, origin="synthesised")
    tmp = hit.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(out.to_dict(), indent=1) + "\n")
    tmp.replace(hit)
    made(key)
    record_sta(key, out.to_dict(), out.origin)
    return out


def block_sta(block: Any, cfg: Config, *, use_cache: bool = True) -> StaResult:
    """Static timing of a registered block (name or :class:`hikv.hw.blocks.Block`) for ``cfg``
    at ``cfg.accel.tech_nm``; found by the block's RTL key where it is known."""
    if isinstance(block, str):
        from hikv.hw.blocks import get_block

        block = get_block(block)
    blk = block
    return _sta(lambda: blk.verilog(cfg),
                rtl_key(f"block:{blk.name}", blk.toplevel, cfg, (blk.make, type(blk))),
                blk.toplevel,
                cfg.accel.tech_nm, use_cache=use_cache, what=f"block:{blk.name}")


def unit_sta(name: str, cfg: Config, *, use_cache: bool = True) -> StaResult:
    """Static timing of the baseline unit ``name`` (:func:`hikv.sim.eda.area.baseline_units`)
    of ``cfg`` at ``cfg.accel.tech_nm``."""
    from hikv.sim.eda.area import baseline_units

    make, top = baseline_units()[name]

    def verilog() -> str:
        from hikv.hw.verilog import to_verilog

        return to_verilog(make(cfg), top)

    what = f"unit:{name}"
    return _sta(verilog, rtl_key(what, top, cfg, (make,)), top, cfg.accel.tech_nm,
                use_cache=use_cache, what=what)


def block_clock(block: Any, cfg: Config) -> dict[str, Any]:
    """The estimated clock of ``block`` at the preset's node, with source and critical path.

    ``{"clock_hz", "period_s", "tech_nm", "source", "critical_path", "sky130_ps", "origin"}``:
    the sky130 critical path (ngspice-characterised cells, no wires) scaled by the
    Stillmaker-Baas delay factor, and where the analysis came from (``cache``, ``shipped``,
    ``synthesised``). Meant for the cost model (a block's phases timed at its own clock).
    """
    r = block_sta(block, cfg)
    return {"clock_hz": r.node_clock_hz, "period_s": r.node_period_s, "tech_nm": r.tech_nm,
            "sky130_ps": r.critical_ps, "node_scale": r.node_scale, "origin": r.origin,
            "source": f"hikv.sim.eda.sta: sky130_fd_sc_hd STA ({r.corner.get('process')}, "
                      f"{r.corner.get('vdd_v')} V; {r.delays_source}) x Stillmaker-Baas "
                      f"delay factor {r.node_scale:.3f} to {r.tech_nm} nm",
            "critical_path": r.critical.describe()}
