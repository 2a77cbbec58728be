"""The seed suites as data: :class:`SeedSuite` (model, lengths, protocols, tasks,
families, budget rules, iso tolerances), the suites of the kit (:data:`SEED_SUITES`), their
cells (:class:`Cell`, :func:`suite_cells`) and the method specs a cell runs
(:func:`suite_specs`). Running them is :mod:`hikv.model.accuracy.seed_suite`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hikv.model.accuracy import experiments as A
from hikv.model.accuracy import iso as NI
from hikv.params import Config, MethodSpec, ParamError

__all__ = ["SeedSuite", "SEED_SUITES", "SEED_HIKV", "EXTRA_BASELINES", "EXTRA_BASELINES_GEMMA",
           "THINK_ALONE", "ALL_TOKENS_RULE", "PRUNE_RULES", "Cell", "suite_cells",
           "suite_specs", "suite_key", "suite_key_sizes", "finer_budgets", "budget_grid",
           "variant_families"]


#: the seed's HiKV as a family (:func:`hikv.presets.seed_hikv`'s policy):
#: evicting Stage I, ThinK K channels and static |V| records, 3/4 of d = 64 kept (SmolLM2);
#: the packed record layout changes bytes, not answers (``hikv report --iso`` with a packed
#: preset counts it)
SEED_HIKV = "hikv-evict/k:think48/v:static48"
#: ThinK alone: every token kept, ``R = d / 2`` key channels per KV head chosen once
#: after prefill (:data:`hikv.presets.THINK_METHODS` ``think``), per suite model: SmolLM2's
#: d = 64, Gemma-3's d = 256. It has no token budget: a suite runs it once per length (budget
#: rule :data:`ALL_TOKENS_RULE`, see :func:`suite_specs`)
THINK_ALONE = {"smollm2-135m": "hikv-none/k:think32", "gemma3-270m": "hikv-none/k:think128"}
#: the budget rule of a family that keeps every token (``hikv-none/...``): ``B = N``
ALL_TOKENS_RULE = "B=N"
#: the extra baseline families for
#: ``hikv accuracy run --add-families`` (per-method resume: only their work runs); SmolLM2's
EXTRA_BASELINES = ("streamingllm", "tova", "adakv", "gadakv", "pyramidkv", "h2o/avg",
                   THINK_ALONE["smollm2-135m"])
#: the same for ``seed-gemma`` (ThinK alone at Gemma-3's d = 256)
EXTRA_BASELINES_GEMMA = EXTRA_BASELINES[:-1] + (THINK_ALONE["gemma3-270m"],)
#: what a task cell's adaptive pruning serves (:attr:`SeedSuite.prune`): ``point`` (skip or stop
#: what cannot pass the point rule of :func:`hikv.model.accuracy.iso.iso_table_tasks`) or
#: ``noninferiority`` (only what cannot pass the non-inferiority test of
#: :func:`hikv.model.accuracy.iso.noninferiority_table`)
PRUNE_RULES = ("point", "noninferiority")


def variant_families(head_dim: int) -> tuple[str, ...]:
    """The methods at their authors' settings and HiKV's bit and channel variants, as families
    for a model of head dimension ``d`` = ``head_dim`` (``hikv accuracy run --variants``):
    Double Sparsity with ``r = d/8`` 4-bit labels (its code's default) and ``r = d/2`` 2-bit
    labels (its LongBench script), SparQ's ``r`` over its paper's range (``d/16``, ``d/8``,
    ``d/2`` beside the suites' ``d/4``), HiKV's query-aware Stage I scored from 2- and 3-bit keys
    (4 bits is in the suites) and from 4- and 2-bit keys of a calibrated half of the channels,
    and the seed HiKV's Stage II (ThinK K channels, static V records, 3/4 of ``d``) on the
    query-aware Stage I."""
    d = head_dim
    r34 = 3 * d // 4
    return (f"ds/r{d // 8}/b4", f"ds/r{d // 2}/b2",
            f"sparq/r{d // 16}", f"sparq/r{d // 8}", f"sparq/r{d // 2}",
            "hikv-qa/lowbit2", "hikv-qa/lowbit3", f"hikv-qa/lowbit4c{d // 2}",
            f"hikv-qa/lowbit2c{d // 2}", f"hikv-qa/lowbit4/k:think{r34}/v:static{r34}")


def finer_budgets(budgets: list[int] | tuple[int, ...], step: float) -> list[int]:
    """``budgets`` with budgets inserted in geometric steps of ``step`` between neighbours
    (``round(b step^j)`` below the next one; ``2 ** 0.5`` halves the suites' factor-of-2
    grid), sorted; ``step`` in (1, 2]."""
    if not 1.0 < step <= 2.0:
        raise ParamError(f"budget step = {step} is out of range: allowed (1, 2] (1.4142 = "
                         "sqrt(2))")
    got = sorted(set(budgets))
    out = set(got)
    for lo, hi in zip(got, got[1:], strict=False):
        x = lo * step
        while round(x) < hi and x < hi / step ** 0.5:
            out.add(round(x))
            x *= step
    return sorted(out)


@dataclass(frozen=True)
class SeedSuite:
    """The protocol x length x task study, as data.

    Cells: for every length, one perplexity cell (``ppl_windows`` windows of ``length``
    tokens, the last ``ppl_decode`` decoded) and one task cell per (protocol, task) with
    ``trials`` cases; the methods are :func:`suite_specs` (full KV, each family at each
    budget rule resolved at the length) on the same cases. ``families`` are method labels
    without ``@B`` (data: a new method is one more string). With ``adaptive`` a task cell
    runs full KV first and only the work the iso decision can use (:func:`run_cell`). With
    ``ppl_looks`` (window counts, with ``prune = "noninferiority"``) a perplexity cell is
    sequential: after each look every method whose non-inferiority test decides at that look's
    level (:func:`hikv.model.accuracy.iso.look_levels`) stops; full KV runs every window.
    With ``task_top`` (adaptive) each family's largest budget runs the kept task cells even
    where its perplexity already rules out iso-accuracy, so every method's retrieval is
    measured beside its verdict (until it can no longer pass the task, as any method); its
    smaller budgets are not run.
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
    prune: str = "point"         # the decision the pruning serves (PRUNE_RULES)
    budget_step: float = 0.0     # > 1: budgets in geometric steps between the rules' (a grid)
    ppl_looks: tuple[int, ...] = ()   # sequential perplexity: window counts to decide at
    task_top: bool = False       # every family's largest budget runs the task cells

    @property
    def task_tol(self) -> float:
        """The score drop a task cell's pruning allows (``acc_tol``, or the non-inferiority
        margin :data:`hikv.model.accuracy.iso.TASK_MARGIN`: a method whose best case falls
        below it can never be non-inferior)."""
        return self.acc_tol if self.prune == "point" else NI.TASK_MARGIN

    def __post_init__(self) -> None:
        from hikv.model.accuracy.tasks import TASKS

        for p in self.protocols:
            A.protocol_name(p)
        bad = [t for t in self.tasks if t not in TASKS]
        if bad:
            raise ParamError(f"suite {self.name!r}: tasks {bad} are not in {list(TASKS)}")
        if self.trials < 1:
            raise ParamError(f"suite {self.name!r}: trials = {self.trials} is out of range: "
                             "allowed >= 1")
        if self.ppl_windows < 1:
            raise ParamError(f"suite {self.name!r}: ppl_windows = {self.ppl_windows} is out of "
                             "range: allowed >= 1")
        if self.budget_step:
            finer_budgets([1, 2], self.budget_step)
        if self.ppl_looks:
            if self.prune != "noninferiority":
                raise ParamError(f"suite {self.name!r}: ppl_looks need prune = "
                                 "'noninferiority' (the looks decide that test)")
            NI.look_levels(self.ppl_looks, self.ppl_windows)
        if self.task_top and not self.adaptive:
            raise ParamError(f"suite {self.name!r}: task_top needs adaptive task cells (a "
                             "cell that is not adaptive runs every method already)")
        if self.prune not in PRUNE_RULES:
            raise ParamError(f"suite {self.name!r}: prune = {self.prune!r} is not one of "
                             f"{list(PRUNE_RULES)}")
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


def suite_key(suite: SeedSuite, kind: str = "task") -> list[Any]:
    """What a cell's methods and trials depend on (a cell file's ``suite_key``; ``kind``: the
    cell's, ``ppl`` or ``task``): a cell file written under another key (e.g. before a family
    was added) is resumed, running only its missing methods."""
    key = [list(suite.families), list(suite.budgets), suite.trials, suite.ppl_windows,
           suite.ppl_decode, suite.adaptive, suite.keep_min, suite.acc_tol, suite.ppl_tol]
    # the later fields only where set, so the cells of suites without them keep their keys;
    # task_top changes what task cells run, not perplexity cells (nor their journals)
    extra = ([suite.prune] if suite.prune != "point" else []) \
        + ([f"step {suite.budget_step:g}"] if suite.budget_step else []) \
        + ([f"looks {sorted(set(suite.ppl_looks))}"] if suite.ppl_looks else []) \
        + (["task top"] if suite.task_top and kind == "task" else [])
    return [*key, *extra]


def suite_key_sizes(key: list[Any]) -> dict[str, Any]:
    """The planned ``trials`` per task cell, perplexity ``windows`` and the sequential
    perplexity cell's ``looks`` (window counts; ``()`` for a fixed-size cell) of a
    :func:`suite_key` (as a cell file or journal records it)."""
    looks: tuple[int, ...] = ()
    for x in key[9:]:
        if isinstance(x, str) and x.startswith("looks "):
            looks = tuple(int(v) for v in x[len("looks "):].strip("[]").split(",") if v.strip())
    return {"trials": int(key[2]), "windows": int(key[3]), "looks": looks}


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
    :func:`hikv.model.accuracy.experiments.parse_method`). A family that keeps every token (HiKV
    with Stage I ``none``, e.g. ThinK alone ``hikv-none/k:think32``) has no token budget: it gets
    one spec per length, labelled at ``B = N`` (every token of the context resident and read; the
    budget changes none of its decisions) with the rule :data:`ALL_TOKENS_RULE`."""
    out: dict[str, tuple[MethodSpec, list[str]]] = {"full": (MethodSpec(), ["full"])}
    grid = budget_grid(suite, length)
    for fam in suite.families:
        head, rest = fam.split("/", 1) if "/" in fam else (fam, "")
        every = A.parse_method(f"{head}@{length}" + (f"/{rest}" if rest else ""), cfg.policy,
                               cfg.layout.head_dim)
        if A.keeps_every_token(every):
            out.setdefault(every.label, (every, []))[1].append(ALL_TOKENS_RULE)
            continue
        for b, rule in grid:
            lab = f"{head}@{b}" + (f"/{rest}" if rest else "")
            spec = A.parse_method(lab, cfg.policy, cfg.layout.head_dim)
            got = out.setdefault(spec.label, (spec, []))
            got[1].append(rule)
    return [(sp, ",".join(rules)) for sp, rules in out.values()]


def budget_grid(suite: SeedSuite, length: int) -> list[tuple[int, str]]:
    """``(budget, rule name)`` of every budget rule of ``suite`` at ``length``, then, with
    ``suite.budget_step``, the budgets :func:`finer_budgets` inserts between them (rule
    ``B=<b> (grid)``)."""
    out = [(A.resolve_budget(r, length), A.budget_rule_name(r)) for r in suite.budgets]
    if suite.budget_step:
        have = {b for b, _ in out}
        out += [(b, f"B={b} (grid)") for b in finer_budgets(sorted(have), suite.budget_step)
                if b not in have]
    return out
