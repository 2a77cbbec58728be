"""Entry point of the ``hikv`` command: discovers ``hikv.scripts.cmd_*`` subcommands."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from hikv import __version__
from hikv.params import ParamError


def _commands() -> dict[str, object]:
    import hikv.scripts as pkg

    mods = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            mods[info.name[4:].replace("_", "-")] = importlib.import_module(
                f"hikv.scripts.{info.name}")
    return mods


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hikv",
        description="HiKV co-design kit: RTL generation and simulation, golden model, cost, "
                    "energy, area and serving models. Units: bytes, seconds, joules, metres "
                    "squared unless a flag says otherwise.")
    parser.add_argument("--version", action="version", version=f"hikv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in _commands().items():
        p = sub.add_parser(name, help=mod.HELP, description=(mod.__doc__ or mod.HELP).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except ParamError as e:
        print(f"hikv {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
