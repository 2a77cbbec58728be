"""EDA flows of the generated Verilog: area from synthesis, the clock from timing analysis, FPGA
place and route. Below the cost model (:mod:`hikv.sim.cost` reads areas and clocks from here);
the technology data it scales by is :mod:`hikv.sim.tech`.

* :mod:`~hikv.sim.eda.cells`    the sky130 standard-cell library the flows map to (fetched once)
* :mod:`~hikv.sim.eda.area`     area from Yosys synthesis: NAND2 equivalents, SRAM macros,
  per block and for the whole accelerator (cached)
* :mod:`~hikv.sim.eda.sta`      ASIC timing: static timing of the mapped netlist, scaled to the
  node
* :mod:`~hikv.sim.eda.fpga`     FPGA place and route (ECP5, ``hikv timing --backend fpga``)
* :mod:`~hikv.sim.eda.shipped`  synthesis and timing results shipped with the package
* :mod:`~hikv.sim.eda.published`  our per-unit areas against published figures
* :mod:`~hikv.sim.eda.formal`   formal proofs of the blocks' interface properties (SymbiYosys,
  ``hikv prove``)

Names are imported from their module on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "cells": ("CellLibrary", "CellsUnavailable", "load_cells", "fetch_cells"),
    "area": ("SynthResult", "SynthError", "AreaItem", "AcceleratorArea", "synthesize",
             "cached_synthesis", "block_synth", "unit_synth", "hierarchical_synthesis",
             "accelerator_area", "logic_area_m2", "sram_area_m2"),
    "sta": ("StaResult", "analyse", "block_sta", "block_clock"),
    "fpga": ("FpgaResult", "FpgaError", "FpgaToolMissing", "fpga_timing", "block_fpga",
             "block_fpga_seeds"),
    "shipped": (),
    "published": ("UnitComparison", "unit_comparisons"),
    "formal": ("ProofResult", "FormalToolMissing", "prove_property"),
})
