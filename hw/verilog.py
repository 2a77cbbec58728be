"""Verilog generation from Amaranth components, reproducible (no source paths)."""

from __future__ import annotations

from amaranth.back import verilog
from amaranth.lib import wiring

__all__ = ["to_verilog"]


def to_verilog(component: wiring.Component, name: str) -> str:
    """Verilog text of ``component`` with top module ``name``.

    ``emit_src=False`` keeps checkout paths out of the output, so the text (and every cache
    keyed by its hash) depends on the design only.
    """
    return verilog.convert(component, name=name, emit_src=False)
