"""Check a timing model's cycle predictions against cycles measured on the RTL in cocotb.

The RTL regressions (``hikv rtl --block sorter|loader``) measure cycles per job; recorded as
:class:`CycleMeasurement` rows (JSON, schema ``hikv.rtl_cycles/1``), they are compared with
:class:`~hikv.sim.cost.timing.TimingModel` predictions for the same job by :func:`compare`. The
acceptance criterion is equality for every preset; :func:`compare` reports every mismatch.

File format::

    {"schema": "hikv.rtl_cycles/1", "source": "the command that measured them",
     "measurements": [
        {"block": "sorter", "preset": "tiny", "mode": "stage1", "n": 64, "k": 16,
         "cycles": 53},
        {"block": "sorter", "preset": "tiny", "mode": "stage2", "d": 16, "k": 12, "count": 4,
         "cycles": 27},
        {"block": "loader", "preset": "tiny", "mode": "dense", "runs": [[0, 64]], "base": 0,
         "kept": 0, "channels": [], "mem_latency_cycles": 8, "outstanding": 2,
         "bytes": 2048, "requests": 64, "cycles": 1030}]}

A loader row with ``runs`` (the retained slots as ``[start, length]`` runs) or
``slot_mask`` (hex, bit ``i`` for slot ``i``) describes its job in full and is predicted by the
timing model's ``loader_job_cycles`` (the cycle-level model); a row with only ``bytes``,
``requests`` and ``mem_latency_cycles`` by ``loader_cycles`` (the closed form). Fields a row
carries for information only (``name``) are ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hikv.params import ParamError
from hikv.presets import get_preset
from hikv.sim.cost.timing import TimingModel

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


def _slots(job: dict[str, Any]) -> list[int]:
    if "slot_mask" in job:
        m = int(job["slot_mask"], 16)
        return [i for i in range(m.bit_length()) if m >> i & 1]
    return [s for start, length in job["runs"] for s in range(start, start + length)]


def predict(timing: TimingModel, m: CycleMeasurement) -> float:
    """The timing model's cycles for the measured job, with the preset's block parameters."""
    cfg = get_preset(m.preset)
    job = {k: v for k, v in m.job.items() if k != "name"}
    if m.block == "sorter":
        mode = job.pop("mode")
        return float(timing.sorter_cycles(cfg.sorter, mode, **job))
    if "runs" in job or "slot_mask" in job:
        fn = getattr(timing, "loader_job_cycles", None)
        if fn is None:
            raise ParamError(f"timing model {timing.name!r} cannot price a fully described "
                             "loader job (no loader_job_cycles)")
        return float(fn(cfg.loader, cfg.layout, mode=job["mode"], slots=_slots(job),
                        base=job.get("base", 0), kept=job.get("kept", 0),
                        channels=job.get("channels", ()),
                        mem_latency_cycles=job["mem_latency_cycles"],
                        outstanding=job.get("outstanding")))
    return float(timing.loader_cycles(cfg.loader, cfg.layout, bytes=job["bytes"],
                                      requests=job["requests"],
                                      mem_latency_cycles=job["mem_latency_cycles"]))


def compare(timing: TimingModel, measurements: list[CycleMeasurement]) -> list[Mismatch]:
    """Every measurement whose prediction differs from the measured cycles."""
    out = []
    for m in measurements:
        p = predict(timing, m)
        if p != m.cycles:
            out.append(Mismatch(m, p))
    return out
