"""A Hugging Face causal LM whose every attention layer runs through the golden model.

:func:`load_lm` loads a model (a fetched asset name, a GGUF file, or a Hugging Face model
folder, offline) and registers the attention function ``"hikv"`` with
``transformers.AttentionInterface``. Inside the model each attention call is then handed to the
sequences being run (:class:`Sequence`: one per-layer
:class:`~hikv.model.methods.registry.KVCache` of one method each), so decoding uses each
method's real KV policy step by step: tokens are evicted or selected as decoding proceeds,
exactly as the method's ``decode`` does it.

How the model is driven (batch 1 per sequence, no Hugging Face KV cache; the sequences and the
route live in :mod:`hikv.model.lm.route`, whose names this module re-exports):

* :func:`prefill` runs the prompt once, with full causal attention (every method attends the
  whole prompt during prefill), and hands the same prompt attention statistics to each
  sequence's caches (:meth:`~hikv.model.methods.registry.KVCache.adopt_prefill`), so several methods
  share one prompt pass. Returns the logits of the last prompt token. With ``prefix`` the same
  pass also forks the state of the prompt's first tokens (``lm.last_prefix``), so that a
  protocol whose prompt is a prefix of another's (the follow-up protocol's context) starts
  from it through :func:`adopt_prefill` without a second pass.
* :func:`step` feeds one token to each of several sequences, batched through the model's dense
  layers; attention runs per sequence through its own caches. Returns next-token logits and
  records each sequence's byte accounts.

Layers with a sliding window (Gemma-3: 15 of 18 layers, window 512) are not where KV-cache
methods act: they run a plain windowed cache (:class:`WindowKV`, the model's own semantics:
the last ``window`` tokens, the current one included) under every method, and their bytes are
not counted. Methods act on the global layers. Queries and keys arrive with RoPE (and, for
Gemma, q/k norms) applied; the softmax scale is the attention module's own ``scaling``
(``query_pre_attn_scalar ** -0.5`` for Gemma-3).

Computation is float32 (GGUF weights dequantised); bytes are counted by each cache's
:class:`~hikv.params.KVLayout` (fp16 elements by default), independent of compute dtype.

Devices (``load_lm(device=...)``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``): the model's
dense layers and the prompt's attention (:func:`~hikv.model.methods.attention.causal_prefill`, the
windowed layers' prefill) run on the device; the golden KV caches (their selection, eviction,
decode attention and byte accounts) always run on the CPU, where the golden model is defined:
q, k and v are handed to them on the CPU and their outputs go back to the device.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence as Seq
from pathlib import Path
from typing import Any

import torch

from hikv.model.lm.route import (
    ATTN_NAME,
    LM,
    Fidelity,
    LMShape,
    PrefillRecord,
    Sequence,
    WindowKV,
    adopt_prefill,
    greedy,
    hikv_attention,
    logits_of,
    prefill,
    step,
    windowed_prefill,
)
from hikv.params import Config, ParamError

__all__ = [
    "LMShape",
    "LM",
    "load_lm",
    "wrap_model",
    "resolve_model",
    "lm_config",
    "WindowKV",
    "Sequence",
    "prefill",
    "adopt_prefill",
    "PrefillRecord",
    "step",
    "greedy",
    "reference_logits",
    "windowed_prefill",
    "resolve_device",
    "ATTN_NAME",
    "Fidelity",
]


def resolve_model(source: str | os.PathLike, cache: Path | None = None
                  ) -> tuple[Path, str | None, str]:
    """``(folder, gguf file name or None, display name)`` for ``source``.

    ``source`` is an asset name of :mod:`hikv.model.lm.assets` (fetched if absent), a ``.gguf``
    file, a folder holding exactly one ``.gguf`` file, or a Hugging Face model folder (with
    ``config.json``).
    """
    from hikv.model.lm import assets
    s = str(source)
    if s in assets.ASSETS:
        path = assets.asset_path(s, cache)
        if not assets.is_fetched(s, cache):
            assets.fetch(s, cache)
        return path.parent, path.name, s
    p = Path(s).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return p.parent, p.name, p.stem
    if p.is_dir():
        if (p / "config.json").is_file():
            return p, None, p.name
        ggufs = sorted(p.glob("*.gguf"))
        if len(ggufs) == 1:
            return p, ggufs[0].name, ggufs[0].stem
        if len(ggufs) > 1:
            raise ParamError(f"model folder {p} holds {len(ggufs)} .gguf files; pass one file")
    raise ParamError(f"model = {s!r} is neither a known asset ({sorted(assets.ASSETS)}), a "
                     ".gguf file, nor a folder with config.json or one .gguf file")


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, hikv_attention)


def _find_attention_modules(model: Any) -> list[Any]:
    mods = [m for m in model.modules()
            if hasattr(m, "layer_idx") and hasattr(m, "scaling") and hasattr(m, "q_proj")]
    mods.sort(key=lambda m: m.layer_idx)
    return mods


def resolve_device(device: str | torch.device = "cpu") -> torch.device:
    """``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when available, else CPU) as a
    :class:`torch.device`; asking for CUDA where there is none is a :class:`ParamError`."""
    d = str(device)
    if d == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(d)
    except (RuntimeError, TypeError):
        raise ParamError(f"device = {d!r} is not one of 'cpu', 'cuda', 'cuda:N', 'auto'"
                         ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ParamError(f"device = {d!r}: CUDA is not available here (torch "
                             f"{torch.__version__}); use 'cpu' or 'auto'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ParamError(f"device = {d!r} is out of range: allowed cuda:0 .. "
                             f"cuda:{torch.cuda.device_count() - 1}")
    elif dev.type != "cpu":
        raise ParamError(f"device = {d!r} is not one of 'cpu', 'cuda', 'cuda:N', 'auto'")
    return dev


def load_lm(source: str | os.PathLike, *, cache: Path | None = None,
            dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> LM:
    """Load ``source`` (see :func:`resolve_model`) offline with its attention routed here;
    its dense layers on ``device`` (:func:`resolve_device`)."""
    import time

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    dev = resolve_device(device)
    folder, gguf, name = resolve_model(source, cache)
    t0 = time.perf_counter()
    kw: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
    tok = AutoTokenizer.from_pretrained(folder, **kw)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kw)
    if dev.type != "cpu":
        model = model.to(dev)
    lm = wrap_model(model, tok, name=name, source=str(folder / (gguf or "")))
    lm.device = dev
    lm.load_s = time.perf_counter() - t0
    return lm


def wrap_model(model: Any, tokenizer: Any, *, name: str, source: str = "") -> LM:
    """Route an already built transformers causal LM through the golden model (sets its
    attention implementation to ``"hikv"``) and describe its shape."""
    model.eval()
    _register()
    model.set_attn_implementation(ATTN_NAME)
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") \
        else model.config
    if getattr(cfg, "attn_logit_softcapping", None) is not None:
        raise ParamError("attention logit soft-capping is not supported by the golden model")
    mods = _find_attention_modules(model)
    if len(mods) != cfg.num_hidden_layers:
        raise ParamError(f"found {len(mods)} attention modules with layer_idx/scaling/q_proj, "
                         f"expected {cfg.num_hidden_layers}: unsupported architecture")
    scales = {float(m.scaling) for m in mods}
    if len(scales) != 1:
        raise ParamError(f"layers use different attention scales {sorted(scales)}")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    shape = LMShape(
        name=name, layers=cfg.num_hidden_layers, q_heads=cfg.num_attention_heads,
        kv_heads=cfg.num_key_value_heads, head_dim=head_dim, hidden=cfg.hidden_size,
        intermediate=getattr(cfg, "intermediate_size", 4 * cfg.hidden_size),
        vocab=cfg.vocab_size, scale=scales.pop(),
        windows=tuple(getattr(m, "sliding_window", None) or None for m in mods))
    dev = next(iter(model.parameters())).device
    return LM(model=model, tokenizer=tokenizer, shape=shape, source=source, device=dev)


def lm_config(base: Config, shape: LMShape) -> Config:
    """``base`` adapted to the model: head dim, model shape, sorter vector length; the policy
    is kept when it fits the head dim, otherwise Stage II is dropped from it (methods take their
    policy from their own :class:`~hikv.params.MethodSpec`)."""
    d = shape.head_dim
    layout = dataclasses.replace(base.layout, head_dim=d)
    sorter = base.sorter
    if sorter.max_vec < d:
        sorter = dataclasses.replace(sorter, max_vec=d)
    policy = base.policy
    try:
        policy.check_head_dim(d)
    except ParamError:
        from hikv.params import Stage2Rule

        policy = dataclasses.replace(policy, k_rule=Stage2Rule(), v_rule=Stage2Rule())
    return dataclasses.replace(base, layout=layout, sorter=sorter, policy=policy,
                               model=shape.model_shape())


def reference_logits(lm: LM, ids: Seq[int], positions: Seq[int] | None = None,
                     implementation: str = "eager", chunk: int = 256) -> torch.Tensor:
    """The model's own logits (its own attention, ``implementation``) at ``positions``
    (default all) of one forward pass over ``ids``: [len(positions), V]."""
    n = len(ids)
    pos = list(range(n)) if positions is None else list(positions)
    lm.model.set_attn_implementation(implementation)
    try:
        with torch.inference_mode():
            h = lm.model.model(input_ids=torch.tensor([list(ids)], device=lm.device),
                               use_cache=False).last_hidden_state[0]
            parts = []
            for s in range(0, len(pos), chunk):
                idx = torch.tensor(pos[s: s + chunk])
                parts.append(logits_of(lm, h[idx.to(h.device)]).cpu())
    finally:
        lm.model.set_attn_implementation(ATTN_NAME)
    return torch.cat(parts) if parts else torch.zeros(0, lm.shape.vocab)
