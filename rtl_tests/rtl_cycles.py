"""Record the sorter's and the loader's cycles measured in cocotb as ``hikv.rtl_cycles/1`` rows
(:mod:`hikv.sim.cost.validate`), per preset, into tests/golden/rtl_cycles.json.

One plan (:data:`PLANS`) says which regression measures each preset, so the recording script
(``python benchmarks/record_rtl_cycles.py --preset NAME``) and the CI check of the tiny rows
(rtl_tests/test_rtl_cycles.py) run exactly the same jobs:

* sorter: the randomized regression (``hikv rtl --block sorter``), whose rows are the distinct
  jobs it ran without backpressure;
* loader: the timing jobs only (``testcase="loader_timing"``): dense rows, masked records and
  channel pages, with every token, runs with gaps and sparse tokens, plus random jobs, at a
  short read latency and at the preset's memory latency (``mem_latency_s x clock_hz``), at one
  and at the most reads in flight.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hikv.params import Config, ParamError
from hikv.presets import get_preset

__all__ = ["GOLDEN", "Plan", "PLANS", "plan", "measure", "merge_golden", "golden_rows"]

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden" / "rtl_cycles.json"


@dataclass(frozen=True)
class Plan:
    """What to run for one preset."""

    seed: int
    sorter_jobs: int                        # random jobs per mode
    latencies: tuple[int, ...]              # loader timing jobs: read latencies (cycles)
    limits: tuple[int, ...] | None          # loader timing jobs: outstanding limits (None: all)


def plan(cfg: Config) -> Plan:
    """The measurement plan of ``cfg`` (its memory latency in cycles among the latencies)."""
    lat = max(1, round(cfg.accel.mem_latency_s * cfg.accel.clock_hz))
    if cfg.name == "tiny":
        return Plan(seed=1, sorter_jobs=300, latencies=(8, lat), limits=None)
    return Plan(seed=1, sorter_jobs=20, latencies=(8, lat),
                limits=(1, cfg.loader.max_outstanding))


PLANS = ("tiny", "default", "paper")


def measure(preset: str, blocks: tuple[str, ...] = ("sorter", "loader")
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run the plan's regressions for ``preset``; (measurement rows, sources).

    Raises :class:`~hikv.params.ParamError` when a regression fails (its summary attached).
    """
    from hikv.rtl_tests import loader_launch, sorter_rtl

    cfg = get_preset(preset)
    p = plan(cfg)
    rows: list[dict[str, Any]] = []
    sources = []
    for block in blocks:
        t0 = time.perf_counter()
        if block == "sorter":
            rep = sorter_rtl.run_regression(cfg, seed=p.seed, jobs=p.sorter_jobs)
            cmd = f"hikv rtl --block sorter --preset {preset} --seed {p.seed} " \
                  f"--jobs {p.sorter_jobs}"
        else:
            rep = loader_launch.run_regression(cfg, seed=p.seed, jobs=1,
                                               testcase="loader_timing",
                                               timing_latencies=p.latencies,
                                               timing_limits=p.limits)
            cmd = (f"run_regression(get_preset({preset!r}), seed={p.seed}, "
                   f"testcase='loader_timing', timing_latencies={p.latencies}, "
                   f"timing_limits={p.limits}) (hikv.rtl_tests.loader_launch)")
        wall = time.perf_counter() - t0
        path = rep.metrics.get("rtl_cycles")
        if not rep.passed or not path:
            raise ParamError(f"{block} regression for preset {preset} failed:\n"
                             + "\n".join(rep.lines))
        data = json.loads(Path(path).read_text())
        rows += [dict(r, block=block, preset=preset) for r in data["measurements"]]
        sources.append({"block": block, "preset": preset, "command": cmd,
                        "jobs": len(data["measurements"]), "wall_s": round(wall, 1)})
    return rows, sources


def _key(row: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in row.items() if k != "cycles"}, sort_keys=True)


def golden_rows(preset: str, block: str, path: Path = GOLDEN) -> list[dict[str, Any]]:
    """The recorded rows of one (preset, block)."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    return [r for r in data["measurements"] if r["preset"] == preset and r["block"] == block]


def merge_golden(rows: list[dict[str, Any]], sources: list[dict[str, Any]],
                 path: Path = GOLDEN) -> None:
    """Replace the golden rows (and sources) of every (block, preset) in ``sources``."""
    data = json.loads(path.read_text()) if path.exists() else {
        "schema": "hikv.rtl_cycles/1", "sources": [], "measurements": []}
    done = {(s["block"], s["preset"]) for s in sources}
    keep = [r for r in data["measurements"] if (r["block"], r["preset"]) not in done]
    srcs = [s for s in data.get("sources", []) if (s["block"], s["preset"]) not in done]
    order = {p: i for i, p in enumerate(PLANS)}
    srcs = sorted(srcs + sources, key=lambda s: (order.get(s["preset"], 9), s["block"]))
    meas = sorted(keep + rows, key=lambda r: (order.get(r["preset"], 9), r["block"], _key(r)))
    data = {"schema": "hikv.rtl_cycles/1",
            "source": "python benchmarks/record_rtl_cycles.py --preset NAME (per block and "
                      "preset: the command and its wall time in 'sources')",
            "sources": srcs, "measurements": meas}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=None, separators=(",", ":"))
                    .replace('{"block"', '\n{"block"') + "\n")
