"""How the model is driven through the golden model: sequences, prefill, adoption, step.

The route half of :mod:`hikv.model.lm.runner` (loading is there; every name here but
:func:`hikv_attention` and :func:`logits_of` is re-exported by it): :class:`LM` (a loaded
model, its tokenizer and :class:`LMShape`), :class:`Sequence` (one method's caches, one per
layer, and its byte accounts), :class:`WindowKV` for sliding-window layers, :func:`prefill`
(one prompt pass shared by several sequences, optionally recording what more sequences need:
:class:`PrefillRecord`, and, with ``prefix``, forking the record of the prompt's first tokens
for sequences that start from them), :func:`adopt_prefill` (a recorded prompt without running
the model), :func:`step` and :func:`greedy` (greedy continuations of prefilled sequences).
The attention function registered with ``transformers`` under :data:`ATTN_NAME`
(:func:`hikv_attention`) dispatches to the :class:`_Run` of the model call in progress.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Any

import torch

from hikv.model.methods.attention import attend, group_queries, prefill_pass, ungroup
from hikv.model.methods.registry import KVCache, make_cache
from hikv.model.refs.layout import ByteAccount
from hikv.params import Config, MethodSpec, ModelShape, ParamError

__all__ = ["ATTN_NAME", "LMShape", "LM", "WindowKV", "windowed_prefill", "Fidelity", "Sequence",
           "PrefillRecord", "prefill", "adopt_prefill", "step", "greedy", "hikv_attention",
           "logits_of"]

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
    last_prefix: PrefillRecord | None = None

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
Stats = dict[int, tuple[torch.Tensor | None, torch.Tensor | None]]


@dataclass
class PrefillRecord:
    """What one prompt pass handed to the caches, kept so that more sequences adopt the same
    prompt without running the model again (:func:`adopt_prefill`): the last token's logits
    and, per layer, q, k, v (CPU) and the prompt statistics (column sums and observation
    windows) for every window any method asked for."""

    tokens: int
    logits: torch.Tensor
    layers: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor, Stats]] = \
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


def _windows(wins: set[int] | frozenset[int]) -> list[int]:
    """The windows one pass computes: 0 (none) only where no method asks for a window."""
    ws = sorted(wins)
    return ws[1:] if len(ws) > 1 and ws[0] == 0 else ws


class _Run:
    """What the attention function dispatches to during one model call. With ``fork`` (a
    :class:`PrefillRecord` of the prompt's first ``fork.tokens`` tokens and the statistics
    its sequences need) each layer's pass also records that prefix."""

    def __init__(self, seqs: list[Sequence], mode: str,
                 record: PrefillRecord | None = None,
                 needs: tuple[bool, frozenset[int]] = (False, frozenset()),
                 fork: PrefillRecord | None = None,
                 fork_needs: tuple[bool, frozenset[int]] = (False, frozenset())) -> None:
        self.seqs, self.mode, self.record, self.needs = seqs, mode, record, needs
        self.fork, self.fork_needs = fork, fork_needs

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
        fk = self.fork
        pq = None if fk is None else (qc[:, :fk.tokens], kc[:, :fk.tokens], vc[:, :fk.tokens])
        if isinstance(caches[0], WindowKV):
            out = windowed_prefill(q, k, v, caches[0].scale, caches[0].window)
            for c in caches:
                assert isinstance(c, WindowKV)
                c.adopt(kc, vc)
            if self.record is not None:
                self.record.layers[layer] = (qc, kc, vc, {})
            if fk is not None and pq is not None:
                fk.layers[layer] = (*pq, {})
            return out
        want_sums = any(c.prefill_stats[0] for c in caches) or \
            self.needs[0]                                           # type: ignore[union-attr]
        windows = _windows({c.prefill_stats[1] for c in caches} |   # type: ignore[union-attr]
                           self.needs[1])
        fwins = _windows(self.fork_needs[1] or {0})
        out, sums, obs, pre = prefill_pass(
            q, k, v, caches[0].scale, col_sums=want_sums, windows=windows,  # type: ignore
            prefix=0 if fk is None else fk.tokens, prefix_col_sums=self.fork_needs[0],
            prefix_windows=fwins)
        sums = None if sums is None else sums.cpu()
        stats: Stats = {w: (sums, obs[w].cpu() if w in obs else None) for w in windows}
        with torch.device("cpu") if q.device.type != "cpu" else contextlib.nullcontext():
            for c in caches:
                assert isinstance(c, KVCache)
                ws, w = c.prefill_stats
                s_, o_ = stats[w] if w in stats else (stats[windows[0]][0], None)
                c.adopt_prefill(qc, kc, vc, s_ if ws else None, o_ if w > 0 else None)
        if self.record is not None:
            self.record.layers[layer] = (qc, kc, vc, stats)
        if fk is not None and pre is not None and pq is not None:
            ps = None if pre.sums is None else pre.sums.cpu()
            fk.layers[layer] = (*pq, {w: (ps, pre.obs[w].cpu() if w in pre.obs else None)
                                      for w in fwins})
        return out


def hikv_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: Any, scaling: float | None = None, dropout: float = 0.0,
                   **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The transformers attention function registered as :data:`ATTN_NAME`: [B, H, T, d] in,
    [B, T, Hq, d] out, computed by the sequences of the :func:`prefill` or :func:`step` in
    progress."""
    run = _ACTIVE.get()
    if run is None:
        raise RuntimeError("the 'hikv' attention runs only inside "
                           "hikv.model.lm.runner.prefill/step")
    if kwargs.get("s_aux") is not None:
        raise ParamError("attention sinks (s_aux) are not supported by the golden model")
    scale = float(module.scaling if scaling is None else scaling)
    out = run(module.layer_idx, query, key, value, scale)
    return out.transpose(1, 2).contiguous(), None


def _forward(lm: LM, ids: torch.Tensor, start: int, row: int | None = None
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Last-token logits [B, V] of ``ids`` from position ``start``; with ``row``, also the
    logits [V] of position ``row`` of sequence 0 (from the final hidden state, one row through
    the head exactly as a pass ending at ``row`` computes its last logits)."""
    b, t = ids.shape
    pos = torch.arange(start, start + t).expand(b, t)
    hidden: list[torch.Tensor] = []
    hook = None
    if row is not None:
        hook = lm.model.model.register_forward_hook(
            lambda _m, _a, o: hidden.append(o.last_hidden_state[0, row:row + 1].clone()))
    try:
        with torch.inference_mode():
            out = lm.model(input_ids=ids.to(lm.device), position_ids=pos.to(lm.device),
                           use_cache=False, logits_to_keep=1)
            extra = None if row is None else logits_of(lm, hidden[0])[0].cpu()
    finally:
        if hook is not None:
            hook.remove()
    return out.logits[:, -1].float().cpu(), extra


def logits_of(lm: LM, h: torch.Tensor) -> torch.Tensor:
    """The model's head on final hidden states ``h`` (soft-capped where the model caps)."""
    logits = lm.model.lm_head(h).float()
    cap = getattr(lm.model.config, "final_logit_softcapping", None)
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


def prefill(lm: LM, seqs: Seq[Sequence], ids: Seq[int], *,
            record_for: Seq[Sequence] | None = None, prefix: int = 0,
            prefix_for: Seq[Sequence] = ()) -> torch.Tensor:
    """Run the prompt ``ids`` once for every sequence in ``seqs`` (fresh); logits [V] of its
    last token (full attention, the same for every method).

    With ``record_for`` (sequences that will adopt the same prompt later, e.g. the next
    batches of methods), the pass also computes the prompt statistics those need and keeps
    everything in ``lm.last_prefill`` (:class:`PrefillRecord`) for :func:`adopt_prefill`.

    With ``prefix`` in ``[1, len(ids) - 1]`` the pass also forks the prompt ``ids[:prefix]``
    for the sequences ``prefix_for`` (e.g. the follow-up protocol, whose prompt is the context
    only): causal attention makes the first ``prefix`` tokens' q, k, v, statistics and logits
    those of a pass over ``ids[:prefix]`` alone, so ``lm.last_prefix`` (a
    :class:`PrefillRecord`) gives them the state :func:`prefill` of the prefix would give,
    through :func:`adopt_prefill`, without running the model over the prefix again.
    """
    seqs = list(seqs)
    if not seqs or any(s.pos for s in seqs):
        raise ParamError("prefill needs one or more fresh sequences")
    if not len(ids):
        raise ParamError("prefill needs at least one token")
    if prefix and not 0 < prefix < len(ids):
        raise ParamError(f"prefix = {prefix} is out of range: allowed [1, {len(ids) - 1}] "
                         f"for a prompt of {len(ids)} tokens")
    rec = None
    needs: tuple[bool, frozenset[int]] = (False, frozenset())
    if record_for is not None:
        rec = PrefillRecord(tokens=len(ids), logits=torch.zeros(0))
        needs = _needs(list(record_for))
    fork = PrefillRecord(tokens=prefix, logits=torch.zeros(0)) if prefix else None
    token = _ACTIVE.set(_Run(seqs, "prefill", rec, needs, fork, _needs(list(prefix_for))))
    try:
        last, first = _forward(lm, torch.tensor([list(ids)]), 0, prefix - 1 if prefix else None)
        logits = last[0]
    finally:
        _ACTIVE.reset(token)
    if fork is not None:
        assert first is not None
        fork.logits = first
    lm.last_prefix = fork
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
        logits = _forward(lm, torch.tensor([[int(t)] for t in tokens]), pos.pop())[0]
    finally:
        _ACTIVE.reset(token)
    for s in seqs:
        s._end_step()
    return logits


def greedy(lm: LM, seqs: Seq[Sequence], first: torch.Tensor, feed: Seq[int], max_new: int,
           stop: Callable[[list[int]], bool]) -> list[list[int]]:
    """Greedy continuations of prefilled ``seqs`` (``first``: their prompt's last logits
    [V]): ``feed`` through decode (teacher-forced, all side by side), then up to ``max_new``
    tokens each; a sequence stops once ``stop(its tokens so far)`` holds."""
    seqs = list(seqs)
    outs: list[list[int]] = [[] for _ in seqs]
    logits = first[None].expand(len(seqs), -1)
    for tok in feed:
        logits = step(lm, seqs, [tok] * len(seqs))
    active = list(range(len(seqs)))
    for t in range(max_new):
        nxt = logits.argmax(-1).tolist()
        for j, b in enumerate(active):
            outs[b].append(int(nxt[j]))
        active = [b for b in active if not stop(outs[b])]
        if not active or t == max_new - 1:
            break
        logits = step(lm, [seqs[b] for b in active], [outs[b][-1] for b in active])
    return outs
