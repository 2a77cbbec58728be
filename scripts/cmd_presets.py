"""List the named presets, or print one as JSON (the single source of every parameter used by
RTL, golden model, cost model, tests and this command line)."""

from __future__ import annotations

import argparse

HELP = "list presets or print one as JSON"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="preset to print as JSON")


def run(args: argparse.Namespace) -> int:
    from hikv.params import config_to_json
    from hikv.presets import PRESETS, get_preset

    if args.name:
        print(config_to_json(get_preset(args.name)))
        return 0
    for name, c in PRESETS.items():
        s, p = c.sorter, c.policy
        print(f"{name:8s} model={c.model.name:13s} d={c.layout.head_dim:<4d} N={c.context:<6d} "
              f"B={p.budget:<5d} stage1={p.stage1.value:12s} sorter={s.kind.value} P={s.lanes} "
              f"W={s.key_width} "
              f"max_n={s.max_n} max_k={s.max_k} | loader {c.loader.data_width}-bit "
              f"burst={c.layout.burst_bytes} B")
    return 0
