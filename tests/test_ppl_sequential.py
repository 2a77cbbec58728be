"""A sequential perplexity cell (``SeedSuite.ppl_looks``): after each look (a window count)
every method whose non-inferiority test decides at that look's level stops; the error is
split over the looks so a stopped method's verdict keeps the test's level. Checked: the
levels, the stopped rows (their first windows, bit-equal to an unstopped run's), the pairing
with full KV's first windows, resume from the window journal, and the suite end to end on the
tiny random model."""

from __future__ import annotations

import dataclasses
import math

import pytest
from test_accuracy_cli import tiny_model  # noqa: F401  (the shared fixture)

from hikv.model.accuracy import experiments as A
from hikv.model.accuracy import iso as NI
from hikv.model.accuracy.seed_spec import SEED_SUITES, suite_key
from hikv.params import ParamError


def test_look_levels_split_the_error_half_to_the_last_look() -> None:
    lv = NI.look_levels((6, 12, 24, 48), 96)
    assert sorted(lv) == [6, 12, 24, 48, 96]
    assert lv[96] == pytest.approx(1 - 0.05 / 2)
    assert all(lv[n] == pytest.approx(1 - 0.05 / 8) for n in (6, 12, 24, 48))
    assert sum(1 - x for x in lv.values()) == pytest.approx(0.05)
    assert NI.look_levels((), 10) == {10: NI.NI_LEVEL}
    assert NI.look_levels((10,), 10) == {10: NI.NI_LEVEL}      # the last look only
    with pytest.raises(ParamError, match=r"ppl looks \[12\] are out of range: allowed \[1, 9\]"):
        NI.look_levels((3, 12), 10)
    with pytest.raises(ParamError, match="windows = 0"):
        NI.look_levels((1,), 0)


def test_suite_looks_need_the_noninferiority_test_and_enter_the_key() -> None:
    base = SEED_SUITES["seed-smoke"]
    with pytest.raises(ParamError, match="ppl_looks need prune = 'noninferiority'"):
        dataclasses.replace(base, ppl_windows=4, ppl_looks=(2,))
    with pytest.raises(ParamError, match="out of range"):
        dataclasses.replace(base, ppl_windows=4, ppl_looks=(5,), prune="noninferiority")
    s = dataclasses.replace(base, ppl_windows=4, ppl_looks=(2, 1), prune="noninferiority")
    assert suite_key(s)[-1] == "looks [1, 2]"
    assert not any(str(k).startswith("looks") for k in
                   suite_key(dataclasses.replace(s, ppl_looks=())))


def _row(label: str, windows: list[list[float]], planned: int) -> dict:
    toks = 16 * len(windows[0])
    n = toks * len(windows)
    nll = sum(map(sum, windows)) / n
    return {"label": label, "family": label.split("@")[0], "method": "x", "budget": 64,
            "nll_blocks": windows, "nll_block_tokens": 16, "tokens": n, "windows": len(windows),
            "windows_planned": planned, "ppl": math.exp(nll), "nll": nll, "length": 1024}


def test_a_stopped_row_pairs_with_full_kv_over_its_own_windows() -> None:
    full = _row("full", [[16.0, 16.0], [32.0, 32.0], [48.0, 48.0]], 3)
    # over window 0 the method's NLL is 0.1 nat a token above full KV's; later windows would
    # be far lower than full KV's, so a pairing over all windows could not give this
    row = _row("m@64", [[17.6, 17.6]], 3)
    assert NI.ppl_rel(row, full) == pytest.approx(math.expm1(0.1))
    b = NI.ppl_increase_bound(row, full, resamples=200)
    assert b is not None and b.estimate == pytest.approx(math.expm1(0.1))
    assert b.units == 2
    part = NI.over_windows(full, 1)
    assert part["windows"] == 1 and part["tokens"] == 32 and part["ppl"] == pytest.approx(math.e)
    assert NI.over_windows(full, 3) is full
    # a row run to the end is paired with every window: the same counts or a clear error
    with pytest.raises(ParamError, match="not over the same tokens"):
        NI.ppl_increase_bound(_row("m@64", [[17.6, 17.6]], 1), full)


def test_the_table_decides_a_stopped_row_at_its_look_level() -> None:
    full = _row("full", [[16.0, 16.0]] * 4, 4)
    r = {**_row("m@64", [[16.0, 16.5]], 4), "ppl_looks": [1, 4], "ppl_level": 0.9875}
    points, _ = NI.noninferiority_table([full, r], length=1024, resamples=200)
    (p,) = points
    assert p["ppl_level"] == 0.9875 and p["ppl_windows"] == 1
    assert "sequential: 1 of 4 windows, looks at [1, 4], level 0.9875" in p["ppl_test"]
    assert p["ppl_rel"] == pytest.approx(math.expm1(0.5 / 32))


@pytest.fixture(scope="module")
def tiny_lm(tiny_model):  # noqa: F811
    from hikv.model.accuracy.seed_suite import worker_env

    model, cache = tiny_model
    env = worker_env(str(model), cache, "tiny", "cpu", 1)
    wins = A.text_windows(env["lm"], env["text"], 96, 3, scored=8)
    return env, wins


def test_stopped_specs_keep_their_first_windows_bit_for_bit(tiny_lm) -> None:
    env, wins = tiny_lm
    lm, cfg = env["lm"], env["cfg"]
    specs = [A.parse_method(x, cfg.policy, cfg.layout.head_dim)
             for x in ("full", "snapkv@16", "hikv-evict@16")]
    # batch 1: each method decodes alone, so what runs beside it cannot change its rounding
    ref = A.perplexity(lm, specs, cfg, wins, 88, batch=1)
    calls: list[tuple[int, list[str]]] = []

    def stop(n, rows):
        calls.append((n, [r["label"] for r in rows]))
        assert all(r["windows"] == n for r in rows)
        return ["snapkv@16"] if n == 1 else []

    got = A.perplexity(lm, specs, cfg, wins, 88, batch=1, stop=stop)
    assert calls == [(1, ["full", "snapkv@16", "hikv-evict@16"]),
                     (2, ["full", "hikv-evict@16"]), (3, ["full", "hikv-evict@16"])]
    assert got[0] == ref[0] and got[2] == ref[2]          # the others: unchanged
    s, r = got[1], ref[1]
    assert (s["windows"], s["windows_planned"]) == (1, 3) and r["windows"] == 3
    assert s["nll_blocks"] == r["nll_blocks"][:1] and s["ppl_w0"] == r["ppl_w0"]
    assert "ppl_w1" not in s and s["tokens"] == r["tokens"] // 3


def test_a_sequential_cell_resumes_from_its_journal_to_the_same_rows(tiny_lm) -> None:
    env, wins = tiny_lm
    lm, cfg = env["lm"], env["cfg"]
    specs = [A.parse_method(x, cfg.policy, cfg.layout.head_dim)
             for x in ("full", "snapkv@16", "hikv-evict@16")]

    def stop(n, rows):
        return ["hikv-evict@16"] if n == 1 else []

    recs: list[dict] = []
    ref = A.perplexity(lm, specs, cfg, wins, 88, batch=3, stop=stop,
                       on_window=lambda i, rec: recs.append(rec))
    assert sorted(recs[1]["methods"]) == ["full", "snapkv@16"]
    for k in (1, 2):                        # killed after window k: resume from the journal
        got = A.perplexity(lm, specs, cfg, wins, 88, batch=3, stop=stop, resume=recs[:k])
        assert got == ref


def test_the_journal_gives_the_rows_and_verdicts_the_cell_will_write(tiny_lm) -> None:
    """``hikv accuracy status`` reads a cell in progress from its window journal: the rows it
    rebuilds are the rows the cell writes (over the windows each method ran), and a stopped
    method's verdict is the one it stopped on."""
    from hikv.model.accuracy.status import journal_ppl_rows, ppl_interim

    env, wins = tiny_lm
    lm, cfg = env["lm"], env["cfg"]
    specs = [A.parse_method(x, cfg.policy, cfg.layout.head_dim)
             for x in ("full", "snapkv@16", "hikv-evict@16")]
    recs: list[dict] = []
    ref = A.perplexity(lm, specs, cfg, wins, 88, batch=3, on_window=lambda i, rec: recs.append(rec),
                       stop=lambda n, rows: ["hikv-evict@16"] if n == 1 else [])
    head = {"labels": [s.label for s in specs]}
    got = journal_ppl_rows(head, recs, len(wins))
    for r in ref:
        g = got[r["label"]]
        assert (g["tokens"], g["windows"], g["windows_planned"]) == (
            r["tokens"], r["windows"], r["windows_planned"])
        assert g["ppl"] == pytest.approx(r["ppl"], rel=1e-12)
        assert g["nll_blocks"] == [pytest.approx(w, abs=1e-6) for w in r["nll_blocks"]]
    it = ppl_interim(head, recs, len(wins), looks=(1,))
    levels = NI.look_levels((1,), len(wins))
    m = {x["label"]: x for x in it["methods"]}
    assert set(m) == {"snapkv@16", "hikv-evict@16"} and it["windows"] == len(wins)
    assert (m["hikv-evict@16"]["state"], m["hikv-evict@16"]["windows"]) == ("stopped", 1)
    assert m["snapkv@16"]["state"] == "running"
    full = ref[0]
    for r in ref[1:]:
        level = levels[r["windows"]]
        assert m[r["label"]]["level"] == level
        assert m[r["label"]]["verdict"] == NI.ppl_look_verdict(r, full, level)
    want = NI.split_self_check(full)           # the rows round their blocks to 1e-6
    assert it["self_check"] == {k: pytest.approx(v, abs=1e-6) for k, v in want.items()}


def test_the_seed_suite_runs_a_sequential_cell_end_to_end(tiny_model, tmp_path) -> None:  # noqa: F811
    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import run_seed_suite

    model, cache = tiny_model
    suite = dataclasses.replace(SEED_SUITES["seed-smoke"], tasks=("passkey",), trials=1,
                                ppl_windows=3, prune="noninferiority", ppl_looks=(1, 2))
    run_seed_suite(suite, tmp_path, model=str(model), cache=cache, preset="tiny",
                   log=lambda _: None)
    rows, _ = read_rows(tmp_path / "cells" / "ppl_1024.json")
    levels = NI.look_levels((1, 2), 3)
    full = next(r for r in rows if r["label"] == "full")
    assert full["windows"] == 3 and full["ppl_looks"] == [1, 2, 3]
    for r in rows:
        assert r["ppl_level"] == levels[r["windows"]]
        if r["label"] == "full":
            continue
        # a row stops at the first look where its test decides, never before
        for n in range(1, r["windows"]):
            early = {**r, **_first(r, n)}
            assert NI.ppl_look_verdict(early, full, levels[n]) == "undecided"
        if r["windows"] < 3:
            assert NI.ppl_look_verdict(r, full, levels[r["windows"]]) != "undecided"
    assert any(r["windows"] < 3 for r in rows), "the stopping branch ran"
    table = (tmp_path / "seed_table.md").read_text()
    assert "Sequential perplexity cell: looks after 1, 2, 3 windows" in table
    assert "Full KV against itself on disjoint halves of the windows (3 windows" in table
    ran_all = sum(r["windows"] == 3 for r in rows if r["label"] != "full")
    assert (f"Paired half-widths of the {ran_all} methods that ran all 3 windows" in table) \
        == (ran_all > 0)
    points, _ = NI.noninferiority_table(rows, length=1024)
    assert {p["label"]: p["ppl_windows"] for p in points} == {
        r["label"]: r["windows"] for r in rows if r["label"] != "full"}
    # the non-inferiority section's half-width is the last look's, not the early stoppers'
    last = [p for p in points if p["ppl_windows"] == 3 and p["ppl_low"] is not None]
    assert (f"median over the {len(last)} methods and budgets that ran all 3 windows"
            in table) == bool(last)
    assert "median over the methods and budgets:" not in table


def _first(row: dict, n: int) -> dict:
    """``row`` over its first ``n`` windows (what the stopping rule saw at look ``n``)."""
    part = NI.over_windows({**row, "windows_planned": row["windows"]}, n)
    return {**part, "windows": n, "windows_planned": 3}
