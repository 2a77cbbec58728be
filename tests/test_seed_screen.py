"""A task cell screened by full KV (:func:`hikv.model.accuracy.seed_trials.run_cell` with
``screen``): full KV runs alone until the task filter decides; a dropped task never runs a
method, a kept one runs its methods over the same trials as with full KV's row on disk; both
phases journal their trials and a killed run resumes to the same rows. The suite screens a task
its filter dropped at a shorter length (:func:`hikv.model.accuracy.seed_suite.screened`).
Scripted answers, no model."""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import pytest
from test_seed_suite_adaptive import CELL, CFG, SEED, SUITE, ScriptedAnswers

from hikv.model.accuracy import experiments as A
from hikv.model.accuracy import seed_trials
from hikv.model.accuracy.io import write_rows
from hikv.model.accuracy.journal import partial_path, screen_key
from hikv.model.accuracy.seed_suite import Cell, check_screen, run_cell, screened
from hikv.model.accuracy.status import status_lines, suite_status
from hikv.params import ParamError

SUITE80 = dataclasses.replace(SUITE, keep_min=0.8)


class _Killed(Exception):
    pass


def _run(monkeypatch, table, out, *, screen, have=(), kill_at=None):
    """run_cell on scripted answers (journals in ``out``): (rows by label, skipped, the
    labels each trial ran, progress units reported, the resumed times); ``kill_at``: (phase,
    trial) raising in that generation, 0 the screen and 1 the methods."""
    s = ScriptedAnswers(table)
    phase = [0]

    def case(self, lm, words, i):
        return SimpleNamespace(context=[i, 2], question=[3], references=("ok",), max_new=2,
                               length=3)

    def gen(lm, specs, cfg, ctx, *a, **k):
        s.trial = ctx[0]
        p = 0 if [sp.label for sp in specs] == ["full"] and screen and phase[0] == 0 else 1
        phase[0] = p
        if kill_at == (p, s.trial):
            raise _Killed(f"killed in phase {p}, trial {s.trial}")
        return s.generate(lm, specs, cfg, ctx, *a, **k)

    monkeypatch.setattr(A, "_generate", gen)
    monkeypatch.setattr(seed_trials._TaskCell, "case", case)
    lm = SimpleNamespace(decode=lambda ids: "ok" if ids[0] else "no")
    skipped: dict[str, str] = {}
    units: list[int] = []
    resumed: dict[str, tuple[float, float]] = {}
    rows = run_cell(CELL, SUITE80, {"lm": lm, "cfg": CFG, "words": []}, seed=SEED,
                    have=list(have), skipped=skipped, partial_dir=out, screen=screen,
                    progress=units.append, resumed=resumed)
    return {r["label"]: r for r in rows}, skipped, s.calls, sum(units), resumed


def test_a_dropped_task_runs_full_kv_alone(monkeypatch, tmp_path) -> None:
    rng = random.Random(SEED)
    table = {"full": [1, 0, 0] * 7, "snapkv@512": [rng.randint(0, 1) for _ in range(20)]}
    rows, skipped, calls, units, _ = _run(monkeypatch, table, tmp_path / "s", screen=True)
    ref, ref_skip, ref_calls, ref_units, _ = _run(monkeypatch, table, tmp_path / "r",
                                                  screen=False)
    assert all(c == ["full"] for c in calls), calls
    assert len(ref_calls[0]) > 1, "unscreened, the methods answer beside full KV"
    assert rows == ref and set(rows) == {"full"} and rows["full"]["status"] == "stopped"
    assert skipped == ref_skip and all("full KV below the filter" in w
                                       for w in skipped.values()), skipped
    assert len(calls) == len(ref_calls) == rows["full"]["trials"] < 20, SEED
    assert units == ref_units == 20, "the cell's progress units, once"


def test_a_kept_task_runs_its_methods_as_with_full_kv_on_disk(monkeypatch, tmp_path) -> None:
    rng = random.Random(SEED + 1)
    table = {"full": [1] * 17 + [0, 1, 1],
             "snapkv@512": [1] * 20, "h2o@512": [rng.randint(0, 1) for _ in range(20)],
             "snapkv@256": [0] * 20}
    rows, skipped, calls, units, _ = _run(monkeypatch, table, tmp_path / "s", screen=True)
    assert calls[:20] == [["full"]] * 20 and all("full" not in c for c in calls[20:]), calls
    full = rows["full"]
    on_disk, disk_skip, disk_calls, _, _ = _run(monkeypatch, table, tmp_path / "d",
                                                screen=False, have=[full])
    assert rows == on_disk and skipped == disk_skip and calls[20:] == disk_calls, SEED
    joint, *_ = _run(monkeypatch, table, tmp_path / "j", screen=False)
    assert full == joint["full"] and full["score_sum"] == 19 and full["status"] == "complete"
    # against full KV's known total (19) a method that misses every trial stops after 2
    # (0 + 18 < 19 - 0.2); beside full KV it runs until its running score bounds the total
    assert rows["snapkv@256"]["status"] == "stopped" and rows["snapkv@256"]["trials"] == 2
    assert joint["snapkv@256"]["trials"] > 2
    assert units == 20


@pytest.mark.parametrize("kill_at", [(0, 3), (1, 0), (1, 5)])
def test_a_killed_screen_resumes_to_the_same_rows(monkeypatch, tmp_path, kill_at) -> None:
    table = {"full": [1] * 20, "snapkv@512": [1, 0] * 10, "h2o@256": [0] * 20}
    ref, ref_skip, ref_calls, *_ = _run(monkeypatch, table, tmp_path / "ref", screen=True)
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        _run(monkeypatch, table, out, screen=True, kill_at=kill_at)
    assert partial_path(out, screen_key(CELL.key)).is_file()
    rows, skip, calls, units, resumed = _run(monkeypatch, table, out, screen=True)
    assert rows == ref and skip == ref_skip, kill_at
    phase, trial = kill_at
    done = trial if phase == 0 else 20 + trial          # generations before the kill
    assert calls == ref_calls[done:], "only the trials after the journals ran"
    assert units == 20 and CELL.key in resumed, kill_at


def _cell_file(cells, length, full_acc, trials=20, status="complete"):
    c = Cell("task", length, "prompt", "passkey")
    row = {"label": "full", "task": "passkey", "protocol": "prompt", "length": length,
           "accuracy": full_acc, "score_sum": full_acc * trials, "trials": trials,
           "status": status}
    write_rows(cells, c.key, [row], {"cell": c.key})
    return c


def test_the_suite_screens_what_a_shorter_length_dropped(tmp_path) -> None:
    suite = dataclasses.replace(SUITE80, lengths=(2048, 4096, 8192))
    cells = tmp_path / "cells"
    cells.mkdir()
    c4, c8 = Cell("task", 4096, "prompt", "passkey"), Cell("task", 8192, "prompt", "passkey")
    assert not screened(cells, [c4], suite), "nothing on disk: no screen"
    _cell_file(cells, 2048, 0.95)
    assert not screened(cells, [c4], suite), "kept at 2k"
    _cell_file(cells, 2048, 0.25, trials=8, status="stopped")
    assert screened(cells, [c4], suite) and screened(cells, [c8], suite)
    assert not screened(cells, [Cell("task", 2048, "prompt", "passkey")], suite)
    assert not screened(cells, [Cell("task", 4096, "prompt", "vt")], suite), "another task"
    assert not screened(cells, [c4, Cell("task", 4096, "follow-up", "passkey")], suite), \
        "a pair shares its prompt passes instead"
    assert not screened(cells, [Cell("ppl", 4096)], suite)
    assert not screened(cells, [c4], dataclasses.replace(suite, adaptive=False))


def test_the_user_screens_the_tasks_named(tmp_path) -> None:
    """``--screen TASK`` (``screened``'s ``tasks``): those tasks' lone adaptive task cells are
    screened with nothing on disk, "all" screens every task; a pair, a perplexity cell and a
    suite that is not adaptive are not; a task the suite lacks is refused naming the allowed."""
    suite = dataclasses.replace(SUITE80, lengths=(2048, 4096))
    cells = tmp_path / "cells"
    cells.mkdir()
    c2, vt = Cell("task", 2048, "prompt", "passkey"), Cell("task", 2048, "prompt", "vt")
    assert screened(cells, [c2], suite, ("passkey",))
    assert not screened(cells, [vt], suite, ("passkey",)), "a task not named"
    assert screened(cells, [c2], suite, ("all",)) and screened(cells, [vt], suite, ("all",))
    assert not screened(cells, [c2, Cell("task", 2048, "follow-up", "passkey")], suite,
                        ("all",)), "a pair shares its prompt passes instead"
    assert not screened(cells, [Cell("ppl", 2048)], suite, ("all",))
    assert not screened(cells, [c2], dataclasses.replace(suite, adaptive=False), ("all",))
    check_screen(suite, ("passkey", "all"))
    with pytest.raises(ParamError, match=r"--screen \['nope'\]: not tasks of suite .*allowed"):
        check_screen(suite, ("passkey", "nope"))
    with pytest.raises(ParamError, match="not adaptive"):
        check_screen(dataclasses.replace(suite, adaptive=False), ("passkey",))


def test_status_names_a_screen(monkeypatch, tmp_path) -> None:
    table = {"full": [1] * 20}
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        _run(monkeypatch, table, out / "cells", screen=True, kill_at=(0, 4))
    lines = "\n".join(status_lines(suite_status(out)))
    assert f"{CELL.key} (screen: full KV alone until the task filter decides): 4 of 20" \
        in lines, lines
    assert "full KV scores 1.000 over 4 trials" in lines, lines


def test_a_suite_screens_its_longer_length(tiny_model, tmp_path,  # noqa: F811
                                           monkeypatch) -> None:
    """seed-smoke at 512 and 1,024 tokens on the tiny random model (full KV fails the task):
    the 1,024-token cell runs full KV alone, and its file equals an unscreened run's, as does
    a 1,024-token run alone screening the task because ``--screen`` names it; two worker
    processes write the same cells."""
    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite

    model, cache = tiny_model
    suite = dataclasses.replace(SEED_SUITES["seed-smoke"], lengths=(512, 1024),
                                tasks=("passkey",), protocols=("prompt",), trials=6,
                                keep_min=0.5)
    kw = {"model": str(model), "cache": cache, "preset": "tiny", "log": lambda _: None}
    real = A._generate
    ran: list[tuple[int, list[str]]] = []

    def gen(lm, specs, cfg, ctx, *a, **k):
        ran.append((len(ctx), [sp.label for sp in specs]))
        return real(lm, specs, cfg, ctx, *a, **k)

    monkeypatch.setattr(A, "_generate", gen)
    run_seed_suite(suite, tmp_path / "seq", **kw)
    key = "passkey_prompt_1024"
    rows, meta = read_rows(tmp_path / "seq" / "cells" / f"{key}.json")
    assert [r["label"] for r in rows] == ["full"] and rows[0]["status"] == "stopped", rows
    long = [labels for n, labels in ran if n > 700]
    assert long and all(labels == ["full"] for labels in long), ran
    assert any(len(labels) > 1 for n, labels in ran if n <= 700), "512 ran its methods"
    assert not list((tmp_path / "seq" / "cells").glob("*.partial.jsonl"))
    monkeypatch.setattr(A, "_generate", real)
    # unscreened (the 512-token cell gone: no prior), the same row and skip records
    ref = tmp_path / "ref"
    run_seed_suite(dataclasses.replace(suite, lengths=(1024,)), ref, **kw)
    want, wmeta = read_rows(ref / "cells" / f"{key}.json")
    assert rows == want and meta["skipped"] == wmeta["skipped"]
    # --screen passkey, no prior on disk: screened all the same, the same file
    ran.clear()
    monkeypatch.setattr(A, "_generate", gen)
    run_seed_suite(dataclasses.replace(suite, lengths=(1024,)), tmp_path / "named",
                   screen=("passkey",), **kw)
    monkeypatch.setattr(A, "_generate", real)
    assert ran and all(labels == ["full"] for _, labels in ran), ran
    named, nmeta = read_rows(tmp_path / "named" / "cells" / f"{key}.json")
    assert named == want and nmeta["skipped"] == wmeta["skipped"]
    par = tmp_path / "par"
    (par / "cells").mkdir(parents=True)
    for k in ("ppl_512", "passkey_prompt_512"):     # the prior on disk, as a resumed run has
        (par / "cells" / f"{k}.json").write_bytes(
            (tmp_path / "seq" / "cells" / f"{k}.json").read_bytes())
    run_seed_suite(suite, par, workers=2, **kw)
    got, _ = read_rows(par / "cells" / f"{key}.json")
    assert got == rows


from test_accuracy_cli import tiny_model  # noqa: E402,F401  (the shared fixture)
