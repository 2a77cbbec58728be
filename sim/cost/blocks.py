"""One record per RTL block of what the cost model knows about it: :class:`BlockCost`.

The cost of a block of :data:`hikv.hw.blocks.BLOCKS` comes from five places: its cycles from its
timing contract in :mod:`hikv.hw` (through :mod:`hikv.sim.cost.timing`), its area from synthesis
(:mod:`hikv.sim.eda.area`), its clock from the timing flow (:mod:`hikv.sim.cost.clocks`), its
energy per action from :mod:`hikv.sim.cost.energy` and its instance count from the registry
(:meth:`hikv.hw.blocks.Block.instances`). :func:`block_cost` gathers them into one record found
by the block's name, the way Accelergy keeps a component's area, energy per action and actions
together; :func:`block_costs` gives every registered block's. Every number is those modules'
own (nothing here is a second formula), and the record takes the clocks and syntheses a caller
already has (a report's :class:`~hikv.sim.cost.clocks.Clocks` and
:attr:`hikv.sim.eda.area.AcceleratorArea.synth`), so it costs no synthesis of its own unless
asked for (``area="cached"`` or ``"synthesise"``).

==============  ==========================================  ==============  ====================
block           cycles (in the block's own clock)           actions         instances
==============  ==========================================  ==============  ====================
sorter          ``cycles(mode, n=, k=, d=, count=)``        compare         1
topk            ``cycles("stage1", n=, k=)``                compare, digit  1
stage2          ``cycles(d=, count=)``                      radix_step      1
loader          ``cycles(bytes=, requests=, ...)``          request, beat   bandwidth rule
scorer          ``cycles(tokens=, jobs=1, lanes=None)``     mac, token      1
sorter_loader   none of its own (its parts' contracts)      its parts'      1, never counted
scorer_sorter   ``cycles(n=, k=)`` (its chain contract)     its parts'      1, never counted
==============  ==========================================  ==============  ====================

Units are SI: m^2, Hz, J, cycles. A chained block (:attr:`hikv.hw.blocks.Block.parts`) runs at
the slower of its parts' clocks and its actions are its parts', named ``part.action``. The
top-k engine (``topk``, :mod:`hikv.hw.topk`) takes Stage I jobs in the sorter's place and the
Stage II selection block (``stage2``, :mod:`hikv.hw.stage2_select`) HiKV's Stage II jobs beside
it; where the clocks list neither, each runs at the sorter's clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hikv.hw.blocks import BLOCKS, Block, get_block
from hikv.hw.sorter_timing import SorterTiming
from hikv.hw.stage2_timing import stage2_block_cycles
from hikv.hw.topk_timing import TopKTiming, topk_cycles
from hikv.params import Config, ParamError
from hikv.sim.cost import energy as E
from hikv.sim.cost.attention_model import scorer_cycles, stage2_step_energy_j
from hikv.sim.cost.clocks import Clocks, assumed_clocks
from hikv.sim.cost.engines import area_blocks
from hikv.sim.cost.timing import TimingModel, default_timing, unique_apply
from hikv.sim.eda.area import SynthResult, area_items, block_synth

__all__ = ["AREA_MODES", "BlockCost", "block_cost", "block_costs"]

ArrayLike = Any
#: where :func:`block_cost` takes a block's area from: ``"given"`` (only the syntheses passed
#: in, no Verilog elaborated), ``"cached"`` (also the synthesis cache: the block's Verilog is
#: elaborated for its key, no Yosys run), ``"synthesise"`` (Yosys on a cache miss)
AREA_MODES = ("given", "cached", "synthesise")


@dataclass(frozen=True)
class BlockCost:
    """What the cost model knows about one RTL block of a configuration (SI units).

    ``area_m2`` is one instance's (logic and SRAM macros at ``tech_nm``; NaN when no synthesis
    was given or found, ``area_source`` says why); ``clock_hz`` the clock the block runs at
    under the configuration's clock policy; ``energy_per_action_j`` joules per action by action
    name; ``instances`` the copies in the accelerator, counted in its area and time where
    ``used`` (the scorer only where the preset scores Stage I from low-bit keys; the sorter and
    the top-k engine as ``sorter.kind`` says, :func:`hikv.sim.cost.engines.sort_blocks`; a
    chained block never, it is its ``parts``). :meth:`cycles` is the block's timing contract.
    """

    name: str
    tech_nm: int
    instances: int
    used: bool
    parts: tuple[str, ...]
    area_m2: float
    area_source: str
    clock_hz: float
    clock_origin: str
    clock_source: str
    energy_per_action_j: Mapping[str, float]
    energy_source: str
    cycles_source: str
    cycles_fn: Callable[..., ArrayLike] | None = field(default=None, repr=False,
                                                      compare=False)

    @property
    def has_cycles(self) -> bool:
        """Whether the block has a timing contract of its own."""
        return self.cycles_fn is not None

    def cycles(self, *args: Any, **job: Any) -> ArrayLike:
        """Cycles of one job in the block's own clock, by its timing contract (the module
        docstring lists each block's arguments; numpy arrays broadcast)."""
        if self.cycles_fn is None:
            raise ParamError(f"block {self.name!r} has no timing contract of its own: "
                             f"{self.cycles_source}")
        return self.cycles_fn(*args, **job)

    def energy_j(self, **counts: ArrayLike) -> ArrayLike:
        """Energy of ``counts`` actions (action name -> count): the sum of count x energy per
        action (numpy arrays broadcast)."""
        bad = sorted(set(counts) - set(self.energy_per_action_j))
        if bad:
            raise ParamError(f"block {self.name!r} has no action {bad}; its actions: "
                             f"{sorted(self.energy_per_action_j)}")
        return sum(c * self.energy_per_action_j[a] for a, c in counts.items())

    @property
    def total_area_m2(self) -> float:
        """The area of all ``instances`` (counted in the accelerator's only where ``used``)."""
        return self.instances * self.area_m2


# --------------------------------------------------------------------------- per block
def _sorter_energy(cfg: Config, tech: int) -> tuple[dict[str, float], str]:
    w = SorterTiming.from_params(cfg.sorter).item_width
    return ({"compare": float(E.sorter_energy_j(1, w, tech))},
            f"hikv.sim.cost.energy.sorter_energy_j: a comparator evaluation is one integer "
            f"add of the {w}-bit compared item")


def _topk_energy(cfg: Config, tech: int) -> tuple[dict[str, float], str]:
    w, b = cfg.sorter.key_width, TopKTiming.from_params(cfg.sorter).digit_bits
    return ({"compare": float(E.sorter_energy_j(1, w, tech)),
             "digit_compare": float(E.sorter_energy_j(1, b, tech))},
            f"hikv.sim.cost.energy.sorter_energy_j: a key comparison "
            f"(TopKTiming.stage1_compares) is one integer add of the {w}-bit key, a digit "
            f"comparison (stage1_digit_compares) one of the {b}-bit digit")


def _stage2_energy(cfg: Config, tech: int) -> tuple[dict[str, float], str]:
    d = cfg.layout.head_dim
    return ({"radix_step": float(stage2_step_energy_j(d, tech))},
            f"hikv.sim.cost.attention_model.stage2_step_energy_j: a radix step (W + ceil(log2 "
            f"d) per vector) is a popcount of d = {d} bits, priced as ceil(d / 32) integer "
            f"adds of min(d, 32) bits")


def _loader_energy(cfg: Config, tech: int) -> tuple[dict[str, float], str]:
    return ({"request": float(E.loader_energy_j(1, 0, tech)),
             "beat": float(E.loader_energy_j(0, 1, tech))},
            "hikv.sim.cost.energy.loader_energy_j: an address add and a length compare per "
            "AXI request, a byte counter add per data beat (int32 adds)")


def _scorer_energy(cfg: Config, tech: int) -> tuple[dict[str, float], str]:
    b, q, d = cfg.policy.lowbit_bits, cfg.scorer.query_bits, cfg.layout.head_dim
    return ({"mac": float(E.scorer_mac_energy_j(b, q, d, tech)),
             "token": float(E.scorer_energy_j(0, 1, b, q, d, tech))},
            f"hikv.sim.cost.energy.scorer_energy_j: a {b} x {q}-bit integer MAC "
            "(scorer_mac_energy_j) and per scored (token, query) the exact score "
            "(SCORER_TOKEN_ACTIONS)")


#: block -> energy per action of its own (chained blocks take their parts')
_ENERGY: dict[str, Callable[[Config, int], tuple[dict[str, float], str]]] = {
    "sorter": _sorter_energy,
    "topk": _topk_energy,
    "stage2": _stage2_energy,
    "loader": _loader_energy,
    "scorer": _scorer_energy,
}


def _sorter_cycles(cfg: Config, timing: TimingModel, clock_hz: float
                   ) -> tuple[Callable[..., ArrayLike], str]:
    def cycles(mode: str, *, n: ArrayLike = 0, k: ArrayLike = 0, d: ArrayLike = 0,
               count: ArrayLike = 0) -> ArrayLike:
        return timing.sorter_cycles(cfg.sorter, mode, n=n, k=k, d=d, count=count)

    return cycles, f"timing model {timing.name!r} (sorter_cycles): {timing.source}"


def _topk_cycles(cfg: Config, timing: TimingModel, clock_hz: float
                 ) -> tuple[Callable[..., ArrayLike], str]:
    def cycles(mode: str, *, n: ArrayLike = 0, k: ArrayLike = 0) -> ArrayLike:
        return unique_apply(lambda a, b: float(topk_cycles(cfg.sorter, mode, n=a, k=b)), n, k)

    return cycles, ("hikv.hw.topk_timing.topk_cycles: the radix-select engine's Stage I "
                    "contract, asserted in cocotb")


def _stage2_cycles(cfg: Config, timing: TimingModel, clock_hz: float
                   ) -> tuple[Callable[..., ArrayLike], str]:
    def cycles(*, d: ArrayLike, count: ArrayLike) -> ArrayLike:
        return unique_apply(lambda a, b: float(stage2_block_cycles(cfg.sorter, d=a, count=b)),
                            d, count)

    return cycles, ("hikv.hw.stage2_timing.stage2_block_cycles: the Stage II block's "
                    "contract (count D + D + S + 4), asserted in cocotb")


def _loader_cycles(cfg: Config, timing: TimingModel, clock_hz: float
                   ) -> tuple[Callable[..., ArrayLike], str]:
    def cycles(*, bytes: ArrayLike, requests: ArrayLike,
               mem_latency_cycles: ArrayLike | None = None, records: ArrayLike = 0,
               page_tokens: ArrayLike = 0) -> ArrayLike:
        lat = (cfg.accel.mem_latency_s * clock_hz if mem_latency_cycles is None
               else mem_latency_cycles)
        return timing.loader_cycles(cfg.loader, cfg.layout, bytes=bytes, requests=requests,
                                    mem_latency_cycles=lat, records=records,
                                    page_tokens=page_tokens)

    return cycles, (f"timing model {timing.name!r} (loader_cycles; memory latency "
                    f"mem_latency_s x the loader's clock unless given): {timing.source}")


def _scorer_cycles(cfg: Config, timing: TimingModel, clock_hz: float
                   ) -> tuple[Callable[..., ArrayLike], str]:
    def cycles(*, tokens: ArrayLike, jobs: int = 1, lanes: ArrayLike | None = None
               ) -> ArrayLike:
        return scorer_cycles(cfg.scorer, tokens, jobs, lanes)

    return cycles, ("hikv.sim.cost.attention_model.scorer_cycles: "
                    "hikv.hw.scorer_timing.ScorerTiming (the first job's cycles, each further "
                    "one its throughput cycles)")


def _scorer_sorter_cycles(cfg: Config, timing: TimingModel, clock_hz: float
                          ) -> tuple[Callable[..., ArrayLike], str]:
    def cycles(*, n: ArrayLike, k: ArrayLike) -> ArrayLike:
        from hikv.hw.scorer_sorter import chain_cycles

        return unique_apply(lambda a, b: float(chain_cycles(cfg, a, b)), n, k)

    return cycles, ("hikv.hw.scorer_sorter.chain_cycles: the sorter's Stage I cycles plus "
                    "the scoring unit's latency, asserted in cocotb")


#: block -> its timing contract (a block missing here and in :data:`_NO_CYCLES` has no record)
_CYCLES: dict[str, Callable[[Config, TimingModel, float],
                            tuple[Callable[..., ArrayLike], str]]] = {
    "sorter": _sorter_cycles,
    "topk": _topk_cycles,
    "stage2": _stage2_cycles,
    "loader": _loader_cycles,
    "scorer": _scorer_cycles,
    "scorer_sorter": _scorer_sorter_cycles,
}
#: blocks without a timing contract of their own, and why
_NO_CYCLES: dict[str, str] = {
    "sorter_loader": "none of its own: its regression checks its outputs, not its cycles; "
                     "its parts' contracts (sorter Stage I, then the loader) time it",
}


#: blocks that run at another block's clock where :mod:`hikv.sim.cost.clocks` gives them none:
#: the top-k engine takes the sorter's Stage I jobs, the Stage II block HiKV's Stage II jobs
_CLOCK_OF: dict[str, str] = {"topk": "sorter", "stage2": "sorter"}


# --------------------------------------------------------------------------- records
def _clock(block: Block, clocks: Clocks) -> tuple[float, str, str]:
    """(Hz it runs at, origin, source) of ``block`` under ``clocks``."""
    if block.name in _CLOCK_OF and block.name not in clocks.blocks:
        hz, origin, src = _clock(get_block(_CLOCK_OF[block.name]), clocks)
        return hz, origin, f"the {_CLOCK_OF[block.name]}'s clock, in whose place it runs: {src}"
    if block.parts:
        parts = {p: _clock(get_block(p), clocks) for p in block.parts}
        slow = min(parts, key=lambda p: parts[p][0])
        hz, origin, src = parts[slow]
        return hz, origin, (f"the slower of its parts' clocks ({', '.join(block.parts)}; one "
                            f"clock runs the chain): the {slow}'s, {src}")
    if block.name not in clocks.blocks:
        raise ParamError(f"block {block.name!r} has no clock in hikv.sim.cost.clocks "
                         f"(blocks there: {sorted(clocks.blocks)})")
    c = clocks.blocks[block.name]
    hz = float(clocks.hz(block.name))
    src = c.source
    if hz != c.hz:
        src += (f"; runs at {hz / 1e6:.0f} MHz, the slowest used block's clock "
                f"(clock_policy {clocks.policy!r})")
    return hz, c.origin, src


def _energy(block: Block, cfg: Config, tech: int) -> tuple[dict[str, float], str]:
    if block.parts:
        per: dict[str, float] = {}
        src = []
        for p in block.parts:
            e, s = _energy(get_block(p), cfg, tech)
            per.update({f"{p}.{a}": v for a, v in e.items()})
            src.append(f"{p}: {s}")
        return per, "its parts' actions; " + "; ".join(src)
    if block.name not in _ENERGY:
        raise ParamError(f"block {block.name!r} has no energy per action in "
                         "hikv.sim.cost.blocks")
    return _ENERGY[block.name](cfg, tech)


def _area(block: Block, cfg: Config, instances: int, synth: Mapping[str, SynthResult] | None,
          area: str) -> tuple[float, str]:
    res = (synth or {}).get(block.name)
    if res is None and area == "cached":
        res = block_synth(block, cfg, cached_only=True)
    elif res is None and area == "synthesise":
        res = block_synth(block, cfg)
    if res is None:
        why = ("no synthesis given" if area == "given" else "no cached synthesis")
        return math.nan, f"not known: {why} (area={area!r}; see hikv.sim.cost.blocks.AREA_MODES)"
    items = area_items(block.name, instances, res, cfg.accel.tech_nm, "synthesised")
    return (float(sum(i.unit_area_m2 for i in items)),
            "; ".join(dict.fromkeys(i.origin for i in items)))


def block_cost(name: str, cfg: Config, *, clocks: Clocks | None = None,
               synth: Mapping[str, SynthResult] | None = None, area: str = "given",
               timing: TimingModel | None = None) -> BlockCost:
    """The cost record of the registered block ``name`` for ``cfg``.

    ``clocks``: every block's clock (:func:`hikv.sim.cost.clocks.accelerator_clocks`, as a
    report has them); default :func:`hikv.sim.cost.clocks.assumed_clocks` (no synthesis).
    ``synth``: syntheses already made, by block name (e.g.
    :attr:`hikv.sim.eda.area.AcceleratorArea.synth`); ``area`` where else the area may come
    from (:data:`AREA_MODES`; the default elaborates no Verilog). ``timing``: the timing model
    of the sorter's and loader's cycles (default :func:`hikv.sim.cost.timing.default_timing`).
    The loader's instance count is taken at its clock under ``clocks``, as the cost model and
    the report's area take it.
    """
    if area not in AREA_MODES:
        raise ParamError(f"area = {area!r} is not one of {AREA_MODES}")
    block = get_block(name)
    if name not in _CYCLES and name not in _NO_CYCLES:
        raise ParamError(f"block {name!r} has no timing contract in hikv.sim.cost.blocks")
    clocks = clocks or assumed_clocks(cfg)
    timing = timing or default_timing()
    tech = cfg.accel.tech_nm
    hz, origin, clock_src = _clock(block, clocks)
    n = int(block.instances(cfg, clock_hz=hz))
    area_m2, area_src = _area(block, cfg, n, synth, area)
    energy, energy_src = _energy(block, cfg, tech)
    if name in _CYCLES:
        fn, cyc_src = _CYCLES[name](cfg, timing, hz)
    else:
        fn, cyc_src = None, _NO_CYCLES[name]
    return BlockCost(name=name, tech_nm=tech, instances=n, used=name in area_blocks(cfg),
                     parts=block.parts, area_m2=area_m2, area_source=area_src, clock_hz=hz,
                     clock_origin=origin, clock_source=clock_src,
                     energy_per_action_j=energy, energy_source=energy_src,
                     cycles_source=cyc_src, cycles_fn=fn)


def block_costs(cfg: Config, *, clocks: Clocks | None = None,
                synth: Mapping[str, SynthResult] | None = None, area: str = "given",
                timing: TimingModel | None = None) -> dict[str, BlockCost]:
    """:func:`block_cost` of every block of :data:`hikv.hw.blocks.BLOCKS`, by name."""
    clocks = clocks or assumed_clocks(cfg)
    return {name: block_cost(name, cfg, clocks=clocks, synth=synth, area=area, timing=timing)
            for name in BLOCKS}
