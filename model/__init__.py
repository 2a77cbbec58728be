"""The PyTorch golden model: HiKV and its baselines written from the algorithm, bit-exact
references of the hardware blocks, byte accounting, and the accuracy study on real LMs. The RTL
and the cost model's closed forms are checked against it.

Subpackages, lowest first (a module imports only from its own layer and the layers below;
``tests/test_architecture.py`` checks it; :mod:`hikv.hw` sits between ``refs`` and
``methods``):

* :mod:`hikv.model.refs`      bit-exact references of the hardware blocks, keys, layouts and
  byte accounts (numpy, no torch; the cost model uses them too)
* :mod:`hikv.model.methods`   the golden KV caches: HiKV and its baselines, :func:`make_cache`
* :mod:`hikv.model.lm`        a Hugging Face LM whose attention runs through the caches, and the
  models and text it runs on
* :mod:`hikv.model.accuracy`  the accuracy study: experiments, iso-accuracy tables, the seed
  suites

Each subpackage lists its modules and names its public API (``__all__``); importing one costs
no more than its cheapest module (:mod:`hikv.lazy`): ``import hikv.model`` imports no torch.
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "refs": (), "methods": (), "lm": (), "accuracy": (),
})
