"""Registry of RTL blocks: how to build each from a :class:`~hikv.params.Config` and how to run
its cocotb regression. Used by ``hikv verilog``, ``hikv rtl`` and the pytest launchers.

Entries name their implementation as ``"module:attribute"`` strings so that importing this
registry (and ``hikv --help``) does not import Amaranth or cocotb.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hikv.params import Config, ParamError

__all__ = ["Block", "RtlReport", "BLOCKS", "get_block"]


@dataclass(frozen=True)
class RtlReport:
    """Outcome of one block regression (``hikv rtl``)."""

    block: str
    preset: str
    seed: int
    jobs: int
    passed: bool
    lines: tuple[str, ...] = ()      # human-readable summary, printed by ``hikv rtl``
    metrics: dict[str, Any] = field(default_factory=dict)  # e.g. measured cycles per mode
    waves: Path | None = None


@dataclass(frozen=True)
class Block:
    name: str
    description: str
    toplevel: str          # Verilog top module name
    make: str              # "module:callable", callable(cfg: Config) -> wiring.Component
    regression: str        # "module:callable", callable(cfg, *, seed, jobs, waves, simulator)
    #                        -> RtlReport

    def component(self, cfg: Config) -> Any:
        return _load(self.make)(cfg)

    def verilog(self, cfg: Config) -> str:
        from hikv.hw.verilog import to_verilog

        return to_verilog(self.component(cfg), self.toplevel)

    def run_regression(self, cfg: Config, *, seed: int, jobs: int | None = None,
                       waves: bool = False, simulator: str = "verilator",
                       **extra: Any) -> RtlReport:
        """Run the block's regression; ``extra`` goes to blocks that take more (the chained
        block's ``capture``)."""
        return _load(self.regression)(cfg, seed=seed, jobs=jobs, waves=waves,
                                      simulator=simulator, **extra)


def _load(ref: str) -> Any:
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


#: name -> Block. Each RTL block adds one entry.
BLOCKS: dict[str, Block] = {}

BLOCKS["sorter"] = Block(
    name="sorter",
    description="reconfigurable importance sorter: Stage I top-k of a token stream, Stage II "
                "top-r of each short vector (docs/sorter.md)",
    toplevel="hikv_sorter",
    make="hikv.hw.sorter:make_sorter",
    regression="hikv.rtl_tests.sorter_rtl:run_regression",
)


def get_block(name: str) -> Block:
    try:
        return BLOCKS[name]
    except KeyError:
        known = sorted(BLOCKS) or ["(none yet)"]
        raise ParamError(f"unknown block {name!r}; known blocks: {known}") from None

BLOCKS["loader"] = Block(
    name="loader",
    description="two-level KV loader: retained token slots -> AXI4 reads -> packed vectors",
    toplevel="hikv_loader",
    make="hikv.hw.loader:make_loader",
    regression="hikv.rtl_tests.loader_launch:run_regression",
)

BLOCKS["sorter_loader"] = Block(
    name="sorter_loader",
    description="sorter Stage I chained into the loader: token scores -> packed vectors",
    toplevel="hikv_sorter_loader",
    make="hikv.hw.sorter_loader:make_sorter_loader",
    regression="hikv.rtl_tests.loader_launch:run_chain_regression",
)

BLOCKS["scorer"] = Block(
    name="scorer",
    description="low-bit scoring unit: Stage I scores of b-bit keys as sorter keys "
                "(model/lowbit.py)",
    toplevel="hikv_scorer",
    make="hikv.hw.scorer:make_scorer",
    regression="hikv.rtl_tests.scorer_launch:run_regression",
)

BLOCKS["scorer_sorter"] = Block(
    name="scorer_sorter",
    description="scoring unit chained into the sorter's Stage I: stored low-bit keys -> "
                "selected token indices",
    toplevel="hikv_scorer_sorter",
    make="hikv.hw.scorer_sorter:make_scorer_sorter",
    regression="hikv.rtl_tests.scorer_launch:run_chain_regression",
)
