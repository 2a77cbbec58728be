"""``benchmarks/task_trials_needed.py``: the trial counts docs/RESULTS.md quotes come out of the
committed Gemma 8k needle cell, and bad input exits 2 or names the flag."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CELL = ROOT / "docs/results/gemma3/seed-ni/cells/niah_single_prompt_8192.json"
_spec = importlib.util.spec_from_file_location("task_trials_needed",
                                               ROOT / "benchmarks/task_trials_needed.py")
ttn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ttn)


def test_the_gemma_8k_counts(capsys):
    assert ttn.main([str(CELL)]) == 0
    out = capsys.readouterr().out
    assert "ds@2048/r64: 56/60 against 57/60, lower bound -7.3 points; decides at 120 trials" in out
    assert ("hikv-query_aware@1448/lowbit4c128: 55/60 against 57/60, lower bound -9.7 points; "
            "decides at 480 trials") in out


def test_equal_scores_on_the_same_trials_decide_at_once():
    s = [1.0] * 57 + [0.0] * 3
    assert ttn.trials_needed(s, s, level=0.95, margin=0.05, max_repeats=3) == 60


def test_bad_input(tmp_path, capsys):
    assert ttn.main([str(tmp_path / "none.json")]) == 2
    assert "not a task cell" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ttn.main([str(CELL), "--level", "2"])
    assert "--level 2.0 is out of range" in capsys.readouterr().err
