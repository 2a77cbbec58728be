"""The named systems (hikv.sim.serving.systems): defaults, the accelerator sized beside a GPU
and its check against the GPU, and the system named beside every serving number of the CLI.
Tests that need the A100 operator profile skip with that reason when it is absent."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from hikv.params import ParamError
from hikv.presets import get_preset, resolve_methods
from hikv.scripts.cli import main
from hikv.sim.serving.device import PROFILE_MODELS, find_profile
from hikv.sim.serving.step_cost import IterationBatch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def profile() -> Path:
    p = find_profile("a100", PROFILE_MODELS["llama3-8b"], start=ROOT / "tests")
    if p is None:
        pytest.skip("Vidur-format profiles not found: set HIKV_DATA or place "
                    "shared/data/vidur-profiles above the repository")
    return p


@pytest.fixture(scope="module")
def systems(profile):
    from hikv.sim.serving.systems import system_cost

    cfg = get_preset("paper")
    return {s: system_cost(cfg, s, profile=str(profile), estimated_clocks=False)
            for s in ("gpu", "gpu+hikv")}


def test_system_names_and_defaults() -> None:
    from hikv.sim.serving.systems import SYSTEMS, check_system, default_system, system_cost

    assert SYSTEMS == ("gpu", "gpu+hikv", "hikv")
    assert default_system("a100") == "gpu" and default_system(None) == "hikv"
    with pytest.raises(ParamError, match="gpu\\+hikv"):
        check_system("tpu")
    with pytest.raises(ParamError, match="--system hikv is the accelerator alone"):
        system_cost(get_preset("default"), "hikv", device="a100")
    sc = system_cost(get_preset("default"), "hikv")
    assert sc.system == "hikv" and "accelerator alone" in sc.description


def _grid(cfg):
    batches = (1, 4, 16, 64, 256)
    ctxs = (16, 512, 4096, 32768)
    return [(b, n) for b in batches for n in ctxs if b <= cfg.serving.max_running]


def test_gpu_plus_hikv_is_never_slower_per_iteration_than_gpu_for_full_kv(systems) -> None:
    gpu, off = systems["gpu"], systems["gpu+hikv"]
    acc = off.accelerator
    # sized for the GPU: its memory's bandwidth, enough PE lanes to stay memory-bound
    assert acc.cfg.accel.mem_bandwidth_bytes_per_s == pytest.approx(2.039e12)
    assert acc.pe_lanes * acc.clocks.reference_hz >= 2 * 2.039e12
    assert acc.check.never_slower and "never slower" in off.description
    cfg = gpu.cfg
    spec = resolve_methods(cfg, "full")["full"]
    g, o = gpu.cost_model(cfg, spec), off.cost_model(cfg, spec)
    for b, n in _grid(cfg):
        batch = IterationBatch(decode_prompt=[n - 1] * b, decode_step=[1] * b)
        assert o.iteration_time_s(batch) <= g.iteration_time_s(batch), (b, n)
    # a mixed iteration: prefill on the GPU, its K/V streamed, decodes offloaded
    mixed = IterationBatch(prefill_done=[1024], prefill_chunk=[1024], prefill_total=[4096],
                           decode_prompt=[4095] * 64, decode_step=[1] * 64)
    assert o.iteration_time_s(mixed) <= g.iteration_time_s(mixed)
    bd = o.breakdown(mixed)
    assert bd["link"] > 0 and bd["accelerator"] > 0 and bd["attn_decode"] == 0
    assert sum(bd.values()) == pytest.approx(o.iteration_time_s(mixed), rel=1e-12)


def test_a_slow_link_is_reported_as_slower(profile) -> None:
    from hikv.sim.serving.systems import system_cost

    sc = system_cost(get_preset("paper"), "gpu+hikv", profile=str(profile), link="pcie5",
                     estimated_clocks=False)
    assert not sc.accelerator.check.never_slower
    assert "SLOWER than the GPU's own decode attention" in sc.description


def test_batched_offload_runs_equal_iterations(systems) -> None:
    off = systems["gpu+hikv"]
    cfg = off.cfg
    for name in ("full", "hikv"):
        m = off.cost_model(cfg, resolve_methods(cfg, name)[name])
        prompt = np.array([100, 2000, 9000])
        run = m.decode_run_times_s(prompt, np.ones(3, dtype=np.int64), 4)
        one = [m.iteration_time_s(IterationBatch(decode_prompt=prompt, decode_step=[1 + k] * 3))
               for k in range(4)]
        assert np.allclose(run, one, rtol=1e-12), name
        # one sequence batched is never slower than the sequences one after another
        t = m.tables(20000)
        x = m.kv.decode_key(prompt, np.ones(3, dtype=np.int64))
        assert m.accelerator_s(x, None) <= m.layers * t.layer[x].sum() / m.ref_hz + 1e-15


def _summary(out: Path) -> list[dict]:
    with (out / "summary.csv").open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("flags, system", [
    (["--device", "a100"], "gpu"),
    (["--system", "gpu+hikv", "--assumed-clocks"], "gpu+hikv"),
    (["--preset", "default"], "hikv"),
])
def test_serve_names_its_system(tmp_path, capsys, profile, flags, system) -> None:
    out = tmp_path / system.replace("+", "_")
    assert main(["serve", *flags, "--requests", "12", "--rate", "2", "--method", "full",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"system {system}:" in text
    assert [r["system"] for r in _summary(out)] == [system]


def test_cluster_runs_on_a_gpu_system(capsys, profile) -> None:
    assert main(["cluster", "--system", "gpu", "--replicas", "2", "--requests", "30",
                 "--rate", "2", "--method", "full", "--train-fraction", "0"]) == 0
    text = capsys.readouterr().out
    assert "system gpu: device a100" in text
    assert main(["serve", "--replicas", "2", "--host-link", "pcie5", "--requests", "5"]) == 2
    assert main(["serve", "--system", "hikv", "--device", "a100", "--requests", "5"]) == 2


def test_report_serving_section_names_its_system(profile) -> None:
    from hikv.sim.serving.report import report_section
    from hikv.sim.serving.workload import find_azure_trace

    trace = find_azure_trace("conv")
    if trace is None:
        pytest.skip("the Azure conversation trace was not found (HIKV_DATA or shared/data)")
    sec = report_section(get_preset("default"), max_requests=20, trace=trace, system="gpu")
    assert sec.title.endswith("system gpu") and "on system `gpu`" in sec.markdown
    assert "Preset paper" in sec.markdown and {r["system"] for r in sec.rows} == {"gpu"}
