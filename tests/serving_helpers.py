"""Shared helpers of the serving and cluster tests (not a test module): a configuration with
little KV room, and the bursty Poisson workload they load it with."""

from __future__ import annotations

import dataclasses

from hikv.params import SyntheticWorkload
from hikv.sim.serving.workload import Workload, poisson_workload


def tight(cfg, kv_tokens: int):
    """``cfg`` with device memory leaving room for about ``kv_tokens`` tokens of full KV."""
    m = cfg.model
    per_token = m.layers * m.kv_heads * 2 * cfg.layout.stride(cfg.layout.row_bytes)
    mem = m.weight_bytes + cfg.serving.workspace_bytes + kv_tokens * per_token
    return cfg.replace(accel=dataclasses.replace(cfg.accel, device_memory_bytes=mem))


def burst_workload(seed: int, n: int = 160, rate: float = 60.0) -> Workload:
    """Poisson arrivals at ``rate``/s of lognormal prompts (median 600, up to 4,000 tokens) and
    outputs (median 60, up to 400), seeded by ``seed``."""
    params = SyntheticWorkload(rate_per_s=rate, requests=n, prompt_median_tokens=600.0,
                               prompt_sigma=0.8, output_median_tokens=60.0, output_sigma=0.8,
                               max_prompt_tokens=4000, max_output_tokens=400)
    return poisson_workload(params, seed=seed)
