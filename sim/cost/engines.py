"""HiKV's Stage I engine (``SorterParams.kind``): which block runs each sort job and which
blocks the area counts.

==========  =====================  =========================  ==================================
kind        Stage I jobs (top-k)   HiKV's Stage II jobs       HiKV's area
==========  =====================  =========================  ==================================
``merge``   ``sorter``             ``sorter``                 the sorter
``radix``   ``topk``               ``stage2``                 the engine; the Stage II block
                                                              beside it only where HiKV's
                                                              policy has a Stage II rule
==========  =====================  =========================  ==================================

The radix-select engine (:mod:`hikv.hw.topk`, docs/topk.md) runs Stage I only, so a policy with
a Stage II rule (``k_rule`` or ``v_rule`` selecting channels or elements:
:func:`hikv_stage2`) on ``kind = "radix"`` is priced as an accelerator with two engines: the
top-k engine for Stage I and the Stage II selection block (:mod:`hikv.hw.stage2_select`, block
``stage2``: the top ``r`` of each vector of ``layout.head_dim`` keys at the sorter's Stage II
rate) for HiKV's Stage II, both areas counted, each at its own clock (:func:`sort_blocks`;
cycles by :class:`hikv.hw.stage2_timing.Stage2Timing`, a job of another length priced on a
block built for it). A baseline's Stage II jobs (SparQ's top-``r`` channels) run on the merge
sorter whichever engine HiKV has, and its area is not counted in HiKV's units (the baselines
use HiKV's hardware for free: generous to them). The pipeline's double-buffered score and index
SRAMs (:func:`hikv.sim.eda.area.pipeline_buffer_items`) are counted with either engine: the
engine's key buffer holds the job it runs, not the next head's scores.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hikv.hw.blocks import (
    ENGINE_BLOCKS,
    KINDS,
    SORT_BLOCKS,
    STAGE2_BLOCKS,
    engine_block,
    hikv_stage2,
    kind_name,
    sort_blocks,
)
from hikv.params import Config, ParamError, SorterKind

__all__ = ["KINDS", "ENGINE_BLOCKS", "ENGINE_NAMES", "STAGE2_BLOCKS", "SORT_BLOCKS",
           "engine_block", "check_kinds", "with_kind", "hikv_stage2", "sort_blocks",
           "area_blocks", "engine_area", "engine_shares", "describe", "TIME_TIE",
           "favoured_kind"]

#: two engines whose HiKV step times differ by less than this fraction are equally fast
#: (:func:`favoured_kind` then takes the smaller)
TIME_TIE = 0.005
#: kind -> words for tables
ENGINE_NAMES: dict[str, str] = {"merge": "merge sorter", "radix": "radix-select top-k engine"}


def check_kinds(kinds: Any, what: str = "sorter.kind") -> list[str]:
    """``kinds`` as a list of kind names; a one-line ParamError naming ``what`` otherwise."""
    out = []
    for k in kinds:
        if str(k) not in KINDS:
            raise ParamError(f"{what} = {k!r} is not one of {list(KINDS)}")
        out.append(str(k))
    if not out:
        raise ParamError(f"{what} needs at least one value of {list(KINDS)}")
    return out


def with_kind(cfg: Config, kind: str | SorterKind) -> Config:
    """``cfg`` with ``sorter.kind = kind`` (the name kept)."""
    return cfg.replace(sorter=dataclasses.replace(cfg.sorter, kind=SorterKind(kind)))


def area_blocks(cfg: Config, kind: str | None = None) -> tuple[str, ...]:
    """HiKV's blocks for the area flow (:func:`hikv.sim.eda.area.hikv_blocks`: the sort
    blocks of :func:`sort_blocks`, the loaders, the scoring unit where used), ``kind`` in
    place of ``cfg.sorter.kind`` when given."""
    from hikv.sim.eda.area import hikv_blocks

    return hikv_blocks(with_kind(cfg, kind) if kind else cfg)


def engine_area(cfg: Config, kind: str | None = None, *, loader_clock_hz: float | None = None,
                **kw: Any) -> Any:
    """:func:`hikv.sim.eda.area.accelerator_area` of the blocks of :func:`area_blocks` (the
    pipeline's score and index SRAMs counted with either engine)."""
    from hikv.sim.eda.area import accelerator_area

    return accelerator_area(cfg, blocks=area_blocks(cfg, kind), loader_clock_hz=loader_clock_hz,
                            **kw)


def engine_shares(cfg: Config, *, loader_clock_hz: float | None = None,
                  kinds: tuple[str, ...] = KINDS) -> dict[str, dict[str, Any]]:
    """Per kind: the blocks, HiKV's area and its share of the system (baseline + HiKV), by
    :func:`engine_area` (synthesis through the area flow's cache and shipped results)."""
    out = {}
    for k in kinds:
        ar = engine_area(cfg, k, loader_clock_hz=loader_clock_hz)
        blocks = area_blocks(cfg, k)
        out[k] = {"engine": engine_block(k), "blocks": list(blocks),
                  "sort_blocks": list(sort_blocks(cfg, k)),
                  "sort_m2": sum(i.area_m2 for i in ar.hikv
                                 if i.name.split(".")[0] in sort_blocks(cfg, k)),
                  "hikv_m2": ar.hikv_m2, "baseline_m2": ar.baseline_m2,
                  "share_of_system": ar.share, "overhead_vs_baseline": ar.overhead,
                  "in_use": k == cfg.sorter.kind.value}
    return out


def describe(cfg: Config, kind: str | None = None) -> str:
    """One sentence naming the engines of ``cfg`` (``kind`` in place of its own)."""
    k = kind_name(kind or cfg)
    blocks = sort_blocks(cfg, k)
    s = f"sorter.kind = {k}: Stage I on the {ENGINE_NAMES[k]} (block {blocks[0]})"
    if len(blocks) > 1:
        s += (f", Stage II on the Stage II selection block (block {blocks[1]}; HiKV's policy "
              "has a Stage II rule, which the top-k engine does not run): both built, both "
              "areas counted")
    elif k == "radix":
        s += ", no merge sorter (HiKV's policy has no Stage II rule)"
    return s


def favoured_kind(kinds: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """The engine the numbers favour, and why: the faster HiKV step (``time_s``); where the
    step times differ by less than :data:`TIME_TIE`, the smaller HiKV units (``hikv_m2``).

    ``kinds``: per kind, at least ``time_s`` and ``hikv_m2`` (the report's engine section).
    Both engines are compared at the same configuration (lanes, loaders, scoring unit, clocks
    from the timing flow): the rule each preset's ``sorter.kind`` follows.
    """
    if len(kinds) < 2:
        raise ParamError(f"favoured_kind needs two engines to compare, got {list(kinds)}")
    names = sorted(kinds, key=lambda k: kinds[k]["time_s"])
    fast, slow = names[0], names[1]
    tf, ts = kinds[fast]["time_s"], kinds[slow]["time_s"]
    if ts - tf >= TIME_TIE * ts:
        return fast, (f"its HiKV step is {100 * (ts - tf) / ts:.1f} % shorter than the "
                      f"{ENGINE_NAMES[slow]}'s")
    small = min(names[:2], key=lambda k: kinds[k]["hikv_m2"])
    other = names[1] if small == names[0] else names[0]
    return small, (f"the same HiKV step time within {100 * TIME_TIE:g} % and "
                   f"{kinds[small]['hikv_m2'] * 1e6:.4f} against "
                   f"{kinds[other]['hikv_m2'] * 1e6:.4f} mm^2 of HiKV units")
