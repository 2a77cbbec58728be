"""The seed suites' trial runner: one cell (or one cell per protocol of a task and length,
sharing each trial's prompt pass) run trial by trial, adaptively.

:func:`run_cell` gives the rows of one cell of :mod:`hikv.model.accuracy.seed_suite`;
:func:`run_cells` runs the ``prompt`` and ``follow-up`` cells of one task and length together: both
draw the same case per trial, and the follow-up prompt (the context) is a prefix of the prompt one
(context and question), so one prompt pass serves both (:func:`hikv.model.lm.runner.prefill` with
``prefix`` forks the context's state for the follow-up methods). Each cell keeps its own adaptive
bookkeeping (:class:`_TaskCell`), so its rows are those of :func:`run_cell`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hikv.model.accuracy import experiments as A
from hikv.model.accuracy import iso as NI
from hikv.model.accuracy import tasks as T
from hikv.model.accuracy.journal import Journal, partial_path, screen_key
from hikv.model.accuracy.seed_spec import Cell, SeedSuite, suite_key, suite_specs
from hikv.params import Config, MethodSpec, ParamError

__all__ = ["run_cell", "run_cells", "cell_units", "reusable", "ppl_state", "ppl_window"]

Progress = Callable[[int], None]


def _ppl_fail(suite: SeedSuite, ppl_rows: list[dict[str, Any]]) -> dict[str, str]:
    """Labels whose perplexity is more than ``suite.ppl_tol`` above full KV's, with why; with
    ``suite.prune`` ``noninferiority``, those whose perplexity cannot pass the non-inferiority
    test (the upper bound of the increase at or above :data:`~hikv.model.accuracy.iso.PPL_MARGIN`;
    the estimate where a row has no per-block NLLs)."""
    full = [r for r in ppl_rows if r["label"] == "full"]
    if not full:
        return {}
    if suite.prune == "point":
        return {r["label"]: f"perplexity {100 * NI.ppl_rel(r, full[0]):+.2f} % > "
                f"{100 * suite.ppl_tol:g} % of full KV's"
                for r in ppl_rows
                if r["label"] != "full" and NI.ppl_rel(r, full[0]) > suite.ppl_tol}
    out = {}
    for r in ppl_rows:
        if r["label"] == "full":
            continue
        b = NI.ppl_increase_bound(r, full[0], level=float(r.get("ppl_level") or NI.NI_LEVEL))
        hi = NI.ppl_rel(r, full[0]) if b is None else b.high
        if hi >= NI.PPL_MARGIN:
            out[r["label"]] = (f"perplexity increase bound {100 * hi:+.2f} % >= "
                               f"{100 * NI.PPL_MARGIN:g} %: cannot be non-inferior")
    return out


def reusable(row: dict[str, Any], cell: Cell, suite: SeedSuite) -> bool:
    """Whether a row of ``cell`` on disk was measured as ``suite`` measures it now, so a
    resumed run keeps it: perplexity over ``suite.ppl_windows`` windows decoding the last
    ``suite.ppl_decode`` tokens (with per-block NLLs when the pruning serves the
    non-inferiority test), a task over ``suite.trials`` planned trials. A row measured
    otherwise (a suite given more windows or trials) is measured again."""
    if cell.kind == "ppl":
        return (int(row.get("windows_planned") or row.get("windows") or 0) == suite.ppl_windows
                and int(row.get("prefix") or 0) == cell.length - suite.ppl_decode
                and (suite.prune == "point" or bool(row.get("nll_blocks"))))
    return int(row.get("trials_planned") or row.get("trials") or 0) == suite.trials


def _ladder(specs: list[MethodSpec]) -> dict[str, list[MethodSpec]]:
    """Per family, its specs from the largest budget to the smallest."""
    fams: dict[str, list[MethodSpec]] = {}
    for sp in specs:
        fams.setdefault(A.family(sp), []).append(sp)
    return {f: sorted(v, key=lambda sp: -(sp.budget or 0)) for f, v in fams.items()}


def _task_row(spec: MethodSpec, cell: Cell, scores: list[float], planned: int, sample: str,
              n_prompt: int, seed: int, status: str) -> dict[str, Any]:
    k = len(scores)
    tot = sum(scores)
    lo, hi = A.wilson(tot, k)
    return {**A._spec_row(spec), "task": cell.task, "protocol": cell.protocol,
            "length": cell.length, "trials": k, "trials_planned": planned, "score_sum": tot,
            "correct": sum(1 for x in scores if x >= 1.0), "accuracy": tot / k,
            "ci_low": lo, "ci_high": hi, "prompt_tokens": n_prompt / k, "scores": scores,
            "sample": sample, "seed": seed, "status": status}


class _TaskCell:
    """One adaptive task cell's bookkeeping, trial by trial (see :func:`_adaptive_task`):
    :attr:`active` the specs the next trial runs (empty once the cell is decided),
    :meth:`add` a trial's answers, :meth:`rows` the cell's rows."""

    def __init__(self, cell: Cell, suite: SeedSuite, specs: list[MethodSpec],
                 have: dict[str, dict[str, Any]], ppl_rows: list[dict[str, Any]], *,
                 seed: int, progress: Progress | None, skipped: dict[str, str],
                 partial_dir: Path | None = None, log: Callable[[str], None] | None = None,
                 resumed: dict[str, tuple[float, float]] | None = None,
                 screen: bool = False) -> None:
        self.cell, self.suite, self.specs, self.seed = cell, suite, specs, seed
        self.screen = screen
        self.progress, self.skipped = progress, skipped
        self.journal: Journal | None = None
        self.rows = dict(have)
        self.full = next(sp for sp in specs if sp.label == "full")
        self.f = f = self.rows.get("full")
        self.sc_of: dict[str, list[float]] = {}
        self.smp: dict[str, str] = {}
        self.n_prompt = self.ran = 0
        self.active: list[MethodSpec] = []
        if f is not None and (f.get("status") == "stopped"
                              or f["accuracy"] < suite.keep_min - 1e-12):
            skipped.update({sp.label: "task dropped: full KV below the filter"
                            for sp in specs if sp.label not in self.rows})
            return
        bad_ppl = _ppl_fail(suite, ppl_rows)
        active: list[MethodSpec] = [] if f is not None else [self.full]
        for ladder in _ladder([sp for sp in specs if sp.label != "full"]).values():
            why = ""
            for i, sp in enumerate(ladder):
                r = self.rows.get(sp.label)
                if why:
                    skipped[sp.label] = why
                elif sp.label in bad_ppl:
                    why = f"{sp.label}: {bad_ppl[sp.label]}"
                    if i == 0 and suite.task_top:       # its retrieval, beside its verdict
                        if r is None:
                            active.append(sp)
                    else:
                        skipped[sp.label] = bad_ppl[sp.label]
                elif r is not None:
                    if r.get("status") == "stopped" or (
                            f is not None
                            and r["score_sum"] < f["score_sum"] - suite.task_tol * suite.trials):
                        why = f"larger budget {sp.label} fails the task criterion"
                else:
                    active.append(sp)
        self.active = active
        self.sc_of = {sp.label: [] for sp in active}
        if partial_dir is not None and active:
            self._resume(partial_dir, sorted(self.rows), log)
            if resumed is not None and self.journal is not None:
                resumed[cell.key] = self.journal.prior

    def _resume(self, partial_dir: Path, have: list[str], log: Callable[[str], None] | None
                ) -> None:
        """Open the cell's journal (:mod:`hikv.model.accuracy.journal`) and replay its trials
        while each one ran exactly the methods the replay has active."""
        key = screen_key(self.cell.key) if self.screen else self.cell.key
        j = self.journal = Journal(partial_path(partial_dir, key), {
            "cell": self.cell.key, "seed": self.seed, "suite_key": suite_key(self.suite, "task"),
            **({"screen": True} if self.screen else {}),
            "have": have, "active": [sp.label for sp in self.active]})
        for i, rec in enumerate(j.records):
            if not self.active or rec["labels"] != [sp.label for sp in self.active]:
                j.keep(i)
                j.dropped = f"{j.path.name}: trial {i} ran other methods, dropped from it on"
                break
            self._apply(rec["prompt_tokens"], rec["scores"], rec["texts"])
        if log is not None and (j.dropped or j.records):
            log(f"{self.cell.key}: resumed {self.ran} finished trial(s) from {j.path.name}"
                + (f" ({j.dropped})" if j.dropped else ""))

    def case(self, lm: Any, words: Sequence[str], i: int) -> Any:
        """Trial ``i``'s case (the same for every protocol and run)."""
        c = self.cell
        return T.make_case(lm, c.task, c.length, random.Random(f"{self.seed}/{c.task}/"
                                                               f"{c.length}/{i}"), words=words)

    def add(self, case: Any, outs: list[list[int]], decode: Callable[[list[int]], str]
            ) -> None:
        """Score trial ``self.ran``'s answers ``outs`` (one per :attr:`active` spec), journal
        them, and stop what can no longer pass."""
        texts = [decode(o) for o in outs]
        if len(texts) != len(self.active):
            raise ValueError(f"{len(texts)} answers for {len(self.active)} methods")
        scores = [T.score(t, case.references) for t in texts]
        if self.journal is not None:
            self.journal.append(self.ran, case.length, [sp.label for sp in self.active],
                                scores, texts)
        self._apply(case.length, scores, texts)

    def _apply(self, prompt_tokens: int, scores: list[float], texts: list[str]) -> None:
        """The bookkeeping of one trial (scores and answers of the :attr:`active` specs)."""
        suite, full, T_ = self.suite, self.full, self.suite.trials
        self.n_prompt += prompt_tokens
        self.ran += 1
        for sp, sc, text in zip(self.active, scores, texts, strict=True):
            self.sc_of[sp.label].append(sc)
            self.smp.setdefault(sp.label, text)
        if self.progress is not None:
            self.progress(1)
        rem = T_ - self.ran
        sc = self.sc_of
        if self.f is None and sum(sc["full"]) + rem < suite.keep_min * T_ - 1e-9:
            self.rows["full"] = self._row(full, "stopped")
            self.skipped.update({sp.label: "task dropped: full KV below the filter"
                                 for sp in self.active if sp is not full})
            self.active = []
            return
        target = (self.f["score_sum"] if self.f is not None else sum(sc["full"])) \
            - suite.task_tol * T_ - 1e-9
        dead: set[str] = set()
        for sp in self.active:
            if sp is full or sp.label in dead:
                continue
            if sum(sc[sp.label]) + rem < target:
                dead.add(sp.label)
                self.rows[sp.label] = self._row(sp, "stopped")
                for o in self.active:
                    if (A.family(o) == A.family(sp) and o is not full
                            and (o.budget or 0) < (sp.budget or 0) and o.label not in dead):
                        dead.add(o.label)
                        self.skipped[o.label] = \
                            f"larger budget {sp.label} fails the task criterion"
        self.active = [sp for sp in self.active if sp.label not in dead]
        if self.ran == T_:
            for sp in self.active:
                self.rows[sp.label] = self._row(sp, "complete")
            self.active = []

    def _row(self, spec: MethodSpec, status: str) -> dict[str, Any]:
        return _task_row(spec, self.cell, self.sc_of[spec.label], self.suite.trials,
                         self.smp[spec.label], self.n_prompt, self.seed, status)

    def finish(self) -> list[dict[str, Any]]:
        """The cell's rows in spec order (its remaining progress units reported)."""
        if self.progress is not None:
            self.progress(cell_units(self.cell, self.suite) - self.ran)
        return [self.rows[sp.label] for sp in self.specs if sp.label in self.rows]


def _adaptive_task(cell: Cell, suite: SeedSuite, env: dict[str, Any],
                   specs: list[MethodSpec], have: dict[str, dict[str, Any]],
                   ppl_rows: list[dict[str, Any]], *, seed: int, batch: int,
                   progress: Progress | None, skipped: dict[str, str],
                   screen: bool = False, **journal: Any) -> list[dict[str, Any]]:
    """Rows of one task cell, running only what the iso decision can use.

    Trial by trial, full KV and the methods still undecided share one prompt pass
    (:func:`hikv.model.accuracy.experiments._generate`). Full KV stops once it cannot reach
    ``suite.keep_min`` (``status: stopped``): the task filter drops the cell, the methods
    stop with it. A method stops (``status: stopped``, its trials so far) once even perfect
    scores on the remaining trials cannot bring it within ``suite.task_tol`` of full KV's
    total (full KV's score so far, a lower bound of its total, or its total when its row is on
    disk); the family's smaller budgets then stop too (``skipped``), and budgets whose
    perplexity, or a larger budget's, is over ``suite.ppl_tol`` are not run: the iso budget
    is the smallest with every larger budget passing, so none of these can be it (with
    ``suite.task_top`` the family's largest budget runs even so: its retrieval is measured,
    not its iso-accuracy). Once every
    method is decided, full KV alone finishes its trials (the task filter needs them). Rows in
    ``have`` are kept (resume per method); ``skipped`` gains label -> reason. ``journal``:
    ``partial_dir``, ``log``, ``resumed`` of :class:`_TaskCell` (finished trials journaled
    and resumed, :mod:`hikv.model.accuracy.journal`).

    ``screen`` (a task the filter is expected to drop, :func:`screened`): full KV first runs
    alone (its trials journaled to ``<key>.screen.partial.jsonl``, :func:`screen_key`) until
    the filter decides; a dropped task then costs one prompt pass and one answer per trial,
    not one per method, and a kept one runs its methods over the same trials as with full
    KV's row on disk (each trial's prompt pass again, the methods stopping against full KV's
    known total). The rows are measured on the same cases either way.
    """
    lm, cfg = env["lm"], env["cfg"]

    def run(st: _TaskCell) -> _TaskCell:
        while st.active:
            c = st.case(lm, env["words"], st.ran)
            ctx, feed = A.split_prompt(c.context, c.question, cell.protocol)
            st.add(c, A._generate(lm, st.active, cfg, ctx, feed, c.references, c.max_new,
                                  batch), lm.decode)
        return st

    if screen and "full" not in have:
        resumed = journal.pop("resumed", None)
        times: list[dict[str, tuple[float, float]]] = [{}, {}]   # each phase's journal's
        full = [sp for sp in specs if sp.label == "full"]
        lead = run(_TaskCell(cell, suite, full, have, [], seed=seed, progress=progress,
                             skipped={}, screen=True, resumed=times[0], **journal))
        owed = lead.ran             # progress units the screen reported (the cell has T)

        def rest(n: int) -> None:
            nonlocal owed
            k = min(n, owed)
            owed -= k
            if progress is not None and n > k:
                progress(n - k)

        st = run(_TaskCell(cell, suite, specs, {**have, "full": lead.rows["full"]}, ppl_rows,
                           seed=seed, progress=rest, skipped=skipped, resumed=times[1],
                           **journal))
        spent = [t[cell.key] for t in times if cell.key in t]
        if resumed is not None and spent:        # both phases' time in earlier runs
            resumed[cell.key] = (sum(w for w, _ in spent), sum(c for _, c in spent))
        return st.finish()
    return run(_TaskCell(cell, suite, specs, have, ppl_rows, seed=seed, progress=progress,
                         skipped=skipped, **journal)).finish()


def _fork_generate(lm: Any, prompt: list[MethodSpec], follow: list[MethodSpec], cfg: Config,
                   case: Any, batch: int) -> tuple[list[list[int]], list[list[int]]]:
    """Greedy answers of ``prompt`` (protocol ``prompt``) and ``follow`` (``follow-up``) specs
    on one case from one prompt pass: the first batch of ``prompt`` prefills context and
    question with ``prefix`` = the context, forking the follow-up state; the other ``prompt``
    batches and every ``follow`` batch adopt their recorded prompt
    (:func:`hikv.model.lm.runner.adopt_prefill`): the states a pass over each prompt would give."""
    from hikv.model.lm.runner import Sequence as LMSeq
    from hikv.model.lm.runner import adopt_prefill, prefill

    ctx_p, feed_p = A.split_prompt(case.context, case.question, "prompt")
    ctx_f, feed_f = A.split_prompt(case.context, case.question, "follow-up")
    refs, new = case.references, case.max_new
    cap_p = A._cap_batch(lm, batch, len(ctx_p) + len(feed_p) + new)
    cap_f = A._cap_batch(lm, batch, len(ctx_f) + len(feed_f) + new)
    out_p: list[list[int]] = [[] for _ in prompt]
    out_f: list[list[int]] = [[] for _ in follow]
    pending = [LMSeq(lm, sp, cfg) for sp in prompt]
    fseqs = [LMSeq(lm, sp, cfg) for sp in follow]
    chunks = A._batches(list(range(len(prompt))), cap_p)
    record = fork = None
    try:
        for j, chunk in enumerate(chunks):
            seqs = [pending[i] for i in chunk]
            if j == 0:
                logits = prefill(lm, seqs, ctx_p, record_for=pending if len(chunks) > 1
                                 else None, prefix=len(ctx_f), prefix_for=fseqs)
                record, fork = lm.last_prefill, lm.last_prefix
            else:
                logits = adopt_prefill(lm, seqs, record)
            for i, o in zip(chunk, A._answer(lm, seqs, logits, feed_p, refs, new),
                            strict=True):
                out_p[i] = o
                pending[i] = None       # one batch's caches at a time
            del seqs
        assert fork is not None
        for chunk in A._batches(list(range(len(follow))), cap_f):
            seqs = [fseqs[i] for i in chunk]
            logits = adopt_prefill(lm, seqs, fork)
            for i, o in zip(chunk, A._answer(lm, seqs, logits, feed_f, refs, new),
                            strict=True):
                out_f[i] = o
                fseqs[i] = None
            del seqs
    finally:
        lm.last_prefill = lm.last_prefix = None
    return out_p, out_f


def _ppl_stop(suite: SeedSuite, full_row: dict[str, Any] | None
              ) -> Callable[[int, list[dict[str, Any]]], list[str]]:
    """The stopping rule of a sequential perplexity cell (``suite.ppl_looks``): at each look
    but the last, the labels whose perplexity test (:func:`hikv.model.accuracy.iso.
    ppl_look_verdict` against full KV over the same windows, at the look's level of
    :func:`~hikv.model.accuracy.iso.look_levels`) is ``yes`` or ``no``. Full KV never stops;
    its row is the running one, or ``full_row`` (on disk) when full KV is not run again."""
    levels = NI.look_levels(suite.ppl_looks, suite.ppl_windows)

    def stop(n: int, rows: list[dict[str, Any]]) -> list[str]:
        if n not in levels or n >= suite.ppl_windows:
            return []
        full = next((r for r in rows if r["label"] == "full"), full_row)
        if full is None:
            return []
        return [r["label"] for r in rows if r["label"] != "full"
                and NI.ppl_look_verdict(r, full, levels[n]) != "undecided"]
    return stop


def _cell_windows(env: dict[str, Any], cell: Cell, suite: SeedSuite) -> list[list[int]]:
    """The token windows of perplexity cell ``cell`` (:func:`hikv.model.accuracy.experiments.
    text_windows` of the essays), cut once per worker and kept in ``env``."""
    cache = env.setdefault("ppl_windows", {})
    key = (cell.length, suite.ppl_windows, suite.ppl_decode)
    if key not in cache:
        cache[key] = A.text_windows(env["lm"], env["text"], cell.length, suite.ppl_windows,
                                    scored=suite.ppl_decode)
    return cache[key]


def _ppl_journal(partial_dir: Path, cell: Cell, suite: SeedSuite, need: Sequence[MethodSpec],
                 wins: Sequence[Sequence[int]], log: Callable[[str], None] | None) -> Journal:
    """The window journal of a perplexity cell (:mod:`hikv.model.accuracy.journal`): its
    header names the methods to run, the suite and a hash of the windows' tokens, so a journal
    written for other methods, windows or text is discarded."""
    from hikv.toolchain import text_hash

    j = Journal(partial_path(partial_dir, cell.key), {
        "cell": cell.key, "suite_key": suite_key(suite, "ppl"),
        "labels": [sp.label for sp in need],
        "windows": text_hash(repr([list(w) for w in wins]))})
    if log is not None and (j.dropped or j.records):
        log(f"{cell.key}: resumed {len(j.records)} finished window(s) of {len(wins)} from "
            f"{j.path.name}" + (f" ({j.dropped})" if j.dropped else ""))
    return j


def run_cell(cell: Cell, suite: SeedSuite, env: dict[str, Any], *, seed: int = 0,
             batch: int = 64, progress: Progress | None = None,
             have: list[dict[str, Any]] | None = None,
             ppl_rows: list[dict[str, Any]] | None = None,
             skipped: dict[str, str] | None = None, partial_dir: Path | None = None,
             log: Callable[[str], None] | None = None,
             resumed: dict[str, tuple[float, float]] | None = None,
             ppl_records: Sequence[dict[str, Any]] | None = None,
             screen: bool = False) -> list[dict[str, Any]]:
    """Rows of one cell for the methods of :func:`suite_specs` (``env``: ``lm``, ``cfg``,
    ``text``, ``words`` of a loaded model); each row gains ``budget_rule`` and ``cell``.

    ``have``: rows of this cell already on disk; only the methods missing from them run (a
    new family adds work without redoing the old). A perplexity cell runs every missing
    method; a task cell with ``suite.adaptive`` runs full KV first and then only what the iso
    decision can use (:func:`_adaptive_task`, given the length's perplexity rows
    ``ppl_rows``; ``skipped`` gains each method not run and why), else every method on every
    trial. With ``partial_dir`` (the suite's ``cells/``) an adaptive task cell journals each
    finished trial to ``<key>.partial.jsonl`` and first replays the trials a killed run left
    there (:mod:`hikv.model.accuracy.journal`; ``resumed`` gains the key -> the journal's
    cumulative (wall s, CPU s), ``log`` says what was resumed); the caller deletes the journal
    once the cell's file is written. ``ppl_records``: a perplexity cell's finished windows
    (journal records, :func:`ppl_window`) given by the caller instead of read from its journal
    (:func:`ppl_state`). ``screen``: an adaptive task cell runs full KV alone first
    (:func:`_adaptive_task`)."""
    lm, cfg = env["lm"], env["cfg"]
    pairs, need, done = _cell_need(cell, suite, env, have)
    rules = {sp.label: r for sp, r in pairs}
    specs = [p[0] for p in pairs]
    if cell.kind == "ppl":
        rows: list[dict[str, Any]] = []
        if need:
            wins = _cell_windows(env, cell, suite)
            journal = None
            if ppl_records is None and partial_dir is not None:
                journal = _ppl_journal(partial_dir, cell, suite, need, wins, log)
                if resumed is not None and journal.records:
                    resumed[cell.key] = journal.prior
            rows = A.perplexity(
                lm, need, cfg, wins, cell.length - suite.ppl_decode, batch=batch,
                resume=ppl_records if ppl_records is not None
                else journal.records if journal else (),
                on_window=journal.append_record if journal else None,
                stop=_ppl_stop(suite, done.get("full")) if suite.ppl_looks else None)
            if suite.ppl_looks:
                levels = NI.look_levels(suite.ppl_looks, suite.ppl_windows)
                rows = [{**r, "ppl_looks": sorted(levels), "ppl_level": levels[r["windows"]]}
                        for r in rows]
        if progress is not None:
            progress(cell_units(cell, suite))
        got = {**done, **{r["label"]: r for r in rows}}
        rows = [got[sp.label] for sp in specs]
    elif suite.adaptive:
        rows = _adaptive_task(cell, suite, env, specs, done, ppl_rows or [], seed=seed,
                              batch=batch, progress=progress,
                              skipped=skipped if skipped is not None else {},
                              screen=screen, partial_dir=partial_dir, log=log, resumed=resumed)
    else:
        new = A.task_accuracy(lm, need, cfg, task=cell.task, length=cell.length,
                              trials=suite.trials, protocol=cell.protocol, seed=seed,
                              words=env["words"], batch=batch,
                              progress=progress) if need else []
        got = {**done, **{r["label"]: r for r in new}}
        rows = [got[sp.label] for sp in specs]
    return [{**r, "budget_rule": rules[r["label"]], "cell": cell.key} for r in rows]


def _cell_need(cell: Cell, suite: SeedSuite, env: dict[str, Any],
               have: list[dict[str, Any]] | None
               ) -> tuple[list[tuple[MethodSpec, str]], list[MethodSpec],
                          dict[str, dict[str, Any]]]:
    """(the suite's (method, budget rule) pairs at the cell's length; the methods the cell
    runs: those without a reusable row in ``have``, in the suite's order; ``have``'s reusable
    rows by label)."""
    pairs = suite_specs(suite, env["cfg"], cell.length)
    labels = {sp.label for sp, _ in pairs}
    done = {r["label"]: r for r in (have or [])
            if r["label"] in labels and reusable(r, cell, suite)}
    return pairs, [sp for sp, _ in pairs if sp.label not in done], done


def ppl_state(cell: Cell, suite: SeedSuite, env: dict[str, Any], *, batch: int = 64,
              have: list[dict[str, Any]] | None = None,
              records: Sequence[dict[str, Any]] | None = None,
              partial_dir: Path | None = None,
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Where perplexity cell ``cell`` stands after its finished windows ``records`` (window
    journal records in order; None: those of its journal in ``partial_dir``, which this opens
    as :func:`run_cell` does, discarding one written for other settings): what a caller that
    decodes the cell's windows in parallel (:func:`ppl_window`, one per window) needs next.

    Returns ``records`` and, where the journal was read, its ``header`` and ``prior``
    (cumulative wall and CPU s); then either ``rows`` (:func:`run_cell`'s rows of the cell,
    nothing left to decode: every window ran, or every method stopped at a look) or
    ``labels`` (the methods still running after the records, the stopping rule applied at
    their count, :func:`_ppl_stop`) and ``until`` (the window count of the next look, or the
    cell's end): windows ``len(records) .. until - 1`` all run with ``labels``, exactly as
    :func:`hikv.model.accuracy.experiments.perplexity` runs them one after another, so the
    rows equal one process's to the last bit."""
    lm, cfg = env["lm"], env["cfg"]
    _, need, done = _cell_need(cell, suite, env, have)
    out: dict[str, Any] = {"header": None, "prior": (0.0, 0.0)}
    wins = _cell_windows(env, cell, suite) if need else []
    if records is None:
        records = []
        if need and partial_dir is not None:
            j = _ppl_journal(partial_dir, cell, suite, need, wins, log)
            records, out["header"], out["prior"] = j.records, j.header, j.prior
    records = list(records)
    out["records"] = records
    n = min(len(records), suite.ppl_windows)
    labels = [sp.label for sp in need]
    if n and need:
        labels = [x for x in labels if x in records[n - 1]["methods"]]
        if suite.ppl_looks and labels:
            rule = _ppl_stop(suite, done.get("full"))
            gone: set[str] = set()

            def stop(k: int, rows: list[dict[str, Any]]) -> list[str]:
                got = list(rule(k, rows))
                gone.update(got)
                return got

            # a replay of the records (nothing decoded): the rule at their count
            A.perplexity(lm, need, cfg, wins, cell.length - suite.ppl_decode,
                         batch=batch, resume=records[:n], stop=stop, until=n)
            labels = [x for x in labels if x not in gone]
    if not labels or n >= suite.ppl_windows:
        out["rows"] = run_cell(cell, suite, env, batch=batch, have=have,
                               ppl_records=records)
        return out
    looks = sorted(NI.look_levels(suite.ppl_looks, suite.ppl_windows)) if suite.ppl_looks \
        else [suite.ppl_windows]
    out["labels"] = labels
    out["until"] = min(x for x in looks if x > n)
    return out


def ppl_window(cell: Cell, suite: SeedSuite, env: dict[str, Any], labels: Sequence[str],
               window: int, *, batch: int = 64) -> dict[str, Any]:
    """Window ``window`` of perplexity cell ``cell`` decoded for the methods ``labels`` (those
    :func:`ppl_state` says are running): its journal record, as
    :func:`hikv.model.accuracy.experiments.perplexity` writes it after that window (the methods
    in the suite's order and batches, so the numbers are a sequential run's)."""
    if not 0 <= window < suite.ppl_windows:
        raise ParamError(f"window = {window} is out of range: allowed [0, "
                         f"{suite.ppl_windows - 1}] in {cell.key}")
    want = set(labels)
    specs = [sp for sp, _ in suite_specs(suite, env["cfg"], cell.length) if sp.label in want]
    if len(specs) != len(want):
        raise ParamError(f"{cell.key}: methods {sorted(want - {sp.label for sp in specs})} "
                         "are not in the suite")
    got: list[dict[str, Any]] = []
    A.perplexity(env["lm"], specs, env["cfg"], [_cell_windows(env, cell, suite)[window]],
                 cell.length - suite.ppl_decode, batch=batch,
                 on_window=lambda _i, rec: got.append(rec))
    return got[0]


def run_cells(cells: Sequence[Cell], suite: SeedSuite, env: dict[str, Any], *,
              seed: int = 0, batch: int = 64, progress: Progress | None = None,
              have: dict[str, list[dict[str, Any]]] | None = None,
              ppl_rows: list[dict[str, Any]] | None = None,
              skipped: dict[str, dict[str, str]] | None = None,
              partial_dir: Path | None = None, log: Callable[[str], None] | None = None,
              resumed: dict[str, tuple[float, float]] | None = None, screen: bool = False
              ) -> dict[str, list[dict[str, Any]]]:
    """Rows per cell key of ``cells``: the ``prompt`` and ``follow-up`` task cells of one task
    and length (adaptive suite) run together, one prompt pass per trial for both (see the
    module docstring and :func:`_fork_generate`), each with its own bookkeeping, so each
    cell's rows are :func:`run_cell`'s (the follow-up state is forked from the prompt pass:
    causal attention makes it that of a pass over the context, float for float where the
    BLAS kernels do not depend on the row count; ``docs/accuracy.md``, "Exactness of the shared
    prompt pass").
    Anything else runs cell by cell. ``have``, ``skipped``: per cell key; ``partial_dir``,
    ``log``, ``resumed``: the trial journals, as in :func:`run_cell` (a pair whose journals
    end at different trials lets the one behind catch up alone, then shares again);
    ``screen``: a task cell run alone screens the task with full KV first (:func:`run_cell`;
    a pair shares its prompt passes instead)."""
    have, skipped = have or {}, skipped if skipped is not None else {}
    for c in cells:
        skipped.setdefault(c.key, {})
    pair = [c for c in cells if c.kind == "task"]
    if not (suite.adaptive and len(cells) == 2 and len(pair) == 2
            and {c.protocol for c in pair} == {"prompt", "follow-up"}
            and len({(c.task, c.length) for c in pair}) == 1):
        return {c.key: run_cell(c, suite, env, seed=seed, batch=batch, progress=progress,
                                have=have.get(c.key), ppl_rows=ppl_rows,
                                skipped=skipped[c.key], partial_dir=partial_dir, log=log,
                                resumed=resumed, screen=screen) for c in cells}
    lm, cfg = env["lm"], env["cfg"]
    pairs = suite_specs(suite, cfg, pair[0].length)
    rules = {sp.label: r for sp, r in pairs}
    specs = [p[0] for p in pairs]
    st: dict[str, _TaskCell] = {}
    for c in pair:
        done = {r["label"]: r for r in have.get(c.key, [])
                if r["label"] in rules and reusable(r, c, suite)}
        st[c.protocol] = _TaskCell(c, suite, specs, done, ppl_rows or [], seed=seed,
                                   progress=progress, skipped=skipped[c.key],
                                   partial_dir=partial_dir, log=log, resumed=resumed)
    p, f = st["prompt"], st["follow-up"]
    while p.active or f.active:
        # the active cell with fewer trials (equal counts, unresumed: the prompt cell)
        lead = min((x for x in (p, f) if x.active), key=lambda x: x.ran)
        c = lead.case(lm, env["words"], lead.ran)
        if p.active and f.active and p.ran == f.ran:
            op, of = _fork_generate(lm, p.active, f.active, cfg, c, batch)
            p.add(c, op, lm.decode)
            f.add(c, of, lm.decode)
            continue
        ctx, feed = A.split_prompt(c.context, c.question, lead.cell.protocol)
        lead.add(c, A._generate(lm, lead.active, cfg, ctx, feed, c.references, c.max_new,
                                batch), lm.decode)
    return {s.cell.key: [{**r, "budget_rule": rules[r["label"]], "cell": s.cell.key}
                         for r in s.finish()] for s in (p, f)}


def cell_units(cell: Cell, suite: SeedSuite) -> int:
    """Progress units of a cell: its perplexity windows or its trials."""
    return suite.ppl_windows if cell.kind == "ppl" else suite.trials
