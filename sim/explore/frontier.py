"""The co-design frontier: which configuration reaches iso-accuracy at the lowest attention time
and energy per decode step, and at what area (``hikv frontier``).

For one model, context length ``N`` and protocol it reads a seed suite's finished cells
(:func:`load_cells`: the perplexity cell and the kept task cells, every one checked to be of the
model, length, protocol and preset asked, complete, as the suite's run wrote it (its folder's
``MANIFEST.json``, :func:`hikv.io.run_folder`), and, on request, of one code version), decides
every method and budget with the non-inferiority test
(:func:`hikv.model.accuracy.iso.noninferiority_table`), and prices each at ``N`` with the cost
model at the preset's clocks (:func:`hikv.sim.cost.attention_model.attention_cost` on the preset's
accelerator adapted to the model's shape: head dimension, KV heads and the layers the methods
manage; Gemma-3's sliding-window layers are not counted). :func:`frontier` returns the points
(accuracy bounds, time, energy, bytes), the Pareto fronts of time and of energy against the
perplexity bound, per family the iso point with its interval and its time there, the lowest-time
family at iso-accuracy per method, and HiKV's best over the best other method with the interval
the iso budgets' intervals give; the preset's area beside them. :func:`write_frontier` writes
CSV, JSON and a PNG. Nothing here runs a model: it takes seconds.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hikv.io import RunFolder, atomic_write_text, run_folder, save_figure, write_csv
from hikv.model.accuracy.iso import (
    NI_LEVEL,
    NLL_BLOCK,
    PPL_MARGIN,
    TASK_MARGIN,
    is_think,
    keeps_every_token,
    noninferiority_table,
    protocol_name,
)
from hikv.params import (
    Config,
    Method,
    MethodSpec,
    ModelShape,
    ParamError,
    Stage2Rule,
    parse_method,
)
from hikv.presets import get_preset
from hikv.report_section import code_version
from hikv.sim.cost.attention_model import Overrides, attention_cost
from hikv.sim.cost.clocks import Clocks, accelerator_clocks, assumed_clocks

__all__ = ["FRONTIER_SCHEMA", "FrontierError", "CellSet", "Frontier", "load_cells",
           "model_config", "frontier", "pareto", "write_frontier", "describe",
           "stem_prefix"]

#: schema of the frontier's JSON summary
FRONTIER_SCHEMA = "hikv.frontier/1"
#: the task filter's threshold (full KV's score) when a cell's metadata does not name one
_TASK_KEEP_MIN = 0.8


class FrontierError(ParamError):
    """A cell set the frontier cannot use: missing, partial or mismatched cells (the message
    names the file and what is missing); the command exits 2."""


@dataclass(frozen=True)
class CellSet:
    """The cells of one model, length and protocol: perplexity rows, the kept tasks' rows, and
    where they came from (``files``: cell file -> code version; ``notes``: what could not be
    verified, e.g. a folder without a manifest, for the reader to print)."""

    model: str
    length: int
    protocol: str
    preset: str
    shape: dict[str, Any]
    ppl_rows: tuple[dict[str, Any], ...]
    task_rows: tuple[dict[str, Any], ...]
    kept_tasks: tuple[str, ...]
    dropped_tasks: tuple[str, ...]
    files: dict[str, str]
    notes: tuple[str, ...] = ()


def _verified(check: Any, *args: Any) -> Any:
    """``check(*args)`` (:func:`hikv.io.run_folder`, :meth:`hikv.io.RunFolder.check`) with its
    refusal as a :class:`FrontierError`."""
    try:
        return check(*args)
    except ParamError as e:
        raise FrontierError(str(e)) from None


def _read(path: Path, run: RunFolder | None = None
          ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    if run is not None:
        _verified(run.check, path)
    try:
        d = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise FrontierError(f"{path}: cannot be read as a cell file ({e})") from None
    if not isinstance(d, dict) or not isinstance(d.get("rows"), list) \
            or not isinstance(d.get("meta"), dict):
        raise FrontierError(f"{path}: not a cell file of a seed suite (no 'meta' and 'rows')")
    return d["rows"], d["meta"]


def _cell_file(cells: Path, key: str, run: RunFolder
               ) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
    path = cells / f"{key}.json"
    _verified(run.check, path)
    if not path.is_file():
        what = ("unfinished: only its trial journal is there"
                if (cells / f"{key}.partial.jsonl").is_file() else "missing")
        raise FrontierError(f"{path}: {what} (run the seed suite for this model and length: "
                            "`hikv accuracy run --suite ...`, it resumes)")
    rows, meta = _read(path)
    return rows, meta, path


def load_cells(folder: str | Path, *, model: str, length: int, protocol: str = "prompt",
               code_version: str | None = None) -> CellSet:
    """The finished cells of ``model`` at ``length`` under ``protocol`` in ``folder`` (a seed
    suite's output folder, or its ``cells/``).

    Needs ``ppl_<N>.json`` and ``<task>_<protocol>_<N>.json`` for every task of the suite
    (those its cells' metadata name, ``suite.tasks``, and every such file present); a task is
    kept where full KV scores at least the suite's ``keep_min``. Raises
    :class:`FrontierError`, naming the file, for a missing or unfinished cell, a cell of
    another model, length, protocol or preset, a cell without full KV's row, a kept task cell
    that neither ran nor skipped a method of the perplexity cell (partial), or, with
    ``code_version``, a cell written by another code version; naming the folder or file, for
    a folder whose run did not finish or a cell not as its run's ``MANIFEST.json`` lists it
    (:func:`hikv.io.run_folder`). A folder without a manifest or a run's lock (written before
    manifests existed) is read as it is, with a line in ``notes``."""
    p = protocol_name(protocol)
    root = Path(folder)
    cells = root / "cells" if (root / "cells").is_dir() else root
    if not cells.is_dir():
        raise FrontierError(f"{root}: no such folder of cells")
    run: RunFolder = _verified(run_folder, cells)
    files: dict[str, str] = {}

    def check(meta: dict[str, Any], path: Path, preset: str | None) -> None:
        got = meta.get("model")
        shape = (meta.get("shape") or {}).get("name")
        if got != model and shape != model:
            raise FrontierError(f"{path}: cells of model {got!r}, not {model!r}")
        if preset is not None and meta.get("preset") != preset:
            raise FrontierError(f"{path}: measured under preset {meta.get('preset')!r}, the "
                                f"perplexity cell under {preset!r}")
        cv = meta.get("code_version")
        if code_version is not None and cv != code_version:
            raise FrontierError(f"{path}: written by code version {cv!r}, not {code_version!r}")
        files[str(path)] = str(cv)

    ppl, pmeta, ppath = _cell_file(cells, f"ppl_{length}", run)
    check(pmeta, ppath, None)
    preset = str(pmeta.get("preset") or "default")
    if not any(r.get("label") == "full" for r in ppl):
        raise FrontierError(f"{ppath}: no full-KV row (the reference)")
    bad = [r["label"] for r in ppl if int(r.get("length", r.get("window", -1))) != length]
    if bad:
        raise FrontierError(f"{ppath}: rows of another length than {length}: {bad[:3]}")
    suite = pmeta.get("suite") or {}
    keep_min = float(suite.get("keep_min", _TASK_KEEP_MIN))
    # the tasks: those the suite names (in any of its cells) and every task cell present
    tail = f"_{p}_{length}.json"
    found = sorted(f.name[: -len(tail)] for f in cells.glob(f"*{tail}"))
    tasks = list(dict.fromkeys([*(suite.get("tasks") or ()), *found]))
    for t in found:
        tasks += [x for x in (_read(cells / f"{t}{tail}", run)[1].get("suite") or {}).get("tasks")
                  or () if x not in tasks]
    if not tasks:
        raise FrontierError(f"{cells}: no task cell of protocol {p} at length {length} "
                            f"(<task>{tail})")
    labels = [r["label"] for r in ppl]
    kept, dropped, task_rows = [], [], []
    for task in tasks:
        rows, meta, path = _cell_file(cells, f"{task}_{p}_{length}", run)
        check(meta, path, preset)
        odd = [r["label"] for r in rows
               if r.get("protocol") != p or int(r.get("length", -1)) != length]
        if odd:
            raise FrontierError(f"{path}: rows of another protocol or length than {p}, "
                                f"{length}: {odd[:3]}")
        full = next((r for r in rows if r["label"] == "full"), None)
        if full is None:
            raise FrontierError(f"{path}: no full-KV row (the task filter needs it)")
        if full.get("status") == "stopped" or full["accuracy"] < keep_min - 1e-12:
            dropped.append(task)
            continue
        have = {r["label"] for r in rows} | set(meta.get("skipped") or {})
        lack = [lab for lab in labels if lab not in have]
        if lack:
            raise FrontierError(
                f"{path}: partial: {len(lack)} method(s) of {ppath.name} neither ran nor were "
                f"skipped on this kept task, e.g. {', '.join(lack[:4])} (resume the suite "
                "with the same families)")
        kept.append(task)
        task_rows += rows
    return CellSet(model=model, length=length, protocol=p, preset=preset,
                   shape=dict(pmeta.get("shape") or {}), ppl_rows=tuple(ppl),
                   task_rows=tuple(task_rows), kept_tasks=tuple(kept),
                   dropped_tasks=tuple(dropped), files=files,
                   notes=(run.note,) if run.note else ())


def model_config(base: Config, shape: dict[str, Any], layers: int, length: int) -> Config:
    """``base`` (a preset: its accelerator, clocks and policy) adapted to a model: head
    dimension, the model's heads with ``layers`` the layers the methods manage, context
    ``length``, the sorter's vector length and stream and the loader's token stream made long
    enough for them (sizes, not rates: the cost model's cycles do not change); the policy's
    Stage II is dropped where it does not fit the head dimension (methods take theirs from
    their own labels), as the accuracy study adapts it."""
    d = int(shape["head_dim"])
    layout = dataclasses.replace(base.layout, head_dim=d)
    st, ld = base.sorter, base.loader
    sorter = dataclasses.replace(st, max_vec=max(st.max_vec, d), max_n=max(st.max_n, length))
    loader = dataclasses.replace(ld, max_tokens=max(ld.max_tokens, length))
    policy = base.policy
    try:
        policy.check_head_dim(d)
    except ParamError:
        policy = dataclasses.replace(policy, k_rule=Stage2Rule(), v_rule=Stage2Rule())
    names = {f.name for f in dataclasses.fields(ModelShape)}
    model = ModelShape(**{**{k: v for k, v in shape.items() if k in names}, "layers": layers})
    return base.replace(layout=layout, sorter=sorter, loader=loader, policy=policy,
                        model=model, context=length)


def pareto(x: Sequence[float], y: Sequence[float]) -> list[bool]:
    """Whether each point is on the Pareto front minimising both ``x`` and ``y`` (no other
    point at most as large in both and smaller in one)."""
    out = []
    for i, (a, b) in enumerate(zip(x, y, strict=True)):
        out.append(not any((c <= a and d <= b and (c < a or d < b))
                           for j, (c, d) in enumerate(zip(x, y, strict=True)) if j != i))
    return out


@dataclass(frozen=True)
class Frontier:
    """The frontier of one cell set under one preset: ``points`` (one per method and budget,
    full KV first), ``families`` (iso points and their times), ``summary`` (the JSON)."""

    cells: CellSet
    preset: str
    points: tuple[dict[str, Any], ...]
    families: tuple[dict[str, Any], ...]
    summary: dict[str, Any] = field(default_factory=dict)


def _is_hikv_own(spec: MethodSpec) -> bool:
    """HiKV's own configurations (ThinK and families without a token budget are baselines)."""
    return spec.method is Method.HIKV and not is_think(spec) and not keeps_every_token(spec)


def _clocks(cfg: Config) -> Clocks:
    from hikv.sim.eda.cells import CellsUnavailable

    try:
        return accelerator_clocks(cfg)
    except CellsUnavailable as e:
        return assumed_clocks(cfg, f"no cell library for the timing flow: {e}")


def _area(cfg: Config, clocks: Clocks) -> dict[str, Any]:
    from hikv.sim.cost.engines import engine_area
    from hikv.sim.eda.cells import CellsUnavailable

    try:
        ar = engine_area(cfg, loader_clock_hz=clocks.hz("loader"))
    except CellsUnavailable as e:
        return {"available": False, "reason": str(e)}
    return {"available": True, "preset": cfg.name, "tech_nm": ar.tech_nm,
            "baseline_m2": ar.baseline_m2, "hikv_m2": ar.hikv_m2,
            "overhead_vs_baseline": ar.overhead, "head_dim_built": cfg.layout.head_dim,
            "hikv_blocks": [{"name": i.name, "count": i.count, "area_m2": i.area_m2}
                            for i in ar.hikv]}


def frontier(cells: CellSet, preset: str | None = None, *, area: bool = True,
             seed: int = 0) -> Frontier:
    """The frontier of ``cells`` priced under ``preset`` (default: the cells' own) at its
    clocks (the timing flow's, from the shipped or cached results; assumed without a cell
    library); ``area``: the preset's area beside it (synthesis results shipped with the kit or
    cached; a preset without them is synthesised once, minutes). ``seed``: the perplexity
    bootstrap's."""
    name = preset or cells.preset
    base = get_preset(name)
    ppl = list(cells.ppl_rows)
    full = next(r for r in ppl if r["label"] == "full")
    kv = int(cells.shape["kv_heads"])
    layers = max(1, int(full["units"]) // kv)
    cfg = model_config(base, cells.shape, layers, cells.length)
    clocks = _clocks(base)
    pts, fams = noninferiority_table(ppl, list(cells.task_rows), length=cells.length,
                                     protocol=cells.protocol, seed=seed)
    ov = Overrides(context=cells.length)
    d = cfg.layout.head_dim

    def cost(label: str) -> tuple[MethodSpec, Any]:
        spec = parse_method(label, cfg.policy, d)
        return spec, attention_cost(spec, cfg, ov, clocks=clocks)

    _, fc = cost("full")
    t0, e0 = float(fc.time_s), float(fc.energy_j)
    rows = [{"label": "full", "family": "full", "method": "full", "budget": cells.length,
             "verdict": "reference", "hikv_own": False, "ppl_rel": 0.0, "ppl_low": 0.0,
             "ppl_high": 0.0, "time_s": t0, "energy_j": e0,
             "bytes_burst_model": float(fc.bytes_burst),
             "bytes_burst_measured": full["bytes_burst"] * full["units"]}]
    for r in pts:
        spec, c = cost(r["label"])
        rows.append({**r, "hikv_own": _is_hikv_own(spec), "time_s": float(c.time_s),
                     "energy_j": float(c.energy_j), "bytes_burst_model": float(c.bytes_burst),
                     "bytes_burst_measured": (r["bytes_burst"] or 0) * (r["units"] or 0)})
    acc = [r["ppl_high"] if r.get("ppl_high") is not None else r["ppl_rel"] for r in rows]
    on_t = pareto([r["time_s"] for r in rows], acc)
    on_e = pareto([r["energy_j"] for r in rows], acc)
    for r, a, b in zip(rows, on_t, on_e, strict=True):
        r.update({"speedup_vs_full": t0 / r["time_s"], "energy_vs_full": r["energy_j"] / e0,
                  "on_time_front": a, "on_energy_front": b, "model": cells.model,
                  "length": cells.length, "protocol": cells.protocol, "preset": name,
                  "level": NI_LEVEL, "ppl_margin": PPL_MARGIN, "task_margin": TASK_MARGIN})
    by = {(r["family"], r["budget"]): r for r in rows}
    out_f = []
    for f in fams:
        every = f["every_token"]
        at = {k: by.get((f["family"], cells.length if every else f[k]))
              if f[k] is not None else None for k in ("iso_budget", "iso_budget_low")}
        hi, lo = at["iso_budget"], at["iso_budget_low"]
        own = next(r["hikv_own"] for r in rows if r["family"] == f["family"])
        out_f.append({**f, "hikv_own": own,
                      "time_s": hi["time_s"] if hi else None,
                      "time_s_low": lo["time_s"] if lo else None,
                      "energy_j": hi["energy_j"] if hi else None,
                      "energy_j_low": lo["energy_j"] if lo else None,
                      "bytes_burst_model": hi["bytes_burst_model"] if hi else None,
                      "bytes_burst_model_low": lo["bytes_burst_model"] if lo else None,
                      "preset": name})
    summary = _summary(cells, name, cfg, clocks, out_f, t0, e0,
                       _area(base, clocks) if area else {"available": False,
                                                         "reason": "not requested"})
    return Frontier(cells=cells, preset=name, points=tuple(rows), families=tuple(out_f),
                    summary=summary)


def _best(fams: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    ok = [f for f in fams if f["verdict"] == "yes" and f[key] is not None]
    return min(ok, key=lambda f: f[key]) if ok else None


def _ratio(h: dict[str, Any] | None, o: dict[str, Any] | None, key: str
           ) -> dict[str, Any] | None:
    """``h / o`` of ``key`` at the iso points, and the interval their iso intervals give
    (``h`` at its low end over ``o`` at its iso point, ``h`` at its iso point over ``o`` at its
    low end)."""
    if h is None or o is None:
        return None
    lo_h, lo_o = h[f"{key}_low"], o[f"{key}_low"]
    return {"ratio": h[key] / o[key],
            "low": lo_h / o[key] if lo_h is not None else None,
            "high": h[key] / lo_o if lo_o else None}


def _summary(cells: CellSet, preset: str, cfg: Config, clocks: Clocks,
             fams: list[dict[str, Any]], t0: float, e0: float, area: dict[str, Any]
             ) -> dict[str, Any]:
    per_method: dict[str, dict[str, Any]] = {}
    for f in fams:
        if f["verdict"] != "yes":
            continue
        cur = per_method.get(f["method"])
        if cur is None or f["time_s"] < cur["time_s"]:
            per_method[f["method"]] = f
    hikv = [f for f in fams if f["hikv_own"]]
    other = [f for f in fams if not f["hikv_own"]]
    bh, bo = _best(hikv, "time_s"), _best(other, "time_s")
    eh, eo = _best(hikv, "energy_j"), _best(other, "energy_j")
    beat = sorted(f["family"] for f in fams if f["verdict"] == "undecided"
                  and f["time_s_low"] is not None and bh is not None and bo is not None
                  and f["time_s_low"] < min(bh["time_s"], bo["time_s"]))

    def brief(f: dict[str, Any] | None, key: str = "time_s") -> dict[str, Any] | None:
        if f is None:
            return None
        return {"family": f["family"], "label": f["label"], "method": f["method"],
                "iso_budget": f["iso_budget"], "iso_budget_low": f["iso_budget_low"],
                key: f[key], f"{key}_low": f[f"{key}_low"],
                "bytes_burst_model": f["bytes_burst_model"],
                "bytes_burst_model_low": f["bytes_burst_model_low"]}

    return {
        "schema": FRONTIER_SCHEMA, "model": cells.model, "length": cells.length,
        "protocol": cells.protocol, "preset": preset, "code_version": code_version(),
        "test": {"level": NI_LEVEL, "ppl_margin": PPL_MARGIN, "task_margin": TASK_MARGIN,
                 "ppl": f"one-sided {NI_LEVEL:.0%} upper bound of the perplexity increase over "
                        f"full KV (paired block bootstrap, {NLL_BLOCK}-token blocks; the point "
                        "rule for rows measured without per-block NLLs)" + (
                            "; sequential cell: a row is tested at its look's ppl_level over "
                            "the windows it ran (the error split over the looks)"
                            if any(r.get("ppl_looks") for r in cells.ppl_rows) else ""),
                 "tasks": f"one-sided {NI_LEVEL:.0%} lower bound of each kept task's score "
                          "difference to full KV over the same trials (Newcombe's paired "
                          "interval)"},
        "cost": {"what": "attention time and energy per decode step of the layers the methods "
                         "manage (cost model, hikv.sim.cost.attention_model)",
                 "layers": cfg.model.layers, "kv_heads": cfg.model.kv_heads,
                 "head_dim": cfg.layout.head_dim, "context": cells.length,
                 "full_kv_time_s": t0, "full_kv_energy_j": e0, "clocks": clocks.to_dict()},
        "kept_tasks": list(cells.kept_tasks), "dropped_tasks": list(cells.dropped_tasks),
        "cells": cells.files,
        "best_per_method": {m: brief(f) for m, f in sorted(per_method.items())},
        "best_hikv": brief(bh), "best_other": brief(bo),
        "hikv_over_other_time": _ratio(bh, bo, "time_s"),
        "best_hikv_energy": brief(eh, "energy_j"), "best_other_energy": brief(eo, "energy_j"),
        "hikv_over_other_energy": _ratio(eh, eo, "energy_j"),
        "undecided_could_beat": beat, "area": area}


# --------------------------------------------------------------------------- output
def stem_prefix(model: str, protocol: str, length: int) -> str:
    """What every file name of one model, protocol and length's frontier begins with (the
    preset follows): ``frontier_<model>_<protocol>_<N>_``."""
    return f"frontier_{model}_{protocol}_{length}_"


def _stem(fr: Frontier) -> str:
    c = fr.cells
    return f"{stem_prefix(c.model, c.protocol, c.length)}{fr.preset}"


def write_frontier(fr: Frontier, out: str | Path, *, plot: bool = True) -> list[Path]:
    """``<stem>.csv`` (every point), ``<stem>_families.csv``, ``<stem>.json`` (the summary)
    and ``<stem>.png`` (the fronts) into ``out``; ``stem`` =
    ``frontier_<model>_<protocol>_<N>_<preset>``."""
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    s = _stem(fr)
    paths = [write_csv(o / f"{s}.csv", fr.points),
             write_csv(o / f"{s}_families.csv", fr.families)]
    text = json.dumps({**fr.summary, "families": list(fr.families)}, indent=1, default=str)
    paths.append(atomic_write_text(o / f"{s}.json", text + "\n"))
    if plot:
        paths.append(_plot(fr, o / f"{s}.png"))
    return paths


def _plot(fr: Frontier, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = fr.cells
    pts = list(fr.points)
    kinds = sorted({r["method"] for r in pts})
    colours = {k: plt.get_cmap("tab20")(i % 20) for i, k in enumerate(kinds)}
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6), layout="constrained")
    for ax, key, unit, scale, front in ((axes[0], "time_s", "attention time per step (us)",
                                         1e6, "on_time_front"),
                                        (axes[1], "energy_j", "attention energy per step (uJ)",
                                         1e6, "on_energy_front")):
        for k in kinds:
            rs = [r for r in pts if r["method"] == k]
            for yes in (True, False):
                sub = [r for r in rs if (r["verdict"] in ("yes", "reference")) == yes]
                if not sub:
                    continue
                x = [r[key] * scale for r in sub]
                y = [100 * r["ppl_rel"] for r in sub]
                lo = [100 * (r["ppl_rel"] - r["ppl_low"]) if r.get("ppl_low") is not None
                      else 0.0 for r in sub]
                hi = [100 * (r["ppl_high"] - r["ppl_rel"]) if r.get("ppl_high") is not None
                      else 0.0 for r in sub]
                ax.errorbar(x, y, yerr=[lo, hi], fmt="o", ms=5, lw=0.8, capsize=2,
                            color=colours[k], mfc=colours[k] if yes else "none",
                            label=k if yes or not any(
                                r["verdict"] in ("yes", "reference") for r in rs) else None)
        fr_pts = sorted((r for r in pts if r[front]), key=lambda r: r[key])
        ax.step([r[key] * scale for r in fr_pts],
                [100 * (r["ppl_high"] if r.get("ppl_high") is not None else r["ppl_rel"])
                 for r in fr_pts], where="post", color="black", lw=1.0,
                label="Pareto front (bound)")
        ax.axhline(100 * PPL_MARGIN, color="grey", ls="--", lw=0.8,
                   label=f"margin {100 * PPL_MARGIN:g} %")
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_xlabel(unit)
        ax.set_ylabel("perplexity increase over full KV (%)")
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
    axes[0].legend(fontsize=6.5, ncol=2, loc="upper right")
    r = fr.summary.get("hikv_over_other_time")
    ratio = "" if not r else (f"; best HiKV / best other at iso-accuracy: time "
                              f"{r['ratio']:.2f}x" + (f" [{r['low']:.2f}, {r['high']:.2f}]"
                                                      if r["low"] and r["high"] else ""))
    fig.suptitle(f"{c.model}, N = {c.length}, protocol {c.protocol}, preset {fr.preset}: "
                 f"filled = iso-accuracy (one-sided {NI_LEVEL:.0%}, margins "
                 f"{100 * PPL_MARGIN:g} % perplexity, {100 * TASK_MARGIN:g} points per task)"
                 + ratio, fontsize=8.5)
    return save_figure(fig, path, tight=False)


def _fmt(x: Any, spec: str = ".3g") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, spec) if isinstance(x, int | float) else str(x)


def describe(fr: Frontier) -> list[str]:
    """The frontier's result in a few lines (what ``hikv frontier`` prints)."""
    s = fr.summary
    lines = [f"{s['model']}, N = {s['length']}, protocol {s['protocol']}, preset {s['preset']}: "
             f"{len(fr.points) - 1} configurations; kept tasks {s['kept_tasks'] or 'none'}"]
    for m, b in s["best_per_method"].items():
        lines.append(f"  {m:16s} {b['label']:40s} time {_fmt(b['time_s'] * 1e6)} us "
                     f"(at its iso low end {_fmt((b['time_s_low'] or math.nan) * 1e6)} us)")
    r = s["hikv_over_other_time"]
    if r:
        lines.append(f"  best HiKV ({s['best_hikv']['label']}) / best other "
                     f"({s['best_other']['label']}): time {r['ratio']:.3f}x "
                     f"[{_fmt(r['low'])}, {_fmt(r['high'])}]")
    else:
        lines.append("  no HiKV configuration and other method both at iso-accuracy: no ratio")
    if s["undecided_could_beat"]:
        lines.append(f"  undecided, could be faster at their low end: "
                     f"{', '.join(s['undecided_could_beat'])}")
    a = s["area"]
    if a.get("available"):
        lines.append(f"  area of preset {a['preset']}'s HiKV blocks: {a['hikv_m2'] * 1e6:.3f} "
                     f"mm^2 ({100 * a['overhead_vs_baseline']:.0f} % of its baseline "
                     f"accelerator, built for d = {a['head_dim_built']})")
    return lines
