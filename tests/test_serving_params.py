"""Serving parameters: every field rejects bad values with a message naming it; the KV room
cross-check; presets round-trip through JSON with their serving section."""

from __future__ import annotations

import dataclasses

import pytest
from cost_helpers import check_rejected

from hikv.params import (
    AcceleratorParams,
    ParamError,
    ServingParams,
    SyntheticWorkload,
    config_from_json,
    config_to_json,
)
from hikv.presets import PRESETS, get_preset

REJECTED = [
    (SyntheticWorkload, "rate_per_s", 0.0, ["rate_per_s", "> 0"]),
    (SyntheticWorkload, "requests", 0, ["requests", "[1, "]),
    (SyntheticWorkload, "prompt_median_tokens", 0.5, ["prompt_median_tokens", ">= 1"]),
    (SyntheticWorkload, "prompt_sigma", -0.1, ["prompt_sigma", "[0, 10]"]),
    (SyntheticWorkload, "output_median_tokens", 0, ["output_median_tokens"]),
    (SyntheticWorkload, "output_sigma", 11, ["output_sigma", "[0, 10]"]),
    (SyntheticWorkload, "max_prompt_tokens", 0, ["max_prompt_tokens"]),
    (SyntheticWorkload, "max_output_tokens", 0, ["max_output_tokens"]),
    (ServingParams, "policy", "", ["policy", "non-empty"]),
    (ServingParams, "max_batched_tokens", 0, ["max_batched_tokens", "[1, "]),
    (ServingParams, "max_running", 0, ["max_running"]),
    (ServingParams, "block_tokens", 0, ["block_tokens", "[1, 4096]"]),
    (ServingParams, "workspace_bytes", -1, ["workspace_bytes", ">= 0"]),
    (ServingParams, "ttft_slo_s", 0.0, ["ttft_slo_s", "> 0"]),
    (ServingParams, "tpot_slo_s", -1.0, ["tpot_slo_s"]),
    (ServingParams, "slo_attainment", 1.5, ["slo_attainment", "(0, 1]"]),
    (ServingParams, "steady_trim", 0.5, ["steady_trim", "[0, 0.45]"]),
    (ServingParams, "synthetic", {}, ["synthetic", "SyntheticWorkload"]),
]


@pytest.mark.parametrize("cls,name,value,words", REJECTED,
                         ids=[f"{c.__name__}.{n}={v!r}" for c, n, v, _ in REJECTED])
def test_init_wrong_field(cls, name, value, words):
    check_rejected(cls, name, value, words)


def test_every_serving_field_has_a_rejection_test():
    covered = {(c, n) for c, n, _, _ in REJECTED}
    for cls in (SyntheticWorkload, ServingParams):
        for f in dataclasses.fields(cls):
            assert (cls, f.name) in covered, f"{cls.__name__}.{f.name} untested"


def test_workspace_must_leave_kv_room():
    cfg = get_preset("default")
    room = cfg.accel.device_memory_bytes - cfg.model.weight_bytes
    with pytest.raises(ParamError, match="leaves no KV memory"):
        cfg.replace(serving=dataclasses.replace(cfg.serving, workspace_bytes=room))
    with pytest.raises(ParamError, match="leaves no KV memory"):
        cfg.replace(accel=AcceleratorParams(device_memory_bytes=cfg.model.weight_bytes))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_with_serving(name):
    cfg = get_preset(name)
    assert config_from_json(config_to_json(cfg)) == cfg
    assert cfg.serving.block_tokens >= 1 and cfg.serving.policy == "vllm-v1"
