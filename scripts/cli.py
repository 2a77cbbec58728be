"""Entry point of the ``hikv`` command: discovers ``hikv.scripts.cmd_*`` subcommands."""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import pkgutil
import signal
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from hikv import __version__
from hikv.io import finish_out_dirs, release_all_out_dirs
from hikv.params import ParamError


def _commands() -> dict[str, object]:
    import hikv.scripts as pkg

    mods = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            mods[info.name[4:].replace("_", "-")] = importlib.import_module(
                f"hikv.scripts.{info.name}")
    return mods


def _number_type(kind: type, dest: str, flag: str) -> Callable[[str], int | float]:
    """The parser of a numeric flag: :func:`hikv.flags.parse_int` / ``parse_float`` (ASCII,
    finite, exact) and the flag's range (:data:`hikv.flags.FLAG_RANGES`)."""
    from hikv.flags import check_flag, parse_float, parse_int

    def parse(text: str) -> int | float:
        try:
            v = parse_int(text, "value", limit=False) if kind is int else parse_float(text)
            check_flag(dest, flag, v)
        except ParamError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return v

    parse.__name__ = kind.__name__
    return parse


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (the usage is in ``--help``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {' '.join(message.split())} "
                              f"(see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
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
    _strict_numbers(parser)
    return parser


def _strict_numbers(parser: argparse.ArgumentParser) -> None:
    """Every ``type=int`` / ``type=float`` flag of every (sub)command, argument groups
    included, goes through one number parser with the flag's range (:mod:`hikv.flags`)."""
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                _strict_numbers(sub)
        elif a.type in (int, float):
            flag = next((s for s in a.option_strings if s.startswith("--")), a.dest)
            a.type = _number_type(a.type, a.dest, flag)


#: Exceptions that are the user's or the machine's problem, not a bug, by module and class:
#: each becomes one line on stderr and exit status 2. Looked up in ``sys.modules`` so the CLI
#: imports nothing heavy to recognise them (an exception's module is loaded when it is raised).
_EXPECTED = (("hikv.model.lm.assets", "AssetError"), ("hikv.sim.eda.cells", "CellsUnavailable"),
             ("hikv.sim.eda.area", "SynthError"), ("hikv.toolchain", "BuildError"),
             ("hikv.toolchain", "SimulationError"),
             ("zipfile", "BadZipFile"), ("gguf", "GGUFError"))

#: Exit status of an interrupted command (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
#: Exit status of a command stopped by SIGTERM (128 + SIGTERM).
EXIT_TERMINATED = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so it unwinds like Ctrl-C: temporary files are
    deleted and no partial file is renamed into place."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()
#: Exit status of every expected failure (bad input, unreadable or unwritable file, ...).
EXIT_ERROR = 2


def _expected(exc: BaseException) -> bool:
    if isinstance(exc, ParamError | OSError | UnicodeError | MemoryError | OverflowError):
        return True
    for mod, name in _EXPECTED:
        cls = getattr(sys.modules.get(mod), name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return False


def _describe(exc: BaseException) -> str:
    """One line: what went wrong, and what is allowed or how to fix it."""
    if isinstance(exc, MemoryError):
        return ("out of memory: the inputs ask for more memory than this machine has; use "
                "smaller sizes (fewer requests, shorter contexts, fewer design points)")
    if isinstance(exc, OverflowError):
        return (f"a result overflowed ({exc}): a parameter is far outside the range the "
                "models are meant for; use realistic values (--set, sweep axes, --rate)")
    if isinstance(exc, OSError) and not isinstance(exc, ParamError):
        what = exc.strerror or str(exc) or type(exc).__name__
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
        hint = {errno.ENOSPC: "free disk space or write elsewhere (--out)",
                errno.EACCES: "check the permissions or choose another path",
                errno.EROFS: "the file system is read-only: choose another path",
                errno.ENOENT: "check the path",
                errno.EISDIR: "give a file, not a folder",
                errno.ENOTDIR: "a parent of the path is a file, not a folder"}.get(
                    exc.errno or 0, "")
        return f"{what}" + (f": {where}" if where else "") + (f" ({hint})" if hint else "")
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _close_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``hikv`` command; returns the exit status (0 ok, 1 a check or regression
    failed, 2 an expected error -- one line on stderr, no traceback --, 130 Ctrl-C, 143
    SIGTERM).
    ``HIKV_DEBUG=1`` re-raises expected errors with their traceback."""
    previous = None
    with contextlib.suppress(ValueError):      # not the main thread: leave SIGTERM alone
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        release_all_out_dirs()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    command = "hikv"
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as e:        # argparse: usage and one error line (2), --help (0)
            return 0 if e.code is None else e.code if isinstance(e.code, int) else EXIT_ERROR
        command = f"hikv {args.command}" if getattr(args, "command", None) else "hikv"
        if not getattr(args, "_run", None):
            parser.print_help()
            return EXIT_ERROR
        rc = int(args._run(args) or 0)
        finish_out_dirs(["hikv", *(sys.argv[1:] if argv is None else argv)])
        sys.stdout.flush()
        return rc
    except Terminated:
        print(f"\n{command}: terminated (SIGTERM); files already written are complete, "
              "partial ones were not kept", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(f"\n{command}: interrupted (Ctrl-C); files already written are complete, "
              "partial ones were not kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _close_stdout()
        print(f"{command}: output closed early (broken pipe); nothing else was affected",
              file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:
        if not _expected(e) or os.environ.get("HIKV_DEBUG"):
            raise
        try:
            print(f"{command}: error: {_describe(e)}", file=sys.stderr)
        except BrokenPipeError:
            pass
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
