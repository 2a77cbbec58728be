"""The interface of a method's closed form, and what every method shares (residency, keys).

A closed form (one class per KV method, registered in
:data:`hikv.sim.cost.closed_form.CLOSED_FORMS`) gives in numpy what the golden model's
:class:`~hikv.model.methods.registry.KVCache` counts by running on tensors: per decode step and
(layer, KV head) the bytes read (ideal, at burst granularity, metadata apart) as a
:class:`~hikv.model.refs.account.ByteAccount`, the bytes kept resident, the tokens attended, the
scoring work and the sorter jobs. Two questions are asked of it:

* **operating point** (cost model, sweeps): :meth:`ClosedForm.step`, a decode step after ``n``
  tokens, broadcast over design axes (context, budget, Stage II keeps, head dimension). Where
  the golden count depends on the data it gives the *expectation* (random choice of rows or
  channels; the phase of HiKV's compaction cycle), with an AXI request estimate;
* **sequence state** (serving): :meth:`ClosedForm.decode_read` at prompt ``P`` and decode step
  ``j >= 1`` (the context attended is ``P + j`` tokens, the current one included, whose K and V
  are computed on chip and not read); where the golden count depends on the data it gives an
  *upper bound* (the serving model must not overcommit bandwidth); :attr:`ClosedForm.exact`
  says which.

Residency (capacity): methods that keep every token hold ``P + j`` tokens; evicting methods
override :meth:`ClosedForm.resident_after_step`. Every count is per (layer, KV head).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from hikv.method_spec import register_class
from hikv.model.refs.account import ByteAccount
from hikv.params import KVLayout, Method, MethodSpec, ParamError
from hikv.sim.cost.bursts import Geometry, Piece, cdiv

__all__ = ["StepAccount", "SortJob", "Work", "ClosedForm", "CLOSED_FORMS", "account_of",
           "read_account", "cdiv"]

ArrayLike = Any
_I64 = np.int64


@dataclass(frozen=True)
class StepAccount(ByteAccount):
    """:class:`~hikv.model.refs.account.ByteAccount` of a closed form (numpy arrays) plus
    ``requests``, the loader's AXI request estimate."""

    requests: ArrayLike = 0


@dataclass(frozen=True)
class SortJob:
    """One sorter job of a decode step: ``stage1`` top-``k`` of ``n`` or ``stage2`` top-``k``
    of each of ``count`` vectors of ``d``; ``per_step`` jobs per step (``1/Δ`` for HiKV's
    evicting compaction, 0 where no selection happens), per (layer, KV head), or per layer
    when ``per_layer`` (one job shared by the layer's KV heads, TOVA's layer-wide rule: the
    cost model counts ``per_step / kv_heads`` of it per (layer, KV head))."""

    mode: str
    n: ArrayLike = 0
    k: ArrayLike = 0
    d: ArrayLike = 0
    count: ArrayLike = 0
    per_step: ArrayLike = 1.0
    per_layer: bool = False


@dataclass(frozen=True)
class Work:
    """What a decode step does besides reading: the select phase (metadata read before the
    selection is known, scoring MACs and exponentials), the K elements per token in ``q.k``,
    the sorter jobs, and what the loaders expand (masked records, channel-page tokens)."""

    select_bytes: ArrayLike = 0.0
    select_requests: ArrayLike = 0.0
    score_macs: ArrayLike = 0.0
    score_exps: ArrayLike = 0.0
    qk_dims: ArrayLike | None = None     # None: head_dim
    sorts: tuple[SortJob, ...] = ()
    masked_records: ArrayLike = 0
    page_tokens: ArrayLike = 0


def account_of(k_ideal: ArrayLike, v_ideal: ArrayLike, meta_ideal: ArrayLike, k: Piece,
               v: Piece, meta: Piece, resident: ArrayLike, tokens: ArrayLike, zero: ArrayLike
               ) -> StepAccount:
    """A :class:`StepAccount` of floats broadcast to ``zero``'s shape (the design grid)."""
    f = lambda x: np.asarray(x, dtype=float) + zero  # noqa: E731
    return StepAccount(k_ideal=f(k_ideal), v_ideal=f(v_ideal), meta_ideal=f(meta_ideal),
                       k_burst=f(k.burst), v_burst=f(v.burst), meta_burst=f(meta.burst),
                       resident=f(resident), tokens=f(tokens),
                       requests=f(k.requests + v.requests + meta.requests))


#: each method's closed form, filled by :class:`ClosedForm` subclasses that set ``method``
#: (the golden class of the same method: :data:`hikv.model.methods.registry.METHODS`)
CLOSED_FORMS: dict[Method, type[ClosedForm]] = {}


class ClosedForm:
    """Closed-form bytes of one method on one layout, per (layer, KV head).

    A subclass that sets :attr:`method` (``Method.<ATTR>``, a registered
    :class:`~hikv.method_spec.Method`: its name, label options and parameters are its
    :class:`~hikv.method_spec.MethodInfo`) is that method's closed form in :data:`CLOSED_FORMS`.
    Subclasses set :attr:`method` and implement :meth:`storage`, :meth:`step` and :meth:`_read`;
    evicting methods override :meth:`resident_after_step` and the flags.
    ``layout`` may be ``None`` when only :meth:`step` (which takes its own geometry) is used.
    """

    method: ClassVar[Method]
    #: frees the KV of evicted tokens (capacity methods)
    evicts: ClassVar[bool] = False
    #: evicts after every prefill chunk (H2O), not only after the last one
    evicts_during_prefill: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "method" in cls.__dict__:      # a class that names its method is its closed form
            register_class(CLOSED_FORMS, cls.method, cls)

    def __init__(self, spec: MethodSpec, layout: KVLayout | None = None) -> None:
        if spec.method is not self.method:
            raise ParamError(f"{type(self).__name__} needs a spec of method "
                             f"{self.method.value!r}, not {spec.method.value!r}")
        if spec.hikv is not None and layout is not None:
            spec.hikv.check_head_dim(layout.head_dim)
        self.spec = spec
        self._layout = layout

    @property
    def layout(self) -> KVLayout:
        if self._layout is None:
            raise ParamError(f"{type(self).__name__} was built without a layout")
        return self._layout

    # ----------------------------------------------------------------- per method
    def storage(self, g: Geometry, r: ArrayLike, keep_k: ArrayLike | None = None,
                keep_v: ArrayLike | None = None) -> ArrayLike:
        """Resident bytes for ``r`` resident tokens (data, metadata, alignment padding)."""
        raise NotImplementedError

    def step(self, g: Geometry, n: ArrayLike, B: ArrayLike, zero: ArrayLike, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None,
             prompt: ArrayLike | None = None) -> StepAccount:
        """Operating point: the decode step after ``n`` tokens (``prompt`` of them prefilled,
        default all), budget ``B``; results broadcast to ``zero``'s shape."""
        raise NotImplementedError

    def work(self, g: Geometry, n: ArrayLike, B: ArrayLike, sb: StepAccount, group: int, *,
             keep_k: ArrayLike | None = None, keep_v: ArrayLike | None = None) -> Work:
        """Scoring and sorting of the operating point :meth:`step` priced as ``sb``."""
        return Work()

    def _read(self, n: np.ndarray, cached: np.ndarray, z: np.ndarray) -> StepAccount:
        """Sequence state: the bytes read with ``cached`` tokens resident before the append
        and ``n`` after it (``resident`` is filled in by :meth:`decode_read`)."""
        raise NotImplementedError

    def _scoring_macs(self, n: np.ndarray, group: int) -> np.ndarray:
        """Multiply-accumulates spent choosing what to read with ``n`` resident tokens."""
        return np.zeros_like(n)

    @property
    def exact(self) -> bool:
        """True when :meth:`decode_read` equals the golden model's account (else a bound)."""
        return True

    # ----------------------------------------------------------------- residency (tokens)
    def resident_after_step(self, prompt: ArrayLike, step: ArrayLike) -> np.ndarray:
        """Resident tokens after decode step ``step`` (``step = 0``: after prefill)."""
        return np.asarray(prompt, dtype=_I64) + np.asarray(step, dtype=_I64)

    @property
    def canonical_prompt(self) -> bool:
        """Decode depends on ``min(P, B)``, not ``P`` (SnapKV, HiKV's evicting Stage I)."""
        return False

    def resident_after_prefill(self, done: ArrayLike, total: ArrayLike) -> np.ndarray:
        """Resident tokens once ``done`` of ``total`` prompt tokens are prefilled."""
        done = np.asarray(done, dtype=_I64)
        total = np.asarray(total, dtype=_I64)
        b = self.spec.budget
        if self.evicts_during_prefill:
            return np.minimum(done, b)
        if self.evicts:
            return np.where(done >= total, np.minimum(done, b), done)
        return done

    def prefill_peak(self, done: ArrayLike, chunk: ArrayLike) -> np.ndarray:
        """Resident tokens while a chunk runs: what stays of ``done`` plus the whole chunk."""
        done = np.asarray(done, dtype=_I64)
        chunk = np.asarray(chunk, dtype=_I64)
        if self.evicts_during_prefill:
            return np.minimum(done, self.spec.budget) + chunk
        return done + chunk

    def decode_key(self, prompt: ArrayLike, step: ArrayLike) -> np.ndarray:
        """One integer ``x`` per (prompt, step) such that everything decode step ``step``
        reads, attends and keeps is a function of ``x`` alone: ``x = P + j`` (``min(P, B) + j``
        for SnapKV and evicting HiKV). :meth:`by_key` maps ``x`` back to a (prompt, step)."""
        prompt = np.asarray(prompt, dtype=_I64)
        if self.canonical_prompt:
            prompt = np.minimum(prompt, self.spec.budget)
        return prompt + np.asarray(step, dtype=_I64)

    def by_key(self, x: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """A (prompt, step) pair with :meth:`decode_key` ``x`` (``x >= 1``)."""
        x = np.asarray(x, dtype=_I64)
        prompt = np.minimum(x - 1, self.spec.budget)
        return prompt, x - prompt

    def step_peak(self, prompt: ArrayLike, step: ArrayLike) -> np.ndarray:
        """Resident tokens during decode step ``step >= 1`` (after the append, before any
        eviction)."""
        return self.resident_after_step(prompt, np.asarray(step) - 1) + 1

    # ----------------------------------------------------------------- storage
    def storage_bytes(self, r: ArrayLike) -> np.ndarray:
        """Resident bytes for ``r`` resident tokens on :attr:`layout` (integers)."""
        return self.storage(Geometry.of(self.layout), np.asarray(r, dtype=_I64))

    def token_write_bytes(self) -> float:
        """Average bytes written per new token (its storage, page metadata amortised)."""
        many = 64 * self.layout.page_tokens * self.spec.page_tokens
        return float(self.storage_bytes(many) - self.storage_bytes(0)) / many

    # ----------------------------------------------------------------- sequence state
    def decode_read(self, prompt: ArrayLike, step: ArrayLike) -> StepAccount:
        """Bytes decode step ``step >= 1`` reads after a prompt of ``prompt`` tokens, and
        the bytes resident after it (per (layer, KV head))."""
        prompt = np.asarray(prompt, dtype=_I64)
        step = np.asarray(step, dtype=_I64)
        z = np.zeros(np.broadcast(prompt, step).shape, dtype=_I64)
        cached = self.resident_after_step(prompt, step - 1)     # tokens before the append
        acc = self._read(cached + 1, cached, z)
        resident = self.storage_bytes(self.resident_after_step(prompt, step) + z)
        return dataclasses.replace(acc, resident=resident)

    def decode_read_burst(self, prompt: ArrayLike, step: ArrayLike) -> np.ndarray:
        """Total burst bytes of decode step ``step`` (the simulator's hot path)."""
        return self.decode_read(prompt, step).burst

    def attended(self, prompt: ArrayLike, step: ArrayLike) -> np.ndarray:
        """Tokens attended at decode step ``step`` (cached tokens read plus the current one)."""
        return self.decode_read(prompt, step).tokens + 1

    def scoring_macs(self, prompt: ArrayLike, step: ArrayLike, group: int) -> np.ndarray:
        """Multiply-accumulates per (layer, KV head) spent choosing what to read at decode
        step ``step``."""
        prompt = np.asarray(prompt, dtype=_I64)
        step = np.asarray(step, dtype=_I64)
        return self._scoring_macs(self.resident_after_step(prompt, step - 1) + 1, group)


def read_account(k_ideal: ArrayLike, v_ideal: ArrayLike, meta_ideal: ArrayLike,
                 k_burst: ArrayLike, v_burst: ArrayLike, meta_burst: ArrayLike,
                 tokens: ArrayLike) -> StepAccount:
    """The sequence-state account of :meth:`ClosedForm._read` (``resident`` filled later)."""
    return StepAccount(k_ideal=k_ideal, v_ideal=v_ideal, meta_ideal=meta_ideal,
                       k_burst=k_burst, v_burst=v_burst, meta_burst=meta_burst, tokens=tokens)

