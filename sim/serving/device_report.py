"""Tables and report sections of the measured-device step cost (:mod:`hikv.sim.serving.device`):
per-iteration time by operator (``hikv serve --device a100 --breakdown``), the serving table
on a measured device (``--section``) and ``hikv report --device-section``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hikv.params import Config, ParamError
from hikv.sim.serving.device import (
    PROFILE_MODELS,
    DeviceCost,
    DeviceStepCost,
    device_cost_for,
    get_device,
)
from hikv.sim.serving.step_cost import EfficientRooflineStepCost, IterationBatch, RooflineStepCost

__all__ = ["BREAKDOWN_DECODE_BATCHES", "BREAKDOWN_CONTEXTS", "BREAKDOWN_CHUNKS", "BREAKDOWN_MIXED",
           "breakdown_batches", "breakdown_table", "device_section", "measured_vs_modelled",
           "report_section"]


#: Iterations of the breakdown table: (label, IterationBatch arguments).
BREAKDOWN_DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
BREAKDOWN_CONTEXTS = (1024, 4096)
BREAKDOWN_CHUNKS = (128, 256, 512, 1024, 2048)
BREAKDOWN_MIXED = ((512, 32, 1024), (1024, 64, 1024), (2048, 128, 1024), (512, 32, 4096),
                   (1024, 64, 4096), (2048, 128, 4096))


def breakdown_batches() -> list[tuple[str, IterationBatch]]:
    """The iterations :func:`breakdown_table` tables: decode batches at 1k and 4k tokens of
    context, prefill chunks from an empty prefix, and mixed batches (one chunk after a prefix
    of the same length, plus decodes)."""
    out: list[tuple[str, IterationBatch]] = []
    for ctx in BREAKDOWN_CONTEXTS:
        for b in BREAKDOWN_DECODE_BATCHES:
            out.append((f"decode {b} x {ctx}", IterationBatch(
                decode_prompt=[ctx - 1] * b, decode_step=[1] * b)))
    for c in BREAKDOWN_CHUNKS:
        out.append((f"prefill {c}", IterationBatch(prefill_done=[0], prefill_chunk=[c],
                                                  prefill_total=[c])))
    for c, b, ctx in BREAKDOWN_MIXED:
        out.append((f"mixed {c} + {b} x {ctx}", IterationBatch(
            prefill_done=[c], prefill_chunk=[c], prefill_total=[4 * c],
            decode_prompt=[ctx - 1] * b, decode_step=[1] * b)))
    return out


def breakdown_table(cfg: Config, cost: DeviceCost, method: str = "full") -> str:
    """Markdown table of per-iteration time (ms) by operator on the measured device."""
    from hikv.presets import resolve_methods

    spec = resolve_methods(cfg, method)[method]
    model: Any = cost(cfg, spec)
    assert isinstance(model, DeviceStepCost) or hasattr(model, "breakdown")
    rf = RooflineStepCost(cfg, spec)
    ef = EfficientRooflineStepCost(cfg, spec)
    offload = not isinstance(model, DeviceStepCost)       # gpu+hikv: link and accelerator
    cols = ("emb", "norms", "qkv", "rope", "o_proj", "up", "act", "down", "add", "lm_head",
            "attn_prefill", "attn_select", "attn_decode") + (
                ("link", "accelerator") if offload else ())
    head = ("| iteration | total ms | roofline ms | roofline-eff ms | "
            + " | ".join(cols) + " |")
    lines = [f"Per-iteration time by operator (ms), {cfg.model.name}, method {method}, "
             f"{cost.name}; 'decode B x C': B sequences attending C tokens each; 'prefill C': "
             f"one chunk of C tokens from an empty prefix; 'mixed C + B x K': a chunk of C "
             f"tokens after a prefix of C, with B decodes at context K; roofline and "
             f"roofline-eff: `--cost-model roofline` / `roofline-eff` at the same peaks.", "",
             head, "|" + "---|" * (len(cols) + 4)]
    for label, batch in breakdown_batches():
        bd = model.breakdown(batch)
        g = {"emb": bd["emb"], "norms": bd["input_layernorm"] + bd["post_attention_layernorm"],
             "qkv": bd["attn_pre_proj"], "rope": bd["attn_rope"], "o_proj": bd["attn_post_proj"],
             "up": bd["mlp_up_proj"], "act": bd["mlp_act"], "down": bd["mlp_down_proj"],
             "add": bd["add"], "lm_head": bd["lm_head"], "attn_prefill": bd["attn_prefill"],
             "attn_select": bd["attn_select"], "attn_decode": bd["attn_decode"],
             **{k: bd[k] for k in ("link", "accelerator") if k in bd}}
        lines.append(f"| {label} | {sum(bd.values()) * 1e3:.2f} | "
                     f"{rf.iteration_time_s(batch) * 1e3:.2f} | "
                     f"{ef.iteration_time_s(batch) * 1e3:.2f} | "
                     + " | ".join(f"{g[c] * 1e3:.2f}" for c in cols) + " |")
    return "\n".join(lines)


def _device_label(cost: Any) -> str:
    dev = cost.device if isinstance(cost.device, str) else cost.device.device
    return get_device(dev).label + ("" if isinstance(cost, DeviceCost) else
                                    " with a HiKV accelerator for decode attention")


def measured_vs_modelled(cost: DeviceCost) -> str:
    """One paragraph: what of the measured-device step cost is measured, what modelled."""
    return cost.describe()


def device_section(cfg: Config, workload: Any, cost: DeviceCost, *,
                   methods: str | list[str] = "full,hikv", policy: str | None = None,
                   with_goodput: bool = False) -> str:
    """Markdown: serving ``workload`` on the measured device, what is measured and what is
    modelled, one table line per method."""
    from hikv.sim.serving.report import format_table, run_methods

    runs = run_methods(cfg, workload, methods, cost_model=cost,  # type: ignore[arg-type]
                       policy=policy, with_goodput=with_goodput, seed=None)
    rows = [row for _, _, row in runs]
    sv = cfg.serving
    return "\n".join([
        f"### Serving on a measured device: {_device_label(cost)}, {cfg.model.name}",
        "",
        f"Workload {workload.source}: {len(workload)} requests at {workload.rate_per_s:.3g}/s; "
        f"policy {policy or sv.policy}, max batched tokens {sv.max_batched_tokens}; "
        "KV capacity from "
        f"{cfg.accel.device_memory_bytes / 2**30:g} GiB minus weights minus "
        f"{sv.workspace_bytes / 2**30:g} GiB workspace (modelled).",
        "",
        measured_vs_modelled(cost) + ". A KV method changes the decode kernel's bytes "
        "(:mod:`hikv.sim.cost.closed_form`) and, when it selects or evicts by a score, adds its "
        "scan, top-k and score kernels (:mod:`hikv.sim.serving.gpu_selection`).",
        "",
        "```", format_table(rows), "```"])


def report_section(cfg: Config, report: Any = None, *, max_requests: int | None = 1000,
                   trace: str | os.PathLike[str] | None = None, device: str = "a100",
                   profile: str | os.PathLike[str] | None = None) -> Any:
    """A ``hikv report`` section (:class:`hikv.sim.explore.report.ReportSection`): the conversation
    trace (first ``max_requests``) on the measured ``device`` with full KV and HiKV, stating
    what is measured and what modelled. A preset whose model is not in
    :data:`PROFILE_MODELS` is replaced by ``paper`` (Llama-3-8B). Skipped with the reason
    when the trace or profile is missing or does not match."""
    from hikv.presets import get_preset
    from hikv.report_section import ReportSection
    from hikv.sim.serving.workload import find_azure_trace, read_azure_trace

    title = "Serving on a measured device"
    path = trace if trace is not None else find_azure_trace("conv")
    if path is None or not Path(path).is_file():
        return ReportSection(title, "Skipped: the Azure conversation trace was not found.", [])
    if cfg.model.name not in PROFILE_MODELS:
        cfg = get_preset("paper")
    try:
        dcfg, cost = device_cost_for(cfg, device, profile=profile)
    except ParamError as e:
        return ReportSection(title, f"Skipped: {e}", [])
    wl = read_azure_trace(path, limit=max_requests)
    body = device_section(dcfg, wl, cost)
    return ReportSection(title, body, [{"device": device, "profile": cost.profile_path,
                                        "requests": len(wl)}])
