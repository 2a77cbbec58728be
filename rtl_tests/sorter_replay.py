"""Replay your own score or element vectors through the sorter's generated RTL (Verilator).

Example (tiny preset: P=4 lanes, 8-bit keys, n <= 64, k <= 16, d <= 16)::

    from hikv.presets import get_preset
    from hikv.rtl_tests.sorter_replay import run_sorter

    cfg = get_preset("tiny")
    res = run_sorter(cfg, stage1=[5, 9, 9, 1, 7, 3], k=3)
    res.indices      # [[1, 2, 4]]   ties go to the lower index, ascending order
    res.cycles       # 16: measured in the RTL (first input beat to last output beat)
    res.formula_cycles, res.matches_golden   # 16, True

    res = run_sorter(cfg, stage2=[[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]], r=3)
    res.indices      # [[4, 5, 7], [3, 5, 7]]

Keys are unsigned ``key_width``-bit integers. Float scores (lists of floats, numpy arrays or
torch tensors) are converted with :func:`hikv.model.refs.keys.float_to_key` in the preset's
``key_format`` (magnitudes: pass non-negative values). Stage I labels default to
``0 .. n-1`` and must increase. Each call builds the preset once (cached) and starts one
simulator process; pass several jobs to :func:`replay` to amortise the start-up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hikv.params import Config, ParamError

from .sorter_jobs import STAGE1, STAGE2, SorterJob, expected_output

__all__ = ["SorterRun", "run_sorter", "replay", "to_keys"]


@dataclass(frozen=True)
class SorterRun:
    """What the RTL did with one job."""

    mode: str
    indices: list[list[int]]          # selected indices per segment (Stage I: one list)
    keys: list[list[int]]             # their keys
    cycles: int                       # measured: first input beat to last output beat
    formula_cycles: int               # hikv.hw.sorter_timing
    matches_golden: bool              # equal to hikv.model.refs.sorter


def to_keys(values: Any, cfg: Config) -> list[int]:
    """Unsigned sorter keys from integers (kept) or floats (``float_to_key``)."""
    import torch

    t = torch.as_tensor(values)
    if t.ndim != 1:
        raise ParamError(f"a score vector must be one-dimensional, got shape {tuple(t.shape)}")
    if t.is_floating_point():
        from hikv.model.refs.keys import float_to_key

        t = float_to_key(t, cfg.key_format, cfg.sorter.key_width)
    return [int(x) for x in t.tolist()]


def replay(cfg: Config, jobs: Sequence[SorterJob], *, simulator: str = "verilator",
           waves: bool = False) -> list[SorterRun]:
    """Run ``jobs`` back to back through the RTL of ``cfg`` without backpressure."""
    import shutil
    import tempfile
    from pathlib import Path

    from hikv.hw.sorter_timing import SorterTiming
    from hikv.toolchain import cache_dir

    from .sorter_rtl import run_sim

    for job in jobs:
        job.check(cfg.sorter)
    timing = SorterTiming.from_params(cfg.sorter)
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=cache_dir(), delete=False) as f:
        json.dump([j.to_dict() for j in jobs], f)
        path = Path(f.name)
    try:
        run, data = run_sim(cfg, "replay", seed=0, extra={"replay": str(path)}, waves=waves,
                            simulator=simulator)
    finally:
        path.unlink(missing_ok=True)
    if waves and run.waves:
        print(f"sorter replay waves: {run.waves}")
    elif run.passed:
        shutil.rmtree(run.results_xml.parent, ignore_errors=True)
    if not run.passed or len(data.get("results", [])) != len(jobs):
        raise RuntimeError(f"sorter replay failed in the simulator (see {run.build_dir})")
    out = []
    for job, res in zip(jobs, data["results"], strict=True):
        if res["error"]:
            raise RuntimeError(f"the sorter raised its error flag on {job.describe(4)}")
        segs = [[tuple(x) for x in s] for s in res["segments"]]
        out.append(SorterRun(
            mode=job.mode, indices=[[i for _, i in s] for s in segs],
            keys=[[k for k, _ in s] for s in segs], cycles=res["cycles"],
            formula_cycles=job.cycles(timing),
            matches_golden=segs == expected_output(job)))
    return out


def run_sorter(cfg: Config, *, stage1: Any = None, k: int | None = None,
               labels: Sequence[int] | None = None, stage2: Any = None, r: int | None = None,
               simulator: str = "verilator", waves: bool = False) -> SorterRun:
    """One job through the RTL: Stage I (``stage1`` scores, ``k``, optional ``labels``) or
    Stage II (``stage2`` vectors of equal length, ``r``). Returns a :class:`SorterRun`."""
    if (stage1 is None) == (stage2 is None):
        raise ParamError("run_sorter needs exactly one of stage1= (scores) or stage2= "
                         "(vectors)")
    if stage1 is not None:
        if k is None:
            raise ParamError("run_sorter(stage1=...) needs k")
        keys = to_keys(stage1, cfg)
        lab = tuple(range(len(keys))) if labels is None else tuple(int(x) for x in labels)
        job = SorterJob(STAGE1, int(k), (tuple(keys),), lab)
    else:
        if r is None:
            raise ParamError("run_sorter(stage2=...) needs r")
        job = SorterJob(STAGE2, int(r), tuple(tuple(to_keys(v, cfg)) for v in stage2))
    return replay(cfg, [job], simulator=simulator, waves=waves)[0]
