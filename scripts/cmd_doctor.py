"""Check the toolchain the RTL flow will use (Verilator, compiler, make, perl, libpython,
cocotb, Amaranth, Yosys, ccache) and print the fix for anything missing. Exit status 1 when a
required tool is missing."""

from __future__ import annotations

import argparse

HELP = "report the toolchain (Verilator, compiler, libpython, ...) and fixes"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    import json

    from hikv.toolchain import doctor

    checks = doctor()
    if args.json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        for c in checks:
            mark = "ok " if c.ok else "MISSING"
            print(f"{mark:8s}{c.name:16s}{c.detail}")
            if not c.ok and c.fix:
                print(f"{'':24s}fix: {c.fix}")
    return 0 if all(c.ok for c in checks) else 1
