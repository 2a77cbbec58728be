"""README.md is a manual that runs: it stays short, every command of its job sections runs on
``tiny`` (or answers ``--help`` where even ``tiny`` takes minutes), its golden-model example
prints what it shows, and every number of its results table is the number in the committed
result file the row cites."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results"
MAX_LINES = 320
JOBS = "## Jobs"
TABLE = "## Results against the seed's claims"

HIKV = [sys.executable, "-m", "hikv.scripts.cli"]

#: README command -> (what the test runs instead, text its output must hold): the same job on
#: ``tiny`` with flags that keep it to seconds, or ``--help`` where it takes minutes on any
#: preset. A command README shows that is missing here fails ``test_readme_commands_listed``.
ON_TINY: dict[str, tuple[str, str]] = {
    "hikv doctor": ("hikv doctor", "ok      verilator"),
    "hikv presets": ("hikv presets", "tiny     model=tiny"),
    "hikv verilog --block sorter --preset default --out hikv_sorter.v":
        ("hikv verilog --block sorter --preset tiny --out hikv_sorter.v",
         "hikv_sorter.v: module hikv_sorter (sorter, preset tiny)"),
    "hikv rtl --block sorter --preset tiny --seed 1":
        ("hikv rtl --block sorter --preset tiny --seed 1 --jobs 100",
         "PASS block=sorter preset=tiny seed=1"),
    "hikv report --preset default":
        ("hikv report --preset tiny --no-area --no-serving --no-plots",
         "# HiKV attention-level results: preset `tiny`"),
    "hikv sweep --preset default --context 1024,2048,4096 --budget 128,256,512 --no-area":
        ("hikv sweep --preset tiny --context 32,64 --budget 8,16 --no-area --no-plots",
         "largest HiKV speedup vs full KV"),
    "hikv timing --block sorter --preset tiny":
        ("hikv timing --block sorter --preset tiny", "ASIC estimate: sorter @ tiny"),
    "hikv serve --system hikv --rate 20 --requests 2000 --seed 1 --method full,h2o,hikv":
        ("hikv serve --system hikv --preset tiny --rate 20 --requests 200 --seed 1 "
         "--method full,h2o,hikv",
         "Little's law [hikv]"),
    "hikv cluster --system hikv --pd 2:2 --dynamic --rate 8 --requests 1200":
        ("hikv cluster --system hikv --preset tiny --pd 1:1 --dynamic --rate 8 --requests 200",
         "P/D 1:1 dopd"),
    "hikv accuracy run --suite seed-smollm2 --out smollm2-seed --workers 2 --threads 1":
        ("hikv accuracy run --help", "usage: hikv accuracy run"),
}

#: longer than a few seconds on a cold cache (a Verilator build, a synthesis)
SLOW = {"hikv rtl --block sorter --preset tiny --seed 1",
        "hikv timing --block sorter --preset tiny"}


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level (lines
    inside code fences are not headings)."""
    lines = text.splitlines(keepends=True)
    start = lines.index(heading + "\n")
    level = len(heading.split(" ", 1)[0])
    fenced = False
    for end in range(start + 1, len(lines)):
        line = lines[end]
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
    else:
        end = len(lines)
    return "".join(lines[start:end])


def _commands() -> list[str]:
    """The ``$ ...`` lines of the console blocks in README's job sections."""
    jobs = _section(README.read_text(), JOBS)
    out = []
    for block in re.findall(r"```console\n(.*?)```", jobs, re.S):
        out += [line[2:].strip() for line in block.splitlines() if line.startswith("$ ")]
    return out


def test_readme_length():
    n = len(README.read_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; a manual of the kit stays within {MAX_LINES}"


def test_readme_commands_listed():
    shown = _commands()
    assert shown, f"no `$ command` lines under {JOBS!r}"
    missing = [c for c in shown if c not in ON_TINY]
    assert not missing, ("README commands the test does not run; add them to ON_TINY in "
                         f"tests/test_readme.py: {missing}")
    stale = [c for c in ON_TINY if c not in shown]
    assert not stale, f"ON_TINY lists commands README no longer shows: {stale}"


@pytest.mark.parametrize("command", [
    pytest.param(c, marks=[pytest.mark.slow] if c in SLOW else [], id=c.split()[1])
    for c in ON_TINY])
def test_readme_command_runs_on_tiny(command, tmp_path):
    run, expect = ON_TINY[command]
    argv = shlex.split(run)
    assert argv[0] == "hikv", run
    p = subprocess.run(HIKV + argv[1:], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"README's `{command}` as `{run}`: exit {p.returncode}\n{out[-3000:]}"
    assert expect in out, f"README's `{command}` as `{run}`: {expect!r} not in its output\n{out}"


def test_readme_golden_model_example_output():
    text = README.read_text()
    section = _section(text, "### The golden model in Python")
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"```\n(full .*?)```", section, re.S).group(1)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md", "exec"), {})
    assert buf.getvalue() == shown


# --------------------------------------------------------------------------- results table
def _table(text: str) -> list[dict[str, str]]:
    """The first Markdown table under README's results heading, as one dict per row."""
    lines = [x for x in _section(text, TABLE).splitlines() if x.startswith("|")]
    cells = [[c.strip() for c in x.strip().strip("|").split("|")] for x in lines]
    head, rows = cells[0], cells[2:]
    return [dict(zip(head, r, strict=True)) for r in rows]


def _csv_value(path: Path, selector: str, column: str) -> Any:
    """``column`` of the row of ``path`` that ``selector`` names: ``col=value ...`` pairs, or
    the value of the first column."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows, f"{path}: no rows"
    first = next(iter(rows[0]))
    want = (dict(kv.split("=", 1) for kv in selector.split()) if "=" in selector
            else {first: selector})
    hits = [r for r in rows if all(r[k] == v for k, v in want.items())]
    assert len(hits) == 1, f"{path}: {len(hits)} rows match {selector!r}"
    value = hits[0][column]
    if value in ("True", "False"):
        return value == "True"
    return float(value)


def _json_value(path: Path, keys: list[str]) -> Any:
    """Walk ``keys`` into ``path``'s JSON; in a list, the element one of whose values is the key."""
    node = json.loads(path.read_text())
    for key in keys:
        if isinstance(node, list):
            hits = [e for e in node if isinstance(e, dict) and key in e.values()]
            assert len(hits) == 1, f"{path}: {len(hits)} elements hold {key!r}"
            node = hits[0]
        else:
            node = node[key]
    return node


def _cited(source: str) -> list[tuple[str, Any]]:
    """Every ``PATH [key, ...]`` reference of a source cell with the value it names."""
    refs = re.findall(r"`([^`]+)`\s*\[([^\]]+)\]", source)
    assert refs, f"source cell names no `file` [key, ...]: {source!r}"
    out = []
    for rel, keys in refs:
        path = RESULTS / rel
        assert path.is_file(), f"cited result file docs/results/{rel} does not exist"
        parts = [k.strip() for k in keys.split(",")]
        value = (_csv_value(path, *parts) if path.suffix == ".csv" else _json_value(path, parts))
        out.append((f"docs/results/{rel} [{keys}]", value))
    return out


NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.])")


def _shown(cell: str) -> list[str]:
    """The numbers written in a cell (not those inside names such as H2O)."""
    return NUMBER.findall(cell.replace("**", "").replace("x", " ").replace("%", " "))


def _matches(shown: str, value: float) -> bool:
    """``shown`` is ``value`` (or ``value`` as a percentage) rounded as written."""
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    d = float(shown)
    return any(abs(round(v, decimals) - d) < 1e-9 for v in (value, 100 * value))


def test_readme_results_table_numbers_are_the_cited_files():
    rows = _table(README.read_text())
    assert rows, f"no table under {TABLE!r}"
    claims = {r["seed's claim"] for r in rows} - {""}
    assert len(claims) == 5, f"one claim per seed headline, five in all: {sorted(claims)}"
    for row in rows:
        measured, cited = row["kit's number"], _cited(row["source"])
        numeric = [(ref, v) for ref, v in cited if not isinstance(v, bool)]
        shown = _shown(measured)
        for s in shown:
            assert any(_matches(s, v) for _, v in numeric), (
                f"README results row {row}: {s} is in none of {numeric}")
        for ref, v in cited:
            if isinstance(v, bool):
                assert v or "not reached" in measured, (
                    f"README results row {row}: {ref} is {v}, the cell must say 'not reached'")
            else:
                assert any(_matches(s, v) for s in shown), (
                    f"README results row {row}: {ref} = {v} is not written in {measured!r}")
