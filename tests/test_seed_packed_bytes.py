"""benchmarks/seed_packed_bytes.py on the committed seed-suite cells: the
closed form counts the cells' 64-byte-aligned bytes of the seed's HiKV, and packing its records
lowers them where burst-aligned records do not."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
CELLS = sorted((ROOT / "docs" / "results").glob("*/seed/cells/ppl_*.json"))


spb = load_benchmark("seed_packed_bytes")


@pytest.mark.skipif(not CELLS, reason="no committed seed-suite perplexity cells")
def test_packed_bytes_of_the_committed_cells() -> None:
    rows = [r for p in CELLS for r in spb.cell_rows(p, (8, 2))]
    assert {r["model"] for r in rows} >= {"smollm2-135m", "gemma3-270m"}
    for r in rows:
        # the closed form counts what the golden model counted in the cell (the cell averages
        # the actual compaction phase of its decode steps, the closed form a whole interval)
        assert r["cf_over_cell_64"] == pytest.approx(1.0, abs=2e-3)
        # packed records: fewer bytes than the same selections burst-aligned and than HiKV
        # evicting without Stage II at the same budget; 2-byte alignment never reads more
        assert r["seed_bytes_8"] < r["seed_bytes_64"]
        assert r["seed_bytes_8"] < r["evict_bytes"]
        assert r["seed_bytes_2"] <= r["seed_bytes_8"]


def test_bad_alignment_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        spb.main(["--aligns", "4", "x.json"])
    assert "--aligns" in capsys.readouterr().err


def test_missing_cell_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        spb.main([str(tmp_path / "nope.json")])
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["{}", "not json", '{"meta": {"cell": "passkey_prompt_2048"}}'])
def test_a_file_that_is_not_a_perplexity_cell_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    bad = tmp_path / "cell.json"
    bad.write_text(text)
    with pytest.raises(SystemExit):
        spb.main([str(bad)])
    err = capsys.readouterr().err
    assert "cell" in err and "Traceback" not in err
