"""The clocks the cost model times each block at.

Blocks (:data:`hikv.params.CLOCK_BLOCKS`): the baseline's ``pe_array`` (MAC and softmax lanes,
:mod:`hikv.hw.baseline_pe`), HiKV's ``sorter``, ``loader`` and low-bit ``scorer``. Each block's
clock comes, in this order of precedence, from

1. ``user``: ``AcceleratorParams.<block>_clock_hz`` > 0, with ``clock_source`` saying where the
   number comes from;
0. except the ``pe_array``, which runs at ``clock_hz`` unless set by hand: it is the baseline
   accelerator's clock, the reference HiKV's blocks are checked against (the baseline is an
   assumed system; our model of its lanes is an area model, its timing estimate is reported
   for information, :func:`_pe_reference`);
2. ``sta``: the timing flow's ASIC estimate at the preset's node
   (:func:`hikv.sim.eda.sta.block_clock`; for the PE array the slower of the MAC lane and the exp
   unit, :func:`hikv.sim.eda.sta.design_sta`), which synthesises through the area flow's cache and
   caches its analysis keyed by the Verilog, so a report never re-synthesises;
3. ``assumed``: ``AcceleratorParams.clock_hz`` when synthesis is not allowed (``--no-area``):
   assumed, not checked.

``clock_policy = "per_block"``: each phase runs at its own block's clock (the cost model's cycle
counts are in the PE array's cycles, the *reference* clock). ``"single"``: the whole accelerator
runs at the slowest used block's clock (one clock tree; the reference clock drops).

A block the preset does not use (the scorer when HiKV's Stage I is not scored from low-bit
keys) is listed with ``used = False`` and never lowers the single clock.

The Stage I engine (:mod:`hikv.sim.cost.engines`): with ``sorter.kind = "radix"`` the top-k
engine (block ``topk``) is listed beside the sorter and times the Stage I jobs; the sorter is
then used only where HiKV's policy has a Stage II rule (it still has its clock: a baseline's
Stage II jobs run on it); where HiKV's policy has a Stage II rule the Stage II selection block
(block ``stage2``) is listed too and times HiKV's Stage II jobs. A hand-set ``sorter_clock_hz``
is every sort block's clock. ``kinds`` of :func:`accelerator_clocks` and :func:`assumed_clocks`
list the radix kind's blocks also where the configuration does not use them (a sweep over
``sorter.kind``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from hikv.params import CLOCK_BLOCKS, Config
from hikv.sim.cost.engines import SORT_BLOCKS, sort_blocks
from hikv.sim.eda.area import scorer_used

__all__ = ["BlockClock", "Clocks", "assumed_clocks", "accelerator_clocks", "engine_clocks",
           "scorer_used"]


@dataclass(frozen=True)
class BlockClock:
    """One block's clock: frequency, origin (``user`` | ``sta`` | ``assumed``), a sentence of
    source and, for ``sta``, the critical path by RTL names."""

    block: str
    hz: float
    origin: str
    source: str
    critical_path: str = ""
    used: bool = True
    #: where the timing estimate came from: ``cache``, ``shipped`` or ``synthesised``
    #: (:mod:`hikv.sim.eda.shipped`); empty without one
    provenance: str = field(default="", compare=False)

    @property
    def checked(self) -> bool:
        """Whether the clock was checked against our RTL (the timing flow) or given by hand."""
        return self.origin in ("sta", "user")


@dataclass(frozen=True)
class Clocks:
    """The clocks of one configuration under its ``clock_policy``."""

    policy: str
    blocks: dict[str, BlockClock] = field(default_factory=dict)

    @property
    def single_hz(self) -> float:
        """The slowest used block's clock."""
        return min(c.hz for c in self.blocks.values() if c.used)

    def hz(self, block: str) -> float:
        """The clock ``block`` runs at under the policy."""
        return self.single_hz if self.policy == "single" else self.blocks[block].hz

    @property
    def reference_hz(self) -> float:
        """The clock the cost model counts cycles in (the PE array's)."""
        return self.hz("pe_array")

    @property
    def assumed(self) -> tuple[str, ...]:
        """Used blocks whose clock is assumed, not checked."""
        return tuple(b for b, c in self.blocks.items() if c.used and not c.checked)

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "reference_hz": self.reference_hz,
                "single_hz": self.single_hz, "assumed": list(self.assumed),
                "blocks": {b: {"hz": c.hz, "effective_hz": self.hz(b), "origin": c.origin,
                               "source": c.source, "critical_path": c.critical_path,
                               "used": c.used} for b, c in self.blocks.items()}}


def _used(cfg: Config, block: str) -> bool:
    if block in SORT_BLOCKS:
        return block in sort_blocks(cfg)
    return block != "scorer" or scorer_used(cfg)


def _blocks(cfg: Config, kinds: tuple[str, ...] | None) -> tuple[str, ...]:
    """CLOCK_BLOCKS, and the radix kind's blocks (the top-k engine, the Stage II block where
    HiKV's policy has a Stage II rule) where ``cfg`` or one of ``kinds`` uses them."""
    extra = set(sort_blocks(cfg))
    if "radix" in (kinds or ()):
        extra |= set(sort_blocks(cfg, "radix"))
    return CLOCK_BLOCKS + tuple(b for b in SORT_BLOCKS if b in extra and b not in CLOCK_BLOCKS)


def _user(cfg: Config, block: str) -> BlockClock | None:
    a = cfg.accel
    field_ = "sorter" if block in SORT_BLOCKS else block
    hz = float(getattr(a, f"{field_}_clock_hz"))
    if hz <= 0:
        return None
    return BlockClock(block, hz, "user", f"given: accel.{field_}_clock_hz ({a.clock_source})",
                      used=_used(cfg, block))


def _assumed(cfg: Config, block: str, why: str) -> BlockClock:
    return BlockClock(block, float(cfg.accel.clock_hz), "assumed",
                      f"assumed, not checked: accel.clock_hz ({why})", used=_used(cfg, block))


def assumed_clocks(cfg: Config, why: str = "no timing estimate requested", *,
                   kinds: tuple[str, ...] | None = None) -> Clocks:
    """Hand-set clocks where given, ``clock_hz`` elsewhere; no synthesis."""
    blocks = {b: _user(cfg, b) or _assumed(cfg, b, why) for b in _blocks(cfg, kinds)}
    return Clocks(cfg.accel.clock_policy, blocks)


def _sta(cfg: Config, block: str) -> BlockClock:
    from hikv.sim.eda.sta import block_clock, unit_sta

    if block == "pe_array":
        from hikv.sim.eda.area import baseline_units
        from hikv.sim.eda.shipped import combined_origin

        worst = None
        origins = []
        for name in baseline_units():
            r = unit_sta(name, cfg)
            origins.append(r.origin)
            if worst is None or r.node_clock_hz < worst[1].node_clock_hz:
                worst = (name, r)
        assert worst is not None
        name, r = worst
        src = (f"hikv.sim.eda.sta: sky130_fd_sc_hd STA of the slower baseline unit ({name}; "
               f"{r.corner.get('process')}, {r.corner.get('vdd_v')} V; no wires) x "
               f"Stillmaker-Baas delay factor {r.node_scale:.3f} to {r.tech_nm} nm")
        return BlockClock(block, r.node_clock_hz, "sta", src, f"{name}: {r.critical.describe()}",
                          provenance=combined_origin(origins))
    note = " (no wires)"
    if block == "scorer" and cfg.scorer.lanes > 1:
        # the lanes are identical copies and the critical path lies within one lane (stage 2's
        # exact score); a 1-lane build is a fraction of the synthesis time of L lanes
        n = cfg.scorer.lanes
        cfg = cfg.replace(scorer=dataclasses.replace(cfg.scorer, lanes=1))
        note = (f" (no wires; on a 1-lane build of the unit: its {n} lanes are identical "
                f"copies with the path inside one lane; the shared query sum's fan-out to "
                f"{n} lanes adds up to {math.ceil(math.log(n, 4))} buffer stage(s), not "
                "counted)")
    c = block_clock(block, cfg)
    return BlockClock(block, float(c["clock_hz"]), "sta", c["source"] + note,
                      c["critical_path"], used=_used(cfg, block),
                      provenance=c.get("origin", ""))


def accelerator_clocks(cfg: Config, *, check: bool = True,
                       kinds: tuple[str, ...] | None = None) -> Clocks:
    """Every block's clock (see the module docstring). ``check=False``: no synthesis, every
    block not set by hand is assumed at ``clock_hz``. A block the preset does not use is not
    synthesised (assumed), except the sort blocks: the sorter (a baseline's Stage II jobs) and
    the radix kind's blocks where ``kinds`` asks for them."""
    if not check:
        return assumed_clocks(cfg, "synthesis not allowed", kinds=kinds)
    blocks = {}
    for b in _blocks(cfg, kinds):
        if b == "pe_array":
            blocks[b] = _user(cfg, b) or _pe_reference(cfg)
            continue
        timed = _used(cfg, b) or b in SORT_BLOCKS
        blocks[b] = (_user(cfg, b) or (_sta(cfg, b) if timed
                                       else _assumed(cfg, b, "block not used by this preset")))
    return Clocks(cfg.accel.clock_policy, blocks)


def engine_clocks(clocks: Clocks, cfg: Config, kind: str) -> Clocks:
    """``clocks`` of ``cfg`` for HiKV with the Stage I engine ``kind``
    (:func:`hikv.sim.cost.engines.sort_blocks`): the sort blocks that engine builds marked
    used, the other not; one ``clocks`` lacks is added, from the timing flow where ``clocks``
    has estimates (timed on ``cfg``'s build: the engines' RTL does not depend on the kind),
    else assumed. The other blocks' clocks are kept (no synthesis)."""
    used = sort_blocks(cfg, kind)
    checked = any(c.origin == "sta" for c in clocks.blocks.values())
    blocks = dict(clocks.blocks)
    for b in SORT_BLOCKS:
        if b not in blocks:
            if b not in used:
                continue
            blocks[b] = _user(cfg, b) or (_sta(cfg, b) if checked else _assumed(
                cfg, b, "no timing estimate requested"))
        blocks[b] = dataclasses.replace(blocks[b], used=b in used)
    return Clocks(clocks.policy, blocks)


def _pe_reference(cfg: Config) -> BlockClock:
    """The PE array runs at the baseline accelerator's clock, ``accel.clock_hz``: the reference
    HiKV's blocks are checked against (the baseline is an assumed system, as the seed's is).
    Our model of its lanes (:mod:`hikv.hw.baseline_pe`) is an area model whose fp32 accumulate
    is not pipelined; its timing estimate is reported beside the clock, not used: a baseline
    built at ``clock_hz`` pipelines that loop (a few registers per lane). Set
    ``accel.pe_array_clock_hz`` (with ``clock_source``) to time the PE array otherwise."""
    est = _sta(cfg, "pe_array")
    mhz = est.hz / 1e6
    return BlockClock(
        "pe_array", float(cfg.accel.clock_hz), "assumed",
        "assumed: accel.clock_hz, the baseline accelerator's clock and the reference of the "
        f"other blocks; our area model of its lanes (hw/baseline_pe, fp32 accumulate not "
        f"pipelined) would close {mhz:,.0f} MHz by the timing flow, so a baseline at this "
        "clock needs a pipelined accumulate",
        f"not used, for information: {est.critical_path}", provenance=est.provenance)
