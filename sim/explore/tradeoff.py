"""Area of HiKV's units against attention throughput: the trade-off curve.

``hikv sweep --tradeoff`` evaluates the query-aware HiKV of a preset over Stage I engines
(``sorter.kind``: the merge sorter, the radix-select top-k engine; :mod:`hikv.sim.cost.engines`)
x sorter lanes ``P`` (the engine's lanes) x scoring-unit lanes ``L`` x loader instances ``I``
(every other parameter the preset's, every block at the sweep's clocks, with the timing flow's
clocks each engine and lane count at its own build's (:func:`sorter_clocks`), the pipelined
schedule of :mod:`hikv.sim.cost.attention_model`) and prices each point's HiKV units by our own
synthesis:

* **area** of the HiKV units = the sort blocks(``P``: the sorter, or the top-k engine and,
  where HiKV's policy has a Stage II rule, the Stage II selection block beside it) + scoring
  unit(``L``, where the preset scores Stage I from low-bit keys) + ``I`` x loader + the
  pipeline's score and index buffers (:func:`hikv.sim.eda.area.pipeline_buffer_items`); the
  system = the baseline accelerator (``pe_lanes`` MAC lanes, ``softmax_lanes`` softmax lanes,
  its SRAM; section 3 of docs/cost_model.md) + the HiKV units; **share** = HiKV units / system.
* **throughput**: decode-attention steps per second of the whole model (``1 / time_s``) and
  the speedup against full KV on the preset's hardware; the bytes-roofline fraction.

Block areas come from the synthesis cache only (:func:`cached_synth`: the Verilog of the
block at that lane count, its cache key, no Yosys run) unless ``synthesise=True``; a lane
count with no cached synthesis is **interpolated** linearly in the lane count between the
nearest cached counts (**extrapolated** from the two nearest beyond them; from a single cached
build, its logic scaled by the lane ratio and its SRAM macros kept), and every row says
which. The summary states the fastest point within :data:`TARGET_SHARE` (the seed's 8 %), the
smallest share that reaches :data:`ROOFLINE_TARGET` of the bytes roofline, and what holding
8 % costs in throughput.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hikv.io import atomic_open
from hikv.params import Config, Method, MethodSpec, ParamError
from hikv.sim.cost.attention_model import Overrides, attention_cost
from hikv.sim.cost.clocks import Clocks
from hikv.sim.cost.timing import TimingModel, default_timing

__all__ = ["TARGET_SHARE", "ROOFLINE_TARGET", "BlockArea", "Tradeoff", "cached_synth",
           "block_areas", "sorter_clocks", "tradeoff", "summary", "write_tradeoff",
           "plot_tradeoff"]

#: the seed paper's claim: HiKV's units about 8 % of the system area
TARGET_SHARE = 0.08
#: the throughput target: >= 90 % of the bytes roofline
ROOFLINE_TARGET = 0.90

#: block -> the Config field whose ``lanes`` the trade-off varies
_LANE_FIELD = {"sorter": "sorter", "topk": "sorter", "stage2": "sorter", "scorer": "scorer"}


@dataclass(frozen=True)
class BlockArea:
    """Area (m^2, logic + SRAM macros at the node) of one block build and where it came from:
    ``"synthesised"``, ``"interpolated"`` or ``"extrapolated"``."""

    block: str
    lanes: int
    area_m2: float
    origin: str


def cached_synth(block: str, cfg: Config) -> Any:
    """The cached synthesis of ``block`` built for ``cfg`` (a SynthResult), or None (no Yosys
    run; the block's Verilog is elaborated to find its cache key)."""
    from hikv.sim.eda.area import block_synth

    return block_synth(block, cfg, cached_only=True)


def _area_of(res: Any, tech_nm: int) -> tuple[float, float]:
    """(logic, SRAM macros) area in m^2 of a synthesis result at ``tech_nm``."""
    from hikv.sim.eda.area import logic_area_m2, sram_area_m2

    return (float(logic_area_m2(res.nand2_equivalents, tech_nm)),
            float(sram_area_m2(res.macro_bytes, tech_nm)) if res.macro_bytes else 0.0)


def block_areas(cfg: Config, block: str, lanes: list[int], *, synthesise: bool = False
                ) -> dict[int, BlockArea]:
    """Area of ``block`` at each lane count (the preset's build otherwise): cached syntheses,
    or synthesised when ``synthesise``; the others from the cached builds, logic and SRAM
    macros separately: linear in the lane count between two builds (interpolated, or
    extrapolated beyond them); from a single build its logic scaled by ``lanes / built lanes``
    and its SRAM macros kept (extrapolated: a guess that the lanes' datapaths dominate the
    logic). Raises ParamError if no lane count is known."""
    from hikv.sim.eda.area import block_synth

    field = _LANE_FIELD[block]
    tech = cfg.accel.tech_nm
    known: dict[int, tuple[float, float]] = {}
    for n in sorted(set(lanes) | {getattr(cfg, field).lanes}):
        c = cfg.replace(**{field: dataclasses.replace(getattr(cfg, field), lanes=int(n))})
        res = block_synth(block, c) if synthesise else cached_synth(block, c)
        if res is not None:
            known[int(n)] = _area_of(res, tech)
    if not known:
        raise ParamError(f"no synthesis of the {block} of preset {cfg.name!r} at lanes "
                         f"{sorted(set(lanes))} is cached: run `hikv report --preset "
                         f"{cfg.name}` (or pass --synthesise) first")
    xs = sorted(known)
    out = {}
    for n in lanes:
        if n in known:
            out[n] = BlockArea(block, n, sum(known[n]), "synthesised")
            continue
        if len(xs) == 1:
            lg, sr = known[xs[0]]
            out[n] = BlockArea(block, n, lg * n / xs[0] + sr,
                               f"extrapolated (logic x lanes / {xs[0]}, SRAM kept)")
            continue
        lo = [x for x in xs if x < n]
        hi = [x for x in xs if x > n]
        a, b = ((lo[-1], hi[0]) if lo and hi else (xs[0], xs[1]) if hi else (xs[-2], xs[-1]))
        y = sum(max(0.0, known[a][j] + (known[b][j] - known[a][j]) * (n - a) / (b - a))
                for j in (0, 1))
        kind = "interpolated" if lo and hi else "extrapolated"
        out[n] = BlockArea(block, n, y, f"{kind} (lanes {a}, {b})")
    return out


@dataclass(frozen=True)
class Tradeoff:
    """One row per (engine, sorter lanes, scorer lanes, loaders) point; arrays of equal
    length."""

    preset: str
    sorter_kind: np.ndarray        # the Stage I engine, SorterParams.kind
    sorter_lanes: np.ndarray
    scorer_lanes: np.ndarray
    loaders: np.ndarray
    area_baseline_m2: float
    area_hikv_m2: np.ndarray
    share: np.ndarray              # HiKV units / (baseline + HiKV units)
    steps_per_s: np.ndarray        # decode-attention steps per second (whole model)
    speedup_vs_full: np.ndarray    # full KV on the preset's hardware / this
    bytes_bound_fraction: np.ndarray
    bottleneck: np.ndarray
    origin: np.ndarray             # how each point's areas were obtained
    scorer_used: bool
    loader_rule: tuple[int, float]  # the instance rule's count at the preset's bandwidth and
    #                                 the loader clock (Hz) it was computed at

    def best_within(self, share: float = TARGET_SHARE) -> int | None:
        """Index of the highest throughput with ``share`` or less (None if no point)."""
        ok = np.flatnonzero(self.share <= share)
        return int(ok[np.argmax(self.steps_per_s[ok])]) if ok.size else None

    def cheapest_reaching(self, fraction: float = ROOFLINE_TARGET, kind: str | None = None
                          ) -> int | None:
        """Index of the smallest share reaching ``fraction`` of the bytes roofline (with the
        engine ``kind`` only, when given)."""
        ok = np.flatnonzero((self.bytes_bound_fraction >= fraction)
                            & ((self.sorter_kind == kind) if kind else True))
        return int(ok[np.argmin(self.share[ok])]) if ok.size else None

    @property
    def kinds(self) -> list[str]:
        """The engines of the curve, in the order given."""
        return list(dict.fromkeys(self.sorter_kind.tolist()))


def tradeoff(cfg: Config, *, sorter_lanes: list[int], scorer_lanes: list[int],
             loaders: list[int], timing: TimingModel | None = None,
             clocks: Clocks | None = None, synthesise: bool = False,
             kinds: list[str] | None = None) -> Tradeoff:
    """Area and throughput of the preset's HiKV at every (engine, P, L, I) point (module
    docstring). ``kinds``: the Stage I engines (``SorterParams.kind`` values; default the
    preset's); ``clocks`` must list the top-k engine where they hold ``"radix"`` and come from
    the timing flow (:func:`hikv.sim.cost.clocks.accelerator_clocks` with ``kinds``), else it
    runs at the sorter's clock."""
    from hikv.sim.cost.engines import check_kinds

    kinds = check_kinds(kinds or [cfg.sorter.kind.value], "sorter kind")
    parts = [_tradeoff_kind(cfg, k, sorter_lanes=sorter_lanes, scorer_lanes=scorer_lanes,
                            loaders=loaders, timing=timing, clocks=clocks,
                            synthesise=synthesise) for k in kinds]
    arrays = {f.name: np.concatenate([getattr(p, f.name) for p in parts])
              for f in dataclasses.fields(Tradeoff) if isinstance(getattr(parts[0], f.name),
                                                                  np.ndarray)}
    return dataclasses.replace(parts[0], **arrays)


def _tradeoff_kind(cfg: Config, kind: str, *, sorter_lanes: list[int], scorer_lanes: list[int],
                   loaders: list[int], timing: TimingModel | None, clocks: Clocks | None,
                   synthesise: bool) -> Tradeoff:
    """:func:`tradeoff` with the one engine ``kind``."""
    from hikv.sim.cost.engines import sort_blocks, with_kind
    from hikv.sim.eda.area import accelerator_area, block_synth, pipeline_buffer_items, scorer_used

    for name, vals in (("sorter_lanes", sorter_lanes), ("scorer_lanes", scorer_lanes),
                       ("loaders", loaders)):
        if not vals:
            raise ParamError(f"--tradeoff needs at least one {name} value")
    if min(loaders) < 1:
        raise ParamError(f"loaders = {min(loaders)} is out of range: allowed >= 1")
    used = scorer_used(cfg)
    if not used:
        scorer_lanes = [cfg.scorer.lanes]
    combos = list(itertools.product(sorter_lanes, scorer_lanes, loaders))
    P, L, I_ = (np.array([c[i] for c in combos]) for i in range(3))
    timing = timing or default_timing()
    spec = MethodSpec.for_hikv(cfg.policy)
    full = attention_cost(MethodSpec(Method.FULL), cfg, timing=timing, clocks=clocks)
    blocks = sort_blocks(cfg, kind)
    # one evaluation per lane count of the Stage I engine, at that build's clock
    so_clk = sorter_clocks(cfg, sorter_lanes, clocks, synthesise=synthesise, block=blocks[0])
    ckind = with_kind(cfg, kind)
    time_s = np.zeros(len(combos))
    frac = np.zeros(len(combos))
    bottleneck = np.empty(len(combos), dtype=object)
    for p_val, (_, ck) in so_clk.items():
        sel = np.flatnonzero(P == p_val)
        h = attention_cost(spec, ckind, Overrides(sorter_lanes=P[sel], scorer_lanes=L[sel],
                                                  loader_instances=I_[sel]),
                           timing=timing, clocks=ck)
        time_s[sel] = np.broadcast_to(np.asarray(h.time_s, dtype=float), sel.shape)
        frac[sel] = np.broadcast_to(np.asarray(h.bytes_bound_fraction, dtype=float), sel.shape)
        bottleneck[sel] = np.broadcast_to(np.asarray(h.bottleneck), sel.shape)
    # areas: baseline as the report's (accelerator_area without HiKV blocks), blocks per lanes
    t = cfg.accel.tech_nm
    base = accelerator_area(cfg, blocks=()).baseline_m2
    per_block = [block_areas(cfg, b, sorted(set(sorter_lanes)), synthesise=synthesise)
                 for b in blocks]
    so = {p: BlockArea("+".join(blocks), p, sum(a[p].area_m2 for a in per_block),
                       "; ".join(f"{a[p].block} {p}: {a[p].origin}" for a in per_block
                                 if a[p].origin != "synthesised") or "synthesised")
          for p in sorted(set(sorter_lanes))}
    sc = (block_areas(cfg, "scorer", sorted(set(scorer_lanes)), synthesise=synthesise)
          if used else {})
    ld_res = block_synth("loader", cfg) if synthesise else cached_synth("loader", cfg)
    if ld_res is None:
        raise ParamError(f"no synthesis of the loader of preset {cfg.name!r} is cached: run "
                         f"`hikv report --preset {cfg.name}` (or pass --synthesise) first")
    ld = sum(_area_of(ld_res, t))
    buf = sum(i.area_m2 for i in pipeline_buffer_items(cfg))
    hikv = np.array([so[p].area_m2 + (sc[q].area_m2 if used else 0.0) + i * ld + buf
                     for p, q, i in combos])
    origin = np.array(["; ".join([x.origin if x is so[p] else f"{x.block} {x.lanes}: {x.origin}"
                                  for x in ([so[p]] + ([sc[q]] if used else []))
                                  if x.origin != "synthesised"]
                                 + ([so_clk[p][0]] if so_clk[p][0] else []))
                       or "synthesised" for p, q, i in combos])
    return Tradeoff(
        preset=cfg.name, sorter_kind=np.array([kind] * len(combos)), sorter_lanes=P,
        scorer_lanes=L, loaders=I_, area_baseline_m2=base,
        area_hikv_m2=hikv, share=hikv / (base + hikv), steps_per_s=1.0 / time_s,
        speedup_vs_full=float(full.time_s) / time_s, bytes_bound_fraction=frac,
        bottleneck=bottleneck.astype(str), origin=origin,
        scorer_used=used, loader_rule=_loader_rule(cfg, clocks))


def _loader_rule(cfg: Config, clocks: Clocks | None) -> tuple[int, float]:
    """The instance rule's loader count at the preset's bandwidth and the loader's clock
    (``clocks``' loader clock, else ``accel.clock_hz``), with that clock."""
    from hikv.hw.blocks import loader_instances

    hz = float(clocks.hz("loader")) if clocks is not None else float(cfg.accel.clock_hz)
    return loader_instances(cfg, clock_hz=hz), hz


def sorter_clocks(cfg: Config, lanes: list[int], clocks: Clocks | None, *,
                  synthesise: bool = False, block: str = "sorter"
                  ) -> dict[int, tuple[str, Clocks | None]]:
    """The clocks to time HiKV at with ``P`` lanes of the Stage I engine ``block`` (``sorter``
    or ``topk``), for each ``P`` in ``lanes``: ``{P: (note, clocks)}``.

    With the timing flow's clock of ``block`` (``clocks.blocks[block].origin == "sta"``) each
    lane count is timed at **its own build's** estimate (:func:`hikv.sim.eda.sta.block_clock`)
    where that build is synthesised (cached, or ``synthesise``); a lane count without a
    synthesis keeps the preset's build's clock and the note says so (the row's ``area``
    column carries it). Assumed or hand-set clocks apply to every lane count (note empty).
    """
    if clocks is None or block not in clocks.blocks or clocks.blocks[block].origin != "sta":
        return {int(p): ("", clocks) for p in sorted(set(lanes))}
    from hikv.sim.eda.sta import block_clock

    out: dict[int, tuple[str, Clocks | None]] = {}
    own = cfg.sorter.lanes
    for p in sorted(set(int(x) for x in lanes)):
        c = cfg.replace(sorter=dataclasses.replace(cfg.sorter, lanes=p))
        if p == own:
            out[p] = ("", clocks)
        elif synthesise or cached_synth(block, c) is not None:
            bc = block_clock(block, c)
            blk = dataclasses.replace(clocks.blocks[block], hz=float(bc["clock_hz"]),
                                      source=bc["source"],
                                      critical_path=bc["critical_path"])
            out[p] = ("", dataclasses.replace(clocks, blocks={**clocks.blocks, block: blk}))
        else:
            out[p] = (f"{block} {p}: clock of the {own}-lane build (not synthesised)", clocks)
    return out


_COLS = ("sorter_kind", "sorter_lanes", "scorer_lanes", "loaders", "area_hikv_mm2", "share_pct",
         "steps_per_s", "speedup_vs_full", "bytes_bound_pct", "bottleneck", "area_origin")


def _rows(r: Tradeoff) -> list[list[Any]]:
    order = np.lexsort((-r.steps_per_s, r.share))
    return [[str(r.sorter_kind[i]), int(r.sorter_lanes[i]), int(r.scorer_lanes[i]),
             int(r.loaders[i]),
             float(r.area_hikv_m2[i]) * 1e6, 100 * float(r.share[i]),
             float(r.steps_per_s[i]), float(r.speedup_vs_full[i]),
             100 * float(r.bytes_bound_fraction[i]), str(r.bottleneck[i]), str(r.origin[i])]
            for i in order]


def summary(r: Tradeoff) -> list[str]:
    """What 8 % costs, in sentences (numbers from ``r``)."""
    def at(i: int) -> str:
        return (f"{_ENGINE[str(r.sorter_kind[i])]} (sorter.kind = {r.sorter_kind[i]}), "
                f"P = {r.sorter_lanes[i]} lanes, L = {r.scorer_lanes[i]} scorer lanes, "
                f"I = {r.loaders[i]} loaders: {100 * r.share[i]:.1f} % of the system, "
                f"{r.speedup_vs_full[i]:.2f}x full KV, "
                f"{100 * r.bytes_bound_fraction[i]:.0f} % of the bytes roofline "
                f"({r.bottleneck[i]}-bound)")

    fast = int(np.argmax(r.steps_per_s))
    small = int(np.argmin(r.share))
    out = [f"Fastest point: {at(fast)}.", f"Smallest HiKV area: {at(small)}."]
    w = r.best_within()
    if w is None:
        budget = TARGET_SHARE / (1 - TARGET_SHARE) * r.area_baseline_m2
        out.append(f"No point reaches <= {100 * TARGET_SHARE:.0f} % of the system: that "
                   f"allows {budget * 1e6:.3f} mm^2 of HiKV units beside this baseline, the "
                   f"smallest point takes {r.area_hikv_m2[small] * 1e6:.3f} mm^2 "
                   f"({100 * r.share[small]:.1f} %, {r.area_hikv_m2[small] / budget:.1f}x "
                   "the budget).")
    else:
        loss = 1 - r.steps_per_s[w] / r.steps_per_s[fast]
        out.append(f"Fastest point within {100 * TARGET_SHARE:.0f} % of the system: {at(w)}; "
                   f"holding {100 * TARGET_SHARE:.0f} % costs {100 * loss:.0f} % of the "
                   "fastest point's attention throughput.")
    for kind in ([None] if len(r.kinds) == 1 else [None, *r.kinds]):
        c = r.cheapest_reaching(kind=kind)
        with_ = "" if kind is None else f" with the {_ENGINE[kind]}"
        if c is None:
            out.append(f"No point{with_} reaches {100 * ROOFLINE_TARGET:.0f} % of the bytes "
                       "roofline.")
        else:
            out.append(f"Smallest area reaching {100 * ROOFLINE_TARGET:.0f} % of the bytes "
                       f"roofline{with_}: {at(c)}.")
    return out


#: kind -> the engine's name in sentences
_ENGINE = {"merge": "merge sorter", "radix": "top-k engine"}


def write_tradeoff(r: Tradeoff, out: Path) -> list[Path]:
    """``tradeoff.csv`` (every point) and ``tradeoff.md`` (the table sorted by share, with the
    8 % line and the summary)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = _rows(r)
    p_csv = out / "tradeoff.csv"
    with atomic_open(p_csv, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(_COLS)
        w.writerows(rows)
    lines = [f"# HiKV units' area vs attention throughput: preset `{r.preset}`", "",
             f"Baseline accelerator {r.area_baseline_m2 * 1e6:.3f} mm^2; HiKV units = Stage I "
             "engine (`sorter.kind`: `merge`, the merge sorter; `radix`, the radix-select "
             "top-k engine, with the Stage II selection block beside it where the policy has a "
             "Stage II rule)"
             + (" + scoring unit" if r.scorer_used else "")
             + " + loaders + pipeline buffers; the instance rule gives "
             f"{r.loader_rule[0]} loaders at this bandwidth and the loader's "
             f"{r.loader_rule[1] / 1e6:.0f} MHz. Model results (pipelined schedule); "
             "areas from our synthesis, interpolated where the column says so.", "",
             "| engine | P (lanes) | L (scorer) | I (loaders) | HiKV mm^2 | % of system | "
             "steps/s | vs full KV | % of bytes roofline | bound | area |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    line_done = False
    mark = f"| **{100 * TARGET_SHARE:.0f} % line** | | | | | | | | | | |"
    for row in rows:
        if not line_done and row[5] > 100 * TARGET_SHARE:
            lines.append(mark)
            line_done = True
        lines.append(f"| {row[0]} | {row[1]} | {row[2]} | {row[3]} | {row[4]:.3f} | "
                     f"{row[5]:.1f} | {row[6]:,.0f} | {row[7]:.2f}x | {row[8]:.0f} | {row[9]} | "
                     f"{row[10]} |")
    if not line_done:
        lines.append(mark)
    lines += ["", *(f"- {s}" for s in summary(r)), ""]
    p_md = out / "tradeoff.md"
    with atomic_open(p_md, "w") as f:
        f.write("\n".join(lines))
    return [p_csv, p_md]


def plot_tradeoff(r: Tradeoff, out: Path) -> Path:
    """``tradeoff.png``: share of the system (x) vs speedup over full KV (y), one colour per
    loader count, one marker per engine, hollow markers where an area is interpolated, the
    8 % line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hikv.sim.explore.render import save_figure
    from hikv.sim.explore.sweep import pareto_mask

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    x, y = 100 * r.share, r.speedup_vs_full
    synth = r.origin == "synthesised"
    markers = {"merge": "o", "radix": "^"}
    for kind in r.kinds:
        for k, n in enumerate(sorted(set(r.loaders.tolist()))):
            sel = (r.loaders == n) & (r.sorter_kind == kind)
            for solid in (True, False):
                s = sel & (synth == solid)
                if s.any():
                    ax.scatter(x[s], y[s], s=18, color=f"C{k}", marker=markers.get(kind, "s"),
                               facecolors=f"C{k}" if solid else "none",
                               label=f"{kind}, I = {n} loaders"
                               + ("" if solid else " (area interpolated)"))
    m = pareto_mask(y, x)
    o = np.argsort(x[m])
    ax.plot(x[m][o], y[m][o], "-", color="0.3", lw=1, label="Pareto front")
    ax.axvline(100 * TARGET_SHARE, color="red", ls="--", lw=1,
               label=f"{100 * TARGET_SHARE:.0f} % of the system (seed)")
    ax.set_xlabel("HiKV units' share of the system area (%)", fontsize=8)
    ax.set_ylabel("HiKV decode-attention speedup vs full KV (model)", fontsize=8)
    ax.set_title(f"preset {r.preset}: engine x lanes x scorer lanes x loaders", fontsize=9)
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3)
    return save_figure(fig, out / "tradeoff.png")
