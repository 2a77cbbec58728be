"""The accuracy study's tables: protocols, Wilson intervals, the iso-accuracy table.

* :data:`PROTOCOLS` and :func:`protocol_name`: the two evaluation protocols (``prompt``,
  ``follow-up``) and their aliases; :func:`split_prompt` splits a prompt under one.
* :func:`wilson`: the Wilson score interval of a success rate.
* :func:`iso_table`: per method family the smallest budget that keeps perplexity within a
  tolerance of full KV and passkey accuracy unchanged, with its bytes per decode step;
  :func:`iso_table_tasks` the same per protocol and length on task rows;
  :func:`reductions` HiKV's byte reduction against each baseline at iso-accuracy;
  :func:`iso_accuracy_file` the table as an operating-point file for ``hikv report --iso``.
* :func:`family`: a method's family label (its label without the budget), the key of the iso
  table's rows and of the operating-point file's points; :func:`is_think` tells ThinK (a HiKV
  Stage II kind compared as a baseline) from HiKV's own families.

The rows come from the measurements of :mod:`hikv.model.accuracy.experiments` (which re-exports
these names); this module needs no model and no torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence as Seq
from typing import Any

from hikv.params import (
    Config,
    Method,
    MethodSpec,
    ParamError,
    Stage1Variant,
    Stage2Kind,
    parse_method,
    to_dict,
)

__all__ = [
    "PROTOCOLS",
    "QUESTION_ALIASES",
    "PPL_PROTOCOL",
    "protocol_name",
    "split_prompt",
    "wilson",
    "iso_table",
    "passkey_by_label",
    "reductions",
    "iso_accuracy_file",
    "task_rows_as_cells",
    "select_rows",
    "iso_table_tasks",
    "family",
    "is_think",
    "keeps_every_token",
    "ALL_TOKENS",
]


def family(spec: MethodSpec) -> str:
    """The label without the budget: ``h2o``, ``h2o/avg``, ``sparq/r16``,
    ``hikv-evict/v:static48``, ``hikv-none/k:think32`` (what a suite calls a family)."""
    return re.sub(r"@\d+", "", spec.label)


def is_think(spec: MethodSpec) -> bool:
    """True for ThinK as the published baseline: a HiKV spec whose only Stage II rule is
    ThinK's on the keys (``hikv-none/k:thinkR`` alone, ``think@B/rR`` = ``hikv-evict@B/k:thinkR``
    on the SnapKV-seeded Stage I); such families get their own iso-accuracy point beside HiKV's
    best family."""
    p = spec.hikv
    return (spec.method is Method.HIKV and p is not None and p.k_rule.kind is Stage2Kind.THINK
            and p.v_rule.kind is Stage2Kind.NONE)


def keeps_every_token(spec: MethodSpec) -> bool:
    """True for a method without a token budget: full KV, and HiKV whose Stage I is ``none``
    (every token resident and read each step, e.g. ThinK alone ``hikv-none/k:thinkR``; its
    label's ``@B`` changes none of its decisions)."""
    p = spec.hikv
    return spec.method is Method.FULL or (spec.method is Method.HIKV and p is not None
                                          and p.stage1 is Stage1Variant.NONE)


#: the ``iso_budget`` of a family that keeps every token and reaches iso-accuracy (it has no
#: smaller budget to find: :func:`iso_table_tasks`)
ALL_TOKENS = "all"


# =========================================================================== protocols
#: the two evaluation protocols, reported side by side and never mixed: ``prompt`` (context and
#: question prefilled but the question's last token, which is decoded through the method's
#: cache, so compression is decided at the end of prefill with the question inside SnapKV's /
#: HiKV's observation window; the primary protocol) and ``follow-up`` (the context prefilled,
#: the question fed through decode after the cache decided what to keep)
PROTOCOLS = ("prompt", "follow-up")
#: the protocols' aliases, named by where the question goes (``passkey(question=...)``,
#: ``--question``)
QUESTION_ALIASES = {"prefill": "prompt", "decode": "follow-up"}
#: the ``protocol`` of perplexity rows: a continuation decoded after a prefilled text has no
#: question, so it is the same under both protocols and serves both iso tables
PPL_PROTOCOL = "both"


def protocol_name(value: str) -> str:
    """``prompt`` or ``follow-up`` for a protocol name or its ``question`` alias
    (``prefill`` = ``prompt``, ``decode`` = ``follow-up``)."""
    p = QUESTION_ALIASES.get(value, value)
    if p not in PROTOCOLS:
        raise ParamError(f"protocol = {value!r} is not one of {list(PROTOCOLS)} (or the "
                         f"aliases {sorted(QUESTION_ALIASES)})")
    return p


def split_prompt(context: Seq[int], question: Seq[int], protocol: str
                 ) -> tuple[list[int], list[int]]:
    """``(prefilled ids, ids fed through decode)`` of a prompt under ``protocol``: ``prompt``
    prefills the context and the question but its last token; ``follow-up`` prefills the
    context only. The last fed token's logits predict the first answer token, so the answer is
    always produced through the method's cache."""
    p = protocol_name(protocol)
    if not question:
        raise ParamError("the question needs at least one token")
    if p == "prompt":
        return list(context) + list(question[:-1]), list(question[-1:])
    return list(context), list(question)


def wilson(successes: float, trials: int, z: float = 1.959963984540054
           ) -> tuple[float, float]:
    """Wilson score interval (95 % by default) of a success rate ``successes / trials``
    (``successes`` may be fractional: a sum of per-trial scores in [0, 1])."""
    if trials < 1:
        raise ParamError(f"trials = {trials} is out of range: allowed >= 1")
    if not 0 <= successes <= trials:
        raise ParamError(f"successes = {successes} is out of range: allowed [0, {trials}]")
    p = successes / trials
    den = 1 + z * z / trials
    mid = (p + z * z / (2 * trials)) / den
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


# =========================================================================== iso table
def passkey_by_label(pk_rows: Seq[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Passkey rows summed per method label: ``label -> (correct, trials)``."""
    agg: dict[str, list[int]] = {}
    for r in pk_rows:
        a = agg.setdefault(r["label"], [0, 0])
        a[0] += r["correct"]
        a[1] += r["trials"]
    return {k: (v[0], v[1]) for k, v in agg.items()}


def _cell(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r.get("filler"), r.get("question"), r.get("length"), r.get("depth"))


def iso_table(ppl_rows: Seq[dict[str, Any]], pk_rows: Seq[dict[str, Any]] = (), *,
              ppl_tol: float = 0.01, passkey_tol: float = 0.0, per_cell: bool = False
              ) -> list[dict[str, Any]]:
    """Per method family, the smallest tested budget at which perplexity is within
    ``ppl_tol`` (relative) of full KV and passkey accuracy over the method's ``pk_rows``
    cells is at least full KV's over the same cells minus ``passkey_tol``, with every larger
    tested budget passing too. Rows carry that budget's bytes per decode step per
    (layer, KV head) and in total (``* units``), or ``iso_budget = None`` when no tested
    budget passes (then the numbers are those of the largest budget, ``reached = False``).
    A method without passkey rows fails the passkey criterion when full KV has some.

    ``per_cell``: the accuracy criterion holds on every cell of full KV separately (the
    method must have each cell, not stopped early: a cell row with ``status: stopped``
    fails), not only pooled over the common cells.
    """
    full = [r for r in ppl_rows if r["label"] == "full"]
    if not full:
        raise ParamError("the perplexity rows need a 'full' (full KV) row as reference")
    ref_ppl = full[0]["ppl"]
    cells: dict[str, dict[tuple[Any, ...], tuple[int, int]]] = {}
    stopped: set[tuple[str, tuple[Any, ...]]] = set()
    for r in pk_rows:
        c = cells.setdefault(r["label"], {})
        old = c.get(_cell(r), (0, 0))
        c[_cell(r)] = (old[0] + r["correct"], old[1] + r["trials"])
        if r.get("status") == "stopped":
            stopped.add((r["label"], _cell(r)))
    ref_cells = cells.get("full")

    def each_cell_ok(label: str) -> bool:
        mine = cells.get(label, {})
        assert ref_cells is not None
        for c, (ok_, n) in ref_cells.items():
            if c not in mine or (label, c) in stopped:
                return False
            if mine[c][0] / mine[c][1] < ok_ / n - passkey_tol - 1e-12:
                return False
        return True

    def passkey_of(label: str) -> tuple[int, int, float] | None:
        """(correct, trials, full KV's accuracy on the same cells) or None."""
        mine = cells.get(label)
        if mine is None or ref_cells is None:
            return None
        common = [c for c in mine if c in ref_cells]
        got = sum(mine[c][0] for c in common), sum(mine[c][1] for c in common)
        ref = sum(ref_cells[c][0] for c in common), sum(ref_cells[c][1] for c in common)
        if not got[1]:
            return None
        return got[0], got[1], ref[0] / ref[1]

    fams: dict[str, list[dict[str, Any]]] = {}
    for r in ppl_rows:
        fams.setdefault(r["family"], []).append(r)
    out = []
    for fam, rows in fams.items():
        rows = sorted(rows, key=lambda r: r["budget"])

        def ok(r: dict[str, Any]) -> bool:
            if r["ppl"] > ref_ppl * (1 + ppl_tol):
                return False
            if ref_cells is None:
                return True
            if per_cell:
                return each_cell_ok(r["label"])
            got = passkey_of(r["label"])
            if got is None:
                return False
            return got[0] / got[1] >= got[2] - passkey_tol - 1e-12

        passing = [ok(r) for r in rows]
        best = None
        for i in range(len(rows)):
            if all(passing[i:]):
                best = i
                break
        chosen = rows[best] if best is not None else rows[-1]
        got = passkey_of(chosen["label"])
        out.append({
            "family": fam, "label": chosen["label"], "method": chosen["method"],
            # full KV is the reference: it keeps every token (its rows' nominal budget
            # is not a budget it was chosen at)
            "iso_budget": ALL_TOKENS if fam == "full" else (
                chosen["budget"] if best is not None else None),
            "reached": best is not None, "budgets_tested": [r["budget"] for r in rows],
            "ppl": chosen["ppl"], "ppl_rel": chosen["ppl"] / ref_ppl - 1,
            "passkey_correct": None if got is None else got[0],
            "passkey_trials": None if got is None else got[1],
            "passkey_full_acc": None if got is None else got[2],
            "bytes_ideal": chosen.get("bytes_ideal"), "bytes_burst": chosen.get("bytes_burst"),
            "bytes_meta_ideal": chosen.get("bytes_meta_ideal"),
            "bytes_meta_burst": chosen.get("bytes_meta_burst"),
            "bytes_resident": chosen.get("bytes_resident"),
            "units": chosen.get("units"),
            "step_bytes_ideal": (chosen.get("bytes_ideal") or 0) * (chosen.get("units") or 0),
            "step_bytes_burst": (chosen.get("bytes_burst") or 0) * (chosen.get("units") or 0),
        })
    return out


def reductions(table: Seq[dict[str, Any]], hikv_family: str) -> list[dict[str, Any]]:
    """Bytes of each family at its iso budget divided by ``hikv_family``'s (ideal and burst):
    how many times fewer bytes HiKV reads at equal accuracy."""
    h = [r for r in table if r["family"] == hikv_family]
    if not h:
        raise ParamError(f"no iso-table row of family {hikv_family!r}")
    h0 = h[0]
    out = []
    for r in table:
        if r["family"] == hikv_family:
            continue
        out.append({"baseline": r["family"], "baseline_reached": r["reached"],
                    "hikv": hikv_family, "hikv_reached": h0["reached"],
                    "x_ideal": (r["bytes_ideal"] / h0["bytes_ideal"]
                                if h0["bytes_ideal"] else None),
                    "x_burst": (r["bytes_burst"] / h0["bytes_burst"]
                                if h0["bytes_burst"] else None)})
    return out


def iso_accuracy_file(table: Seq[dict[str, Any]], cfg: Config, *, hikv_family: str | None,
                      ppl_tol: float, passkey_tol: float, model: str, preset: str,
                      context: int | None, source: str, protocol: str | None = None,
                      length: int | None = None) -> dict[str, Any]:
    """The iso-table as an operating-point file for ``hikv report --iso`` (schema
    ``hikv.iso_accuracy/1`` of :func:`hikv.sim.explore.report.load_iso_accuracy`): one point per
    family, keyed by the family label (so ``h2o`` and ``h2o/avg``, or ThinK beside HiKV, each
    get a row): every baseline family, every ThinK family (:func:`is_think`) and
    ``hikv_family`` (HiKV's best, named in the file's ``hikv_family``; HiKV's other families
    and full KV are left out), each the spec at its iso budget (``within_tolerance``) or at its
    largest tested budget when it never reached iso-accuracy (``within_tolerance`` false, so
    the report leaves it out and says so). ``context`` is the longest context the perplexity
    steps ran at; ``protocol`` and ``length`` (recorded when given) say which protocol's and
    length's task rows the accuracy criterion used."""
    points = []
    for r in table:
        fam = r["family"]
        if fam == "full":
            continue
        spec = parse_method(r["label"], cfg.policy, cfg.layout.head_dim)
        if spec.method is Method.HIKV and fam != hikv_family and not is_think(spec):
            continue
        points.append({"family": fam, "label": r["label"], "spec": to_dict(spec),
                       "metric_value": 100 * r["ppl_rel"],
                       "passkey": (None if r.get("passkey_trials") is None else
                                   f"{r['passkey_correct']:g}/{r['passkey_trials']}"),
                       "within_tolerance": bool(r["reached"])})
    return {"schema": "hikv.iso_accuracy/1", "preset": preset, "model": model,
            "head_dim": cfg.layout.head_dim, "context": context, "hikv_family": hikv_family,
            **({"protocol": protocol} if protocol is not None else {}),
            **({"length": length} if length is not None else {}),
            "metric": "perplexity increase % vs full KV (and passkey accuracy at least full "
            f"KV's - {passkey_tol:g})", "tolerance": 100 * ppl_tol,
            "source": source, "points": points}


def task_rows_as_cells(task_rows: Seq[dict[str, Any]]) -> list[dict[str, Any]]:
    """Task rows (:func:`hikv.model.accuracy.experiments.task_accuracy`) as the cell rows
    :func:`iso_table` compares with full KV's: one cell per (task, protocol, length), ``correct``
    = the sum of the trial scores."""
    return [{"label": r["label"], "correct": r["score_sum"], "trials": r["trials"],
             "filler": r["task"], "question": r["protocol"], "length": r["length"],
             "depth": None, "status": r.get("status", "complete")} for r in task_rows]


def select_rows(rows: Seq[dict[str, Any]], *, protocol: str | None = None,
                length: int | None = None) -> list[dict[str, Any]]:
    """Rows of ``protocol`` (perplexity rows, protocol ``both``, always match; rows of
    files without ``protocol`` are named by their ``question``) and of ``length`` (a row's
    ``length``, else its perplexity ``window``)."""
    out = []
    p = protocol_name(protocol) if protocol is not None else None
    for r in rows:
        rp = r.get("protocol") or (QUESTION_ALIASES.get(r["question"]) if r.get("question")
                                   else PPL_PROTOCOL)
        if p is not None and rp not in (p, PPL_PROTOCOL):
            continue
        rl = r.get("length", r.get("window"))
        if length is not None and rl is not None and int(rl) != int(length):
            continue
        out.append(r)
    return out


def iso_table_tasks(ppl_rows: Seq[dict[str, Any]], task_rows: Seq[dict[str, Any]], *,
                    protocol: str, length: int, ppl_tol: float = 0.01,
                    acc_tol: float = 0.01) -> list[dict[str, Any]]:
    """:func:`iso_table` of one protocol and length: perplexity within ``ppl_tol`` of full
    KV's at ``length`` and task accuracy (the mean score over the task rows of ``protocol`` and
    ``length``, on the cells full KV has too) at least full KV's minus ``acc_tol`` (one point
    by default) on every task separately (a task row stopped early fails). Rows gain
    ``protocol``, ``length``, ``task_acc``, ``task_trials``,
    ``full_acc`` and the 95 % Wilson interval ``ci_low`` / ``ci_high`` of the chosen
    budget's task accuracy, and ``every_token``: true for a family without a token budget
    (HiKV with Stage I ``none``, e.g. ThinK alone, one row per length at ``B = N``): its
    ``iso_budget`` is :data:`ALL_TOKENS` when it reaches iso-accuracy (else ``None``), and its
    bytes are the golden byte account of reading every token (those of its kept channels)."""
    p = protocol_name(protocol)
    ppl = select_rows(ppl_rows, length=length)
    tasks = select_rows([r for r in task_rows if r.get("protocol") == p], length=length)
    table = iso_table(ppl, task_rows_as_cells(tasks), ppl_tol=ppl_tol, passkey_tol=acc_tol,
                      per_cell=True)
    stage1 = {r["label"]: r.get("hikv_stage1") for r in ppl}
    for r in table:
        n, c = r.get("passkey_trials"), r.get("passkey_correct")
        lo, hi = wilson(c, n) if n else (None, None)
        every = r["method"] == Method.HIKV.value \
            and stage1.get(r["label"]) == Stage1Variant.NONE.value
        if every:
            r["iso_budget"] = ALL_TOKENS if r["reached"] else None
        r.update({"every_token": every, "protocol": p, "length": length, "task_trials": n,
                  "task_acc": None if not n else c / n, "full_acc": r.get("passkey_full_acc"),
                  "ci_low": lo, "ci_high": hi})
    return table

