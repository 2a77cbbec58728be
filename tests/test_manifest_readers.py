"""Commands that read another run's folder check it against the folder's MANIFEST.json first:
a finished run's folder is read (no warning), a folder whose run was killed or is still going
and a file changed, added or deleted after the run finished exit 2 with one line naming them,
and a folder written before manifests existed is read with a one-line warning. Folders shared
by several commands keep every command's entries; `hikv accuracy run` resumes its own folder."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_frontier import N, make_cells

from hikv import io as hio
from hikv.model.accuracy.io import write_rows
from hikv.params import ParamError
from hikv.scripts.cli import main

RUN = ["hikv", "accuracy", "run", "--suite", "synthetic"]


def _finished(folder: Path) -> Path:
    """A seed suite's folder as a finished `hikv accuracy run` leaves it (held, written,
    manifest last)."""
    hio.prepare_out_dir(folder, ())
    make_cells(folder)
    hio.finish_out_dirs(RUN)
    return folder


def _killed(folder: Path) -> Path:
    """The folder of a run killed after writing its cells: a lock, no manifest."""
    hio.prepare_out_dir(folder, ())
    make_cells(folder)
    hio.release_out_dir(folder)            # as the process's death releases the lock
    return folder


def _frontier(cells: Path, out: Path, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    rc = main(["frontier", "--model", "tiny", "--length", str(N), "--cells", str(cells),
               "--no-area", "--no-plots", "--out", str(out)])
    return rc, capsys.readouterr().err.strip()


def _refused(rc: int, err: str, out: Path, *words: str) -> None:
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert all(w in err for w in words), (words, err)
    assert not (out.exists() and list(out.glob("frontier_*"))), "nothing is written"


@pytest.mark.parametrize("given", ["suite", "cells"])
def test_frontier_reads_a_finished_run_without_warning(tmp_path, capsys, given):
    suite = _finished(tmp_path / "suite")
    manifest = json.loads((suite / hio.MANIFEST).read_text())
    assert f"cells/ppl_{N}.json" in {e["path"] for e in manifest["files"]}
    rc, err = _frontier(suite if given == "suite" else suite / "cells", tmp_path / "o", capsys)
    assert rc == 0 and err == "", err


def test_frontier_refuses_a_killed_run(tmp_path, capsys):
    suite = _killed(tmp_path / "suite")
    for cells in (suite, suite / "cells"):
        rc, err = _frontier(cells, tmp_path / "o", capsys)
        _refused(rc, err, tmp_path / "o", str(suite), "is incomplete", "did not finish")


def test_frontier_refuses_a_run_still_writing(tmp_path, capsys):
    suite = tmp_path / "suite"
    make_cells(suite)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from hikv.io import hold_out_dir; "
         "hold_out_dir(sys.argv[1]); print('held', flush=True); time.sleep(120)", str(suite)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rc, err = _frontier(suite, tmp_path / "o", capsys)
        _refused(rc, err, tmp_path / "o", str(suite), "still writing it",
                 f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait(timeout=60)


@pytest.mark.parametrize("change", ["size", "same_size", "added", "deleted"])
def test_frontier_refuses_a_cell_changed_after_the_manifest(tmp_path, capsys, change):
    suite = _finished(tmp_path / "suite")
    cell = suite / "cells" / f"passkey_prompt_{N}.json"
    words = [str(cell), "modified after the run finished"]
    if change == "size":
        cell.write_text(cell.read_text() + "\n")
    elif change == "same_size":
        text = cell.read_text()
        assert '"complete"' in text
        cell.write_text(text.replace('"complete"', '"COMPLETE"', 1))
    elif change == "added":
        cell = suite / "cells" / f"niah_single_prompt_{N}.json"
        write_rows(cell.parent, cell.stem, [{"label": "full"}], {"model": "tiny"})
        words = [str(cell), "not in", hio.MANIFEST]
    else:
        (suite / "cells" / f"vt_prompt_{N}.json").unlink()
        words = [f"vt_prompt_{N}.json", "deleted or replaced after the run finished"]
    rc, err = _frontier(suite, tmp_path / "o", capsys)
    _refused(rc, err, tmp_path / "o", *words)


def test_frontier_warns_on_a_folder_without_manifest(tmp_path, capsys):
    suite = make_cells(tmp_path / "suite")             # as committed results: no run's traces
    rc, err = _frontier(suite, tmp_path / "o", capsys)
    assert rc == 0, err
    assert err.splitlines() == [f"hikv frontier: warning: {suite / 'cells'} has no "
                                f"{hio.MANIFEST} (written before manifests existed, or not by "
                                "a hikv command): its completeness cannot be verified"]
    (suite / "cells" / f".ppl_{N}.json.x1y2.tmp").write_text("half")   # an interrupted write
    rc, err = _frontier(suite / "cells", tmp_path / "o2", capsys)
    _refused(rc, err, tmp_path / "o2", str(suite / "cells"), "temporary files",
             f".ppl_{N}.json.x1y2.tmp")


def test_the_committed_cells_are_read_with_a_warning(tmp_path, capsys):
    rc = main(["frontier", "--model", "smollm2-135m", "--length", "2048", "--no-area",
               "--no-plots", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 0, err
    assert err.startswith("hikv frontier: warning: ") and "cannot be verified" in err, err


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("manifest", sorted(
    str(m.relative_to(ROOT)) for m in (ROOT / "docs" / "results").rglob(hio.MANIFEST)))
def test_every_committed_result_folder_is_what_its_manifest_lists(manifest):
    assert hio.folder_complete((ROOT / manifest).parent) == (True, "")


def test_a_manifest_that_is_not_one_is_refused(tmp_path, capsys):
    suite = _finished(tmp_path / "suite")
    for text in ("", "{", "[]", '{"schema": "hikv.manifest/1", "files": [{"path": 1}]}'):
        (suite / hio.MANIFEST).write_text(text)
        rc, err = _frontier(suite, tmp_path / "o", capsys)
        _refused(rc, err, tmp_path / "o", str(suite / hio.MANIFEST))


# --------------------------------------------------------------------------- accuracy table
PPL_ROWS = [{"label": "full", "family": "full", "method": "full", "budget": None, "ppl": 3.0,
             "window": 64, "bytes_ideal": 100.0, "bytes_burst": 128.0},
            {"label": "snapkv@16", "family": "snapkv", "method": "snapkv", "budget": 16,
             "ppl": 3.01, "window": 64, "bytes_ideal": 10.0, "bytes_burst": 16.0}]


def _perplexity_run(out: Path, *, finish: bool = True) -> Path:
    """What `hikv accuracy perplexity --out OUT` leaves: its two files, then its manifest."""
    hio.prepare_out_dir(out, ("perplexity.csv", "perplexity.json"))
    path = write_rows(out, "perplexity", PPL_ROWS, {"model": "tiny", "preset": "tiny"})
    if finish:
        hio.finish_out_dirs(["hikv", "accuracy", "perplexity", "--out", str(out)])
    else:
        hio.release_out_dir(out)
    return path


def _table(ppl: Path, out: Path, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    rc = main(["accuracy", "table", "--perplexity", str(ppl), "--out", str(out)])
    return rc, capsys.readouterr().err.strip()


def test_accuracy_table_checks_its_input_files(tmp_path, capsys):
    ppl = _perplexity_run(tmp_path / "p")
    rc, err = _table(ppl, tmp_path / "t", capsys)
    assert rc == 0 and err == "", err
    ppl.write_text(ppl.read_text().replace("3.01", "3.00"))            # same size, new value
    rc, err = _table(ppl, tmp_path / "t2", capsys)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"--perplexity {ppl}: modified after the run finished" in err
    assert not (tmp_path / "t2").exists(), "refused before --out is touched"

    killed = _perplexity_run(tmp_path / "k", finish=False)
    rc, err = _table(killed, tmp_path / "t3", capsys)
    assert rc == 2 and f"--perplexity {tmp_path / 'k'} is incomplete" in err, err

    plain = tmp_path / "plain"                    # a file outside any run's folder: as it is
    write_rows(plain, "perplexity", PPL_ROWS, {"model": "tiny"})
    (plain / ".notes.txt.k3j4.tmp").write_text("someone else's")
    rc, err = _table(plain / "perplexity.json", tmp_path / "t4", capsys)
    assert rc == 0 and err == "", err


def test_a_folder_shared_by_two_commands_lists_both_in_its_manifest(tmp_path, capsys):
    out = tmp_path / "o"
    ppl = _perplexity_run(out)
    first = json.loads((out / hio.MANIFEST).read_text())

    def passkey(finish: bool) -> None:
        hio.prepare_out_dir(out, ("passkey.csv", "passkey.json"), force=True)
        assert not (out / hio.MANIFEST).exists()           # incomplete while it runs
        write_rows(out, "passkey", [{"label": "full"}], {"model": "tiny"})
        if finish:
            hio.finish_out_dirs(["hikv", "accuracy", "passkey", "--out", str(out)])
        else:
            hio.release_out_dir(out)

    passkey(finish=False)                                   # killed: the folder is incomplete
    with pytest.raises(ParamError, match="is incomplete"):
        hio.check_result_file(ppl)
    passkey(finish=True)                                    # the rerun finishes
    manifest = json.loads((out / hio.MANIFEST).read_text())
    by_path = {e["path"]: e for e in manifest["files"]}
    assert set(by_path) == {"perplexity.csv", "perplexity.json", "passkey.csv",
                            "passkey.json"}
    assert manifest["arguments"][:3] == ["hikv", "accuracy", "passkey"]
    assert by_path["perplexity.json"]["arguments"] == first["arguments"]
    assert by_path["perplexity.json"]["sha256"] == next(
        e["sha256"] for e in first["files"] if e["path"] == "perplexity.json")
    assert not (out / hio.MANIFEST_KEPT).exists()
    assert hio.folder_complete(out) == (True, "")
    assert hio.check_result_file(ppl).state == "complete"
    rc, err = _table(ppl, tmp_path / "t", capsys)
    assert rc == 0 and err == "", err


def test_a_sub_folder_with_its_own_manifest_and_the_readme_are_left_out(tmp_path):
    """Another command's finished output inside a run's folder (``hikv frontier --out
    DIR/frontier``) is listed by its own manifest, not the folder's, and the folder's
    hand-written README.md by none: rerunning that command or editing the README leaves the
    folder's manifest true."""
    out = tmp_path / "o"
    _perplexity_run(out)

    def frontier(text: str) -> None:
        sub = out / "frontier"
        hio.prepare_out_dir(sub, ("front.csv",), force=True)
        (sub / "front.csv").write_text(text)
        hio.finish_out_dirs(["hikv", "frontier", "--out", str(sub)])

    frontier("a\n1\n")
    (out / hio.FOLDER_README).write_text("# how this folder was made\n")
    hio.prepare_out_dir(out, ())                            # the folder's run again
    hio.finish_out_dirs(["hikv", "accuracy", "run", "--out", str(out)])
    listed = {e["path"] for e in json.loads((out / hio.MANIFEST).read_text())["files"]}
    assert listed == {"perplexity.csv", "perplexity.json"}
    frontier("a\n2\n")                                     # the sub-folder's command again
    (out / hio.FOLDER_README).write_text("# edited by hand\n")
    assert hio.folder_complete(out) == (True, "")
    assert hio.folder_complete(out / "frontier") == (True, "")


def test_run_folder_states(tmp_path):
    assert hio.run_folder(tmp_path / "nothing").state == "unverified"
    held = tmp_path / "held"
    hio.prepare_out_dir(held, ("a.csv",))
    try:
        assert hio.run_folder(held).state == "own"        # a command reading what it writes
    finally:
        hio.release_out_dir(held)
    with pytest.raises(ParamError, match="did not finish"):
        hio.run_folder(held)


# --------------------------------------------------------------------------- accuracy run
from test_accuracy_cli import tiny_model  # noqa: E402,F401  (the shared fixture)


def test_accuracy_run_resumes_its_own_folder_and_finishes_with_a_manifest(
        tiny_model, tmp_path, capsys):  # noqa: F811
    model, cache = tiny_model
    out = tmp_path / "seed"
    args = ["accuracy", "run", "--suite", "seed-smoke", "--model", str(model), "--cache",
            str(cache), "--preset", "tiny", "--out", str(out), "--suite-protocols", "prompt",
            "--trials", "2", "--windows", "2"]
    hio.prepare_out_dir(out, ())                 # a killed earlier run: lock, no manifest
    hio.release_out_dir(out)
    t0 = time.monotonic()
    assert main(args) == 0                       # resumes, it is not refused
    ok, why = hio.folder_complete(out)
    assert ok, why
    names = {e["path"] for e in json.loads((out / hio.MANIFEST).read_text())["files"]}
    assert "cells/ppl_1024.json" in names and "seed_table.md" in names
    name = json.loads((out / "cells" / "ppl_1024.json").read_text())["meta"]["shape"]["name"]
    capsys.readouterr()
    fr = ["frontier", "--model", name, "--length", "1024", "--cells", str(out), "--preset",
          "tiny", "--no-area", "--no-plots"]
    assert main([*fr, "--out", str(tmp_path / "f1")]) == 0
    assert capsys.readouterr().err == ""
    assert main(args) == 0, f"resumed again ({time.monotonic() - t0:.0f} s in all)"
    assert hio.folder_complete(out) == (True, "")


def test_code_version_read_before_the_run_writes(tmp_path, monkeypatch, request):
    """A run's results and manifest carry the code version read when it took its folder: the
    files it writes into a committed result folder (and the manifest it moves aside) change
    tracked files, which must not turn its own version into ``-dirty``."""
    out = tmp_path / "out"
    out.mkdir()

    def describe(*args, **kwargs):        # `git describe --dirty` of a tree holding `out`
        tag = "abc123def456" + ("-dirty" if any(out.iterdir()) else "")
        return subprocess.CompletedProcess(args, 0, stdout=tag + "\n", stderr="")

    hio.code_version.cache_clear()
    request.addfinalizer(hio.code_version.cache_clear)
    monkeypatch.setattr(hio.subprocess, "run", describe)
    hio.prepare_out_dir(out, ())
    make_cells(out)                        # the tree changes under the run
    manifest = hio.finish_out_dirs(RUN)[0]
    assert json.loads(manifest.read_text())["code_version"].endswith("+abc123def456")
