"""The outcome of one block regression (``hikv rtl``), returned by every regression of
:data:`hikv.rtl_tests.registry.REGRESSIONS`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RtlReport"]


@dataclass(frozen=True)
class RtlReport:
    """Outcome of one block regression (``hikv rtl``)."""

    block: str
    preset: str
    seed: int
    jobs: int
    passed: bool
    lines: tuple[str, ...] = ()      # human-readable summary, printed by ``hikv rtl``
    metrics: dict[str, Any] = field(default_factory=dict)  # e.g. measured cycles per mode
    waves: Path | None = None
