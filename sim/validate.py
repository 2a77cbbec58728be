"""Check a timing model's cycle predictions against cycles measured on the RTL in cocotb.

The RTL regressions (``hikv rtl --block sorter|loader``) measure cycles per job; recorded as
:class:`CycleMeasurement` rows (JSON, schema ``hikv.rtl_cycles/1``), they are compared with
:class:`~hikv.sim.timing.TimingModel` predictions for the same job by :func:`compare`. The issue's
acceptance criterion is equality for every preset; :func:`compare` reports every mismatch.

File format::

    {"schema": "hikv.rtl_cycles/1", "source": "hikv rtl --block sorter --preset tiny --seed 1",
     "measurements": [
        {"block": "sorter", "preset": "tiny", "mode": "stage1", "n": 64, "k": 16,
         "cycles": 53},
        {"block": "sorter", "preset": "tiny", "mode": "stage2", "d": 16, "k": 12, "count": 4,
         "cycles": 27},
        {"block": "loader", "preset": "tiny", "bytes": 1024, "requests": 8,
         "mem_latency_cycles": 20, "cycles": 300}]}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hikv.params import ParamError
from hikv.presets import get_preset

from .timing import TimingModel

__all__ = ["CycleMeasurement", "Mismatch", "load_measurements", "predict", "compare",
           "RTL_CYCLES_SCHEMA"]

RTL_CYCLES_SCHEMA = "hikv.rtl_cycles/1"


@dataclass(frozen=True)
class CycleMeasurement:
    block: str                     # "sorter" or "loader"
    preset: str
    cycles: int
    job: dict[str, Any] = field(default_factory=dict)   # the job's arguments (see module doc)


@dataclass(frozen=True)
class Mismatch:
    measurement: CycleMeasurement
    predicted: float


def load_measurements(path: str | Path) -> list[CycleMeasurement]:
    """Read a ``hikv.rtl_cycles/1`` file; errors name the row and field."""
    p = Path(path)
    data = json.loads(p.read_text())
    if data.get("schema") != RTL_CYCLES_SCHEMA:
        raise ParamError(f"{p}: schema = {data.get('schema')!r}, expected {RTL_CYCLES_SCHEMA!r}")
    out = []
    for i, row in enumerate(data.get("measurements", [])):
        row = dict(row)
        try:
            block, preset, cycles = row.pop("block"), row.pop("preset"), row.pop("cycles")
        except KeyError as e:
            raise ParamError(f"{p}: measurements[{i}] has no field {e}") from None
        if block not in ("sorter", "loader"):
            raise ParamError(f"{p}: measurements[{i}].block = {block!r} is not 'sorter' or "
                             "'loader'")
        out.append(CycleMeasurement(block=block, preset=preset, cycles=int(cycles), job=row))
    return out


def predict(timing: TimingModel, m: CycleMeasurement) -> float:
    """The timing model's cycles for the measured job, with the preset's block parameters."""
    cfg = get_preset(m.preset)
    if m.block == "sorter":
        job = dict(m.job)
        mode = job.pop("mode")
        return float(timing.sorter_cycles(cfg.sorter, mode, **job))
    return float(timing.loader_cycles(cfg.loader, cfg.layout, **m.job))


def compare(timing: TimingModel, measurements: list[CycleMeasurement]) -> list[Mismatch]:
    """Every measurement whose prediction differs from the measured cycles."""
    out = []
    for m in measurements:
        p = predict(timing, m)
        if p != m.cycles:
            out.append(Mismatch(m, p))
    return out
