"""Build and run the sorter's cocotb regression: the machinery behind ``hikv rtl --block sorter``
and the pytest launcher (rtl_tests/test_sorter_rtl.py).

The Verilog of a preset is generated once and cached under ``$HIKV_CACHE/verilog`` (keyed by
the sorter parameters, the RTL sources and the Amaranth version); Verilator builds are cached by
:func:`hikv.toolchain.run_cocotb`, one build directory per preset.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hikv.io import unique_dir
from hikv.params import Config, ParamError, config_to_json, to_dict
from hikv.toolchain import cache_dir, run_cocotb, text_hash

from .report import RtlReport

__all__ = ["TOPLEVEL", "default_jobs", "sorter_verilog", "run_sim", "run_regression"]

TOPLEVEL = "hikv_sorter"
TB_MODULE = "hikv.rtl_tests.tb_sorter"
ENV = "HIKV_TB_CONFIG"
_HW = Path(__file__).resolve().parent.parent / "hw"
_SOURCES = ("sorter.py", "sorter_net.py", "sorter_merge.py", "sorter_queue.py",
            "sorter_compact.py", "sorter_timing.py", "uops.py", "verilog.py")


def default_jobs(cfg: Config) -> int:
    """Random jobs per mode when none are asked for: 10^4 on ``tiny`` (CI), 100 otherwise."""
    return 10_000 if cfg.name == "tiny" else 100


def sorter_verilog(cfg: Config) -> str:
    """Verilog of the sorter of ``cfg`` (module ``hikv_sorter``), cached on disk."""
    import amaranth

    key = text_hash(json.dumps(to_dict(cfg.sorter), sort_keys=True),
                    amaranth.__version__, *[(_HW / f).read_text() for f in _SOURCES])
    path = cache_dir() / "verilog" / f"sorter-{key}.v"
    if path.exists():
        return path.read_text()
    from hikv.hw.sorter import make_sorter
    from hikv.hw.verilog import to_verilog

    text = to_verilog(make_sorter(cfg), TOPLEVEL)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return text


def _run_dir(cfg: Config, what: str, seed: int) -> Path:
    return unique_dir(cache_dir() / "runs", f"sorter-{cfg.name}-{what}-s{seed}")


def run_sim(cfg: Config, testcase: str, *, seed: int, extra: dict[str, Any],
            waves: bool = False, simulator: str = "verilator") -> tuple[Any, dict[str, Any]]:
    """Run one testcase of the testbench; return (CocotbRun, the JSON it wrote)."""
    if simulator not in ("verilator", "icarus"):
        raise ParamError(f"simulator = {simulator!r}: allowed 'verilator' or 'icarus'")
    run_dir = _run_dir(cfg, testcase, seed)
    result = run_dir / "result.json"
    env = {ENV: json.dumps({"config": config_to_json(cfg, indent=None), "result": str(result),
                            "seed": seed, **extra})}
    run = run_cocotb(verilog=sorter_verilog(cfg), toplevel=TOPLEVEL, test_module=TB_MODULE,
                     build_key=f"sorter-{cfg.name}", extra_env=env, seed=seed,
                     testcase=testcase, waves=waves, simulator=simulator, test_dir=run_dir,
                     rewrite_files=[str(Path(__file__).with_name("tb_sorter.py"))])
    data = json.loads(result.read_text()) if result.exists() else {}
    return run, data


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
    lines.append(f"mismatches: {data.get('n_failures', '?')}, cycle mismatches: "
                 f"{data.get('n_cycle_failures', '?')}; {data.get('sim_cycles', 0)} simulated "
                 f"cycles in {data.get('wall_s', 0):.1f} s")
    for f in data.get("failures", [])[:3] + data.get("cycle_failures", [])[:3]:
        lines.append(f"  FAIL {f[:400]}")
    if not data:
        lines.append("the testbench wrote no summary (see the cocotb log above)")
    elif not passed:
        lines.append("FAILED")
    return lines


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
    cycles_file = None
    if data.get("measurements"):
        # measured cycles of every distinct job run without backpressure, in the format the
        # cost model validates against (hikv.sim.cost.validate, schema hikv.rtl_cycles/1)
        cycles_file = run.results_xml.parent / "rtl_cycles.json"
        cycles_file.write_text(json.dumps({
            "schema": "hikv.rtl_cycles/1",
            "source": f"hikv rtl --block sorter --preset {cfg.name} --seed {seed} --jobs {jobs}",
            "measurements": data["measurements"]}, indent=1))
    metrics = {"stats": data.get("stats", {}), "examples": data.get("examples", []),
               "latency": data.get("latency"), "sim_cycles": data.get("sim_cycles"),
               "wall_s": data.get("wall_s"), "build_dir": str(run.build_dir),
               "rtl_cycles": str(cycles_file) if cycles_file else None}
    lines = _summary(cfg, data, passed)
    if cycles_file:
        lines.append(f"cycle measurements ({len(data['measurements'])} distinct jobs, "
                     f"hikv.rtl_cycles/1): {cycles_file}")
    return RtlReport(block="sorter", preset=cfg.name, seed=seed, jobs=jobs, passed=passed,
                     lines=tuple(lines), metrics=metrics, waves=run.waves)
