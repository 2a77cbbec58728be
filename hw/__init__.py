"""``hikv.hw``: the RTL of HiKV's blocks in Amaranth 0.5, with their geometry and timing
contracts (the contracts are standard library only, so the cost model can use them).

Modules:

* :mod:`~hikv.hw.blocks` -- registry of RTL blocks: name -> how to build it, its Verilog top
  and its instance count (``hikv verilog``, the area flow, the cost model); the regressions
  are in :mod:`hikv.rtl_tests.registry`.
* :mod:`~hikv.hw.verilog` -- reproducible, flattened Verilog from a component.
* :mod:`~hikv.hw.uops` -- width-safe arithmetic, comparison and selection helpers of every block.
* Sorter: :mod:`~hikv.hw.sorter` (top, ``Sorter``), :mod:`~hikv.hw.sorter_net` (bitonic
  networks, ``RowSorter``), :mod:`~hikv.hw.sorter_merge` (``MergeLevel``, ``Reducer``),
  :mod:`~hikv.hw.sorter_compact` (``Compactor``), :mod:`~hikv.hw.sorter_queue` (``RowQueue``,
  also the loader's queues), :mod:`~hikv.hw.sorter_timing` (sizes and cycle formulas).
* Loader: :mod:`~hikv.hw.loader` (top, ``KVLoader``), :mod:`~hikv.hw.loader_ports` (layouts and
  signatures), :mod:`~hikv.hw.loader_addr` (``AddressGen``), :mod:`~hikv.hw.loader_coalesce`
  (``Coalescer``), :mod:`~hikv.hw.loader_pack` (``Packer``), :mod:`~hikv.hw.loader_timing`
  (geometry and timing contract).
* :mod:`~hikv.hw.sorter_loader` -- the sorter's Stage I chained into the loader.
* Scoring unit: :mod:`~hikv.hw.scorer` (``Scorer``: b-bit key dot products -> sorter keys),
  :mod:`~hikv.hw.scorer_timing` (cycle contract), :mod:`~hikv.hw.scorer_sorter` (chained into
  the sorter's Stage I).
* :mod:`~hikv.hw.baseline_pe` -- the baseline accelerator's processing-element units (area).
* :mod:`~hikv.hw.formal` -- formal property harnesses of the sorter, loader and scoring unit
  and their mutants (``hikv prove``).

Each block's bit-exact reference is in :mod:`hikv.model.refs` (``sorter``, ``loader``,
``lowbit``, ``baseline_pe``), the only package above the ground (:mod:`hikv.params`) this one
imports; docs/design.md "Where things live" maps block -> reference -> timing -> closed form ->
tests. Modules are imported on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {m: () for m in (
    "blocks", "verilog", "uops", "sorter", "sorter_net", "sorter_merge", "sorter_compact",
    "sorter_queue", "sorter_timing", "loader", "loader_ports", "loader_addr", "loader_coalesce",
    "loader_pack", "loader_timing", "sorter_loader", "scorer", "scorer_timing", "scorer_sorter",
    "baseline_pe", "formal")})
