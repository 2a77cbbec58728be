"""Timing-model validation against recorded RTL cycles (hikv.sim.validate)."""

from __future__ import annotations

import json

import pytest

from hikv.params import ParamError
from hikv.presets import get_preset
from hikv.sim import validate as V
from hikv.sim.timing import ProvisionalTiming, default_timing


def _file(tmp_path, rows):
    f = tmp_path / "cycles.json"
    f.write_text(json.dumps({"schema": V.RTL_CYCLES_SCHEMA, "measurements": rows}))
    return f


def test_compare_reports_only_mismatches(tmp_path):
    t = ProvisionalTiming()
    cfg = get_preset("tiny")
    right = int(t.sorter_cycles(cfg.sorter, "stage1", n=64, k=16))
    ld = int(t.loader_cycles(cfg.loader, cfg.layout, bytes=256, requests=4,
                             mem_latency_cycles=10))
    ms = V.load_measurements(_file(tmp_path, [
        {"block": "sorter", "preset": "tiny", "mode": "stage1", "n": 64, "k": 16,
         "cycles": right},
        {"block": "sorter", "preset": "tiny", "mode": "stage1", "n": 64, "k": 16,
         "cycles": right + 1},
        {"block": "loader", "preset": "tiny", "bytes": 256, "requests": 4,
         "mem_latency_cycles": 10, "cycles": ld}]))
    bad = V.compare(t, ms)
    assert [(b.measurement.cycles, b.predicted) for b in bad] == [(right + 1, right)]


def test_bad_files(tmp_path):
    with pytest.raises(ParamError, match="block"):
        V.load_measurements(_file(tmp_path, [{"block": "pe", "preset": "tiny", "cycles": 1}]))
    with pytest.raises(ParamError, match="cycles"):
        V.load_measurements(_file(tmp_path, [{"block": "sorter", "preset": "tiny"}]))


def test_rtl_cycles_equal_the_timing_model():
    """Acceptance check of issue 6, active once the RTL formulas are wired (see
    docs/cost_model.md, 'What remains to wire')."""
    t = default_timing()
    if t.provisional:
        pytest.skip("sorter/loader timing is still the PROVISIONAL analytic model: the RTL "
                    "formulas and recorded cocotb cycles are not wired yet")
    from pathlib import Path

    rec = Path(__file__).parent / "golden" / "rtl_cycles.json"
    assert rec.exists(), f"{rec} missing: record cycles from the RTL regressions"
    bad = V.compare(t, V.load_measurements(rec))
    assert not bad, "\n".join(f"{b.measurement}: predicted {b.predicted}" for b in bad)
