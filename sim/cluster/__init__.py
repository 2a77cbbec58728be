"""Serving on a cluster: replicas behind a router, prefill/decode (P/D) disaggregation with KV
transfer, each instance the single-replica engine of :mod:`hikv.sim.serving`
(docs/cluster.md).

* :mod:`~hikv.sim.cluster.engine`   the cluster simulator (:func:`simulate_cluster`,
  ``hikv cluster``); its names are this package's first ones
* :mod:`~hikv.sim.cluster.params`   cluster layouts, KV links, presets (validated dataclasses)
* :mod:`~hikv.sim.cluster.router`   request routers (round-robin, least-tokens, p2c, QUARTZ) and
  decode routers
* :mod:`~hikv.sim.cluster.sched`    the output-length predictor and EWSJF waiting order
* :mod:`~hikv.sim.cluster.ratio`    dynamic prefill/decode ratios (DOPD, thresholds)
* :mod:`~hikv.sim.cluster.goodput`  the goodput search of a cluster
* :mod:`~hikv.sim.cluster.plan`     fleet sizing: the smallest fleet meeting SLOs (``hikv plan``)
* :mod:`~hikv.sim.cluster.report`   grids of configurations, result rows, tables and plots

Names are imported from their module on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "engine": ("ClusterResult", "PoolLittle", "simulate_cluster", "transfer_bytes"),
    "params": ("ClusterParams", "KVLink", "DynamicRatio", "LINKS", "CLUSTER_PRESETS", "ROUTERS",
               "get_link", "get_cluster_preset"),
    "router": ("make_router", "make_decode_router", "jain_index"),
    "sched": ("OutputPredictor", "split_workload"),
    "ratio": ("make_ratio_policy",),
    "goodput": ("ClusterGoodput", "cluster_goodput"),
    "plan": ("FleetPlan", "smallest_fleet", "parse_slo"),
    "report": ("GridPoint", "run_grid"),
})
