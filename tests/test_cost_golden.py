"""Golden regression of the cost model: every number the report and the area flow produce for
the presets, recorded in tests/golden/cost_model.json, so any change shows in review.

Refresh after an intended change (then review the diff of the JSON file):

    HIKV_UPDATE_GOLDEN=1 pytest tests/test_cost_golden.py
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from cost_helpers import cells_or_skip

from hikv.presets import PRESETS, get_preset
from hikv.sim.explore.report import build_report

GOLDEN = Path(__file__).parent / "golden" / "cost_model.json"
UPDATE = os.environ.get("HIKV_UPDATE_GOLDEN") == "1"
FIELDS = ("bytes_burst", "bytes_ideal", "resident_bytes_per_head", "time_s", "roofline_s",
          "bound", "energy_j", "select_cycles_per_head", "sort_cycles_per_head",
          "attend_cycles_per_head", "layer_cycles")


def _model_numbers() -> dict:
    out = {}
    for name in sorted(PRESETS):
        rep = build_report(get_preset(name), area=False, sections=False)
        out[name] = {"timing_model": rep.timing_model,
                     "rows": {r.label: {**{f: getattr(r, f) for f in FIELDS},
                                        **{f"energy_{k}_j": v
                                           for k, v in r.energy_parts_j.items()}}
                              for r in rep.rows}}
    return out


def _area_numbers() -> dict:
    from hikv.sim.cost.engines import KINDS, with_kind
    from hikv.sim.eda.area import accelerator_area

    synth = {}
    for kind in KINDS:                  # tiny's area with each Stage I engine
        synth.update(accelerator_area(with_kind(get_preset("tiny"), kind)).synth)
    return {"yosys": synth["mac_lane"].yosys,
            "units": {k: {"nand2_equivalents": v.nand2_equivalents, "cells": v.cells}
                      for k, v in sorted(synth.items())}}


def _diff(a, b, path=""):
    """Paths where ``a`` and ``b`` differ (floats to 1e-9 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in one" for k in set(a) ^ set(b)]
        for k in set(a) & set(b):
            out += _diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, int | float) and isinstance(b, int | float) and (
                math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-30)):
            return []
        return [f"{path}: golden {a!r} now {b!r}"]
    return [] if a == b else [f"{path}: golden {a!r} now {b!r}"]


def _load() -> dict:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def _store(key: str, value: dict) -> None:
    data = _load()
    data[key] = value
    data["_refresh"] = "HIKV_UPDATE_GOLDEN=1 pytest tests/test_cost_golden.py"
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def test_model_numbers_match_golden():
    now = _model_numbers()
    if UPDATE:
        _store("model", now)
    gold = _load().get("model")
    assert gold is not None, f"no golden file: run HIKV_UPDATE_GOLDEN=1 pytest {__file__}"
    diffs = _diff(gold, json.loads(json.dumps(now)))
    assert not diffs, ("cost model numbers changed (refresh with HIKV_UPDATE_GOLDEN=1 if "
                       "intended):\n" + "\n".join(sorted(diffs)[:40]))


def test_area_numbers_match_golden():
    cells_or_skip()
    now = _area_numbers()
    if UPDATE:
        _store("area", now)
    gold = _load().get("area")
    assert gold is not None, f"no golden area: run HIKV_UPDATE_GOLDEN=1 pytest {__file__}"
    if gold["yosys"] != now["yosys"]:
        pytest.skip(f"golden area recorded with {gold['yosys']}, this is {now['yosys']}: "
                    "refresh with HIKV_UPDATE_GOLDEN=1")
    diffs = _diff(gold, json.loads(json.dumps(now)))
    assert not diffs, "synthesised areas changed:\n" + "\n".join(sorted(diffs)[:40])
