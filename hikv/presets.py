"""Named presets: the only place numbers of a configuration are written down.

RTL generation, golden model, cost model, testbenches and the CLI all take a preset name (or a
:class:`~hikv.params.Config` derived from one with ``dataclasses.replace``).
"""

from __future__ import annotations

import dataclasses

from .params import (
    AcceleratorParams,
    Config,
    HiKVPolicy,
    KVLayout,
    LoaderParams,
    MemoryType,
    Method,
    MethodSpec,
    ModelShape,
    ParamError,
    ScorerParams,
    ServingParams,
    SorterKind,
    SorterParams,
    Stage1Scorer,
    Stage1Variant,
    Stage2Kind,
    Stage2Rule,
    SyntheticWorkload,
    loader_needs_channel_pages,
    loader_needs_masked_records,
    parse_method,
)

__all__ = ["MODEL_SHAPES", "PRESETS", "get_preset", "get_model_shape", "with_overrides",
           "baseline_names", "method_names", "baselines_at", "method_specs", "baseline_specs",
           "resolve_methods", "seed_hikv", "SEED_ALIGN_BYTES", "THINK_METHODS"]

#: Transformer shapes. Real LMs used by the accuracy study, and a serving-scale model.
MODEL_SHAPES: dict[str, ModelShape] = {
    "tiny": ModelShape(name="tiny", layers=2, q_heads=4, kv_heads=2, head_dim=16, hidden=64,
                       intermediate=128, vocab=256),
    # SmolLM2-135M (Llama architecture), as in its config.json.
    "smollm2-135m": ModelShape(name="smollm2-135m", layers=30, q_heads=9, kv_heads=3, head_dim=64,
                               hidden=576, intermediate=1536, vocab=49152),
    # Gemma-3-270M: 18 layers, 4 query heads, 1 KV head of 256, vocabulary 262,144.
    "gemma3-270m": ModelShape(name="gemma3-270m", layers=18, q_heads=4, kv_heads=1,
                              head_dim=256, hidden=640, intermediate=2048, vocab=262144),
    # Llama-3-8B-like: 32 layers, GQA 32/8, head dim 128.
    "llama3-8b": ModelShape(name="llama3-8b", layers=32, q_heads=32, kv_heads=8, head_dim=128,
                            hidden=4096, intermediate=14336, vocab=128256,
                            tied_embeddings=False),
}


#: Poisson workload fitted to the Azure LLM conversation trace (2023): medians and standard
#: deviations of ln(tokens) of ContextTokens (1020, 0.99) and GeneratedTokens (129, 0.86).
#: Serving SLOs: "paper" takes DistServe's chatbot targets (TTFT 0.25 s, TPOT 0.1 s, 90%);
#: "default" (a 135M model reading its weights in about 1 ms per iteration) scales them to
#: TTFT 0.1 s and TPOT 5 ms (about 5x its unloaded iteration time).
_CONV_LIKE = SyntheticWorkload(rate_per_s=5.0, requests=2000, prompt_median_tokens=1020.0,
                               prompt_sigma=0.99, output_median_tokens=129.0, output_sigma=0.86,
                               max_prompt_tokens=16384, max_output_tokens=1024)


def _tiny() -> Config:
    # a test preset: it keeps page-bound scores and V Stage II so tests reach those paths
    policy = HiKVPolicy(budget=16, sinks=2, recent=4, obs_window=4, pool_kernel=3,
                        compact_interval=4, scorer=Stage1Scorer.PAGE_BOUNDS,
                        v_rule=Stage2Rule(Stage2Kind.STATIC, 12), k_rule=Stage2Rule())
    return Config(
        name="tiny",
        layout=KVLayout(head_dim=16, elem_bytes=2, burst_bytes=16, align_bytes=16,
                        page_tokens=4),
        policy=policy,
        # the radix-select top-k engine (Stage I) and the Stage II selection block (the V
        # rule): the same step as the merge sorter at half its area, so the numbers favour it
        # (hikv.sim.cost.engines.favoured_kind; `hikv report --preset tiny`, docs/topk.md)
        sorter=SorterParams(lanes=4, key_width=8, max_n=64, max_k=16, max_vec=16,
                            kind=SorterKind.RADIX),
        # beats narrower than a burst: the tests reach the loader's sub-burst corners
        loader=LoaderParams(addr_width=16, data_width=32, max_burst_beats=8,
                            max_outstanding=2, id_width=2, max_tokens=64,
                            channel_pages=loader_needs_channel_pages(policy),
                            masked_records=loader_needs_masked_records(policy)),
        scorer=ScorerParams(lanes=4, query_bits=8),   # L = the sorter's P
        accel=AcceleratorParams(pe_lanes=8, softmax_lanes=4, sram_kv_bytes=4096,
                                sram_q_bytes=256, device_memory_bytes=1 << 30),
        model=MODEL_SHAPES["tiny"],
        context=64,
        serving=ServingParams(policy="vllm-v1", max_batched_tokens=256, max_running=16,
                              block_tokens=4, workspace_bytes=1 << 20, ttft_slo_s=1e-3,
                              tpot_slo_s=1e-4, slo_attainment=0.9, steady_trim=0.1,
                              synthetic=SyntheticWorkload(
                                  rate_per_s=1000.0, requests=200, prompt_median_tokens=40.0,
                                  prompt_sigma=0.5, output_median_tokens=8.0, output_sigma=0.5,
                                  max_prompt_tokens=64, max_output_tokens=32)),
    )


def _chosen_policy(*, budget: int, recent: int, compact_interval: int) -> HiKVPolicy:
    """HiKV as the accuracy study chose it (docs/RESULTS.md, SmolLM2-135M and Gemma-3-270M):
    query-aware Stage I scored by 4-bit keys reaches iso-accuracy with the fewest bytes; no
    Stage II. The presets that use it set the sizes."""
    return HiKVPolicy(budget=budget, sinks=4, recent=recent, obs_window=32, pool_kernel=7,
                      compact_interval=compact_interval, stage1=Stage1Variant.QUERY_AWARE,
                      scorer=Stage1Scorer.LOWBIT_KEYS, lowbit_bits=4,
                      k_rule=Stage2Rule(), v_rule=Stage2Rule())


def _default() -> Config:
    # Stage II is off: a V record of 48 of 64 elements (8 + 96 B) still takes two 64-byte
    # bursts, so it saves no DRAM bytes in this layout and only costs accuracy
    policy = _chosen_policy(budget=256, recent=32, compact_interval=16)
    return Config(
        name="default",
        layout=KVLayout(head_dim=64, elem_bytes=2, burst_bytes=64, align_bytes=64,
                        page_tokens=16),
        policy=policy,
        # 32 sorter and scoring-unit lanes: the only equal-lane point (hw/scorer_sorter.py
        # chains the two only with L = P) whose query-aware HiKV can reach >= 90 % of its
        # bytes roofline; 16 lanes stop at 88 % even at 1 GHz (docs/cost_model.md, 10)
        sorter=SorterParams(lanes=32, key_width=16, max_n=4096, max_k=512, max_vec=128),
        # one 64-B burst per beat (the widest beat that reads no byte outside the bursts the
        # golden account counts), so one loader streams 64 B/cycle and 4 take the 256 B/cycle
        # of this memory; 64 reads in flight cover the 100-cycle latency even for scattered
        # 128-B rows (Little's law: 64 x 2 beats >= 100 + 2 cycles; requests of 4 beats)
        # (docs/loader.md, "Parameters")
        loader=LoaderParams(addr_width=32, data_width=512, max_burst_beats=4,
                            max_outstanding=64, id_width=4, max_tokens=4096,
                            channel_pages=loader_needs_channel_pages(policy),
                            masked_records=loader_needs_masked_records(policy)),
        scorer=ScorerParams(lanes=32, query_bits=8),   # L = the sorter's P
        # GQA-3 decode does 1.5 MAC per KV byte; 512 MAC/cycle at 1 GHz balances 341 GB/s,
        # above the 256 GB/s of this memory, so full-KV decode attention is memory-bound
        accel=AcceleratorParams(pe_lanes=512, softmax_lanes=32),
        model=MODEL_SHAPES["smollm2-135m"],
        context=2048,
        serving=ServingParams(policy="vllm-v1", max_batched_tokens=8192, max_running=256,
                              block_tokens=16, workspace_bytes=1 << 30, ttft_slo_s=0.1,
                              tpot_slo_s=0.005, slo_attainment=0.9, steady_trim=0.1,
                              synthetic=_CONV_LIKE),
    )


def _paper() -> Config:
    # the same choice as `default` (a 96-of-128 V record, 16 + 192 B, still fills 256 B)
    policy = _chosen_policy(budget=2048, recent=64, compact_interval=64)
    return Config(
        name="paper",
        layout=KVLayout(head_dim=128, elem_bytes=2, burst_bytes=64, align_bytes=64,
                        page_tokens=16),
        policy=policy,
        # 32 sorter and scorer lanes: the smallest equal-lane point (hw/scorer_sorter.py chains
        # the two only with L = P) whose query-aware HiKV reaches >= 90 % of its bytes roofline
        # (99.8 % at 1 GHz; 79 % at 16 lanes, scorer-bound) (docs/cost_model.md, section 10)
        sorter=SorterParams(lanes=32, key_width=16, max_n=32768, max_k=4096, max_vec=128),
        # as `default`: 64-B beats, 64 B/cycle per loader, 8 loaders for the 460 B/cycle of
        # this memory; 32 reads of 4 beats in flight cover the latency for scattered 256-B
        # rows (32 x 4 >= 100 + 4)
        loader=LoaderParams(addr_width=40, data_width=512, max_burst_beats=4,
                            max_outstanding=32, id_width=4, max_tokens=32768,
                            channel_pages=loader_needs_channel_pages(policy),
                            masked_records=loader_needs_masked_records(policy)),
        scorer=ScorerParams(lanes=32, query_bits=8),   # L = the sorter's P
        # PE lanes sized so full-KV decode attention is memory-bound, as long-context decoding
        # is: GQA-4 decode does 2 MAC per KV byte; 1,024 MAC/cycle at 1 GHz balances 512 GB/s
        accel=AcceleratorParams(pe_lanes=1024, softmax_lanes=64, sram_kv_bytes=1 << 20,
                                sram_q_bytes=64 * 1024, memory=MemoryType.HBM2,
                                mem_bandwidth_bytes_per_s=460e9, tech_nm=28,
                                device_memory_bytes=80 * 2**30, linear_flops_per_s=300e12),
        model=MODEL_SHAPES["llama3-8b"],
        context=32768,
        serving=ServingParams(policy="vllm-v1", max_batched_tokens=8192, max_running=256,
                              block_tokens=16, workspace_bytes=4 << 30, ttft_slo_s=0.25,
                              tpot_slo_s=0.1, slo_attainment=0.9, steady_trim=0.1,
                              synthetic=_CONV_LIKE),
    )


PRESETS: dict[str, Config] = {c.name: c for c in (_tiny(), _default(), _paper())}


def get_preset(name: str) -> Config:
    """The preset called ``name``; an unknown name lists the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ParamError(f"unknown preset {name!r}; known presets: {sorted(PRESETS)}") from None


def get_model_shape(name: str) -> ModelShape:
    try:
        return MODEL_SHAPES[name]
    except KeyError:
        raise ParamError(f"unknown model shape {name!r}; known: {sorted(MODEL_SHAPES)}") from None


def with_overrides(cfg: Config, items: list[str] | tuple[str, ...]) -> Config:
    """``cfg`` with ``section.field=value`` overrides applied (``policy.scorer=page_bounds``,
    ``policy.v_rule.keep=48``, ``accel.pe_lanes=1024``); values are JSON (numbers, strings,
    objects) or bare strings. The result is validated like any preset and named
    ``NAME[override,...]``; an unknown field is an error naming it and the known ones."""
    import json

    from .params import from_dict, to_dict

    if not items:
        return cfg
    data = to_dict(cfg)
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq or not key:
            raise ParamError(f"override {item!r} must look like section.field=value")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        node = data
        path = key.split(".")
        for i, part in enumerate(path):
            if not isinstance(node, dict) or part not in node:
                known = sorted(node) if isinstance(node, dict) else []
                raise ParamError(f"override {item!r}: {'.'.join(path[:i + 1])!r} is not a "
                                 f"parameter; known here: {known}")
            if i == len(path) - 1:
                if isinstance(node[part], dict):
                    if not isinstance(value, dict):
                        raise ParamError(f"override {item!r}: {key!r} is a section; give "
                                         f"{key}.FIELD=VALUE or a JSON object of its fields")
                    _merge(node[part], value, key, item)   # the other fields keep their values
                else:
                    node[part] = value
            else:
                node = node[part]
    data["name"] = f"{cfg.name}[{','.join(items)}]"
    return from_dict(Config, data)



def _merge(section: dict, value: dict, key: str, item: str) -> None:
    """Set the fields ``value`` names in ``section`` (recursively); an unknown one is an
    error naming it and the known ones."""
    for k, v in value.items():
        if k not in section:
            raise ParamError(f"override {item!r}: {key}.{k!r} is not a parameter; known here: "
                             f"{sorted(section)}")
        if isinstance(section[k], dict) and isinstance(v, dict):
            _merge(section[k], v, f"{key}.{k}", item)
        else:
            section[k] = v


# --------------------------------------------------------------------------- operating point
def baseline_names() -> tuple[str, ...]:
    """The baselines HiKV is compared with, by label name, in table order: every registered
    :class:`~hikv.method_spec.Method` but full KV and HiKV (also :data:`BASELINES`)."""
    return tuple(m.value for m in Method if m not in (Method.FULL, Method.HIKV))


#: ThinK as a baseline (a HiKV Stage II kind, docs/accuracy.md): ``think`` keeps every token and
#: prunes K channels (``hikv-none/k:thinkR``), ``think-evict`` does so on the SnapKV-seeded
#: evicting Stage I at the budget (``hikv-evict@B/k:thinkR``); ``R = head_dim / 2`` (ThinK's
#: 50 % pruning)
THINK_METHODS = ("think", "think-evict")


def method_names() -> tuple[str, ...]:
    """Method names of :func:`method_specs` (``hikv serve --method`` accepts them and
    ``all``; also :data:`METHOD_NAMES`); ``h2o-avg`` is H2O with kvpress's averaged score
    (``h2o@B/avg``)."""
    return ("full", *baseline_names(), "hikv", "hikv-evict", "hikv-query", *THINK_METHODS,
            "h2o-avg")


def __getattr__(name: str) -> tuple[str, ...]:
    # BASELINES and METHOD_NAMES come from the method registry, which the closed forms fill
    # (numpy): computed when asked, so importing this module stays standard-library only
    if name == "BASELINES":
        return baseline_names()
    if name == "METHOD_NAMES":
        return method_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def baselines_at(budget: int, policy: HiKVPolicy, head_dim: int, *,
                 page_tokens: int | None = None) -> dict[str, MethodSpec]:
    """The baselines at budget ``budget``, by name, with the accuracy study's settings (see
    :func:`~hikv.params.parse_method`): SparQ's and Double Sparsity's ``r = head_dim / 4``,
    16-bit Double Sparsity labels, H2O's and SnapKV's windows ``min(policy.recent, B / 2)``;
    methods with pages (Quest) on pages of ``page_tokens`` tokens (default: their label's
    default)."""
    out = {}
    for m in baseline_names():
        spec = parse_method(f"{m}@{budget}", policy, head_dim)
        paged = any(o.field == "page_tokens" for o in spec.method.info.options)
        if paged and page_tokens is not None:
            spec = dataclasses.replace(spec, page_tokens=page_tokens)
        out[m] = spec
    return out


def method_specs(cfg: Config) -> dict[str, MethodSpec]:
    """The operating point of ``cfg``: every method's spec by name (:data:`METHOD_NAMES`).

    The one place the report, the sweeps, ``hikv serve`` and the accuracy study get their
    specs from. Baselines at HiKV's budget ``cfg.policy.budget`` (:func:`baselines_at`, Quest
    on the layout's pages); ``full`` is full KV; ``hikv`` is ``cfg.policy`` as given;
    ``hikv-evict`` and ``hikv-query`` the same policy with the evicting or the query-aware
    Stage I; ``think`` and ``think-evict`` ThinK (:data:`THINK_METHODS`). Each spec's
    :attr:`~hikv.params.MethodSpec.label` names it:
    ``MethodSpec.from_label(spec.label, cfg.policy, cfg.layout.head_dim) == spec``.
    """
    p = cfg.policy
    return {
        "full": parse_method("full", p, cfg.layout.head_dim),
        **baselines_at(p.budget, p, cfg.layout.head_dim, page_tokens=cfg.layout.page_tokens),
        "hikv": MethodSpec.for_hikv(p),
        "hikv-evict": MethodSpec.for_hikv(dataclasses.replace(p, stage1=Stage1Variant.EVICT)),
        "hikv-query": MethodSpec.for_hikv(
            dataclasses.replace(p, stage1=Stage1Variant.QUERY_AWARE)),
        "h2o-avg": parse_method(f"h2o@{p.budget}/avg", p, cfg.layout.head_dim),
        "think": parse_method(f"hikv-none/k:think{cfg.layout.head_dim // 2}", p,
                              cfg.layout.head_dim),
        "think-evict": parse_method(f"think@{p.budget}", p, cfg.layout.head_dim),
    }


def baseline_specs(cfg: Config) -> list[MethodSpec]:
    """The report's rows at the nominal operating point: full KV, each baseline at HiKV's
    budget, and HiKV (``cfg.policy``), from :func:`method_specs`."""
    specs = method_specs(cfg)
    return [specs[n] for n in ("full", *baseline_names(), "hikv")]


def resolve_methods(cfg: Config, names: str | list[str] | tuple[str, ...]
                    ) -> dict[str, MethodSpec]:
    """Names (or ``"all"``, or a comma-separated string) -> ``{name: spec}`` in order.

    ``all`` is every name of :data:`METHOD_NAMES` whose spec differs from an earlier one
    (``hikv-query`` is dropped when ``hikv`` already is query-aware). A method label
    (``h2o@128/avg``, ``tova@64``: anything with ``@``, :func:`~hikv.params.parse_method`) is
    taken as that spec, under its label.
    """
    specs = method_specs(cfg)
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    out: dict[str, MethodSpec] = {}
    for name in names:
        if name == "all":
            for n in method_names():
                if specs[n] not in out.values():
                    out[n] = specs[n]
        elif name in specs:
            out[name] = specs[name]
        elif "@" in name:
            out[name] = parse_method(name, cfg.policy, cfg.layout.head_dim)
        else:
            raise ParamError(f"method = {name!r} is not one of: all, {', '.join(method_names())} "
                             "(or a method label such as h2o@256/avg)")
    if not out:
        raise ParamError("method: give at least one method name")
    return out


# --------------------------------------------------------------------------- the seed's HiKV
#: record alignment of the seed's packed layout: masked records back to back on 8-byte
#: boundaries (the loader's packed-record jobs take 2 or 8)
SEED_ALIGN_BYTES = 8


def seed_hikv(cfg: Config, *, k_kind: Stage2Kind = Stage2Kind.THINK, keep_k: int | None = None,
              keep_v: int | None = None, align_bytes: int = SEED_ALIGN_BYTES) -> Config:
    """``cfg`` with the seed's HiKV: evicting Stage I at ``cfg.policy.budget``
    (SnapKV seeding at the end of prefill, H2O accumulation, compaction every Δ) and packed
    Stage II records, named ``NAME+seed``.

    V: static top-``keep_v`` of |V| at write time (masked records). K: ``k_kind`` with
    ``keep_k`` channels: ``think`` (ThinK's channels, fixed after prefill: rows of ``keep_k``
    elements), ``static`` (top |K| masked records), ``query_channels`` (|q| per head and step,
    channel-major pages: that layout does not pack) or ``none``. Both keeps default to
    ``3/4 head_dim``. Records are packed: ``layout.align_bytes = align_bytes`` (2 or 8), so the
    compacted cache streams as one contiguous run per region.

    The named presets keep their own policy; switching one to the seed's HiKV is
    ``PRESETS["default"] = seed_hikv(PRESETS["default"])``, or the same change to the preset's
    policy and layout.
    """
    d = cfg.layout.head_dim
    if align_bytes not in (2, 8):
        raise ParamError(f"seed_hikv: align_bytes = {align_bytes!r} is not one of (2, 8)")
    kk = 3 * d // 4 if keep_k is None else keep_k
    kv = 3 * d // 4 if keep_v is None else keep_v
    k_rule = Stage2Rule() if k_kind is Stage2Kind.NONE else Stage2Rule(k_kind, kk)
    policy = dataclasses.replace(cfg.policy, stage1=Stage1Variant.EVICT, k_rule=k_rule,
                                 v_rule=Stage2Rule(Stage2Kind.STATIC, kv))
    policy.check_head_dim(d)
    layout = dataclasses.replace(cfg.layout, align_bytes=align_bytes)
    return dataclasses.replace(cfg, name=f"{cfg.name}+seed", policy=policy, layout=layout)
