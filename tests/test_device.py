"""The measured-device step cost: Vidur-format operator profiles (reproduction at profiled
token counts, cross-validated interpolation), the fitted GPU attention model against the
published A100 measurements, the efficiencies derived from the profile (the defaults of
``RooflineEfficiency``), the step-cost interface and the CLI.

The profiles are never copied into the repository: tests find them in
``$HIKV_DATA/vidur-profiles`` or a ``shared/data/vidur-profiles`` directory above the checkout
and skip with that reason otherwise.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from hikv.params import ParamError, RooflineEfficiency
from hikv.presets import get_model_shape, get_preset, resolve_methods
from hikv.scripts.cli import main
from hikv.sim.serving.device import (
    DEVICES,
    GEMM_OPS,
    LAYER_OPS,
    PROFILE_MODELS,
    PROFILE_OPS,
    DeviceStepCost,
    EfficientRooflineStepCost,
    derive_efficiency,
    device_cost_for,
    find_profile,
    read_profile,
    tile_interp,
)
from hikv.sim.serving.device_report import breakdown_batches
from hikv.sim.serving.gpu_attention import (
    A100_ATTENTION,
    PUBLISHED,
    fit_attention,
    predict_measurement,
)
from hikv.sim.serving.step_cost import IterationBatch, RooflineStepCost, StepCostBase

ROOT = Path(__file__).resolve().parents[1]
LLAMA3 = PROFILE_MODELS["llama3-8b"]


def _profiles_root() -> Path | None:
    env = os.environ.get("HIKV_DATA")
    if env and (Path(env) / "vidur-profiles").is_dir():
        return Path(env) / "vidur-profiles"
    for parent in ROOT.parents:
        d = parent / "shared" / "data" / "vidur-profiles"
        if d.is_dir():
            return d
    return None


_SKIP = ("Vidur-format profiles not found: set HIKV_DATA to a directory holding "
         "vidur-profiles/, or place shared/data/vidur-profiles above the repository")


@pytest.fixture(scope="module")
def all_profiles() -> list[Path]:
    root = _profiles_root()
    files = sorted(root.glob("*/*/*/mlp.csv")) if root else []
    if not files:
        pytest.skip(_SKIP)
    return files


@pytest.fixture(scope="module")
def a100_llama3() -> Path:
    p = find_profile("a100", LLAMA3, start=ROOT / "tests")
    if p is None:
        pytest.skip(_SKIP)
    return p


def _device_cfg(profile: Path):
    return device_cost_for(get_preset("paper"), "a100", profile=profile)


# --------------------------------------------------------------------------- profiles
def test_profile_reproduced_at_profiled_token_counts(all_profiles):
    """Every operator at every profiled count, every tensor-parallel degree: the interpolated
    time equals the profile's mean (rows repeated at a count averaged)."""
    import csv

    for path in all_profiles:
        rows = list(csv.DictReader(path.open()))
        for tp in sorted({int(r["num_tensor_parallel_workers"]) for r in rows}):
            prof = read_profile(path, tensor_parallel=tp)
            sel = [r for r in rows if int(r["num_tensor_parallel_workers"]) == tp]
            for op in PROFILE_OPS:
                want: dict[int, list[float]] = {}
                for r in sel:
                    want.setdefault(int(r["num_tokens"]), []).append(
                        float(r[f"time_stats.{op}.mean"]) * 1e-3)
                n = np.array(sorted(want))
                got = prof.time_s(op, n)
                ref = np.array([np.mean(want[k]) for k in n])
                np.testing.assert_allclose(got, ref, rtol=1e-12, err_msg=f"{path} tp {tp} {op}")


def _layer_total(prof) -> np.ndarray:
    return sum(prof.times_s[op] for op in LAYER_OPS)


@pytest.mark.parametrize("folds", [5])
def test_interpolation_cross_validated(all_profiles, folds):
    """K-fold cross-validation over the profiled token counts (the smallest and largest
    always kept): a layer's non-attention time at held-out counts, interpolated from the
    rest, is within 2% on average and 5% at the 95th percentile for every profile and
    tensor-parallel degree (measured: mean 0.85-1.39%, P95 2.4-4.4%, worst 4.4-18% just past
    a GEMM tile step; profile rows repeated at one count differ by up to 3.9%)."""
    seed = 20261201
    for path in all_profiles:
        for tp in (1, 2, 4, 8):
            try:
                prof = read_profile(path, tensor_parallel=tp)
            except ParamError:
                continue
            n, y = prof.tokens, _layer_total(prof)
            rng = np.random.default_rng(seed)
            inner = rng.permutation(np.arange(1, n.size - 1))
            err = np.empty(inner.size)
            for f in range(folds):
                held = inner[f::folds]
                keep = np.setdiff1d(np.arange(n.size), held)
                err[f::folds] = tile_interp(n[held], n[keep], y[keep]) / y[held] - 1
            a = np.abs(err)
            ctx = f"{path.relative_to(path.parents[3])} tp {tp}, seed {seed}"
            assert a.mean() < 0.02, f"{ctx}: mean |error| {a.mean():.4f}"
            assert np.percentile(a, 95) < 0.05, f"{ctx}: P95 {np.percentile(a, 95):.4f}"


def test_tile_interp_respects_tile_steps_and_extrapolates():
    n = np.array([1, 32, 64, 72, 128, 136, 192, 256])
    y = np.where(n <= 64, 1.0, np.where(n <= 128, 2.0, 3.0))
    q = np.array([0, 1, 40, 64, 65, 100, 129, 150, 300])
    got = tile_interp(q, n, y)
    np.testing.assert_allclose(got, [0.0, 1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0])
    lin = tile_interp(np.array([512]), np.array([128, 256]), np.array([1.0, 2.0]))
    assert lin[0] == pytest.approx(4.0)


def test_profile_errors_name_the_problem(tmp_path, a100_llama3):
    with pytest.raises(ParamError, match="no such file"):
        read_profile(tmp_path / "none.csv")
    with pytest.raises(ParamError, match="tensor_parallel = 3 is not in profile"):
        read_profile(a100_llama3, tensor_parallel=3)
    bad = tmp_path / "mlp.csv"
    bad.write_text("num_tokens,num_tensor_parallel_workers\n1,1\n")
    with pytest.raises(ParamError, match="lacks the Vidur mlp.csv columns"):
        read_profile(bad)
    prof = read_profile(a100_llama3)
    with pytest.raises(ParamError, match="does not match model 'smollm2-135m'"):
        prof.check_model(get_model_shape("smollm2-135m"))
    with pytest.raises(ParamError, match="no operator profile is known"):
        device_cost_for(get_preset("default"), "a100")
    with pytest.raises(ParamError, match="device = 'h100' is not one of"):
        device_cost_for(get_preset("paper"), "h100")


# --------------------------------------------------------------------------- attention
def test_attention_fit_matches_published_a100_measurements():
    """The preset is the fit rounded to 3 significant digits; every prefill measurement is
    within 15% and all decode measurements but one (B=64 at 1k: -21%) are too."""
    fit = fit_attention()
    for f in ("decode_bytes_per_s", "decode_fixed_s", "prefill_flops_per_s", "prefill_fixed_s",
              "causal_waste_keys"):
        a, b = getattr(A100_ATTENTION, f), getattr(fit, f)
        assert float(f"{b:.3g}") == pytest.approx(a, rel=1e-12), (f, a, b)
    err = {m.label: predict_measurement(A100_ATTENTION, m) / m.time_s - 1 for m in PUBLISHED}
    bad = [k for k, e in err.items() if abs(e) > 0.15]
    assert bad == ["decode B=64 q=1 kv=1024 H=16/2"], err
    assert sum(abs(e) <= 0.15 for e in err.values()) >= 3
    assert all(abs(e) <= 0.10 for k, e in err.items() if "decode" not in k), err


# --------------------------------------------------------------------------- efficiencies
def test_default_efficiencies_are_derived_from_the_a100_profile(a100_llama3):
    eff = derive_efficiency(read_profile(a100_llama3), get_model_shape("llama3-8b"),
                            DEVICES["a100"])
    d = RooflineEfficiency()
    for f in ("compute_fraction", "bandwidth_fraction", "elementwise_bandwidth_fraction",
              "elementwise_fixed_s", "attention_compute_fraction",
              "attention_bandwidth_fraction", "attention_fixed_s"):
        assert float(f"{getattr(eff, f):.2g}") == pytest.approx(getattr(d, f), rel=1e-9), \
            (f, getattr(eff, f), getattr(d, f))


def test_efficient_roofline_tracks_the_measured_device(a100_llama3):
    """With the derived defaults the roofline is within 25% of the measured device on every
    tabled iteration (mean within 10%); the plain roofline is 1.4-2.1x optimistic."""
    cfg, cost = _device_cfg(a100_llama3)
    spec = resolve_methods(cfg, "full")["full"]
    dev, eff, rf = cost(cfg, spec), EfficientRooflineStepCost(cfg, spec), RooflineStepCost(cfg,
                                                                                          spec)
    r_eff, r_rf = [], []
    for label, b in breakdown_batches():
        t = dev.iteration_time_s(b)
        r_eff.append(eff.iteration_time_s(b) / t)
        r_rf.append(t / rf.iteration_time_s(b))
        assert abs(r_eff[-1] - 1) < 0.25, (label, r_eff[-1])
    assert abs(np.mean(r_eff) - 1) < 0.10, np.mean(r_eff)
    assert 1.4 < min(r_rf) and max(r_rf) < 2.1, (min(r_rf), max(r_rf))


# --------------------------------------------------------------------------- step cost
def test_device_step_cost_interface_and_breakdown(a100_llama3):
    cfg, cost = _device_cfg(a100_llama3)
    prompt, step = np.array([10, 700, 3000]), np.array([1, 40, 200])

    class Loop(StepCostBase):
        def __init__(self, inner):
            self.inner = inner

        def iteration_time_s(self, batch):
            return self.inner.iteration_time_s(batch)

    for name, spec in resolve_methods(cfg, "all").items():
        c = cost(cfg, spec)
        assert isinstance(c, DeviceStepCost)
        np.testing.assert_allclose(c.decode_run_times_s(prompt, step, 20),
                                   Loop(c).decode_run_times_s(prompt, step, 20), rtol=1e-12,
                                   err_msg=name)
        for label, b in breakdown_batches():
            bd = c.breakdown(b)
            assert math.isclose(sum(bd.values()), c.iteration_time_s(b), rel_tol=1e-12), label
            assert all(v >= 0 for v in bd.values()) and c.iteration_time_s(b) > 0, label
    full = cost(cfg, resolve_methods(cfg, "full")["full"])
    # decode attention grows with context; the GEMMs are the profile's (32 layers)
    t = [full.iteration_time_s(IterationBatch(decode_prompt=[n] * 32, decode_step=[1] * 32))
         for n in (100, 1000, 10000)]
    assert t[0] < t[1] < t[2]
    b = IterationBatch(decode_prompt=[1000] * 32, decode_step=[1] * 32)
    prof = read_profile(a100_llama3)
    assert full.breakdown(b)["mlp_up_proj"] == pytest.approx(
        32 * float(prof.time_s("mlp_up_proj", 32)[0]), rel=1e-12)
    gemm = sum(full.breakdown(b)[op] for op in GEMM_OPS)
    assert 0.5 < gemm / full.iteration_time_s(b) < 0.9


# --------------------------------------------------------------------------- CLI
def test_cli_device_breakdown_and_errors(capsys, a100_llama3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["serve", "--device", "a100", "--model", "llama3-8b", "--profile",
               str(a100_llama3), "--breakdown", "--rate", "2", "--requests", "40",
               "--method", "full"])
    out = capsys.readouterr().out
    assert rc == 0 and "decode 128 x 4096" in out and "MEASURED" in out and "MODELLED" in out
    assert "cost model device:a100" in out and os.listdir(tmp_path) == []
    assert main(["serve", "--device", "h100", "--requests", "5"]) == 2
    assert "device = 'h100' is not one of" in capsys.readouterr().err
    assert main(["serve", "--preset", "tiny", "--breakdown", "--requests", "5"]) == 2
    assert "need --device" in capsys.readouterr().err


def test_efficiency_parameters_reject_bad_values():
    for field, bad in (("compute_fraction", 1.5), ("bandwidth_fraction", 0.0),
                       ("elementwise_bandwidth_fraction", -0.1), ("elementwise_fixed_s", -1e-6),
                       ("attention_compute_fraction", "high"), ("attention_fixed_s", 2.0)):
        with pytest.raises(ParamError, match=f"RooflineEfficiency.{field}"):
            RooflineEfficiency(**{field: bad})


def test_cli_device_section_and_tensor_parallel(capsys, a100_llama3):
    rc = main(["serve", "--device", "a100", "--profile", str(a100_llama3), "--section",
               "--rate", "2", "--requests", "30", "--method", "full,hikv"])
    out = capsys.readouterr().out
    assert rc == 0 and "### Serving on a measured device" in out
    assert "MEASURED" in out and "MODELLED" in out and "NOT MODELLED" in out
    assert "hikv" in out.split("```")[1]
    rc = main(["serve", "--device", "a100", "--profile", str(a100_llama3), "--tp", "2",
               "--breakdown", "--rate", "2", "--requests", "20", "--method", "full"])
    out = capsys.readouterr().out
    assert rc == 0 and "tensor parallel 2" in out
    cfg, cost = device_cost_for(get_preset("paper"), "a100", profile=a100_llama3,
                                tensor_parallel=2)
    spec = resolve_methods(cfg, "full")["full"]
    cfg1, cost1 = _device_cfg(a100_llama3)
    one, two = cost1(cfg1, spec), cost(cfg, spec)
    b = IterationBatch(decode_prompt=[4000] * 64, decode_step=[1] * 64)
    # half the heads and half of each GEMM per GPU: faster, but not twice (fixed costs)
    assert 0.5 * one.iteration_time_s(b) < two.iteration_time_s(b) < one.iteration_time_s(b)
    assert main(["serve", "--device", "a100", "--profile", str(a100_llama3), "--tp", "3",
                 "--requests", "5"]) == 2
    assert "tensor_parallel = 3 is not in profile" in capsys.readouterr().err


def test_report_section_on_the_measured_device(a100_llama3):
    from hikv.sim.serving.device_report import report_section
    from hikv.sim.serving.workload import find_azure_trace

    trace = find_azure_trace("conv", start=ROOT / "tests")
    if trace is None:
        pytest.skip("Azure LLM conversation trace not found")
    sec = report_section(get_preset("default"), max_requests=150, trace=trace,
                         profile=a100_llama3)
    assert sec.title == "Serving on a measured device"
    assert "llama3-8b" in sec.markdown and "MEASURED" in sec.markdown
    assert "MODELLED" in sec.markdown and sec.rows[0]["requests"] == 150
    missing = report_section(get_preset("default"), trace=ROOT / "no-such-trace.csv")
    assert missing.markdown.startswith("Skipped")


def test_serve_breakdown_one_table_per_method(a100_llama3, capsys):
    """`hikv serve --device a100 --breakdown` prints the breakdown of every method asked for
    (a compressed method's table carries its selection kernels in `attn_select`)."""
    from hikv.scripts.cli import main

    rc = main(["serve", "--device", "a100", "--profile", str(a100_llama3), "--method",
               "full,quest", "--breakdown", "--requests", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    heads = [ln for ln in out.splitlines() if ln.startswith("Per-iteration time")]
    assert [h.split("method ")[1].split(",")[0] for h in heads] == ["full", "quest"]
