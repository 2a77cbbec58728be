"""Verilog generation from Amaranth components, reproducible (no source paths)."""

from __future__ import annotations

from amaranth.back import rtlil, verilog
from amaranth.lib import wiring

__all__ = ["to_verilog"]


def to_verilog(component: wiring.Component, name: str, *, flatten: bool = True) -> str:
    """Verilog text of ``component`` with top module ``name``.

    ``emit_src=False`` keeps checkout paths out of the output, so the text (and every cache
    keyed by its hash) depends on the design only.

    With ``flatten`` (the default) the hierarchy is flattened into one module (Yosys
    ``flatten``; wires keep their hierarchical names such as ``\\level0.engine.busy``).
    Amaranth names submodules ``top.sub``, which ``verilator -Wall`` reports as DECLFILENAME
    (module name differs from the file name); a single module named like its file lints clean.
    """
    if not flatten:
        return verilog.convert(component, name=name, emit_src=False)
    # the same Yosys script as amaranth.back.verilog.convert, plus ``flatten``
    from amaranth._toolchain.yosys import find_yosys

    text = rtlil.convert(component, name=name, emit_src=False)
    yosys = find_yosys(lambda ver: ver >= (0, 40))
    script = [f"read_rtlil <<rtlil\n{text}\nrtlil", "proc -nomux -norom", "flatten",
              "memory_collect", "write_verilog -norename"]
    return yosys.run(["-q", "-"], "\n".join(script), ignore_warnings=True)
