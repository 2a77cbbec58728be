"""``hikv accuracy status``: a seed-suite folder's cells written and in progress, read from
its cell files and journals without changing them, and the run holding the folder."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest

from hikv.io import hold_out_dir, release_out_dir
from hikv.model.accuracy import iso as NI
from hikv.model.accuracy.journal import Journal, partial_path
from hikv.model.accuracy.seed_spec import SEED_SUITES, suite_key, suite_key_sizes
from hikv.model.accuracy.status import status_lines, suite_status
from hikv.params import ParamError
from hikv.scripts.cli import main

SUITE = SEED_SUITES["seed-smoke"]


def _win(tok):
    """One method's record of a perplexity window: NLL sum, count and per-token NLLs."""
    return {"nll": sum(tok), "cnt": len(tok), "tok": tok}


def _folder(tmp_path):
    cells = tmp_path / "cells"
    cells.mkdir()
    (cells / "passkey_prompt_64.json").write_text(json.dumps({"meta": {}, "rows": [{}] * 3}))
    key = suite_key(SUITE)
    ppl = Journal(partial_path(cells, "ppl_64"), {"cell": "ppl_64", "suite_key": key,
                                                  "labels": ["full", "a", "b"], "windows": "h"})
    ppl.append_record(0, {"units": 1, "methods": {x: _win([2.0] * 32) for x in "full a b"
                                                   .split()}})
    ppl.append_record(1, {"units": 1, "methods": {x: _win([2.0] * 32) for x in ("full", "b")}})
    task = Journal(partial_path(cells, "niah_prompt_64"), {"cell": "niah_prompt_64",
                                                          "suite_key": key, "seed": 0})
    task.append(0, 50, ["full", "a"], [1.0, 0.0], ["x", "y"])
    with open(task.path, "ab") as f:
        f.write(b'{"trial": 1, "torn')              # killed mid-write
    return tmp_path, key


def test_status_reads_cells_and_journals(tmp_path):
    out, key = _folder(tmp_path)
    before = {p.name: p.read_bytes() for p in (out / "cells").iterdir()}
    st = suite_status(out)
    assert {p.name: p.read_bytes() for p in (out / "cells").iterdir()} == before   # read only
    assert st["holder"] is None and not st["finished"]
    assert st["done"] == [{"cell": "passkey_prompt_64", "rows": 3}]
    run = {r["cell"]: r for r in st["running"]}
    sizes = suite_key_sizes(key)
    assert sizes == {"trials": SUITE.trials, "windows": SUITE.ppl_windows, "looks": ()}
    p = run["ppl_64"]
    assert (p["unit"], p["finished"], p["planned"]) == ("windows", 2, SUITE.ppl_windows)
    assert (p["methods_first"], p["methods_last"]) == (3, 2) and not p["torn"]
    t = run["niah_prompt_64"]
    assert (t["unit"], t["finished"], t["planned"], t["torn"]) == ("trials", 1, SUITE.trials,
                                                                   True)
    text = "\n".join(status_lines(st))
    assert "no run is writing here" in text and "cells with rows written: 1 (3 rows)" in text
    assert f"ppl_64: 2 of {SUITE.ppl_windows} windows finished; methods running 2" in text
    assert "a torn last line" in text


def test_status_names_the_run_holding_the_folder(tmp_path, capsys):
    out, _ = _folder(tmp_path)
    hold_out_dir(out)
    try:
        assert main(["accuracy", "status", "--out", str(out)]) == 0
        assert "a run is writing here (pid " in capsys.readouterr().out
    finally:
        release_out_dir(out)
    assert suite_status(out)["holder"] is None


def test_status_of_a_folder_without_cells(tmp_path, capsys):
    with pytest.raises(ParamError, match="--out .*no seed-suite cells"):
        suite_status(tmp_path)
    assert main(["accuracy", "status", "--out", str(tmp_path / "none")]) == 2
    assert "--out" in capsys.readouterr().err


def test_status_gives_a_sequential_cells_verdicts_so_far(tmp_path):
    """A perplexity journal's verdicts so far: a method stopped at a look with the verdict of
    that look's level, the running ones as they would stand were the cell to end now, and
    full KV against itself on disjoint halves of the windows finished."""
    suite = dataclasses.replace(SUITE, ppl_windows=8, ppl_looks=(2,), prune="noninferiority")
    key = suite_key(suite)
    assert suite_key_sizes(key) == {"trials": suite.trials, "windows": 8, "looks": (2,)}
    cells = tmp_path / "cells"
    cells.mkdir()
    j = Journal(partial_path(cells, "ppl_64"), {"cell": "ppl_64", "suite_key": key,
                                                "labels": ["full", "worse", "same", "near"],
                                                "windows": "h"})
    rng = random.Random(0)
    for w in range(3):
        tok = [rng.uniform(0.5, 4.0) for _ in range(32)]
        methods = {"full": _win(tok), "same": _win(list(tok)),
                   "near": _win([x + rng.gauss(0.01, 0.3) for x in tok])}
        if w < 2:                                   # 20 % more NLL: stopped at the 2-window look
            methods["worse"] = _win([1.2 * x for x in tok])
        j.append_record(w, {"units": 1, "methods": methods})
    st = suite_status(tmp_path)
    it = st["running"][0]["interim"]
    m = {x["label"]: x for x in it["methods"]}
    levels = NI.look_levels((2,), 8)
    assert (m["worse"]["state"], m["worse"]["windows"], m["worse"]["verdict"]) == (
        "stopped", 2, "no")
    assert m["worse"]["level"] == levels[2]
    assert (m["same"]["state"], m["same"]["windows"], m["same"]["verdict"]) == (
        "running", 3, "yes")
    assert m["same"]["level"] == levels[8] and m["same"]["estimate"] == 0
    assert m["same"]["windows_to_decide"] is None and m["worse"]["windows_to_decide"] is None
    near = m["near"]                                 # undecided: where its interval would clear
    assert (near["state"], near["verdict"]) == ("running", "undecided")
    half = (near["high"] - near["low"]) / 2
    assert near["windows_to_decide"] == math.ceil(3 * (half / abs(near["estimate"] - 0.01)) ** 2)
    assert it["self_check"]["windows"] == 3
    text = "\n".join(status_lines(st))
    assert "stopped at a look: 1 (0 non-inferior, 1 inferior); running: 2 besides full KV" in text
    assert "were the cell to end now (97.5 % one-sided): 1 yes, 0 no, 1 undecided" in text
    assert f"would decide after about {near['windows_to_decide']:,} windows, were" in text
    assert "full KV against itself, disjoint halves of 3 windows" in text
    assert "same: yes (running, 3 windows" not in text        # the running ones: with --each
    assert "same: yes (running, 3 windows" in "\n".join(status_lines(st, each=True))


def test_redo_families_names_the_journals_it_leaves(tmp_path):
    """A cell in progress keeps its journal (measured by the code that wrote it); the log
    names each journal holding the families, for deleting by hand."""
    from hikv.model.accuracy.seed_suite import redo_families

    out, _ = _folder(tmp_path)
    said: list[str] = []
    assert redo_families(out / "cells", ["a"], log=said.append) == []     # no rows of "a"
    assert said == [f"{k}.partial.jsonl: a cell in progress holds methods of a, left as it is "
                    "(delete it to measure its cell again)" for k in ("niah_prompt_64", "ppl_64")]
    with pytest.raises(ParamError, match="--redo-families .*not 'full'"):
        redo_families(out / "cells", ["full"])


def test_status_pairs_added_methods_with_the_written_cells_full_kv(tmp_path):
    """Methods a run adds to a written perplexity cell journal without full KV; their verdicts
    so far pair with full KV's row in the cell file."""
    from hikv.model.accuracy.io import write_rows

    key = suite_key(dataclasses.replace(SUITE, ppl_windows=4))
    cells = tmp_path / "cells"
    rng = random.Random(1)
    toks = [[rng.uniform(0.5, 4.0) for _ in range(32)] for _ in range(4)]
    full = {"label": "full", "tokens": 128, "windows": 4, "windows_planned": 4,
            "nll": sum(map(sum, toks)) / 128, "nll_block_tokens": NI.NLL_BLOCK,
            "nll_blocks": [NI.nll_block_sums(t) for t in toks]}
    full["ppl"] = math.exp(full["nll"])
    write_rows(cells, "ppl_64", [full], {"suite_key": key})
    j = Journal(partial_path(cells, "ppl_64"), {"cell": "ppl_64", "suite_key": key,
                                                "labels": ["added"], "windows": "h"})
    for w in range(2):
        j.append_record(w, {"units": 1, "methods": {"added": _win([1.5 * x for x in toks[w]])}})
    run = next(r for r in suite_status(tmp_path)["running"] if r["cell"] == "ppl_64")
    it = run["interim"]
    (m,) = it["methods"]
    assert (m["label"], m["windows"], m["state"], m["verdict"]) == ("added", 2, "running", "no")
    assert m["estimate"] == pytest.approx(math.exp(0.5 * sum(map(sum, toks[:2])) / 64) - 1)
    assert it["self_check"]["windows"] == 4                  # the cell file's full KV


def test_status_gives_a_task_cells_verdicts_so_far(tmp_path):
    """A task journal's verdicts so far: each method's score difference to full KV over the
    trials it ran, with the test's paired bounds and verdict; a method missing from the last
    trial has stopped."""
    cells = tmp_path / "cells"
    cells.mkdir()
    j = Journal(partial_path(cells, "passkey_prompt_64"), {"cell": "passkey_prompt_64",
                                                          "suite_key": suite_key(SUITE),
                                                          "seed": 0})
    for t in range(60):
        labels = ["full", "same"] + (["bad"] if t < 10 else [])
        j.append(t, 50, labels, [1.0, 1.0, 0.0][:len(labels)], ["1"] * len(labels))
    st = suite_status(tmp_path)
    it = st["running"][0]["interim"]
    m = {x["label"]: x for x in it["methods"]}
    assert (it["trials"], it["full_mean"]) == (60, 1.0)
    assert (m["same"]["state"], m["same"]["trials"], m["same"]["verdict"]) == (
        "running", 60, "yes")
    assert (m["bad"]["state"], m["bad"]["trials"], m["bad"]["verdict"]) == ("stopped", 10, "no")
    b = NI.task_difference_bound([0.0] * 10, [1.0] * 60)
    assert (m["bad"]["low"], m["bad"]["high"]) == (b.low, b.high)
    text = "\n".join(status_lines(st))
    assert ("full KV scores 1.000 over 60 trials; against it (95 % one-sided, -5 points): "
            "1 non-inferior, 1 inferior, 0 undecided so far, 1 of 2 stopped") in text
    assert "bad: no (stopped, 10 trials, mean 0.000" in text and "same: yes" not in text
    assert "same: yes (running, 60 trials" in "\n".join(status_lines(st, each=True))


def test_status_pairs_methods_added_to_a_written_task_cell_with_its_full_kv(tmp_path):
    """A run adding methods to a written task cell journals only those (full KV's row is on
    disk, its header's ``active`` lacks full KV): their verdicts pair with the file's full KV
    scores over the trials they ran."""
    from hikv.model.accuracy.io import write_rows

    cells = tmp_path / "cells"
    cells.mkdir()
    write_rows(cells, "passkey_prompt_64", [{"label": "full", "scores": [1.0] * 60}],
               {"suite_key": suite_key(SUITE)})
    j = Journal(partial_path(cells, "passkey_prompt_64"), {
        "cell": "passkey_prompt_64", "suite_key": suite_key(SUITE), "seed": 0,
        "have": ["full"], "active": ["added"]})
    for t in range(8):
        j.append(t, 50, ["added"], [0.0 if t < 4 else 1.0], ["1"])
    it = suite_status(tmp_path)["running"][0]["interim"]
    m = it["methods"][0]
    b = NI.task_difference_bound([0.0] * 4 + [1.0] * 4, [1.0] * 60)
    assert (it["trials"], it["full_mean"]) == (8, 1.0)
    assert (m["label"], m["trials"], m["state"]) == ("added", 8, "running")
    assert (m["low"], m["high"], m["verdict"]) == (b.low, b.high, NI.task_bound_verdict(b))


def test_status_gives_the_pace_of_the_methods_still_running(tmp_path):
    """Per cell in progress: the CPU seconds a record took over the last records with the
    last one's methods, and at most what the records left would take at that pace."""
    from hikv.model.accuracy.status import journal_pace

    recs = [{"methods": {"a": 0, "b": 0, "c": 0}, "cpu_s": 30.0},
            {"methods": {"a": 0, "b": 0, "c": 0}, "cpu_s": 60.0},
            {"methods": {"a": 0, "b": 0}, "cpu_s": 80.0},
            {"methods": {"a": 0, "b": 0}, "cpu_s": 104.0}]
    assert journal_pace(recs, 10) == {"records": 2, "methods": 2, "cpu_each": 22.0,
                                      "left": 6, "cpu_left": 132.0}
    assert journal_pace(recs[:2], 2)["cpu_left"] == 0           # all planned are done
    assert journal_pace(recs[:2], 4)["cpu_each"] == 30.0        # from the first record
    assert journal_pace([], 4) is None and journal_pace(recs, None) is None
    cells = tmp_path / "cells"
    cells.mkdir()
    key = suite_key(dataclasses.replace(SUITE, ppl_windows=5))
    j = Journal(partial_path(cells, "ppl_64"), {"cell": "ppl_64", "suite_key": key,
                                                "labels": ["full", "a", "b"], "windows": "h"})
    for i, (names, cpu) in enumerate([("full a b", 30.0), ("full b", 50.0)]):
        j.append_record(i, {"units": 1, "methods": {x: _win([2.0] * 32)
                                                    for x in names.split()}},
                        spent=(cpu, cpu))
    text = "\n".join(status_lines(suite_status(tmp_path)))
    assert ("pace: the last 1 windows with 2 methods took 20 CPU s each; the 3 left would "
            "take at most about 60 CPU s") in text
