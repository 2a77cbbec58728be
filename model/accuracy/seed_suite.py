"""The seed suites: the protocol x length x task study, scheduled and run resumably.

A :class:`SeedSuite` names a model, context lengths, protocols, tasks and budget rules; its
cells (:func:`suite_cells`: per length one perplexity cell and one cell per protocol and task)
each run every method of :func:`suite_specs` on the same cases. :func:`run_seed_suite` runs the
cells not yet on disk (in this process, a ``--workers`` process pool or on Ray; both pickle
:func:`_pool_cell` by this module's path) and :func:`seed_tables` writes the task filter, the
iso tables per protocol and length, their iso-point files and ``seed_table.md``. The
single-run study is :mod:`hikv.model.accuracy.suite`.

This module schedules (resume, executors, progress); the rest lives beside it and is
re-exported here: the suites as data in :mod:`hikv.model.accuracy.seed_spec`, the trial runner
(adaptive cells, the two protocols of a task sharing each trial's prompt pass) in
:mod:`hikv.model.accuracy.seed_trials`, the tables in :mod:`hikv.model.accuracy.seed_tables`.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hikv.model.accuracy.io import code_version, read_rows, write_rows
from hikv.model.accuracy.iso import label_family
from hikv.model.accuracy.journal import (
    PARTIAL_SUFFIX,
    Journal,
    partial_path,
    read_journal,
    screen_key,
)
from hikv.model.accuracy.seed_spec import (
    EXTRA_BASELINES,
    SEED_HIKV,
    SEED_SUITES,
    Cell,
    SeedSuite,
    suite_cells,
    suite_key,
    suite_specs,
)
from hikv.model.accuracy.seed_tables import seed_tables, task_filter
from hikv.model.accuracy.seed_trials import cell_units, ppl_state, ppl_window, run_cell, run_cells
from hikv.params import ParamError

__all__ = ["SeedSuite", "SEED_SUITES", "SEED_HIKV", "EXTRA_BASELINES", "Cell", "suite_cells",
           "suite_specs", "run_cell", "run_cells", "run_seed_suite", "task_filter",
           "seed_tables", "cell_groups", "worker_env", "redo_families", "screened",
           "check_screen"]

Log = Callable[[str], None]


class _Bar:
    """A progress bar on stderr: ``done/total`` units, elapsed time and ETA.

    Each call reports ``n`` units of a ``weight`` each (their expected cost), and
    ``weight_total`` is the weight of all ``total`` units; the ETA extrapolates the elapsed
    time by the weight done, not by the unit count, so a suite whose long contexts run first
    does not read tens of hours in its first minutes. The suite weighs a unit by its context
    length in tokens (a trial or window costs about that much: the cells of the timed
    ``seed-smollm2`` run, docs/results/smollm2/timed-run/, took 2,115 / 4,340 / 7,073 CPU s at
    2k / 4k / 8k). Without ``weight_total`` every unit weighs 1.
    """

    def __init__(self, total: int, what: str, stream: Any = None,
                 weight_total: float | None = None) -> None:
        self.total, self.what, self.done = max(1, total), what, 0
        self.weight_total = float(weight_total if weight_total is not None else self.total)
        self.weight_done = 0.0
        self.t0 = time.perf_counter()
        self.stream = stream if stream is not None else sys.stderr
        self._draw()

    def __call__(self, n: int = 1, weight: float = 1.0) -> None:
        """``n`` units done, each of ``weight``."""
        self.done += n
        self.weight_done += n * weight
        self._draw()

    def eta(self) -> float | None:
        """Seconds left by the weight done so far (None before any unit is done)."""
        if self.weight_done <= 0:
            return None
        el = time.perf_counter() - self.t0
        return el / self.weight_done * max(0.0, self.weight_total - self.weight_done)

    def _draw(self) -> None:
        el = time.perf_counter() - self.t0
        f = min(1.0, self.done / self.total)
        left = self.eta()
        eta = f" ETA {left:.0f} s" if left is not None else ""
        bar = "#" * int(30 * f) + "." * (30 - int(30 * f))
        end = "\n" if self.done >= self.total else ""
        self.stream.write(f"\r{self.what} [{bar}] {self.done}/{self.total} {el:.0f} s{eta}"
                          + end)
        self.stream.flush()


# worker state: one loaded model per process (the --workers pool and Ray actors)
_WORKER: dict[str, Any] = {}


def worker_env(model: str, cache: Path | None, preset: str, device: str, threads: int
               ) -> dict[str, Any]:
    """This process's worker state: ``lm`` (``model`` loaded on ``device``), ``cfg`` (``preset``
    adapted to it), ``text`` and ``words`` (the essay corpus); loaded once per process and
    arguments, with ``threads`` torch threads."""
    import torch

    from hikv.model.accuracy.tasks import essay_words
    from hikv.model.lm.assets import essays_text
    from hikv.model.lm.runner import lm_config, load_lm
    from hikv.presets import get_preset

    key = (model, str(cache), preset, device, threads)
    if _WORKER.get("key") != key:
        torch.set_num_threads(threads)
        lm = load_lm(model, cache=cache, device=device)
        text = essays_text(cache)
        _WORKER.update(key=key, lm=lm, cfg=lm_config(get_preset(preset), lm.shape), text=text,
                       words=essay_words(text))
    return _WORKER


def screened(cells_dir: Path, group: list[Cell], suite: SeedSuite,
             tasks: Sequence[str] = ()) -> bool:
    """Whether a unit of work that is one adaptive task cell screens its task with full KV
    first (:func:`hikv.model.accuracy.seed_trials.run_cell`'s ``screen``): its task is one of
    ``tasks`` (the user's ``--screen``: tasks expected to be dropped, ``"all"`` for every one),
    or the task filter dropped the same task and protocol at a shorter length of the suite
    (that cell's file in ``cells_dir``), so it most likely drops it here too, and the methods
    would answer every trial for nothing. Only what runs changes, not what is measured."""
    if len(group) != 1 or group[0].kind != "task" or not suite.adaptive:
        return False
    c = group[0]
    if c.task in tasks or "all" in tasks:
        return True
    for n in suite.lengths:
        p = cells_dir / f"{Cell('task', n, c.protocol, c.task).key}.json"
        if n < c.length and p.is_file() and any(
                not f["kept"] for f in task_filter(suite, read_rows(p)[0])):
            return True
    return False


def check_screen(suite: SeedSuite, tasks: Sequence[str]) -> None:
    """:class:`ParamError` unless ``tasks`` (``--screen``) are tasks of ``suite`` or ``"all"``,
    and the suite is adaptive (only an adaptive task cell can be screened)."""
    bad = [t for t in tasks if t != "all" and t not in suite.tasks]
    if bad:
        raise ParamError(f"--screen {bad}: not tasks of suite {suite.name!r} (allowed: "
                         f"{list(suite.tasks)} or 'all')")
    if tasks and not suite.adaptive:
        raise ParamError(f"--screen: suite {suite.name!r} is not adaptive; only an adaptive "
                         "task cell runs full KV first")


def _drop_journals(cells_dir: Path, key: str) -> None:
    """Delete cell ``key``'s journals (its trials or windows, and its task screen's)."""
    partial_path(cells_dir, key).unlink(missing_ok=True)
    partial_path(cells_dir, screen_key(key)).unlink(missing_ok=True)


def cell_groups(cells: list[Cell], pair: bool = True) -> list[list[Cell]]:
    """``cells`` as units of work, in order: with ``pair``, the ``prompt`` and ``follow-up``
    cells of one task and length form one unit (:func:`run_cells` shares each trial's prompt
    pass between them); every other cell is a unit of its own."""
    groups: dict[tuple[Any, ...], list[Cell]] = {}
    for c in cells:
        k = ("task", c.task, c.length) if pair and c.kind == "task" \
            and c.protocol in ("prompt", "follow-up") else (c.key,)
        groups.setdefault(k, []).append(c)
    return list(groups.values())


def _timed_unit(cells: list[Cell], suite: SeedSuite, env: dict[str, Any], **kw: Any
                ) -> tuple[dict[str, list[dict]], dict[str, dict[str, str]], float, float]:
    """:func:`run_cells` of one unit of work (``kw``: its keyword arguments but ``skipped``
    and ``resumed``): ``(rows per cell key, skipped, wall s, CPU s)``, the times this process
    spent on it plus a resumed trial journal's."""
    tc, pc = time.perf_counter(), time.process_time()
    skipped: dict[str, dict[str, str]] = {}
    resumed: dict[str, tuple[float, float]] = {}
    rows = run_cells(cells, suite, env, skipped=skipped, resumed=resumed, **kw)
    w0 = max((w for w, _ in resumed.values()), default=0.0)
    c0 = max((c for _, c in resumed.values()), default=0.0)
    return rows, skipped, w0 + time.perf_counter() - tc, c0 + time.process_time() - pc


def _pool_cell(args: tuple[list[Cell], SeedSuite, dict[str, Any], dict[str, list[dict]],
                           list[dict], bool]
               ) -> tuple[dict[str, list[dict]], dict[str, Any], dict[str, dict[str, str]],
                          float, float]:
    """One unit of work in a worker process: ``(rows per cell key, model shape, skipped,
    wall s, CPU s)`` (:func:`_timed_unit`)."""
    cells, suite, kw, have, ppl_rows, screen = args
    env = worker_env(kw["model"], kw["cache"], kw["preset"], kw["device"], kw["threads"])
    rows, skipped, wall, cpu = _timed_unit(cells, suite, env, seed=kw["seed"],
                                           batch=kw["batch"], have=have, ppl_rows=ppl_rows,
                                           partial_dir=kw.get("partial_dir"), screen=screen)
    return rows, dataclasses.asdict(env["lm"].shape), skipped, wall, cpu


def _pool_unit(a: tuple[str, tuple]) -> tuple:
    """One unit of the parallel suite in a worker process, by its kind: ``cells`` (a unit of
    :func:`cell_groups`, :func:`_pool_cell`'s result), or a perplexity cell decoded window
    by window: ``ppl-state`` (:func:`ppl_state`; the cell's journal read where no records are
    given) and ``ppl-window`` (:func:`ppl_window`), each ``(result, model shape, wall s, CPU
    s)``."""
    kind, args = a
    if kind == "cells":
        return _pool_cell(args)
    cell, suite, kw, extra = args
    env = worker_env(kw["model"], kw["cache"], kw["preset"], kw["device"], kw["threads"])
    tc, pc = time.perf_counter(), time.process_time()
    if kind == "ppl-state":
        res = ppl_state(cell, suite, env, batch=kw["batch"], have=extra["have"],
                        records=extra["records"],
                        partial_dir=kw.get("partial_dir") if extra["records"] is None else None)
    elif kind == "ppl-window":
        res = ppl_window(cell, suite, env, extra["labels"], extra["window"], batch=kw["batch"])
    else:
        raise ParamError(f"unit kind {kind!r} is not one of 'cells', 'ppl-state', 'ppl-window'")
    return (res, dataclasses.asdict(env["lm"].shape), time.perf_counter() - tc,
            time.process_time() - pc)


class _WindowedCell:
    """A perplexity cell of a parallel suite, its windows decoded side by side (each by
    :func:`ppl_window` in some worker) and journaled here in window order: the windows up to
    the next look of a sequential cell all run with the same methods, so they are independent,
    and at each look :func:`ppl_state` applies the stopping rule to the records so far. The
    rows are one process's to the last bit; the cell's time is its workers' CPU seconds and
    this process's wall clock from its first unit (plus a resumed journal's)."""

    def __init__(self, cell: Cell, have: list[dict[str, Any]]) -> None:
        self.cell, self.have = cell, have
        self.journal: Journal | None = None
        self.records: list[dict[str, Any]] = []
        self.landed: dict[int, dict[str, Any]] = {}     # windows decoded out of order
        self.labels: list[str] = []
        self.until = 0
        self.prior = (0.0, 0.0)
        self.cpu = 0.0
        self.t0 = time.perf_counter()
        self.reported = 0                               # windows shown on the progress bar

    def spent(self) -> tuple[float, float]:
        """The cell's cumulative (wall s, CPU s) so far."""
        return (self.prior[0] + time.perf_counter() - self.t0, self.prior[1] + self.cpu)

    def land(self, window: int, rec: dict[str, Any]) -> int:
        """Window ``window``'s record is back: journal every record now in order; returns how
        many were."""
        self.landed[window] = rec
        n0 = len(self.records)
        while len(self.records) in self.landed:
            i = len(self.records)
            rec = self.landed.pop(i)
            if self.journal is not None:
                self.journal.append_record(i, rec, spent=self.spent())
                rec = self.journal.records[-1]
            self.records.append(rec)
        return len(self.records) - n0


def _cell_state(cells_dir: Path, cell: Cell, suite: SeedSuite, redo: bool
                ) -> tuple[list[dict[str, Any]], bool, tuple[float, float]]:
    """(rows on disk, whether the cell is complete: every method of the suite run or
    skipped by the file's own record, the wall and CPU seconds already spent on those rows:
    a run that adds methods to the cell adds its time to them)."""
    path = cells_dir / f"{cell.key}.json"
    if redo or not path.is_file():
        return [], False, (0.0, 0.0)
    rows, meta = read_rows(path)
    spent = (float(meta.get("wall_s") or 0.0), float(meta.get("cpu_s") or 0.0))
    return rows, meta.get("suite_key") == suite_key(suite, cell.kind), spent


def redo_families(cells_dir: Path, families: Sequence[str], log: Log = print) -> list[str]:
    """Make the next run measure ``families`` (labels without ``@B``) again in every cell
    written in ``cells_dir``: their rows and their skip records leave the cell file, and the
    file loses its ``suite_key``, so the run takes it as incomplete and measures just those
    methods (:func:`run_cell`'s per-method resume; full KV's row and the others' stay). A
    killed run leaves the files without those rows, and the next one measures them.
    Journals of cells in progress are left alone (their windows or trials were measured by the
    code that wrote them); each one that holds such methods is named in the log, to be deleted
    by hand if its data is stale too. Returns the cells changed."""
    fams = set(families)
    if "full" in fams or any("@" in f for f in fams):
        raise ParamError(f"--redo-families {sorted(fams)}: a family is a method label without "
                         "@B (e.g. ds/r8/b4), not 'full'")
    changed = []
    for path in sorted(cells_dir.glob("*.json")):
        rows, meta = read_rows(path)
        keep = [r for r in rows if label_family(str(r.get("label", ""))) not in fams]
        skipped = {k: v for k, v in (meta.get("skipped") or {}).items()
                   if label_family(k) not in fams}
        if len(keep) == len(rows) and skipped == (meta.get("skipped") or {}):
            continue
        meta = {k: v for k, v in meta.items() if k != "suite_key"}
        write_rows(cells_dir, path.stem, keep, {**meta, "skipped": skipped})
        changed.append(path.stem)
        log(f"{path.stem}: {len(rows) - len(keep)} row(s) and "
            f"{len(meta.get('skipped') or {}) - len(skipped)} skip record(s) of "
            f"{', '.join(sorted(fams))} dropped; the run measures them again")
    for path in sorted(cells_dir.glob("*" + PARTIAL_SUFFIX)):
        head, recs, _ = read_journal(path)
        names = set(head.get("labels", []) if isinstance(head, dict) else [])
        for rec in recs:
            names |= set(rec.get("methods", rec.get("labels", ())))
        if any(label_family(str(x)) in fams for x in names):
            log(f"{path.name}: a cell in progress holds methods of {', '.join(sorted(fams))}, "
                "left as it is (delete it to measure its cell again)")
    return changed


def run_seed_suite(suite: SeedSuite, out: Path, *, model: str | None = None,
                   preset: str = "default", cache: Path | None = None, seed: int = 0,
                   batch: int = 64, workers: int = 1, executor: str = "local",
                   device: str = "cpu", threads: int = 1, redo: bool = False,
                   tables_only: bool = False, log: Log = print, argv: list[str] | None = None,
                   remeasure: Sequence[str] = (), screen: Sequence[str] = ()
                   ) -> dict[str, Any]:
    """Run every cell of ``suite`` not yet complete in ``out/cells/`` (resumable per cell,
    per method and per trial: a cell's rows are written when it finishes, a cell whose file
    lacks some of the suite's methods runs just those, and a task cell journals each finished
    trial to ``cells/<key>.partial.jsonl`` until then, so a killed run resumes at the trial
    in flight, :mod:`hikv.model.accuracy.journal`; ``redo`` reruns all), then the tables: the task
    filter (``filter.json``), one iso table per protocol and length (``iso_<protocol>_<N>``,
    with ``iso_points_<protocol>_<N>.json`` for ``hikv report --iso`` and HiKV's byte
    reduction against every baseline, ``reductions_<protocol>_<N>``) and ``seed_table.md``.

    ``tables_only``: run nothing, build the tables from the cells on disk (the missing ones
    are listed in ``seed_table.md``). ``remeasure``: families measured again in the cells on
    disk (:func:`redo_families`), e.g. after their method's code changed. ``screen``: tasks
    (or ``"all"``) whose task cells run full KV alone first, the methods only where the task
    filter keeps the task (:func:`screened`; the rows are the same, only the work differs: a
    dropped task saves every method's answers, a kept one costs full KV's trials twice).
    Perplexity cells run first (adaptive task cells use them); the two protocols' cells of a
    task and length run as one unit sharing each trial's prompt pass (:func:`cell_groups`,
    :func:`run_cells`), each written to its own file. ``workers`` > 1 runs units in that many
    processes (each loads the model once); ``executor="ray"`` spreads them over a
    Ray cluster (``ray.init()`` joins the one in ``RAY_ADDRESS`` or starts a local one). In
    parallel a length's task units start once its perplexity cell is saved, the longest
    contexts first, and each unit is saved (and the progress bar moves) the moment it finishes
    (:func:`hikv.executor.run_graph`). A progress bar goes to stderr.
    """
    from hikv.params import to_dict
    from hikv.presets import get_preset

    model = model or suite.model
    if not model:
        raise ParamError(f"suite {suite.name!r} has no default model: pass --model")
    if workers < 1:
        raise ParamError(f"workers = {workers} is out of range: allowed >= 1")
    if executor not in ("local", "ray"):
        raise ParamError(f"executor = {executor!r} is not one of 'local', 'ray'")
    check_screen(suite, screen)
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    kw = {"model": model, "cache": cache, "preset": preset, "device": device,
          "threads": threads, "seed": seed, "batch": batch,
          # trial journals where the workers share this folder (not a Ray cluster's nodes)
          "partial_dir": cells_dir if executor == "local" else None}
    meta = {"command": " ".join(argv if argv is not None else sys.argv), "model": model,
            "preset": preset, "suite": dataclasses.asdict(suite), "seed": seed,
            "code_version": code_version(), "device": device,
            "config": to_dict(get_preset(preset))}
    if remeasure and tables_only:
        raise ParamError("--redo-families measures methods again: it cannot go with "
                         "--tables-only")
    if remeasure:
        redo_families(cells_dir, remeasure, log)
    cells = suite_cells(suite)
    state = {c.key: _cell_state(cells_dir, c, suite, redo) for c in cells}
    todo = [] if tables_only else [c for c in cells if not state[c.key][1]]
    for c in cells:             # a finished cell's (or, with redo, every) journal is stale
        if (redo and not tables_only) or state[c.key][1]:
            _drop_journals(cells_dir, c.key)
    n_done = sum(1 for c in cells if state[c.key][1])
    log(f"suite {suite.name}: {len(cells)} cells, {n_done} done, "
        f"{len(todo)} to run ({executor}, {workers} worker(s)) -> {out}")
    # a unit weighs its context length (the ETA's estimate of its cost, _Bar); a run with
    # nothing to run draws no bar
    bar: Callable[..., None] = _Bar(
        sum(cell_units(c, suite) for c in todo), f"{suite.name}",
        weight_total=sum(cell_units(c, suite) * c.length for c in todo)) if todo \
        else (lambda n=1, weight=1.0: None)
    t0 = time.perf_counter()
    spent = {c.key: state[c.key][2] for c in cells}

    def save(c: Cell, rows: list[dict[str, Any]], shape: dict[str, Any], wall: float,
             skipped: dict[str, str], cpu: float, extra: dict[str, Any]) -> None:
        write_rows(cells_dir, c.key, rows, {**meta, "cell": c.key, "shape": shape,
                                            "wall_s": wall, "cpu_s": cpu, **extra,
                                            "suite_key": suite_key(suite, c.kind),
                                            "skipped": skipped})
        _drop_journals(cells_dir, c.key)

    def ppl_of(c: Cell) -> list[dict[str, Any]]:
        p = cells_dir / f"ppl_{c.length}.json"
        return read_rows(p)[0] if c.kind == "task" and p.is_file() else []

    def save_unit(g: list[Cell], got: dict[str, list[dict[str, Any]]], shape: dict[str, Any],
                  skipped: dict[str, dict[str, str]], wall: float, cpu: float) -> None:
        # a unit's measured time plus what its rows on disk took (a run adding methods to
        # finished cells); a shared pair's is split evenly between its cells, the pair's total
        # kept in pair_* (in parallel runs: the worker's own time on the unit)
        wall += sum(spent[c.key][0] for c in g)
        cpu += sum(spent[c.key][1] for c in g)
        n = len(g)
        extra = {"paired_with": [c.key for c in g], "pair_wall_s": wall,
                 "pair_cpu_s": cpu} if n > 1 else {}
        for c in g:
            save(c, got[c.key], shape, wall / n, skipped.get(c.key, {}), cpu / n, extra)

    groups = cell_groups(todo)
    if todo and (executor == "ray" or workers > 1):
        # a length's task units need its perplexity cell (adaptive pruning): they become
        # runnable when it is saved; every unit is saved the moment it finishes. A perplexity
        # cell runs window by window on every worker free (_WindowedCell).
        waiting: dict[int, list[list[Cell]]] = {}
        ppl_todo = {g[0].length for g in groups if g[0].kind == "ppl"}
        ready = []
        windowed: dict[str, _WindowedCell] = {}

        def arg(g: list[Cell]) -> tuple:
            return ("cells", (g, suite, kw, {c.key: state[c.key][0] for c in g},
                              ppl_of(g[0]), screened(cells_dir, g, suite, screen)))

        for g in groups:
            if g[0].kind == "task" and g[0].length in ppl_todo:
                waiting.setdefault(g[0].length, []).append(g)
            elif g[0].kind == "ppl":
                c = g[0]
                windowed[c.key] = _WindowedCell(c, state[c.key][0])
                ready.append(("ppl-state", (c, suite, kw, {"have": state[c.key][0],
                                                           "records": None})))
            else:
                ready.append(arg(g))

        def released(length: int) -> list[tuple]:
            return [arg(x) for x in waiting.pop(length, [])]

        def done(a: tuple, res: tuple) -> list[tuple]:
            kind, args = a
            if kind == "cells":
                g = args[0]
                save_unit(g, *res)
                bar(sum(cell_units(c, suite) for c in g), weight=g[0].length)
                return []
            c = args[0]
            w = windowed[c.key]
            got, shape, wall, cpu = res
            w.cpu += cpu
            if kind == "ppl-window":
                n = w.land(args[3]["window"], got)
                if n:
                    bar(n, weight=c.length)
                    w.reported += n
                if len(w.records) < w.until:
                    return []
                return [("ppl-state", (c, suite, kw, {"have": w.have,
                                                      "records": w.records}))]
            if args[3]["records"] is None:              # the cell's first state: its journal
                w.t0 = time.perf_counter() - wall       # the cell's clock starts with it
                w.records, w.prior = list(got["records"]), tuple(got["prior"])
                if got["header"] is not None and kw["partial_dir"] is not None:
                    w.journal = Journal(partial_path(cells_dir, c.key), got["header"])
                    w.records = list(w.journal.records)
                if w.records:
                    log(f"\n{c.key}: resumed {len(w.records)} finished window(s) of "
                        f"{suite.ppl_windows}")
            if "rows" in got:
                save_unit([c], {c.key: got["rows"]}, shape, {}, *w.spent())
                bar(cell_units(c, suite) - w.reported, weight=c.length)
                return released(c.length)
            if w.labels and len(got["labels"]) < len(w.labels):
                log(f"\n{c.key}: {len(w.labels) - len(got['labels'])} method(s) decided "
                    f"after {len(w.records)} window(s), {len(got['labels'])} running")
            w.labels, w.until = got["labels"], got["until"]
            return [("ppl-window", (c, suite, kw, {"labels": w.labels, "window": i}))
                    for i in range(len(w.records), w.until)]

        def order(a: tuple) -> tuple:
            # the longest contexts first (a length's perplexity, window by window, before its
            # tasks), so the short units fill the workers' tails instead of a long one running
            # alone at the end
            kind, args = a
            if kind == "cells":
                return (-args[0][0].length, args[0][0].kind != "ppl", -1)
            return (-args[0].length, False, args[3].get("window", -1))

        from hikv.executor import run_graph

        run_graph(_pool_unit, ready, done,
                  executor="ray" if executor == "ray" else "process", workers=workers,
                  num_cpus=kw["threads"], spawn=True, key=order)
    elif todo:
        env = worker_env(model, cache, preset, device, threads)
        for g in groups:                # per length: perplexity, then its task cells
            got, skipped, wall, cpu = _timed_unit(
                g, suite, env, seed=seed, batch=batch,
                progress=lambda n, w=g[0].length: bar(n, weight=w),
                have={c.key: state[c.key][0] for c in g}, ppl_rows=ppl_of(g[0]),
                screen=screened(cells_dir, g, suite, screen), partial_dir=cells_dir,
                log=lambda m: log(f"\n{m}"))
            save_unit(g, got, dataclasses.asdict(env["lm"].shape), skipped, wall, cpu)
    if todo:
        log(f"ran {len(todo)} cells in {time.perf_counter() - t0:.0f} s wall")
    rows: list[dict[str, Any]] = []
    m: dict[str, Any] = {}
    missing = []
    info: dict[str, dict[str, Any]] = {}
    for c in cells:
        p = cells_dir / f"{c.key}.json"
        if not p.is_file():
            missing.append(c.key)
            continue
        r, m = read_rows(p)
        rows += r
        info[c.key] = {"skipped": m.get("skipped", {}), "wall_s": m.get("wall_s"),
                       "cpu_s": m.get("cpu_s")}
    if not m:
        raise ParamError(f"{cells_dir}: no finished cell to build tables from")
    if missing:
        log(f"cells missing (not in the tables): {missing}")
    return seed_tables(suite, rows, out, {**meta, "shape": m["shape"], "missing": missing,
                                          "cells": info}, log=log)
