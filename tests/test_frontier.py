"""``hikv frontier`` on a tiny synthetic cell set: points, fronts, iso points and the HiKV
ratio; missing, partial and mismatched cells exit 2 naming the file, with nothing plotted."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hikv.model.accuracy import iso as I
from hikv.model.accuracy.io import write_rows
from hikv.presets import MODEL_SHAPES
from hikv.scripts.cli import main
from hikv.sim.explore.frontier import load_cells, pareto

SEED = 5
N = 64
SHAPE = {**MODEL_SHAPES["tiny"].__dict__, "scale": 0.25, "windows": [None, None]}
#: family -> (method, stage1 or None, per budget: (relative perplexity shift, task scores))
FAMILIES = {
    "snapkv": ("snapkv", None, {16: (0.08, 0.5), 32: (0.0, 1.0)}),
    "ds/r4": ("ds", None, {16: (0.03, 1.0), 32: (0.0, 1.0)}),
    "hikv-query_aware/lowbit4": ("hikv", "query_aware", {16: (0.0, 1.0), 32: (0.0, 1.0)}),
}
TASKS = {"passkey": 1.0, "vt": 0.5}        # full KV's score: passkey kept, vt dropped


def _meta(model: str = "tiny", cell: str = "", code: str = "0.1.0+abc") -> dict:
    return {"model": model, "preset": "tiny", "code_version": code, "shape": SHAPE,
            "cell": cell, "skipped": {},
            "suite": {"tasks": list(TASKS), "keep_min": 0.8, "name": "synthetic"}}


def _label(fam: str, b: int) -> str:
    head, _, rest = fam.partition("/")
    return f"{head}@{b}" + (f"/{rest}" if rest else "")


def make_cells(folder: Path) -> Path:
    """A seed suite's cells of one length: perplexity (with per-block NLLs) and two tasks."""
    rng = np.random.default_rng(SEED)
    base = rng.normal(3.0 * I.NLL_BLOCK, 2.0, size=(8, 4))
    cells = folder / "cells"

    def ppl_row(label: str, fam: str, method: str, b: int, stage1: str | None,
                blocks: np.ndarray) -> dict:
        tokens = blocks.size * I.NLL_BLOCK
        nll = float(blocks.sum()) / tokens
        return {"label": label, "family": fam, "method": method, "budget": b,
                "hikv_stage1": stage1, "ppl": math.exp(nll), "nll": nll, "tokens": tokens,
                "windows": 8, "prefix": N - 1 - 4 * I.NLL_BLOCK, "window": N, "length": N,
                "protocol": "both", "units": 4, "bytes_burst": 40.0 * b, "bytes_ideal": 32.0 * b,
                "nll_blocks": blocks.tolist(), "nll_block_tokens": I.NLL_BLOCK}

    rows = [ppl_row("full", "full", "full", N, None, base)]
    tasks: dict[str, list[dict]] = {t: [] for t in TASKS}
    for t, acc in TASKS.items():
        tasks[t].append({"label": "full", "task": t, "protocol": "prompt", "length": N,
                         "trials": 80, "score_sum": 80 * acc, "accuracy": acc,
                         "scores": [1.0] * int(80 * acc) + [0.0] * (80 - int(80 * acc)),
                         "status": "complete"})
    for fam, (method, s1, per) in FAMILIES.items():
        for b, (shift, score) in per.items():
            lab = _label(fam, b)
            e = rng.normal(0, 0.05, base.shape)
            rows.append(ppl_row(lab, fam, method, b, s1,
                                base + I.NLL_BLOCK * math.log1p(shift) + e - e.mean()))
            k = int(80 * score)
            tasks["passkey"].append({"label": lab, "task": "passkey", "protocol": "prompt",
                                     "length": N, "trials": 80, "score_sum": float(k),
                                     "accuracy": k / 80, "status": "complete",
                                     "scores": [1.0] * k + [0.0] * (80 - k)})
    write_rows(cells, f"ppl_{N}", rows, _meta(cell=f"ppl_{N}"))
    for t, rs in tasks.items():
        meta = _meta(cell=f"{t}_prompt_{N}")
        if t == "vt":
            meta["skipped"] = {r["label"]: "task dropped" for r in rows if r["label"] != "full"}
        write_rows(cells, f"{t}_prompt_{N}", rs, meta)
    return folder


def _run(folder: Path, out: Path, *extra: str) -> int:
    return main(["frontier", "--model", "tiny", "--length", str(N), "--cells", str(folder),
                 "--no-area", "--out", str(out), *extra])


def test_pareto() -> None:
    assert pareto([1, 2, 3, 2], [3, 2, 1, 3]) == [True, True, True, False]
    assert pareto([1, 1], [1, 1]) == [True, True]


def test_frontier_on_a_tiny_cell_set(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cells = make_cells(tmp_path / "suite")
    out = tmp_path / "out"
    assert _run(cells, out) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    stem = f"frontier_tiny_prompt_{N}_tiny"
    for suffix in (".csv", "_families.csv", ".json", ".png"):
        assert (out / f"{stem}{suffix}").is_file(), suffix
    s = json.loads((out / f"{stem}.json").read_text())
    assert s["schema"] == "hikv.frontier/1" and s["kept_tasks"] == ["passkey"]
    assert s["dropped_tasks"] == ["vt"]
    assert s["test"]["level"] == I.NI_LEVEL and s["test"]["ppl_margin"] == I.PPL_MARGIN
    fams = {f["family"]: f for f in s["families"]}
    assert fams["snapkv"]["iso_budget"] == 32 and fams["snapkv"]["iso_budget_low"] == 32
    assert fams["ds/r4"]["iso_budget"] == 32
    assert fams["hikv-query_aware/lowbit4"]["iso_budget"] == 16
    assert s["best_hikv"]["label"] == "hikv-query_aware@16/lowbit4"
    r = s["hikv_over_other_time"]
    assert r["ratio"] == pytest.approx(s["best_hikv"]["time_s"] / s["best_other"]["time_s"])
    assert r["low"] <= r["ratio"] <= r["high"]
    assert "best HiKV" in printed
    import csv

    rows = list(csv.DictReader((out / f"{stem}.csv").open()))
    assert len(rows) == 1 + sum(len(v[2]) for v in FAMILIES.values())
    assert rows[0]["label"] == "full" and rows[0]["verdict"] == "reference"
    assert {r["verdict"] for r in rows[1:]} <= set(I.VERDICTS)
    assert all(r["level"] == str(I.NI_LEVEL) for r in rows)
    assert any(r["on_time_front"] == "True" for r in rows)
    # seconds, not minutes; a second run into the folder needs --force, which replaces this
    # length's frontier and leaves another length's (a folder holding several) alone
    assert _run(cells, out) == 2
    other = out / f"frontier_tiny_prompt_{2 * N}_tiny.csv"
    other.write_text("another length's frontier\n")
    assert _run(cells, out, "--force") == 0
    assert other.read_text() == "another length's frontier\n"
    assert (out / f"{stem}.csv").is_file()


def test_frontier_reads_a_sequential_cell(tmp_path: Path, capsys: pytest.CaptureFixture
                                          ) -> None:
    """A perplexity cell with looks: snapkv@16 stopped after 2 of 8 windows is tested at its
    look's level against full KV's first 2 windows, and the summary names the design."""
    from hikv.model.accuracy.io import read_rows

    cells = make_cells(tmp_path / "suite")
    path = cells / "cells" / f"ppl_{N}.json"
    rows, meta = read_rows(path)
    levels = I.look_levels((2, 4), 8)
    for r in rows:
        if r["label"] == "snapkv@16":
            blocks = r["nll_blocks"][:2]
            n = 2 * len(blocks[0]) * I.NLL_BLOCK
            r.update(nll_blocks=blocks, windows=2, tokens=n,
                     nll=sum(map(sum, blocks)) / n, ppl=math.exp(sum(map(sum, blocks)) / n))
        r.update(windows_planned=8, ppl_looks=sorted(levels),
                 ppl_level=levels[r.get("windows", 8) if r["label"] == "snapkv@16" else 8])
    write_rows(cells / "cells", f"ppl_{N}", rows, meta)
    out = tmp_path / "out"
    assert _run(cells, out) == 0, capsys.readouterr().err
    s = json.loads((out / f"frontier_tiny_prompt_{N}_tiny.json").read_text())
    assert "sequential cell" in s["test"]["ppl"]
    import csv

    got = {r["label"]: r for r in csv.DictReader(
        (out / f"frontier_tiny_prompt_{N}_tiny.csv").open())}
    assert float(got["snapkv@16"]["ppl_level"]) == levels[2]
    assert got["snapkv@16"]["ppl_windows"] == "2"
    full = next(r for r in rows if r["label"] == "full")
    stopped = next(r for r in rows if r["label"] == "snapkv@16")
    assert float(got["snapkv@16"]["ppl_rel"]) == pytest.approx(
        stopped["ppl"] / I.over_windows(full, 2)["ppl"] - 1)


@pytest.mark.parametrize("damage,words", [
    ("missing", ["passkey_prompt_64.json", "missing"]),
    ("journal", ["passkey_prompt_64.json", "unfinished"]),
    ("partial", ["passkey_prompt_64.json", "partial", "ds@16/r4"]),
    ("model", ["ppl_64.json", "model 'other'"]),
    ("preset", ["passkey_prompt_64.json", "preset 'default'"]),
    ("length", ["ppl_32.json", "missing"]),
    ("protocol", ["passkey_follow-up_64.json", "missing"]),
    ("code", ["ppl_64.json", "code version"]),
])
def test_frontier_refuses_bad_cells(tmp_path: Path, capsys: pytest.CaptureFixture,
                                    damage: str, words: list[str]) -> None:
    cells = make_cells(tmp_path / "suite")
    c = cells / "cells"
    extra: list[str] = []
    length = N

    def edit(name: str, fn) -> None:
        d = json.loads((c / name).read_text())
        fn(d)
        (c / name).write_text(json.dumps(d))

    if damage in ("missing", "journal"):
        (c / "passkey_prompt_64.json").unlink()
        if damage == "journal":
            (c / "passkey_prompt_64.partial.jsonl").write_text("{}\n")
    elif damage == "partial":
        edit("passkey_prompt_64.json",
             lambda d: d.update(rows=[r for r in d["rows"] if r["label"] != "ds@16/r4"]))
    elif damage == "model":
        edit("ppl_64.json", lambda d: d["meta"].update(model="other",
                                                       shape={**SHAPE, "name": "other"}))
    elif damage == "preset":
        edit("passkey_prompt_64.json", lambda d: d["meta"].update(preset="default"))
    elif damage == "length":
        length = 32
    elif damage == "protocol":
        extra = ["--protocol", "follow-up"]
    elif damage == "code":
        extra = ["--code-version", "0.1.0+other"]
    out = tmp_path / "out"
    rc = main(["frontier", "--model", "tiny", "--length", str(length), "--cells", str(cells),
               "--no-area", "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert rc == 2, (damage, err)
    assert len(err.strip().splitlines()) == 1 and all(w in err for w in words), (damage, err)
    assert not list(out.glob("frontier_*")) if out.exists() else True


def test_load_cells_reads_a_suite_folder_or_its_cells(tmp_path: Path) -> None:
    cells = make_cells(tmp_path / "suite")
    a = load_cells(cells, model="tiny", length=N)
    b = load_cells(cells / "cells", model="tiny", length=N)
    assert a.kept_tasks == b.kept_tasks == ("passkey",) and len(a.files) == 3
