"""Cost, energy, area and serving models of HiKV: numpy and the standard library, no torch.

Bytes (one closed form per KV method, checked against the golden model :mod:`hikv.model`):

* :mod:`hikv.sim.cost.closed_form`           the registry ``CLOSED_FORMS`` and :func:`step_bytes`
* :mod:`hikv.sim.cost.closed_form_base`      the interface, residency and decode keys
* :mod:`hikv.sim.cost.closed_form_baselines` full KV, H2O, SnapKV, Quest, SparQ, Double Sparsity
* :mod:`hikv.sim.cost.closed_form_hikv`      HiKV
* :mod:`hikv.sim.cost.bursts`                burst-granular pieces (runs, scattered rows, metadata)

Attention cost and the design space:

* :mod:`hikv.sim.cost.timing`          sorter and loader cycle models (:class:`TimingModel`)
* :mod:`hikv.sim.cost.validate`        timing models against cycles measured on the RTL
* :mod:`hikv.sim.cost.energy`          energy per action and per component
* :mod:`hikv.sim.eda.cells`           the standard-cell library of the area flow
* :mod:`hikv.sim.eda.area`            area from Yosys synthesis of the generated Verilog
* :mod:`hikv.sim.eda.sta`             ASIC timing estimate (sky130 STA scaled to the node)
* :mod:`hikv.sim.eda.fpga`            FPGA place and route (ECP5, ``hikv timing --backend fpga``)
* :mod:`hikv.sim.cost.attention_model` time and energy of one decode step per method
* :mod:`hikv.sim.explore.sweep`           vectorised design-space sweeps (``hikv sweep``)
* :mod:`hikv.sim.explore.report`          the result table of an operating point (``hikv report``)
* :mod:`hikv.sim.explore.render`   Markdown, CSV, JSON and plots of a report
* :mod:`hikv.report_section`  report sections and provenance shared with the sections

Serving:

* :mod:`hikv.sim.serving.workload`        Poisson and Azure-trace workloads
* :mod:`hikv.sim.serving.scheduler`       scheduling policies by name
* :mod:`hikv.sim.serving.step_cost`       per-iteration latency models
* :mod:`hikv.sim.serving.engine`         the iteration-level serving simulator (``hikv serve``)
* :mod:`hikv.sim.serving.report`  goodput, result rows, CDFs and the report's serving section
* :mod:`hikv.sim.serving.device`          per-iteration cost on a measured GPU (Vidur ``mlp.csv``)
* :mod:`hikv.sim.serving.device_report`   its per-operator tables and report section
* :mod:`hikv.sim.serving.gpu_attention`   GPU attention kernels fitted to published measurements
* :mod:`hikv.sim.serving.vidur_export`    our attention timings as Vidur ``attention.csv``
"""
