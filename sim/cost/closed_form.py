"""One closed-form byte model per KV method, registered like the golden model's ``METHODS``.

:data:`CLOSED_FORMS` maps each :class:`~hikv.method_spec.Method` to its
:class:`~hikv.sim.cost.closed_form_base.ClosedForm` (baselines in
:mod:`hikv.sim.cost.closed_form_baselines`, HiKV in :mod:`hikv.sim.cost.closed_form_hikv`;
importing this module imports both). A closed form registers itself by naming its method
(``method = Method.<ATTR>``; the method's name, label options and parameters are its
:class:`~hikv.method_spec.MethodInfo`, :data:`hikv.method_spec.BUILTIN_METHODS`); the golden
class of the same method is :data:`hikv.model.methods.registry.METHODS` ``[method]``, and
``tests/test_kv_bytes.py`` / ``tests/test_cost_bytes.py`` check each closed form against it on
every layout. The cost model (:mod:`hikv.sim.cost.attention_model`, sweeps, the report) and the
serving model (:mod:`hikv.sim.serving.engine`, :mod:`hikv.sim.serving.step_cost`) use only these.
numpy only: no torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hikv.params import KVLayout, LoaderParams, MethodSpec, ParamError

# importing the closed forms fills CLOSED_FORMS
from hikv.sim.cost import closed_form_baselines, closed_form_hikv  # noqa: F401
from hikv.sim.cost.bursts import Geometry
from hikv.sim.cost.closed_form_base import CLOSED_FORMS, ClosedForm, StepAccount

__all__ = ["CLOSED_FORMS", "closed_form", "step_bytes", "Geometry", "StepAccount",
           "ClosedForm"]

ArrayLike = Any


def closed_form(spec: MethodSpec, layout: KVLayout | None = None) -> ClosedForm:
    """The closed form of ``spec`` (on ``layout``; ``None`` for :func:`step_bytes` only)."""
    try:
        cls = CLOSED_FORMS[spec.method]
    except KeyError:
        raise ParamError(f"no closed form for method {spec.method.value!r}") from None
    return cls(spec, layout)


def step_bytes(spec: MethodSpec, geom: Geometry | KVLayout, n: ArrayLike, *,
               budget: ArrayLike | None = None, keep_k: ArrayLike | None = None,
               keep_v: ArrayLike | None = None, loader: LoaderParams | None = None,
               prompt: ArrayLike | None = None) -> StepAccount:
    """Bytes per decode step and (layer, KV head) after ``n`` tokens, ``prompt`` of them
    prefilled (default: all, the first decode step).

    ``budget``, ``keep_k`` and ``keep_v`` (HiKV's Stage II keeps) override the spec's values and,
    like ``n`` and the geometry, may be numpy arrays (they broadcast).
    """
    g = geom if isinstance(geom, Geometry) else Geometry.of(geom, loader)
    n = np.asarray(n)
    if (n < 1).any():
        raise ParamError("n (cached tokens) must be >= 1")
    B = np.asarray(spec.budget if budget is None else budget)
    zero = np.zeros(np.broadcast(n, B, g.head_dim).shape)
    return closed_form(spec).step(g, n, B, zero, keep_k=keep_k, keep_v=keep_v, prompt=prompt)
