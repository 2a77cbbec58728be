"""Selection kernels on a GPU: the scan, the top-k and the gather of a method that chooses what
to read, each priced as its own kernel and fitted to published measurements.

A method that selects per decode step (Quest, SparQ, Double Sparsity, query-aware HiKV) runs,
per layer and iteration, three kernels on a GPU where the accelerator runs one pipeline:

* **scan**: read what scores the tokens (page bounds, label channels, SparQ's K channels,
  HiKV's low-bit keys: the closed form's select-phase bytes) and write one fp32 score per
  scored item: ``scan_fixed_s + bytes / scan_bytes_per_s`` (its scoring FLOPs at the device's
  attention FLOP rate when they take longer);
* **top-k** over the scores of every (sequence, KV head): ``topk_fixed_s`` per layer plus the
  scores read twice (a radix select's histogram and its selection pass, 8 bytes per item) at
  the scan's bandwidth. The fixed cost is fitted; the streaming term is a roofline of those
  bytes, not a measurement (the published points have at most 65,536 scores per layer);
* **gather**: the attention kernel over the selected tokens (the decode kernel of
  :mod:`hikv.sim.serving.gpu_attention` on the attend-phase bytes, at
  ``gather_fraction`` of its bandwidth).

A method that evicts by a score (H2O, TOVA, evicting HiKV) adds a **score pass** per layer
(read and write one fp32 score per scored token at the scan's bandwidth) and the top-k of its
eviction (its compaction every ``Δ`` steps amortised). Methods that select nothing per step
(full KV, StreamingLLM, SnapKV after prefill) run the attention kernel alone.

**Measurements** (:data:`PUBLISHED`): J. Tang, Y. Zhao, K. Zhu, G. Xiao, B. Kasikci, S. Han,
"Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference", ICML 2024, Figure 9
(self-attention time breakdown of one layer of Llama-2-7B, 32 heads of 128, fp16, 16-token
pages, batch 1, on an RTX 4090 with CUDA 12.2, PyTorch profiler): criticality estimation
(the scan), top-k filtering and approximate attention (the gather) at 8,192, 16,384 and 32,768
tokens with budgets of 1,024, 2,048 and 4,096 tokens, and FlashInfer's full attention. The
values are the bar lengths of the figure's vector drawing (the PDF in mit-han-lab/Quest,
``assets/quest_paper.pdf``) over its axis scale, to about 0.5 us (2.3 us in the 32k panel,
whose bars are drawn in steps of that size). No published measurement of a token-granular
gather (one K row and one V row per selected token, SparQ's and HiKV's reads) was found in the
material searched: those gathers are priced at the page gather's fitted efficiency.

**Transfer to another GPU**: the fitted bandwidths are kept as fractions of the same GPU's
dense decode kernel (FlashInfer's full attention in the same figure), capped at 1 (a selection
kernel is not taken to stream faster than attention); on the A100 they multiply the decode
bandwidth fitted in :mod:`hikv.sim.serving.gpu_attention`. Fixed costs are kept in seconds.
``tests/test_gpu_selection.py`` refits and checks every point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hikv.params import Config, MethodSpec, ParamError
from hikv.sim.serving.gpu_attention import GpuAttention

__all__ = ["SelectionPoint", "PUBLISHED", "SOURCE", "OUTLIERS", "KernelFit", "SelectionFit",
           "fit_selection", "predict_point", "point_errors", "GpuSelection", "selection_for",
           "A100_SELECTION", "SelectionTables", "selection_tables", "batch_selection_s",
           "SCORE_BYTES", "RTX4090_PEAK_BYTES_PER_S"]

#: Bytes of one score (fp32) a scan writes and a top-k reads.
SCORE_BYTES = 4
#: RTX 4090 memory bandwidth, datasheet (384-bit GDDR6X at 21 Gb/s): 1,008 GB/s.
RTX4090_PEAK_BYTES_PER_S = 1008e9

SOURCE = ("Tang et al., 'Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference', "
          "ICML 2024, Figure 9 (RTX 4090, Llama-2-7B layer, fp16, page 16, batch 1; bar lengths "
          "of the vector figure in mit-han-lab/Quest assets/quest_paper.pdf)")

# Llama-2-7B, the model of Figure 9: 32 query and KV heads of 128, fp16, 16-token pages
_HEADS, _D, _PAGE, _FP16 = 32, 128, 16, 2


@dataclass(frozen=True)
class SelectionPoint:
    """One published kernel time of one layer: ``kernel`` (``dense``, ``scan``, ``topk`` or
    ``gather``) at ``context`` tokens with a budget of ``budget`` tokens (0 for dense)."""

    kernel: str
    context: int
    budget: int
    time_s: float

    @property
    def label(self) -> str:
        return (f"{self.kernel} {self.context // 1024}k" +
                (f" B={self.budget}" if self.budget else ""))

    def work(self) -> tuple[float, float]:
        """(bytes, scored items) of the kernel on Figure 9's layer."""
        row = 2 * _D * _FP16 * _HEADS                  # K and V of one token, every head
        pages = self.context // _PAGE * _HEADS         # scored items: pages x heads
        if self.kernel == "dense":
            return float(self.context * row), 0.0
        if self.kernel == "gather":
            return float(self.budget * row), 0.0
        if self.kernel == "scan":                      # min and max key of each page, scores
            return float(pages * 2 * _D * _FP16 + pages * SCORE_BYTES), float(pages)
        return float(2 * SCORE_BYTES * pages), float(pages)


def _points() -> tuple[SelectionPoint, ...]:
    # Figure 9, in us: per context, (estimation, top-k, approximate attention) at budgets
    # 1,024 / 2,048 / 4,096, then FlashInfer's full attention
    fig9 = {8192: (((6.67, 2.78, 12.78), (7.78, 2.78, 30.00), (11.67, 2.78, 77.78)), 156.11),
            16384: (((12.24, 3.34, 17.81), (16.70, 2.23, 37.84), (21.15, 4.45, 80.14)), 308.31),
            32768: (((40.81, 4.53, 20.41), (40.81, 4.53, 40.81), (43.08, 2.27, 79.36)), 612.21)}
    out = []
    for n, (bars, full) in fig9.items():
        for b, (scan, topk, gather) in zip((1024, 2048, 4096), bars, strict=True):
            out += [SelectionPoint("scan", n, b, scan * 1e-6),
                    SelectionPoint("topk", n, b, topk * 1e-6),
                    SelectionPoint("gather", n, b, gather * 1e-6)]
        out.append(SelectionPoint("dense", n, 0, full * 1e-6))
    return tuple(out)


#: The published points (:data:`SOURCE`), in seconds per layer.
PUBLISHED: tuple[SelectionPoint, ...] = _points()

#: Points the fit misses by more than 20 %, and why (``tests/test_gpu_selection.py`` holds
#: that no other point does).
OUTLIERS: dict[str, str] = {
    "scan 8k B=1024": "the three scans at one context do the same work (the budget does not "
                      "enter the estimate) and Figure 9 draws them 6.7-11.7 us at 8k: "
                      "run-to-run scatter no model of the work can follow",
    "scan 8k B=4096": "the same scatter (11.7 us against 6.7 and 7.8 us for the same scan)",
    "scan 16k B=1024": "the same scatter at 16k (12.2-21.2 us for one scan)",
    "scan 16k B=4096": "the same scatter at 16k (21.2 us against 12.2 and 16.7 us)",
    "scan 32k B=4096": "at 32k the figure draws bars in steps of 2.3 us; 43.1 us is one step "
                       "above the other two scans of the same work",
    "gather 8k B=1024": "16.8 MB in 12.8 us is 1.31 TB/s, above the card's 1.01 TB/s: part "
                        "of it came from the 72 MB L2 cache, which a serving batch does not "
                        "keep",
    "topk 16k B=2048": "top-k bars are 0.5-2 points wide in the figure (2.2-4.5 us for the "
                       "same few thousand scores): below the drawing's resolution",
    "topk 16k B=4096": "the same resolution limit (4.5 us against 3.3 and 2.2 us)",
    "topk 32k B=1024": "the same resolution limit (one 2.3-us step of the 32k panel)",
    "topk 32k B=2048": "the same resolution limit (one 2.3-us step of the 32k panel)",
    "topk 32k B=4096": "the same resolution limit (one 2.3-us step of the 32k panel)",
}


@dataclass(frozen=True)
class KernelFit:
    """``time = fixed_s + bytes / bytes_per_s`` of one kernel on the measured GPU."""

    fixed_s: float
    bytes_per_s: float

    def time_s(self, nbytes: float) -> float:
        return self.fixed_s + nbytes / self.bytes_per_s


@dataclass(frozen=True)
class SelectionFit:
    """The fitted kernels on the measured GPU (:func:`fit_selection`)."""

    dense: KernelFit
    scan: KernelFit
    gather: KernelFit
    topk: KernelFit


def _fit_kernel(pts: list[SelectionPoint], *, fixed: float | None = None,
                bytes_per_s: float | None = None) -> KernelFit:
    """Least squares in relative error of ``t = fixed + bytes / bw`` (``fixed >= 0``); a
    given ``fixed`` or ``bytes_per_s`` is held."""
    t = np.array([p.time_s for p in pts])
    b = np.array([p.work()[0] for p in pts])
    if bytes_per_s is not None:                  # fit the fixed cost only
        f = float(np.sum((1 - b / bytes_per_s / t) / t) / np.sum(1 / t ** 2))
        return KernelFit(max(f, 0.0), bytes_per_s)
    if fixed is None:
        a = np.stack([np.ones_like(t), b], axis=1) / t[:, None]
        (f, inv), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
        if f >= 0 and inv > 0:
            return KernelFit(float(f), float(1 / inv))
        fixed = 0.0
    inv = float(np.sum(b / t * (1 - fixed / t)) / np.sum((b / t) ** 2))
    return KernelFit(fixed, 1 / inv)


def fit_selection(points: tuple[SelectionPoint, ...] = PUBLISHED) -> SelectionFit:
    """Fit each kernel of :data:`PUBLISHED` (relative least squares, fixed costs >= 0): the
    dense kernel, the scan and the gather as ``fixed + bytes / bandwidth``; the top-k's
    fixed cost with its streaming term held at the scan's bandwidth (a roofline)."""
    by = {k: [p for p in points if p.kernel == k] for k in ("dense", "scan", "gather", "topk")}
    if any(len(v) < 2 for v in by.values()):
        raise ParamError("fit_selection needs at least two points of each kernel")
    scan = _fit_kernel(by["scan"])
    return SelectionFit(dense=_fit_kernel(by["dense"]), scan=scan,
                        gather=_fit_kernel(by["gather"]),
                        topk=_fit_kernel(by["topk"], bytes_per_s=scan.bytes_per_s))


def predict_point(fit: SelectionFit, p: SelectionPoint) -> float:
    """The fitted model's time for point ``p``."""
    return getattr(fit, p.kernel).time_s(p.work()[0])


def point_errors(fit: SelectionFit | None = None,
                 points: tuple[SelectionPoint, ...] = PUBLISHED) -> dict[str, float]:
    """Relative error (model / published - 1) of every point, by label."""
    fit = fit or fit_selection(points)
    return {p.label: predict_point(fit, p) / p.time_s - 1 for p in points}


@dataclass(frozen=True)
class GpuSelection:
    """Selection kernels on one GPU (per layer): the scan's and top-k's fixed costs and the
    scan's bandwidth, and the gather's bandwidth as a fraction of the decode kernel's."""

    device: str
    scan_fixed_s: float
    scan_bytes_per_s: float
    topk_fixed_s: float
    gather_fraction: float
    source: str

    def __post_init__(self) -> None:
        if not self.scan_bytes_per_s > 0 or not 0 < self.gather_fraction <= 1:
            raise ParamError(f"GpuSelection: scan_bytes_per_s = {self.scan_bytes_per_s!r} must "
                             f"be > 0 and gather_fraction = {self.gather_fraction!r} in (0, 1]")
        if not (self.scan_fixed_s >= 0 and self.topk_fixed_s >= 0):
            raise ParamError("GpuSelection: fixed costs must be >= 0")


def selection_for(att: GpuAttention, fit: SelectionFit | None = None) -> GpuSelection:
    """The fitted selection kernels moved to the GPU of ``att``: bandwidths as fractions of
    the measured GPU's dense kernel (capped at 1) times ``att``'s decode bandwidth, fixed
    costs as fitted (module docstring)."""
    fit = fit or fit_selection()
    dense = fit.dense.bytes_per_s
    return GpuSelection(
        device=att.device, scan_fixed_s=fit.scan.fixed_s,
        scan_bytes_per_s=att.decode_bytes_per_s * min(fit.scan.bytes_per_s / dense, 1.0),
        topk_fixed_s=fit.topk.fixed_s,
        gather_fraction=min(fit.gather.bytes_per_s / dense, 1.0),
        source=f"fit_selection(PUBLISHED) on the RTX 4090 moved to {att.device}: {SOURCE}")


#: The A100's selection kernels: :func:`selection_for` of :data:`A100_ATTENTION`, rounded to
#: 3 significant digits (``tests/test_gpu_selection.py`` recomputes them).
A100_SELECTION = GpuSelection(
    device="a100", scan_fixed_s=0.0, scan_bytes_per_s=1.46e12, topk_fixed_s=2.59e-6,
    gather_fraction=1.0, source=f"fit_selection(PUBLISHED) on the RTX 4090 moved to a100: "
                                f"{SOURCE}")


# =========================================================================== per decode key
@dataclass(frozen=True)
class SelectionTables:
    """Per decode key (:meth:`~hikv.sim.cost.closed_form_base.ClosedForm.decode_key`), one
    sequence's selection work summed over all layers and KV heads: ``scan_bytes`` (metadata
    read, scores written, eviction score passes), ``scan_flops`` (scoring), ``topk_bytes``
    (scores read by the top-k), ``attend_bytes`` (what the attention kernel then reads);
    per layer, ``scan_launch`` and ``topk_launch``: the fraction of steps that run the kernel
    (``1/Δ`` for a compaction every ``Δ`` steps)."""

    scan_bytes: np.ndarray
    scan_flops: np.ndarray
    topk_bytes: np.ndarray
    attend_bytes: np.ndarray
    scan_launch: np.ndarray
    topk_launch: np.ndarray

    @property
    def selects(self) -> bool:
        """Whether any key runs a selection kernel."""
        return bool((self.scan_launch > 0).any() or (self.topk_launch > 0).any())


def selection_tables(cfg: Config, spec: MethodSpec, prompt: np.ndarray, step: np.ndarray,
                     burst: np.ndarray) -> SelectionTables:
    """:class:`SelectionTables` at the sequence states ``(prompt, step)``; ``burst`` is the
    bytes the step reads per (layer, KV head) (``ClosedForm.decode_read``), of which the
    select phase's are the scan's and the rest the attention kernel's."""
    from hikv.sim.cost.attention_model import Overrides, step_work
    from hikv.sim.cost.closed_form import closed_form

    w = step_work(spec, cfg, Overrides(context=prompt, step=step))
    m = cfg.model
    heads = m.layers * m.kv_heads
    shape = np.broadcast(prompt, step).shape
    z = np.zeros(shape)
    sel = np.asarray(w.select_bytes, dtype=float) + z
    items = z.copy()                       # scores a top-k reads, per step on average
    scored = z.copy()                      # tokens (or pages) scored each step
    launch = z.copy()
    for job in w.sorts:
        per = np.asarray(job.per_step, dtype=float) + z
        share = 1.0 / m.kv_heads if job.per_layer else 1.0
        if job.mode == "stage1":
            n = np.asarray(job.n, dtype=float) + z
            scored = scored + n * share
        else:
            n = np.asarray(job.d, dtype=float) * np.asarray(job.count, dtype=float) + z
        items = items + n * per * share
        launch = np.maximum(launch, np.minimum(per, 1.0))
    kv = closed_form(spec, cfg.layout)
    # a selecting method's scan writes its scores; an evicting one's score pass reads and
    # writes the scores of every scored token each step (its eviction's top-k may be rarer)
    scan_bytes = np.where(sel > 0, sel + SCORE_BYTES * scored,
                          2 * SCORE_BYTES * scored if kv.evicts else 0.0)
    attend = heads * np.maximum(np.asarray(burst, dtype=float) - sel, 0.0)
    scan_launch = np.where(scan_bytes > 0, 1.0, 0.0)
    return SelectionTables(
        scan_bytes=heads * scan_bytes, scan_flops=2.0 * heads * (np.asarray(w.score_macs) + z),
        topk_bytes=heads * 2 * SCORE_BYTES * items, attend_bytes=attend,
        scan_launch=scan_launch, topk_launch=launch)


def batch_selection_s(sel: GpuSelection, t: SelectionTables, x: np.ndarray, axis: int | None,
                      *, layers: int, flops_per_s: float, share: float = 1.0) -> Any:
    """Seconds of the scan and top-k kernels of the sequences with decode keys ``x`` (tables
    indexed by key, summed over ``axis``): per layer one launch of each kernel that any
    sequence needs (the launch fraction of the batch, at most 1), the bytes of all of them;
    ``share`` of the heads runs on this GPU (tensor parallelism)."""
    scan_b = t.scan_bytes[x].sum(axis) * share
    scan_f = t.scan_flops[x].sum(axis) * share
    topk_b = t.topk_bytes[x].sum(axis) * share
    scan_l = np.minimum(t.scan_launch[x].sum(axis), 1.0)
    topk_l = np.minimum(t.topk_launch[x].sum(axis), 1.0)
    scan = layers * sel.scan_fixed_s * scan_l + np.maximum(
        scan_b / sel.scan_bytes_per_s, scan_f / flops_per_s)
    topk = layers * sel.topk_fixed_s * topk_l + topk_b / sel.scan_bytes_per_s
    return scan + topk

