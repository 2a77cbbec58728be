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
* Non-inferiority (:func:`noninferiority_table`): per method and budget a one-sided
  :data:`NI_LEVEL` confidence bound of the perplexity increase over full KV (a paired block
  bootstrap of the per-block NLL sums the perplexity rows record, :func:`ppl_increase_bound`)
  against :data:`PPL_MARGIN`, and of each task's score difference (paired over the same
  trials, :func:`task_difference_bound`) against :data:`TASK_MARGIN`; verdicts ``yes`` /
  ``no`` / ``undecided``; :func:`noninferiority_reductions` HiKV's byte reduction with its
  interval; :func:`split_self_check` full KV against itself on disjoint halves of the windows.

The rows come from the measurements of :mod:`hikv.model.accuracy.experiments` (which re-exports
these names); this module needs no model and no torch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

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
    "NI_LEVEL",
    "PPL_MARGIN",
    "TASK_MARGIN",
    "NLL_BLOCK",
    "BOOTSTRAP_RESAMPLES",
    "VERDICTS",
    "PairedBound",
    "nll_block_sums",
    "ppl_increase_bound",
    "look_levels",
    "over_windows",
    "ppl_rel",
    "ppl_look_verdict",
    "task_difference_bound",
    "split_self_check",
    "bound_verdict",
    "label_family",
    "task_bound_verdict",
    "noninferiority_table",
    "noninferiority_reductions",
]


def label_family(label: str) -> str:
    """A method label without its budget: ``h2o@256/avg`` -> ``h2o/avg``."""
    return re.sub(r"@\d+", "", label)


def family(spec: MethodSpec) -> str:
    """The label without the budget: ``h2o``, ``h2o/avg``, ``sparq/r16``,
    ``hikv-evict/v:static48``, ``hikv-none/k:think32`` (what a suite calls a family)."""
    return label_family(spec.label)


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
            if r["ppl"] > _paired_full(r, full[0])["ppl"] * (1 + ppl_tol):
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
            "ppl": chosen["ppl"], "ppl_rel": ppl_rel(chosen, full[0]),
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



# =========================================================================== non-inferiority
#: one-sided confidence level of every non-inferiority bound
NI_LEVEL = 0.95
#: perplexity margin: a method is non-inferior when the upper bound of its perplexity increase
#: over full KV (relative) is below this
PPL_MARGIN = 0.01
#: task margin: ... and the lower bound of each kept task's mean-score difference to full KV
#: (same trials) is above minus this (5 points)
TASK_MARGIN = 0.05
#: tokens per NLL block sum in the perplexity rows (``nll_blocks``): the bootstrap's unit
NLL_BLOCK = 16
#: resamples of the perplexity bootstrap (:func:`ppl_increase_bound`)
BOOTSTRAP_RESAMPLES = 2000
#: the verdicts of the test, per method and budget and per family
VERDICTS = ("yes", "no", "undecided")
#: the half-width full KV against itself on disjoint halves of the windows must stay within
#: (:func:`split_self_check`) for the perplexity cells to be sized for :data:`PPL_MARGIN`
SELF_CHECK_HALF_WIDTH = 0.003


@dataclass(frozen=True)
class PairedBound:
    """An estimate and its one-sided ``level`` bounds ``low`` and ``high`` (together the
    two-sided ``2 level - 1`` interval) over ``units`` paired units (NLL blocks or trials),
    and the ``test`` that gave them."""

    estimate: float
    low: float
    high: float
    level: float
    units: int
    test: str


def nll_block_sums(nll: Seq[float], block: int = NLL_BLOCK) -> list[float]:
    """Sums of ``block`` consecutive per-token NLLs (the last block holds what is left): the
    ``nll_blocks`` of one perplexity window."""
    if block < 1:
        raise ParamError(f"block = {block} is out of range: allowed >= 1")
    return [float(sum(nll[i: i + block])) for i in range(0, len(nll), block)]


def _blocks(row: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, list[int]] | None:
    """(block sums, tokens per block, blocks per window) of a perplexity row, its windows
    concatenated; None for a row without ``nll_blocks``."""
    wins = row.get("nll_blocks")
    if not wins:
        return None
    size = int(row.get("nll_block_tokens") or NLL_BLOCK)
    per, rest = divmod(int(row["tokens"]), len(wins))
    if rest:
        raise ParamError(f"{row['label']}: {row['tokens']} tokens do not split evenly over "
                         f"{len(wins)} windows")
    counts = [min(size, per - i) for i in range(0, per, size)]
    if any(len(w) != len(counts) for w in wins):
        raise ParamError(f"{row['label']}: nll_blocks do not hold {per} tokens per window in "
                         f"blocks of {size}")
    sums = np.asarray([x for w in wins for x in w], dtype=float)
    return sums, np.asarray(counts * len(wins), dtype=float), [len(w) for w in wins]


def _boot_means(rng: np.random.Generator, sums: np.ndarray, counts: np.ndarray,
                resamples: int) -> np.ndarray:
    """Token-weighted means ``sum / count`` of ``resamples`` resamples of the blocks (with
    replacement), in chunks that bound memory."""
    m = len(sums)
    out = []
    chunk = max(1, 2_000_000 // max(1, m))
    for a in range(0, resamples, chunk):
        idx = rng.integers(0, m, size=(min(chunk, resamples - a), m))
        out.append(sums[idx].sum(1) / counts[idx].sum(1))
    return np.concatenate(out)


def look_levels(looks: Seq[int], windows: int, level: float = NI_LEVEL) -> dict[int, float]:
    """The one-sided confidence level of the perplexity test at each look of a sequential
    perplexity cell (window counts ``looks``, the cell's ``windows`` always the last): the
    error ``1 - level`` is split by a weighted Bonferroni rule, half to the last look and half
    shared equally by the earlier ones, so a method stopped at any look, or run to the end, is
    wrongly declared non-inferior (or inferior) with probability at most ``1 - level``
    whatever the true increase. Without earlier looks the last look has ``level``."""
    if windows < 1:
        raise ParamError(f"windows = {windows} is out of range: allowed >= 1")
    early = sorted({int(x) for x in looks if int(x) != windows})
    bad = [x for x in early if not 1 <= x < windows]
    if bad:
        raise ParamError(f"ppl looks {bad} are out of range: allowed [1, {windows - 1}] window "
                         f"counts before the cell's {windows}")
    if not early:
        return {windows: level}
    alpha = 1 - level
    return {**{x: 1 - alpha / 2 / len(early) for x in early}, windows: 1 - alpha / 2}


def over_windows(full: dict[str, Any], windows: int) -> dict[str, Any]:
    """``full``'s perplexity row over its first ``windows`` windows only (the windows a method
    stopped at a look ran): ``nll_blocks``, ``tokens``, ``windows``, ``nll`` and ``ppl`` of
    those; ``full`` itself when it has no more."""
    wins = full.get("nll_blocks") or []
    if windows >= len(wins):
        return full
    if windows < 1:
        raise ParamError(f"windows = {windows} is out of range: allowed [1, {len(wins)}]")
    per = int(full["tokens"]) // len(wins)
    nll = sum(sum(w) for w in wins[:windows]) / (per * windows)
    return {**full, "nll_blocks": wins[:windows], "tokens": per * windows, "windows": windows,
            "nll": nll, "ppl": math.exp(nll)}


def _paired_full(row: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """``full`` over the windows ``row`` ran: all of them, or the first ones where ``row``
    stopped at a look of a sequential cell (``windows`` < ``windows_planned``)."""
    n, planned = row.get("windows"), row.get("windows_planned")
    if n is not None and planned is not None and int(n) < int(planned):
        return over_windows(full, int(n))
    return full


def ppl_rel(row: dict[str, Any], full: dict[str, Any]) -> float:
    """``row``'s perplexity over full KV's on the same windows, minus 1."""
    return float(row["ppl"]) / float(_paired_full(row, full)["ppl"]) - 1


def ppl_increase_bound(row: dict[str, Any], full: dict[str, Any], *, level: float = NI_LEVEL,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
                       ) -> PairedBound | None:
    """The relative perplexity increase of ``row`` over ``full`` (``ppl / ppl_full - 1``) with
    its one-sided ``level`` bounds: a paired block bootstrap (the blocks of :data:`NLL_BLOCK`
    consecutive predictions of every window, resampled with replacement ``resamples`` times by
    ``numpy.random.default_rng(seed)``; each block's NLL difference to full KV's over the same
    tokens; percentile bounds). A row stopped at a look of a sequential cell is paired with
    full KV's first windows, the ones it ran. None when either row has no ``nll_blocks``."""
    full = _paired_full(row, full)
    a, b = _blocks(row), _blocks(full)
    if a is None or b is None:
        return None
    if a[2] != b[2] or not np.array_equal(a[1], b[1]):
        raise ParamError(f"{row['label']} and {full['label']}: the perplexity rows are not "
                         "over the same tokens (different windows or blocks)")
    d, n = a[0] - b[0], a[1]
    est = math.expm1(float(d.sum() / n.sum()))
    boot = np.expm1(_boot_means(np.random.default_rng(seed), d, n, resamples))
    lo, hi = np.quantile(boot, [1 - level, level])
    size = int(row.get("nll_block_tokens") or NLL_BLOCK)
    return PairedBound(est, float(lo), float(hi), level, len(d),
                       f"paired block bootstrap: {len(d)} blocks of {size} tokens, "
                       f"{resamples} resamples, seed {seed}")


def task_difference_bound(scores: Seq[float], full_scores: Seq[float], *,
                          level: float = NI_LEVEL) -> PairedBound:
    """The mean score difference ``scores - full_scores`` over the trials both ran (the first
    ``min`` of the two; a row stopped early has its first trials), with one-sided ``level``
    bounds: Newcombe's hybrid score interval for paired proportions (his method 10: Wilson
    limits of each mean, combined with the correlation of the paired scores, continuity
    corrected as his ``phi``), which takes scores in [0, 1] (a fraction of the references
    matched) through their sums. Unlike a bootstrap it does not collapse to a point when every
    trial agrees: equal perfect scores on ``n`` trials bound the difference at
    ``-(1 - wilson_low(n, n))`` (-0.051 at ``n = 50``, 95 %)."""
    k = min(len(scores), len(full_scores))
    if k < 1:
        raise ParamError("task_difference_bound needs at least one trial of each")
    a = np.asarray(scores[:k], dtype=float)
    b = np.asarray(full_scores[:k], dtype=float)
    if ((a < 0) | (a > 1) | (b < 0) | (b > 1)).any():
        raise ParamError("task scores must lie in [0, 1]")
    z = NormalDist().inv_cdf(level)
    p1, p2 = float(a.mean()), float(b.mean())
    l1, u1 = wilson(float(a.sum()), k, z)
    l2, u2 = wilson(float(b.sum()), k, z)
    sa, sb = float(a.std()), float(b.std())
    phi = 0.0
    if sa > 0 and sb > 0:
        cov = float(((a - p1) * (b - p2)).mean())
        phi = min(1.0, (max(cov - 1 / (2 * k), 0.0) if cov > 0 else cov) / (sa * sb))
    dl = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    du = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    t = p1 - p2
    return PairedBound(t, max(-1.0, t - dl), min(1.0, t + du), level, k,
                       "paired score interval (Newcombe's hybrid score method for paired data)")


def bound_verdict(b: PairedBound, margin: float = PPL_MARGIN) -> str:
    """``yes`` when the perplexity increase's upper bound ``b.high`` is below ``margin``,
    ``no`` when its lower bound is above it, else ``undecided``."""
    return "yes" if b.high < margin else "no" if b.low > margin else "undecided"


def task_bound_verdict(b: PairedBound, margin: float = TASK_MARGIN) -> str:
    """``yes`` when the task score difference's lower bound ``b.low`` is above ``-margin``,
    ``no`` when its upper bound is below it, else ``undecided``."""
    return "yes" if b.low > -margin else "no" if b.high < -margin else "undecided"


def ppl_look_verdict(row: dict[str, Any], full: dict[str, Any], level: float, *,
                     margin: float = PPL_MARGIN, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = 0) -> str:
    """``yes`` / ``no`` / ``undecided``: the perplexity part of the non-inferiority test of
    ``row`` against ``full`` at one-sided ``level`` (the point rule where a row has no
    per-block NLLs)."""
    b = ppl_increase_bound(row, full, level=level, resamples=resamples, seed=seed)
    if b is None:
        return "yes" if ppl_rel(row, full) <= margin + 1e-12 else "no"
    return bound_verdict(b, margin)


def split_self_check(full: dict[str, Any], *, level: float = NI_LEVEL,
                     resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
                     ) -> dict[str, Any] | None:
    """Full KV against itself on disjoint text: the relative perplexity of the even windows
    over the odd ones with one-sided ``level`` bounds (each half's blocks resampled on its
    own). Its half-width says how far apart two disjoint samples of this many windows fall;
    ``within``: the half-width is at most :data:`SELF_CHECK_HALF_WIDTH`, the size the
    perplexity cells need for the 1 % margin to decide; ``covers_zero``: the interval holds 0
    (two halves of one text should not differ). None without ``nll_blocks`` or with fewer
    than two windows."""
    got = _blocks(full)
    if got is None or len(got[2]) < 2:
        return None
    sums, counts, per = got
    win = np.repeat(np.arange(len(per)), per)
    even = win % 2 == 0
    rng = np.random.default_rng(seed)
    ma = _boot_means(rng, sums[even], counts[even], resamples)
    mb = _boot_means(rng, sums[~even], counts[~even], resamples)
    boot = np.expm1(ma - mb)
    lo, hi = (float(x) for x in np.quantile(boot, [1 - level, level]))
    est = math.expm1(float(sums[even].sum() / counts[even].sum()
                           - sums[~even].sum() / counts[~even].sum()))
    return {"estimate": est, "low": lo, "high": hi, "half_width": (hi - lo) / 2,
            "level": level, "windows": len(per), "blocks": len(sums),
            "within": (hi - lo) / 2 <= SELF_CHECK_HALF_WIDTH, "covers_zero": lo <= 0 <= hi,
            "limit": SELF_CHECK_HALF_WIDTH}


def _verdict(parts: Seq[str]) -> str:
    """``no`` when a part is ``no``, ``yes`` when every part is ``yes``, else ``undecided``."""
    if "no" in parts:
        return "no"
    return "yes" if parts and all(p == "yes" for p in parts) else "undecided"


def noninferiority_table(ppl_rows: Seq[dict[str, Any]], task_rows: Seq[dict[str, Any]] = (),
                         *, length: int, protocol: str | None = None,
                         level: float = NI_LEVEL, ppl_margin: float = PPL_MARGIN,
                         task_margin: float = TASK_MARGIN,
                         resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Iso-accuracy as a non-inferiority test at ``length`` (and ``protocol``'s task rows):
    ``(points, families)``.

    ``points``: one row per method and budget. Perplexity: :func:`ppl_increase_bound` against
    ``ppl_margin`` (``yes`` when the upper bound is below it, ``no`` when the lower bound is
    above it, else ``undecided``); rows without ``nll_blocks`` (cells measured without them)
    are decided by the point rule (the estimate against the margin) and say so in
    ``ppl_test``. Tasks: per task full KV ran (``task_rows``: give the kept ones),
    :func:`task_difference_bound` against ``-task_margin`` (``yes`` when the lower bound is
    above it, ``no`` when the upper bound is below it); a task the method did not run is
    ``undecided``. ``verdict``: ``no`` if a part is ``no``, ``yes`` if every part is ``yes``,
    else ``undecided``. Every row states ``level``, ``ppl_margin``, ``task_margin``.

    ``families``: per family, ``iso_budget`` the smallest budget whose verdict and every
    larger budget's are ``yes`` (:data:`ALL_TOKENS` for a family without a token budget),
    ``iso_budget_low`` the smallest budget with no ``no`` at it or above (the iso point lies
    in ``[iso_budget_low, iso_budget]``, the finer the budget grid the narrower), their
    bytes per step per (layer, KV head), and ``verdict`` ``yes`` (an iso budget), ``no``
    (every budget ``no``) or ``undecided``."""
    ppl = select_rows(ppl_rows, length=length)
    full = [r for r in ppl if r["label"] == "full"]
    if not full:
        raise ParamError(f"no full-KV perplexity row at length {length}")
    f = full[0]
    p = protocol_name(protocol) if protocol is not None else None
    tasks = select_rows([r for r in task_rows if p is None or r.get("protocol") == p],
                        length=length)
    ref = {r["task"]: r for r in tasks if r["label"] == "full"}
    mine: dict[tuple[str, str], dict[str, Any]] = {(r["label"], r["task"]): r for r in tasks}
    common = {"level": level, "ppl_margin": ppl_margin, "task_margin": task_margin,
              "length": length, "protocol": p}
    points = []
    for r in ppl:
        if r["label"] == "full":
            continue
        lv = float(r.get("ppl_level") or level)
        b = ppl_increase_bound(r, f, level=lv, resamples=resamples, seed=seed)
        rel = ppl_rel(r, f)
        if b is None:
            pv = "yes" if rel <= ppl_margin + 1e-12 else "no"
            pt = {"ppl_low": None, "ppl_high": None, "ppl_verdict": pv,
                  "ppl_test": "no paired data: decided by the point rule", "ppl_level": lv,
                  "ppl_windows": r.get("windows")}
        else:
            pv = bound_verdict(b, ppl_margin)
            test = b.test
            if r.get("ppl_looks"):
                test += (f"; sequential: {r['windows']} of {r['windows_planned']} windows, "
                         f"looks at {r['ppl_looks']}, level {lv:.5g} at this look")
            pt = {"ppl_low": b.low, "ppl_high": b.high, "ppl_verdict": pv, "ppl_test": test,
                  "ppl_level": lv, "ppl_windows": r.get("windows")}
        tv, worst, names, trials = [], None, [], []
        for task, fr in sorted(ref.items()):
            row = mine.get((r["label"], task))
            if row is None:
                tv.append("undecided")
                names.append(f"{task}: not run")
                continue
            if row.get("scores") is None or fr.get("scores") is None:
                diff = row["score_sum"] / row["trials"] - fr["score_sum"] / fr["trials"]
                v = "yes" if diff >= -task_margin - 1e-12 else "no"
                tb = PairedBound(diff, diff, diff, level, int(row["trials"]),
                                 "no per-trial scores: decided by the point rule")
            else:
                tb = task_difference_bound(row["scores"], fr["scores"], level=level)
                v = task_bound_verdict(tb, task_margin)
            tv.append(v)
            trials.append(tb.units)
            names.append(f"{task}: {v} [{tb.low:+.3f}, {tb.high:+.3f}]")
            if worst is None or tb.low < worst.low:
                worst = tb
        spec_budget = r.get("budget")
        points.append({
            "label": r["label"], "family": r["family"], "method": r["method"],
            "budget": spec_budget, "every_token": _every(r), "ppl": r["ppl"], "ppl_rel": rel,
            **pt, "task_diff": None if worst is None else worst.estimate,
            "task_low": None if worst is None else worst.low,
            "task_high": None if worst is None else worst.high,
            "task_trials": min(trials) if trials else None, "tasks": "; ".join(names),
            "task_test": "" if worst is None else worst.test,
            "task_verdict": _verdict(tv) if tv else "yes",
            "verdict": _verdict([pv, *tv]),
            "bytes_ideal": r.get("bytes_ideal"), "bytes_burst": r.get("bytes_burst"),
            "units": r.get("units"),
            "step_bytes_burst": (r.get("bytes_burst") or 0) * (r.get("units") or 0),
            **common})
    return points, _ni_families(points, common)


def _every(r: dict[str, Any]) -> bool:
    """A perplexity row of a family without a token budget (HiKV with Stage I ``none``)."""
    return r["method"] == Method.HIKV.value and r.get("hikv_stage1") == Stage1Variant.NONE.value


def _ni_families(points: list[dict[str, Any]], common: dict[str, Any]) -> list[dict[str, Any]]:
    fams: dict[str, list[dict[str, Any]]] = {}
    for r in points:
        fams.setdefault(r["family"], []).append(r)
    out = []
    for fam, rows in fams.items():
        rows = sorted(rows, key=lambda r: r["budget"])
        v = [r["verdict"] for r in rows]
        hi = next((i for i in range(len(rows)) if all(x == "yes" for x in v[i:])), None)
        lo = next((i for i in range(len(rows)) if "no" not in v[i:]), None)
        every = rows[0]["every_token"]
        chosen = rows[hi] if hi is not None else rows[-1]
        out.append({
            "family": fam, "method": rows[0]["method"], "label": chosen["label"],
            "verdict": "yes" if hi is not None else "undecided" if lo is not None else "no",
            "every_token": every,
            "iso_budget": (ALL_TOKENS if every else rows[hi]["budget"]) if hi is not None
            else None,
            "iso_budget_low": (ALL_TOKENS if every else rows[lo]["budget"]) if lo is not None
            else None,
            "budgets_tested": [r["budget"] for r in rows],
            "verdicts": " ".join(f"{r['budget']}:{r['verdict']}" for r in rows),
            "ppl_rel": chosen["ppl_rel"], "ppl_high": chosen["ppl_high"],
            "task_low": chosen["task_low"],
            "bytes_burst": rows[hi]["bytes_burst"] if hi is not None else None,
            "bytes_burst_low": rows[lo]["bytes_burst"] if lo is not None else None,
            "bytes_ideal": rows[hi]["bytes_ideal"] if hi is not None else None,
            "units": chosen["units"], **common})
    return out


def noninferiority_reductions(families: Seq[dict[str, Any]], hikv_family: str
                              ) -> list[dict[str, Any]]:
    """Each family's burst bytes at its iso point over ``hikv_family``'s
    (:func:`noninferiority_table`'s families), with the interval the iso budgets' intervals
    give: ``x_burst_low`` = the baseline at ``iso_budget_low`` over HiKV at ``iso_budget``,
    ``x_burst_high`` = the baseline at ``iso_budget`` over HiKV at ``iso_budget_low`` (None
    where an end is not established)."""
    h = next((r for r in families if r["family"] == hikv_family), None)
    if h is None:
        raise ParamError(f"no non-inferiority row of family {hikv_family!r}")

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    return [{"baseline": r["family"], "baseline_verdict": r["verdict"], "hikv": hikv_family,
             "hikv_verdict": h["verdict"],
             "x_burst": ratio(r["bytes_burst"], h["bytes_burst"]),
             "x_burst_low": ratio(r["bytes_burst_low"], h["bytes_burst"]),
             "x_burst_high": ratio(r["bytes_burst"], h["bytes_burst_low"]),
             "level": r["level"], "ppl_margin": r["ppl_margin"],
             "task_margin": r["task_margin"]}
            for r in families if r["family"] != hikv_family]
