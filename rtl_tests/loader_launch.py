"""Build the loader's Verilog and run its cocotb regression (``hikv rtl --block loader``).

:func:`run_regression` generates the jobs and their expected results from the golden model
(:mod:`hikv.rtl_tests.loader_jobs`), writes them as JSON next to the run, and runs
rtl_tests/tb_loader.py on Verilator through :func:`hikv.toolchain.run_cocotb`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hikv.params import Config, ParamError

from .report import RtlReport

__all__ = ["TOPLEVEL", "CHAIN_TOPLEVEL", "DEFAULT_JOBS", "DEFAULT_CHAIN_JOBS", "packed_variant",
           "pages_variant", "wide_variant",
           "tb_config", "slot_fields", "rtl_cycles_rows", "run_regression", "run_chain_regression"]

TOPLEVEL = "hikv_loader"
CHAIN_TOPLEVEL = "hikv_sorter_loader"
#: Randomized jobs of one regression run (the corner cases count towards it).
DEFAULT_JOBS = 40
#: Jobs of one chained (sorter -> loader) regression run.
DEFAULT_CHAIN_JOBS = 24
#: Smallest testbench memory (bytes); it grows to hold the largest region.
MEMORY_WINDOW = 1 << 20


def packed_variant(cfg: Config, align: int | None = None) -> Config:
    """``cfg`` with records packed at ``align`` bytes (default: one element; they start and end
    inside beats and bursts, and neighbours share beats) and the channel-page path built
    (``LoaderParams.channel_pages``). At element alignment the channel chunks are two bursts
    long (read per token group): the layout corners a preset with burst-aligned records does
    not reach. Named ``<preset>+packed`` (element alignment) or ``<preset>+packed<align>``."""
    import dataclasses

    lay = cfg.layout
    a = lay.elem_bytes if align is None else align
    pt = 2 * lay.burst_bytes // lay.elem_bytes if a == lay.elem_bytes else lay.page_tokens
    layout = dataclasses.replace(lay, align_bytes=a, page_tokens=pt)
    loader = dataclasses.replace(cfg.loader, channel_pages=True)
    suffix = "" if a == lay.elem_bytes else str(a)
    return cfg.replace(name=f"{cfg.name}+packed{suffix}", layout=layout, loader=loader)


def wide_variant(cfg: Config) -> Config:
    """``cfg`` shaped like the `default` and `paper` loaders: one burst per beat
    (``data_width = 8 x burst_bytes``), requests of 4 beats, 8 reads in flight; named
    ``<preset>+wide``."""
    import dataclasses

    return cfg.replace(name=f"{cfg.name}+wide", loader=dataclasses.replace(
        cfg.loader, data_width=8 * cfg.layout.burst_bytes, max_burst_beats=4,
        max_outstanding=8))


def rows_variant(cfg: Config) -> Config:
    """:func:`wide_variant` built as `default` and `paper` are: without the masked-record path
    (``LoaderParams.masked_records``; their policies store no masked records), so every job
    reads rows, and a masked or channel-page job is read as rows with ``status.cfg_error``;
    named ``<preset>+rows``."""
    import dataclasses

    w = wide_variant(cfg)
    return w.replace(name=f"{cfg.name}+rows", loader=dataclasses.replace(
        w.loader, masked_records=False, channel_pages=False))


def pages_variant(cfg: Config) -> Config:
    """``cfg`` with the channel-page path built (``LoaderParams.channel_pages``), for tests of
    a layout whose preset does not need it; named ``<preset>+pages``."""
    import dataclasses

    return cfg.replace(name=f"{cfg.name}+pages",
                       loader=dataclasses.replace(cfg.loader, channel_pages=True))


def chain_variant(cfg: Config, head_dim: int) -> Config:
    """``cfg`` with KV vectors of ``head_dim`` elements (layout and model) and a sorter that
    takes vectors that long: the chained block on real heads of a captured model."""
    import dataclasses

    if head_dim == cfg.layout.head_dim:
        return cfg
    return cfg.replace(name=f"{cfg.name}+d{head_dim}",
                       layout=dataclasses.replace(cfg.layout, head_dim=head_dim),
                       model=dataclasses.replace(cfg.model, head_dim=head_dim),
                       sorter=dataclasses.replace(cfg.sorter,
                                                  max_vec=max(cfg.sorter.max_vec, head_dim)))


def _fields(layout: Any) -> dict[str, list[int]]:
    return {name: [f.offset, f.width] for name, f in layout}


def tb_config(cfg: Config) -> dict[str, Any]:
    """What the testbench needs to know about the built loader (JSON-able)."""
    from hikv.hw.loader_ports import config_layout, output_layout, token_layout
    from hikv.hw.loader_timing import LoaderGeometry

    geo = LoaderGeometry(cfg.layout, cfg.loader)
    return {
        "preset": cfg.name,
        "beat_bytes": geo.beat_bytes,
        "axsize": cfg.loader.axsize,
        "max_outstanding": cfg.loader.max_outstanding,
        "page_tokens": cfg.layout.page_tokens,
        "memory_bytes": min(1 << cfg.loader.addr_width, MEMORY_WINDOW),
        "layouts": {"cfg": _fields(config_layout(geo)), "tokens": _fields(token_layout(geo)),
                    "o": _fields(output_layout(geo))},
        "stats": ["bursts", "bytes", "busy_cycles", "mem_wait_cycles", "ar_stall_cycles",
                  "out_stall_cycles"],
        "config": {"layout": cfg.layout.__dict__, "loader": cfg.loader.__dict__},
    }


def _sorter_conf(cfg: Config) -> dict[str, Any]:
    """Field layouts of the sorter's cfg and input beats (for the chained testbench)."""
    from hikv.hw.sorter import SorterMode, config_layout, io_layout

    io = io_layout(cfg.sorter)
    lanes = io["lanes"]
    elem = lanes.shape.elem_shape
    return {"scfg": _fields(config_layout(cfg.sorter)), "stage1": SorterMode.STAGE1.value,
            "scores": {"lanes": lanes.offset, "lane_width": elem.size,
                       "count": lanes.shape.length, "key": _fields(elem)["key"],
                       "index": _fields(elem)["index"], "valid": _fields(io)["valid"],
                       "last": _fields(io)["last"]}}


def _case_json(case: Any, images: dict[int, str]) -> dict[str, Any]:
    from hikv.hw.loader_ports import MODE_OF_LAYOUT
    from hikv.params import RecordLayout

    d = case.to_json(images)
    d["mode_code"] = MODE_OF_LAYOUT[case.job.mode].value
    unbuilt = case.knobs.get("unbuilt_mode")     # a layout the loader is not built for
    if unbuilt:
        d["cfg_mode_code"] = MODE_OF_LAYOUT[RecordLayout(unbuilt)].value
    return d


def _memory_bytes(cfg: Config, cases: list[Any]) -> int:
    """The testbench memory: every case's image, at least 1 MiB, within the address space."""
    top = max(a + len(b) for c in cases for a, b in c.memory.items())
    size = max(MEMORY_WINDOW, 1 << (top - 1).bit_length())
    return min(1 << cfg.loader.addr_width, size)


def slot_fields(slots: list[int]) -> dict[str, Any]:
    """Ascending slots in the shorter JSON form: ``{"runs": [[start, length], ...]}`` or
    ``{"slot_mask": hex}`` (bit ``i`` set for slot ``i``); :mod:`hikv.sim.cost.validate` reads
    both."""
    runs: list[list[int]] = []
    for x in slots:
        if runs and runs[-1][0] + runs[-1][1] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    mask = sum(1 << x for x in slots)
    as_mask = {"slot_mask": f"{mask:x}"}
    as_runs = {"runs": runs}
    return as_mask if len(json.dumps(as_mask)) < len(json.dumps(as_runs)) else as_runs


def rtl_cycles_rows(cfg: Config, timing: list[Any], rows: list[dict[str, Any]]
                    ) -> list[dict[str, Any]]:
    """Measured timing jobs as ``hikv.rtl_cycles/1`` rows (:mod:`hikv.sim.cost.validate`): the job
    in full (mode, slots as runs or a bit mask (:func:`slot_fields`), base, kept, channels,
    read latency, outstanding limit), its byte and request counts, and the measured cycles."""
    by_name = {c.name: c for c in timing}
    out = []
    for r in rows:
        c = by_name[r["name"]]
        out.append({"block": "loader", "preset": cfg.name, "name": r["name"],
                    "mode": c.job.mode.value, **slot_fields(list(c.job.slots)),
                    "base": c.job.base, "kept": c.job.kept,
                    "channels": list(c.job.channels), "mem_latency_cycles": r["latency"],
                    "outstanding": r["outstanding"], "bytes": r["beats"] * cfg.loader.beat_bytes,
                    "requests": r["requests"], "cycles": r["cycles"]})
    return out


def _write_rtl_cycles(path: Path, cfg: Config, source: str, rows: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"schema": "hikv.rtl_cycles/1", "source": source,
                                "measurements": rows}, indent=1) + "\n")


def run_regression(cfg: Config, *, seed: int, jobs: int | None = None, waves: bool = False,
                   simulator: str = "verilator", testcase: str | None = None,
                   timing_latencies: tuple[int, ...] | None = None,
                   timing_limits: tuple[int, ...] | None = None) -> RtlReport:
    """Run the loader regression for ``cfg``; return an :class:`~hikv.rtl_tests.report.RtlReport`.

    ``testcase="loader_timing"`` runs only the timing jobs (no random jobs are generated);
    ``timing_latencies`` / ``timing_limits`` choose the read latencies and outstanding limits
    of the timing jobs (default: 1, 8, 32 cycles and every limit, see
    :func:`~hikv.rtl_tests.loader_jobs.make_timing_cases`). The measured timing jobs are
    written as ``hikv.rtl_cycles/1`` (``metrics["rtl_cycles"]``)."""
    import random

    from hikv.hw.loader import make_loader
    from hikv.hw.verilog import to_verilog
    from hikv.io import unique_dir
    from hikv.rtl_tests.loader_jobs import make_cases, make_timing_cases
    from hikv.toolchain import cache_dir, run_cocotb, text_hash

    n = DEFAULT_JOBS if jobs is None else jobs
    if n < 1:
        raise ParamError(f"jobs = {n} is out of range: allowed >= 1")
    verilog = to_verilog(make_loader(cfg), TOPLEVEL)
    cases = [] if testcase == "loader_timing" else make_cases(cfg, seed, n)
    rng = random.Random(seed)
    for c in cases:       # a few jobs exercise out-of-order tokens and an unaligned base
        if c.knobs.get("memory") == "pipe":
            c.knobs["outstanding"] = rng.randint(0, cfg.loader.max_outstanding)
            if rng.random() < 0.15:
                c.knobs["disorder"] = True
            elif rng.random() < 0.1:
                c.knobs["misalign_base"] = True
    timing = make_timing_cases(cfg, seed, limits=timing_limits,
                               **({"latencies": tuple(timing_latencies)}
                                  if timing_latencies else {}))
    conf = tb_config(cfg)
    conf["seed"] = seed
    images: dict[int, str] = {}
    jobs_json = {"cases": [_case_json(c, images) for c in cases],
                 "timing": [_case_json(c, images) for c in timing]}
    by_id = {id(c.memory): c.memory for c in cases + timing}
    jobs_json["images"] = {key: {str(a): b.hex() for a, b in by_id[i].items()}
                           for i, key in images.items()}
    payload = json.dumps(jobs_json)
    conf["memory_bytes"] = _memory_bytes(cfg, cases + timing)
    # one directory per run: two processes with the same seed must not share jobs.json
    run_dir = unique_dir(cache_dir() / "runs",
                         f"loader-{cfg.name}-s{seed}-{text_hash(verilog, payload)}")
    jobs_path = run_dir / "jobs.json"
    jobs_path.write_text(payload)
    result_path = run_dir / "result.json"
    if result_path.exists():
        result_path.unlink()
    tb_file = str(Path(__file__).with_name("tb_loader.py"))
    run = run_cocotb(
        verilog=verilog, toplevel=TOPLEVEL, test_module="hikv.rtl_tests.tb_loader",
        build_key=f"loader-{cfg.name}", seed=seed, waves=waves, simulator=simulator,
        test_dir=run_dir, testcase=testcase, rewrite_files=[tb_file],
        extra_env={"HIKV_TB_CONFIG": json.dumps(conf), "HIKV_TB_JOBS": str(jobs_path),
                   "HIKV_TB_RESULT": str(result_path)},
    )
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    lines = [f"cocotb tests: {run.tests - run.failed}/{run.tests} passed "
             f"(log: {run.results_xml})"]
    metrics: dict[str, Any] = {}
    for key in ("regression_axiram", "regression_pipe"):
        rows = result.get(key, [])
        if rows:
            cyc = sum(r["cycles"] for r in rows)
            byt = sum(r["bytes"] for r in rows)
            lines.append(f"{key[11:]}: {len(rows)} jobs, {sum(r['tokens'] for r in rows)} "
                         f"tokens, {sum(r['requests'] for r in rows)} requests, {byt} bytes "
                         f"in {cyc} cycles ({byt / max(cyc, 1):.2f} B/cycle with random "
                         "backpressure and latency)")
            metrics[key] = rows
    if "timing" in result:
        rows = result["timing"]
        metrics["timing"] = rows
        source = (f"python -c \"from hikv.presets import get_preset; from "
                  f"hikv.rtl_tests.loader_launch import run_regression; run_regression("
                  f"get_preset('{cfg.name}'), seed={seed}, jobs={n}, testcase={testcase!r}, "
                  f"timing_latencies={timing_latencies!r}, timing_limits={timing_limits!r})\"")
        _write_rtl_cycles(run_dir / "rtl_cycles.json", cfg, source,
                          rtl_cycles_rows(cfg, timing, rows))
        metrics["rtl_cycles"] = str(run_dir / "rtl_cycles.json")
        exact = sum(r["cycles"] == r["model"] for r in rows)
        lines.append(f"timing: {len(rows)} jobs without backpressure, measured cycles equal to "
                     f"job_timing() in {exact} (as hikv.rtl_cycles/1: "
                     f"{run_dir / 'rtl_cycles.json'})")
        for r in rows:
            if "steady_measured" in r:
                lines.append(f"  dense, every token, latency {r['latency']:3d}, "
                             f"{r['outstanding']} outstanding: {r['cycles']} cycles, "
                             f"{r['steady_measured']:.2f} B/cycle (formula "
                             f"{r['steady_model']:.2f})")
    return RtlReport(block="loader", preset=cfg.name, seed=seed, jobs=len(cases),
                     passed=run.passed, lines=tuple(lines), metrics=metrics, waves=run.waves)


def run_chain_regression(cfg: Config, *, seed: int, jobs: int | None = None,
                         waves: bool = False, simulator: str = "verilator",
                         capture: dict[str, Any] | None = None) -> RtlReport:
    """Sorter -> loader chain (``hikv rtl --block sorter_loader``): token scores of attention
    heads go through the sorter's Stage I into the loader; every output must equal the golden
    Stage I + Stage II result (:func:`~hikv.rtl_tests.loader_jobs.make_chain_cases`), with
    requests, counters and status checked as for the loader. The heads are real ones from
    ``capture`` (a ``hikv accuracy capture`` file, loaded; ``cfg`` is adapted to its head size
    with :func:`chain_variant`) or seeded random ones."""
    from hikv.hw.sorter_loader import make_sorter_loader
    from hikv.hw.verilog import to_verilog
    from hikv.io import unique_dir
    from hikv.rtl_tests.loader_jobs import make_chain_cases
    from hikv.toolchain import cache_dir, run_cocotb, text_hash

    n = DEFAULT_CHAIN_JOBS if jobs is None else jobs
    if n < 1:
        raise ParamError(f"jobs = {n} is out of range: allowed >= 1")
    if capture is not None:
        layer0 = next(iter(capture["layers"].values()))
        cfg = chain_variant(cfg, int(layer0["k"].shape[-1]))
    verilog = to_verilog(make_sorter_loader(cfg), CHAIN_TOPLEVEL)
    cases = make_chain_cases(cfg, seed, n, capture)
    conf = tb_config(cfg)
    conf.update(seed=seed, chain=_sorter_conf(cfg), memory_bytes=_memory_bytes(cfg, cases))
    images: dict[int, str] = {}
    jobs_json: dict[str, Any] = {"cases": [_case_json(c, images) for c in cases], "timing": []}
    by_id = {id(c.memory): c.memory for c in cases}
    jobs_json["images"] = {key: {str(a): b.hex() for a, b in by_id[i].items()}
                           for i, key in images.items()}
    payload = json.dumps(jobs_json)
    run_dir = unique_dir(cache_dir() / "runs",
                         f"chain-{cfg.name}-s{seed}-{text_hash(verilog, payload)}")
    (run_dir / "jobs.json").write_text(payload)
    result_path = run_dir / "result.json"
    if result_path.exists():
        result_path.unlink()
    run = run_cocotb(
        verilog=verilog, toplevel=CHAIN_TOPLEVEL, test_module="hikv.rtl_tests.tb_loader",
        build_key=f"chain-{cfg.name}", seed=seed, waves=waves, simulator=simulator,
        test_dir=run_dir, testcase=["loader_axiram", "loader_pipe"],
        rewrite_files=[str(Path(__file__).with_name("tb_loader.py"))],
        extra_env={"HIKV_TB_CONFIG": json.dumps(conf),
                   "HIKV_TB_JOBS": str(run_dir / "jobs.json"),
                   "HIKV_TB_RESULT": str(result_path)},
    )
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    rows = result.get("regression_axiram", []) + result.get("regression_pipe", [])
    lines = [f"cocotb tests: {run.tests - run.failed}/{run.tests} passed "
             f"(log: {run.results_xml})"]
    if capture is not None:
        meta = capture.get("meta", {})
        lines.append(f"heads: real, captured from {meta.get('model', '?')} layers "
                     f"{sorted(capture['layers'])} ({len(meta.get('ids', []))} tokens); "
                     f"preset adapted to {cfg.name}")
    if rows:
        lines.append(f"chain: {len(rows)} jobs (scores -> sorter Stage I -> loader), "
                     f"{sum(r['scores'] for r in rows)} scores, {sum(r['tokens'] for r in rows)} "
                     f"tokens selected, {sum(r['bytes'] for r in rows)} bytes, every output "
                     "equal to golden Stage I + Stage II")
    return RtlReport(block="sorter_loader", preset=cfg.name, seed=seed, jobs=len(cases),
                     passed=run.passed, lines=tuple(lines), metrics={"chain": rows},
                     waves=run.waves)
