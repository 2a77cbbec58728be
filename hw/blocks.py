"""Registry of RTL blocks: how to build each from a :class:`~hikv.params.Config` (its
Amaranth component and Verilog top module), how many copies of it the accelerator of a
configuration holds (:meth:`Block.instances`; the loader's rule is :func:`loader_instances`) and
which blocks a chained block is made of (:attr:`Block.parts`). Used by ``hikv verilog``, the
area flow (:mod:`hikv.sim.eda.area`), the cost model (:mod:`hikv.sim.cost.attention_model`,
:mod:`hikv.sim.cost.blocks`) and, beside :mod:`hikv.rtl_tests.registry` (each block's cocotb
regression), by ``hikv rtl`` and the pytest launchers.

This module knows nothing of testbenches. Its builders import the RTL inside the function, so
importing the registry (and ``hikv --help``) does not import Amaranth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hikv.params import Config, HiKVPolicy, ParamError, SorterKind, Stage2Kind

__all__ = ["Block", "BLOCKS", "get_block", "loader_instances", "KINDS", "ENGINE_BLOCKS",
           "STAGE2_BLOCKS", "SORT_BLOCKS", "engine_block", "hikv_stage2", "kind_name",
           "sort_blocks"]


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
    count : Callable[..., int | numpy.ndarray] or None
        Copies of the block in the accelerator of a configuration, called as
        ``count(cfg, bandwidth_bytes_per_s, clock_hz=...)`` (:meth:`instances`); None: one.
    parts : tuple of str
        The registered blocks a chained block is made of (it is never counted beside them);
        empty for a block of its own.
    """

    name: str
    description: str
    toplevel: str
    make: Callable[[Config], Any]
    count: Callable[..., Any] | None = None
    parts: tuple[str, ...] = ()

    def instances(self, cfg: Config, *, clock_hz: float | None = None,
                  bandwidth_bytes_per_s: Any = None) -> Any:
        """Copies of the block in the accelerator of ``cfg``, the block clocked at
        ``clock_hz`` (default ``accel.clock_hz``), for the memory bandwidth
        ``bandwidth_bytes_per_s`` (default ``accel.mem_bandwidth_bytes_per_s``; an array gives
        an array): :attr:`count`'s rule, else one."""
        if self.count is None:
            return 1
        return self.count(cfg, bandwidth_bytes_per_s, clock_hz=clock_hz)

    def component(self, cfg: Config) -> Any:
        """The Amaranth component of ``cfg``."""
        return self.make(cfg)

    def verilog(self, cfg: Config) -> str:
        """Verilog of the block of ``cfg`` (one flat module named :attr:`toplevel`)."""
        from hikv.hw.verilog import to_verilog

        return to_verilog(self.component(cfg), self.toplevel)


def loader_instances(cfg: Config, bandwidth_bytes_per_s: Any = None, *,
                     clock_hz: float | None = None) -> Any:
    """Loaders that sustain the memory bandwidth (``cfg``'s, or an array of them), each
    clocked at ``clock_hz`` (default ``accel.clock_hz``; the cost model passes the loader's own
    clock, :mod:`hikv.sim.cost.clocks`). The instance count of the area flow
    (:func:`hikv.sim.eda.area.accelerator_area`), the cost model
    (:func:`hikv.sim.cost.attention_model.attention_cost`) and the sweeps.

    One loader carries ``steady_bytes_per_cycle`` = ``beat_bytes x min(1, N b / (L + b))``
    (:func:`hikv.hw.loader_timing.steady_bytes_per_cycle`) with requests of ``b =
    max_burst_beats`` beats, ``N = max_outstanding`` reads in flight and ``L`` the memory
    latency in cycles (``max(1, round(mem_latency_s x clock_hz))``): each outstanding slot
    carries one request per ``L + b`` cycles (the RTL frees a slot the cycle after the
    request's last beat). So ``ceil(bandwidth / (clock x steady_bytes_per_cycle))`` loaders, at
    least one: an int, or an array of floats for an array of bandwidths. The `default` and
    `paper` loaders read one 64-B burst per beat with enough reads in flight to cover the
    latency (64 B/cycle each, also for one scattered row per request), so this is a small fixed
    number: 4 for `default` (256 B/cycle), 8 for `paper` (460 B/cycle) at 1 GHz; a beat is never
    wider than a burst, as a wider one would read bytes the burst account does not count
    (docs/loader.md, "Limits").
    """
    import numpy as np

    from hikv.hw.loader_timing import LoaderGeometry, steady_bytes_per_cycle

    a = cfg.accel
    hz = a.clock_hz if clock_hz is None else clock_hz
    bw = np.asarray(a.mem_bandwidth_bytes_per_s if bandwidth_bytes_per_s is None
                    else bandwidth_bytes_per_s, dtype=float)
    lat = max(1, round(a.mem_latency_s * hz))
    per = steady_bytes_per_cycle(LoaderGeometry(cfg.layout, cfg.loader), latency=lat)
    out = np.maximum(1, np.ceil(bw / (hz * per) - 1e-9))
    return int(out) if out.ndim == 0 else out


def _sorter(cfg: Config) -> Any:
    from hikv.hw.sorter import make_sorter

    return make_sorter(cfg)


def _topk(cfg: Config) -> Any:
    from hikv.hw.topk import make_topk

    return make_topk(cfg)


def _stage2(cfg: Config) -> Any:
    from hikv.hw.stage2_select import make_stage2

    return make_stage2(cfg)


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
    "topk": Block(
        name="topk",
        description="radix-select top-k engine: the sorter's Stage I contract, one histogram "
                    "pass per key digit over an SRAM (docs/topk.md)",
        toplevel="hikv_topk",
        make=_topk,
    ),
    "stage2": Block(
        name="stage2",
        description="Stage II selection block: top r of each vector of layout.head_dim keys "
                    "at the sorter's Stage II rate, beside the top-k engine (docs/topk.md)",
        toplevel="hikv_stage2",
        make=_stage2,
    ),
    "loader": Block(
        name="loader",
        description="two-level KV loader: retained token slots -> AXI4 reads -> packed "
                    "vectors (docs/loader.md)",
        toplevel="hikv_loader",
        make=_loader,
        count=loader_instances,
    ),
    "sorter_loader": Block(
        name="sorter_loader",
        description="sorter Stage I chained into the loader: token scores -> packed vectors",
        toplevel="hikv_sorter_loader",
        make=_sorter_loader,
        parts=("sorter", "loader"),
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
        parts=("scorer", "sorter"),
    ),
}


def get_block(name: str) -> Block:
    """The registered block ``name``; :class:`~hikv.params.ParamError` naming the known ones."""
    try:
        return BLOCKS[name]
    except KeyError:
        known = sorted(BLOCKS) or ["(none yet)"]
        raise ParamError(f"unknown block {name!r}; known blocks: {known}") from None


# HiKV's sort blocks per ``SorterParams.kind`` (priced by hikv.sim.cost.engines)

#: the values of ``SorterParams.kind``
KINDS: tuple[str, ...] = tuple(k.value for k in SorterKind)
#: kind -> the registered block (:data:`hikv.hw.blocks.BLOCKS`) that runs Stage I
ENGINE_BLOCKS: dict[str, str] = {"merge": "sorter", "radix": "topk"}
#: kind -> the registered block that runs HiKV's Stage II jobs
STAGE2_BLOCKS: dict[str, str] = {"merge": "sorter", "radix": "stage2"}
#: every block a kind may build for sorting (the clocks the cost model may time)
SORT_BLOCKS: tuple[str, ...] = ("sorter", "topk", "stage2")


def kind_name(cfg_or_kind: Config | str | SorterKind) -> str:
    """The ``SorterParams.kind`` value of a configuration, or of a kind given by name."""
    if isinstance(cfg_or_kind, Config):
        return cfg_or_kind.sorter.kind.value
    return SorterKind(cfg_or_kind).value


def engine_block(kind: Config | str | SorterKind) -> str:
    """The block that runs Stage I for ``kind`` (or a configuration's ``sorter.kind``)."""
    return ENGINE_BLOCKS[kind_name(kind)]


def hikv_stage2(policy: HiKVPolicy | Config) -> bool:
    """Whether HiKV's policy has Stage II sort jobs (a ``k_rule`` selecting channels per
    query or a ``STATIC`` rule on K or V; ThinK's channels are fixed at prefill, no job)."""
    p = policy.policy if isinstance(policy, Config) else policy
    sorted_k = (Stage2Kind.QUERY_CHANNELS, Stage2Kind.CHANNEL_GROUPS, Stage2Kind.STATIC)
    return p.k_rule.kind in sorted_k or p.v_rule.kind is Stage2Kind.STATIC


def sort_blocks(cfg: Config, kind: str | None = None) -> tuple[str, ...]:
    """The sort blocks HiKV's accelerator builds for ``cfg`` (``kind`` in place of
    ``cfg.sorter.kind`` when given): the Stage I engine, then the Stage II block
    (:data:`STAGE2_BLOCKS`) where it is another block and HiKV's policy has a Stage II rule."""
    k = kind_name(kind or cfg)
    stage1, stage2 = ENGINE_BLOCKS[k], STAGE2_BLOCKS[k]
    if stage2 != stage1 and hikv_stage2(cfg):
        return (stage1, stage2)
    return (stage1,)
