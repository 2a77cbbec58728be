"""SRAM leakage per bit and area per MiB with CACTI 7 in Accelergy's SRAM configuration: the
``sram`` points of ``sim/data/leakage.json`` and ``sram_per_mib`` of
``sim/data/published_areas.json``.

Needs a CACTI 7 binary (github.com/HewlettPackard/cacti, ``make``) and Accelergy's configuration
template (``hwcomponents_cacti/default_cfg.cfg`` of github.com/Accelergy-Project/hwcomponents-cacti:
ITRS LSTP cells and peripherals, 300 K). CI does not run it: the tables are committed.

Each point is a ``"ram"`` of one read-write port, 8-byte (64-bit) blocks and bus, one bank, as
hwcomponents-cacti asks for an SRAM of 64-bit words; leakage per bit = ``Total leakage power of a
bank`` / capacity in bits; area = ``Data array: Area``. ``--flavour`` swaps the template's
device type (``itrs-hp``, ``itrs-lop``) for the cross-check points.

Usage: ``python benchmarks/cacti_sram_leakage.py --cacti cacti/cacti --template default_cfg.cfg``
(prints JSON; a few seconds per point).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CAPACITIES = (8192, 32768, 262144, 1048576)
NODES_NM = (45, 32, 22)


def config(template: str, capacity_bytes: int, tech_nm: int, flavour: str = "") -> str:
    """The CACTI input for one SRAM: the template with the SRAM's attributes appended."""
    text = template.replace("itrs-lstp", flavour) if flavour else template
    return text + "\n".join([
        "", f"-size (bytes) {capacity_bytes}", "-read-write port  1", "-block size (bytes) 8",
        f"-technology (u) {tech_nm / 1000}", "-output/input bus width  64", "-UCA bank 1",
        '-cache type "ram"', "-tag size (b) 0", "-associativity 1", ""])


def parse(log: str) -> dict[str, float]:
    """Leakage (W) and data-array area (m^2) from a CACTI log."""
    leak = re.search(r"Total leakage power of a bank \(mW\): ([\d.eE+-]+)", log)
    area = re.search(r"Data array: Area \(mm2\): ([\d.eE+-]+)", log)
    if not leak or not area:
        raise SystemExit("CACTI output has no leakage or area line:\n" + log[-2000:])
    return {"leakage_w": float(leak[1]) * 1e-3, "area_m2": float(area[1]) * 1e-6}


def run_point(cacti: Path, template: str, capacity_bytes: int, tech_nm: int,
              flavour: str = "") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "sram.cfg"
        cfg.write_text(config(template, capacity_bytes, tech_nm, flavour))
        res = subprocess.run([str(cacti.resolve()), "-infile", str(cfg)], cwd=cacti.parent,
                             capture_output=True, text=True, timeout=900)
    got = parse(res.stdout + res.stderr)
    return {"capacity_bytes": capacity_bytes, "tech_nm": tech_nm,
            "flavour": flavour or "itrs-lstp",
            "leakage_w_per_bit": got["leakage_w"] / (8 * capacity_bytes),
            "area_m2": got["area_m2"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cacti", required=True, help="the CACTI 7 binary (its folder holds the "
                    "technology files it reads)")
    ap.add_argument("--template", required=True, help="hwcomponents-cacti default_cfg.cfg")
    ap.add_argument("--flavour", default="", help="device type replacing itrs-lstp "
                    "(itrs-hp, itrs-lop)")
    args = ap.parse_args(argv)
    template = Path(args.template).read_text()
    points = [run_point(Path(args.cacti), template, c, t, args.flavour)
              for t in NODES_NM for c in CAPACITIES]
    print(json.dumps(points, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
