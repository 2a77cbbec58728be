"""Cycle models of HiKV's sorter and loader behind one interface, :class:`TimingModel`.

The sorter and the loader each document their timing in a standard-library
module that their cocotb regressions check against the RTL job by job:
:mod:`hikv.hw.sorter_timing` (closed forms, exact) and :mod:`hikv.hw.loader_timing` (a
cycle-level job model, exact, and a closed form for sweeps). :class:`RtlTiming` is the adapter
the cost model uses (``"rtl"``, the default).

Interface (all arguments broadcast as numpy arrays; results are cycles, float arrays):

``sorter_cycles(params, mode, *, n, k, d, count)``
    ``mode="stage1"``: top-``k`` of a stream of ``n`` keys (one job), from the cycle the first
    input beat is accepted to the cycle the last output beat is accepted (the RTL's definition,
    docs/sorter.md). ``mode="stage2"``: ``count`` back-to-back vectors of ``d`` elements, keep
    ``k`` of each (one job). An empty job (``n``, ``k`` or ``count`` zero) takes 0 cycles.
``sorter_compares(params, mode, *, n, k, d, count)``
    comparator evaluations of the same job (for :func:`hikv.sim.cost.energy.sorter_energy_j`).
``loader_cycles(params, layout, *, bytes, requests, mem_latency_cycles, records, page_tokens)``
    one loader instance reading ``bytes`` (burst granular) in ``requests`` AXI read requests
    from a memory whose first data beat returns ``mem_latency_cycles`` after the request, from
    the ``cfg`` handshake to ``status.done`` (the RTL's definition, docs/loader.md, "Timing
    contract": 2 cycles before the first token is taken and 2 after the last output are
    included).
    ``records``: masked records among them (the expander takes ``expand_cycles`` per record);
    ``page_tokens``: retained tokens of channel pages (one output cycle each). No bytes: 0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from hikv.hw.loader_timing import (
    DONE_CYCLES,
    FIRST_TOKEN_CYCLE,
    LoaderGeometry,
    job_timing,
)
from hikv.hw.sorter_timing import SorterTiming
from hikv.params import KVLayout, LoaderParams, ParamError, SorterParams

__all__ = ["TimingModel", "RtlTiming", "TIMING_MODELS", "get_timing", "default_timing",
           "SORTER_MODES", "sorter_for_job", "unique_apply"]

ArrayLike = Any
SORTER_MODES = ("stage1", "stage2")


@runtime_checkable
class TimingModel(Protocol):
    """Sorter and loader cycles (see the module docstring for the contract)."""

    name: str
    source: str

    def sorter_cycles(self, params: SorterParams, mode: str, *, n: ArrayLike = 0,
                      k: ArrayLike = 0, d: ArrayLike = 0, count: ArrayLike = 0) -> ArrayLike:
        ...

    def sorter_compares(self, params: SorterParams, mode: str, *, n: ArrayLike = 0,
                        k: ArrayLike = 0, d: ArrayLike = 0, count: ArrayLike = 0) -> ArrayLike:
        ...

    def loader_cycles(self, params: LoaderParams, layout: KVLayout, *, bytes: ArrayLike,
                      requests: ArrayLike, mem_latency_cycles: ArrayLike,
                      records: ArrayLike = 0, page_tokens: ArrayLike = 0) -> ArrayLike:
        ...


def unique_apply(fn: Callable[..., float], *args: ArrayLike) -> ArrayLike:
    """``fn`` of Python ints, applied to broadcast integer arrays once per distinct tuple
    (sweeps repeat few distinct jobs); a float for scalar arguments."""
    arrs = np.broadcast_arrays(*(np.asarray(a, dtype=np.int64) for a in args))
    shape = arrs[0].shape
    flat = np.stack([a.reshape(-1) for a in arrs], axis=1)
    uniq, inv = np.unique(flat, axis=0, return_inverse=True)
    vals = np.array([fn(*map(int, row)) for row in uniq], dtype=float)
    out = vals[inv.reshape(-1)].reshape(shape)
    return out if out.ndim else float(out)


def sorter_for_job(params: SorterParams, *, n: int = 0, k: int = 0, d: int = 0
                   ) -> SorterParams:
    """``params``, with ``max_n`` / ``max_k`` / ``max_vec`` raised where a job exceeds them.

    The cost model prices a job longer than the built sorter accepts (e.g. SparQ's Stage I
    over all ``N + 1`` tokens when ``max_n = N``) on the same sorter built large enough for it:
    the same lanes, and the pipeline latency of the larger build (one more merge-tree level
    per doubling of ``max_k``). Reports say when this happens (:meth:`RtlTiming.fits`).
    """
    mn, mk, mv = max(params.max_n, n, k), max(params.max_k, k), max(params.max_vec, d)
    if (mn, mk, mv) == (params.max_n, params.max_k, params.max_vec):
        return params
    return dataclasses.replace(params, max_n=mn, max_k=mk, max_vec=mv)


class RtlTiming:
    """The RTL's documented timing, validated against cocotb measurements.

    * Sorter: :class:`hikv.hw.sorter_timing.SorterTiming` cycles and comparator evaluations,
      exact for the RTL (no data dependence). Jobs beyond the built limits are priced on a
      sorter built for them (:func:`sorter_for_job`).
    * Loader, cost model: the closed form :func:`hikv.hw.loader_timing.estimate_cycles`
      (vectorised here; ``tests/test_cost_timing.py`` checks it equals the scalar function),
      from byte and request counts, within 10 % of the cycle-level model for contiguous jobs
      and runs with gaps (docs/loader.md).
    * Loader, fully described job (:meth:`loader_job_cycles`): the cycle-level model
      :func:`hikv.hw.loader_timing.job_timing`, which the cocotb regression requires to equal
      the measured cycles; :mod:`hikv.sim.cost.validate` uses it for recorded jobs.
    """

    name = "rtl"
    source = ("RTL timing contracts: hikv.hw.sorter_timing (SorterTiming, exact) and "
              "hikv.hw.loader_timing (estimate_cycles closed form; job_timing cycle-level "
              "model), both asserted against the RTL in cocotb")

    @staticmethod
    def _job(params: SorterParams, mode: str, what: str) -> Callable[..., float]:
        if mode not in SORTER_MODES:
            raise ParamError(f"sorter mode = {mode!r} is not one of {SORTER_MODES}")

        def one(n: int, k: int, d: int, count: int) -> float:
            if mode == "stage1":
                if n <= 0 or k <= 0:
                    return 0.0
                t = SorterTiming.from_params(sorter_for_job(params, n=n, k=k))
                return float(getattr(t, f"stage1_{what}")(n, k))
            if count <= 0 or d <= 0 or k <= 0:
                return 0.0
            t = SorterTiming.from_params(sorter_for_job(params, d=d))
            return float(getattr(t, f"stage2_{what}")(count, d, min(k, d)))

        return one

    def sorter_cycles(self, params: SorterParams, mode: str, *, n: ArrayLike = 0,
                      k: ArrayLike = 0, d: ArrayLike = 0, count: ArrayLike = 0) -> ArrayLike:
        return unique_apply(self._job(params, mode, "cycles"), n, k, d, count)

    def sorter_compares(self, params: SorterParams, mode: str, *, n: ArrayLike = 0,
                        k: ArrayLike = 0, d: ArrayLike = 0, count: ArrayLike = 0) -> ArrayLike:
        return unique_apply(self._job(params, mode, "compares"), n, k, d, count)

    @staticmethod
    def fits(params: SorterParams, mode: str, *, n: ArrayLike = 0, k: ArrayLike = 0,
             d: ArrayLike = 0) -> ArrayLike:
        """Whether the job fits the built sorter (else it is priced on a larger build)."""
        if mode == "stage1":
            return (np.asarray(n) <= params.max_n) & (np.asarray(k) <= params.max_k)
        return np.asarray(d) <= params.max_vec

    def loader_cycles(self, params: LoaderParams, layout: KVLayout, *, bytes: ArrayLike,
                      requests: ArrayLike, mem_latency_cycles: ArrayLike,
                      records: ArrayLike = 0, page_tokens: ArrayLike = 0) -> ArrayLike:
        """:func:`hikv.hw.loader_timing.estimate_cycles`, vectorised (see the class doc)::

            FIRST_TOKEN_CYCLE + 1 + max(L + beats - 1 + page_tokens,
                                        ceil(requests / N) (L + beats / requests) - 1,
                                        (records - 1) expand_cycles) + hold + 1 + DONE_CYCLES

        ``beats = ceil(bytes / beat_bytes)``, ``requests`` rounded up; ``hold`` is
        ``expand_cycles`` with masked records, 0 for channel pages only, else 1. Masked records
        and channel pages are timed as on a loader built with their paths (a preset builds
        only the paths its own policy uses, ``LoaderParams.masked_records`` /
        ``channel_pages``; the paths add no cycles to the other layouts).
        """
        geo = LoaderGeometry(layout, params)
        beats = np.ceil(np.asarray(bytes, dtype=float) / params.beat_bytes)
        req = np.maximum(np.ceil(np.asarray(requests, dtype=float)), 1.0)
        lat = np.asarray(mem_latency_cycles, dtype=float)
        rec = np.asarray(records, dtype=float)
        pt = np.asarray(page_tokens, dtype=float)
        hold = np.where(rec > 0, geo.expand_cycles, np.where(pt > 0, 0, 1))
        bus = lat + beats - 1 + pt
        mem = np.ceil(req / params.max_outstanding) * (lat + beats / req) - 1
        exp = np.where(rec > 0, (rec - 1) * geo.expand_cycles, 0.0)
        c = FIRST_TOKEN_CYCLE + 1 + np.maximum(np.maximum(bus, mem), exp) + hold + 1 \
            + DONE_CYCLES
        return np.where(beats > 0, c, 0.0)

    @staticmethod
    def loader_job_cycles(params: LoaderParams, layout: KVLayout, *, mode: str,
                          slots: list[int], mem_latency_cycles: int, base: int = 0,
                          kept: int = 0, channels: tuple[int, ...] | list[int] = (),
                          outstanding: int | None = None) -> int:
        """Cycles of one fully described job: :func:`hikv.hw.loader_timing.job_timing`."""
        return job_timing(LoaderGeometry(layout, params), mode=mode, slots=list(slots),
                          base=base, kept=kept, channels=list(channels),
                          latency=mem_latency_cycles, outstanding=outstanding).cycles


#: name -> class of the timing models the cost model can use (a model in another module
#: registers itself by adding its class here when that module is imported)
TIMING_MODELS: dict[str, Callable[[], TimingModel]] = {
    "rtl": RtlTiming,
}


def get_timing(name: str) -> TimingModel:
    """An instance of the timing model called ``name``."""
    try:
        ref = TIMING_MODELS[name]
    except KeyError:
        raise ParamError(f"unknown timing model {name!r}; known: {sorted(TIMING_MODELS)}"
                         ) from None
    model = ref()
    if not isinstance(model, TimingModel):
        raise ParamError(f"timing model {name!r} ({ref!r}) does not implement TimingModel")
    return model


def default_timing() -> TimingModel:
    """The timing model reports use: the RTL's (``"rtl"``)."""
    return get_timing("rtl")
