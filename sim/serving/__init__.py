"""Serving one model on one accelerator replica, iteration by iteration (docs/serving.md).

* :mod:`~hikv.sim.serving.engine`         the iteration-level simulator (:func:`simulate`,
  ``hikv serve``); its names are this package's first ones
* :mod:`~hikv.sim.serving.result`         :class:`ServingResult`, per-request times, the
  Little's-law check
* :mod:`~hikv.sim.serving.workload`       Poisson and Azure-trace workloads
* :mod:`~hikv.sim.serving.scheduler`      scheduling policies by name
* :mod:`~hikv.sim.serving.step_cost`      per-iteration latency models (the attention cost
  model, rooflines)
* :mod:`~hikv.sim.serving.report`         goodput, result rows, CDFs and the report's serving
  section
* :mod:`~hikv.sim.serving.device`         per-iteration cost on a measured GPU (Vidur
  ``mlp.csv``)
* :mod:`~hikv.sim.serving.device_report`  its per-operator tables and report section
* :mod:`~hikv.sim.serving.gpu_attention`  GPU attention kernels fitted to published
  measurements
* :mod:`~hikv.sim.serving.gpu_selection`  GPU selection kernels (scan, top-k, gather) fitted
  to published measurements
* :mod:`~hikv.sim.serving.systems`        the named systems (``gpu``, ``gpu+hikv``, ``hikv``)
  and the accelerator beside a GPU
* :mod:`~hikv.sim.serving.vidur_export`   the attention timings as Vidur ``attention.csv``

Above :mod:`hikv.sim.cost`; below :mod:`hikv.sim.cluster`. Names are imported from their module
on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "engine": ("simulate", "kv_capacity_blocks", "block_bytes"),
    "result": ("ServingResult", "RequestTimes", "LittleCheck", "little_check",
               "nan_percentile"),
    "workload": ("Workload", "TraceError", "poisson_workload", "read_azure_trace"),
    "scheduler": ("Policy", "POLICIES", "get_policy"),
    "step_cost": ("StepCostModel", "IterationBatch", "STEP_COST_MODELS", "DEFAULT_STEP_COST",
                  "make_step_cost", "resolve_step_cost"),
    "report": ("Goodput", "goodput", "run_methods", "serving_summary"),
    "device": ("GpuDevice", "DEVICES", "DeviceCost", "device_cost_for"),
    "device_report": (),
    "gpu_attention": ("GpuAttention", "fit_attention"),
    "gpu_selection": ("GpuSelection", "fit_selection"),
    "systems": ("SYSTEMS", "SystemCost", "system_cost", "OffloadStepCost"),
    "vidur_export": ("export_methods",),
})
