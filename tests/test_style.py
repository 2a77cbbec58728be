"""The code base stays ruff clean (line length 100, pyflakes, bugbear, import order), and the
shipped tree reads as a product: no file but CHANGELOG.md, no file name and no test name speaks
of how the work was organised (numbered work sessions, tracker items or rounds)."""

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: what may not appear in a tracked file's text (the pattern of ``git grep -inE``; written with
#: ``[ ]`` so this file does not match itself)
HISTORY_TEXT = re.compile(r"session[ ][0-9]|issue[ ][0-9]|this[ ]session|\bround[ ][0-9]",
                          re.IGNORECASE)
#: what may not appear in a tracked file's path or in a test's name (words joined by ``_``/``-``)
HISTORY_NAME = re.compile(r"session|(?-i:(?<![a-z]))(?:issue|round)[ _-]?[0-9]", re.IGNORECASE)
#: the one file that speaks of versions and what changed between them
HISTORY_ALLOWED = {"CHANGELOG.md"}


def test_ruff_clean():
    local = Path(sys.executable).parent / "ruff"
    ruff = str(local) if local.exists() else shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' installs it)")
    out = subprocess.run([ruff, "check", "--quiet", str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _tracked_files() -> list[str]:
    """Paths (relative to the root) of the files git tracks; skips outside a git checkout."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: the tracked files are not known")
    out = subprocess.run([git, "-C", str(ROOT), "ls-files", "-z"], capture_output=True)
    if out.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout: the tracked files are not known")
    return [p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def _text(path: Path) -> str | None:
    """The file's text, or None for a binary file (a NUL byte) or one that is not there."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None                         # deleted or moved in the working tree, not staged
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")


def test_no_tracked_text_speaks_of_how_the_work_was_organised():
    """``git grep -inE`` with :data:`HISTORY_TEXT` over every tracked text file but CHANGELOG.md
    finds nothing: no numbered work session or tracker item, no round by number (a scheduling
    round is "the first round", "round r"); what changed goes in the changelog, by version."""
    hits = []
    for rel in _tracked_files():
        if rel in HISTORY_ALLOWED:
            continue
        text = _text(ROOT / rel)
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if HISTORY_TEXT.search(line):
                hits.append(f"{rel}:{n}: {line.strip()[:100]}")
    assert not hits, (f"{len(hits)} line(s) speak of how the work was organised (state the fact "
                      "without the history; CHANGELOG.md is the place for what changed):\n"
                      + "\n".join(hits))


def test_no_file_name_speaks_of_how_the_work_was_organised():
    """No tracked path names a work session, a numbered tracker item or a numbered round."""
    bad = [rel for rel in _tracked_files() if HISTORY_NAME.search(rel)]
    assert not bad, "file names that speak of how the work was organised:\n" + "\n".join(bad)


def test_no_test_name_speaks_of_how_the_work_was_organised():
    """Test functions and classes of tests/ and rtl_tests/ (read from the files, so no git)."""
    bad = []
    for folder in ("tests", "rtl_tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                        and node.name.lower().startswith("test") \
                        and HISTORY_NAME.search(node.name):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}")
    assert not bad, "test names that speak of how the work was organised:\n" + "\n".join(bad)
