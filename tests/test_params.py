"""Parameters: validation of every field, presets, JSON round trip."""

from __future__ import annotations

import dataclasses

import pytest
from cost_helpers import check_rejected

from hikv.params import (
    AcceleratorParams,
    Config,
    HiKVPolicy,
    KeyFormat,
    KVLayout,
    LoaderParams,
    Method,
    MethodSpec,
    ModelShape,
    ParamError,
    SorterParams,
    Stage1Scorer,
    Stage1Variant,
    Stage2Kind,
    Stage2Rule,
    config_from_json,
    config_to_json,
    from_dict,
    to_dict,
)
from hikv.presets import MODEL_SHAPES, PRESETS, get_model_shape, get_preset

# (class, field, bad value, words the message must contain)
REJECTED = [
    (KVLayout, "head_dim", 4, ["head_dim", "4", "[8, 1024]"]),
    (KVLayout, "head_dim", 20, ["head_dim", "multiple of 8"]),
    (KVLayout, "head_dim", 64.0, ["head_dim", "integer"]),
    (KVLayout, "elem_bytes", 3, ["elem_bytes", "power of two"]),
    (KVLayout, "elem_bytes", 8, ["elem_bytes", "[1, 4]"]),
    (KVLayout, "burst_bytes", 48, ["burst_bytes", "power of two"]),
    (KVLayout, "burst_bytes", 2, ["burst_bytes", "[4, 4096]"]),
    (KVLayout, "align_bytes", 0, ["align_bytes", "[1, 4096]"]),
    (KVLayout, "align_bytes", 24, ["align_bytes", "power of two"]),
    (KVLayout, "page_tokens", 0, ["page_tokens"]),
    (KVLayout, "page_tokens", 12, ["page_tokens", "power of two"]),
    (Stage2Rule, "kind", "static", ["kind", "'static'"]),
    (Stage2Rule, "keep", -1, ["keep", "-1"]),
    (Stage2Rule, "group", 0, ["group"]),
    (HiKVPolicy, "budget", 0, ["budget", "0", ">= 1"]),
    (HiKVPolicy, "sinks", 300, ["sinks", "300", "[0, 256]"]),
    (HiKVPolicy, "recent", 253, ["recent", "253", "[0, 252]"]),
    (HiKVPolicy, "obs_window", 0, ["obs_window"]),
    (HiKVPolicy, "pool_kernel", 4, ["pool_kernel", "odd"]),
    (HiKVPolicy, "compact_interval", 0, ["compact_interval"]),
    (HiKVPolicy, "stage1", "evict", ["stage1", "'evict'"]),
    (HiKVPolicy, "scorer", None, ["scorer"]),
    (HiKVPolicy, "lowbit_bits", 9, ["lowbit_bits", "[1, 8]"]),
    (HiKVPolicy, "lowbit_channels", -1, ["lowbit_channels", "[0, 1024]"]),
    (HiKVPolicy, "k_rule", None, ["k_rule"]),
    (HiKVPolicy, "v_rule", Stage2Rule(Stage2Kind.QUERY_CHANNELS, 8), ["v_rule", "query"]),
    (SorterParams, "lanes", 3, ["lanes", "power of two"]),
    (SorterParams, "lanes", 1, ["lanes", "[2, 64]"]),
    (SorterParams, "key_width", 0, ["key_width", "[1, 32]"]),
    (SorterParams, "max_n", 1, ["max_n"]),
    (SorterParams, "max_k", 5000, ["max_k", "5000", "[1, 4096]"]),
    (SorterParams, "max_vec", 1, ["max_vec"]),
    (SorterParams, "kind", "radix", ["kind", "'merge'", "'radix'"]),
    (SorterParams, "digit_bits", 0, ["digit_bits", "[1, 8]"]),
    (SorterParams, "digit_bits", 9, ["digit_bits", "[1, 8]"]),
    (LoaderParams, "addr_width", 8, ["addr_width", "[12, 64]"]),
    (LoaderParams, "data_width", 96, ["data_width", "power of two"]),
    (LoaderParams, "max_burst_beats", 257, ["max_burst_beats", "[1, 256]"]),
    (LoaderParams, "max_outstanding", 0, ["max_outstanding"]),
    (LoaderParams, "id_width", 0, ["id_width"]),
    (LoaderParams, "channel_pages", 1, ["channel_pages", "True or False"]),
    (LoaderParams, "masked_records", "yes", ["masked_records", "True or False"]),
    (LoaderParams, "max_tokens", 0, ["max_tokens"]),
    (AcceleratorParams, "clock_hz", 0, ["clock_hz", "> 0"]),
    (AcceleratorParams, "pe_lanes", 0, ["pe_lanes"]),
    (AcceleratorParams, "softmax_lanes", 0, ["softmax_lanes"]),
    (AcceleratorParams, "sram_kv_bytes", 10, ["sram_kv_bytes"]),
    (AcceleratorParams, "sram_q_bytes", 10, ["sram_q_bytes"]),
    (AcceleratorParams, "memory", "hbm2", ["memory", "'hbm2'"]),
    (AcceleratorParams, "mem_bandwidth_bytes_per_s", -1.0, ["mem_bandwidth_bytes_per_s"]),
    (AcceleratorParams, "mem_latency_s", -1e-9, ["mem_latency_s"]),
    (AcceleratorParams, "tech_nm", 22, ["tech_nm", "22", "(45, 28, 16, 7)"]),
    (AcceleratorParams, "device_memory_bytes", 1, ["device_memory_bytes"]),
    (AcceleratorParams, "linear_flops_per_s", 0.0, ["linear_flops_per_s"]),
    (AcceleratorParams, "clock_policy", "slowest", ["clock_policy", "per_block", "single"]),
    (AcceleratorParams, "pe_array_clock_hz", -1.0, ["pe_array_clock_hz", "[0,"]),
    (AcceleratorParams, "sorter_clock_hz", 1e12, ["sorter_clock_hz", "[0,"]),
    (AcceleratorParams, "loader_clock_hz", -1.0, ["loader_clock_hz", "[0,"]),
    (AcceleratorParams, "scorer_clock_hz", float("nan"), ["scorer_clock_hz", "finite"]),
    (AcceleratorParams, "clock_source", 3, ["clock_source", "string"]),
    (ModelShape, "name", "", ["name"]),
    (ModelShape, "layers", 0, ["layers"]),
    (ModelShape, "q_heads", 0, ["q_heads"]),
    (ModelShape, "kv_heads", 2, ["kv_heads", "divide"]),
    (ModelShape, "head_dim", 4, ["head_dim"]),
    (ModelShape, "hidden", 4, ["hidden"]),
    (ModelShape, "intermediate", 4, ["intermediate"]),
    (ModelShape, "vocab", 1, ["vocab"]),
    (ModelShape, "weight_bytes_per_param", 0, ["weight_bytes_per_param"]),
    (ModelShape, "tied_embeddings", 1, ["tied_embeddings"]),
    (MethodSpec, "method", "h2o", ["method", "'h2o'"]),
    (MethodSpec, "budget", 0, ["budget"]),
    (MethodSpec, "recent", -1, ["recent", "-1", ">= 0"]),
    (MethodSpec, "channels", 0, ["channels"]),
    (MethodSpec, "page_tokens", 12, ["page_tokens", "power of two"]),
    (MethodSpec, "label_bits", 3, ["label_bits", "(2, 4, 8, 16)"]),
    (MethodSpec, "hikv", HiKVPolicy(), ["hikv", "only allowed"]),
    (MethodSpec, "sinks", -1, ["sinks", "-1", ">= 0"]),
    (MethodSpec, "averaged", "yes", ["averaged", "bool"]),
    (Config, "key_format", "fp16", ["key_format"]),
    (Config, "context", 0, ["context"]),
]


@pytest.mark.parametrize("cls,name,value,words", REJECTED,
                         ids=[f"{c.__name__}.{n}={v!r}" for c, n, v, _ in REJECTED])
def test_init_wrong_field(cls, name, value, words):
    check_rejected(cls, name, value, words, exact_name=False)


def test_every_field_has_a_rejection_test():
    covered = {(c, n) for c, n, _, _ in REJECTED}
    structural = {(Config, "name"), (Config, "layout"), (Config, "policy"), (Config, "sorter"),
                  (Config, "loader"), (Config, "accel"), (Config, "model"),
                  (Config, "serving"),   # ServingParams: tests/test_serving_params.py
                  (Config, "scorer")}    # ScorerParams: tests/test_scorer_ref.py
    for cls in (KVLayout, Stage2Rule, HiKVPolicy, SorterParams, LoaderParams,
                AcceleratorParams, ModelShape, MethodSpec, Config):
        for f in dataclasses.fields(cls):
            assert (cls, f.name) in covered | structural, f"{cls.__name__}.{f.name} untested"


def test_hand_set_clock_needs_its_source():
    with pytest.raises(ParamError, match="clock_source.*sorter_clock_hz"):
        AcceleratorParams(sorter_clock_hz=6e8)
    assert AcceleratorParams(sorter_clock_hz=6e8, clock_source="P&R").sorter_clock_hz == 6e8


def test_cross_checks():
    with pytest.raises(ParamError, match="channel groups"):
        Stage2Rule(Stage2Kind.CHANNEL_GROUPS, keep=12, group=8)
    with pytest.raises(ParamError, match="keep = 0 must be >= 1"):
        Stage2Rule(Stage2Kind.STATIC, keep=0)
    cfg = get_preset("default")
    with pytest.raises(ParamError, match="layout.head_dim = 128 must equal"):
        cfg.replace(layout=KVLayout(head_dim=128))
    with pytest.raises(ParamError, match=r"keep = 96 is out of range: allowed \[1, 64\]"):
        cfg.replace(policy=HiKVPolicy(v_rule=Stage2Rule(Stage2Kind.STATIC, 96)))
    with pytest.raises(ParamError, match="max_vec = 32 must be >= head_dim = 64"):
        cfg.replace(sorter=SorterParams(max_vec=32))
    with pytest.raises(ParamError, match="key_width = 20 must be <= 16"):
        cfg.replace(sorter=SorterParams(key_width=20))
    with pytest.raises(ParamError, match="wider than one burst"):
        cfg.replace(loader=LoaderParams(data_width=1024))
    with pytest.raises(ParamError, match="must equal"):
        MethodSpec(method=Method.HIKV, budget=100, hikv=HiKVPolicy(budget=256))
    with pytest.raises(ParamError, match=r"recent = 300 is out of range: allowed \[0, 256\]"):
        MethodSpec(Method.H2O, budget=256, recent=300)
    with pytest.raises(ParamError, match="must be a HiKVPolicy"):
        MethodSpec(method=Method.HIKV)


def test_derived_properties():
    lay = KVLayout(head_dim=64, elem_bytes=2, burst_bytes=64, align_bytes=64)
    assert lay.row_bytes == 128 and lay.mask_bytes == 8
    assert lay.record_bytes(48) == 104 and lay.stride(104) == 128
    assert KVLayout(align_bytes=8).stride(104) == 104
    s = SorterParams(max_n=4096, max_vec=128)
    assert s.index_width == 12 and s.count_width == 13
    lp = LoaderParams(data_width=128)
    assert lp.beat_bytes == 16 and lp.axsize == 4
    p = HiKVPolicy(budget=256, sinks=4, recent=32)
    assert p.important == 220
    assert MODEL_SHAPES["llama3-8b"].group == 4


def test_model_shapes_match_published_parameter_counts():
    # published sizes: SmolLM2-135M 134.5M, Gemma-3-270M 268M, Llama-3-8B 8.03B
    assert abs(MODEL_SHAPES["smollm2-135m"].params / 1e6 - 134.5) < 0.5
    assert abs(MODEL_SHAPES["gemma3-270m"].params / 1e6 - 268.1) < 1.0
    assert abs(MODEL_SHAPES["llama3-8b"].params / 1e9 - 8.03) < 0.01


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_json_round_trip(name):
    cfg = get_preset(name)
    assert cfg.name == name
    assert config_from_json(config_to_json(cfg)) == cfg


def test_method_spec_round_trip_and_labels():
    for spec in (MethodSpec(), MethodSpec(Method.SPARQ, budget=64, channels=8),
                 MethodSpec.for_hikv(HiKVPolicy(stage1=Stage1Variant.EVICT))):
        assert from_dict(MethodSpec, to_dict(spec)) == spec
    assert MethodSpec(Method.SPARQ, budget=64, channels=8).label == "sparq@64/r8"
    assert MethodSpec.for_hikv(HiKVPolicy()).label == "hikv-query_aware@256/lowbit4"
    assert MethodSpec.for_hikv(HiKVPolicy(
        scorer=Stage1Scorer.PAGE_BOUNDS, v_rule=Stage2Rule(Stage2Kind.STATIC, 48),
        k_rule=Stage2Rule(Stage2Kind.CHANNEL_GROUPS, 32))).label == \
        "hikv-query_aware@256/k:channel_groups32g8/v:static48"


def test_from_dict_errors_name_the_problem():
    with pytest.raises(ParamError, match=r"has no parameter\(s\) \['bogus'\]"):
        from_dict(KVLayout, {"bogus": 1})
    with pytest.raises(ParamError, match="KeyFormat|key_format = 'fp8' is not one of"):
        from_dict(Config, {"key_format": "fp8"})
    with pytest.raises(ParamError, match="expects a JSON object"):
        from_dict(KVLayout, [1])


def test_unknown_preset_lists_known():
    with pytest.raises(ParamError, match=r"known presets: \['default', 'paper', 'tiny'\]"):
        get_preset("huge")
    with pytest.raises(ParamError, match="known"):
        get_model_shape("gpt5")


def test_params_module_is_stdlib_only():
    import subprocess
    import sys

    code = ("import sys, hikv.params, hikv.presets; "
            "bad = [m for m in ('torch', 'amaranth', 'numpy') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_key_format_enum_values():
    assert {k.value for k in KeyFormat} == {"fp16", "bf16", "uint"}


def test_preset_overrides():
    from hikv.presets import with_overrides

    base = get_preset("paper")
    cfg = with_overrides(base, ["policy.scorer=page_bounds", "policy.v_rule.kind=static",
                                "policy.v_rule.keep=96", "accel.pe_lanes=2048"])
    assert cfg.policy.scorer is Stage1Scorer.PAGE_BOUNDS
    assert cfg.policy.v_rule == Stage2Rule(Stage2Kind.STATIC, 96)
    assert cfg.accel.pe_lanes == 2048 and cfg.layout == base.layout
    assert cfg.name == ("paper[policy.scorer=page_bounds,policy.v_rule.kind=static,"
                        "policy.v_rule.keep=96,accel.pe_lanes=2048]")
    assert with_overrides(base, []) is base
    with pytest.raises(ParamError, match="'policy.scorr' is not a parameter; known here"):
        with_overrides(base, ["policy.scorr=x"])
    with pytest.raises(ParamError, match="scorer = 'x' is not one of"):
        with_overrides(base, ["policy.scorer=x"])
    with pytest.raises(ParamError, match="must look like section.field=value"):
        with_overrides(base, ["policy.scorer"])
    with pytest.raises(ParamError, match="recent = 4096 is out of range"):
        with_overrides(base, ["policy.recent=4096"])

