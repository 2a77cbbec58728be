"""Cycle models of HiKV's sorter and loader behind one interface, :class:`TimingModel`.

The sorter (issue 3) and the loader (issue 4) each document a timing formula that their cocotb
regressions check against the RTL. Until those formulas are wired in here, the cost model uses
:class:`ProvisionalTiming`: analytic targets from the issues, **PROVISIONAL**, not validated
against any RTL. Every report names the timing model it used and says whether it is provisional.

Interface (all arguments broadcast as numpy arrays; results are cycles, float arrays):

``sorter_cycles(params, mode, *, n, k, d, count)``
    ``mode="stage1"``: top-``k`` of a stream of ``n`` keys (one job), from the first key in to
    the last selected index out. ``mode="stage2"``: ``count`` vectors of ``d`` elements, keep
    ``k`` of each (one job of back-to-back vectors).
``sorter_compares(params, mode, *, n, k, d, count)``
    compare-exchange operations of the same job (for :func:`hikv.sim.energy.sorter_energy_j`).
``loader_cycles(params, layout, *, bytes, requests, mem_latency_cycles)``
    one loader instance reading ``bytes`` (burst granular) in ``requests`` AXI read requests
    from a memory whose first data beat returns ``mem_latency_cycles`` after the request, from
    the first request to the last packed word out.

To wire an RTL helper's formula: implement these three methods (a thin adapter around the
helper's stdlib-only module), add the class to :data:`TIMING_MODELS`, and make
:func:`default_timing` return it.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

import numpy as np

from hikv.params import KVLayout, LoaderParams, ParamError, SorterParams

__all__ = ["TimingModel", "ProvisionalTiming", "TIMING_MODELS", "get_timing", "default_timing",
           "SORTER_MODES"]

ArrayLike = Any
SORTER_MODES = ("stage1", "stage2")


@runtime_checkable
class TimingModel(Protocol):
    """Sorter and loader cycles (see the module docstring for the contract)."""

    name: str
    provisional: bool
    source: str

    def sorter_cycles(self, params: SorterParams, mode: str, *, n: ArrayLike = 0,
                      k: ArrayLike = 0, d: ArrayLike = 0, count: ArrayLike = 0) -> ArrayLike:
        ...

    def sorter_compares(self, params: SorterParams, mode: str, *, n: ArrayLike = 0,
                        k: ArrayLike = 0, d: ArrayLike = 0, count: ArrayLike = 0) -> ArrayLike:
        ...

    def loader_cycles(self, params: LoaderParams, layout: KVLayout, *, bytes: ArrayLike,
                      requests: ArrayLike, mem_latency_cycles: ArrayLike) -> ArrayLike:
        ...


def _log2(x: ArrayLike) -> ArrayLike:
    return np.log2(np.maximum(np.asarray(x, dtype=float), 2.0))


class ProvisionalTiming:
    """PROVISIONAL analytic targets from issues 3 and 4 (to be replaced by the RTL formulas).

    Sorter with ``P`` lanes and a ``P``-input bitonic network of depth
    ``s (s + 1) / 2``, ``s = log2 P`` (its pipeline latency ``Ls = s (s + 1) / 2 + 2``):

    * Stage I: ``2 ceil(n / P) + ceil(k / P) + Ls`` (two passes over the stream, then the
      ``k`` results out, ``P`` per cycle);
    * Stage II: ``count ceil(d / P) + Ls``;
    * compares per key: ``s (s + 1) / 4`` in the network plus ``log2 k`` to merge into the
      running top-``k``.

    Loader (one instance, ``beat_bytes`` per cycle, at most ``max_outstanding`` requests in
    flight): ``max(ceil(bytes / beat_bytes), ceil(requests / max_outstanding) L) + L + 2`` with
    ``L = mem_latency_cycles``: the data beats, or the request round trips when too few
    requests are in flight to cover the latency, plus one latency to fill and two cycles of
    packing pipeline.
    """

    name = "provisional"
    provisional = True
    source = ("PROVISIONAL analytic targets of issues 3 (sorter) and 4 (loader); not validated "
              "against RTL")

    @staticmethod
    def _check(params: SorterParams, mode: str) -> None:
        if mode not in SORTER_MODES:
            raise ParamError(f"sorter mode = {mode!r} is not one of {SORTER_MODES}")

    def sorter_cycles(self, params: SorterParams, mode: str, *, n: ArrayLike = 0,
                      k: ArrayLike = 0, d: ArrayLike = 0, count: ArrayLike = 0) -> ArrayLike:
        self._check(params, mode)
        P = np.asarray(params.lanes)
        s = _log2(P)
        lat = s * (s + 1) / 2 + 2
        if mode == "stage1":
            n, k = np.asarray(n), np.asarray(k)
            c = 2 * -(-n // P) + -(-k // P) + lat
            return np.where(n > 0, c, 0.0)
        d, count = np.asarray(d), np.asarray(count)
        c = count * -(-d // P) + lat
        return np.where(count > 0, c, 0.0)

    def sorter_compares(self, params: SorterParams, mode: str, *, n: ArrayLike = 0,
                        k: ArrayLike = 0, d: ArrayLike = 0, count: ArrayLike = 0) -> ArrayLike:
        self._check(params, mode)
        s = _log2(params.lanes)
        per = s * (s + 1) / 4 + _log2(k)
        keys = np.asarray(n) if mode == "stage1" else np.asarray(count) * np.asarray(d)
        return keys * per

    def loader_cycles(self, params: LoaderParams, layout: KVLayout, *, bytes: ArrayLike,
                      requests: ArrayLike, mem_latency_cycles: ArrayLike) -> ArrayLike:
        b = np.asarray(bytes, dtype=float)
        beats = np.ceil(b / params.beat_bytes)
        lat = np.asarray(mem_latency_cycles, dtype=float)
        rounds = np.ceil(np.asarray(requests, dtype=float) / params.max_outstanding) * lat
        return np.where(b > 0, np.maximum(beats, rounds) + lat + 2, 0.0)


#: name -> "module:class" of the timing models the cost model can use
TIMING_MODELS: dict[str, str] = {
    "provisional": "hikv.sim.timing:ProvisionalTiming",
}


def get_timing(name: str) -> TimingModel:
    """An instance of the timing model called ``name``."""
    try:
        ref = TIMING_MODELS[name]
    except KeyError:
        raise ParamError(f"unknown timing model {name!r}; known: {sorted(TIMING_MODELS)}"
                         ) from None
    mod, _, attr = ref.partition(":")
    model = getattr(importlib.import_module(mod), attr)()
    if not isinstance(model, TimingModel):
        raise ParamError(f"timing model {name!r} ({ref}) does not implement TimingModel")
    return model


def default_timing() -> TimingModel:
    """The timing model reports use: the RTL-validated one once wired, else provisional."""
    return get_timing("rtl" if "rtl" in TIMING_MODELS else "provisional")
