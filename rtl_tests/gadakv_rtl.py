"""G-AdaKV's global top-k on the sorter RTL: the launcher of :mod:`hikv.rtl_tests.tb_gadakv`,
and the sorter's entry in the regression registry, which picks the traffic:
``hikv rtl --block sorter`` (random jobs, :mod:`hikv.rtl_tests.sorter_rtl`) or
``hikv rtl --block sorter --traffic gadakv`` (this module). Both use the same cached Verilog
and Verilator build of the preset.
"""

from __future__ import annotations

from hikv.params import Config, ParamError

from .report import RtlReport

__all__ = ["TRAFFIC", "default_problems", "run_regression", "sorter_regression"]

TRAFFIC = ("random", "gadakv")


def default_problems(cfg: Config) -> int:
    """Random global top-k problems when none are asked for: 40 on ``tiny``, 4 otherwise."""
    return 40 if cfg.name == "tiny" else 4


def run_regression(cfg: Config, *, seed: int, jobs: int | None = None, waves: bool = False,
                   simulator: str = "verilator") -> RtlReport:
    """``jobs`` random global top-k problems (default :func:`default_problems`), each run as
    the Stage I jobs of :func:`hikv.model.methods.global_select.sorter_schedule` on the RTL; every
    job checked against the golden sorter and the timing formula, every result against
    :func:`hikv.model.methods.global_select.global_topk`."""


    from .launch import run_testbench
    from .sorter_rtl import TOPLEVEL, sorter_verilog

    jobs = default_problems(cfg) if jobs is None else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ParamError(f"jobs = {jobs!r} is out of range: allowed an integer >= 1 (global "
                         "top-k problems)")
    run, data = run_testbench(cfg, verilog=sorter_verilog(cfg), toplevel=TOPLEVEL,
                              tb_file="tb_gadakv.py", testcase="gadakv",
                              run_name=f"sorter-{cfg.name}-gadakv-s{seed}",
                              build_key=f"sorter-{cfg.name}", seed=seed, extra={"jobs": jobs},
                              waves=waves, simulator=simulator)
    passed = bool(run.passed and data and data["n_failures"] == 0
                  and data["stats"]["problems"] == jobs
                  and data["stats"]["cycle_mismatches"] == 0)
    st = data.get("stats", {})
    lines = []
    if st:
        lines.append(f"G-AdaKV global top-k: {st['problems']} problems ({st['multi_round']} "
                     f"with K above one round), {st['jobs']} Stage I jobs ({st['scan_jobs']} "
                     f"scans, {st['merge_jobs']} merges); kept sets == global_topk, every job "
                     f"== sorter_ref")
        idle = data["sim_cycles"] - st["reset_cycles"] - st["cycles"]
        lines.append(f"cycles == formula for {st['cycle_checks'] - st['cycle_mismatches']} of "
                     f"{st['cycle_checks']} jobs, {st['cycles']} cycles in all, plus {idle} idle "
                     f"cycles between jobs ({idle / max(1, st['jobs']):.2f} per job); "
                     f"{data['sim_cycles']} simulated cycles in {data['wall_s']:.1f} s")
    for f in data.get("failures", [])[:3]:
        lines.append(f"  FAIL {f[:400]}")
    if not data:
        lines.append("the testbench wrote no summary (see the cocotb log above)")
    elif not passed:
        lines.append("FAILED")
    return RtlReport(block="sorter", preset=cfg.name, seed=seed, jobs=jobs, passed=passed,
                     lines=tuple(lines), metrics={"gadakv": st, "build_dir": str(run.build_dir)},
                     waves=run.waves)


def sorter_regression(cfg: Config, *, seed: int, jobs: int | None = None, waves: bool = False,
                      simulator: str = "verilator", traffic: str = "random") -> RtlReport:
    """The sorter's regression with ``traffic`` ``"random"`` (:mod:`.sorter_rtl`) or
    ``"gadakv"`` (:func:`run_regression`)."""
    if traffic == "random":
        from .sorter_rtl import run_regression as random_regression

        return random_regression(cfg, seed=seed, jobs=jobs, waves=waves, simulator=simulator)
    if traffic == "gadakv":
        return run_regression(cfg, seed=seed, jobs=jobs, waves=waves, simulator=simulator)
    raise ParamError(f"sorter traffic = {traffic!r} is not one of {TRAFFIC}")
