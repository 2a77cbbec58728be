"""The golden model of the KV methods: HiKV and its baselines written from the algorithm, one
per-layer cache class each (PyTorch).

* :mod:`~hikv.model.methods.registry`            the registry ``METHODS`` and :func:`make_cache`;
  its names are this package's first ones
* :mod:`~hikv.model.methods.cache`               the per-layer cache interface
  (:class:`KVCache`) and shared selection helpers
* :mod:`~hikv.model.methods.attention`           dense attention helpers
* :mod:`~hikv.model.methods.baselines`           full KV, H2O, SnapKV, Quest, SparQ, Double
  Sparsity, StreamingLLM, TOVA
* :mod:`~hikv.model.methods.baselines_adaptive`  AdaKV, G-AdaKV, PyramidKV (budgets shared
  across heads or layers)
* :mod:`~hikv.model.methods.global_select`       G-AdaKV's global selection, its schedule of
  sorter jobs and their cycles (pure Python)
* :mod:`~hikv.model.methods.hikv`                HiKV (Stage I and Stage II through the sorter
  reference)

Names are imported from their module on first use (:mod:`hikv.lazy`): ``import
hikv.model.methods`` imports no torch.
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "registry": ("make_cache", "METHODS", "SCORE_BYTES"),
    "cache": ("KVCache", "Evicting", "static_mask"),
    "attention": (),
    "baselines": ("FullKV", "H2O", "SnapKV", "Quest", "SparQ", "DoubleSparsity",
                  "StreamingLLM", "TOVA"),
    "baselines_adaptive": ("AdaKV", "GAdaKV", "PyramidKV"),
    "global_select": ("global_topk",),
    "hikv": ("HiKV", "hikv_resident_bytes"),
})
