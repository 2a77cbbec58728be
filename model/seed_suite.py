"""The seed suites (issue 11): the protocol x length x task study as data, run cell by cell.

A :class:`SeedSuite` names a model, context lengths, protocols, tasks and budget rules; its
cells (:func:`suite_cells`: per length one perplexity cell and one cell per protocol and task)
each run every method of :func:`suite_specs` on the same cases. :func:`run_seed_suite` runs the
cells not yet on disk (in this process, a ``--workers`` process pool or on Ray; both pickle
:func:`_pool_cell` by this module's path) and :func:`seed_tables` writes the task filter, the
iso tables per protocol and length, their iso-point files and ``seed_table.md``. The older
single-run study is :mod:`hikv.model.accuracy_suite`.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hikv.io import atomic_write_text
from hikv.params import Config, MethodSpec, ParamError

from . import accuracy as A
from .accuracy_io import code_version, markdown_table, read_rows, write_rows

__all__ = ["SeedSuite", "SEED_SUITES", "SEED_HIKV", "EXTRA_BASELINES", "Cell", "suite_cells",
           "suite_specs", "run_cell", "run_seed_suite", "task_filter", "seed_tables"]

Log = Callable[[str], None]


#: the seed's HiKV as a family (issue 11 item 4, :func:`hikv.presets.seed_hikv`'s policy):
#: evicting Stage I, ThinK K channels and static |V| records, 3/4 of d = 64 kept (SmolLM2);
#: the packed record layout changes bytes, not answers (``hikv report --iso`` with a packed
#: preset counts it)
SEED_HIKV = "hikv-evict/k:think48/v:static48"
#: the baselines added in issue 11's session (branch ``baselines``): extra families for
#: ``hikv accuracy run --add-families`` (per-method resume: only their work runs)
EXTRA_BASELINES = ("streamingllm", "tova", "adakv", "gadakv", "pyramidkv", "h2o/avg")


@dataclass(frozen=True)
class SeedSuite:
    """The protocol x length x task study of issue 11, as data.

    Cells: for every length, one perplexity cell (``ppl_windows`` windows of ``length``
    tokens, the last ``ppl_decode`` decoded) and one task cell per (protocol, task) with
    ``trials`` cases; the methods are :func:`suite_specs` (full KV, each family at each
    budget rule resolved at the length) on the same cases. ``families`` are method labels
    without ``@B`` (data: a new method is one more string). With ``adaptive`` a task cell
    runs full KV first and only the work the iso decision can use (:func:`run_cell`).
    """

    name: str
    model: str
    lengths: tuple[int, ...]
    protocols: tuple[str, ...] = A.PROTOCOLS
    tasks: tuple[str, ...] = ("passkey", "niah_single", "niah_multikey", "niah_multivalue",
                              "vt")
    trials: int = 20
    families: tuple[str, ...] = ("h2o", "snapkv", "quest", "sparq", "ds", "hikv-evict",
                                 "hikv-qa/lowbit4", SEED_HIKV)
    budgets: tuple[str, ...] = ("N/32", "N/16", "N/8", "N/4", "128", "256", "512")
    ppl_windows: int = 2
    ppl_decode: int = 256
    keep_min: float = 0.8        # a task is kept where full KV scores at least this
    acc_tol: float = 0.01        # iso: task accuracy at least full KV's minus one point
    ppl_tol: float = 0.01        # iso: perplexity within 1 % of full KV's
    adaptive: bool = True        # prune task work the iso decision cannot use (see run_cell)

    def __post_init__(self) -> None:
        from .tasks import TASKS

        for p in self.protocols:
            A.protocol_name(p)
        bad = [t for t in self.tasks if t not in TASKS]
        if bad:
            raise ParamError(f"suite {self.name!r}: tasks {bad} are not in {list(TASKS)}")
        if self.trials < 1:
            raise ParamError(f"suite {self.name!r}: trials = {self.trials} is out of range: "
                             "allowed >= 1")
        for n in self.lengths:
            for b in self.budgets:
                A.resolve_budget(b, n)
            if not 0 < self.ppl_decode < n - 1:
                raise ParamError(f"suite {self.name!r}: ppl_decode = {self.ppl_decode} is out "
                                 f"of range for length {n}: allowed [1, {n - 2}]")


SEED_SUITES: dict[str, SeedSuite] = {s.name: s for s in (
    SeedSuite(name="seed-smollm2", model="smollm2-135m", lengths=(2048, 4096, 8192),
              ppl_decode=64),
    SeedSuite(name="seed-gemma", model="gemma3-270m", lengths=(8192, 16384),
              budgets=("N/32", "N/16", "N/8", "N/4", "256", "512"),
              families=("h2o", "snapkv", "quest", "sparq", "ds", "hikv-evict",
                        "hikv-qa/lowbit4", "hikv-evict/k:think192/v:static192")),
    # CI: the tiny random model of the tests (every code path, minutes -> seconds)
    SeedSuite(name="seed-smoke", model="", lengths=(1024,), tasks=("passkey", "niah_single"),
              trials=1, families=("snapkv", "hikv-evict"), budgets=("N/16", "128"),
              ppl_windows=1, ppl_decode=8),
)}


@dataclass(frozen=True)
class Cell:
    """One unit of work: ``kind`` ``ppl`` (perplexity at ``length``) or ``task`` (``task``
    under ``protocol`` at ``length``)."""

    kind: str
    length: int
    protocol: str = A.PPL_PROTOCOL
    task: str = ""

    @property
    def key(self) -> str:
        """File name of the cell's rows (``cells/<key>.json``)."""
        if self.kind == "ppl":
            return f"ppl_{self.length}"
        return f"{self.task}_{self.protocol}_{self.length}"


def suite_cells(suite: SeedSuite) -> list[Cell]:
    """Every cell of ``suite``: per length, perplexity then each protocol's tasks."""
    cells = []
    for n in suite.lengths:
        cells.append(Cell("ppl", n))
        cells += [Cell("task", n, A.protocol_name(p), t) for p in suite.protocols
                  for t in suite.tasks]
    return cells


def suite_specs(suite: SeedSuite, cfg: Config, length: int
                ) -> list[tuple[MethodSpec, str]]:
    """``(spec, budget rules)`` of full KV and every family at every budget rule of ``suite``
    resolved at ``length``; rules that give the same budget share one spec (``B=N/16,B=128``).
    A family is any method label without ``@B`` (e.g. ``hikv-qa/lowbit4``; see
    :func:`hikv.model.accuracy.parse_method`)."""
    out: dict[str, tuple[MethodSpec, list[str]]] = {"full": (MethodSpec(), ["full"])}
    for fam in suite.families:
        head, rest = fam.split("/", 1) if "/" in fam else (fam, "")
        for rule in suite.budgets:
            b = A.resolve_budget(rule, length)
            lab = f"{head}@{b}" + (f"/{rest}" if rest else "")
            spec = A.parse_method(lab, cfg.policy, cfg.layout.head_dim)
            got = out.setdefault(spec.label, (spec, []))
            got[1].append(A.budget_rule_name(rule))
    return [(sp, ",".join(rules)) for sp, rules in out.values()]


class _Bar:
    """A progress bar on stderr: ``done/total`` units, elapsed time and ETA."""

    def __init__(self, total: int, what: str, stream: Any = None) -> None:
        self.total, self.what, self.done = max(1, total), what, 0
        self.t0 = time.perf_counter()
        self.stream = stream if stream is not None else sys.stderr
        self._draw()

    def __call__(self, n: int = 1) -> None:
        self.done += n
        self._draw()

    def _draw(self) -> None:
        el = time.perf_counter() - self.t0
        f = min(1.0, self.done / self.total)
        eta = f" ETA {el / self.done * (self.total - self.done):.0f} s" if self.done else ""
        bar = "#" * int(30 * f) + "." * (30 - int(30 * f))
        end = "\n" if self.done >= self.total else ""
        self.stream.write(f"\r{self.what} [{bar}] {self.done}/{self.total} {el:.0f} s{eta}"
                          + end)
        self.stream.flush()


# worker state: one loaded model per process (the --workers pool and Ray actors)
_WORKER: dict[str, Any] = {}


def _setup(model: str, cache: Path | None, preset: str, device: str, threads: int
           ) -> dict[str, Any]:
    import torch

    from hikv.presets import get_preset

    from .assets import essays_text
    from .lm import lm_config, load_lm
    from .tasks import essay_words

    key = (model, str(cache), preset, device, threads)
    if _WORKER.get("key") != key:
        torch.set_num_threads(threads)
        lm = load_lm(model, cache=cache, device=device)
        text = essays_text(cache)
        _WORKER.update(key=key, lm=lm, cfg=lm_config(get_preset(preset), lm.shape), text=text,
                       words=essay_words(text))
    return _WORKER


def _ppl_fail(suite: SeedSuite, ppl_rows: list[dict[str, Any]]) -> dict[str, str]:
    """Labels whose perplexity is more than ``suite.ppl_tol`` above full KV's, with why."""
    full = [r for r in ppl_rows if r["label"] == "full"]
    if not full:
        return {}
    ref = full[0]["ppl"]
    return {r["label"]: f"perplexity {100 * (r['ppl'] / ref - 1):+.2f} % > "
            f"{100 * suite.ppl_tol:g} % of full KV's"
            for r in ppl_rows if r["label"] != "full" and r["ppl"] > ref * (1 + suite.ppl_tol)}


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


def _adaptive_task(cell: Cell, suite: SeedSuite, env: dict[str, Any],
                   specs: list[MethodSpec], have: dict[str, dict[str, Any]],
                   ppl_rows: list[dict[str, Any]], *, seed: int, batch: int,
                   progress: Callable[[int], None] | None,
                   skipped: dict[str, str]) -> list[dict[str, Any]]:
    """Rows of one task cell, running only what the iso decision can use.

    Trial by trial, full KV and the methods still undecided share one prompt pass
    (:func:`hikv.model.accuracy._generate`). Full KV stops once it cannot reach
    ``suite.keep_min`` (``status: stopped``): the task filter drops the cell, the methods
    stop with it. A method stops (``status: stopped``, its trials so far) once even perfect
    scores on the remaining trials cannot bring it within ``suite.acc_tol`` of full KV's
    total (full KV's score so far, a lower bound of its total, or its total when its row is on
    disk); the family's smaller budgets then stop too (``skipped``), and budgets whose
    perplexity, or a larger budget's, is over ``suite.ppl_tol`` are not run: the iso budget
    is the smallest with every larger budget passing, so none of these can be it. Rows in
    ``have`` are kept (resume per method); ``skipped`` gains label -> reason.
    """
    from .tasks import make_case, score

    lm, cfg = env["lm"], env["cfg"]
    T_ = suite.trials
    rows = dict(have)
    full = next(sp for sp in specs if sp.label == "full")
    f = rows.get("full")
    if f is not None and (f.get("status") == "stopped"
                          or f["accuracy"] < suite.keep_min - 1e-12):
        skipped.update({sp.label: "task dropped: full KV below the filter" for sp in specs
                        if sp.label not in rows})
        if progress is not None:
            progress(_cell_units(cell, suite))
        return [rows[sp.label] for sp in specs if sp.label in rows]
    bad_ppl = _ppl_fail(suite, ppl_rows)
    active: list[MethodSpec] = [] if f is not None else [full]
    for ladder in _ladder([sp for sp in specs if sp.label != "full"]).values():
        why = ""
        for sp in ladder:
            r = rows.get(sp.label)
            if why:
                skipped[sp.label] = why
            elif sp.label in bad_ppl:
                why = f"{sp.label}: {bad_ppl[sp.label]}"
                skipped[sp.label] = bad_ppl[sp.label]
            elif r is not None:
                if r.get("status") == "stopped" or (
                        f is not None and r["score_sum"] < f["score_sum"] - suite.acc_tol * T_):
                    why = f"larger budget {sp.label} fails the task criterion"
            else:
                active.append(sp)
    sc_of: dict[str, list[float]] = {sp.label: [] for sp in active}
    smp: dict[str, str] = {}
    n_prompt = 0
    ran = 0
    for i in range(T_):
        if not active or active == [full]:
            break
        c = make_case(lm, cell.task, cell.length,
                      random.Random(f"{seed}/{cell.task}/{cell.length}/{i}"), words=env["words"])
        ctx, feed = A.split_prompt(c.context, c.question, cell.protocol)
        n_prompt += c.length
        ran += 1
        outs = A._generate(lm, active, cfg, ctx, feed, c.references, c.max_new, batch)
        for sp, o in zip(active, outs, strict=True):
            text = lm.decode(o)
            sc_of[sp.label].append(score(text, c.references))
            smp.setdefault(sp.label, text)
        if progress is not None:
            progress(1)
        rem = T_ - i - 1
        if f is None and sum(sc_of["full"]) + rem < suite.keep_min * T_ - 1e-9:
            rows["full"] = _task_row(full, cell, sc_of["full"], T_, smp["full"], n_prompt,
                                     seed, "stopped")
            skipped.update({sp.label: "task dropped: full KV below the filter"
                            for sp in active if sp is not full})
            active = []
            break
        target = (f["score_sum"] if f is not None else sum(sc_of["full"])) \
            - suite.acc_tol * T_ - 1e-9
        dead: set[str] = set()
        for sp in active:
            if sp is full or sp.label in dead:
                continue
            if sum(sc_of[sp.label]) + rem < target:
                dead.add(sp.label)
                rows[sp.label] = _task_row(sp, cell, sc_of[sp.label], T_, smp[sp.label],
                                           n_prompt, seed, "stopped")
                for o in active:
                    if (A.family(o) == A.family(sp) and o is not full
                            and (o.budget or 0) < (sp.budget or 0) and o.label not in dead):
                        dead.add(o.label)
                        skipped[o.label] = f"larger budget {sp.label} fails the task criterion"
        active = [sp for sp in active if sp.label not in dead]
    if active == [full] and ran < T_:
        # every method decided: full KV's remaining trials only serve the filter
        for i in range(ran, T_):
            c = make_case(lm, cell.task, cell.length,
                          random.Random(f"{seed}/{cell.task}/{cell.length}/{i}"),
                          words=env["words"])
            ctx, feed = A.split_prompt(c.context, c.question, cell.protocol)
            n_prompt += c.length
            o = A._generate(lm, [full], cfg, ctx, feed, c.references, c.max_new, batch)[0]
            sc_of["full"].append(score(lm.decode(o), c.references))
            ran += 1
            if progress is not None:
                progress(1)
            if sum(sc_of["full"]) + (T_ - i - 1) < suite.keep_min * T_ - 1e-9:
                rows["full"] = _task_row(full, cell, sc_of["full"], T_, smp["full"], n_prompt,
                                         seed, "stopped")
                active = []
                break
    if progress is not None:
        progress(_cell_units(cell, suite) - ran)
    for sp in active:
        rows[sp.label] = _task_row(sp, cell, sc_of[sp.label], T_, smp[sp.label], n_prompt,
                                   seed, "complete")
    return [rows[sp.label] for sp in specs if sp.label in rows]


def run_cell(cell: Cell, suite: SeedSuite, env: dict[str, Any], *, seed: int = 0,
             batch: int = 64, progress: Callable[[int], None] | None = None,
             have: list[dict[str, Any]] | None = None,
             ppl_rows: list[dict[str, Any]] | None = None,
             skipped: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Rows of one cell for the methods of :func:`suite_specs` (``env``: ``lm``, ``cfg``,
    ``text``, ``words`` of a loaded model); each row gains ``budget_rule`` and ``cell``.

    ``have``: rows of this cell already on disk; only the methods missing from them run (a
    new family adds work without redoing the old). A perplexity cell runs every missing
    method; a task cell with ``suite.adaptive`` runs full KV first and then only what the iso
    decision can use (:func:`_adaptive_task`, given the length's perplexity rows
    ``ppl_rows``; ``skipped`` gains each method not run and why), else every method on every
    trial."""
    lm, cfg = env["lm"], env["cfg"]
    pairs = suite_specs(suite, cfg, cell.length)
    rules = {sp.label: r for sp, r in pairs}
    done = {r["label"]: r for r in (have or []) if r["label"] in rules}
    specs = [p[0] for p in pairs]
    need = [sp for sp in specs if sp.label not in done]
    if cell.kind == "ppl":
        rows: list[dict[str, Any]] = []
        if need:
            wins = A.text_windows(lm, env["text"], cell.length, suite.ppl_windows)
            rows = A.perplexity(lm, need, cfg, wins, cell.length - suite.ppl_decode,
                                batch=batch)
        if progress is not None:
            progress(_cell_units(cell, suite))
        got = {**done, **{r["label"]: r for r in rows}}
        rows = [got[sp.label] for sp in specs]
    elif suite.adaptive:
        rows = _adaptive_task(cell, suite, env, specs, done, ppl_rows or [], seed=seed,
                              batch=batch, progress=progress,
                              skipped=skipped if skipped is not None else {})
    else:
        new = A.task_accuracy(lm, need, cfg, task=cell.task, length=cell.length,
                              trials=suite.trials, protocol=cell.protocol, seed=seed,
                              words=env["words"], batch=batch,
                              progress=progress) if need else []
        got = {**done, **{r["label"]: r for r in new}}
        rows = [got[sp.label] for sp in specs]
    return [{**r, "budget_rule": rules[r["label"]], "cell": cell.key} for r in rows]


def _cell_units(cell: Cell, suite: SeedSuite) -> int:
    return suite.ppl_windows if cell.kind == "ppl" else suite.trials


def _pool_cell(args: tuple[Cell, SeedSuite, dict[str, Any], list[dict], list[dict]]
               ) -> tuple[str, list[dict], dict[str, Any], dict[str, str]]:
    cell, suite, kw, have, ppl_rows = args
    env = _setup(kw["model"], kw["cache"], kw["preset"], kw["device"], kw["threads"])
    skipped: dict[str, str] = {}
    rows = run_cell(cell, suite, env, seed=kw["seed"], batch=kw["batch"], have=have,
                    ppl_rows=ppl_rows, skipped=skipped)
    return cell.key, rows, dataclasses.asdict(env["lm"].shape), skipped


def _cell_state(cells_dir: Path, cell: Cell, suite: SeedSuite, redo: bool
                ) -> tuple[list[dict[str, Any]], bool]:
    """(rows on disk, whether the cell is complete: every method of the suite run or
    skipped by the file's own record)."""
    path = cells_dir / f"{cell.key}.json"
    if redo or not path.is_file():
        return [], False
    rows, meta = read_rows(path)
    return rows, meta.get("suite_key") == _suite_key(suite)


def _suite_key(suite: SeedSuite) -> list[Any]:
    """What a cell's methods and trials depend on: a cell file written under another key
    (e.g. before a family was added) is resumed, running only its missing methods."""
    return [list(suite.families), list(suite.budgets), suite.trials, suite.ppl_windows,
            suite.ppl_decode, suite.adaptive, suite.keep_min, suite.acc_tol, suite.ppl_tol]


def run_seed_suite(suite: SeedSuite, out: Path, *, model: str | None = None,
                   preset: str = "default", cache: Path | None = None, seed: int = 0,
                   batch: int = 64, workers: int = 1, executor: str = "local",
                   device: str = "cpu", threads: int = 1, redo: bool = False,
                   tables_only: bool = False, log: Log = print, argv: list[str] | None = None
                   ) -> dict[str, Any]:
    """Run every cell of ``suite`` not yet complete in ``out/cells/`` (resumable per cell
    and per method: a cell's rows are written when it finishes, a cell whose file lacks some
    of the suite's methods runs just those; ``redo`` reruns all), then the tables: the task
    filter (``filter.json``), one iso table per protocol and length (``iso_<protocol>_<N>``,
    with ``iso_points_<protocol>_<N>.json`` for ``hikv report --iso`` and HiKV's byte
    reduction against every baseline, ``reductions_<protocol>_<N>``) and ``seed_table.md``.

    ``tables_only``: run nothing, build the tables from the cells on disk (the missing ones
    are listed in ``seed_table.md``). Perplexity cells run first (adaptive task cells use
    them). ``workers`` > 1 runs cells in
    that many processes (each loads the model once); ``executor="ray"`` spreads them over a
    Ray cluster (``ray.init()`` joins the one in ``RAY_ADDRESS`` or starts a local one). A
    progress bar goes to stderr.
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
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    kw = {"model": model, "cache": cache, "preset": preset, "device": device,
          "threads": threads, "seed": seed, "batch": batch}
    meta = {"command": " ".join(argv if argv is not None else sys.argv), "model": model,
            "preset": preset, "suite": dataclasses.asdict(suite), "seed": seed,
            "code_version": code_version(), "device": device,
            "config": to_dict(get_preset(preset))}
    cells = suite_cells(suite)
    state = {c.key: _cell_state(cells_dir, c, suite, redo) for c in cells}
    todo = [] if tables_only else [c for c in cells if not state[c.key][1]]
    n_done = sum(1 for c in cells if state[c.key][1])
    log(f"suite {suite.name}: {len(cells)} cells, {n_done} done, "
        f"{len(todo)} to run ({executor}, {workers} worker(s)) -> {out}")
    bar = _Bar(sum(_cell_units(c, suite) for c in todo), f"{suite.name}")
    t0 = time.perf_counter()

    def save(key: str, rows: list[dict[str, Any]], shape: dict[str, Any], wall: float,
             skipped: dict[str, str], cpu: float | None = None) -> None:
        write_rows(cells_dir, key, rows, {**meta, "cell": key, "shape": shape, "wall_s": wall,
                                          "cpu_s": cpu,
                                          "suite_key": _suite_key(suite), "skipped": skipped})

    def ppl_of(c: Cell) -> list[dict[str, Any]]:
        p = cells_dir / f"ppl_{c.length}.json"
        return read_rows(p)[0] if c.kind == "task" and p.is_file() else []

    phases = [[c for c in todo if c.kind == "ppl"], [c for c in todo if c.kind == "task"]]
    if todo and (executor == "ray" or workers > 1):
        for phase in phases:
            args = [(c, suite, kw, state[c.key][0], ppl_of(c)) for c in phase]
            for c, (key, rows, shape, skipped) in zip(
                    phase, _run_parallel(args, executor, workers, kw), strict=True):
                save(key, rows, shape, time.perf_counter() - t0, skipped)
                bar(_cell_units(c, suite))
    elif todo:
        env = _setup(model, cache, preset, device, threads)
        for c in todo:                  # per length: perplexity, then its task cells
            tc, pc = time.perf_counter(), time.process_time()
            skipped: dict[str, str] = {}
            rows = run_cell(c, suite, env, seed=seed, batch=batch, progress=bar,
                            have=state[c.key][0], ppl_rows=ppl_of(c), skipped=skipped)
            save(c.key, rows, dataclasses.asdict(env["lm"].shape), time.perf_counter() - tc,
                 skipped, time.process_time() - pc)
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


def _run_parallel(args: list[tuple], executor: str, workers: int, kw: dict[str, Any]
                  ) -> list[tuple[str, list[dict], dict[str, Any], dict[str, str]]]:
    """:func:`_pool_cell` of each argument tuple, in order, on a process pool or Ray
    (:func:`hikv.executor.run_tasks`, shared with the cluster benchmark)."""
    from hikv.executor import run_tasks

    return run_tasks(_pool_cell, args, executor="ray" if executor == "ray" else "process",
                     workers=max(1, workers), num_cpus=kw["threads"], spawn=True)


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
    from hikv.presets import get_preset

    from .lm import LMShape, lm_config

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
              "cannot pass, or not run; see `hikv.model.seed_suite.run_cell`):", "",
              markdown_table(_work_rows(rows, meta.get("cells", {})), [
                  ("cell", "cell", ""), ("complete", "methods on every trial", ""),
                  ("stopped", "stopped early", ""), ("skipped", "not run", ""),
                  ("trials", "full KV trials", ""), ("wall_s", "wall s", ".0f"),
                  ("cpu_s", "CPU s", ".0f")])]
    for n in suite.lengths:
        pr = [r for r in ppl if int(r["length"]) == n]
        ref = [r["ppl"] for r in pr if r["label"] == "full"]
        if ref:
            lines += ["", f"## Perplexity, N = {n} (both protocols)", "",
                      f"{pr[0]['windows']} windows, the last {n - pr[0]['prefix']} tokens "
                      "decoded; bytes per decode step per (layer, KV head) at burst "
                      "granularity, metadata included.", "",
                      markdown_table([{**r, "rel": r["ppl"] / ref[0] - 1} for r in pr], [
                          ("label", "method", ""), ("budget_rule", "rule", ""),
                          ("ppl", "ppl", ".3f"), ("rel", "Δppl", "+.4f"),
                          ("bytes_burst", "bytes burst", ".0f")])]
    summary: dict[str, Any] = {"suite": suite.name, "iso": {}, "missing": missing}
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
                              f"reductions_{p}_{n}.csv"):
                    (out / stale).unlink(missing_ok=True)
                continue
            use = [r for r in tasks if (r["protocol"], r["length"], r["task"]) in kept]
            iso = A.iso_table_tasks(ppl, use, protocol=p, length=n, ppl_tol=suite.ppl_tol,
                                    acc_tol=suite.acc_tol)
            name = f"iso_{p}_{n}"
            write_rows(out, name, iso, {**meta, "phase": name, "protocol": p, "length": n})
            reached = [r for r in iso if r["family"].startswith("hikv-") and r["reached"]]
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
            if red:
                lines += ["", f"HiKV ({best}) at iso-accuracy: each baseline's burst bytes / "
                          "HiKV's", "", markdown_table(red, [
                              ("baseline", "baseline", ""),
                              ("baseline_reached", "baseline reached", ""),
                              ("x_ideal", "x ideal", ".2f"), ("x_burst", "x burst", ".2f")])]
    atomic_write_text(out / "seed_table.md", "\n".join(lines) + "\n")
    atomic_write_text(out / "seed_summary.json", json.dumps(summary, indent=1, default=str))
    log(f"tables -> {out / 'seed_table.md'}")
    return summary


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
