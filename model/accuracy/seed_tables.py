"""The seed suites' tables: the task filter (:func:`task_filter`), the iso tables per protocol
and length with their iso-point files and HiKV's byte reductions, and ``seed_table.md``
(:func:`seed_tables`), from the rows of finished cells (:mod:`hikv.model.accuracy.seed_suite`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hikv.io import atomic_write_text
from hikv.model.accuracy import experiments as A
from hikv.model.accuracy import iso as NI
from hikv.model.accuracy.io import markdown_table, write_rows
from hikv.model.accuracy.seed_spec import SeedSuite
from hikv.params import ParamError

__all__ = ["task_filter", "seed_tables", "noninf_files"]

Log = Callable[[str], None]


def task_filter(suite: SeedSuite, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (protocol, length, task): full KV's accuracy and whether the task is kept (at
    least ``suite.keep_min``) or dropped, with the reason."""
    out = []
    for r in rows:
        if r.get("task") and r["label"] == "full":
            stopped = r.get("status") == "stopped"
            kept = r["accuracy"] >= suite.keep_min - 1e-12 and not stopped
            why = (f"full KV scores {100 * r['accuracy']:.0f} % < "
                   f"{100 * suite.keep_min:.0f} %: the task does not discriminate")
            if stopped:
                why = (f"full KV stopped after {r['trials']} trials (score "
                       f"{r['score_sum']:g}): it cannot reach {100 * suite.keep_min:.0f} %")
            out.append({"protocol": r["protocol"], "length": r["length"], "task": r["task"],
                        "full_score": r["score_sum"], "trials": r["trials"],
                        "full_acc": r["accuracy"], "kept": kept,
                        "reason": "" if kept else why})
    return out


def seed_tables(suite: SeedSuite, rows: list[dict[str, Any]], out: Path,
                meta: dict[str, Any], *, log: Log = print) -> dict[str, Any]:
    """The filter, iso tables and iso-point files of a finished seed suite (see
    :func:`run_seed_suite`); returns a summary."""
    from hikv.model.lm.runner import LMShape, lm_config
    from hikv.presets import get_preset

    sh = dict(meta["shape"])
    sh["windows"] = tuple(sh["windows"])
    cfg = lm_config(get_preset(meta["preset"]), LMShape(**sh))
    ppl = [r for r in rows if r.get("ppl") is not None]
    tasks = [r for r in rows if r.get("task")]
    filt = task_filter(suite, tasks)
    write_rows(out, "filter", filt, {**meta, "phase": "filter"})
    kept = {(f["protocol"], f["length"], f["task"]) for f in filt if f["kept"]}
    lines = [f"# Seed suite {suite.name}: {meta['model']}", "",
             f"Command: `{meta['command']}`  ", f"Code: {meta['code_version']}", "",
             "## Task filter (full KV must score >= "
             f"{100 * suite.keep_min:.0f} %)", "",
             markdown_table(filt, [("protocol", "protocol", ""), ("length", "N", ""),
                                   ("task", "task", ""), ("full_acc", "full KV", ".2f"),
                                   ("trials", "trials", ""), ("kept", "kept", ""),
                                   ("reason", "why dropped", "")])]
    missing = meta.get("missing", [])
    lines += ["", "## Cells", "", "Missing (not run yet, not in the tables): "
              + (", ".join(missing) if missing else "none") + ".", "",
              "Work per cell (adaptive: methods run on every trial, stopped early once they "
              "cannot pass, or not run; see `hikv.model.accuracy.seed_suite.run_cell`):", "",
              markdown_table(_work_rows(rows, meta.get("cells", {})), [
                  ("cell", "cell", ""), ("complete", "methods on every trial", ""),
                  ("stopped", "stopped early", ""), ("skipped", "not run", ""),
                  ("trials", "full KV trials", ""), ("wall_s", "wall s", ".0f"),
                  ("cpu_s", "CPU s", ".0f")])]
    for n in suite.lengths:
        pr = [r for r in ppl if int(r["length"]) == n]
        ref = [r for r in pr if r["label"] == "full"]
        if ref:
            seq = any(r.get("ppl_looks") for r in pr)
            lines += ["", f"## Perplexity, N = {n} (both protocols)", "",
                      f"{ref[0]['windows']} windows, the last {n - pr[0]['prefix']} tokens "
                      "decoded; bytes per decode step per (layer, KV head) at burst "
                      "granularity, metadata included."
                      + (" Sequential cell: a method stops at the first look (window count) "
                         f"where its test decides (looks {ref[0]['ppl_looks']}); its Δppl is "
                         "against full KV over the windows it ran." if seq else ""), "",
                      markdown_table([{**r, "rel": NI.ppl_rel(r, ref[0])} for r in pr], [
                          ("label", "method", ""), ("budget_rule", "rule", ""),
                          *([("windows", "windows", "")] if seq else []),
                          ("ppl", "ppl", ".3f"), ("rel", "Δppl", "+.4f"),
                          ("bytes_burst", "bytes burst", ".0f")])]
            lines += ["", _self_check_line(ref[0], pr)]
    summary: dict[str, Any] = {"suite": suite.name, "iso": {}, "missing": missing,
                               "noninferiority": {}}
    for n in suite.lengths:
        for p in suite.protocols:
            p = A.protocol_name(p)
            gone = [k for k in missing if k.endswith(f"_{p}_{n}") or k == f"ppl_{n}"]
            if not any(r["label"] == "full" and int(r["length"]) == n for r in ppl) or \
                    not any(r["protocol"] == p and int(r["length"]) == n for r in tasks):
                lines += ["", f"## Iso-accuracy: protocol `{p}`, N = {n}", "",
                          "Not yet: the perplexity cell or every task cell of this protocol "
                          "and length is missing, so there is no iso table."]
                for stale in (f"iso_{p}_{n}.json", f"iso_{p}_{n}.csv",
                              f"iso_points_{p}_{n}.json", f"reductions_{p}_{n}.json",
                              f"reductions_{p}_{n}.csv", *noninf_files(p, n)):
                    (out / stale).unlink(missing_ok=True)
                continue
            use = [r for r in tasks if (r["protocol"], r["length"], r["task"]) in kept]
            iso = A.iso_table_tasks(ppl, use, protocol=p, length=n, ppl_tol=suite.ppl_tol,
                                    acc_tol=suite.acc_tol)
            name = f"iso_{p}_{n}"
            write_rows(out, name, iso, {**meta, "phase": name, "protocol": p, "length": n})
            reached = [r for r in iso if r["family"].startswith("hikv-") and r["reached"]
                       and not _baseline_hikv(r["label"], cfg)]
            best = min(reached, key=lambda r: r["bytes_burst"])["family"] if reached else None
            try:
                f = A.iso_accuracy_file(iso, cfg, hikv_family=best, ppl_tol=suite.ppl_tol,
                                        passkey_tol=suite.acc_tol, model=meta["model"],
                                        preset=meta["preset"], context=n,
                                        source=meta["command"], protocol=p, length=n)
                atomic_write_text(out / f"iso_points_{p}_{n}.json", json.dumps(f, indent=1) + "\n")
            except ParamError as e:
                log(f"iso_points_{p}_{n}.json not written: {e}")
            red = A.reductions(iso, best) if best else []
            write_rows(out, f"reductions_{p}_{n}", red,
                       {**meta, "phase": f"reductions_{p}_{n}", "protocol": p, "length": n})
            summary["iso"][name] = {"best_hikv": best, "rows": len(iso),
                                    "reductions": red}
            lines += ["", f"## Iso-accuracy: protocol `{p}`, N = {n}", "",
                      *([f"**Partial**: cells {', '.join(gone)} are missing; the criterion "
                         "uses the finished task cells only.", ""] if gone else []),
                      f"Tasks kept: {sorted(t for (pp, nn, t) in kept if pp == p and nn == n)}"
                      "; smallest budget with perplexity within "
                      f"{100 * suite.ppl_tol:.0f} % of full KV's and task accuracy at least "
                      f"full KV's minus {100 * suite.acc_tol:.0f} point; [95 % Wilson].", "",
                      markdown_table([{**r, "acc": _acc_cell(r)} for r in iso], [
                          ("family", "method", ""), ("iso_budget", "iso budget", ""),
                          ("ppl_rel", "Δppl", "+.4f"), ("acc", "task acc [95 % CI]", ""),
                          ("task_trials", "trials", ""), ("full_acc", "full KV", ".3f"),
                          ("bytes_burst", "bytes burst", ".0f"),
                          ("step_bytes_burst", "per step, all layers", ".0f")])]
            every = [r["family"] for r in iso if r.get("every_token")]
            if every:
                lines += ["", f"{', '.join(every)}: no token budget (every token resident and "
                          "read each step; ThinK alone prunes key channels only), so its "
                          f"row is measured once per length, at B = N = {n}: its iso budget "
                          f"is `{A.ALL_TOKENS}` when it passes, and its bytes are the golden "
                          "byte account of reading every token's kept K channels and whole "
                          "V rows, which grow with N (not comparable to a budget B)."]
            if red:
                lines += ["", f"HiKV ({best}) at iso-accuracy: each baseline's burst bytes / "
                          "HiKV's", "", markdown_table(red, [
                              ("baseline", "baseline", ""),
                              ("baseline_reached", "baseline reached", ""),
                              ("x_ideal", "x ideal", ".2f"), ("x_burst", "x burst", ".2f")])]
            ni_lines, summary["noninferiority"][f"{p}_{n}"] = _noninferiority(
                ppl, use, p, n, meta, cfg, out)
            lines += ni_lines
    atomic_write_text(out / "seed_table.md", "\n".join(lines) + "\n")
    atomic_write_text(out / "seed_summary.json", json.dumps(summary, indent=1, default=str))
    log(f"tables -> {out / 'seed_table.md'}")
    return summary


def _baseline_hikv(label: str, cfg: Any) -> bool:
    """A HiKV label compared as a baseline, never as HiKV's best family: ThinK (alone or on
    the evicting Stage I, :func:`hikv.model.accuracy.iso.is_think`) and every family without
    a token budget."""
    spec = A.parse_method(label, cfg.policy, cfg.layout.head_dim)
    return A.is_think(spec) or A.keeps_every_token(spec)


def _work_rows(rows: list[dict[str, Any]], cells: dict[str, dict[str, Any]]
               ) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        w = out.setdefault(r["cell"], {"cell": r["cell"], "complete": 0, "stopped": 0,
                                       "skipped": len(cells.get(r["cell"], {})
                                                      .get("skipped", {})),
                                       "trials": "", "wall_s": cells.get(r["cell"], {})
                                       .get("wall_s"), "cpu_s": cells.get(r["cell"], {})
                                       .get("cpu_s")})
        w["stopped" if r.get("status") == "stopped" else "complete"] += 1
        if r["label"] == "full" and r.get("task"):
            w["trials"] = r["trials"]
    return list(out.values())


def _acc_cell(r: dict[str, Any]) -> str:
    if r.get("task_acc") is None:
        return "-"
    return f"{r['task_acc']:.3f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"


def noninf_files(protocol: str, length: int) -> tuple[str, ...]:
    """The files :func:`seed_tables` writes for the non-inferiority test of one protocol and
    length (``noninf_<protocol>_<N>``: per method and budget; ``noninf_families_...``: per
    family; ``noninf_reductions_...``: HiKV's byte reduction with its interval)."""
    return tuple(f"{stem}_{protocol}_{length}.{ext}"
                 for stem in ("noninf", "noninf_families", "noninf_reductions")
                 for ext in ("json", "csv"))


def _self_check_line(full: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The full-KV-vs-itself check of one perplexity cell, as a sentence, and beside it the
    paired half-widths of the methods that ran every window (what sizes the cell for the
    margin)."""
    c = NI.split_self_check(full)
    if c is None:
        return ("Full KV against itself on disjoint halves of the windows: no per-block NLLs "
                "in this cell (measured without them), so no check.")
    line = (f"Full KV against itself on disjoint halves of the windows ({c['windows']} "
            f"windows, {c['blocks']} blocks): {100 * c['estimate']:+.2f} % "
            f"[{100 * c['low']:+.2f} %, {100 * c['high']:+.2f} %] ({100 * c['level']:.0f} % "
            f"one-sided bounds), half-width {100 * c['half_width']:.2f} %: "
            f"{'within' if c['within'] else 'not within'} {100 * c['limit']:.1f} %. It compares "
            "different text (the spread of perplexity from window to window); the paired test "
            "differences each token against full KV's on the same token and does not see it.")
    hw = []
    for r in rows:
        if r["label"] == "full" or r.get("windows", c["windows"]) != c["windows"]:
            continue
        b = NI.ppl_increase_bound(r, full, level=float(r.get("ppl_level") or NI.NI_LEVEL))
        if b is not None:
            hw.append((b.high - b.low) / 2)
    if hw:
        hw.sort()
        line += (f" Paired half-widths of the {len(hw)} methods that ran all {c['windows']} "
                 f"windows: {100 * hw[0]:.2f} to {100 * hw[-1]:.2f} % (median "
                 f"{100 * hw[len(hw) // 2]:.2f} %).")
    return line


def _noninferiority(ppl: list[dict[str, Any]], tasks: list[dict[str, Any]], p: str, n: int,
                    meta: dict[str, Any], cfg: Any, out: Path
                    ) -> tuple[list[str], dict[str, Any]]:
    """The non-inferiority table of protocol ``p`` and length ``n`` (kept ``tasks``): its
    files and its section of ``seed_table.md``."""
    test = {"level": NI.NI_LEVEL, "ppl_margin": NI.PPL_MARGIN, "task_margin": NI.TASK_MARGIN,
            "protocol": p, "length": n}
    pts, fams = NI.noninferiority_table(ppl, tasks, length=n, protocol=p)
    write_rows(out, f"noninf_{p}_{n}", pts, {**meta, "phase": f"noninf_{p}_{n}", **test})
    write_rows(out, f"noninf_families_{p}_{n}", fams,
               {**meta, "phase": f"noninf_families_{p}_{n}", **test})
    own = [r for r in fams if r["family"].startswith("hikv-") and r["verdict"] == "yes"
           and not _baseline_hikv(r["label"], cfg)]
    best = min(own, key=lambda r: r["bytes_burst"])["family"] if own else None
    red = NI.noninferiority_reductions(fams, best) if best else []
    write_rows(out, f"noninf_reductions_{p}_{n}", red,
               {**meta, "phase": f"noninf_reductions_{p}_{n}", **test})
    unpaired = sorted({r["family"] for r in pts if r["ppl_low"] is None})
    lines = ["", f"## Non-inferiority: protocol `{p}`, N = {n}", "",
             f"Test: one-sided {100 * NI.NI_LEVEL:.0f} % bounds; iso-accuracy when the upper "
             "bound of the perplexity increase over full KV (paired block bootstrap over "
             f"{NI.NLL_BLOCK}-token blocks) is below {100 * NI.PPL_MARGIN:.0f} % and, on every "
             "kept task, the lower bound of the score difference to full KV (same trials, "
             f"Newcombe's paired interval) is above -{100 * NI.TASK_MARGIN:.0f} points; "
             "`undecided` where an interval straddles a margin. Iso budget: the smallest "
             "budget passing with every larger one; the iso point lies in [low, iso].", ""]
    looks = next((r["ppl_looks"] for r in ppl if r.get("ppl_looks")), None)
    if looks:
        lv = NI.look_levels(looks, looks[-1])
        lines += [f"Sequential perplexity cell: looks after {', '.join(map(str, looks))} "
                  "windows; a method stops at the first look where its perplexity test "
                  "decides, tested there against full KV over the same windows at that look's "
                  f"level ({', '.join(f'{lv[k]:.4g}' for k in looks)}: the "
                  f"{100 * (1 - NI.NI_LEVEL):.0f} % error split over the looks, half to the "
                  "last), so every verdict keeps the test's level.", ""]
    # in a sequential cell the methods stopped at an early look have the widest intervals
    # and the farthest estimates: the width that decides near the margin is the last look's
    last = looks[-1] if looks else None
    paired = [r for r in pts if r["ppl_low"] is not None
              and (last is None or r.get("ppl_windows") == last)]
    widths = sorted((r["ppl_high"] - r["ppl_low"]) / 2 for r in paired)
    if widths:
        over = (f"median over the {len(widths)} methods and budgets that ran all {last} "
                "windows" if last else "median over the methods and budgets")
        lines += [f"Paired perplexity half-width ({100 * NI.NI_LEVEL:.0f} % one-sided "
                  f"bounds), {over}: {100 * widths[len(widths) // 2]:.2f} % (from "
                  f"{100 * widths[0]:.2f} to {100 * widths[-1]:.2f} %): a method passes the "
                  f"{100 * NI.PPL_MARGIN:.0f} % margin only with an estimate about that much "
                  "below it.", ""]
    if unpaired:
        lines += [f"No paired perplexity data (cells measured without per-block NLLs): "
                  f"{', '.join(unpaired)}: their perplexity part is decided by the point rule "
                  "(the estimate against the margin).", ""]
    lines.append(markdown_table(fams, [
        ("family", "method", ""), ("verdict", "verdict", ""),
        ("iso_budget_low", "iso low", ""), ("iso_budget", "iso budget", ""),
        ("bytes_burst_low", "bytes at low", ".0f"), ("bytes_burst", "bytes at iso", ".0f"),
        ("verdicts", "per budget", "")]))
    if red:
        lines += ["", f"HiKV ({best}) at iso-accuracy: each family's burst bytes / HiKV's, "
                  "with the interval the iso budgets' intervals give", "",
                  markdown_table(red, [("baseline", "family", ""),
                                       ("baseline_verdict", "verdict", ""),
                                       ("x_burst", "x burst", ".2f"),
                                       ("x_burst_low", "low", ".2f"),
                                       ("x_burst_high", "high", ".2f")])]
    return lines, {"best_hikv": best, "families": len(fams), "reductions": red}
