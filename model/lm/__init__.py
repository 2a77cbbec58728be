"""Real language models through the golden model: a Hugging Face causal LM whose attention runs
through the KV caches of :mod:`hikv.model.methods`, and the models and text it runs on.

* :mod:`~hikv.model.lm.runner`  loading (:func:`load_lm`) and the model's own reference logits;
  its names (with the route's) are this package's first ones
* :mod:`~hikv.model.lm.route`   how the model is driven: sequences, prefill (shared, recorded,
  forked at a prefix), adoption of a recorded prompt, decode steps
* :mod:`~hikv.model.lm.assets`  real models and text, fetched from PyPI and verified

Names are imported from their module on first use (:mod:`hikv.lazy`).
"""

from hikv.lazy import lazy_api

__all__, __getattr__, __dir__ = lazy_api(__name__, {
    "runner": ("load_lm", "wrap_model", "resolve_model", "resolve_device", "lm_config",
               "reference_logits"),
    "route": ("LM", "LMShape", "Sequence", "WindowKV", "Fidelity", "PrefillRecord", "ATTN_NAME",
              "prefill", "adopt_prefill", "step", "greedy", "windowed_prefill"),
    "assets": ("ASSETS", "Asset", "AssetError"),
})
