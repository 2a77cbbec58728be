"""Where a seed-suite run folder stands (``hikv accuracy status --out DIR``), read without
touching it: whether a run is writing into it now, the cells whose rows are written
(``cells/<key>.json``), and the cells in progress from their journals
(``cells/<key>.partial.jsonl``, :mod:`hikv.model.accuracy.journal`): records finished of those
planned (perplexity windows or task trials), the methods still running in the last one (a
sequential or adaptive cell stops a method once its test decides), and the time spent so far.
A perplexity cell in progress also gets its verdicts so far (:func:`ppl_interim`): the methods
stopped at a look with the verdict they stopped on, the paired intervals of those still running,
and full KV against itself on disjoint halves of the windows finished.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from hikv.io import MANIFEST, out_dir_holder
from hikv.model.accuracy import iso as NI
from hikv.model.accuracy.io import read_rows
from hikv.model.accuracy.journal import PARTIAL_SUFFIX, read_journal
from hikv.model.accuracy.seed_spec import suite_key_sizes
from hikv.params import ParamError

__all__ = ["suite_status", "status_lines", "journal_ppl_rows", "ppl_interim", "task_interim",
           "journal_pace"]

#: the label of full KV's row in a perplexity cell
FULL = "full"

def _methods(rec: dict[str, Any]) -> int:
    """Methods run in one journal record: a window's ``methods`` or a trial's ``labels``."""
    got = rec.get("methods", rec.get("labels", ()))
    return len(got)


def journal_ppl_rows(head: dict[str, Any], recs: list[dict[str, Any]], planned: int
                     ) -> dict[str, dict[str, Any]]:
    """The perplexity rows (what the non-inferiority test reads: ``tokens``, ``windows``,
    ``windows_planned`` = ``planned``, ``nll``, ``ppl``, ``nll_blocks``) of the windows a
    perplexity cell's journal holds, per label of its header; a method runs a prefix of the
    windows (it stops at a look), so its row holds the records that name it up to the first
    that does not. Labels without a window are left out."""
    rows = {}
    for label in head.get("labels", []):
        runs = []
        for rec in recs:
            m = rec.get("methods", {}).get(label)
            if m is None:
                break
            runs.append(m)
        if not runs:
            continue
        nll, tok = sum(float(m["nll"]) for m in runs), sum(int(m["cnt"]) for m in runs)
        rows[label] = {"label": label, "tokens": tok, "windows": len(runs),
                       "windows_planned": planned, "nll": nll / tok, "ppl": math.exp(nll / tok),
                       "nll_block_tokens": NI.NLL_BLOCK,
                       "nll_blocks": [NI.nll_block_sums(m["tok"]) for m in runs]}
    return rows


def ppl_interim(head: dict[str, Any], recs: list[dict[str, Any]], planned: int,
                looks: tuple[int, ...] = (), full: dict[str, Any] | None = None
                ) -> dict[str, Any] | None:
    """The verdicts so far of a perplexity cell from its journal (``planned`` windows, the
    sequential cell's ``looks``): per method, ``windows`` run, ``state`` (``stopped`` at a look
    or ``running``), its paired :func:`~hikv.model.accuracy.iso.ppl_increase_bound` at the
    level it stopped on (a look's, :func:`~hikv.model.accuracy.iso.look_levels`) or, while it
    runs, at the level of the cell's last look, and the ``verdict`` that bound gives against
    the 1 % margin (for a running method, the one it would get were the cell to end now;
    ``windows_to_decide``: for a running undecided one, the window count at which its interval,
    narrowing as ``1 / sqrt(windows)``, would clear the margin were its estimate the truth);
    ``self_check``: full KV against itself on disjoint halves of its windows
    (:func:`~hikv.model.accuracy.iso.split_self_check`). Full KV's row is the journal's, or
    ``full`` (the cell file's, where the journal measures methods added to a written cell);
    None without either."""
    rows = journal_ppl_rows(head, recs, planned)
    full = rows.pop(FULL, None) or full
    if full is None:
        return None
    levels = NI.look_levels(looks, planned) if looks else {planned: NI.NI_LEVEL}
    methods = []
    for label, row in rows.items():
        n = row["windows"]
        stopped = n < len(recs)
        level = levels.get(n, levels[planned]) if stopped else levels[planned]
        b = NI.ppl_increase_bound(row, NI.over_windows(full, n), level=level)
        verdict = NI.bound_verdict(b)
        need = None
        if verdict == "undecided" and not stopped and b.estimate != NI.PPL_MARGIN:
            # the interval narrows as 1 / sqrt(windows): the count at which it would clear
            # the margin were the estimate the truth (a projection, not a promise)
            half = (b.high - b.low) / 2
            need = math.ceil(n * (half / abs(b.estimate - NI.PPL_MARGIN)) ** 2)
        methods.append({"label": label, "windows": n, "level": level, "verdict": verdict,
                        "state": "stopped" if stopped else "running", "estimate": b.estimate,
                        "low": b.low, "high": b.high, "windows_to_decide": need})
    return {"windows": len(recs), "planned": planned, "levels": levels, "methods": methods,
            "self_check": NI.split_self_check(full)}


def task_interim(recs: list[dict[str, Any]], full: list[float] | None = None
                 ) -> dict[str, Any] | None:
    """The verdicts so far of a task cell from its trial journal: per method, the trials it
    ran (a prefix of the cell's: an adaptive cell stops a method that can no longer pass), its
    mean score, and its paired score difference to full KV over those trials with one-sided
    95 % bounds (:func:`~hikv.model.accuracy.iso.task_difference_bound`) and the ``verdict``
    they give against the -5 point margin; ``state`` ``stopped`` or ``running``. ``full``:
    full KV's per-trial scores where the journal has none (a run adding methods to a written
    cell, whose full KV row is on disk). None without full KV's scores."""
    scores: dict[str, list[float]] = {}
    for rec in recs:
        for lab, sc in zip(rec.get("labels", ()), rec.get("scores", ()), strict=False):
            scores.setdefault(lab, []).append(float(sc))
    full = scores.pop(FULL, None) or full
    if not full:
        return None
    last = set(recs[-1].get("labels", ())) if recs else set()
    methods = []
    for label, sc in scores.items():
        b = NI.task_difference_bound(sc, full)
        methods.append({"label": label, "trials": len(sc), "mean": sum(sc) / len(sc),
                        "state": "running" if label in last else "stopped",
                        "estimate": b.estimate, "low": b.low, "high": b.high,
                        "verdict": NI.task_bound_verdict(b)})
    return {"trials": len(recs), "full_mean": sum(full) / len(full), "methods": methods}


def _written_full(path: Path) -> dict[str, Any] | None:
    """Full KV's row of a written cell (the pairing of methods a run adds to it)."""
    if not path.is_file():
        return None
    rows, _ = read_rows(path)
    return next((r for r in rows if r.get("label") == FULL), None)


def journal_pace(recs: list[dict[str, Any]], planned: int | None) -> dict[str, Any] | None:
    """The CPU seconds a journal's last records took each, over the last run of records with
    the last one's number of methods (``records``, ``methods``, ``cpu_each``), and what the
    ``left`` of ``planned`` would take at that pace (``cpu_left``: at most, since a look or
    an adaptive cell stops methods); None without a record's time or a plan."""
    if not recs or planned is None or "cpu_s" not in recs[-1]:
        return None
    m = _methods(recs[-1])
    k = 0
    while k < len(recs) and _methods(recs[-1 - k]) == m:
        k += 1
    before = float(recs[-1 - k].get("cpu_s", 0.0)) if k < len(recs) else 0.0
    each = (float(recs[-1]["cpu_s"]) - before) / k
    left = max(0, int(planned) - len(recs))
    return {"records": k, "methods": m, "cpu_each": each, "left": left,
            "cpu_left": each * left}


def suite_status(out: str | Path, *, verdicts: bool = True) -> dict[str, Any]:
    """The state of the seed-suite folder ``out`` (see the module docstring), with a
    perplexity cell's verdicts so far (``interim``, :func:`ppl_interim`) unless ``verdicts``
    is false;
    :class:`~hikv.params.ParamError` naming ``--out`` when it holds no ``cells/`` folder."""
    out = Path(out)
    cells = out / "cells"
    if not cells.is_dir():
        raise ParamError(f"--out {out}: no seed-suite cells here (no {cells} folder); give the "
                         "folder of a `hikv accuracy run --suite seed-...` run")
    done = []
    for f in sorted(cells.glob("*.json")):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            raise ParamError(f"--out {out}: cell file {f.name} is not JSON ({e})") from None
        done.append({"cell": f.stem, "rows": len(data.get("rows", []))})
    running = []
    for f in sorted(cells.glob("*" + PARTIAL_SUFFIX)):
        head, recs, torn = read_journal(f)
        key = f.name[:-len(PARTIAL_SUFFIX)]
        if not isinstance(head, dict):
            running.append({"cell": key, "unreadable": True})
            continue
        cell = str(head.get("cell", key))
        ppl = "windows" in head             # a perplexity cell's header hashes its windows
        sizes = suite_key_sizes(head["suite_key"]) if head.get("suite_key") else {}
        planned = sizes.get("windows" if ppl else "trials")
        last = recs[-1] if recs else {}
        start = len(head.get("labels", []))     # the methods active when the journal began
        interim = None
        if ppl and verdicts and recs and planned:
            written = (None if FULL in head.get("labels", [])
                       else _written_full(cells / f"{cell}.json"))
            interim = ppl_interim(head, recs, int(planned), tuple(sizes.get("looks", ())),
                                  full=written)
        elif not ppl and verdicts and recs:
            # a task journal's header names the methods it began with (``active``)
            written = (None if FULL in head.get("active", [FULL])
                       else _written_full(cells / f"{cell}.json"))
            interim = task_interim(recs, full=None if written is None
                                   else [float(x) for x in written.get("scores", ())])
        running.append({
            "cell": cell, "screen": bool(head.get("screen")),
            "unit": "windows" if ppl else "trials", "finished": len(recs),
            "interim": interim,
            "planned": planned, "torn": torn, "pace": journal_pace(recs, planned),
            "methods_first": _methods(recs[0]) if recs else start,
            "methods_last": _methods(last) if recs else start,
            "wall_s": float(last.get("wall_s", 0.0)), "cpu_s": float(last.get("cpu_s", 0.0))})
    return {"out": str(out), "holder": out_dir_holder(out),
            "finished": (out / MANIFEST).is_file(), "done": done, "running": running}


def _pct(x: float) -> str:
    return f"{100 * x:+.2f} %"


def _interim_lines(it: dict[str, Any], each: bool) -> list[str]:
    """A perplexity cell's :func:`ppl_interim` as status lines (every method with ``each``)."""
    ms = it["methods"]
    stopped = [m for m in ms if m["state"] == "stopped"]
    running = [m for m in ms if m["state"] == "running"]
    by = {v: sum(m["verdict"] == v for m in stopped) for v in NI.VERDICTS}
    lines = [f"    stopped at a look: {len(stopped)} ({by['yes']} non-inferior, {by['no']} "
             f"inferior" + (f", {by['undecided']} undecided" if by["undecided"] else "")
             + f"); running: {len(running)} besides full KV"]
    if running:
        now = {v: sum(m["verdict"] == v for m in running) for v in NI.VERDICTS}
        hw = sorted((m["high"] - m["low"]) / 2 for m in running)
        lines.append(
            f"    running, were the cell to end now ({100 * it['levels'][it['planned']]:g} % "
            f"one-sided): {now['yes']} yes, {now['no']} no, {now['undecided']} undecided; "
            f"paired half-width {100 * hw[0]:.2f} to {100 * hw[-1]:.2f} % (median "
            f"{100 * statistics.median(hw):.2f} %) over {it['windows']} windows")
        need = sorted(m["windows_to_decide"] for m in running if m["windows_to_decide"])
        if need:
            span = (f"{need[0]:,} windows" if len(need) == 1 else f"{need[0]:,} to "
                    f"{need[-1]:,} windows (median {statistics.median(need):,.0f})")
            lines.append(f"    the undecided would decide after about {span}, were their "
                         "estimates the truth")
    sc = it["self_check"]
    if sc:
        lines.append(
            f"    full KV against itself, disjoint halves of {sc['windows']} windows: "
            f"{_pct(sc['estimate'])} [{_pct(sc['low'])}, {_pct(sc['high'])}] "
            f"({100 * sc['level']:g} % one-sided bounds), half-width "
            f"{100 * sc['half_width']:.2f} % (limit {100 * sc['limit']:g} %)")
    shown = ms if each else [m for m in stopped if m["verdict"] == "yes"]
    if shown:
        lines.append("    " + ("every method" if each else "stopped non-inferior") + ":")
        lines += [f"      {m['label']}: {m['verdict']} ({m['state']}, {m['windows']} windows, "
                  f"{_pct(m['estimate'])} [{_pct(m['low'])}, {_pct(m['high'])}] at "
                  f"{100 * m['level']:g} % one-sided"
                  + (f"; about {m['windows_to_decide']:,} windows to decide"
                     if m["windows_to_decide"] else "") + ")" for m in shown]
    return lines


def _task_lines(it: dict[str, Any], each: bool) -> list[str]:
    """A task cell's :func:`task_interim` as status lines (every method with ``each``)."""
    ms = it["methods"]
    by = {v: sum(m["verdict"] == v for m in ms) for v in NI.VERDICTS}
    lines = [f"    full KV scores {it['full_mean']:.3f} over {it['trials']} trials; against it "
             f"(95 % one-sided, -{100 * NI.TASK_MARGIN:g} points): {by['yes']} non-inferior, "
             f"{by['no']} inferior, {by['undecided']} undecided so far, "
             f"{sum(m['state'] == 'stopped' for m in ms)} of {len(ms)} stopped"]
    shown = ms if each else [m for m in ms if m["verdict"] != "yes"]
    if shown:
        lines.append("    " + ("every method" if each else "not yet non-inferior") + ":")
        lines += [f"      {m['label']}: {m['verdict']} ({m['state']}, {m['trials']} trials, "
                  f"mean {m['mean']:.3f}, difference {m['estimate']:+.3f} [{m['low']:+.3f}, "
                  f"{m['high']:+.3f}])" for m in shown]
    return lines


def status_lines(st: dict[str, Any], *, each: bool = False) -> list[str]:
    """:func:`suite_status` as the lines ``hikv accuracy status`` prints (every method's
    verdict so far with ``each``, else the non-inferior ones)."""
    lines = [f"{st['out']}: " + (f"a run is writing here ({st['holder']})" if st["holder"]
                                 else "no run is writing here")
             + ("; the last run finished (MANIFEST.json)" if st["finished"] else "")]
    rows = sum(d["rows"] for d in st["done"])
    lines.append(f"cells with rows written: {len(st['done'])} ({rows} rows)"
                 + (": " + ", ".join(d["cell"] for d in st["done"]) if st["done"] else ""))
    lines.append(f"cells in progress (journals): {len(st['running']) or 'none'}")
    for r in st["running"]:
        if r.get("unreadable"):
            lines.append(f"  {r['cell']}: journal without a readable header")
            continue
        of = f" of {r['planned']}" if r["planned"] is not None else ""
        lines.append(
            f"  {r['cell']}" + (" (screen: full KV alone until the task filter decides)"
                                if r.get("screen") else "")
            + f": {r['finished']}{of} {r['unit']} finished; methods running "
            f"{r['methods_last']} (first {r['unit'][:-1]}: {r['methods_first']}); "
            f"{r['wall_s']:,.0f} s wall, {r['cpu_s']:,.0f} s CPU so far"
            + ("; a torn last line (dropped on resume)" if r["torn"] else ""))
        pace = r.get("pace")
        if pace and pace["left"]:
            lines.append(
                f"    pace: the last {pace['records']} {r['unit']} with {pace['methods']} "
                f"methods took {pace['cpu_each']:,.0f} CPU s each; the {pace['left']} left "
                f"would take at most about {pace['cpu_left']:,.0f} CPU s at that pace (less "
                "as methods stop; wall time: that over the workers)")
        if r.get("interim") and r.get("screen"):
            lines.append(f"    full KV scores {r['interim']['full_mean']:.3f} over "
                         f"{r['interim']['trials']} trials")
        elif r.get("interim") and r["unit"] == "trials":
            lines += _task_lines(r["interim"], each)
        elif r.get("interim"):
            lines += _interim_lines(r["interim"], each)
    return lines
