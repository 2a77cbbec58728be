"""Build and run the scoring unit's cocotb regression: the machinery behind ``hikv rtl --block
scorer`` and the pytest launcher (rtl_tests/test_scorer_rtl.py).

The Verilog of a configuration is cached under ``$HIKV_CACHE/verilog`` (keyed by the
configuration, the RTL sources and the Amaranth version); Verilator builds are cached by
:func:`hikv.toolchain.run_cocotb`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from hikv.params import Config, ParamError, config_to_json, to_dict
from hikv.toolchain import cache_dir, run_cocotb

from .launch import cached_verilog
from .report import RtlReport

__all__ = ["TOPLEVEL", "default_jobs", "scorer_verilog", "run_regression",
           "run_chain_regression"]

TOPLEVEL = "hikv_scorer"
TB_MODULE = "hikv.rtl_tests.tb_scorer"
ENV = "HIKV_TB_CONFIG"
_SOURCES = ("scorer.py", "scorer_timing.py", "sorter_compact.py", "uops.py", "verilog.py")
_CHAIN_SOURCES = ("scorer_sorter.py", "sorter.py", "sorter_net.py", "sorter_merge.py",
                  "sorter_queue.py", "sorter_timing.py")
CHAIN_TOPLEVEL = "hikv_scorer_sorter"


def default_jobs(cfg: Config) -> int:
    """Jobs when none are asked for: 1,000 on ``tiny`` (CI), 50 otherwise."""
    return 1000 if cfg.name == "tiny" else 50


def scorer_verilog(cfg: Config, *, chain: bool = False) -> str:
    """Verilog of the scoring unit of ``cfg`` (module ``hikv_scorer``), or with ``chain`` of
    the scoring unit chained into the sorter (``hikv_scorer_sorter``); cached on disk."""
    dims = [to_dict(cfg.scorer), to_dict(cfg.sorter), cfg.layout.head_dim,
            cfg.policy.lowbit_bits, chain]

    def generate() -> str:
        from hikv.hw.scorer import make_scorer
        from hikv.hw.scorer_sorter import make_scorer_sorter
        from hikv.hw.verilog import to_verilog

        if chain:
            return to_verilog(make_scorer_sorter(cfg), CHAIN_TOPLEVEL)
        return to_verilog(make_scorer(cfg), TOPLEVEL)

    return cached_verilog("scorer-chain" if chain else "scorer", dims,
                          _SOURCES + (_CHAIN_SOURCES if chain else ()), generate)


def _launch(cfg: Config, tag: str, verilog: str, toplevel: str, testcase: str, *, seed: int,
            jobs: int, waves: bool, simulator: str) -> tuple[Any, dict[str, Any], bool]:
    """Run ``testcase`` of tb_scorer.py on ``verilog`` in a fresh run folder (build key
    ``<tag>-<preset>-b<bits>``): the cocotb run, the testbench's summary ({} if none) and
    whether the run passed with no mismatch of outputs or cycles."""
    run_dir = cache_dir() / "runs" / f"{tag}-{cfg.name}-s{seed}-{os.getpid()}-{time.time_ns()}"
    run_dir.mkdir(parents=True)
    result = run_dir / "result.json"
    env = {ENV: json.dumps({"config": config_to_json(cfg, indent=None), "result": str(result),
                            "seed": seed, "jobs": jobs})}
    run = run_cocotb(verilog=verilog, toplevel=toplevel, test_module=TB_MODULE,
                     build_key=f"{tag}-{cfg.name}-b{cfg.policy.lowbit_bits}", extra_env=env,
                     seed=seed, testcase=testcase, waves=waves, simulator=simulator,
                     test_dir=run_dir,
                     rewrite_files=[str(Path(__file__).with_name("tb_scorer.py"))])
    data: dict[str, Any] = json.loads(result.read_text()) if result.exists() else {}
    passed = bool(run.passed and data and data["n_failures"] == 0
                  and data["n_cycle_failures"] == 0)
    return run, data, passed


def _close_lines(lines: list[str], data: dict[str, Any], passed: bool) -> None:
    """Append the first failures (or that there is no summary) and ``FAILED`` if it failed."""
    if data:
        for f in data["failures"][:3] + data["cycle_failures"][:3]:
            lines.append(f"  FAIL {f[:400]}")
    else:
        lines.append("the testbench wrote no summary (see the cocotb log above)")
    if not passed:
        lines.append("FAILED")


def run_regression(cfg: Config, *, seed: int, jobs: int | None = None, waves: bool = False,
                   simulator: str = "verilator") -> RtlReport:
    """Randomized and adversarial regression of the scoring unit of ``cfg`` against
    :mod:`hikv.model.refs.lowbit`, cycles against :mod:`hikv.hw.scorer_timing`."""
    jobs = default_jobs(cfg) if jobs is None else jobs
    if jobs < 0:
        raise ParamError(f"jobs = {jobs} is out of range: allowed >= 0")
    if simulator not in ("verilator", "icarus"):
        raise ParamError(f"simulator = {simulator!r}: allowed 'verilator' or 'icarus'")
    bits = cfg.policy.lowbit_bits
    run, data, passed = _launch(cfg, "scorer", scorer_verilog(cfg), TOPLEVEL, "regression",
                                seed=seed, jobs=jobs, waves=waves, simulator=simulator)
    lines = []
    if data:
        st, ck = data["stats"], data["cycle_checks"]
        lines.append(f"scorer {cfg.name} (L={cfg.scorer.lanes}, b={bits}, "
                     f"d={cfg.layout.head_dim}): {data['jobs']} jobs "
                     f"({', '.join(f'{k} {v}' for k, v in st.items())}) + back-to-back "
                     f"batches + a reset mid-job")
        lines.append(f"cycles == contract for {ck['single']} single jobs and {ck['batch']} "
                     f"back-to-back batches without backpressure")
        for ex in data["examples"][:3]:
            lines.append(f"  n={ex['n']}: {ex['cycles']} cycles measured, contract "
                         f"{ex['formula']}")
        lines.append(f"mismatches: {data['n_failures']}, cycle mismatches: "
                     f"{data['n_cycle_failures']}; {data['sim_cycles']} simulated cycles in "
                     f"{data['wall_s']:.1f} s")
    _close_lines(lines, data, passed)
    return RtlReport(block="scorer", preset=cfg.name, seed=seed, jobs=jobs, passed=passed,
                     lines=tuple(lines), metrics={k: data.get(k) for k in (
                         "stats", "cycle_checks", "examples", "measurements", "latency",
                         "sim_cycles", "wall_s")} | {"build_dir": str(run.build_dir)},
                     waves=run.waves)


def run_chain_regression(cfg: Config, *, seed: int, jobs: int | None = None,
                         waves: bool = False, simulator: str = "verilator") -> RtlReport:
    """``scorer_sorter``: scoring jobs chained into sorter Stage I jobs, the selection against
    :func:`hikv.model.refs.sorter.stage1_topk` of the reference keys, cycles against
    :func:`hikv.hw.scorer_sorter.chain_cycles` (300 jobs on ``tiny``, 20 otherwise)."""
    jobs = (300 if cfg.name == "tiny" else 20) if jobs is None else jobs
    if jobs < 0:
        raise ParamError(f"jobs = {jobs} is out of range: allowed >= 0")
    run, data, passed = _launch(cfg, "scorer-chain", scorer_verilog(cfg, chain=True),
                                CHAIN_TOPLEVEL, "chain", seed=seed, jobs=jobs, waves=waves,
                                simulator=simulator)
    lines = []
    if data:
        lines.append(f"scorer_sorter {cfg.name} (L = P = {cfg.sorter.lanes}): {data['jobs']} "
                     f"Stage I jobs, cycles == contract for {data['cycle_checks']} without "
                     "backpressure")
        for ex in data["examples"][:3]:
            lines.append(f"  n={ex['n']} k={ex['k']}: {ex['cycles']} cycles measured, "
                         f"contract {ex['formula']}")
        lines.append(f"mismatches: {data['n_failures']}, cycle mismatches: "
                     f"{data['n_cycle_failures']}; {data['wall_s']:.1f} s")
    _close_lines(lines, data, passed)
    return RtlReport(block="scorer_sorter", preset=cfg.name, seed=seed, jobs=jobs,
                     passed=passed, lines=tuple(lines),
                     metrics={k: data.get(k) for k in ("cycle_checks", "examples", "wall_s")},
                     waves=run.waves)
