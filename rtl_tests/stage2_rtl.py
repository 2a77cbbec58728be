"""Build and run the Stage II selection block's cocotb regression: the machinery behind
``hikv rtl --block stage2`` and the pytest launcher (rtl_tests/test_stage2_rtl.py).

The Verilog of a preset is generated once and cached under ``$HIKV_CACHE/verilog`` (keyed by
the sorter parameters, ``layout.head_dim``, the RTL sources and the Amaranth version);
Verilator builds are cached by :func:`hikv.toolchain.run_cocotb`, one build directory per
preset.
"""

from __future__ import annotations

from typing import Any

from hikv.params import Config, to_dict

from .launch import cached_verilog, failure_lines, run_block_regression
from .report import RtlReport

__all__ = ["TOPLEVEL", "default_jobs", "stage2_verilog", "run_regression"]

TOPLEVEL = "hikv_stage2"
_SOURCES = ("stage2_select.py", "stage2_timing.py", "sorter_compact.py", "sorter_net.py",
            "uops.py", "verilog.py")


def default_jobs(cfg: Config) -> int:
    """Random jobs (1 to 6 vectors each) when none are asked for: 10^4 on ``tiny``, 1,000
    otherwise (a ``default`` or ``paper`` vector holds 64 or 128 keys)."""
    return 10_000 if cfg.name == "tiny" else 1_000


def stage2_verilog(cfg: Config) -> str:
    """Verilog of the Stage II block of ``cfg`` (module ``hikv_stage2``), cached on disk."""

    def generate() -> str:
        from hikv.hw.stage2_select import make_stage2
        from hikv.hw.verilog import to_verilog

        return to_verilog(make_stage2(cfg), TOPLEVEL)

    dims = {"sorter": to_dict(cfg.sorter), "head_dim": cfg.layout.head_dim}
    return cached_verilog("stage2", dims, _SOURCES, generate)


def _summary(data: dict[str, Any], passed: bool) -> list[str]:
    lines = []
    st = data.get("stats")
    t = data.get("timing", {})
    if st:
        lines.append(f"stage2 (d={t.get('length')}, P={t.get('lanes')}, "
                     f"B={t.get('bits_per_cycle')}, {t.get('engines')} engines): {st['jobs']} "
                     f"jobs ({st['random']} random, {st['directed']} directed), "
                     f"{st['vectors']} vectors, {st['items_out']} items out; "
                     f"{st['r_above_d']} vectors with r > d, {st['r_changes']} changes of r "
                     f"between vectors")
        lines.append(f"cycles == formula (count D + D + S + 4) for {st['cycle_checks']} jobs "
                     "without backpressure")
        lines.append(f"refused inputs (error, one vector out, cleared by reset): "
                     f"{', '.join(data.get('refused', []))}")
    for ex in data.get("examples", []):
        lines.append(f"  {ex['count']} vectors: {ex['cycles']} cycles measured, formula "
                     f"{ex['formula']}")
    if st:
        lines.append(f"resets in the middle of a job: {st['resets']}, each followed by a "
                     "clean job")
    return lines + failure_lines(data, passed)


def run_regression(cfg: Config, *, seed: int, jobs: int | None = None, waves: bool = False,
                   simulator: str = "verilator") -> RtlReport:
    """Randomized regression of the Stage II block of ``cfg`` against the golden model.

    ``jobs`` random jobs of 1 to 6 vectors (default :func:`default_jobs`) after the refused
    inputs and the directed jobs; every vector compared with
    :func:`hikv.model.refs.sorter.stage2_topr`, every job without backpressure timed against
    :meth:`hikv.hw.stage2_timing.Stage2Timing.cycles`.
    """
    jobs = default_jobs(cfg) if jobs is None else jobs
    return run_block_regression(cfg, block="stage2", verilog=stage2_verilog, toplevel=TOPLEVEL,
                                tb_file="tb_stage2.py", seed=seed, jobs=jobs, summary=_summary,
                                waves=waves, simulator=simulator)
