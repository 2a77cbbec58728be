"""A seed-suite run that is killed loses at most the trial in flight: each
finished trial of an unfinished task cell is journaled to ``cells/<key>.partial.jsonl``
(:mod:`hikv.model.accuracy.journal`), replayed on resume, and deleted when the cell is written; the
resumed cell equals an uninterrupted run's. Scripted answers (no model) for the bookkeeping, the
tiny random model of ``test_accuracy_cli`` for the suite end to end."""

from __future__ import annotations

import dataclasses
import json
import random
from types import SimpleNamespace

import pytest
from test_seed_suite_adaptive import CELL, CFG, SEED, SUITE, ScriptedAnswers

from hikv.model.accuracy import experiments as A
from hikv.model.accuracy import seed_trials
from hikv.model.accuracy.journal import Journal, partial_path
from hikv.model.accuracy.seed_suite import run_cell


class _Killed(Exception):
    pass


def _scripted(monkeypatch, table, tmp_path, kill_at: int | None = None):
    """run_cell on scripted answers with a journal in ``tmp_path``; ``kill_at``: raise in the
    generation of that trial (0-based), as a kill would stop the run."""
    s = ScriptedAnswers(table)

    def case(self, lm, words, i):               # the trial index travels in the context
        return SimpleNamespace(context=[i, 2], question=[3], references=("ok",), max_new=2,
                               length=3)

    def gen(lm, specs, cfg, ctx, *a, **k):
        s.trial = ctx[0]
        if kill_at is not None and s.trial == kill_at:
            raise _Killed(f"killed in trial {s.trial}")
        return s.generate(lm, specs, cfg, ctx, *a, **k)

    monkeypatch.setattr(A, "_generate", gen)
    monkeypatch.setattr(seed_trials._TaskCell, "case", case)
    lm = type("LM", (), {"decode": staticmethod(lambda ids: "ok" if ids[0] else "no")})()
    skipped: dict[str, str] = {}
    logs: list[str] = []
    rows = run_cell(CELL, SUITE, {"lm": lm, "cfg": CFG, "words": []}, seed=SEED,
                    skipped=skipped, partial_dir=tmp_path, log=logs.append)
    return rows, skipped, s.calls, logs


@pytest.mark.parametrize("kill_at", [1, 6, 13])
def test_killed_cell_resumes_to_the_uninterrupted_rows(monkeypatch, tmp_path, kill_at) -> None:
    rng = random.Random(SEED + kill_at)
    table = {"snapkv@256": [1] * 5 + [0] * 15,                  # stops part-way
             "h2o@512": [rng.randint(0, 1) for _ in range(20)],
             "snapkv@64": [0] * 20}
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
    ref, ref_skip, ref_calls, _ = _scripted(monkeypatch, table, ref_dir)
    assert len(partial_path(ref_dir, CELL.key).read_text().splitlines()) == 1 + 20, SEED
    with pytest.raises(_Killed):
        _scripted(monkeypatch, table, run_dir, kill_at=kill_at)
    path = partial_path(run_dir, CELL.key)
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + kill_at, (SEED, kill_at)           # header + finished trials
    rows, skip, calls, logs = _scripted(monkeypatch, table, run_dir)
    assert rows == ref and skip == ref_skip, (SEED, kill_at)
    assert calls == ref_calls[kill_at:], "only the trials after the journal ran"
    assert any(f"resumed {kill_at} finished trial" in m for m in logs), logs
    # run_cell leaves the journal; run_seed_suite deletes it once the cell file is written
    assert path.is_file()


def test_torn_line_and_other_settings(monkeypatch, tmp_path) -> None:
    table = {"h2o@512": [1, 0] * 10}
    ref, *_ = _scripted(monkeypatch, table, tmp_path / "ref")
    with pytest.raises(_Killed):
        _scripted(monkeypatch, table, tmp_path, kill_at=4)
    path = partial_path(tmp_path, CELL.key)
    with path.open("a") as f:                                   # killed mid-write
        f.write('{"trial": 4, "prompt_tok')
    rows, _, calls, logs = _scripted(monkeypatch, table, tmp_path)
    assert rows == ref and len(calls) == 16, SEED
    assert any("torn line after trial 4" in m for m in logs), logs
    # a journal written for another seed is discarded, not replayed
    head = json.loads(path.read_text().splitlines()[0])
    j = Journal(path, {**{k: v for k, v in head.items() if k != "partial"}, "seed": SEED + 1})
    assert j.records == [] and "discarded" in j.dropped and not path.exists()


def test_killed_suite_resumes_to_the_same_cells(tiny_model, tmp_path,  # noqa: F811
                                                monkeypatch) -> None:
    """seed-smoke (3 trials, both protocols sharing each prompt pass) killed after a trial,
    and once between the two protocols' journal lines, resumes to cell files equal to an
    uninterrupted run's (rows and meta keys); the journals are gone afterwards."""
    from hikv.model.accuracy import journal as seed_journal
    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite

    model, cache = tiny_model
    suite = dataclasses.replace(SEED_SUITES["seed-smoke"], tasks=("passkey",), trials=3,
                                keep_min=0.0, ppl_tol=10.0)     # every method runs
    kw = {"model": str(model), "cache": cache, "preset": "tiny", "log": lambda _: None}
    ref = tmp_path / "ref"
    run_seed_suite(suite, ref, **kw)
    real = seed_journal.Journal.append
    for kill_after in (2, 3):                   # journal lines written before the kill
        out = tmp_path / f"killed{kill_after}"
        n = [0]

        def append(self, *a, _k=kill_after, _n=n, **k):
            if _n[0] == _k:
                raise _Killed(f"killed after {_k} journal lines")
            _n[0] += 1
            return real(self, *a, **k)

        monkeypatch.setattr(seed_journal.Journal, "append", append)
        with pytest.raises(_Killed):
            run_seed_suite(suite, out, **kw)
        monkeypatch.setattr(seed_journal.Journal, "append", real)
        parts = sorted(p.name for p in (out / "cells").glob("*.partial.jsonl"))
        assert parts == ["passkey_follow-up_1024.partial.jsonl",
                         "passkey_prompt_1024.partial.jsonl"], (kill_after, parts)
        assert not (out / "cells" / "passkey_prompt_1024.json").exists()
        run_seed_suite(suite, out, **kw)
        assert not list((out / "cells").glob("*.partial.jsonl")), kill_after
        for p in ("prompt", "follow-up"):
            got, gm = read_rows(out / "cells" / f"passkey_{p}_1024.json")
            want, wm = read_rows(ref / "cells" / f"passkey_{p}_1024.json")
            assert got == want and len(got) > 1, (SEED, kill_after, p)
            assert set(gm) == set(wm), (kill_after, p)


def test_added_family_adds_its_time_to_the_cells(tiny_model, tmp_path) -> None:  # noqa: F811
    """A run that adds a family to finished cells (``--add-families``) runs only that family
    and adds its wall and CPU time to the cells' recorded time, not replaces it."""
    from hikv.model.accuracy.io import read_rows, write_rows
    from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite

    model, cache = tiny_model
    base = dataclasses.replace(SEED_SUITES["seed-smoke"], tasks=("passkey",), trials=2,
                               keep_min=0.0, ppl_tol=10.0, families=("snapkv",))
    kw = {"model": str(model), "cache": cache, "preset": "tiny", "log": lambda _: None}
    out = tmp_path / "seed"
    run_seed_suite(base, out, **kw)
    keys = ("ppl_1024", "passkey_prompt_1024", "passkey_follow-up_1024")
    before = {}
    for k in keys:      # an earlier run's time, far above what the added family takes
        rows, meta = read_rows(out / "cells" / f"{k}.json")
        before[k] = rows
        write_rows(out / "cells", k, rows, {**meta, "wall_s": 1e6, "cpu_s": 2e6})
    run_seed_suite(dataclasses.replace(base, families=("snapkv", "h2o")), out, **kw)
    for k in keys:
        rows, meta = read_rows(out / "cells" / f"{k}.json")
        assert [r for r in rows if not r["label"].startswith("h2o")] == before[k], k
        assert any(r["label"].startswith("h2o") for r in rows), k
        assert 1e6 < meta["wall_s"] < 1e6 + 600 and 2e6 < meta["cpu_s"] < 2e6 + 600, (k, meta)


from test_accuracy_cli import tiny_model  # noqa: E402,F401  (the shared fixture)


def test_killed_perplexity_cell_resumes_window_by_window(tiny_model, tmp_path,  # noqa: F811
                                                         monkeypatch) -> None:
    """A perplexity cell killed after its first window resumes from its window journal: only
    the later windows are decoded again, and the cell file equals an uninterrupted run's (every
    NLL, per-block sum and byte count to the last bit)."""
    from hikv.model.accuracy import experiments
    from hikv.model.accuracy import journal as seed_journal
    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite

    model, cache = tiny_model
    suite = dataclasses.replace(SEED_SUITES["seed-smoke"], tasks=("passkey",), trials=1,
                                ppl_windows=3)
    kw = {"model": str(model), "cache": cache, "preset": "tiny", "log": lambda _: None}
    ref = tmp_path / "ref"
    run_seed_suite(suite, ref, **kw)
    real = seed_journal.Journal.append_record

    def killed(self, trial, payload):
        if "methods" in payload and trial == 1:
            raise _Killed("killed in the perplexity cell's second window")
        return real(self, trial, payload)

    out = tmp_path / "killed"
    monkeypatch.setattr(seed_journal.Journal, "append_record", killed)
    with pytest.raises(_Killed):
        run_seed_suite(suite, out, **kw)
    monkeypatch.setattr(seed_journal.Journal, "append_record", real)
    part = out / "cells" / "ppl_1024.partial.jsonl"
    assert len(part.read_text().splitlines()) == 1 + 1          # header + window 0
    decoded: list[int] = []
    real_ppl = experiments.perplexity

    def counting(lm, specs, cfg, windows, prefix, **k):
        decoded.append(len(windows) - len(k.get("resume", ())))
        return real_ppl(lm, specs, cfg, windows, prefix, **k)

    monkeypatch.setattr(experiments, "perplexity", counting)
    run_seed_suite(suite, out, **kw)
    assert decoded == [2], "only the two windows after the journal were decoded"
    assert not part.exists()
    got, _ = read_rows(out / "cells" / "ppl_1024.json")
    want, _ = read_rows(ref / "cells" / "ppl_1024.json")
    assert got == want and len(got) > 1


def _windowed_suite():
    """seed-smoke's perplexity cell as a sequential one: 4 windows, a look after 2."""
    from hikv.model.accuracy.seed_suite import SEED_SUITES

    return dataclasses.replace(SEED_SUITES["seed-smoke"], tasks=("passkey",),
                               protocols=("prompt",), trials=1, ppl_windows=4,
                               ppl_looks=(2,), prune="noninferiority")


@pytest.fixture
def in_process(monkeypatch):
    """The parallel suite's units run one after another in this process (run_graph's
    ``serial`` executor), so a test can watch and kill them."""
    from hikv import executor

    real = executor.run_graph

    def serial(fn, ready, on_done, **kw):
        return real(fn, ready, on_done, **{**kw, "executor": "serial"})

    monkeypatch.setattr(executor, "run_graph", serial)


def test_windowed_perplexity_cell_equals_one_process(tiny_model, tmp_path,  # noqa: F811
                                                     monkeypatch, in_process) -> None:
    """With several workers a perplexity cell runs window by window (each window a unit of
    its own, the stopping rule applied at each look); its rows equal one process's to the
    last bit, and so do the task cells that depend on them. Killed in its third window, it
    resumes from its journal decoding only the windows after it."""
    from hikv.model.accuracy import journal as seed_journal
    from hikv.model.accuracy import seed_suite
    from hikv.model.accuracy.io import read_rows

    model, cache = tiny_model
    suite = _windowed_suite()
    kw = {"model": str(model), "cache": cache, "preset": "tiny", "log": lambda _: None}
    ref = tmp_path / "ref"
    seed_suite.run_seed_suite(suite, ref, **kw)
    decoded: list[tuple[int, int]] = []
    real_window = seed_suite.ppl_window

    def counting(cell, suite_, env, labels, window, **k):
        decoded.append((window, len(labels)))
        return real_window(cell, suite_, env, labels, window, **k)

    monkeypatch.setattr(seed_suite, "ppl_window", counting)
    real = seed_journal.Journal.append_record

    def killed(self, trial, payload, spent=None):
        if "methods" in payload and trial == 2:
            raise _Killed("killed in the perplexity cell's third window")
        return real(self, trial, payload, spent)

    out = tmp_path / "windowed"
    monkeypatch.setattr(seed_journal.Journal, "append_record", killed)
    with pytest.raises(_Killed):
        seed_suite.run_seed_suite(suite, out, workers=2, **kw)
    monkeypatch.setattr(seed_journal.Journal, "append_record", real)
    part = out / "cells" / "ppl_1024.partial.jsonl"
    lines = [json.loads(x) for x in part.read_text().splitlines()]
    assert [x.get("trial") for x in lines[1:]] == [0, 1]        # header + windows 0 and 1
    assert lines[2]["cpu_s"] >= lines[1]["cpu_s"] > 0
    assert [w for w, _ in decoded] == [0, 1, 2]
    decoded.clear()
    seed_suite.run_seed_suite(suite, out, workers=2, **kw)
    assert [w for w, _ in decoded] == [2, 3], "only the windows after the journal"
    assert not part.exists()
    for key in ("ppl_1024", "passkey_prompt_1024"):
        got, meta = read_rows(out / "cells" / f"{key}.json")
        want, _ = read_rows(ref / "cells" / f"{key}.json")
        assert got == want and got, key
        assert meta["cpu_s"] > 0 and meta["wall_s"] > 0
    ppl = read_rows(out / "cells" / "ppl_1024.json")[0]
    assert {r["windows"] for r in ppl} == {2, 4}, "some methods stop at the look"
    # the windows after the look ran the methods the look left running
    assert len(decoded) == 2 and decoded[0][1] == sum(r["windows"] == 4 for r in ppl)


def test_windowed_cell_resumes_a_sequential_journal(tiny_model, tmp_path,  # noqa: F811
                                                    monkeypatch, in_process) -> None:
    """A journal written by one process (``--workers 1``) is resumed window by window by a
    parallel run, and the other way round: the journal is the same either way."""
    from hikv.model.accuracy import journal as seed_journal
    from hikv.model.accuracy import seed_suite
    from hikv.model.accuracy.io import read_rows

    model, cache = tiny_model
    suite = _windowed_suite()
    kw = {"model": str(model), "cache": cache, "preset": "tiny", "log": lambda _: None}
    ref = tmp_path / "ref"
    seed_suite.run_seed_suite(suite, ref, **kw)
    real = seed_journal.Journal.append_record
    for first, then, name in ((1, 2, "seq-par"), (2, 1, "par-seq")):
        def killed(self, trial, payload, spent=None):
            if "methods" in payload and trial == 3:
                raise _Killed("killed in the perplexity cell's last window")
            return real(self, trial, payload, spent)

        out = tmp_path / name
        monkeypatch.setattr(seed_journal.Journal, "append_record", killed)
        with pytest.raises(_Killed):
            seed_suite.run_seed_suite(suite, out, workers=first, **kw)
        monkeypatch.setattr(seed_journal.Journal, "append_record", real)
        assert len((out / "cells" / "ppl_1024.partial.jsonl").read_text().splitlines()) == 4
        seed_suite.run_seed_suite(suite, out, workers=then, **kw)
        assert read_rows(out / "cells" / "ppl_1024.json")[0] == \
            read_rows(ref / "cells" / "ppl_1024.json")[0], name
