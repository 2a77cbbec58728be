"""A Hugging Face causal LM whose every attention layer runs through the golden model.

:func:`load_lm` loads a model (a fetched asset name, a GGUF file, or a Hugging Face model
folder, offline) and registers the attention function ``"hikv"`` with
``transformers.AttentionInterface``. Inside the model each attention call is then handed to the
sequences being run (:class:`Sequence`: one per-layer :class:`~hikv.model.methods.KVCache` of
one method each), so decoding uses each method's real KV policy step by step: tokens are evicted
or selected as decoding proceeds, exactly as the method's ``decode`` does it.

How the model is driven (batch 1 per sequence, no Hugging Face KV cache):

* :func:`prefill` runs the prompt once, with full causal attention (every method attends the
  whole prompt during prefill), and hands the same prompt attention statistics to each
  sequence's caches (:meth:`~hikv.model.methods.KVCache.adopt_prefill`), so several methods
  share one prompt pass. Returns the logits of the last prompt token.
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
dense layers and the prompt's attention (:func:`~hikv.model.attention.causal_prefill`, the
windowed layers' prefill) run on the device; the golden KV caches (their selection, eviction,
decode attention and byte accounts) always run on the CPU, where the golden model is defined:
q, k and v are handed to them on the CPU and their outputs go back to the device.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hikv.params import Config, MethodSpec, ModelShape, ParamError

from .attention import attend, causal_prefill, group_queries, ungroup
from .layout import ByteAccount
from .methods import KVCache, make_cache

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
    "reference_logits",
    "windowed_prefill",
    "resolve_device",
    "ATTN_NAME",
]

#: name under which the golden-model attention is registered with transformers
ATTN_NAME = "hikv"

_ACTIVE: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("hikv_lm_run",
                                                                       default=None)


# =========================================================================== model
@dataclass(frozen=True)
class LMShape:
    """What the golden model needs to know about a loaded LM."""

    name: str
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    scale: float
    windows: tuple[int | None, ...]   # per layer: sliding window, or None (global attention)

    @property
    def method_layers(self) -> tuple[int, ...]:
        """Layers whose KV cache the method manages (global attention)."""
        return tuple(i for i, w in enumerate(self.windows) if w is None)

    def model_shape(self) -> ModelShape:
        return ModelShape(name=self.name, layers=self.layers, q_heads=self.q_heads,
                          kv_heads=self.kv_heads, head_dim=self.head_dim, hidden=self.hidden,
                          intermediate=self.intermediate, vocab=self.vocab)


@dataclass
class LM:
    """A loaded model, its tokenizer and shape. ``source`` says where it came from; ``device``
    is where its dense layers run (the golden KV caches always run on the CPU)."""

    model: Any
    tokenizer: Any
    shape: LMShape
    source: str
    load_s: float = 0.0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    last_prefill: PrefillRecord | None = None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @property
    def prefix_ids(self) -> list[int]:
        """Special tokens the tokenizer puts before a text by default (Gemma: ``<bos>``;
        SmolLM2: none); every evaluated sequence starts with them."""
        with_special = list(self.tokenizer("a", add_special_tokens=True)["input_ids"])
        plain = self.encode("a")
        i = with_special.index(plain[0]) if plain and plain[0] in with_special else 0
        return with_special[:i]

    def decode(self, ids: Seq[int]) -> str:
        return self.tokenizer.decode(list(ids))


def resolve_model(source: str | os.PathLike, cache: Path | None = None
                  ) -> tuple[Path, str | None, str]:
    """``(folder, gguf file name or None, display name)`` for ``source``.

    ``source`` is an asset name of :mod:`hikv.model.assets` (fetched if absent), a ``.gguf``
    file, a folder holding exactly one ``.gguf`` file, or a Hugging Face model folder (with
    ``config.json``).
    """
    from . import assets

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

    AttentionInterface.register(ATTN_NAME, _attention)


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


# =========================================================================== local layers
def windowed_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                     window: int, chunk: int = 512) -> torch.Tensor:
    """Causal attention where query ``t`` sees keys ``t - window + 1 .. t`` ([Hq, N, d])."""
    hq, n, d = q.shape
    hkv = k.shape[0]
    g = hq // hkv
    out = torch.empty_like(q)
    qg = q.reshape(hkv, g, n, d)
    kp = torch.arange(n, device=q.device)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        lo = max(0, s - window + 1)
        logits = torch.matmul(qg[:, :, s:e], k[:, None, lo:e].transpose(-1, -2)) * scale
        qp = torch.arange(s, e, device=q.device)[:, None]
        ok = (kp[None, lo:e] <= qp) & (kp[None, lo:e] > qp - window)
        probs = torch.softmax(logits.masked_fill(~ok, float("-inf")).float(), -1)
        out.reshape(hkv, g, n, d)[:, :, s:e] = torch.matmul(probs.to(q.dtype), v[:, None, lo:e])
    return out


class WindowKV:
    """Sliding-window layer cache: the last ``window`` tokens (current one included), read
    whole. Not a KV-cache method; used on a model's local layers under every method."""

    def __init__(self, window: int, scale: float, q_heads: int, kv_heads: int) -> None:
        if window < 1:
            raise ParamError(f"window = {window} is out of range: allowed >= 1")
        self.window, self.scale = window, scale
        self.q_heads, self.kv_heads = q_heads, kv_heads
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def prefill(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = windowed_prefill(q, k, v, self.scale, self.window)
        self.adopt(k, v)
        return out

    def adopt(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k, self.v = k[:, -self.window:], v[:, -self.window:]

    def decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
               ) -> tuple[torch.Tensor, list[ByteAccount]]:
        if self.k is None:
            self.k, self.v = k, v
        else:
            assert self.v is not None
            self.k = torch.cat([self.k, k], 1)[:, -self.window:]
            self.v = torch.cat([self.v, v], 1)[:, -self.window:]
        out, _ = attend(group_queries(q, self.kv_heads), self.k, self.v, self.scale)
        return ungroup(out, self.q_heads), []


# =========================================================================== sequences
@dataclass
class Fidelity:
    """Per-layer attention-output error against full attention over every token, per step."""

    rel_err: list[list[float]] = field(default_factory=list)   # [step][method layer]
    cosine: list[list[float]] = field(default_factory=list)


class Sequence:
    """One sequence decoded under one method: a cache per layer and its per-step bytes.

    ``accounts[i]`` is the sum of the :class:`ByteAccount` of every method layer and KV head at
    decode step ``i`` (``tokens`` and ``resident`` summed likewise); divide by
    :attr:`units` for a per-(layer, KV head) mean. With ``fidelity`` a shadow copy of every
    method layer's full K and V is kept and each step's attention output is compared with full
    attention on the same inputs (relative L2 error and cosine, over all query heads).
    With ``capture`` (layer indices) the q, k, v of those layers are recorded.
    """

    def __init__(self, lm: LM, spec: MethodSpec, cfg: Config, *, fidelity: bool = False,
                 capture: Seq[int] = ()) -> None:
        s = lm.shape
        if cfg.layout.head_dim != s.head_dim:
            raise ParamError(f"cfg.layout.head_dim = {cfg.layout.head_dim} differs from the "
                             f"model's head dim {s.head_dim} (use lm_config)")
        self.spec = spec
        self.shape = s
        self.caches: list[KVCache | WindowKV] = []
        for w in s.windows:
            if w is None:
                self.caches.append(make_cache(spec, cfg, scale=s.scale, q_heads=s.q_heads,
                                              kv_heads=s.kv_heads))
            else:
                self.caches.append(WindowKV(w, s.scale, s.q_heads, s.kv_heads))
        self.accounts: list[ByteAccount] = []
        self._step_acc = ByteAccount()
        self.fidelity = Fidelity() if fidelity else None
        self._shadow: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._fid_row: tuple[list[float], list[float]] = ([], [])
        self.capture_layers = tuple(capture)
        self.captured: dict[int, dict[str, list[torch.Tensor]]] = {
            i: {"q": [], "k": [], "v": []} for i in self.capture_layers}
        self.pos = 0

    @property
    def units(self) -> int:
        """(layer, KV head) pairs whose bytes are counted."""
        return len(self.shape.method_layers) * self.shape.kv_heads

    @property
    def label(self) -> str:
        return self.spec.label

    # ------------------------------------------------------------------ per layer
    def _capture(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        if layer in self.captured:
            c = self.captured[layer]
            c["q"].append(q.detach().clone())
            c["k"].append(k.detach().clone())
            c["v"].append(v.detach().clone())

    def _decode_layer(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                      ) -> torch.Tensor:
        self._capture(layer, q, k, v)
        cache = self.caches[layer]
        out, accounts = cache.decode(q, k, v)
        for a in accounts:
            self._step_acc = self._step_acc + a
        if self.fidelity is not None and isinstance(cache, KVCache):
            ks, vs = self._shadow[layer]
            ks, vs = torch.cat([ks, k], 1), torch.cat([vs, v], 1)
            self._shadow[layer] = (ks, vs)
            ref, _ = attend(group_queries(q, self.shape.kv_heads), ks, vs, self.shape.scale)
            ref = ungroup(ref, self.shape.q_heads)
            diff = float(torch.linalg.vector_norm(out - ref))
            norm = float(torch.linalg.vector_norm(ref))
            self._fid_row[0].append(diff / max(norm, 1e-30))
            self._fid_row[1].append(float(torch.nn.functional.cosine_similarity(
                out.reshape(1, -1), ref.reshape(1, -1))))
        return out

    def _end_prefill(self) -> None:
        """Let the method see every layer once the prompt is in (KVCache.end_prefill)."""
        caches = [c for c in self.caches if isinstance(c, KVCache)]
        if caches:
            type(caches[0]).end_prefill(caches)

    def _end_step(self) -> None:
        self.accounts.append(self._step_acc)
        self._step_acc = ByteAccount()
        if self.fidelity is not None:
            self.fidelity.rel_err.append(self._fid_row[0])
            self.fidelity.cosine.append(self._fid_row[1])
            self._fid_row = ([], [])
        self.pos += 1

    def mean_account(self, skip: int = 0) -> dict[str, float]:
        """Mean bytes per decode step per (layer, KV head), steps ``skip:`` (all fields)."""
        acc = self.accounts[skip:]
        if not acc:
            return {}
        total = ByteAccount()
        for a in acc:
            total = total + a
        return {k: v / (len(acc) * self.units) for k, v in total.as_dict().items()}

    def captured_tensors(self, layer: int) -> dict[str, torch.Tensor]:
        """q [Hq, T, d], k and v [Hkv, T, d] of ``layer`` over prefill and decode so far."""
        c = self.captured[layer]
        return {n: torch.cat(c[n], 1) for n in ("q", "k", "v")}


# =========================================================================== the route
@dataclass
class PrefillRecord:
    """What one prompt pass handed to the caches, kept so that more sequences adopt the same
    prompt without running the model again (:func:`adopt_prefill`): the last token's logits
    and, per layer, q, k, v (CPU) and the prompt statistics (column sums and observation
    windows) for every window any method asked for."""

    tokens: int
    logits: torch.Tensor
    layers: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                            dict[int, tuple[torch.Tensor | None, torch.Tensor | None]]]] = \
        field(default_factory=dict)


def _needs(seqs: Seq[Sequence]) -> tuple[bool, frozenset[int]]:
    """Prompt statistics the method layers of ``seqs`` ask for: (column sums, windows)."""
    sums, wins = False, set()
    for s in seqs:
        for c in s.caches:
            if isinstance(c, KVCache):
                ws, w = c.prefill_stats
                sums |= ws
                wins.add(w)
    return sums, frozenset(wins)


class _Run:
    """What the attention function dispatches to during one model call."""

    def __init__(self, seqs: list[Sequence], mode: str,
                 record: PrefillRecord | None = None,
                 needs: tuple[bool, frozenset[int]] = (False, frozenset())) -> None:
        self.seqs, self.mode, self.record, self.needs = seqs, mode, record, needs

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scaling: float) -> torch.Tensor:
        if abs(scaling - self.seqs[0].shape.scale) > 1e-12 * max(1.0, abs(scaling)):
            raise ParamError(f"layer {layer} uses scale {scaling}, expected "
                             f"{self.seqs[0].shape.scale}")
        if self.mode == "prefill":
            if q.device.type == "cpu":
                return self._prefill(layer, q[0], k[0], v[0]).unsqueeze(0)
            with torch.device(q.device):     # the prompt's attention on the model's device
                return self._prefill(layer, q[0], k[0], v[0]).unsqueeze(0)
        dev = q.device
        q, k, v = q.cpu(), k.cpu(), v.cpu()      # the golden caches run on the CPU
        outs = [s._decode_layer(layer, q[b], k[b], v[b]) for b, s in enumerate(self.seqs)]
        return torch.stack(outs).to(dev)

    def _prefill(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                 ) -> torch.Tensor:
        caches = [s.caches[layer] for s in self.seqs]
        qc, kc, vc = q.cpu(), k.cpu(), v.cpu()
        for s in self.seqs:
            s._capture(layer, qc, kc, vc)
            if s.fidelity is not None and isinstance(s.caches[layer], KVCache):
                s._shadow[layer] = (kc, vc)
        if isinstance(caches[0], WindowKV):
            out = windowed_prefill(q, k, v, caches[0].scale, caches[0].window)
            for c in caches:
                assert isinstance(c, WindowKV)
                c.adopt(kc, vc)
            if self.record is not None:
                self.record.layers[layer] = (qc, kc, vc, {})
            return out
        want_sums = any(c.prefill_stats[0] for c in caches) or \
            self.needs[0]                                           # type: ignore[union-attr]
        windows = sorted({c.prefill_stats[1] for c in caches} |     # type: ignore[union-attr]
                         self.needs[1])
        if len(windows) > 1 and windows[0] == 0:
            windows = windows[1:]
        stats: dict[int, tuple[torch.Tensor | None, torch.Tensor | None]] = {}
        out = None
        for w in windows:
            o, sums, obs = causal_prefill(q, k, v, caches[0].scale,   # type: ignore[union-attr]
                                          col_sums=want_sums, window=w)
            out = o if out is None else out
            stats[w] = (None if sums is None else sums.cpu(), None if obs is None else obs.cpu())
        with torch.device("cpu") if q.device.type != "cpu" else contextlib.nullcontext():
            for c in caches:
                assert isinstance(c, KVCache)
                ws, w = c.prefill_stats
                sums, obs = stats[w] if w in stats else (stats[windows[0]][0], None)
                c.adopt_prefill(qc, kc, vc, sums if ws else None, obs if w > 0 else None)
        if self.record is not None:
            self.record.layers[layer] = (qc, kc, vc, stats)
        assert out is not None
        return out


def _attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: Any, scaling: float | None = None, dropout: float = 0.0,
               **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention function: [B, H, T, d] in, [B, T, Hq, d] out."""
    run = _ACTIVE.get()
    if run is None:
        raise RuntimeError("the 'hikv' attention runs only inside hikv.model.lm.prefill/step")
    if kwargs.get("s_aux") is not None:
        raise ParamError("attention sinks (s_aux) are not supported by the golden model")
    scale = float(module.scaling if scaling is None else scaling)
    out = run(module.layer_idx, query, key, value, scale)
    return out.transpose(1, 2).contiguous(), None


def _forward(lm: LM, ids: torch.Tensor, start: int) -> torch.Tensor:
    b, t = ids.shape
    pos = torch.arange(start, start + t).expand(b, t)
    with torch.inference_mode():
        out = lm.model(input_ids=ids.to(lm.device), position_ids=pos.to(lm.device),
                       use_cache=False, logits_to_keep=1)
    return out.logits[:, -1].float().cpu()


def prefill(lm: LM, seqs: Seq[Sequence], ids: Seq[int], *,
            record_for: Seq[Sequence] | None = None) -> torch.Tensor:
    """Run the prompt ``ids`` once for every sequence in ``seqs`` (fresh); logits [V] of its
    last token (full attention, the same for every method).

    With ``record_for`` (sequences that will adopt the same prompt later, e.g. the next
    batches of methods), the pass also computes the prompt statistics those need and keeps
    everything in ``lm.last_prefill`` (:class:`PrefillRecord`) for :func:`adopt_prefill`.
    """
    seqs = list(seqs)
    if not seqs or any(s.pos for s in seqs):
        raise ParamError("prefill needs one or more fresh sequences")
    if not len(ids):
        raise ParamError("prefill needs at least one token")
    rec = None
    needs: tuple[bool, frozenset[int]] = (False, frozenset())
    if record_for is not None:
        rec = PrefillRecord(tokens=len(ids), logits=torch.zeros(0))
        needs = _needs(list(record_for))
    token = _ACTIVE.set(_Run(seqs, "prefill", rec, needs))
    try:
        logits = _forward(lm, torch.tensor([list(ids)]), 0)[0]
    finally:
        _ACTIVE.reset(token)
    for s in seqs:
        s.pos = len(ids)
        s._end_prefill()
    if rec is not None:
        rec.logits = logits
    lm.last_prefill = rec
    return logits


def adopt_prefill(lm: LM, seqs: Seq[Sequence], record: PrefillRecord) -> torch.Tensor:
    """Give fresh ``seqs`` the prompt of ``record`` (a :func:`prefill` with ``record_for``
    covering them) without running the model: each cache adopts the recorded q, k, v and
    statistics exactly as :func:`prefill` would hand them (the same tensors, so the same
    state). Returns the prompt's last logits. Not for sequences with ``fidelity`` or
    ``capture`` (they need the pass itself)."""
    seqs = list(seqs)
    if not seqs or any(s.pos for s in seqs):
        raise ParamError("adopt_prefill needs one or more fresh sequences")
    if any(s.fidelity is not None or s.capture_layers for s in seqs):
        raise ParamError("adopt_prefill: sequences with fidelity or capture need prefill")
    for layer, (q, k, v, stats) in record.layers.items():
        for s in seqs:
            c = s.caches[layer]
            if isinstance(c, WindowKV):
                c.adopt(k, v)
                continue
            ws, w = c.prefill_stats
            if (w > 0 and w not in stats) or (ws and not any(
                    x[0] is not None for x in stats.values())):
                raise ParamError(f"adopt_prefill: the record lacks the statistics "
                                 f"(sums {ws}, window {w}) of {s.label}: pass it in "
                                 "prefill's record_for")
            sums, obs = stats[w] if w in stats else (next(iter(stats.values()))[0], None)
            c.adopt_prefill(q, k, v, sums if ws else None, obs if w > 0 else None)
    for s in seqs:
        s.pos = record.tokens
        s._end_prefill()
    return record.logits


def step(lm: LM, seqs: Seq[Sequence], tokens: Seq[int]) -> torch.Tensor:
    """Feed ``tokens[b]`` to ``seqs[b]`` (all at the same position); logits [B, V]."""
    seqs = list(seqs)
    if len(tokens) != len(seqs):
        raise ParamError(f"{len(tokens)} tokens for {len(seqs)} sequences")
    pos = {s.pos for s in seqs}
    if len(pos) != 1:
        raise ParamError(f"sequences stepped together must be at one position, not {pos}")
    token = _ACTIVE.set(_Run(seqs, "decode"))
    try:
        logits = _forward(lm, torch.tensor([[int(t)] for t in tokens]), pos.pop())
    finally:
        _ACTIVE.reset(token)
    for s in seqs:
        s._end_step()
    return logits


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
                parts.append(_logits_of(lm, h[idx.to(h.device)]).cpu())
    finally:
        lm.model.set_attn_implementation(ATTN_NAME)
    return torch.cat(parts) if parts else torch.zeros(0, lm.shape.vocab)


def _logits_of(lm: LM, h: torch.Tensor) -> torch.Tensor:
    logits = lm.model.lm_head(h).float()
    cap = getattr(lm.model.config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits
