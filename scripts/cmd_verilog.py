"""Generate Verilog for one RTL block of a preset. The file is reproducible (no checkout paths):
the same preset and code give the same bytes. Prints the top module, line count and SHA-256."""

from __future__ import annotations

import argparse

HELP = "generate Verilog for a block (e.g. --block sorter --preset default --out sorter.v)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="default", help="configuration preset (hikv presets)")
    p.add_argument("--block", required=True, help="RTL block name")
    p.add_argument("--out", help="output file (default: print to stdout)")


def run(args: argparse.Namespace) -> int:
    import hashlib
    import sys

    from hikv.hw.blocks import get_block
    from hikv.presets import get_preset

    cfg = get_preset(args.preset)
    block = get_block(args.block)
    text = block.verilog(cfg)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    if args.out:
        from hikv.io import atomic_write_text

        atomic_write_text(args.out, text)
        print(f"{args.out}: module {block.toplevel} ({args.block}, preset {args.preset}), "
              f"{text.count(chr(10))} lines, sha256 {digest}")
    else:
        sys.stdout.write(text)
    return 0
