"""Build and run the top-k engine's cocotb regression: the machinery behind
``hikv rtl --block topk`` and the pytest launcher (rtl_tests/test_topk_rtl.py).

The Verilog of a preset is generated once and cached under ``$HIKV_CACHE/verilog`` (keyed by
the sorter parameters, the RTL sources and the Amaranth version); Verilator builds are cached by
:func:`hikv.toolchain.run_cocotb`, one build directory per preset.
"""

from __future__ import annotations

from typing import Any

from hikv.params import Config, to_dict

from .launch import cached_verilog, failure_lines, run_block_regression
from .report import RtlReport

__all__ = ["TOPLEVEL", "default_jobs", "topk_verilog", "run_regression"]

TOPLEVEL = "hikv_topk"
_SOURCES = ("topk.py", "topk_timing.py", "sorter.py", "sorter_net.py", "sorter_compact.py",
            "sorter_timing.py", "uops.py", "verilog.py")


def default_jobs(cfg: Config) -> int:
    """Random jobs when none are asked for: 10^4 on ``tiny`` (about 40 s of simulation), 100
    otherwise (the longest jobs of ``default`` and ``paper`` take thousands of cycles)."""
    return 10_000 if cfg.name == "tiny" else 100


def topk_verilog(cfg: Config) -> str:
    """Verilog of the top-k engine of ``cfg`` (module ``hikv_topk``), cached on disk."""

    def generate() -> str:
        from hikv.hw.topk import make_topk
        from hikv.hw.verilog import to_verilog

        return to_verilog(make_topk(cfg), TOPLEVEL)

    return cached_verilog("topk", to_dict(cfg.sorter), _SOURCES, generate)


def _summary(data: dict[str, Any], passed: bool) -> list[str]:
    lines = []
    st = data.get("stats")
    if st:
        lines.append(f"stage1: {st['jobs']} jobs ({st['random']} random, {st['directed']} "
                     f"directed), {st['items_out']} items out; cycles == formula for "
                     f"{st['cycle_checks']} jobs without backpressure")
        lines.append(f"refused configurations (error, cleared by reset): "
                     f"{', '.join(data.get('refused', []))}")
    for ex in data.get("examples", []):
        lines.append(f"  stage1 n={ex['n']} k={ex['k']}: {ex['cycles']} cycles measured, "
                     f"formula {ex['formula']}")
    if st:
        lines.append(f"resets in the middle of a job: {st['resets']}, each followed by a "
                     "clean job")
    return lines + failure_lines(data, passed)


def run_regression(cfg: Config, *, seed: int, jobs: int | None = None, waves: bool = False,
                   simulator: str = "verilator") -> RtlReport:
    """Randomized regression of the top-k engine of ``cfg`` against the golden model.

    ``jobs`` random Stage I jobs (default :func:`default_jobs`) after the refused
    configurations and the directed corner cases; every output compared with
    :func:`hikv.model.refs.sorter.stage1_topk`, every job without backpressure timed against
    :meth:`hikv.hw.topk_timing.TopKTiming.stage1_cycles`.
    """
    jobs = default_jobs(cfg) if jobs is None else jobs
    return run_block_regression(cfg, block="topk", verilog=topk_verilog, toplevel=TOPLEVEL,
                                tb_file="tb_topk.py", seed=seed, jobs=jobs, summary=_summary,
                                waves=waves, simulator=simulator)
