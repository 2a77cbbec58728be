"""Result files and plots of the accuracy study: CSV + JSON rows, a Markdown table, PNG plots.

Every JSON file records the rows and a ``meta`` block (command line, model, preset
configuration, seed, code version, wall time), so a number can be traced to what produced it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence as Seq
from pathlib import Path
from typing import Any

from hikv.io import (
    atomic_write_text,
    code_version,
    json_text,
    read_json,
    save_figure,
    write_csv,
)
from hikv.params import ParamError

__all__ = ["write_rows", "read_rows", "code_version", "markdown_table", "plot_tradeoff",
           "plot_fidelity"]


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list | tuple):
        return " ".join(str(x) for x in v)
    return v


def write_rows(out: Path, name: str, rows: Seq[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Write ``out/name.csv`` and ``out/name.json`` (rows + meta) atomically; returns the JSON
    path. A NaN or infinite result raises :class:`hikv.io.NonFiniteError`."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    text = json_text({"meta": meta, "rows": list(rows)}, indent=1, default=str,
                     where=str(path))
    write_csv(out / f"{name}.csv", rows, cell=_cell)
    atomic_write_text(path, text)
    return path


def read_rows(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows and meta of a JSON file written by :func:`write_rows` (a missing, unreadable or
    foreign file raises :class:`~hikv.params.ParamError` naming it)."""
    d = read_json(path, what="a results file of hikv accuracy")
    if (not isinstance(d, dict) or not isinstance(d.get("rows"), list)
            or not isinstance(d.get("meta"), dict)
            or not all(isinstance(r, dict) for r in d["rows"])):
        raise ParamError(f"{path}: not a results file of hikv accuracy (expected a JSON object "
                         "with 'meta' and a list of 'rows')")
    return d["rows"], d["meta"]


def _fmt(v: Any, spec: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if spec and isinstance(v, int | float) and not isinstance(v, bool):
        return format(v, spec)
    return str(v)


def markdown_table(rows: Seq[dict[str, Any]], cols: Seq[tuple[str, str, str]]) -> str:
    """``cols`` = (key, header, format spec); a GitHub Markdown table."""
    head = "| " + " | ".join(h for _, h, _ in cols) + " |"
    sep = "|" + "|".join("---" for _ in cols) + "|"
    body = ["| " + " | ".join(_fmt(r.get(k), f) for k, _, f in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_tradeoff(path: Path, rows: Seq[dict[str, Any]], y: str, *, ylabel: str,
                  title: str, x: str = "bytes_burst", ref: float | None = None,
                  ref_label: str = "", families: Seq[str] | None = None,
                  logy: bool = False) -> Path:
    """One line per method family: ``y`` against bytes per decode step (log x)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    fams: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get(x) is None or r.get(y) is None:
            continue
        if families is not None and r["family"] not in families:
            continue
        fams.setdefault(r["family"], []).append(r)
    for fam, rs in sorted(fams.items()):
        rs = sorted(rs, key=lambda r: r[x])
        style = "-o" if fam.startswith("hikv") else "--s"
        if fam == "full":
            style = "k*"
        ax.plot([r[x] for r in rs], [r[y] for r in rs], style, label=fam, markersize=5)
        for r in rs:
            if fam != "full" and r.get("budget") and not fam.startswith("hikv-none"):
                ax.annotate(str(r["budget"]), (r[x], r[y]), fontsize=6,
                            textcoords="offset points", xytext=(2, 2))
    if ref is not None:
        ax.axhline(ref, color="grey", lw=0.8, ls=":", label=ref_label or None)
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("bytes read per decode step per (layer, KV head), burst granularity")
    ax.set_ylabel(ylabel)
    return _finish(plt, fig, ax, path, title)


def plot_fidelity(path: Path, rows: Seq[dict[str, Any]], *, title: str) -> Path:
    """Mean relative attention-output error per layer, one line per method."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["label"], []).append(r)
    for lab, rs in sorted(by.items()):
        rs = sorted(rs, key=lambda r: r["layer"])
        ax.plot([r["layer"] for r in rs], [max(r["rel_err_mean"], 1e-8) for r in rs], "-o",
                markersize=3, label=lab)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("relative L2 error of attention output vs full KV")
    return _finish(plt, fig, ax, path, title)


def _finish(plt: Any, fig: Any, ax: Any, path: Path, title: str) -> Path:
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=6, ncol=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path, dpi=130)
