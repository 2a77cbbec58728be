"""The design space and the report: everything ``hikv report``, ``hikv sweep`` and the
trade-off curve show, built on the cost, serving and accuracy results below.

* :mod:`~hikv.sim.explore.report`    the result table of an operating point (``hikv report``)
* :mod:`~hikv.sim.explore.render`    Markdown, CSV, JSON and plots of a report
* :mod:`~hikv.sim.explore.sweep`     vectorised design-space sweeps (``hikv sweep``)
* :mod:`~hikv.sim.explore.tradeoff`  the sorter's area / clock trade-off (``hikv sweep
  --tradeoff``)

Names are imported from their module on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "report": ("Report", "MethodRow", "REPORT_SECTIONS", "build_report"),
    "render": ("write_report", "markdown"),
    "sweep": ("SweepResult", "AXES", "grid", "sample", "evaluate"),
    "tradeoff": ("Tradeoff", "write_tradeoff"),
})
