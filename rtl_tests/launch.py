"""What the block launchers (``*_rtl.py``, ``*_launch.py``) share: the on-disk cache of a
block's generated Verilog and the tail of a regression (its ``hikv.rtl_cycles/1`` file, metrics
and failure lines)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hikv.io import unique_dir
from hikv.params import Config, ParamError, config_to_json
from hikv.toolchain import cache_dir, run_cocotb, text_hash

__all__ = ["HW", "ENV", "LINT_FLAGS", "cached_verilog", "failure_lines", "lint_clean",
           "generated_verilog_lints", "regression_tail", "run_testbench", "run_block_regression"]

#: the environment variable a testbench reads its configuration, seed and result path from
ENV = "HIKV_TB_CONFIG"
#: the RTL sources, hashed into each cached Verilog's key
HW = Path(__file__).resolve().parent.parent / "hw"


#: verilator lint of generated Verilog: every warning but these two (docs/toolchain.md)
LINT_FLAGS = ["--lint-only", "-Wall", "-Wno-PROCASSINIT", "-Wno-UNUSEDSIGNAL"]


def lint_clean(path: str | os.PathLike[str]) -> None:
    """Assert that ``verilator`` :data:`LINT_FLAGS` passes ``path`` without a warning (the
    first 20 in the message otherwise)."""
    import shutil
    import subprocess

    from hikv.toolchain import setup_environ

    setup_environ()
    exe = shutil.which("verilator")
    assert exe, "verilator not found"
    out = subprocess.run([exe, *LINT_FLAGS, str(path)], capture_output=True, text=True,
                         timeout=600)
    warnings = [ln for ln in (out.stdout + out.stderr).splitlines() if ln.startswith("%")]
    assert out.returncode == 0 and not warnings, "\n".join(warnings[:20])



def generated_verilog_lints(cli: Callable[[list[str]], int], block: str, preset: str,
                            out_dir: str | os.PathLike[str]) -> None:
    """``hikv verilog --block <block> --preset <preset>`` (through ``cli``, the command line's
    ``main``) writes one module ``hikv_<block>`` that :func:`lint_clean` passes."""
    out = Path(out_dir) / f"hikv_{block}.v"
    assert cli(["verilog", "--preset", preset, "--block", block, "--out", str(out)]) == 0
    text = out.read_text()
    assert f"module hikv_{block}(" in text and text.count("\nmodule ") == 1
    lint_clean(out)

def cached_verilog(name: str, dims: Any, sources: Sequence[str],
                   generate: Callable[[], str]) -> str:
    """The Verilog ``generate()`` returns, cached under ``$HIKV_CACHE/verilog`` as
    ``<name>-<key>.v``; the key hashes ``dims`` (JSON), the Amaranth version and the text of
    every file of ``sources`` (names under ``hw/``). Written atomically: concurrent runs of one
    preset agree."""
    import amaranth

    key = text_hash(json.dumps(dims, sort_keys=True), amaranth.__version__,
                    *[(HW / f).read_text() for f in sources])
    path = cache_dir() / "verilog" / f"{name}-{key}.v"
    if path.exists():
        return path.read_text()
    text = generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return text


def run_testbench(cfg: Config, *, verilog: str, toplevel: str, tb_file: str, testcase: str,
                  run_name: str, build_key: str, seed: int, extra: dict[str, Any],
                  waves: bool = False, simulator: str = "verilator") -> tuple[Any, dict[str, Any]]:
    """Run ``testcase`` of the cocotb testbench ``rtl_tests/<tb_file>`` on ``verilog`` in a
    fresh run folder ``$HIKV_CACHE/runs/<run_name>-*``; the testbench gets ``cfg``, ``seed``,
    ``extra`` and where to write its result through :data:`ENV`. Returns (CocotbRun, the JSON
    the testbench wrote, empty if none)."""
    if simulator not in ("verilator", "icarus"):
        raise ParamError(f"simulator = {simulator!r}: allowed 'verilator' or 'icarus'")
    run_dir = unique_dir(cache_dir() / "runs", run_name)
    result = run_dir / "result.json"
    env = {ENV: json.dumps({"config": config_to_json(cfg, indent=None), "result": str(result),
                            "seed": seed, **extra})}
    run = run_cocotb(verilog=verilog, toplevel=toplevel,
                     test_module=f"hikv.rtl_tests.{Path(tb_file).stem}", build_key=build_key,
                     extra_env=env, seed=seed, testcase=testcase, waves=waves,
                     simulator=simulator, test_dir=run_dir,
                     rewrite_files=[str(Path(__file__).with_name(tb_file))])
    data: dict[str, Any] = json.loads(result.read_text()) if result.exists() else {}
    return run, data


def regression_tail(run: Any, data: dict[str, Any], source: str
                    ) -> tuple[dict[str, Any], list[str]]:
    """(metrics, closing lines) of a regression whose testbench wrote ``data``: the measured
    cycles of every distinct job run without backpressure go to ``rtl_cycles.json`` beside the
    run's results (schema ``hikv.rtl_cycles/1``, the format :mod:`hikv.sim.cost.validate`
    checks the cost model against; ``source`` is the command that reproduces them)."""
    cycles_file = None
    if data.get("measurements"):
        cycles_file = run.results_xml.parent / "rtl_cycles.json"
        cycles_file.write_text(json.dumps({"schema": "hikv.rtl_cycles/1", "source": source,
                                           "measurements": data["measurements"]}, indent=1))
    metrics = {"stats": data.get("stats", {}), "examples": data.get("examples", []),
               "latency": data.get("latency"), "sim_cycles": data.get("sim_cycles"),
               "wall_s": data.get("wall_s"), "build_dir": str(run.build_dir),
               "rtl_cycles": str(cycles_file) if cycles_file else None}
    lines = []
    if cycles_file:
        lines.append(f"cycle measurements ({len(data['measurements'])} distinct jobs, "
                     f"hikv.rtl_cycles/1): {cycles_file}")
    return metrics, lines


def failure_lines(data: dict[str, Any], passed: bool) -> list[str]:
    """The mismatch counts, the first failures and the verdict of a testbench's summary."""
    lines = [f"mismatches: {data.get('n_failures', '?')}, cycle mismatches: "
             f"{data.get('n_cycle_failures', '?')}; {data.get('sim_cycles', 0)} simulated "
             f"cycles in {data.get('wall_s', 0):.1f} s"]
    for f in data.get("failures", [])[:3] + data.get("cycle_failures", [])[:3]:
        lines.append(f"  FAIL {f[:400]}")
    if not data:
        lines.append("the testbench wrote no summary (see the cocotb log above)")
    elif not passed:
        lines.append("FAILED")
    return lines


def run_block_regression(cfg: Config, *, block: str, verilog: Callable[[Config], str],
                         toplevel: str, tb_file: str, seed: int, jobs: int,
                         summary: Callable[[dict[str, Any], bool], list[str]],
                         waves: bool = False, simulator: str = "verilator") -> Any:
    """The ``regression`` testcase of ``tb_file`` on ``block``'s Verilog (``verilog(cfg)``)
    with ``jobs`` random jobs: passed when the run passed with no mismatch and no cycle
    failure; an :class:`~hikv.rtl_tests.report.RtlReport` with ``summary(data, passed)`` and
    the run's tail (the command that reruns it)."""
    from .report import RtlReport

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ParamError(f"jobs = {jobs!r} is out of range: allowed an integer >= 0")
    run, data = run_testbench(cfg, verilog=verilog(cfg), toplevel=toplevel, tb_file=tb_file,
                              testcase="regression",
                              run_name=f"{block}-{cfg.name}-regression-s{seed}",
                              build_key=f"{block}-{cfg.name}", seed=seed, extra={"jobs": jobs},
                              waves=waves, simulator=simulator)
    passed = bool(run.passed and data and data["n_failures"] == 0
                  and data["n_cycle_failures"] == 0)
    metrics, tail = regression_tail(
        run, data, f"hikv rtl --block {block} --preset {cfg.name} --seed {seed} --jobs {jobs}")
    return RtlReport(block=block, preset=cfg.name, seed=seed, jobs=jobs, passed=passed,
                     lines=tuple(summary(data, passed) + tail), metrics=metrics,
                     waves=run.waves)
