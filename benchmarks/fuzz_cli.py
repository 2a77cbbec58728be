"""Fuzz the ``hikv`` command line's file and number inputs (the target: >= 10,000
generated cases, no traceback, no non-finite value in any output).

Each case runs ``hikv.scripts.cli.main`` in this process with generated arguments and files:

* ``trace``   -- ``hikv serve --trace F``: a small valid Azure trace, then mutated (bytes
  flipped, cut, re-encoded as UTF-16 or gzip, fields replaced by edge numbers or text);
* ``serve``   -- ``hikv serve`` numeric flags (--rate, --requests, --seed, --token-budget,
  --max-running, --ttft-slo, --tpot-slo) drawn from edge values (0, -1, nan, inf, 1e308,
  8.9, huge integers, words);
* ``set``     -- ``hikv serve --set SECTION.FIELD=VALUE`` over every preset field;
* ``sweep``   -- ``hikv sweep`` axes (comma lists of edge values);
* ``json``    -- ``hikv accuracy table --perplexity F`` and ``hikv report --iso F`` with
  mutated JSON;
* ``capture`` -- ``hikv rtl --capture F`` with bytes that are not a capture;
* ``flags``   -- every numeric flag of every subcommand (found by walking the parser) with an
  edge value; quick commands run on ``tiny`` from a base command line, commands that take
  minutes (``rtl``, ``timing``, ``accuracy``) only with values the parser must refuse;
* ``concurrent`` -- two ``hikv serve`` processes into one ``--out`` at once: one must be
  refused, and the folder must hold only the other's files, with its manifest;
* ``paths``   -- the file, folder and name inputs of every subcommand (:data:`PATH_CASES`):
  missing, empty, garbage, a folder where a file is meant, a special file (``/dev/null``,
  ``/dev/full``, a FIFO) as input or ``--out``, unknown presets, blocks, methods and
  properties; commands that take minutes get only inputs they must refuse before starting.

The summary counts cases per subcommand too (``cases_by_subcommand``): every subcommand of the
parser must appear in a 10,000-case run.

A case fails when ``main`` raises (a traceback), returns anything but 0, 1 or 2, prints
"Traceback", or -- having succeeded -- leaves a NaN or infinity in stdout or in any CSV/JSON it
wrote, or a folder without its manifest (``MANIFEST.json``), or mixes two runs' files.
Prints the counts per kind and exit status, and the failures (argv, what). Usage::

    HIKV_CACHE=/tmp/c python benchmarks/fuzz_cli.py --cases 10000 --seed 1 [--json out.json]

Its measured result (cases, failures, exit statuses per kind, time) is in README's "Errors and
outputs" section with the command.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

EDGE_NUMBERS = ["0", "-1", "1", "2", "-0", "nan", "NaN", "inf", "-inf", "Infinity", "1e308",
                "1e-308", "8.9", "1e3", "0.5", "99999999999999999999999", "-5", "7", "64",
                "abc", "", " ", "0x10", "1_000", "１２", "3e", "--", "1e-9", "16", "256"]
TRACE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
_FLAGS: list[tuple[tuple[str, ...], str, str]] = []
_NONFINITE = re.compile(r"(?<![A-Za-z_])(nan|-?inf|-?infinity)(?![A-Za-z_])", re.I)


def _valid_trace(rng: random.Random, n: int) -> str:
    rows, t = [TRACE_HEADER], 0.0
    for _ in range(n):
        t += rng.choice([0.0, 0.01, 0.3, 1.7])
        rows.append(f"2023-11-16 18:{15 + int(t) // 60:02d}:{int(t) % 60:02d}."
                    f"{int(1e7 * (t % 1)):07d},{rng.randint(1, 60)},{rng.randint(1, 20)}")
    return "\n".join(rows) + "\n"


def _mutate_trace(rng: random.Random, text: str) -> bytes:
    kind = rng.randrange(9)
    data = text.encode()
    if kind == 0:                                  # flip bytes
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 1:                                  # cut
        return data[: rng.randrange(len(data))]
    if kind == 2:
        return text.encode("utf-16")
    if kind == 3:
        return gzip.compress(data)
    if kind == 4:                                  # a field replaced by an edge value
        lines = text.splitlines()
        i = rng.randrange(1, len(lines))
        parts = lines[i].split(",")
        parts[rng.randrange(len(parts))] = rng.choice(EDGE_NUMBERS)
        lines[i] = ",".join(parts)
        return ("\n".join(lines) + "\n").encode()
    if kind == 5:                                  # rows out of order / duplicated
        lines = text.splitlines()
        body = lines[1:]
        rng.shuffle(body)
        return ("\n".join([lines[0], *body]) + "\n").encode()
    if kind == 6:                                  # CRLF and a BOM: still valid
        return ("\ufeff" + text.replace("\n", "\r\n")).encode()
    if kind == 7:                                  # header only, or empty
        return rng.choice([TRACE_HEADER + "\n", "", "\n"]).encode()
    return data                                     # unchanged


def _tiny_paths() -> list[str]:
    from hikv.params import to_dict
    from hikv.presets import get_preset

    out: list[str] = []

    def walk(d: dict, p: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{p}{k}.")
            elif k != "name":
                out.append(f"{p}{k}")

    walk(to_dict(get_preset("tiny")), "")
    return out


#: Quick base command lines per subcommand (on ``tiny``): a numeric flag is added to them.
QUICK = {
    ("serve",): ["serve", "--preset", "tiny", "--method", "full", "--requests", "4"],
    ("report",): ["report", "--preset", "tiny", "--no-area", "--no-serving", "--no-plots"],
    ("sweep",): ["sweep", "--preset", "tiny", "--no-area", "--no-plots", "--context=64"],
    ("cluster",): ["cluster", "--preset", "tiny", "--method", "full", "--requests", "6",
                   "--rate", "5"],
}
#: Bad file, folder and name inputs per subcommand ("{bad}" is replaced by a generated bad
#: path, "{out}" by the case's output folder). Quick commands run to the end; the others
#: (accuracy run, rtl, timing, prove, fetch-*) only with inputs they must refuse at once.
PATH_CASES = [
    ["verilog", "--block", "sorter", "--preset", "tiny", "--out", "{special}"],
    ["verilog", "--block", "{name}", "--preset", "tiny"],
    ["verilog", "--block", "sorter", "--preset", "{name}"],
    ["presets", "{name}"],
    ["frontier", "--model", "smollm2-135m", "--length", "2048", "--cells", "{bad}",
     "--no-area", "--no-plots", "--out", "{out}"],
    ["frontier", "--model", "{name}", "--length", "2048", "--cells", "{bad}", "--no-area",
     "--out", "{out}"],
    ["plan", "--preset", "tiny", "--trace", "{bad}", "--method", "full"],
    ["plan", "--preset", "tiny", "--trace", "{trace}", "--slo", "{name}"],
    ["plan", "--preset", "tiny", "--trace", "{trace}", "--method", "{name}"],
    ["cluster", "--preset", "tiny", "--method", "full", "--trace", "{bad}"],
    ["serve", "--preset", "tiny", "--method", "{name}", "--requests", "3"],
    ["serve", "--preset", "tiny", "--method", "full", "--requests", "3", "--profile", "{bad}",
     "--device", "a100"],
    ["report", "--preset", "tiny", "--no-area", "--no-serving", "--no-plots", "--iso", "{bad}"],
    ["report", "--preset", "tiny", "--no-area", "--no-serving", "--no-plots", "--out",
     "{special}"],
    ["sweep", "--preset", "tiny", "--no-area", "--no-plots", "--context=64", "--methods",
     "{name}"],
    ["accuracy", "table", "--perplexity", "{bad}", "--out", "{out}"],
    ["accuracy", "run", "--suite", "{name}", "--out", "{out}"],
    ["rtl", "--block", "{name}", "--preset", "tiny"],
    ["rtl", "--block", "sorter_loader", "--preset", "tiny", "--capture", "{bad}"],
    ["timing", "--block", "{name}", "--preset", "tiny"],
    ["prove", "--block", "{name}", "--preset", "tiny"],
    ["prove", "--block", "loader", "--preset", "tiny", "--property", "{name}"],
    ["fetch-assets", "--only", "{name}", "--cache", "{out}"],
    ["fetch-cells", "--wheel", "{bad}"],
    ["doctor", "--json"],
]
#: Values the number parser must refuse whatever the flag.
REFUSED = ["nan", "inf", "-Infinity", "abc", "１２", "٣", "", "0x10", "1_000", "3e", "1e999"]


def numeric_flags() -> list[tuple[tuple[str, ...], str, str]]:
    """(subcommand path, flag, 'int' or 'float') of every numeric flag of the CLI."""
    import argparse as ap

    from hikv.scripts.cli import build_parser

    out: list[tuple[tuple[str, ...], str, str]] = []

    def walk(p: ap.ArgumentParser, path: tuple[str, ...]) -> None:
        for a in p._actions:
            if isinstance(a, ap._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, (*path, name))
            elif getattr(a.type, "__name__", "") in ("int", "float") and a.option_strings:
                out.append((path, a.option_strings[-1], a.type.__name__))

    walk(build_parser(), ())
    return out


def make_case(rng: random.Random, work: Path, i: int, paths: list[str]) -> tuple[str, list[str]]:
    """One generated case: (kind, argv); files it needs are written under ``work``."""
    out = work / f"out{i}"
    kind = rng.choices(["trace", "serve", "set", "sweep", "json", "capture", "flags",
                        "concurrent", "paths"], weights=[25, 20, 15, 12, 6, 2, 17, 1, 4])[0]
    if kind == "paths":
        return kind, [_fill(rng, work, i, a) for a in rng.choice(PATH_CASES)]
    if kind == "flags":
        path, flag, typ = rng.choice(_FLAGS)
        base = QUICK.get(path)
        if base is None:                  # minutes to run: only values that must be refused
            return kind, [*path, flag, rng.choice(REFUSED + ["99999999999999999999999"])]
        value = rng.choice(EDGE_NUMBERS + ["0.5", "3", "1e6", "1e40"])
        return kind, [*base, flag, value, "--out", str(out)]
    if kind == "concurrent":
        return kind, ["serve", "--preset", "tiny", "--method", "full,h2o", "--rate", "50",
                      "--requests", str(rng.choice([50, 200, 400])), "--out", str(out)]
    if kind == "trace":
        f = work / f"t{i}.csv"
        f.write_bytes(_mutate_trace(rng, _valid_trace(rng, rng.randint(1, 6))))
        argv = ["serve", "--preset", "tiny", "--method", rng.choice(["full", "hikv", "h2o"]),
                "--trace", str(f)]
        if rng.random() < 0.3:
            argv += ["--rate", rng.choice(EDGE_NUMBERS)]
        if rng.random() < 0.1:
            argv += ["--goodput"]
        if rng.random() < 0.1:
            argv += ["--out", str(out)]
        return kind, argv
    if kind == "serve":
        argv = ["serve", "--preset", "tiny", "--method", "full", "--requests",
                rng.choice(["3", "8", "20"] + EDGE_NUMBERS[:8])]
        for flag in ("--rate", "--seed", "--token-budget", "--max-running", "--ttft-slo",
                     "--tpot-slo", "--max-requests"):
            if rng.random() < 0.3:
                argv += [flag, rng.choice(EDGE_NUMBERS)]
        if rng.random() < 0.05:
            argv += ["--out", str(out)]
        return kind, argv
    if kind == "set":
        value = rng.choice(EDGE_NUMBERS + ['"hbm2"', '"static"', "true", "null", "[1]", "{}"])
        return kind, ["serve", "--preset", "tiny", "--method", "full", "--requests", "4",
                      "--set", f"{rng.choice(paths)}={value}"]
    if kind == "sweep":
        flag = rng.choice(["--context", "--budget", "--keep-v", "--head-dim", "--pe-lanes",
                           "--sorter-lanes", "--memory", "--bandwidth", "--node"])
        vals = ",".join(rng.choice(EDGE_NUMBERS + ["hbm2", "ddr3", "45", "7", "32"])
                        for _ in range(rng.randint(0, 3)))
        argv = ["sweep", "--preset", "tiny", f"{flag}={vals}", "--no-area", "--no-plots",
                "--methods", "full,hikv", "--out", str(out)]
        if flag != "--context":
            argv.append("--context=64")
        return kind, argv
    if kind == "json":
        f = work / f"j{i}.json"
        base = {"meta": {"config": {}}, "rows": [{"label": "full", "ppl": 3.0}],
                "schema": "hikv.iso_accuracy/1", "points": [], "metric": "ppl",
                "tolerance": rng.choice([1.0, -1, None])}
        text = json.dumps(base)
        if rng.random() < 0.7:
            b = bytearray(text.encode())
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.randrange(32, 127)
            text = b.decode(errors="replace")
        f.write_text(rng.choice([text, "NaN", "[]", "{}", '{"rows": 5, "meta": []}']))
        if rng.random() < 0.5:
            return kind, ["accuracy", "table", "--perplexity", str(f), "--out", str(out)]
        return kind, ["report", "--preset", "tiny", "--no-area", "--no-serving", "--no-plots",
                      "--iso", str(f), "--out", str(out)]
    f = work / f"c{i}.pt"
    f.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))))
    return kind, ["rtl", "--block", "sorter_loader", "--preset", "tiny", "--capture", str(f)]


def _bad_path(rng: random.Random, work: Path, i: int) -> str:
    """A path that is not what a command expects: missing, empty, garbage, a folder, a FIFO,
    a device, or a folder of garbage."""
    what = rng.choice(["missing", "empty", "garbage", "dir", "fifo", "devnull", "garbage_dir",
                       "nul"])
    p = work / f"bad{i}"
    if what == "empty":
        p.write_bytes(b"")
    elif what == "garbage":
        p.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))))
    elif what == "dir":
        p.mkdir()
    elif what == "fifo":
        os.mkfifo(p)
    elif what == "devnull":
        return "/dev/null"
    elif what == "garbage_dir":
        p.mkdir()
        (p / "cells").mkdir()
        for name in ("ppl_2048.json", "seed_summary.json", "MANIFEST.json"):
            (p / "cells" / name).write_bytes(rng.choice([b"", b"{", b"[]", b"NaN", b"\xff"]))
    elif what == "nul":
        return str(p) + rng.choice(["\x00", "\n", ""])
    return str(p)


def _fill(rng: random.Random, work: Path, i: int, arg: str) -> str:
    if arg == "{bad}":
        return _bad_path(rng, work, i)
    if arg == "{out}":
        return str(work / f"out{i}")
    if arg == "{special}":
        if rng.random() < 0.5:
            return rng.choice(["/dev/null", "/dev/full"])
        f = work / f"fifo{i}"
        os.mkfifo(f)
        return str(f)
    if arg == "{trace}":
        f = work / f"t{i}.csv"
        f.write_text(_valid_trace(rng, rng.randint(2, 6)))
        return str(f)
    if arg == "{name}":
        return rng.choice(["", " ", "nope", "../x", "full,", ",", "-1", "nan", "１２", "\u00e9",
                           "a" * 300, "sorter;rm", "ttft=,tpot=", "ttft=nan,tpot=1"])
    return arg


def _nonfinite_in_outputs(out: Path) -> str | None:
    if not out.is_dir():
        return None
    for f in sorted(out.rglob("*")):
        if f.suffix in (".csv", ".json", ".md") and f.is_file():
            m = _NONFINITE.search(f.read_text(errors="replace"))
            if m:
                return f"{f.name}: {m.group(0)!r}"
    return None


def run_concurrent(argv: list[str], out: Path) -> tuple[int | None, str | None]:
    """Two processes of ``argv`` (seeds 1 and 2) into one folder: exactly one succeeds, the
    other is refused with exit 2, and the folder is the winner's alone (its manifest checks,
    its seed in every row)."""
    import subprocess

    from hikv.io import MANIFEST, folder_complete

    procs = [subprocess.Popen([sys.executable, "-m", "hikv.scripts.cli", *argv, "--seed",
                               str(s)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for s in (1, 2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _ in results)
    if any("Traceback" in err for _, err in results):
        return None, "traceback printed"
    if codes != [0, 2]:
        return codes[-1], f"exit statuses {codes}: expected one run and one refusal"
    ok, why = folder_complete(out)
    if not ok:
        return 0, f"the winning run's folder is incomplete: {why}"
    args = json.loads((out / MANIFEST).read_text())["arguments"]
    seed = args[args.index("--seed") + 1]
    summary = (out / "summary.csv").read_text()
    if f"seed {3 - int(seed)})" in summary:
        return 0, "mixed outputs: the refused run's rows are in summary.csv"
    return 0, None


#: a case that has not exited after this long is a failure (a hang)
CASE_TIMEOUT_S = 120


class _Hang(BaseException):
    """Raised by the per-case alarm."""


def run_case(argv: list[str], out: Path) -> tuple[int | None, str | None]:
    """(exit status, failure description or None)."""
    from hikv.io import folder_complete
    from hikv.scripts.cli import main

    so, se = io.StringIO(), io.StringIO()

    def hang(*_: object) -> None:
        raise _Hang

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
            rc = main(argv)
    except _Hang:
        return None, f"no exit within {CASE_TIMEOUT_S} s (a hang, e.g. reading a FIFO)"
    except BaseException as e:  # noqa: BLE001 - any escape is the failure we look for
        return None, "traceback: " + "".join(traceback.format_exception_only(e)).strip()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err, text = se.getvalue(), so.getvalue()
    if "Traceback" in err or "Traceback" in text:
        return rc, "traceback printed"
    if rc not in (0, 1, 2):
        return rc, f"exit status {rc}"
    if rc == 0:
        m = _NONFINITE.search(text)
        if m:
            return rc, f"non-finite on stdout: {m.group(0)!r}"
        bad = _nonfinite_in_outputs(out)
        if bad:
            return rc, f"non-finite in a file: {bad}"
        if out.is_dir() and any(out.iterdir()):
            ok, why = folder_complete(out)
            if not ok:
                return rc, f"finished run without a complete manifest: {why}"
    return rc, None


def _clear(work: Path) -> None:
    for p in work.iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink()


def _uncovered(by_sub: Counter[str]) -> list[str]:
    import argparse as ap

    from hikv.scripts.cli import build_parser

    subs = next(a for a in build_parser()._actions if isinstance(a, ap._SubParsersAction))
    seen = {k.split()[0] for k in by_sub}
    return sorted(set(subs.choices) - seen)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--kinds", help="only these kinds, comma-separated (default: all)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    paths = _tiny_paths()
    global _FLAGS
    _FLAGS = numeric_flags()
    kinds = set(args.kinds.split(",")) if args.kinds else None
    counts: Counter[tuple[str, int | None]] = Counter()
    by_sub: Counter[str] = Counter()
    failures: list[dict] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hikv-fuzz-") as tmp:
        work = Path(tmp)
        for i in range(args.cases):
            kind, cargv = make_case(rng, work, i, paths)
            if kinds and kind not in kinds:
                _clear(work)
                continue
            run = run_concurrent if kind == "concurrent" else run_case
            rc, bad = run(cargv, work / f"out{i}")
            counts[(kind, rc)] += 1
            by_sub[" ".join(cargv[:2]) if cargv[0] == "accuracy" else cargv[0]] += 1
            if bad:
                failures.append({"case": i, "argv": cargv, "failure": bad})
                print(f"FAIL case {i}: hikv {' '.join(cargv)}: {bad}", flush=True)
            _clear(work)                           # keep the disk small
            if (i + 1) % 1000 == 0:
                print(f"{i + 1} cases, {len(failures)} failures, "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)
    wall = time.perf_counter() - t0
    by_kind: dict[str, dict[str, int]] = {}
    for (kind, rc), n in sorted(counts.items(), key=lambda x: (x[0][0], str(x[0][1]))):
        by_kind.setdefault(kind, {})[str(rc)] = n
    summary = {"cases": args.cases, "seed": args.seed, "failures": len(failures),
               "exit_status_by_kind": by_kind, "cases_by_subcommand": dict(sorted(by_sub.items())),
               "subcommands_not_covered": _uncovered(by_sub), "wall_s": round(wall, 1),
               "first_failures": failures[:20]}
    print(json.dumps({k: v for k, v in summary.items() if k != "first_failures"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if failures or (not kinds and summary["subcommands_not_covered"]) else 0


if __name__ == "__main__":
    sys.exit(main())
