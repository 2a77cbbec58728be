"""The PyTorch golden model: HiKV and its baselines, bit-exact hardware references, byte
accounting. Written from the algorithm; the RTL is checked against it.

Submodules (import what you need; this package imports nothing heavy by itself):

* :mod:`hikv.model.keys`        float scores and magnitudes -> unsigned sorter keys
* :mod:`hikv.model.sorter_ref`  the sorter's function (Stage I top-k, Stage II per-vector top-r)
* :mod:`hikv.model.layout`      KV memory layouts, byte ranges, burst-granular byte accounts
* :mod:`hikv.model.loader_ref`  the loader's AXI request generator and memory images
* :mod:`hikv.model.attention`   dense attention helpers
* :mod:`hikv.model.methods`     full KV, H2O, SnapKV, Quest, SparQ, Double Sparsity, HiKV
"""
