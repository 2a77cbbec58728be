"""The cost model: bytes, cycles, time and energy of one decode step per KV method, numpy only.

Bytes (one closed form per KV method, checked against the golden model :mod:`hikv.model`):

* :mod:`~hikv.sim.cost.closed_form`            the registry ``CLOSED_FORMS`` and :func:`step_bytes`
* :mod:`~hikv.sim.cost.closed_form_base`       the interface, residency and decode keys
* :mod:`~hikv.sim.cost.closed_form_baselines`  full KV, H2O, SnapKV, Quest, SparQ, Double
  Sparsity, StreamingLLM, TOVA, AdaKV, G-AdaKV, PyramidKV
* :mod:`~hikv.sim.cost.closed_form_hikv`       HiKV
* :mod:`~hikv.sim.cost.bursts`                 burst-granular pieces (runs, scattered rows,
  metadata)

Cycles, clocks, energy and the step cost:

* :mod:`~hikv.sim.cost.timing`           sorter and loader cycle models (:class:`TimingModel`)
* :mod:`~hikv.sim.cost.validate`         the timing models against cycles measured on the RTL
* :mod:`~hikv.sim.cost.clocks`           each block's clock: the timing flow's estimate, or the
  preset's
* :mod:`~hikv.sim.cost.energy`           energy per action and per component; leakage per area
  and per SRAM bit
* :mod:`~hikv.sim.cost.static_power`     leakage of the accelerator's parts, static energy per
  step
* :mod:`~hikv.sim.cost.attention_model`  time and energy of one decode step per method
* :mod:`~hikv.sim.cost.blocks`           one record per RTL block: its cycles, area, clock,
  energy per action and instances (:class:`BlockCost`)
* :mod:`~hikv.sim.cost.engines`          HiKV's Stage I engine (``sorter.kind``): the sort
  blocks it builds, their area and share of the system

Below it: :mod:`hikv.sim.eda` (areas, clocks), :mod:`hikv.sim.tech`, the hardware's timing
contracts (:mod:`hikv.hw`) and the torch-free references (:mod:`hikv.model.refs.account`).
Names are imported from their module on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "closed_form": ("CLOSED_FORMS", "step_bytes"),
    "closed_form_base": ("ClosedForm", "StepAccount"),
    "closed_form_baselines": (),
    "closed_form_hikv": (),
    "bursts": ("Geometry",),
    "timing": ("TimingModel", "RtlTiming", "TIMING_MODELS", "get_timing", "default_timing"),
    "validate": (),
    "clocks": ("Clocks", "BlockClock", "accelerator_clocks", "assumed_clocks"),
    "energy": (),
    "static_power": ("LeakagePower", "accelerator_leakage"),
    "attention_model": ("AttentionCost", "Overrides", "StepWork", "attention_cost",
                        "step_work"),
    "blocks": ("BlockCost", "block_cost", "block_costs"),
    "engines": ("engine_area", "engine_shares", "sort_blocks"),
})
