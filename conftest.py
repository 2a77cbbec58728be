"""Options shared by the whole suite (``tests/`` and ``rtl_tests/``).

``pytest`` (README's test command, what ``.ci/run`` runs) runs the suite on up to four worker
processes (pytest-xdist, ``-n auto`` in ``pyproject.toml``; ``-n 0`` runs it in one process, as
``HIKV_UPDATE_GOLDEN=1`` does, since the golden files are updated test by test) and
leaves out the tests marked ``extended``: variants of checks that CI already makes on a smaller
or equivalent design (the ``paper`` sorter's lint beside ``default``'s, the 8-bit scoring unit
beside the 4-bit one, ...), kept out of CI's 20 minutes on 2 cores. ``pytest --extended`` runs
them as well; a test named on the command line (``file.py::test[param]``) always runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: the most xdist workers ``-n auto`` starts: each imports torch and builds its own Verilator
#: models, so more than a few add memory and little speed
MAX_AUTO_WORKERS = 4


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--extended", action="store_true", default=False,
                     help="also run the tests marked 'extended' (left out by default and in CI)")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    if os.environ.get("HIKV_UPDATE_GOLDEN") == "1":
        return 0    # the golden files are read, updated and written back test by test
    return max(1, min(os.cpu_count() or 1, MAX_AUTO_WORKERS))


def _named(config: pytest.Config) -> list[tuple[Path, str]]:
    """The ``path::rest`` arguments of the command line (tests asked for by name)."""
    out = []
    for arg in config.invocation_params.args:
        if isinstance(arg, str) and "::" in arg:
            path, rest = arg.split("::", 1)
            out.append(((config.invocation_params.dir / path).resolve(), rest))
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--extended"):
        return
    named = _named(config)

    def asked(item: pytest.Item) -> bool:
        rest = item.nodeid.split("::", 1)[-1]
        return any(item.path.resolve() == p and rest.startswith(r) for p, r in named)

    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("extended") and not asked(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("--extended"):
        return "extended tests: included (--extended)"
    return "extended tests: left out (pytest --extended runs them too)"
