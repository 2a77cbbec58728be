"""The PyTorch golden model: HiKV and its baselines written from the algorithm, bit-exact
references of the hardware blocks, byte accounting, and the accuracy study on real LMs. The RTL
and the cost model's closed forms are checked against it.

Modules (import what you need; this package imports nothing heavy by itself):

* :mod:`hikv.model.refs.account`         byte accounts and metadata sizes (torch-free; shared with
  the closed forms of :mod:`hikv.sim.cost.closed_form`)
* :mod:`hikv.model.refs.keys`            float scores and magnitudes -> unsigned sorter keys
* :mod:`hikv.model.refs.sorter`      the sorter's function (Stage I top-k, Stage II top-r)
* :mod:`hikv.model.refs.layout`          KV memory layouts, byte ranges, burst-granular accounts
* :mod:`hikv.model.refs.loader`      the loader's AXI request generator and memory images
* :mod:`hikv.model.refs.baseline_pe` the baseline accelerator's MAC and exponential arithmetic
* :mod:`hikv.model.refs.lowbit`          b-bit key quantisation and the scoring unit's integer scores
  (numpy; the golden model's low-bit scorer and the RTL scorer's reference)
* :mod:`hikv.model.methods.attention`       dense attention helpers
* :mod:`hikv.model.methods.cache`           the per-layer cache interface (:class:`KVCache`) and shared
  selection helpers
* :mod:`hikv.model.methods.baselines`       full KV, H2O, SnapKV, Quest, SparQ, Double Sparsity,
  StreamingLLM, TOVA
* :mod:`hikv.model.methods.baselines_adaptive` AdaKV, G-AdaKV, PyramidKV (budgets shared across heads
  or layers)
* :mod:`hikv.model.methods.hikv`      HiKV (Stage I and Stage II through the sorter reference)
* :mod:`hikv.model.methods.registry`         the registry ``METHODS`` and :func:`make_cache`
* :mod:`hikv.model.lm.runner`              a Hugging Face LM whose attention runs through the caches
  (loading; re-exports :mod:`hikv.model.lm.route`)
* :mod:`hikv.model.lm.route`        sequences, prefill (shared, recorded, forked at a prefix),
  adoption of a recorded prompt, decode steps
* :mod:`hikv.model.accuracy.experiments`        perplexity, passkey, tasks, fidelity, capture
* :mod:`hikv.model.accuracy.iso`    protocols, Wilson intervals, the iso-accuracy table
* :mod:`hikv.model.accuracy.suite`  the whole accuracy study as one resumable run
* :mod:`hikv.model.accuracy.seed_suite`      the seed suites: protocol x length x task cells, run
  resumably (process pool or Ray); re-exports the three modules below
* :mod:`hikv.model.accuracy.seed_spec`       the seed suites as data: suites, cells, method specs
* :mod:`hikv.model.accuracy.seed_trials`     the trial runner: adaptive cells, both protocols of a task
  sharing each trial's prompt pass
* :mod:`hikv.model.accuracy.seed_tables`     the task filter, iso tables and ``seed_table.md``
* :mod:`hikv.model.accuracy.io`     result files and plots of the accuracy study
* :mod:`hikv.model.lm.assets`          real models and text fetched from PyPI
"""
