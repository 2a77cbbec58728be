"""The block registry (hw/) and the regression registry (rtl_tests/) agree, and production code
names no testbench: hw/ imports nothing from rtl_tests, and neither registry imports Amaranth or
cocotb when imported."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from hikv.hw.blocks import BLOCKS, get_block
from hikv.params import ParamError
from hikv.rtl_tests.registry import REGRESSIONS, get_regression, missing_regressions

ROOT = Path(__file__).resolve().parent.parent


def test_every_block_has_a_regression_and_every_regression_a_block() -> None:
    assert missing_regressions() == []
    assert set(REGRESSIONS) == set(BLOCKS)
    for name in BLOCKS:
        assert callable(get_regression(name)) and get_block(name).name == name


def test_unknown_block_names_the_known_ones() -> None:
    with pytest.raises(ParamError, match="unknown block 'nope'.*sorter"):
        get_regression("nope")


def test_hw_imports_no_testbench_code() -> None:
    """No module of hw/ imports rtl_tests or names it in a string."""
    for path in sorted((ROOT / "hw").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if "rtl_tests" in node.value.split(":")[0] else []
            assert not any("rtl_tests" in n for n in names), f"{path.name}: {names}"


def test_registries_import_no_amaranth_or_cocotb() -> None:
    code = ("import sys, hikv.hw.blocks, hikv.rtl_tests.registry; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('amaranth', 'cocotb')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
