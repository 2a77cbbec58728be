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

from hikv.params import Config, HiKVPolicy, ParamError, SorterKind, Stage2Kind

__all__ = ["KINDS", "ENGINE_BLOCKS", "ENGINE_NAMES", "STAGE2_BLOCKS", "SORT_BLOCKS",
           "engine_block", "check_kinds", "with_kind", "hikv_stage2", "sort_blocks",
           "area_blocks", "engine_area", "engine_shares", "describe"]

#: the values of ``SorterParams.kind``
KINDS: tuple[str, ...] = tuple(k.value for k in SorterKind)
#: kind -> the registered block (:data:`hikv.hw.blocks.BLOCKS`) that runs Stage I
ENGINE_BLOCKS: dict[str, str] = {"merge": "sorter", "radix": "topk"}
#: kind -> the registered block that runs HiKV's Stage II jobs
STAGE2_BLOCKS: dict[str, str] = {"merge": "sorter", "radix": "stage2"}
#: every block a kind may build for sorting (the clocks the cost model may time)
SORT_BLOCKS: tuple[str, ...] = ("sorter", "topk", "stage2")
#: kind -> words for tables
ENGINE_NAMES: dict[str, str] = {"merge": "merge sorter", "radix": "radix-select top-k engine"}


def _kind(cfg_or_kind: Config | str | SorterKind) -> str:
    if isinstance(cfg_or_kind, Config):
        return cfg_or_kind.sorter.kind.value
    return SorterKind(cfg_or_kind).value


def engine_block(kind: Config | str | SorterKind) -> str:
    """The block that runs Stage I for ``kind`` (or a configuration's ``sorter.kind``)."""
    return ENGINE_BLOCKS[_kind(kind)]


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
    k = _kind(kind or cfg)
    stage1, stage2 = ENGINE_BLOCKS[k], STAGE2_BLOCKS[k]
    if stage2 != stage1 and hikv_stage2(cfg):
        return (stage1, stage2)
    return (stage1,)


def area_blocks(cfg: Config, kind: str | None = None) -> tuple[str, ...]:
    """HiKV's blocks for the area flow: :func:`hikv.sim.eda.area.hikv_blocks` with the sorter
    replaced by :func:`sort_blocks`."""
    from hikv.sim.eda.area import hikv_blocks

    out: list[str] = []
    for b in hikv_blocks(cfg):
        out += list(sort_blocks(cfg, kind)) if b == "sorter" else [b]
    return tuple(out)


def engine_area(cfg: Config, kind: str | None = None, *, loader_clock_hz: float | None = None,
                **kw: Any) -> Any:
    """:func:`hikv.sim.eda.area.accelerator_area` of the blocks of :func:`area_blocks` (the
    pipeline's score and index SRAMs counted with either engine)."""
    from hikv.sim.eda.area import accelerator_area, pipeline_buffer_items

    blocks = area_blocks(cfg, kind)
    ar = accelerator_area(cfg, blocks=blocks, loader_clock_hz=loader_clock_hz, **kw)
    if "sorter" not in blocks:
        ar = dataclasses.replace(ar, hikv=ar.hikv + tuple(pipeline_buffer_items(cfg)))
    return ar


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
    k = _kind(kind or cfg)
    blocks = sort_blocks(cfg, k)
    s = f"sorter.kind = {k}: Stage I on the {ENGINE_NAMES[k]} (block {blocks[0]})"
    if len(blocks) > 1:
        s += (f", Stage II on the Stage II selection block (block {blocks[1]}; HiKV's policy "
              "has a Stage II rule, which the top-k engine does not run): both built, both "
              "areas counted")
    elif k == "radix":
        s += ", no merge sorter (HiKV's policy has no Stage II rule)"
    return s
