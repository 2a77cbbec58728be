"""The recorded RTL cycles cannot go stale: re-measure the tiny preset's sorter and loader jobs
in cocotb (the same plan as benchmarks/record_rtl_cycles.py) and require them to equal both the
cost model's timing (hikv.sim.cost.timing.RtlTiming) and the rows in tests/golden/rtl_cycles.json.

After an intended RTL timing change: ``HIKV_UPDATE_GOLDEN=1 pytest rtl_tests/test_rtl_cycles.py``
refreshes the tiny rows; ``python benchmarks/record_rtl_cycles.py --preset default --preset
paper`` the others (tests/test_cost_validate.py checks every preset against the model).
"""

from __future__ import annotations

import os

import pytest

from hikv.rtl_tests.rtl_cycles import golden_rows, measure, merge_golden
from hikv.sim.cost import validate as V
from hikv.sim.cost.timing import default_timing

pytestmark = pytest.mark.rtl


def _measurements(rows):
    return [V.CycleMeasurement(block=r["block"], preset=r["preset"], cycles=r["cycles"],
                               job={k: v for k, v in r.items()
                                    if k not in ("block", "preset", "cycles")})
            for r in rows]


def test_tiny_cycles_equal_the_model_and_the_recorded_table():
    rows, sources = measure("tiny")
    bad = V.compare(default_timing(), _measurements(rows))
    assert not bad, "\n".join(f"{b.measurement}: model {b.predicted}" for b in bad[:10])
    if os.environ.get("HIKV_UPDATE_GOLDEN") == "1":
        merge_golden(rows, sources)
    for block in ("sorter", "loader"):
        now = sorted((r for r in rows if r["block"] == block), key=repr)
        gold = sorted(golden_rows("tiny", block), key=repr)
        assert len(now) >= 30, (block, len(now))
        assert now == gold, (f"tiny {block}: measured cycles differ from "
                             "tests/golden/rtl_cycles.json (refresh with HIKV_UPDATE_GOLDEN=1 "
                             "if the RTL's timing changed on purpose)")
