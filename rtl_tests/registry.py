"""Registry of block regressions: block name (as in :data:`hikv.hw.blocks.BLOCKS`) -> the
function that builds the block's Verilog and runs its cocotb regression against the golden
model. Used by ``hikv rtl``, :mod:`hikv.rtl_tests.rtl_cycles` and the pytest launchers.

A regression is called as ``fn(cfg, *, seed, jobs=None, waves=False, simulator="verilator",
**extra)`` and returns an :class:`~hikv.rtl_tests.report.RtlReport`; ``extra`` goes to blocks
that take more (the chained block's ``capture``). Importing this module imports neither
Amaranth nor cocotb (the launchers import them inside their functions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hikv.hw.blocks import BLOCKS, get_block
from hikv.params import Config, ParamError

from . import gadakv_rtl, loader_launch, scorer_launch, stage2_rtl, topk_rtl
from .report import RtlReport

__all__ = ["RtlReport", "Regression", "REGRESSIONS", "get_regression", "run_regression",
           "missing_regressions"]

Regression = Callable[..., RtlReport]

#: block name -> regression. Each RTL block of :data:`hikv.hw.blocks.BLOCKS` adds one entry.
REGRESSIONS: dict[str, Regression] = {
    "sorter": gadakv_rtl.sorter_regression,        # traffic "random" (default) or "gadakv"
    "topk": topk_rtl.run_regression,
    "stage2": stage2_rtl.run_regression,
    "loader": loader_launch.run_regression,
    "sorter_loader": loader_launch.run_chain_regression,
    "scorer": scorer_launch.run_regression,
    "scorer_sorter": scorer_launch.run_chain_regression,
}


def get_regression(name: str) -> Regression:
    """The regression of block ``name``; :class:`~hikv.params.ParamError` for a block that is
    not registered or has no regression."""
    get_block(name)                       # unknown block: the registry's message
    try:
        return REGRESSIONS[name]
    except KeyError:
        have = sorted(REGRESSIONS)
        raise ParamError(f"block {name!r} has no regression; blocks with one: {have}") \
            from None


def run_regression(name: str, cfg: Config, *, seed: int, jobs: int | None = None,
                   waves: bool = False, simulator: str = "verilator",
                   **extra: Any) -> RtlReport:
    """Run the regression of block ``name`` for ``cfg`` (see the module docstring)."""
    return get_regression(name)(cfg, seed=seed, jobs=jobs, waves=waves, simulator=simulator,
                                **extra)


def missing_regressions() -> list[str]:
    """Registered blocks without a regression (a test requires none)."""
    return sorted(set(BLOCKS) - set(REGRESSIONS))
