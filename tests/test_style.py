"""The code base stays ruff clean (line length 100, pyflakes, bugbear, import order)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_clean():
    local = Path(sys.executable).parent / "ruff"
    ruff = str(local) if local.exists() else shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' installs it)")
    out = subprocess.run([ruff, "check", "--quiet", str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
