"""The two protocols of a seed-suite task share each trial's prompt pass:
:func:`hikv.model.accuracy.seed_suite.run_cells` runs the ``prompt`` and ``follow-up`` cells of
one task and length together, the follow-up state forked from the prompt pass; every row
(scores, answers, stops, bytes) must be what each cell run alone gives. On the tiny random model of
``test_accuracy_cli`` (no network)."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("transformers")

from test_accuracy_cli import tiny_model  # noqa: E402,F401  (the shared fixture)

from hikv.model.accuracy.seed_suite import (  # noqa: E402
    SEED_SUITES,
    Cell,
    cell_groups,
    run_cell,
    run_cells,
    suite_cells,
    worker_env,
)

SEED = 4321


def test_cell_groups_pair_the_protocols() -> None:
    cells = suite_cells(SEED_SUITES["seed-smoke"])
    groups = cell_groups(cells)
    assert [len(g) for g in groups] == [1, 2, 2]
    assert {c.protocol for c in groups[1]} == {"prompt", "follow-up"}
    assert all(len(g) == 1 for g in cell_groups(cells, pair=False))


def test_paired_protocols_equal_cells_run_alone(tiny_model, monkeypatch) -> None:  # noqa: F811
    from hikv.model.accuracy import seed_trials
    forks: list[int] = []
    real = seed_trials._fork_generate

    def counted(*a, **k):
        forks.append(1)
        return real(*a, **k)

    monkeypatch.setattr(seed_trials, "_fork_generate", counted)
    model, cache = tiny_model
    suite = dataclasses.replace(SEED_SUITES["seed-smoke"], tasks=("passkey", "niah_single"),
                                trials=3, families=("h2o", "snapkv", "hikv-evict", "quest"),
                                budgets=("N/16", "N/4"), keep_min=0.0)
    env = worker_env(str(model), cache, "tiny", "cpu", 1)
    for task in suite.tasks:
        pair = [Cell("task", 1024, p, task) for p in ("prompt", "follow-up")]
        ticks: list[int] = []
        got = run_cells(pair, suite, env, seed=SEED, progress=ticks.append)
        assert sum(ticks) == 2 * suite.trials, (task, ticks)
        assert len(forks) == suite.trials, "each trial's prompt pass serves both protocols"
        forks.clear()
        for c in pair:
            alone = run_cell(c, suite, env, seed=SEED)
            assert len(got[c.key]) == len(alone) > 1, (task, c.key)
            for a, b in zip(got[c.key], alone, strict=True):
                assert a == b, f"seed {SEED} {c.key} {a['label']}"
