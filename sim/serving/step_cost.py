"""Per-iteration latency of one serving replica: the interface and two implementations.

The serving simulator asks a :class:`StepCostModel` how long one iteration takes, given what
the iteration computes (:class:`IterationBatch`). A model is built for one configuration and
one KV method by a factory registered in :data:`STEP_COST_MODELS` under a name; the simulator
takes the name (``hikv serve --cost-model NAME``, default :data:`DEFAULT_STEP_COST`):

* ``"attention-model"`` (:class:`AttentionModelStepCost`): decode attention per sequence from
  the attention cost model (:mod:`hikv.sim.cost.attention_model`: PE and softmax lanes, sorter,
  loaders, memory latency), the rest by the bare roofline below;
* ``"roofline"`` (:class:`RooflineStepCost`): everything by the bare roofline, as follows;
* ``"attention-model-eff"`` (:class:`EfficientAttentionModelStepCost`, the default) and
  ``"roofline-eff"``: the same with the achieved fractions, non-GEMM operators and per-layer
  kernel costs of :class:`hikv.params.RooflineEfficiency` (measured on an A100 profile,
  :mod:`hikv.sim.serving.device`), so a hypothetical device is not priced at its peaks.

See docs/serving.md, "Interface for the cost model".

Roofline (all SI units; one device of ``cfg.accel``; phases run one after the other):

* linear layers: ``max(FLOPs / linear_flops_per_s, weight bytes / mem_bandwidth_bytes_per_s)``
  with ``2 * params`` FLOPs per token for the projections and the MLP, ``2 * vocab * hidden``
  per token that produces logits (a decode token, or the last token of a prompt), and every
  weight read once per iteration (the LM head included, the input embedding not);
* prefill attention, all chunks of the iteration together: ``max(FLOPs / linear_flops_per_s,
  bytes / bandwidth)`` with ``4 * d`` FLOPs per (query head, query token, key) over the causal
  chunk and its resident prefix, and bytes = the prefix's resident KV read once plus the chunk's
  KV written;
* decode attention, all decoding sequences together: the same roofline with ``4 * d`` FLOPs
  per (query head, attended token) plus the method's scoring multiply-accumulates, and bytes =
  the method's burst-granular bytes read per step (:mod:`hikv.sim.cost.closed_form`, checked against
  the golden model) plus the new token's KV written.

Not modelled by the roofline: activations' memory traffic, softmax, sorter and loader time
(assumed hidden), kernel launch and synchronisation overheads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from hikv.params import Config, MethodSpec, ModelShape, ParamError, RooflineEfficiency
from hikv.sim.cost.attention_model import Overrides, attention_cost
from hikv.sim.cost.closed_form import closed_form
from hikv.sim.cost.closed_form_base import ClosedForm

__all__ = [
    "resolve_step_cost",
    "IterationBatch",
    "StepCostModel",
    "StepCostBase",
    "keyed_decode_run_times_s",
    "RooflineStepCost",
    "AttentionModelStepCost",
    "STEP_COST_MODELS",
    "EfficientRooflineStepCost",
    "EfficientAttentionModelStepCost",
    "elementwise_bytes_per_token",
    "DEFAULT_STEP_COST",
    "make_step_cost",
]

_I64 = np.int64


def _arr(x: object) -> np.ndarray:
    return np.asarray(x, dtype=_I64).reshape(-1)


@dataclass(frozen=True)
class IterationBatch:
    """What one iteration computes, as arrays over sequences.

    Prefill chunks (one entry per sequence with a chunk in this iteration):
    ``prefill_done`` tokens of the sequence already prefilled before the chunk (its context
    offset), ``prefill_chunk`` tokens in the chunk, ``prefill_total`` tokens to prefill in all
    (the chunk is the last one when ``done + chunk == total``; a recompute after preemption
    prefills the prompt plus the tokens generated so far).

    Decodes (one entry per decoding sequence): ``decode_prompt`` ``P`` tokens prefilled at the
    sequence's last (re)admission and ``decode_step`` ``j >= 1``, the decode step this
    iteration runs; the context attended is ``P + j`` tokens (see
    :mod:`hikv.sim.cost.closed_form_base`).
    """

    prefill_done: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))
    prefill_chunk: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))
    prefill_total: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))
    decode_prompt: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))
    decode_step: np.ndarray = field(default_factory=lambda: np.zeros(0, _I64))

    def __post_init__(self) -> None:
        for name in ("prefill_done", "prefill_chunk", "prefill_total", "decode_prompt",
                     "decode_step"):
            object.__setattr__(self, name, _arr(getattr(self, name)))
        n = self.prefill_chunk.size
        if self.prefill_done.size != n or self.prefill_total.size != n:
            raise ParamError("IterationBatch: prefill_done, prefill_chunk and prefill_total "
                             "must have one entry per prefilling sequence")
        if self.decode_step.size != self.decode_prompt.size:
            raise ParamError("IterationBatch: decode_prompt and decode_step must have one "
                             "entry per decoding sequence")
        if n and (self.prefill_chunk.min() < 1 or self.prefill_done.min() < 0
                  or (self.prefill_done + self.prefill_chunk > self.prefill_total).any()):
            raise ParamError("IterationBatch: prefill chunks need chunk >= 1, done >= 0 and "
                             "done + chunk <= total")
        if self.decode_step.size and (self.decode_step.min() < 1
                                      or self.decode_prompt.min() < 0):
            raise ParamError("IterationBatch: decode steps start at 1, prompts at 0")

    @property
    def tokens(self) -> int:
        """Tokens the iteration feeds through the model."""
        return int(self.prefill_chunk.sum()) + int(self.decode_step.size)

    @property
    def logits(self) -> int:
        """Tokens whose logits are computed: every decode and every last prefill chunk."""
        last = int((self.prefill_done + self.prefill_chunk == self.prefill_total).sum())
        return int(self.decode_step.size) + last


@runtime_checkable
class StepCostModel(Protocol):
    """Latency of one iteration of one replica, for one configuration and one KV method.

    Implementations are built by a factory ``(cfg: Config, spec: MethodSpec) -> model``
    registered in :data:`STEP_COST_MODELS`; they must be pure (same batch, same time) and fast.
    """

    def iteration_time_s(self, batch: IterationBatch) -> float:
        """Seconds the iteration takes (> 0 for a non-empty batch)."""
        ...

    def decode_run_times_s(self, prompt: np.ndarray, step: np.ndarray, k: int) -> np.ndarray:
        """Seconds of ``k`` consecutive pure-decode iterations of the same sequences, each
        advancing one step per iteration: entry ``m`` is ``iteration_time_s`` of the batch with
        ``decode_prompt=prompt`` and ``decode_step=step + m``."""
        ...


def prefill_prefix(kv: ClosedForm, done: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Tokens each prefilling chunk attends to before its own: ``done`` itself, or what
    stays resident of it when the method evicts during prefill (SnapKV, evicting HiKV)."""
    return kv.resident_after_prefill(done, total) if kv.evicts_during_prefill else done


def keyed_decode_run_times_s(kv: ClosedForm, prompt: np.ndarray, step: np.ndarray, k: int,
                             run_s: Callable[[int, np.ndarray], Any]) -> np.ndarray:
    """:meth:`~hikv.sim.serving.step_cost.StepCostModel.decode_run_times_s` of a step cost
    indexed by decode keys: ``run_s(d, x)`` gives the seconds of the ``k`` pure-decode
    iterations of ``d`` sequences whose decode keys are the ``(d, k)`` array ``x`` (column
    ``m`` at ``step + m``). Shared by :class:`RooflineStepCost`,
    :class:`~hikv.sim.serving.device.DeviceStepCost` and
    :class:`~hikv.sim.serving.systems.OffloadStepCost`."""
    prompt = np.asarray(prompt, dtype=np.int64).reshape(-1)
    step = np.asarray(step, dtype=np.int64).reshape(-1)
    d = prompt.size
    if k <= 0:
        return np.zeros(0)
    if d == 0:
        return np.zeros(k)
    x = kv.decode_key(prompt, step)[:, None] + np.arange(k, dtype=np.int64)[None, :]
    return run_s(d, x)


class StepCostBase:
    """Helper base: :meth:`decode_run_times_s` by calling :meth:`iteration_time_s` ``k``
    times. A cost model may implement only ``iteration_time_s`` and inherit this."""

    def iteration_time_s(self, batch: IterationBatch) -> float:  # pragma: no cover
        raise NotImplementedError

    def _plus_attention_s(self, t: float, batch: IterationBatch) -> float:
        """``t`` plus the batch's prefill, then decode attention seconds (in that order), for
        a subclass with ``kv``, ``prefill_attention_time_s`` and ``decode_attention_time_s``
        that is indexed by decode keys."""
        t += self.prefill_attention_time_s(batch.prefill_done, batch.prefill_chunk,
                                           batch.prefill_total)
        if batch.decode_step.size:
            x = self.kv.decode_key(batch.decode_prompt, batch.decode_step)
            t += float(self.decode_attention_time_s(x, None))
        return t

    def decode_run_times_s(self, prompt: np.ndarray, step: np.ndarray, k: int) -> np.ndarray:
        prompt, step = _arr(prompt), _arr(step)
        return np.array([self.iteration_time_s(IterationBatch(decode_prompt=prompt,
                                                              decode_step=step + m))
                         for m in range(k)])


class RooflineStepCost(StepCostBase):
    """Roofline latency of one iteration (see the module docstring for the formulas)."""

    def __init__(self, cfg: Config, spec: MethodSpec) -> None:
        self.cfg = cfg
        self.spec = spec
        self.kv: ClosedForm = closed_form(spec, cfg.layout)
        m, a = cfg.model, cfg.accel
        self.flops_per_s = float(a.linear_flops_per_s)
        self.bytes_per_s = float(a.mem_bandwidth_bytes_per_s)
        lm_head = m.vocab * m.hidden
        body = m.params - lm_head * (1 if m.tied_embeddings else 2)
        self.linear_flops_per_token = 2.0 * body
        self.logit_flops_per_token = 2.0 * lm_head
        self.weight_read_bytes = float((body + lm_head) * m.weight_bytes_per_param)
        self.heads = m.layers * m.kv_heads                    # (layer, KV head) pairs
        self.attn_flops_per_key = 4.0 * m.layers * m.q_heads * m.head_dim
        self.group = m.group
        self.write_bytes_per_token = self.heads * self.kv.token_write_bytes()
        # per decode key (ClosedForm.decode_key): FLOPs and bytes of one sequence's step;
        # per resident-token count: storage bytes. Grown on demand; a cache, not state.
        self._flops_t = np.zeros(0)
        self._bytes_t = np.zeros(0)
        self._store_t = np.zeros(0, dtype=_I64)

    def _decode_tables(self, xmax: int) -> tuple[np.ndarray, np.ndarray]:
        if xmax >= self._flops_t.size:
            size = max(xmax + 1, 2 * self._flops_t.size, 1024)
            x = np.arange(size, dtype=_I64)
            x[0] = 1                                   # key 0 never occurs (step >= 1)
            flops, nbytes = self._decode_terms(*self.kv.by_key(x))
            self._flops_t = np.asarray(flops, dtype=np.float64)
            self._bytes_t = np.asarray(nbytes, dtype=np.float64)
        return self._flops_t, self._bytes_t

    def _storage(self, r: np.ndarray) -> np.ndarray:
        top = int(r.max())
        if top >= self._store_t.size:
            size = max(top + 1, 2 * self._store_t.size, 1024)
            self._store_t = self.kv.storage_bytes(np.arange(size, dtype=_I64))
        return self._store_t[r]

    # ----------------------------------------------------------------- phases
    def linear_time_s(self, tokens: int, logits: int) -> float:
        if tokens == 0:
            return 0.0
        flops = tokens * self.linear_flops_per_token + logits * self.logit_flops_per_token
        return max(flops / self.flops_per_s, self.weight_read_bytes / self.bytes_per_s)

    def prefill_attention_time_s(self, done: np.ndarray, chunk: np.ndarray,
                                 total: np.ndarray) -> float:
        if done.size == 0:
            return 0.0
        prefix = prefill_prefix(self.kv, done, total)
        keys = chunk * prefix + chunk * (chunk + 1) // 2       # causal (query, key) pairs
        flops = self.attn_flops_per_key * float(keys.sum())
        base = self._storage(np.zeros(1, dtype=_I64))[0]
        read = self._storage(prefix) - base
        written = self._storage(prefix + chunk) - self._storage(prefix)
        nbytes = self.heads * float((read + written).sum())
        return max(flops / self.flops_per_s, nbytes / self.bytes_per_s)

    def _decode_terms(self, prompt: np.ndarray, step: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
        """Per sequence (broadcast shape): attention FLOPs and bytes of one decode step."""
        kv = self.kv
        rd = kv.decode_read(prompt, step)
        flops = (self.attn_flops_per_key * (rd.tokens + 1)
                 + 2.0 * self.heads * kv.scoring_macs(prompt, step, self.group))
        nbytes = self.heads * rd.burst + self.write_bytes_per_token
        return flops, nbytes

    # ----------------------------------------------------------------- interface
    def iteration_time_s(self, batch: IterationBatch) -> float:
        return self._plus_attention_s(self.linear_time_s(batch.tokens, batch.logits), batch)

    def decode_attention_time_s(self, x: np.ndarray, axis: int | None) -> np.ndarray:
        """Decode attention of the sequences with decode keys ``x`` (summed over ``axis``):
        ``max(sum FLOPs / linear_flops_per_s, sum bytes / bandwidth)``."""
        ft, bt = self._decode_tables(int(x.max()))
        return np.maximum(ft[x].sum(axis) / self.flops_per_s, bt[x].sum(axis) / self.bytes_per_s)

    def decode_run_times_s(self, prompt: np.ndarray, step: np.ndarray, k: int) -> np.ndarray:
        return keyed_decode_run_times_s(
            self.kv, prompt, step, k,
            lambda d, x: self.linear_time_s(d, d) + self.decode_attention_time_s(x, 0))


class AttentionModelStepCost(RooflineStepCost):
    """Decode attention from the attention cost model, the rest by roofline.

    Linear layers and prefill attention as :class:`RooflineStepCost`. Each decoding sequence's
    attention takes :func:`hikv.sim.cost.attention_model.attention_cost` ``.time_s`` at its cached
    context (select, sort and attend phases on the accelerator's PE and softmax lanes, the
    sorter and the loaders, all layers and KV heads), and the sequences of an iteration run one
    after another on the attention engine (their times add). Decode key ``x`` is priced at the
    sequence state :meth:`~hikv.sim.cost.closed_form_base.ClosedForm.by_key` gives (prompt ``P`` and
    step ``j``, ``P + j = x``); evicting HiKV's time is the closed form's average over one
    compaction cycle.
    """

    def __init__(self, cfg: Config, spec: MethodSpec) -> None:
        super().__init__(cfg, spec)
        self._att_t = np.zeros(0)

    def attention_table_s(self, xmax: int) -> np.ndarray:
        """Per decode key ``x <= xmax`` (at least): one sequence's decode attention, seconds."""
        if xmax >= self._att_t.size:
            size = max(xmax + 1, 2 * self._att_t.size, 1024)
            x = np.maximum(np.arange(size, dtype=_I64), 2)     # keys 0 and 1 as key 2 (n >= 1)
            prompt, step = self.kv.by_key(x)
            n = prompt + step - 1
            ov = Overrides(context=prompt, step=step)
            t = np.asarray(attention_cost(self.spec, self.cfg, ov).time_s, dtype=np.float64)
            self._att_t = np.broadcast_to(t, n.shape).copy()
        return self._att_t

    def decode_attention_time_s(self, x: np.ndarray, axis: int | None) -> np.ndarray:
        return self.attention_table_s(int(x.max()))[x].sum(axis)



def elementwise_bytes_per_token(model: ModelShape) -> float:
    """Activation bytes the non-GEMM operators of one layer move per token (fp16): two
    RMSNorms (read and write ``h`` each), rotary embedding (read and write Q and K), the
    gated activation (read ``2 I``, write ``I``) and one residual add (read ``2 h``, write
    ``h``), the operators Vidur profiles once per layer."""
    e = (4 * model.hidden + 2 * (model.q_heads + model.kv_heads) * model.head_dim
         + 3 * model.intermediate + 3 * model.hidden)
    return 2.0 * e


# --------------------------------------------------------------------------- with efficiencies
class _EfficientLinear:
    """Linear layers, non-GEMM operators and prefill attention with efficiencies."""

    eff: RooflineEfficiency

    def _init_eff(self, cfg: Config, eff: RooflineEfficiency | None) -> None:
        self.eff = eff if eff is not None else RooflineEfficiency()
        a, m = cfg.accel, cfg.model
        self.flops_per_s = float(a.linear_flops_per_s) * self.eff.compute_fraction
        self.bytes_per_s = float(a.mem_bandwidth_bytes_per_s) * self.eff.bandwidth_fraction
        self._ew_bytes = elementwise_bytes_per_token(m) * m.layers
        self._ew_rate = float(a.mem_bandwidth_bytes_per_s) * self.eff.elementwise_bandwidth_fraction
        self._att_flops = float(a.linear_flops_per_s) * self.eff.attention_compute_fraction
        self._att_bytes = float(a.mem_bandwidth_bytes_per_s) * self.eff.attention_bandwidth_fraction
        self._att_fixed = m.layers * self.eff.attention_fixed_s
        self._ew_fixed = m.layers * self.eff.elementwise_fixed_s

    def linear_time_s(self, tokens: int, logits: int) -> float:
        if tokens == 0:
            return 0.0
        gemm = RooflineStepCost.linear_time_s(self, tokens, logits)  # type: ignore[arg-type]
        return gemm + self._ew_fixed + tokens * self._ew_bytes / self._ew_rate

    def prefill_attention_time_s(self, done: np.ndarray, chunk: np.ndarray,
                                 total: np.ndarray) -> float:
        if done.size == 0:
            return 0.0
        f, b = self.flops_per_s, self.bytes_per_s
        try:
            self.flops_per_s, self.bytes_per_s = self._att_flops, self._att_bytes
            t = RooflineStepCost.prefill_attention_time_s(self, done, chunk, total)  # type: ignore[arg-type]
        finally:
            self.flops_per_s, self.bytes_per_s = f, b
        return t + self._att_fixed


class EfficientRooflineStepCost(_EfficientLinear, RooflineStepCost):
    """The roofline with achieved fractions, non-GEMM operators and per-layer attention
    costs from :class:`hikv.params.RooflineEfficiency` (``roofline-eff``)."""

    def __init__(self, cfg: Config, spec: MethodSpec,
                 eff: RooflineEfficiency | None = None) -> None:
        RooflineStepCost.__init__(self, cfg, spec)
        self._init_eff(cfg, eff)

    def decode_attention_time_s(self, x: np.ndarray, axis: int | None) -> np.ndarray:
        ft, bt = self._decode_tables(int(x.max()))
        return self._att_fixed + np.maximum(ft[x].sum(axis) / self._att_flops,
                                            bt[x].sum(axis) / self._att_bytes)


class EfficientAttentionModelStepCost(_EfficientLinear, AttentionModelStepCost):
    """Decode attention from the attention cost model (the HiKV accelerator), linear layers,
    non-GEMM operators and prefill attention as :class:`EfficientRooflineStepCost`
    (``attention-model-eff``)."""

    def __init__(self, cfg: Config, spec: MethodSpec,
                 eff: RooflineEfficiency | None = None) -> None:
        AttentionModelStepCost.__init__(self, cfg, spec)
        self._init_eff(cfg, eff)


#: Step-cost factories by name: ``factory(cfg, spec) -> StepCostModel``. A cost model in
#: another module registers itself by adding its factory here when that module is imported.
STEP_COST_MODELS: dict[str, Callable[[Config, MethodSpec], StepCostModel]] = {
    "roofline": RooflineStepCost,
    "attention-model": AttentionModelStepCost,
    "roofline-eff": EfficientRooflineStepCost,
    "attention-model-eff": EfficientAttentionModelStepCost,
}


#: The step-cost model the simulator, ``hikv serve`` and the report use unless told otherwise.
DEFAULT_STEP_COST = "attention-model-eff"


def make_step_cost(name: str, cfg: Config, spec: MethodSpec) -> StepCostModel:
    """The step-cost model registered as ``name`` for ``cfg`` and ``spec``."""
    try:
        factory = STEP_COST_MODELS[name]
    except KeyError:
        raise ParamError(f"cost model = {name!r} is not one of: "
                         f"{', '.join(sorted(STEP_COST_MODELS))}") from None
    return factory(cfg, spec)


def resolve_step_cost(cost_model: str | Callable[[Config, MethodSpec], StepCostModel],
                      cfg: Config, spec: MethodSpec) -> tuple[StepCostModel, str]:
    """``(model, name)`` of a run's ``cost_model``: a registered name
    (:func:`make_step_cost`), or a factory ``(cfg, spec) -> StepCostModel`` whose ``name``
    attribute (else the model's class name) is recorded."""
    if callable(cost_model):
        cost = cost_model(cfg, spec)
        return cost, str(getattr(cost_model, "name", type(cost).__name__))
    return make_step_cost(cost_model, cfg, spec), cost_model
