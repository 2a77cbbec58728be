"""Build and run the sorter's cocotb regression: the machinery behind ``hikv rtl --block sorter``
and the pytest launcher (rtl_tests/test_sorter_rtl.py).

The Verilog of a preset is generated once and cached under ``$HIKV_CACHE/verilog`` (keyed by
the sorter parameters, the RTL sources and the Amaranth version); Verilator builds are cached by
:func:`hikv.toolchain.run_cocotb`, one build directory per preset.
"""

from __future__ import annotations

from typing import Any

from hikv.params import Config, ParamError, to_dict

from .launch import cached_verilog, failure_lines, regression_tail, run_testbench
from .report import RtlReport

__all__ = ["TOPLEVEL", "default_jobs", "sorter_verilog", "run_sim", "run_regression"]

TOPLEVEL = "hikv_sorter"
_SOURCES = ("sorter.py", "sorter_net.py", "sorter_merge.py", "sorter_queue.py",
            "sorter_compact.py", "sorter_timing.py", "uops.py", "verilog.py")


def default_jobs(cfg: Config) -> int:
    """Random jobs per mode when none are asked for: 10^4 on ``tiny`` (CI), 100 otherwise."""
    return 10_000 if cfg.name == "tiny" else 100


def sorter_verilog(cfg: Config) -> str:
    """Verilog of the sorter of ``cfg`` (module ``hikv_sorter``), cached on disk."""

    def generate() -> str:
        from hikv.hw.sorter import make_sorter
        from hikv.hw.verilog import to_verilog

        return to_verilog(make_sorter(cfg), TOPLEVEL)

    return cached_verilog("sorter", to_dict(cfg.sorter), _SOURCES, generate)


def run_sim(cfg: Config, testcase: str, *, seed: int, extra: dict[str, Any],
            waves: bool = False, simulator: str = "verilator") -> tuple[Any, dict[str, Any]]:
    """Run one testcase of the testbench; return (CocotbRun, the JSON it wrote)."""
    return run_testbench(cfg, verilog=sorter_verilog(cfg), toplevel=TOPLEVEL,
                         tb_file="tb_sorter.py", testcase=testcase,
                         run_name=f"sorter-{cfg.name}-{testcase}-s{seed}",
                         build_key=f"sorter-{cfg.name}", seed=seed, extra=extra, waves=waves,
                         simulator=simulator)


def _summary(cfg: Config, data: dict[str, Any], passed: bool) -> list[str]:
    lines = []
    p = cfg.sorter.lanes
    for mode, st in data.get("stats", {}).items():
        lines.append(f"{mode}: {st['jobs']} jobs ({st['random']} random, {st['directed']} "
                     f"directed), {st['items_out']} items out; cycles == formula for "
                     f"{st['cycle_checks']} jobs without backpressure")
    for ex in data.get("examples", []):
        if ex["mode"] == "stage1":
            what = f"stage1 n={ex['length']} k={ex['k']}"
        else:
            what = (f"stage2 {ex['vectors']} vectors d={ex['length']} r={ex['k']} "
                    f"(steady state: a vector every {-(-ex['length'] // p)} cycles)")
        lines.append(f"  {what}: {ex['cycles']} cycles measured, formula {ex['formula']}")
    lines.append(f"resets in the middle of a job: {data.get('resets', 0)}, each followed by a "
                 "clean job")
    return lines + failure_lines(data, passed)


def run_regression(cfg: Config, *, seed: int, jobs: int | None = None, waves: bool = False,
                   simulator: str = "verilator") -> RtlReport:
    """Randomized regression of the sorter of ``cfg`` against the golden model.

    ``jobs`` random jobs per mode (default :func:`default_jobs`) after the directed corner
    cases; every output compared with :mod:`hikv.model.refs.sorter`, every job without
    backpressure timed against :mod:`hikv.hw.sorter_timing`.
    """
    jobs = default_jobs(cfg) if jobs is None else jobs
    if jobs < 0:
        raise ParamError(f"jobs = {jobs} is out of range: allowed >= 0")
    run, data = run_sim(cfg, "regression", seed=seed, extra={"jobs": jobs}, waves=waves,
                        simulator=simulator)
    passed = bool(run.passed and data and data["n_failures"] == 0
                  and data["n_cycle_failures"] == 0)
    metrics, tail = regression_tail(
        run, data, f"hikv rtl --block sorter --preset {cfg.name} --seed {seed} --jobs {jobs}")
    lines = _summary(cfg, data, passed) + tail
    return RtlReport(block="sorter", preset=cfg.name, seed=seed, jobs=jobs, passed=passed,
                     lines=tuple(lines), metrics=metrics, waves=run.waves)
