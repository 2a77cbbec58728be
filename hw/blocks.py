"""Registry of RTL blocks: how to build each from a :class:`~hikv.params.Config` (its
Amaranth component and Verilog top module). Used by ``hikv verilog``, the area flow
(:mod:`hikv.sim.eda.area`) and, beside :mod:`hikv.rtl_tests.registry` (each block's cocotb
regression), by ``hikv rtl`` and the pytest launchers.

This module knows nothing of testbenches. Its builders import the RTL inside the function, so
importing the registry (and ``hikv --help``) does not import Amaranth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hikv.params import Config, ParamError

__all__ = ["Block", "BLOCKS", "get_block"]


@dataclass(frozen=True)
class Block:
    """One RTL block.

    Parameters
    ----------
    name : str
        Registry key (``hikv verilog --block NAME``).
    description : str
        One line for the help texts.
    toplevel : str
        Verilog top module name.
    make : Callable[[Config], wiring.Component]
        Builds the block of a configuration.
    """

    name: str
    description: str
    toplevel: str
    make: Callable[[Config], Any]

    def component(self, cfg: Config) -> Any:
        """The Amaranth component of ``cfg``."""
        return self.make(cfg)

    def verilog(self, cfg: Config) -> str:
        """Verilog of the block of ``cfg`` (one flat module named :attr:`toplevel`)."""
        from hikv.hw.verilog import to_verilog

        return to_verilog(self.component(cfg), self.toplevel)


def _sorter(cfg: Config) -> Any:
    from hikv.hw.sorter import make_sorter

    return make_sorter(cfg)


def _loader(cfg: Config) -> Any:
    from hikv.hw.loader import make_loader

    return make_loader(cfg)


def _sorter_loader(cfg: Config) -> Any:
    from hikv.hw.sorter_loader import make_sorter_loader

    return make_sorter_loader(cfg)


def _scorer(cfg: Config) -> Any:
    from hikv.hw.scorer import make_scorer

    return make_scorer(cfg)


def _scorer_sorter(cfg: Config) -> Any:
    from hikv.hw.scorer_sorter import make_scorer_sorter

    return make_scorer_sorter(cfg)


#: name -> Block. Each RTL block adds one entry (and its regression in
#: :data:`hikv.rtl_tests.registry.REGRESSIONS`).
BLOCKS: dict[str, Block] = {
    "sorter": Block(
        name="sorter",
        description="reconfigurable importance sorter: Stage I top-k of a token stream, "
                    "Stage II top-r of each short vector (docs/sorter.md)",
        toplevel="hikv_sorter",
        make=_sorter,
    ),
    "loader": Block(
        name="loader",
        description="two-level KV loader: retained token slots -> AXI4 reads -> packed "
                    "vectors (docs/loader.md)",
        toplevel="hikv_loader",
        make=_loader,
    ),
    "sorter_loader": Block(
        name="sorter_loader",
        description="sorter Stage I chained into the loader: token scores -> packed vectors",
        toplevel="hikv_sorter_loader",
        make=_sorter_loader,
    ),
    "scorer": Block(
        name="scorer",
        description="low-bit scoring unit: Stage I scores of b-bit keys as sorter keys "
                    "(model/refs/lowbit.py)",
        toplevel="hikv_scorer",
        make=_scorer,
    ),
    "scorer_sorter": Block(
        name="scorer_sorter",
        description="scoring unit chained into the sorter's Stage I: stored low-bit keys -> "
                    "selected token indices",
        toplevel="hikv_scorer_sorter",
        make=_scorer_sorter,
    ),
}


def get_block(name: str) -> Block:
    """The registered block ``name``; :class:`~hikv.params.ParamError` naming the known ones."""
    try:
        return BLOCKS[name]
    except KeyError:
        known = sorted(BLOCKS) or ["(none yet)"]
        raise ParamError(f"unknown block {name!r}; known blocks: {known}") from None
