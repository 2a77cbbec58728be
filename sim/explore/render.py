"""Rendering of ``hikv report``: Markdown, CSV, JSON and plots of a
:class:`~hikv.sim.explore.report.Report`.

:func:`write_report` is the only function that writes files (into the folder it is given).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from hikv.io import atomic_write_text, save_figure
from hikv.params import (
    Config,
    config_to_json,
    from_dict,
)
from hikv.sim.cost.engines import TIME_TIE
from hikv.sim.explore.report import MethodRow, Report

__all__ = ["markdown", "rows_csv", "report_json", "save_figure", "plot_report", "write_report",
           "CSV_FIELDS", "group_same", "operating_point"]


# --------------------------------------------------------------------------- output
def _fmt_bytes(b: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= k:
            return f"{b / k:.3f} {unit}"
    return f"{b:.0f} B"


def _provenance_lines(rep: Report) -> list[str]:
    """Where the areas and clocks came from: the results shipped with the kit for this RTL,
    the user cache, or the flow run now."""
    p = rep.provenance
    parts = [f"{what} " + ", ".join(f"{k} {v}" for k, v in p[sec].items())
             for sec, what in (("area", "area:"), ("clocks", "clocks:")) if p.get(sec)]
    if not parts:
        return []
    return ["Synthesis and timing results (shipped: the kit's results for this RTL; cache: "
            "$HIKV_CACHE; synthesised: run now): " + "; ".join(parts) + ".", ""]


def markdown(rep: Report) -> str:
    """The report as Markdown."""
    c = rep.config
    lines = [f"# HiKV attention-level results: preset `{rep.preset}`", "",
             f"Code {rep.code_version}; model {c['model']['name']}, context N = {c['context']},"
             f" budget B = {c['policy']['budget']}, {c['accel']['memory']} "
             f"{c['accel']['mem_bandwidth_bytes_per_s'] / 1e9:g} GB/s, "
             f"{c['accel']['pe_lanes']} PE lanes at {_pe_clock(rep) / 1e9:.3g} GHz, "
             f"{c['accel']['tech_nm']} nm.", "",
             f"Budgets: {rep.budgets}. Sorter/loader timing: `{rep.timing_model}` (the RTL's "
             "timing contracts, checked against cocotb).", "",
             *([f"Stage I engine: {rep.engine['text']}.", ""] if rep.engine else []),
             *_provenance_lines(rep),
             "All figures below are **model** results of this flow (per decode step, all "
             "layers and KV heads).", "",
             "| method | bytes/step | full KV bytes / this | time/step (us) | speedup vs full "
             "[roofline bound] | HiKV speedup vs this [roofline bound] | energy/step (uJ) | "
             "energy vs full | this bytes / HiKV bytes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rep.rows:
        lines.append(
            f"| {r.label} | {_fmt_bytes(r.bytes_burst)} | {r.bytes_reduction_vs_full:.2f}x | "
            f"{r.time_s * 1e6:.2f} | {r.speedup_vs_full:.2f}x "
            f"[{r.roofline_bound_vs_full:.2f}x, {r.bound}] | {r.hikv_speedup_vs_this:.2f}x "
            f"[{r.hikv_roofline_bound_vs_this:.2f}x] | {r.energy_j * 1e6:.2f} | "
            f"{-100 * r.energy_reduction_vs_full:+.1f}% | "
            f"{r.hikv_bytes_reduction_vs_this:.2f}x |")
    lines += ["", "Cycles per (layer, KV head), in the PE array's clock: select (scoring "
              "metadata; of which the low-bit scoring unit), sort, attend; layer time with the "
              "KV heads pipelined over the units; bytes roofline (bytes / bandwidth) over the "
              "time.", "",
              "| method | select | of it: scorer | sort | attend | layer | at bytes bound | "
              "energy split (DRAM / SRAM / MAC / softmax / sorter / loader / scorer, %) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rep.rows:
        tot = sum(r.energy_parts_j.values())
        split = " / ".join(f"{100 * r.energy_parts_j.get(k, 0.0) / tot:.1f}"
                           for k in ENERGY_PARTS)
        lines.append(f"| {r.label} | {r.select_cycles_per_head:.0f} | "
                     f"{r.scorer_cycles_per_head:.0f} | "
                     f"{r.sort_cycles_per_head:.0f} | {r.attend_cycles_per_head:.0f} | "
                     f"{r.layer_cycles:.0f} | {100 * r.bytes_bound_fraction:.0f}% | {split} |")
    lines += ["", "## Static energy (leakage x step time)", "", *_static_lines(rep)]
    lines += ["", "## Clocks", "", *_clock_lines(rep)]
    lines += ["", "## Area (synthesised from our RTL)", ""]
    a = rep.area
    if not a.get("available"):
        lines.append(f"Unavailable: {a.get('reason', '')}")
    else:
        lines += [f"Baseline accelerator (the system the overhead is measured against): "
                  f"{rep.baseline_system}.", "",
                  f"At {a['tech_nm']} nm. Loader instances: {a['loader_instances']} (at the "
                  f"loader's clock, {a.get('loader_clock_hz', 0) / 1e6:.0f} MHz).", "",
                  "| part | item | count | unit area (um^2) | area (mm^2) | NAND2 eq./unit | "
                  "origin |", "|---|---|---|---|---|---|---|"]
        for i in a["items"]:
            lines.append(f"| {i['part']} | {i['name']} | {i['count']:g} | "
                         f"{i['unit_area_m2'] * 1e12:,.1f} | {i['area_m2'] * 1e6:.4f} | "
                         f"{i['nand2_equivalents_per_unit']:,.0f} | {i['origin']} |")
        lines.append("")
        lines.append(f"Baseline accelerator: {a['baseline_m2'] * 1e6:.4f} mm^2; HiKV blocks: "
                     f"{a['hikv_m2'] * 1e6:.4f} mm^2.")
        if a["missing_blocks"]:
            lines.append(f"Overhead pending: {', '.join(a['missing_blocks'])} not registered "
                         "in hikv.hw.blocks yet.")
        else:
            lines.append(f"Overhead: {100 * a['overhead_vs_baseline']:.2f}% of the baseline, "
                         f"{100 * a['share_of_system']:.2f}% of the system.")
            lines += ["", *_area_breakdown(a)]
        lines += _engine_lines(rep)
        lines += ["", *_published_lines(a)]
    lines += ["", "## Reference claims against ours", "",
              "| claim | reference (seed paper, not measured here) | ours | origin of ours |",
              "|---|---|---|---|"]
    for cl in rep.claims:
        lines.append(f"| {cl['claim']} | {cl['reference']} | {cl['ours']} | {cl['origin']} |")
    lines += ["", "Conditions of ours: " + rep.claims[0]["conditions"] + ".", "", "## Notes", ""]
    lines += [f"- {n}" for n in rep.notes]
    for s in rep.sections:
        lines += ["", f"## {s.title}", "", s.markdown]
    return "\n".join(lines) + "\n"


def _engine_lines(rep: Report) -> list[str]:
    """HiKV with each Stage I engine (``sorter.kind``): the one in use and the alternative."""
    e = rep.area.get("engines") or {}
    if not e.get("available"):
        return ["", f"Stage I engines side by side: unavailable ({e.get('reason', 'no area')})."
                ] if e else []
    out = ["", "### HiKV with each Stage I engine (`sorter.kind`)", "",
           "HiKV's units with the merge sorter and with the radix-select top-k engine in its "
           "place (docs/topk.md; a policy with a Stage II rule adds the Stage II selection "
           "block `stage2` beside the engine), each engine at its own clock; the HiKV row of "
           "the table above is the one in use.", "",
           "| sorter.kind | sort blocks | sort blocks (mm^2) | HiKV units (mm^2) | % of system | "
           "Stage I clock (MHz) | sort cycles/head | HiKV time/step (us) | speedup vs full | "
           "energy/step (uJ) | sort energy/step (nJ) | bound |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for k, v in e["kinds"].items():
        use = " (in use)" if v["in_use"] else ""
        out.append(f"| {k}{use} | {' + '.join(v['sort_blocks'])} | {v['sort_m2'] * 1e6:.4f} | "
                   f"{v['hikv_m2'] * 1e6:.4f} | {100 * v['share_of_system']:.1f} | "
                   f"{v['stage1_clock_hz'] / 1e6:,.0f} | {v['sort_cycles_per_head']:,.0f} | "
                   f"{v['time_s'] * 1e6:.2f} | {v['speedup_vs_full']:.2f}x | "
                   f"{v['energy_j'] * 1e6:.2f} | {v['sorter_energy_j'] * 1e9:.2f} | "
                   f"{v['bottleneck']} |")
    fav = e.get("favoured")
    if fav:
        use = ("this configuration uses it" if e["kinds"][fav]["in_use"] else
               f"this configuration does not (`--set sorter.kind={fav}` for it)")
        out += ["", f"The numbers favour **{fav}** ({e['favoured_why']}; the faster step, or "
                f"the smaller HiKV units where the steps are within {100 * TIME_TIE:g} %, the "
                f"rule each preset's `sorter.kind` follows): {use}."]
    return out


def _area_breakdown(a: dict[str, Any]) -> list[str]:
    """Where the HiKV area goes: each block's share of the baseline and its flip-flops."""
    base = a["baseline_m2"]
    per: dict[str, float] = {}
    count: dict[str, float] = {}
    for i in a["items"]:
        if i["part"] == "hikv":
            blk = i["name"].split(".")[0]
            per[blk] = per.get(blk, 0.0) + i["area_m2"]
            if "." not in i["name"]:
                count[blk] = i["count"]
    out = []
    for blk, area in per.items():
        syn = a["synthesis"].get(blk, {})
        seq = syn.get("sequential_area_sky130_m2", 0.0) / max(syn.get("area_sky130_m2", 1), 1e-30)
        out.append(f"- {blk}: {count.get(blk, 1):g} x {area / count.get(blk, 1) * 1e6:.4f} "
                   f"mm^2 = {100 * area / base:.1f}% of the baseline; "
                   f"{syn.get('flipflops', 0):,} flip-flops per copy ({100 * seq:.0f}% of its "
                   "cell area)")
    if "loader" in per and count.get("loader", 1) > 1:
        one = per["loader"] / count["loader"]
        rest = sum(v for k, v in per.items() if k != "loader")
        out.append(f"- with one loader instead of {count['loader']:g}: "
                   f"{100 * (rest + one) / base:.1f}% of the baseline")
    return out


def _static_lines(rep: Report) -> list[str]:
    """Every method's energy per step as dynamic + static, both ratios against full KV; or why
    there is no static number."""
    sp = rep.area.get("static_power") if rep.area.get("available") else None
    if not sp:
        why = rep.area.get("reason", "")
        return [f"Not available: static energy is leakage power x step time, and leakage needs "
                f"the synthesised areas, which this report does not have ({why}; run without "
                "--no-area). No static number is given without them."]
    src = sp["sources"]
    out = [f"Leakage at {sp['tech_nm']} nm: baseline system {sp['baseline_w'] * 1e3:.3f} mW "
           f"(logic {sp['baseline_logic_w'] * 1e3:.3f} mW, SRAM "
           f"{sp['baseline_sram_w'] * 1e6:.3g} uW); HiKV's units {sp['hikv_w'] * 1e3:.3f} mW "
           f"(logic {sp['hikv_logic_w'] * 1e3:.3f} mW, SRAM {sp['hikv_sram_w'] * 1e6:.3g} uW). "
           "Every method is charged the baseline system for its step time; HiKV also its units "
           "(sorter, loaders, scoring unit where used, pipeline SRAMs). Logic: "
           f"{sp['logic_w_per_m2'] * 1e-3:.1f} mW/mm^2 ({src['logic'].split(':')[0]}); SRAM: "
           f"CACTI 7, {src['sram_corner']}; node scaling: leakage like energy "
           "(hikv/sim/data/leakage.json).", "",
           "| method | dynamic (uJ) | static (uJ) | dynamic + static (uJ) | static share | "
           "energy vs full: dynamic | energy vs full: with static |",
           "|---|---|---|---|---|---|---|"]
    for r in rep.rows:
        tot = r.energy_with_static_j
        out.append(f"| {r.label} | {r.energy_j * 1e6:.4g} | {r.static_energy_j * 1e6:.4g} | "
                   f"{tot * 1e6:.4g} | {100 * r.static_energy_j / tot:.1f}% | "
                   f"{-100 * r.energy_reduction_vs_full:+.1f}% | "
                   f"{-100 * r.energy_with_static_reduction_vs_full:+.1f}% |")
    return out


def _published_lines(a: dict[str, Any]) -> list[str]:
    """The HiKV units over a published denominator (or why there is none) and our per-unit
    areas against published ones, each cited."""
    pub = a.get("published")
    if not pub:
        return []
    den = pub["denominator"]
    out = ["### Over a published accelerator", ""]
    if den.get("available"):
        out.append(f"{den.get('text', '')}")
    else:
        out.append(f"Not available: {den['reason']} Searched: " + "; ".join(den["searched"])
                   + ".")
    out += ["", f"### Per-unit areas against published figures ({a['tech_nm']} nm)", "",
            "| unit | ours (um^2) | published (um^2) | ours / published | published unit | "
            "source |", "|---|---|---|---|---|---|"]
    for u in pub["units"]:
        out.append(f"| {u['unit']} | {u['ours_m2'] * 1e12:,.1f} | "
                   f"{u['published_m2'] * 1e12:,.1f} | {u['ours_over_published']:.2f} | "
                   f"{u['published_what']} | {u['source']} |")
    return out


CSV_FIELDS = [f.name for f in dataclasses.fields(MethodRow) if f.name != "energy_parts_j"]
#: energy parts of a row, in table order
ENERGY_PARTS = ("dram", "sram", "mac", "softmax", "sorter", "loader", "scorer")


def _pe_clock(rep: Report) -> float:
    ck = rep.clocks
    return float(ck["reference_hz"]) if ck else float(rep.config["accel"]["clock_hz"])


def _clock_lines(rep: Report) -> list[str]:
    """Every block's clock with its origin, source and critical path."""
    ck = rep.clocks
    if not ck:
        return ["Every block at accel.clock_hz (assumed, not checked)."]
    out = [f"Policy `{ck['policy']}`" + (
        " (each phase at its own block's clock; cycles in the PE array's clock)."
        if ck["policy"] == "per_block" else
        f" (the whole accelerator at the slowest used block's clock, "
        f"{ck['single_hz'] / 1e6:.0f} MHz)."), "",
        "| block | clock (MHz) | runs at (MHz) | origin | source | critical path |",
        "|---|---|---|---|---|---|"]
    for b, c in ck["blocks"].items():
        used = "" if c["used"] else " (not used by this preset)"
        out.append(f"| {b}{used} | {c['hz'] / 1e6:.0f} | {c['effective_hz'] / 1e6:.0f} | "
                   f"{c['origin']} | {c['source']} | {c['critical_path'] or '-'} |")
    if ck["assumed"]:
        out += ["", "**Assumed, not checked:** " + ", ".join(ck["assumed"]) + " (the PE array: "
                "the baseline accelerator's clock, the reference; any other block: no timing "
                "estimate, synthesis not allowed or not possible)."]
    return out


def _cell(x: Any) -> Any:
    """A CSV cell: a figure the report does not have (NaN, e.g. static energy without the
    synthesised areas) is written empty, never as ``nan``."""
    return "" if isinstance(x, float) and math.isnan(x) else x


def rows_csv(rep: Report) -> str:
    buf = io.StringIO()
    parts = list(ENERGY_PARTS)
    w = csv.writer(buf, lineterminator="\n")
    kind = rep.engine.get("kind", "")
    engines = rep.area.get("engines") or {}
    shares = engines.get("kinds", {})
    alt = [k for k in shares if k != kind]
    w.writerow(["preset", "code_version", "timing_model", "budgets", *CSV_FIELDS,
                *(f"energy_{p}_j" for p in parts), "sorter_kind", "share_of_system",
                "alt_sorter_kind", "alt_share_of_system", "favoured_sorter_kind"])
    share = shares.get(kind, {}).get("share_of_system", math.nan)
    alt_share = shares[alt[0]]["share_of_system"] if alt else math.nan
    for r in rep.rows:
        w.writerow([rep.preset, rep.code_version, rep.timing_model, rep.budgets,
                    *(_cell(getattr(r, f)) for f in CSV_FIELDS),
                    *(r.energy_parts_j.get(p, 0.0) for p in parts), kind, _cell(share),
                    alt[0] if alt else "", _cell(alt_share), engines.get("favoured", "")])
    return buf.getvalue()


def report_json(rep: Report) -> dict[str, Any]:
    d = dataclasses.asdict(rep)
    d["rows"] = [dataclasses.asdict(r) for r in rep.rows]
    return _jsonable(d)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    return x



#: Plotted values that agree within this relative tolerance are drawn once, with a shared label.
SAME_RTOL = 1e-3
#: HiKV's colour; the other methods take the palette below, in order, with a marker each.
HIKV_COLOUR = "#d62728"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#637939", "#843c39")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "h", "<", ">", "p", "d")


def _is_hikv(label: str) -> bool:
    return label.startswith("hikv")


def group_same(labels: list[str], values: list[list[float]],
               rtol: float = SAME_RTOL) -> list[tuple[list[str], list[float]]]:
    """Methods whose values all agree within ``rtol`` (relative), in first-seen order:
    ``[(labels, values), ...]``. HiKV is never merged with another method, so it stays
    visible on its own."""
    groups: list[tuple[list[str], list[float]]] = []
    for lab, vals in zip(labels, values, strict=True):
        for labs, ref in groups:
            if (not _is_hikv(lab) and not any(_is_hikv(x) for x in labs)
                    and np.allclose(vals, ref, rtol=rtol, atol=0.0)):
                labs.append(lab)
                break
        else:
            groups.append(([lab], list(vals)))
    return groups


def _style(i: int, labels: list[str]) -> dict[str, Any]:
    """Colour, marker and weight of the ``i``-th non-HiKV group (HiKV: red, thick, on top)."""
    if any(_is_hikv(x) for x in labels):
        return {"color": HIKV_COLOUR, "marker": "*", "lw": 2.6, "ms": 9, "zorder": 5}
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)],
            "lw": 1.3, "ms": 5, "zorder": 3}


def _group_label(labels: list[str]) -> str:
    if len(labels) <= 3:
        return ", ".join(labels)
    return f"{', '.join(labels[:2])} + {len(labels) - 2} more (same)"


def operating_point(rep: Report) -> str:
    """One line naming the operating point of a report's figures: preset, model, context,
    budget and clocks."""
    cfg = rep.config
    model = cfg.get("model", {})
    pol = cfg.get("policy", {})
    clk = rep.clocks.get("blocks", {}) if rep.clocks else {}
    if clk:
        origins = sorted({b.get("origin", "?") for b in clk.values()})
        mhz = ", ".join(f"{k} {b.get('effective_hz', b.get('hz', 0)) / 1e6:.0f}"
                        for k, b in clk.items())
        clocks = f"clocks MHz: {mhz} ({'/'.join(origins)})"
    else:
        clocks = "clocks: not recorded"
    return (f"preset {rep.preset}: {model.get('name', '?')} (d = {model.get('head_dim', '?')}), "
            f"context N = {cfg.get('context', '?')} tokens, nominal budget B = "
            f"{pol.get('budget', '?')} tokens; {clocks}")


def _bar_panel(ax: Any, rows: list[dict[str, Any]], title: str) -> None:
    labels = [r["label"] for r in rows]
    vals = [[r["time"], r["energy"], r["bytes"]] for r in rows]
    groups = group_same(labels, vals)
    x = np.arange(len(groups))
    for i, (name, colour) in enumerate((("attention time", "#4c72b0"),
                                        ("energy", "#55a868"), ("external bytes", "#8172b2"))):
        heights = [g[1][i] for g in groups]
        bars = ax.bar(x + (i - 1) * 0.27, heights, 0.27, label=name, color=colour)
        for b, (labs, _) in zip(bars, groups, strict=True):
            if any(_is_hikv(s) for s in labs):
                b.set_edgecolor(HIKV_COLOUR)
                b.set_linewidth(2.0)
    ticks = ["\n".join(_wrap(g[0])) for g in groups]
    ax.set_xticks(x, ticks, rotation=0, fontsize=6.5)
    for lab, (labs, _) in zip(ax.get_xticklabels(), groups, strict=True):
        if any(_is_hikv(s) for s in labs):
            lab.set_color(HIKV_COLOUR)
            lab.set_fontweight("bold")
    ax.axhline(1.0, color="black", lw=0.6, ls=":")
    ax.set_ylabel("per decode step, relative to full KV (= 1)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def _wrap(labels: list[str]) -> list[str]:
    """Tick label lines: a group of methods one per line (at most three, then '+ n more')."""
    if len(labels) <= 3:
        return labels
    return [*labels[:2], f"+ {len(labels) - 2} more (same)"]


def _curve_panel(ax: Any, curve: dict[str, Any], title: str) -> None:
    labels = list(curve["speedup_vs_full"])
    groups = group_same(labels, [curve["speedup_vs_full"][k] for k in labels])
    i = 0
    for labs, ys in groups:
        st = _style(i, labs)
        if not any(_is_hikv(s) for s in labs):
            i += 1
        ax.plot(curve["context"], ys, label=_group_label(labs), color=st["color"],
                marker=st["marker"], lw=st["lw"], ms=st["ms"], zorder=st["zorder"])
    ax.axhline(1.0, color="black", lw=0.6, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length N (tokens)")
    ax.set_ylabel("attention speedup vs full KV (x)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5)


def _bar_rows(rows: tuple[MethodRow, ...] | list[MethodRow]) -> list[dict[str, Any]]:
    full = rows[0]
    return [{"label": r.label, "time": r.time_s / full.time_s,
             "energy": r.energy_j / full.energy_j,
             "bytes": r.bytes_burst / full.bytes_burst} for r in rows]


def plot_report(rep: Report, out: Path) -> list[Path]:
    """``methods.png`` (time, energy and external bytes per decode step against full KV) and
    ``speedup_vs_context.png`` (speedup against context length). Methods whose plotted values
    agree within :data:`SAME_RTOL` are drawn once with a shared label; HiKV is drawn in red and
    never merged. With an iso-accuracy report the nominal-budget view is drawn beside the
    iso-accuracy one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    iso = bool(rep.nominal)
    caption = (operating_point(rep) + f". Cost model; methods equal within {SAME_RTOL:.1%} "
               "share one label." + (f" Right: each method at its {rep.budgets}." if iso else ""))
    views = ([("nominal budgets (every method at B)", rep.nominal["rows"],
               rep.nominal["context_curve"]),
              ("iso-accuracy budgets (each method at its own B)", _bar_rows(rep.rows),
               rep.context_curve)]
             if iso else [("nominal budgets (every method at B)", _bar_rows(rep.rows),
                           rep.context_curve)])
    paths = []
    fig, axes = plt.subplots(1, len(views), figsize=(9.5 * len(views), 5.4), squeeze=False,
                             layout="constrained")
    for ax, (title, rows, _) in zip(axes[0], views, strict=True):
        _bar_panel(ax, rows, f"{title}: per decode step")
    fig.supxlabel(textwrap.fill(caption, 150 * len(views)), fontsize=6.5, x=0.01, ha="left")
    paths.append(save_figure(fig, out / "methods.png", tight=False))
    fig, axes = plt.subplots(1, len(views), figsize=(6.5 * len(views), 5.0), squeeze=False,
                             layout="constrained")
    for ax, (title, _, curve) in zip(axes[0], views, strict=True):
        _curve_panel(ax, curve, title)
    fig.supxlabel(textwrap.fill(caption, 110 * len(views)), fontsize=6, x=0.01, ha="left")
    paths.append(save_figure(fig, out / "speedup_vs_context.png", tight=False))
    return paths


def write_report(rep: Report, out: Path, *, plots: bool = True) -> list[Path]:
    """Write report.md, report.csv, report.json, config.json (and plots) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, text in (("report.md", markdown(rep)), ("report.csv", rows_csv(rep)),
                       ("report.json", json.dumps(report_json(rep), indent=2) + "\n")):
        atomic_write_text(out / name, text)
        files.append(out / name)
    cfg_text = config_to_json(from_dict(Config, rep.config))
    atomic_write_text(out / "config.json", cfg_text + "\n")
    files.append(out / "config.json")
    if plots:
        files += plot_report(rep, out)
    return files


