"""Cost, energy, area and serving models of HiKV: numpy and the standard library, no torch.

Subpackages, lowest first (a module imports only from its own layer and the layers below;
``tests/test_architecture.py`` checks it):

* :mod:`hikv.sim.tech`     technology data: the shipped tables, energy and area scaling between
  nodes
* :mod:`hikv.sim.eda`      EDA flows of the generated Verilog: area (Yosys), ASIC timing (STA),
  FPGA place and route, the cell library, shipped results
* :mod:`hikv.sim.cost`     the cost model: one closed form of bytes per KV method, cycles,
  clocks, energy, the time and energy of a decode step
* :mod:`hikv.sim.serving`  serving one replica iteration by iteration (``hikv serve``), on the
  modelled accelerator or a measured GPU
* :mod:`hikv.sim.cluster`  serving on a cluster: routers, P/D disaggregation, dynamic ratios
  (``hikv cluster``)
* :mod:`hikv.sim.explore`  the report, design-space sweeps and the area / clock trade-off
  (``hikv report``, ``hikv sweep``)

Each subpackage lists its modules and names its public API (``__all__``); importing one costs
no more than its cheapest module (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "tech": (), "eda": (), "cost": (), "serving": (), "cluster": (), "explore": (),
})
