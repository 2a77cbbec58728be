"""The adaptive task cells of the seed suites (:func:`hikv.model.accuracy.seed_suite.run_cell`):
full KV and the undecided methods share each trial, a method stops once it cannot pass, a
family's smaller budgets stop with it, budgets over the perplexity tolerance never run, a task
full KV fails is dropped, and a cell resumes per method. No model: scripted answers."""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import pytest

from hikv.model.accuracy import experiments as A
from hikv.model.accuracy import tasks as T
from hikv.model.accuracy.seed_suite import Cell, SeedSuite, run_cell
from hikv.presets import get_preset

CFG = get_preset("default")
SEED = 4321
SUITE = SeedSuite(name="t", model="m", lengths=(2048,), tasks=("passkey",), trials=20,
                  families=("h2o", "snapkv"), budgets=("N/32", "N/16", "N/8", "N/4"))
CELL = Cell("task", 2048, "prompt", "passkey")


class ScriptedAnswers:
    """make_case counts trials; _generate answers "ok" (score 1) or "no" per label and trial
    from ``table`` (label -> per-trial 0/1; a missing label scores ``default``)."""

    def __init__(self, table: dict[str, list[int]], default: int = 1) -> None:
        self.table, self.default, self.trial, self.calls = table, default, -1, []

    def make_case(self, lm, task, length, rng, words=()):
        self.trial += 1
        return SimpleNamespace(context=[1, 2], question=[3], references=("ok",), max_new=2,
                               length=3)

    def generate(self, lm, specs, cfg, ctx, feed, refs, max_new, batch, share=True):
        self.calls.append([sp.label for sp in specs])
        return [[self.table.get(sp.label, [self.default] * 99)[self.trial]] for sp in specs]


def _run(monkeypatch, script: ScriptedAnswers, have=(), ppl=(), suite=SUITE):
    monkeypatch.setattr(T, "make_case", script.make_case)
    monkeypatch.setattr(A, "_generate", script.generate)
    lm = SimpleNamespace(decode=lambda ids: "ok" if ids[0] else "no")
    skipped: dict[str, str] = {}
    rows = run_cell(CELL, suite, {"lm": lm, "cfg": CFG, "words": []}, seed=SEED,
                    have=list(have), ppl_rows=list(ppl), skipped=skipped)
    return {r["label"]: r for r in rows}, skipped


def test_early_stop_ladder_and_perplexity_pruning(monkeypatch) -> None:
    rng = random.Random(SEED)
    table = {"snapkv@256": [0] * 20,
             "snapkv@128": [rng.randint(0, 1) for _ in range(20)]}
    ppl = [{"label": "full", "ppl": 10.0}, {"label": "h2o@512", "ppl": 10.2},
           {"label": "snapkv@512", "ppl": 10.05}]
    s = ScriptedAnswers(table)
    rows, skipped = _run(monkeypatch, s, ppl=ppl)
    assert rows["full"]["trials"] == 20 and rows["full"]["status"] == "complete", SEED
    assert rows["snapkv@512"]["score_sum"] == 20 and rows["snapkv@512"]["status"] == "complete"
    # 0 + (20 - k) < k - 0.2 first holds at k = 11 (full KV's running score bounds its total)
    assert rows["snapkv@256"]["status"] == "stopped" and rows["snapkv@256"]["trials"] == 11
    assert "snapkv@128" not in rows and "snapkv@256" in skipped["snapkv@128"]
    assert "snapkv@64" in skipped
    # h2o@512's perplexity is +2 %: no H2O budget ever runs
    assert not any(lab.startswith("h2o") for call in s.calls for lab in call)
    assert all(f"h2o@{b}" in skipped for b in (64, 128, 256, 512))
    assert "perplexity" in skipped["h2o@512"]
    # iso: only snapkv@512 passes on this cell
    iso = A.iso_table_tasks([{**p, "family": p["label"].split("@")[0],
                              "budget": int(p["label"].split("@")[1]) if "@" in p["label"]
                              else None, "length": 2048, "method": "x"}
                             for p in ppl], list(rows.values()), protocol="prompt",
                            length=2048)
    got = {r["family"]: r for r in iso}
    assert got["snapkv"]["iso_budget"] == 512 and not got["h2o"]["reached"]


def test_resume_runs_only_missing_methods(monkeypatch) -> None:
    table = {"snapkv@256": [0] * 20}
    rows, _ = _run(monkeypatch, ScriptedAnswers(table))
    keep = [r for lab, r in rows.items() if lab != "snapkv@512"]
    s = ScriptedAnswers(table)
    again, _ = _run(monkeypatch, s, have=keep)
    assert all(call == ["snapkv@512"] for call in s.calls) and len(s.calls) == 20
    assert again["snapkv@512"] == rows["snapkv@512"]
    assert again["full"] == rows["full"]


@pytest.mark.parametrize("full_score", [0, 1])
def test_task_full_kv_fails_is_dropped(monkeypatch, full_score: int) -> None:
    s = ScriptedAnswers({"full": [full_score] * 20})
    rows, skipped = _run(monkeypatch, s)
    if full_score:
        assert rows["full"]["status"] == "complete"
        return
    # 0 + (20 - k) < 16 first holds at k = 5; every other method stops with it
    assert rows["full"]["status"] == "stopped" and rows["full"]["trials"] == 5, SEED
    assert set(rows) == {"full"} and len(s.calls) == 5
    assert all("dropped" in why for why in skipped.values())


@pytest.mark.parametrize("prune", ["point", "noninferiority"])
def test_task_top_runs_each_familys_largest_budget(monkeypatch, prune) -> None:
    """With ``task_top`` a family whose perplexity already fails still runs its largest
    budget (its retrieval measured, stopping like any method once it cannot pass); its
    smaller budgets stay unrun, and a cell on disk without it runs just that method."""
    base = dataclasses.replace(SUITE, prune=prune)
    top = dataclasses.replace(base, task_top=True)
    table = {"h2o@512": [1] * 3 + [0] * 17}
    ppl = [{"label": "full", "ppl": 10.0}, {"label": "h2o@512", "ppl": 10.2},
           {"label": "snapkv@512", "ppl": 10.05}]
    plain, plain_skip = _run(monkeypatch, ScriptedAnswers(table), ppl=ppl, suite=base)
    s = ScriptedAnswers(table)
    rows, skipped = _run(monkeypatch, s, ppl=ppl, suite=top)
    tol = top.task_tol * top.trials
    # 3 + (20 - k) < 20 - tol, k >= 3 (full KV scores every trial)
    k = next(k for k in range(3, 21) if 3 + (20 - k) < k - tol - 1e-9)
    assert rows["h2o@512"]["status"] == "stopped" and rows["h2o@512"]["trials"] == k
    assert "h2o@512" not in skipped
    assert all("h2o@512" in skipped[f"h2o@{b}"] and "perplexity" in skipped[f"h2o@{b}"]
               for b in (64, 128, 256))
    assert not any(lab in call for call in s.calls for lab in ("h2o@256", "h2o@128"))
    # everything else as without it
    assert {lab: r for lab, r in rows.items() if lab != "h2o@512"} == plain
    assert {lab: w for lab, w in skipped.items()} == {
        lab: w for lab, w in plain_skip.items() if lab != "h2o@512"}
    # the cell written without task_top resumes running h2o@512 alone, against full KV's
    # total on disk (20), so it stops as soon as 3 + (20 - k) < 20 - tol
    s = ScriptedAnswers(table)
    again, _ = _run(monkeypatch, s, have=list(plain.values()), ppl=ppl, suite=top)
    k = next(k for k in range(3, 21) if 3 + (20 - k) < 20 - tol - 1e-9)
    assert all(call == ["h2o@512"] for call in s.calls) and len(s.calls) == k
    assert again["h2o@512"]["status"] == "stopped" and again["h2o@512"]["trials"] == k
    assert {lab: r for lab, r in again.items() if lab != "h2o@512"} == plain


def test_task_top_keys_task_cells_only() -> None:
    """``task_top`` changes what a task cell runs, so its key; a perplexity cell's key (and
    its window journal's) stays, so a running perplexity cell resumes under the flag."""
    from hikv.model.accuracy.seed_spec import suite_key
    from hikv.params import ParamError

    top = dataclasses.replace(SUITE, task_top=True)
    assert suite_key(top, "ppl") == suite_key(SUITE, "ppl") == suite_key(SUITE)
    assert suite_key(top, "task") == [*suite_key(SUITE), "task top"]
    with pytest.raises(ParamError, match="task_top needs adaptive"):
        dataclasses.replace(SUITE, task_top=True, adaptive=False)
