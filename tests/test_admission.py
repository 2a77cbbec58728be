"""Admission policies: whole-prompt reservation (``sarathi``, ``NAME:prompt``; vLLM V0 /
Sarathi-Serve as Vidur simulates them) against chunk-by-chunk allocation (``vllm-v1``):
conservation, exactness of batched decode runs, the reservation invariant, and the difference
under KV pressure on the Azure conversation trace."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from cost_helpers import assert_same_run
from serving_helpers import burst_workload, tight

from hikv.params import ParamError, SyntheticWorkload
from hikv.presets import get_preset, resolve_methods
from hikv.sim.serving.engine import kv_capacity_blocks, simulate
from hikv.sim.serving.scheduler import POLICIES, get_policy
from hikv.sim.serving.workload import find_azure_trace, poisson_workload, read_azure_trace

ROOT = Path(__file__).resolve().parents[1]


def test_policy_names_and_admission_override():
    assert POLICIES["sarathi"].admission == "prompt"
    assert POLICIES["sarathi"].watermark_fraction == 0.01
    assert POLICIES["vllm-v1"].admission == "chunk"
    p = get_policy("vllm-v1:prompt")
    assert p.admission == "prompt" and p.name == "vllm-v1:prompt" and p.watermark_fraction == 0
    assert get_policy("sarathi:prompt") is POLICIES["sarathi"]
    with pytest.raises(ParamError, match="admission = 'whole' is not one of: chunk, prompt"):
        get_policy("vllm-v1:whole")
    with pytest.raises(ParamError, match="policy = 'v0' is not one of"):
        get_policy("v0")


@pytest.mark.parametrize("name", ["full", "h2o", "snapkv", "hikv-evict"])
@pytest.mark.parametrize("policy", ["sarathi", "vllm-v1:prompt"])
def test_prompt_admission_conserves_and_batched_runs_are_exact(name, policy):
    cfg = tight(get_preset("default"), 9_000)
    spec = resolve_methods(cfg, name)[name]
    wl = burst_workload(seed=11)
    a = simulate(cfg, spec, wl, policy=policy)
    b = simulate(cfg, spec, wl, policy=policy, fast_forward=False)
    ctx = f"{name} {policy}, seed 11"
    assert (a.completions == 1).all() and a.kv_used_blocks[-1] == 0, ctx
    assert a.decode_tokens + a.prefill_completions == int(wl.output_tokens.sum()), ctx
    assert a.prefill_tokens == int((wl.prompt_tokens + a.recomputed_tokens).sum()), ctx
    assert int(a.kv_used_blocks.max()) <= a.kv_capacity_blocks, ctx
    assert a.admission == "prompt" and a.summary()["admission"] == "prompt", ctx
    assert_same_run(a, b, ctx)


def test_prompt_admission_reserves_the_whole_prompt():
    """One long prompt in small chunks: under chunk admission its blocks grow chunk by
    chunk; under prompt admission the first iteration already holds the whole prompt."""
    cfg = get_preset("default")
    cfg = cfg.replace(serving=dataclasses.replace(cfg.serving, max_batched_tokens=256))
    spec = resolve_methods(cfg, "full")["full"]
    from hikv.sim.serving.workload import Workload

    wl = Workload(np.array([0.0]), np.array([2048]), np.array([4]), 1.0, "one prompt")
    chunk = simulate(cfg, spec, wl, policy="vllm-v1", fast_forward=False)
    whole = simulate(cfg, spec, wl, policy="vllm-v1:prompt", fast_forward=False)
    blocks = 2048 // cfg.serving.block_tokens
    assert whole.kv_used_blocks[0] == blocks            # reserved at the first schedule
    assert chunk.kv_used_blocks[0] == 256 // cfg.serving.block_tokens
    assert np.array_equal(whole.finish_s, chunk.finish_s)  # same timing: admission only


def test_prompt_admission_preempts_less_under_memory_pressure():
    cfg = tight(get_preset("default"), 9_000)
    spec = resolve_methods(cfg, "full")["full"]
    for seed in (11, 12, 13):
        wl = burst_workload(seed=seed)
        chunk = simulate(cfg, spec, wl, policy="vllm-v1")
        whole = simulate(cfg, spec, wl, policy="sarathi")
        assert whole.preemptions.sum() < chunk.preemptions.sum(), f"seed {seed}"


def test_watermark_keeps_blocks_free_at_admission():
    """A burst of prompts with two output tokens (decode growth within their last block):
    without a watermark admissions fill the KV memory; with a 30% watermark they stop at 70%
    of it."""
    cfg = tight(get_preset("default"), 9_000)
    spec = resolve_methods(cfg, "full")["full"]
    params = SyntheticWorkload(rate_per_s=5000.0, requests=80, prompt_median_tokens=600.0,
                               prompt_sigma=0.3, output_median_tokens=2.0, output_sigma=0.0,
                               max_prompt_tokens=2000, max_output_tokens=2)
    wl = poisson_workload(params, seed=3)
    cap = kv_capacity_blocks(cfg)
    peak = {}
    for w in (0.0, 0.3):
        pol = dataclasses.replace(POLICIES["sarathi"], name=f"wm{w}", watermark_fraction=w)
        r = simulate(cfg, spec, wl, policy=pol)
        assert (r.completions == 1).all() and r.preemptions.sum() == 0, f"seed 3, {w}"
        peak[w] = int(r.kv_used_blocks.max())
    assert peak[0.0] > 0.9 * cap, peak
    assert peak[0.3] <= cap - int(0.3 * cap), peak


def test_admission_under_kv_pressure_on_the_conversation_trace():
    """Llama-3-8B on an A100 with 40 GiB (KV for 172k tokens), roofline with measured
    efficiencies, the first 6,000 requests of the conversation trace at 8 requests/s: chunk
    admission preempts far more often and its TTFT tail is longer."""
    path = find_azure_trace("conv", start=ROOT / "tests")
    if path is None:
        pytest.skip("Azure LLM conversation trace not found (HIKV_DATA or "
                    "shared/data/azure-llm-2023 above the repository)")
    cfg = get_preset("paper")
    cfg = cfg.replace(accel=dataclasses.replace(
        cfg.accel, mem_bandwidth_bytes_per_s=2.039e12, linear_flops_per_s=312e12,
        device_memory_bytes=40 * 2**30))
    spec = resolve_methods(cfg, "full")["full"]
    wl = read_azure_trace(path, limit=6000).at_rate(8.0)
    chunk = simulate(cfg, spec, wl, cost_model="roofline-eff", policy="vllm-v1")
    whole = simulate(cfg, spec, wl, cost_model="roofline-eff", policy="sarathi")
    pc, pw = int(chunk.preemptions.sum()), int(whole.preemptions.sum())
    assert pc > 100 and pw < pc / 5, (pc, pw)
    sc, sw = chunk.summary(), whole.summary()
    assert sw["ttft_p99_s"] < sc["ttft_p99_s"], (sc["ttft_p99_s"], sw["ttft_p99_s"])
    assert sw["throughput_tok_per_s"] >= sc["throughput_tok_per_s"]
