"""Per-iteration cost on a measured GPU, and a roofline with measured efficiencies.

**Measured device** (:class:`DeviceStepCost`, ``hikv serve --device a100``). Every operator
of a transformer layer except attention is priced from a measured profile in Vidur's
``mlp.csv`` format (:class:`OperatorProfile`: per-operator CUDA kernel times of one layer at
profiled token counts, for one model shape and tensor-parallel degree). An iteration that
feeds ``n`` tokens through the model costs, per layer, each profiled operator at ``n``
(``input_layernorm``, ``attn_pre_proj``, ``attn_rope``, ``attn_post_proj``,
``post_attention_layernorm``, ``mlp_up_proj``, ``mlp_act``, ``mlp_down_proj``, ``add``, each
once per layer as Vidur's predictor counts them), plus ``emb`` once per iteration. Times at
token counts between profiled ones are interpolated within GEMM tiles
(:func:`tile_interp`). Not in the profile and modelled: the LM head (a roofline with the
efficiencies derived from the same profile, :func:`derive_efficiency`) and attention
(:mod:`hikv.sim.serving.gpu_attention`, fitted to published kernel measurements; for a KV method the
decode kernel reads that method's bytes per step, :mod:`hikv.sim.cost.closed_form`, and a method
that selects or evicts by a score runs its scan, top-k and score kernels before it,
:mod:`hikv.sim.serving.gpu_selection`, fitted to Quest's measurements). Not modelled:
tensor-parallel all-reduce, CPU scheduling and sampling overheads.

**Roofline with efficiencies** (:class:`EfficientRooflineStepCost`, ``--cost-model
roofline-eff``; :class:`EfficientAttentionModelStepCost`, ``attention-model-eff``): the
roofline of :mod:`hikv.sim.serving.step_cost` with achieved fractions of peak FLOP/s and bandwidth
and the non-GEMM operators, all from :class:`hikv.params.RooflineEfficiency`, whose defaults are
:func:`derive_efficiency` of the A100 Llama-3-8B profile (``tests/test_device.py`` checks).
"""

from __future__ import annotations

import csv
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hikv.io import regular_file
from hikv.params import Config, MethodSpec, ModelShape, ParamError, RooflineEfficiency
from hikv.sim.cost.closed_form import closed_form
from hikv.sim.cost.closed_form_base import ClosedForm
from hikv.sim.serving.gpu_attention import A100_ATTENTION, GpuAttention
from hikv.sim.serving.gpu_selection import (
    A100_SELECTION,
    GpuSelection,
    SelectionTables,
    batch_selection_s,
    selection_tables,
)
from hikv.sim.serving.step_cost import (
    EfficientAttentionModelStepCost,
    EfficientRooflineStepCost,
    IterationBatch,
    RooflineStepCost,
    StepCostBase,
    StepCostModel,
    elementwise_bytes_per_token,
    keyed_decode_run_times_s,
    prefill_prefix,
)
from hikv.sim.serving.workload import shared_data_file

__all__ = [
    "PROFILE_OPS", "LAYER_OPS", "GEMM_OPS", "ELEMENTWISE_OPS", "OperatorProfile",
    "read_profile", "tile_interp", "find_profile", "GpuDevice", "DEVICES", "get_device",
    "PROFILE_MODELS", "DeviceStepCost", "DeviceCost", "derive_efficiency",
    "elementwise_bytes_per_token", "gemm_weight_params", "EfficientRooflineStepCost",
    "EfficientAttentionModelStepCost", "BREAKDOWN_OPS", "device_config", "device_cost_for",
    "TILE_TOKENS",
]

#: Operators of Vidur's ``mlp.csv``, in file order.
PROFILE_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
               "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
#: Operators run once per layer (``emb`` runs once per iteration).
LAYER_OPS = PROFILE_OPS[1:]
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE_OPS = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
#: Keys of :meth:`DeviceStepCost.breakdown`, in order.
BREAKDOWN_OPS = PROFILE_OPS + ("lm_head", "attn_prefill", "attn_select", "attn_decode")
_SHAPE_COLS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size",
               "use_gated_mlp")
#: Tokens per GEMM tile boundary: profiled times jump just after multiples of it.
TILE_TOKENS = 64


# =========================================================================== profiles
def tile_interp(q: np.ndarray, n: np.ndarray, y: np.ndarray, tile: int = TILE_TOKENS
                ) -> np.ndarray:
    """Interpolate ``y(n)`` at token counts ``q`` without crossing GEMM tile boundaries.

    GEMM kernel times are steps: they jump just after multiples of ``tile`` tokens (a new
    row of output tiles) and are nearly flat within one. So a query in tile ``ceil(q /
    tile)`` is interpolated linearly between the profiled points of the same tile (held flat
    beyond them); only a tile with no profiled point falls back to interpolating across
    tiles. Beyond the largest profiled count the last two points extrapolate linearly; 0
    tokens take 0 s.
    """
    q = np.asarray(q, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    y = np.asarray(y, dtype=np.float64)
    out = np.interp(q, n, y)
    bq, bn = -(-q // tile), -(-n // tile)
    for b in np.unique(bq):
        m = bn == b
        if m.any():
            sel = bq == b
            out[sel] = np.interp(q[sel], n[m], y[m])
    if n.size >= 2:
        hi = q > n[-1]
        slope = (y[-1] - y[-2]) / (n[-1] - n[-2])
        out[hi] = y[-1] + (q[hi] - n[-1]) * slope
    out[q <= 0] = 0.0
    return out


@dataclass(frozen=True)
class OperatorProfile:
    """One model shape's per-operator times at one tensor-parallel degree (seconds, one
    layer), from a Vidur ``mlp.csv``. Rows repeated at a token count are averaged."""

    path: str
    shape: dict[str, Any]
    tensor_parallel: int
    stat: str
    tokens: np.ndarray
    times_s: dict[str, np.ndarray] = field(repr=False)

    def time_s(self, op: str, n: np.ndarray | int) -> np.ndarray:
        """Operator ``op`` at token counts ``n`` (tile-aware interpolation)."""
        if op not in self.times_s:
            raise ParamError(f"operator {op!r} is not one of: {', '.join(self.times_s)}")
        return tile_interp(np.atleast_1d(n), self.tokens, self.times_s[op])

    def check_model(self, model: ModelShape) -> None:
        """ParamError unless ``model`` has this profile's shape."""
        want = {"n_head": model.q_heads, "n_kv_head": model.kv_heads, "n_embd": model.hidden,
                "n_expanded_embd": model.intermediate, "vocab_size": model.vocab}
        bad = [f"{k} {self.shape[k]} (model {v})" for k, v in want.items()
               if int(self.shape[k]) != v]
        if bad:
            raise ParamError(f"profile {self.path} does not match model {model.name!r}: "
                             + ", ".join(bad))


def read_profile(path: str | os.PathLike[str], *, tensor_parallel: int = 1,
                 stat: str = "mean") -> OperatorProfile:
    """Read a Vidur-format ``mlp.csv`` (times in ms) for one tensor-parallel degree."""
    if stat not in ("mean", "median", "min", "max"):
        raise ParamError(f"profile stat = {stat!r} is not one of: mean, median, min, max")
    p = regular_file(path, what="a Vidur-format operator profile (mlp.csv)")
    with p.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ParamError(f"profile {p} has no rows")
    need = ["num_tokens", "num_tensor_parallel_workers", *_SHAPE_COLS,
            *(f"time_stats.{op}.{stat}" for op in PROFILE_OPS)]
    missing = [c for c in need if c not in rows[0]]
    if missing:
        raise ParamError(f"profile {p} lacks the Vidur mlp.csv columns {missing}")
    tps = sorted({int(r["num_tensor_parallel_workers"]) for r in rows})
    rows = [r for r in rows if int(r["num_tensor_parallel_workers"]) == tensor_parallel]
    if not rows:
        raise ParamError(f"tensor_parallel = {tensor_parallel} is not in profile {p}; "
                         f"it has {tps}")
    shapes = {tuple(r[c] for c in _SHAPE_COLS) for r in rows}
    if len(shapes) != 1:
        raise ParamError(f"profile {p} mixes model shapes {sorted(shapes)}")
    acc: dict[int, list[list[float]]] = defaultdict(list)
    for i, r in enumerate(rows):
        try:
            acc[int(r["num_tokens"])].append(
                [float(r[f"time_stats.{op}.{stat}"]) * 1e-3 for op in PROFILE_OPS])
        except ValueError as e:
            raise ParamError(f"profile {p}: row {i + 2}: {e}") from None
    tokens = np.array(sorted(acc), dtype=np.int64)
    if tokens[0] < 1 or tokens.size < 2:
        raise ParamError(f"profile {p}: needs at least two token counts >= 1")
    t = np.array([np.mean(acc[k], axis=0) for k in tokens])
    if not (t >= 0).all():
        raise ParamError(f"profile {p} has negative times")
    shape = dict(zip(_SHAPE_COLS, next(iter(shapes)), strict=True))
    return OperatorProfile(path=str(p), shape=shape, tensor_parallel=tensor_parallel, stat=stat,
                           tokens=tokens,
                           times_s={op: t[:, i] for i, op in enumerate(PROFILE_OPS)})


def find_profile(device: str, model_dir: str, start: str | os.PathLike[str] | None = None
                 ) -> Path | None:
    """``<device>/<model_dir>/mlp.csv`` under ``$HIKV_DATA/vidur-profiles`` or a
    ``shared/data/vidur-profiles`` directory above ``start`` (default: this file), or None."""
    rel = Path(device) / model_dir / "mlp.csv"
    env = os.environ.get("HIKV_DATA")
    if env and (Path(env) / "vidur-profiles" / rel).is_file():
        return Path(env) / "vidur-profiles" / rel
    return shared_data_file(Path("vidur-profiles") / rel, start)


# =========================================================================== devices
@dataclass(frozen=True)
class GpuDevice:
    """A GPU as the serving simulator needs it: datasheet peaks (dense fp16 tensor FLOP/s,
    memory bandwidth, memory), its profile directory name, its fitted attention, its
    selection kernels and its board power (datasheet TDP, W)."""

    name: str
    label: str
    peak_flops_per_s: float
    peak_bytes_per_s: float
    memory_bytes: int
    profile_dir: str
    attention: GpuAttention
    selection: GpuSelection | None = None
    board_power_w: float = 0.0


#: Devices with a fitted attention model. A100: NVIDIA A100 80GB SXM datasheet (312 TFLOP/s
#: dense fp16 tensor, 2,039 GB/s HBM2e, 80 GB, 400 W maximum TDP).
DEVICES: dict[str, GpuDevice] = {
    "a100": GpuDevice("a100", "NVIDIA A100-SXM4-80GB", 312e12, 2.039e12, 80 * 2**30, "a100",
                      A100_ATTENTION, A100_SELECTION, 400.0),
}

#: Profile directory (under ``<device>/``) of each model shape of :mod:`hikv.presets`.
PROFILE_MODELS: dict[str, str] = {"llama3-8b": "meta-llama/Meta-Llama-3-8B"}


def get_device(name: str) -> GpuDevice:
    try:
        return DEVICES[name]
    except KeyError:
        raise ParamError(f"device = {name!r} is not one of: {', '.join(DEVICES)}") from None


def device_config(cfg: Config, device: GpuDevice, *, tensor_parallel: int = 1,
                  memory_gib: float | None = None) -> Config:
    """``cfg`` with its accelerator's peaks and memory set to ``tensor_parallel`` of
    ``device`` (what the roofline, the KV capacity and the report read); ``memory_gib``
    replaces the device's memory per GPU."""
    import dataclasses

    if memory_gib is not None and not memory_gib > 0:
        raise ParamError(f"device memory = {memory_gib} GiB is out of range: allowed > 0")
    mem = device.memory_bytes if memory_gib is None else int(memory_gib * 2**30)
    acc = dataclasses.replace(cfg.accel, mem_bandwidth_bytes_per_s=device.peak_bytes_per_s,
                              linear_flops_per_s=device.peak_flops_per_s,
                              device_memory_bytes=mem * tensor_parallel)
    return cfg.replace(accel=acc)


# =========================================================================== efficiencies
def gemm_weight_params(model: ModelShape) -> int:
    """Weights of one layer's four GEMMs (QKV, O, gated up, down)."""
    attn = model.hidden * model.head_dim * (2 * model.q_heads + 2 * model.kv_heads)
    return attn + 3 * model.hidden * model.intermediate


def derive_efficiency(profile: OperatorProfile, model: ModelShape, device: GpuDevice
                      ) -> RooflineEfficiency:
    """Efficiencies of ``device`` measured by ``profile`` (unrounded).

    * ``bandwidth_fraction``: the four GEMMs' weight bytes over their summed time, median
      over the profiled counts of at most 16 tokens (weight-read-bound), over peak bandwidth;
    * ``compute_fraction``: the GEMMs' FLOPs (``2 x weights x tokens``) over their time,
      median over the counts of at least 4096 tokens (compute-bound), over peak FLOP/s;
    * ``elementwise_fixed_s``: the non-GEMM operators' summed time, median over the counts
      of at most 16 tokens (launch-bound); ``elementwise_bandwidth_fraction``: their bytes
      (:func:`elementwise_bytes_per_token`) over their time, median over the counts of at
      least 4096 tokens (bandwidth-bound), over peak bandwidth;
    * attention: the device's fitted kernels (:mod:`hikv.sim.serving.gpu_attention`): achieved
      decode bandwidth and prefill FLOP/s over the peaks, and the decode kernel's fixed cost.
    """
    profile.check_model(model)
    tp = profile.tensor_parallel
    n = profile.tokens
    w_bytes = gemm_weight_params(model) / tp * model.weight_bytes_per_param
    gemm = sum(profile.times_s[op] for op in GEMM_OPS)
    small = n <= 16
    big = n >= 4096
    if not small.any() or not big.any():
        raise ParamError(f"profile {profile.path} needs token counts <= 16 and >= 4096 to "
                         "derive efficiencies")
    bw = float(np.median(w_bytes / gemm[small])) / device.peak_bytes_per_s
    flops = 2.0 * gemm_weight_params(model) / tp * n
    cf = float(np.median(flops[big] / gemm[big])) / device.peak_flops_per_s
    ew = sum(profile.times_s[op] for op in ELEMENTWISE_OPS)
    fixed = float(np.median(ew[small]))
    ew_bytes = n * elementwise_bytes_per_token(model) / tp
    ew_frac = float(np.median(ew_bytes[big] / ew[big])) / device.peak_bytes_per_s
    att = device.attention
    return RooflineEfficiency(
        compute_fraction=cf, bandwidth_fraction=bw,
        elementwise_bandwidth_fraction=ew_frac, elementwise_fixed_s=fixed,
        attention_compute_fraction=att.prefill_flops_per_s / device.peak_flops_per_s,
        attention_bandwidth_fraction=att.decode_bytes_per_s / device.peak_bytes_per_s,
        attention_fixed_s=att.decode_fixed_s)


# =========================================================================== measured device
class DeviceStepCost(StepCostBase):
    """Iteration latency on a measured GPU (see the module docstring).

    ``iteration_time_s`` is the sum of :meth:`breakdown`; ``decode_run_times_s`` the same
    vectorised over consecutive decode steps.
    """

    def __init__(self, cfg: Config, spec: MethodSpec, device: GpuDevice,
                 profile: OperatorProfile) -> None:
        m = cfg.model
        profile.check_model(m)
        tp = profile.tensor_parallel
        if m.q_heads % tp or m.kv_heads % tp:
            raise ParamError(f"tensor_parallel = {tp} must divide the model's query heads "
                             f"({m.q_heads}) and KV heads ({m.kv_heads})")
        self.cfg, self.spec, self.device, self.profile = cfg, spec, device, profile
        self.tp = tp
        self.layers = m.layers
        self.q_heads, self.kv_heads, self.head_dim = m.q_heads // tp, m.kv_heads // tp, m.head_dim
        self.att = device.attention
        self.kv: ClosedForm = closed_form(spec, cfg.layout)
        self.eff = derive_efficiency(profile, m, device)
        # LM head (not profiled): roofline with the profile's own GEMM efficiencies
        lm = m.vocab * m.hidden / tp
        self.lm_flops_per_logit = 2.0 * lm
        self.lm_bytes = lm * m.weight_bytes_per_param
        self._lm_s_per_logit = self.lm_flops_per_logit / (device.peak_flops_per_s
                                                          * self.eff.compute_fraction)
        self._lm_s_weights = self.lm_bytes / (device.peak_bytes_per_s
                                              * self.eff.bandwidth_fraction)
        # dense per-token-count tables of the profiled operators
        top = int(max(profile.tokens[-1], cfg.serving.max_batched_tokens)) + 1
        self._ops = _dense_tables(profile, top)
        self._layer = sum(self._ops[op] for op in LAYER_OPS) * self.layers + self._ops["emb"]
        # decode attention per decode key: bytes read (all layers, this GPU's heads)
        self._rf = RooflineStepCost(cfg, spec)
        self._qo_bytes = self.layers * self.q_heads * 2 * self.head_dim * 2.0
        self._inv_tp = 1.0 / tp
        self._dec_fixed = self.layers * self.att.decode_fixed_s
        self._s_per_byte = 1.0 / self.att.decode_bytes_per_s
        self._s_per_flop = 1.0 / self.att.prefill_flops_per_s
        # selection kernels (scan, top-k, score passes) per decode key, built on demand
        self.selection = device.selection
        self._sel: SelectionTables | None = None
        self._sel_att = (np.zeros(0), np.zeros(0))

    # ----------------------------------------------------------------- parts
    def _nonattention(self, tokens: int) -> float:
        if tokens < self._layer.size:
            return float(self._layer[tokens])
        return float(sum(self.profile.time_s(op, tokens)[0] for op in LAYER_OPS)
                     * self.layers + self.profile.time_s("emb", tokens)[0])

    def linear_time_s(self, tokens: int, logits: int) -> float:
        """Every operator but attention: the profiled ones at ``tokens`` and the LM head
        over ``logits``."""
        return self._nonattention(tokens) + self.lm_head_time_s(logits)

    def lm_head_time_s(self, logits: int) -> float:
        """The LM head over ``logits`` tokens: roofline with the profile's efficiencies."""
        if logits <= 0:
            return 0.0
        return max(logits * self._lm_s_per_logit, self._lm_s_weights)

    def selection_tables(self, xmax: int) -> SelectionTables | None:
        """Per decode key ``x <= xmax`` (at least): one sequence's selection work
        (:func:`hikv.sim.serving.gpu_selection.selection_tables`), and the attention
        kernel's FLOPs and bytes without it; None when the method selects nothing or the
        device has no selection model."""
        if self.selection is None:
            return None
        if self._sel is None or xmax >= self._sel.scan_bytes.size:
            size = max(xmax + 1, 2 * (0 if self._sel is None else self._sel.scan_bytes.size),
                       1024)
            x = np.maximum(np.arange(size, dtype=np.int64), 2)   # keys 0, 1 as key 2 (n >= 1)
            prompt, step = self.kv.by_key(x)
            rd = self.kv.decode_read(prompt, step)
            self._sel = selection_tables(self.cfg, self.spec, prompt, step, rd.burst)
            rf = self._rf
            self._sel_att = (np.asarray(rf.attn_flops_per_key * (rd.tokens + 1), dtype=float),
                             self._sel.attend_bytes + rf.write_bytes_per_token)
        return self._sel if self._sel.selects else None

    def decode_parts_s(self, x: np.ndarray, axis: int | None) -> tuple[Any, Any]:
        """(attention kernel, selection kernels) seconds of the sequences with decode keys
        ``x`` (summed over ``axis``); selection 0 for a method that selects nothing."""
        seqs = x.shape[0] if axis == 0 else x.size
        sel = self.selection_tables(int(x.max()))
        if sel is None:
            ft, bt = self._rf._decode_tables(int(x.max()))
            nbytes = bt[x].sum(axis) * self._inv_tp + seqs * self._qo_bytes
            flops = ft[x].sum(axis) * self._inv_tp
            return (self._dec_fixed + np.maximum(nbytes * self._s_per_byte,
                                                 flops * self._s_per_flop), 0.0)
        assert self.selection is not None
        af, ab = self._sel_att
        nbytes = ab[x].sum(axis) * self._inv_tp + seqs * self._qo_bytes
        flops = af[x].sum(axis) * self._inv_tp
        att = self._dec_fixed + np.maximum(
            nbytes * self._s_per_byte / self.selection.gather_fraction, flops * self._s_per_flop)
        return att, batch_selection_s(self.selection, sel, x, axis, layers=self.layers,
                                      flops_per_s=self.att.prefill_flops_per_s,
                                      share=self._inv_tp)

    def decode_attention_time_s(self, x: np.ndarray, axis: int | None) -> np.ndarray:
        """Decode kernels of the sequences with decode keys ``x`` (summed over ``axis``):
        per layer one attention kernel over the method's bytes per step (all layers, this
        GPU's share of the KV heads) plus queries and outputs, and, for a method that
        selects or evicts by a score, its selection kernels before it
        (:mod:`hikv.sim.serving.gpu_selection`)."""
        att, sel = self.decode_parts_s(x, axis)
        return att + sel

    def prefill_attention_time_s(self, done: np.ndarray, chunk: np.ndarray,
                                 total: np.ndarray) -> float:
        if done.size == 0:
            return 0.0
        prefix = prefill_prefix(self.kv, done, total)
        return self.layers * self.att.prefill_time_s(chunk, prefix, self.q_heads, self.kv_heads,
                                                     self.head_dim)

    # ----------------------------------------------------------------- interface
    def breakdown(self, batch: IterationBatch) -> dict[str, float]:
        """Seconds of the iteration by operator (:data:`BREAKDOWN_OPS`): profiled operators
        summed over layers, ``emb`` once, the modelled LM head and attention kernels."""
        n = batch.tokens
        out = {op: float(self._ops[op][n] if n < self._layer.size
                         else self.profile.time_s(op, n)[0]) * (1 if op == "emb" else
                                                                self.layers)
               for op in PROFILE_OPS}
        out["lm_head"] = self.lm_head_time_s(batch.logits)
        out["attn_prefill"] = self.prefill_attention_time_s(
            batch.prefill_done, batch.prefill_chunk, batch.prefill_total)
        out["attn_select"] = out["attn_decode"] = 0.0
        if batch.decode_step.size:
            x = self.kv.decode_key(batch.decode_prompt, batch.decode_step)
            att, sel = self.decode_parts_s(x, None)
            out["attn_select"], out["attn_decode"] = float(sel), float(att)
        return out

    def iteration_time_s(self, batch: IterationBatch) -> float:
        return self._plus_attention_s(
            self._nonattention(batch.tokens) + self.lm_head_time_s(batch.logits), batch)

    def decode_run_times_s(self, prompt: np.ndarray, step: np.ndarray, k: int) -> np.ndarray:
        return keyed_decode_run_times_s(
            self.kv, prompt, step, k, lambda d, x: self._nonattention(d)
            + self.lm_head_time_s(d) + self.decode_attention_time_s(x, 0))


@dataclass(frozen=True)
class DeviceCost:
    """A step-cost factory for :func:`hikv.sim.serving.engine.simulate` (``cost_model=``): the
    measured ``device`` with the operator profile at ``profile_path``."""

    device: str
    profile_path: str
    tensor_parallel: int = 1

    @property
    def name(self) -> str:
        return f"device:{self.device}"

    def describe(self) -> str:
        """One paragraph: what of this step cost is measured, what modelled, what not."""
        dev = get_device(self.device)
        a = dev.attention
        return (f"device {dev.name} ({dev.label}, {dev.peak_flops_per_s / 1e12:g} TFLOP/s, "
                f"{dev.peak_bytes_per_s / 1e12:g} TB/s), tensor parallel "
                f"{self.tensor_parallel}: MEASURED every non-attention operator of a layer and "
                f"the embedding ({self.profile_path}); MODELLED attention (decode "
                f"{a.decode_bytes_per_s / 1e12:.2f} TB/s + {a.decode_fixed_s * 1e6:.1f} us per "
                f"layer, prefill {a.prefill_flops_per_s / 1e12:.0f} TFLOP/s + "
                f"{a.prefill_fixed_s * 1e6:.1f} us, fitted to published A100 kernel times; a "
                f"selecting method's scan, top-k and score kernels fitted to Quest's "
                f"measurements) and "
                f"the LM head (roofline at the profile's GEMM efficiencies); NOT MODELLED "
                f"tensor-parallel all-reduce, CPU scheduling and sampling")

    def __call__(self, cfg: Config, spec: MethodSpec) -> StepCostModel:
        dev = get_device(self.device)
        prof = _cached_profile(self.profile_path, self.tensor_parallel)
        return DeviceStepCost(cfg, spec, dev, prof)


_PROFILES: dict[tuple[str, int], OperatorProfile] = {}


def _cached_profile(path: str, tp: int) -> OperatorProfile:
    """Profiles are immutable; reading one takes 50 ms, so each is read once per process."""
    p = regular_file(path, what="a Vidur-format operator profile (mlp.csv)", flag="--profile")
    key = (str(p.resolve()), tp)
    if key not in _PROFILES:
        _PROFILES[key] = read_profile(path, tensor_parallel=tp)
    return _PROFILES[key]


_DENSE: dict[tuple[int, int], tuple[OperatorProfile, dict[str, np.ndarray]]] = {}


def _dense_tables(profile: OperatorProfile, top: int) -> dict[str, np.ndarray]:
    """Every operator at 0..top tokens (read-only arrays), built once per profile and size:
    a goodput search builds a step cost per probe."""
    key = (id(profile), top)
    hit = _DENSE.get(key)
    if hit is None or hit[0] is not profile:
        grid = np.arange(top + 1, dtype=np.int64)
        tables = {op: profile.time_s(op, grid) for op in PROFILE_OPS}
        for t in tables.values():
            t.flags.writeable = False
        hit = _DENSE[key] = (profile, tables)
    return hit[1]


# =========================================================================== CLI
def device_cost_for(cfg: Config, device: str, *, profile: str | os.PathLike[str] | None = None,
                    tensor_parallel: int = 1, memory_gib: float | None = None
                    ) -> tuple[Config, DeviceCost]:
    """``cfg`` on ``device`` (peaks and memory, :func:`device_config`) and the measured
    step-cost factory for its model; the profile is ``profile`` or found by
    :func:`find_profile`. ParamError names what is missing or does not match."""
    dev = get_device(device)
    if tensor_parallel < 1:
        raise ParamError(f"tensor_parallel = {tensor_parallel} is out of range: allowed >= 1")
    if profile is None:
        model_dir = PROFILE_MODELS.get(cfg.model.name)
        if model_dir is None:
            raise ParamError(f"no operator profile is known for model {cfg.model.name!r} "
                             f"(known: {', '.join(PROFILE_MODELS)}); give --profile FILE")
        found = find_profile(dev.profile_dir, model_dir)
        if found is None:
            raise ParamError(f"operator profile {dev.profile_dir}/{model_dir}/mlp.csv not found "
                             "under $HIKV_DATA/vidur-profiles or shared/data/vidur-profiles "
                             "above the checkout; give --profile FILE")
        profile = found
    cost = DeviceCost(device, str(profile), tensor_parallel)
    _cached_profile(cost.profile_path, tensor_parallel).check_model(cfg.model)
    return device_config(cfg, dev, tensor_parallel=tensor_parallel, memory_gib=memory_gib), cost
