"""Design-space sweeps of the analytic cost model (``hikv sweep``), vectorised with numpy.

A sweep takes a preset and lists of values for the axes below, forms their cartesian product
(or a random sample of it for the benchmark), and evaluates every method at every design point
in one vectorised call of :func:`hikv.sim.cost.attention_model.attention_cost`. Rows record every
configuration field of the design point (the preset's fields with the axis values applied), the
results and the code version.

Axes (``Overrides`` fields): context ``N``, budget ``B``, HiKV's Stage II keep ``r`` (of V; of K
with ``--keep-k``), head dimension ``d``, PE lanes, sorter lanes, the low-bit scoring unit's
lanes ``L``, the Stage I engine (``sorter.kind``: ``merge`` or ``radix``,
:mod:`hikv.sim.cost.engines`), memory type (DRAM energy per bit; bandwidth is its own axis),
memory bandwidth, technology node. Every block runs at the preset's assumed or hand-set clocks
(:func:`hikv.sim.cost.clocks.assumed_clocks`), or at the timing flow's estimate of the preset's
blocks (``hikv sweep --clocks sta``): a sweep does not run the timing flow per point.

Area per design point comes from synthesis results (cached; one synthesis per distinct unit or
block configuration): baseline = ``pe_lanes`` MAC lanes + ``softmax_lanes`` (exp + MAC) + SRAM;
HiKV adds the sort blocks (per engine and sorter-lane value: the sorter, or the top-k engine
and, where HiKV's policy has a Stage II rule, the Stage II selection block beside it),
``loader_instances`` loaders, the pipelined schedule's score and index buffers
(:func:`hikv.sim.eda.area.pipeline_buffers`) and, where the preset scores Stage I from low-bit
keys, the scoring unit (per scorer-lane value), once those blocks are registered (until then
their area is NaN and the plots say so).
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hikv.hw.blocks import loader_instances
from hikv.io import atomic_open
from hikv.params import Config, MemoryType, MethodSpec, ParamError, to_dict
from hikv.presets import baseline_specs
from hikv.report_section import code_version, flatten
from hikv.sim.cost.attention_model import Overrides, attention_cost
from hikv.sim.cost.clocks import Clocks
from hikv.sim.cost.timing import TimingModel, default_timing
from hikv.sim.explore.render import save_figure

__all__ = ["AXES", "SweepResult", "grid", "sample", "evaluate", "area_columns", "write_csv",
           "plot_sweep", "bench", "pareto_mask"]

#: axis name -> (Overrides field, config columns it sets)
AXES: dict[str, tuple[str, tuple[str, ...]]] = {
    "context": ("context", ("context",)),
    "budget": ("budget", ("policy.budget",)),
    "keep_v": ("keep_v", ("policy.v_rule.keep",)),
    "keep_k": ("keep_k", ("policy.k_rule.keep",)),
    "head_dim": ("head_dim", ("layout.head_dim", "model.head_dim")),
    "pe_lanes": ("pe_lanes", ("accel.pe_lanes",)),
    "sorter_lanes": ("sorter_lanes", ("sorter.lanes",)),
    "sorter_kind": ("sorter_kind", ("sorter.kind",)),
    "scorer_lanes": ("scorer_lanes", ("scorer.lanes",)),
    "memory": ("memory", ("accel.memory",)),
    "bandwidth": ("mem_bandwidth_bytes_per_s", ("accel.mem_bandwidth_bytes_per_s",)),
    "tech_nm": ("tech_nm", ("accel.tech_nm",)),
}


def _check_axes(axes: dict[str, list[Any]]) -> None:
    for name, vals in axes.items():
        if name not in AXES:
            raise ParamError(f"unknown sweep axis {name!r}; known: {sorted(AXES)}")
        if not len(vals):
            raise ParamError(f"sweep axis {name!r} has no values")
    if "sorter_kind" in axes:
        from hikv.sim.cost.engines import check_kinds

        check_kinds(axes["sorter_kind"])
    if "memory" in axes:
        known = {m.value for m in MemoryType}
        bad = [m for m in axes["memory"] if m not in known]
        if bad:
            raise ParamError(f"memory = {bad} is not one of {sorted(known)}")


def grid(axes: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    """Cartesian product of the axes: name -> 1-D array (one entry per design point)."""
    _check_axes(axes)
    names = list(axes)
    combos = list(itertools.product(*(axes[n] for n in names)))
    return {n: np.array([c[i] for c in combos]) for i, n in enumerate(names)}


def sample(axes: dict[str, list[Any]], points: int, seed: int) -> dict[str, np.ndarray]:
    """``points`` design points drawn uniformly (with replacement) from the axes' values."""
    _check_axes(axes)
    rng = np.random.default_rng(seed)
    return {n: rng.choice(np.array(v), points) for n, v in axes.items()}


def _overrides(points: dict[str, np.ndarray]) -> Overrides:
    kw = {AXES[n][0]: v for n, v in points.items()}
    return Overrides(**kw)


@dataclass(frozen=True)
class SweepResult:
    """Per method label: name -> array over design points."""

    points: dict[str, np.ndarray]
    methods: dict[str, dict[str, np.ndarray]]
    timing: str
    seconds: float            # wall time of the analytic evaluation

    @property
    def size(self) -> int:
        return int(len(next(iter(self.points.values())))) if self.points else 1


def evaluate(cfg: Config, points: dict[str, np.ndarray], specs: list[MethodSpec], *,
             timing: TimingModel | None = None, clocks: Clocks | None = None) -> SweepResult:
    """Evaluate ``specs`` (the first one is the reference, normally full KV) at every point,
    every block at ``clocks`` (default :func:`hikv.sim.cost.clocks.assumed_clocks`)."""
    timing = timing or default_timing()
    ov = _overrides(points)
    if "keep_v" in points and "head_dim" in points:
        if (points["keep_v"] > points["head_dim"]).any():
            raise ParamError("keep_v (r) must be <= head_dim (d) at every design point; "
                             "drop the combinations or choose r <= min(d)")
    if "head_dim" in points and (points["head_dim"] > cfg.sorter.max_vec).any():
        raise ParamError(f"head_dim values must be <= sorter.max_vec = {cfg.sorter.max_vec}")
    t0 = time.perf_counter()
    ref = attention_cost(specs[0], cfg, ov, timing=timing, clocks=clocks)
    # the reference machine: the preset's hardware, the design point's workload (N, d)
    work = Overrides(context=ov.context, head_dim=ov.head_dim)
    ref_hw = attention_cost(specs[0], cfg, work, timing=timing, clocks=clocks)
    out: dict[str, dict[str, np.ndarray]] = {}
    for s in specs:
        c = ref if s is specs[0] else attention_cost(s, cfg, ov, timing=timing, clocks=clocks)
        # every column per design point, whichever of them the swept axes reach
        n = len(next(iter(points.values()))) if points else None
        shape = (n,) if n is not None else np.broadcast(c.time_s, ref.time_s).shape

        def b(x: Any, shape: tuple[int, ...] = shape) -> np.ndarray:
            return np.broadcast_to(np.asarray(x, dtype=float), shape)

        cols = {
            "bytes_burst": b(c.bytes_burst), "bytes_ideal": b(c.bytes_ideal),
            "time_s": b(c.time_s), "roofline_s": b(c.roofline_s),
            "memory_bound": b(c.memory_bound), "energy_j": b(c.energy_j),
            "speedup_vs_ref": b(ref.time_s / c.time_s),
            "speedup_vs_preset_full": b(ref_hw.time_s / c.time_s),
            "roofline_bound_vs_ref": b(ref.roofline_s / c.roofline_s),
            "bytes_reduction_vs_ref": b(ref.bytes_burst / c.bytes_burst),
            "energy_reduction_vs_ref": b(1 - c.energy_j / ref.energy_j),
            "sort_cycles_per_head": b(c.sort_cycles),
            "select_cycles_per_head": b(c.select_cycles),
            "scorer_cycles_per_head": b(c.scorer_cycles),
            "bytes_bound_fraction": b(c.bytes_bound_fraction),
        }
        cols.update({f"energy_{k}_j": b(v) for k, v in c.energy_parts_j.items()})
        out[s.label] = cols
    dt = time.perf_counter() - t0
    return SweepResult(points=points, methods=out, timing=timing.name, seconds=dt)


def area_columns(cfg: Config, points: dict[str, np.ndarray], n: int,
                 clocks: Clocks | None = None) -> dict[str, np.ndarray]:
    """Baseline and HiKV-block areas (m^2) per design point, from cached synthesis results;
    the loaders counted at the loader's clock in ``clocks`` (default ``accel.clock_hz``), as
    the timing of the same sweep counts them.

    Raises :class:`~hikv.sim.eda.cells.CellsUnavailable` when the cell library is missing.
    """
    from hikv.hw.blocks import BLOCKS
    from hikv.sim.eda.area import block_synth, logic_area_m2, sram_area_m2, unit_synth

    a = cfg.accel
    tech = np.broadcast_to(points.get("tech_nm", np.asarray(a.tech_nm)), (n,))
    pe = np.broadcast_to(points.get("pe_lanes", np.asarray(a.pe_lanes)), (n,))
    mac = unit_synth("mac_lane", cfg, 4096).nand2_equivalents
    exp = unit_synth("exp_unit", cfg, 4096).nand2_equivalents
    ge = pe * mac + a.softmax_lanes * (exp + mac)
    base = logic_area_m2(ge, tech) + sram_area_m2(a.sram_kv_bytes + a.sram_q_bytes, tech)
    hikv = np.full(n, np.nan)
    if "sorter" in BLOCKS and "loader" in BLOCKS:
        lanes = np.broadcast_to(points.get("sorter_lanes", np.asarray(cfg.sorter.lanes)), (n,))
        bw = np.broadcast_to(points.get("bandwidth",
                                        np.asarray(a.mem_bandwidth_bytes_per_s)), (n,))
        inst = loader_instances(cfg, bw, clock_hz=clocks.hz("loader") if clocks else None)
        ld = block_synth(BLOCKS["loader"], cfg)
        ld_area = logic_area_m2(ld.nand2_equivalents, tech) + sram_area_m2(ld.macro_bytes, tech)
        from hikv.sim.cost.engines import sort_blocks

        kinds = np.broadcast_to(points.get("sorter_kind", np.asarray(cfg.sorter.kind.value)),
                                (n,))
        sorter_area = np.zeros(n)
        for kv in np.unique(kinds):
            for lv in np.unique(lanes):
                c2 = cfg.replace(sorter=dataclasses.replace(cfg.sorter, lanes=int(lv)))
                a_lv = 0.0
                for blk in sort_blocks(cfg, str(kv)):
                    s = block_synth(BLOCKS[blk], c2)
                    a_lv = a_lv + (logic_area_m2(s.nand2_equivalents, tech)
                                   + sram_area_m2(s.macro_bytes, tech))
                sel = (lanes == lv) & (kinds == kv)
                sorter_area = np.where(sel, a_lv, sorter_area)
        from hikv.sim.eda.area import pipeline_buffers

        buf_area = sum(sram_area_m2(b, tech) for b in pipeline_buffers(cfg).values())
        hikv = sorter_area + inst * ld_area + buf_area
        from hikv.sim.eda.area import scorer_used

        if scorer_used(cfg) and "scorer" in BLOCKS:
            sl = np.broadcast_to(points.get("scorer_lanes", np.asarray(cfg.scorer.lanes)), (n,))
            sc_area = np.zeros(n)
            for lv in np.unique(sl):
                c3 = cfg.replace(scorer=dataclasses.replace(cfg.scorer, lanes=int(lv)))
                r = block_synth(BLOCKS["scorer"], c3)
                sc_area = np.where(sl == lv, logic_area_m2(r.nand2_equivalents, tech)
                                   + sram_area_m2(r.macro_bytes, tech), sc_area)
            hikv = hikv + sc_area
    return {"area_baseline_m2": np.asarray(base, dtype=float) + np.zeros(n),
            "area_hikv_m2": hikv, "area_overhead": hikv / base}


def write_csv(cfg: Config, res: SweepResult, path: Path,
              area: dict[str, np.ndarray] | None = None) -> int:
    """One row per (design point, method): config fields, axis values, results, version."""
    base = flatten(to_dict(cfg))
    n = res.size
    set_cols = {c: name for name, (_, cols) in AXES.items() if name in res.points for c in cols}
    config_cols = sorted(base)
    result_cols = list(next(iter(res.methods.values())))
    area_cols = list(area) if area else []
    version = code_version()
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with atomic_open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["point", "method", *config_cols, *result_cols, *area_cols, "timing_model",
                    "code_version"])
        pts = {k: np.broadcast_to(v, (n,)) for k, v in res.points.items()}
        for label, cols in res.methods.items():
            cols_b = {k: np.broadcast_to(v, (n,)) for k, v in cols.items()}
            is_hikv = label.startswith("hikv")
            for i in range(n):
                cfg_vals = [_val(pts[set_cols[c]][i]) if c in set_cols else base[c]
                            for c in config_cols]
                res_vals = [float(cols_b[c][i]) for c in result_cols]
                ar = []
                if area:
                    ar = [float(area["area_baseline_m2"][i]),
                          float(area["area_hikv_m2"][i]) if is_hikv else "",
                          float(area["area_overhead"][i]) if is_hikv else ""]
                w.writerow([i, label, *cfg_vals, *res_vals, *ar, res.timing, version])
                rows += 1
    return rows


def _val(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


def pareto_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Points not dominated when maximising ``x`` and minimising ``y``."""
    order = np.lexsort((y, -x))
    best = math.inf
    mask = np.zeros(len(x), dtype=bool)
    for i in order:
        if y[i] < best:
            mask[i] = True
            best = y[i]
    return mask


def plot_sweep(cfg: Config, res: SweepResult, out: Path, hikv_label: str,
               area: dict[str, np.ndarray] | None, specs: list[MethodSpec],
               timing: TimingModel | None = None) -> list[Path]:
    """Energy vs speedup and area vs speedup Pareto fronts, and speedup vs context length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    h = res.methods[hikv_label]
    sp = np.asarray(h["speedup_vs_preset_full"])
    n = res.size
    ctx = np.broadcast_to(res.points.get("context", np.asarray(cfg.context)), (n,))
    groups = sorted(set(ctx.tolist()))[-6:]
    paths = []
    tag = f" (sorter/loader timing: {res.timing})"
    xlabel = "HiKV attention speedup vs full KV on the preset's hardware (model)"
    ys = [("energy", np.asarray(h["energy_j"]) * 1e6, "HiKV energy per decode step (uJ)",
           "pareto_energy_speedup.png")]
    if area is not None:
        tot = area["area_baseline_m2"] + np.nan_to_num(area["area_hikv_m2"], nan=0.0)
        pending = bool(np.isnan(area["area_hikv_m2"]).all())
        ys.append(("area" + (" (baseline only: sorter/loader area pending)" if pending else ""),
                   tot * 1e6, "accelerator area (mm^2; synthesised logic + SRAM model)",
                   "pareto_area_speedup.png"))
    for title, y, ylabel, fname in ys:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for gi, gv in enumerate(groups):
            sel = ctx == gv
            color = f"C{gi}"
            ax.scatter(sp[sel], y[sel], s=6, alpha=0.3, color=color)
            m = pareto_mask(sp[sel], y[sel])
            o = np.argsort(sp[sel][m])
            ax.plot(sp[sel][m][o], y[sel][m][o], "-o", ms=3, color=color,
                    label=f"N = {gv}: Pareto front")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_yscale("log")
        ax.set_title(f"{title} vs speedup" + tag, fontsize=8)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        paths.append(save_figure(fig, out / fname))
    # speedup vs context (other axes at the preset's values), one line per budget
    budgets = sorted(set(np.asarray(res.points.get("budget", [cfg.policy.budget])).tolist()))
    ctx = np.unique(np.geomspace(max(min(budgets) // 2, 16), max(cfg.context * 4, 4096),
                                 16).astype(int))
    hspec = next(s for s in specs if s.label == hikv_label)
    fig, ax = plt.subplots(figsize=(6, 4))
    for b in budgets:
        ov = Overrides(context=ctx, budget=np.full(len(ctx), b))
        full = attention_cost(specs[0], cfg, ov, timing=timing)
        hk = attention_cost(hspec, cfg, ov, timing=timing)
        ax.plot(ctx, full.time_s / hk.time_s, marker="o", ms=3, label=f"B = {b}")
        ax.plot(ctx, full.roofline_s / hk.roofline_s, ls=":", color=ax.lines[-1].get_color())
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length N (tokens)")
    ax.set_ylabel("HiKV speedup vs full KV (model)")
    ax.set_title(f"preset {cfg.name}; dotted: roofline bound" + tag, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    paths.append(save_figure(fig, out / "speedup_vs_context.png"))
    return paths


def bench(cfg: Config, points: int = 100_000, seed: int = 0, repeat: int = 3,
          timing: TimingModel | None = None) -> dict[str, Any]:
    """Design points per second of the analytic evaluation (full KV + HiKV, all axes varied)."""
    axes = {"context": [1024, 2048, 4096, 8192, 16384, 32768],
            "budget": [128, 256, 512, 1024], "keep_v": [16, 32, 48, 64],
            "pe_lanes": [32, 64, 128, 256, 512], "memory": [m.value for m in MemoryType],
            "bandwidth": [64e9, 128e9, 256e9, 512e9], "tech_nm": [45, 28, 16, 7]}
    pts = sample(axes, points, seed)
    specs = [baseline_specs(cfg)[0], MethodSpec.for_hikv(cfg.policy)]
    best = math.inf
    for _ in range(repeat):
        res = evaluate(cfg, pts, specs, timing=timing)
        best = min(best, res.seconds)
    return {"points": points, "seconds": best, "points_per_s": points / best,
            "methods": [s.label for s in specs], "axes": sorted(axes)}
