"""Where a seed-suite run folder stands (``hikv accuracy status --out DIR``), read without
touching it: whether a run is writing into it now, the cells whose rows are written
(``cells/<key>.json``), and the cells in progress from their journals
(``cells/<key>.partial.jsonl``, :mod:`hikv.model.accuracy.journal`): records finished of those
planned (perplexity windows or task trials), the methods still running in the last one (a
sequential or adaptive cell stops a method once its test decides), and the time spent so far.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hikv.io import MANIFEST, out_dir_holder
from hikv.model.accuracy.journal import PARTIAL_SUFFIX, read_journal
from hikv.model.accuracy.seed_spec import suite_key_sizes
from hikv.params import ParamError

__all__ = ["suite_status", "status_lines"]

def _methods(rec: dict[str, Any]) -> int:
    """Methods run in one journal record: a window's ``methods`` or a trial's ``labels``."""
    got = rec.get("methods", rec.get("labels", ()))
    return len(got)


def suite_status(out: str | Path) -> dict[str, Any]:
    """The state of the seed-suite folder ``out`` (see the module docstring);
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
        running.append({
            "cell": cell, "unit": "windows" if ppl else "trials", "finished": len(recs),
            "planned": planned, "torn": torn,
            "methods_first": _methods(recs[0]) if recs else start,
            "methods_last": _methods(last) if recs else start,
            "wall_s": float(last.get("wall_s", 0.0)), "cpu_s": float(last.get("cpu_s", 0.0))})
    return {"out": str(out), "holder": out_dir_holder(out),
            "finished": (out / MANIFEST).is_file(), "done": done, "running": running}


def status_lines(st: dict[str, Any]) -> list[str]:
    """:func:`suite_status` as the lines ``hikv accuracy status`` prints."""
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
            f"  {r['cell']}: {r['finished']}{of} {r['unit']} finished; methods running "
            f"{r['methods_last']} (first {r['unit'][:-1]}: {r['methods_first']}); "
            f"{r['wall_s']:,.0f} s wall, {r['cpu_s']:,.0f} s CPU so far"
            + ("; a torn last line (dropped on resume)" if r["torn"] else ""))
    return lines
