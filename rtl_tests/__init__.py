"""``hikv.rtl_tests``: the cocotb (2.x, Verilator) verification of the RTL blocks and their
launchers, importable without cocotb (testbench modules import it; launchers do not).

Modules:

* :mod:`~hikv.rtl_tests.registry` -- block name -> regression (``hikv rtl``);
  :mod:`~hikv.rtl_tests.report` -- ``RtlReport``, the outcome of one regression.
* :mod:`~hikv.rtl_tests.streams` -- the verification kit: stream sources / sinks and seeded
  idle / backpressure patterns used by every testbench.
* Sorter: :mod:`~hikv.rtl_tests.sorter_rtl` (launcher), :mod:`~hikv.rtl_tests.tb_sorter`
  (testbench), :mod:`~hikv.rtl_tests.sorter_jobs` (jobs, beat codec, expected outputs),
  :mod:`~hikv.rtl_tests.sorter_replay` (replay user vectors).
* Loader: :mod:`~hikv.rtl_tests.loader_launch` (launcher, also the sorter -> loader chain),
  :mod:`~hikv.rtl_tests.tb_loader` (testbench), :mod:`~hikv.rtl_tests.loader_jobs` (jobs and
  expected results from the golden model).
* Scoring unit: :mod:`~hikv.rtl_tests.scorer_launch` (launcher, also the scorer -> sorter
  chain), :mod:`~hikv.rtl_tests.tb_scorer` (testbench), :mod:`~hikv.rtl_tests.scorer_jobs`
  (random and adversarial jobs, expected keys from :mod:`hikv.model.refs.lowbit`).
* G-AdaKV's global selection on the sorter: :mod:`~hikv.rtl_tests.gadakv_rtl` (launcher),
  :mod:`~hikv.rtl_tests.tb_gadakv` (testbench: the schedule of
  :mod:`hikv.model.methods.global_select` driven with the RTL).
* :mod:`~hikv.rtl_tests.rtl_cycles` -- measured cycles recorded in tests/golden/rtl_cycles.json.
* ``test_*.py`` -- the pytest launchers (marker ``rtl``).

Modules are imported on first use (:mod:`hikv.lazy`); ``__all__`` names the library modules
(not the ``test_*`` launchers).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {m: () for m in (
    "registry", "report", "streams", "sorter_rtl", "tb_sorter", "sorter_jobs", "sorter_replay",
    "loader_launch", "tb_loader", "loader_jobs", "scorer_launch", "tb_scorer", "scorer_jobs",
    "gadakv_rtl", "tb_gadakv", "rtl_cycles")})
