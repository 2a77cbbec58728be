"""Report sections and provenance shared by ``hikv report`` and the sections it includes.

A leaf module (no import of the report or of its sections), so :mod:`hikv.sim.explore.report`
imports :mod:`hikv.sim.serving.report` (its serving section) plainly and the latter imports these
from here: no import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hikv.io import code_version

__all__ = ["ReportSection", "flatten", "code_version"]


@dataclass(frozen=True)
class ReportSection:
    """An extra section: a Markdown body and JSON-able rows."""

    title: str
    markdown: str
    rows: list[dict[str, Any]] = field(default_factory=list)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict as one level with dotted names (``prefix`` before each)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


