"""Bit-exact references of the hardware blocks and the torch-free pieces the closed forms share:
keys, memory layouts and byte accounts. numpy and the standard library only; below
:mod:`hikv.hw` (whose blocks are checked against them) and the cost model.

* :mod:`~hikv.model.refs.account`      byte accounts and metadata sizes (shared with the
  closed forms of :mod:`hikv.sim.cost.closed_form`)
* :mod:`~hikv.model.refs.keys`         float scores and magnitudes -> unsigned sorter keys
* :mod:`~hikv.model.refs.sorter`       the sorter's function (Stage I top-k, Stage II top-r)
* :mod:`~hikv.model.refs.layout`       KV memory layouts, byte ranges, burst-granular accounts
* :mod:`~hikv.model.refs.loader`       the loader's AXI request generator and memory images
* :mod:`~hikv.model.refs.lowbit`       b-bit key quantisation and the scoring unit's integer
  scores
* :mod:`~hikv.model.refs.baseline_pe`  the baseline accelerator's MAC and exponential arithmetic

Names are imported from their module on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "account": ("ByteAccount", "SCORE_BYTES"),
    "keys": ("float_to_key",),
    "sorter": ("stage1_topk", "stage2_topr", "topk_indices", "topk_mask"),
    "layout": ("Ranges", "Read", "burst_blocks", "burst_bytes"),
    "loader": ("AxiRead", "LoaderJob", "axi_requests"),
    "lowbit": ("LowbitMeta", "quantise_keys", "score_keys"),
    "baseline_pe": (),
})
