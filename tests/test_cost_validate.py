"""Timing-model validation against recorded RTL cycles (hikv.sim.cost.validate)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hikv.params import ParamError, RecordLayout
from hikv.presets import PRESETS, get_preset
from hikv.sim.cost import validate as V
from hikv.sim.cost.timing import RtlTiming, default_timing


def _file(tmp_path, rows):
    f = tmp_path / "cycles.json"
    f.write_text(json.dumps({"schema": V.RTL_CYCLES_SCHEMA, "measurements": rows}))
    return f


def test_compare_reports_only_mismatches(tmp_path):
    t = RtlTiming()
    cfg = get_preset("tiny")
    right = int(t.sorter_cycles(cfg.sorter, "stage1", n=64, k=16))
    ld = int(t.loader_cycles(cfg.loader, cfg.layout, bytes=256, requests=4,
                             mem_latency_cycles=10))
    job = t.loader_job_cycles(cfg.loader, cfg.layout, mode="masked", slots=[0, 1, 2, 5, 9],
                              kept=12, mem_latency_cycles=8, outstanding=1)
    ms = V.load_measurements(_file(tmp_path, [
        {"block": "sorter", "preset": "tiny", "mode": "stage1", "n": 64, "k": 16,
         "cycles": right},
        {"block": "sorter", "preset": "tiny", "mode": "stage1", "n": 64, "k": 16,
         "cycles": right + 1},
        {"block": "loader", "preset": "tiny", "bytes": 256, "requests": 4,
         "mem_latency_cycles": 10, "cycles": ld},
        {"block": "loader", "preset": "tiny", "name": "x", "mode": "masked",
         "runs": [[0, 3], [5, 1], [9, 1]], "base": 0, "kept": 12, "channels": [],
         "mem_latency_cycles": 8, "outstanding": 1, "bytes": 0, "requests": 0,
         "cycles": job},
        {"block": "loader", "preset": "tiny", "name": "y", "mode": "masked",
         "runs": [[0, 3], [5, 1], [9, 1]], "base": 0, "kept": 12, "channels": [],
         "mem_latency_cycles": 8, "outstanding": 1, "bytes": 0, "requests": 0,
         "cycles": job - 1}]))
    bad = V.compare(t, ms)
    assert [(b.measurement.cycles, b.predicted) for b in bad] == [(right + 1, right),
                                                                  (job - 1, job)]


def test_bad_files(tmp_path):
    with pytest.raises(ParamError, match="block"):
        V.load_measurements(_file(tmp_path, [{"block": "pe", "preset": "tiny", "cycles": 1}]))
    with pytest.raises(ParamError, match="cycles"):
        V.load_measurements(_file(tmp_path, [{"block": "sorter", "preset": "tiny"}]))


GOLDEN_CYCLES = Path(__file__).parent / "golden" / "rtl_cycles.json"
#: Presets whose loader rows are not recorded (none: every preset's are, recorded with
#: `python benchmarks/record_rtl_cycles.py --preset P --block loader`). A
#: preset listed here must have no loader rows; one recorded must leave this set.
LOADER_ROWS_PENDING: set[str] = set()


def test_rtl_cycles_equal_the_timing_model():
    """Acceptance check: the cost model's sorter and loader cycles equal the cycles
    measured on the RTL in cocotb, for every preset (tests/golden/rtl_cycles.json, recorded by
    benchmarks/record_rtl_cycles.py; the tiny rows are re-measured in CI by
    rtl_tests/test_rtl_cycles.py)."""
    t = default_timing()
    assert GOLDEN_CYCLES.exists(), f"{GOLDEN_CYCLES} missing: run benchmarks/record_rtl_cycles.py"
    ms = V.load_measurements(GOLDEN_CYCLES)
    seen = {(m.block, m.preset) for m in ms}
    for preset in PRESETS:
        for block in ("sorter", "loader"):
            if block == "loader" and preset in LOADER_ROWS_PENDING:
                assert (block, preset) not in seen, f"{preset}: recorded, drop it from pending"
                continue
            assert (block, preset) in seen, f"no recorded {block} cycles for preset {preset}"
    bad = V.compare(t, ms)
    assert not bad, "\n".join(f"{b.measurement}: predicted {b.predicted}" for b in bad[:20])


def test_recorded_loader_jobs_cover_every_layout_at_the_presets_latency():
    """Every recorded preset's loader rows cover each layout it builds at its own latency and
    outstanding limit."""
    ms = V.load_measurements(GOLDEN_CYCLES)
    for preset in sorted(set(PRESETS) - LOADER_ROWS_PENDING):
        cfg = get_preset(preset)
        lat = round(cfg.accel.mem_latency_s * cfg.accel.clock_hz)
        modes = {m.job["mode"] for m in ms if m.block == "loader" and m.preset == preset
                 and m.job["mem_latency_cycles"] == lat
                 and m.job["outstanding"] == cfg.loader.max_outstanding}
        want = {m.value for m in RecordLayout if cfg.loader.builds(m)}
        assert modes == want, (preset, modes)
