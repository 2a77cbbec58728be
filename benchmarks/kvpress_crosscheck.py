"""Cross-check the golden model's KV-cache methods against NVIDIA's kvpress (a benchmark, not CI).

kvpress pins ``transformers < 5.3`` while the kit runs a newer one, so this script builds its own
virtual environment (``<out>/kvpress-venv``: ``kvpress``, ``transformers<5.3`` and
``torch==2.13.0``, the CPU wheel the kit already uses) and runs kvpress there in a subprocess
(this same file, ``--worker``); the two sides exchange tensors through ``.pt`` files.

What it measures, on SmolLM2-135M (the kit's ``smollm2-135m`` asset, dequantised once and saved
as a Hugging Face folder so both sides run identical float32 weights) and the Paul Graham
essays windows of the accuracy harness (:func:`hikv.model.accuracy.experiments.text_windows`):

* **full KV**: the logits of the prompt's last token and of ``--decode`` teacher-forced decode
  steps, ours (every attention through the golden model) against the plain model in kvpress's
  environment: max ``|diff|`` (target ``<= 1e-4``);
* **kept tokens**: for each method kvpress also implements, the positions each (layer, KV head)
  keeps after prefill at matched settings (:func:`pairs`), ours against kvpress's (recovered
  from the compressed cache, or from the masked indices of AdaKV-style presses): mean Jaccard
  over (window, layer, KV head), and the tie-aware mean (:func:`tie_aware`: a set that differs
  only among tokens of exactly equal score in our golden model's scores counts as agreement;
  the report says how many sets and tokens that covers). Rows marked ``matched`` must reach
  ``>= 0.99`` tie-aware.

The script is a gate: it exits 1 when a matched row misses its target (:func:`exit_status`),
0 when every matched row meets it. Methods the kit lacks are skipped with a line saying so.
PyramidKV against kvpress's own layer budgets is not matched: kvpress's ``PyramidKVPress``
(:func:`kvpress_pyramid_budgets`) falls back to one uniform budget ``B`` in every layer when its
lowest layer budget ``B / beta`` is below the observation window (``B < beta w`` = 640 at
``w = 32``), so at the budgets checked here that row compares our pyramid with uniform SnapKV;
the row with our layer budgets checks the scores and the per-layer selection. Usage::

    python benchmarks/kvpress_crosscheck.py --out /tmp/kvp            # builds the venv once
    python benchmarks/kvpress_crosscheck.py --out /tmp/kvp --tokens 1024 --budget 256

Writes ``<out>/crosscheck.json`` and ``<out>/crosscheck.md`` (the table of docs/accuracy.md,
"Cross-check against kvpress"). Only the standard library is imported at module level: the
worker runs where ``hikv`` is not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: what the kvpress environment installs (kvpress's own metadata requires transformers < 5.3)
KVPRESS_REQUIREMENTS = ("kvpress==0.5.5", "transformers>=4.56,<5.3", "torch==2.13.0")

#: a row meets the agreement targets when these hold
JACCARD_TARGET = 0.99
LOGITS_TARGET = 1e-4


# =========================================================================== pure parts
def jaccard(a: Sequence[int], b: Sequence[int]) -> float:
    """``|A & B| / |A | B|`` of two index sets (1.0 when both are empty)."""
    sa, sb = {int(x) for x in a}, {int(x) for x in b}
    union = sa | sb
    return 1.0 if not union else len(sa & sb) / len(union)


def mean_jaccard(ours: Mapping[Any, Sequence[int]], theirs: Mapping[Any, Sequence[int]]
                 ) -> tuple[float, float]:
    """Mean and minimum Jaccard over the keys (e.g. (window, layer, head)) of ``ours``; both
    mappings must have the same keys."""
    if set(ours) != set(theirs):
        missing = sorted(set(ours) ^ set(theirs), key=str)[:4]
        raise ValueError(f"kept sets cover different (window, layer, head) keys: {missing}")
    if not ours:
        raise ValueError("no kept sets to compare")
    vals = [jaccard(ours[k], theirs[k]) for k in ours]
    return sum(vals) / len(vals), min(vals)


def tie_aware(ours: Mapping[Any, Sequence[int]], theirs: Mapping[Any, Sequence[int]],
              scores: Mapping[Any, Sequence[float]] | None = None) -> dict[str, Any]:
    """Agreement of two kept-set mappings (same keys) with ties counted: a set whose symmetric
    difference holds only tokens of one exactly equal score in ``scores`` (our golden model's
    selection scores of that key, indexed by position) and whose sizes match is an agreement
    (1.0): both sides kept a top-k, broken differently inside a plateau of equal scores.
    Returns the plain ``jaccard_mean`` / ``jaccard_min``, the tie-aware ``tie_mean`` /
    ``tie_min``, ``sets``, ``sets_differing``, ``sets_tied`` (differing by ties only) and
    ``tokens_tied`` (our-only tokens in those sets); keys without scores are never tied."""
    mean, low = mean_jaccard(ours, theirs)
    scores = scores or {}
    vals, differing, tied, tokens = [], 0, 0, 0
    for k in ours:
        a, b = {int(x) for x in ours[k]}, {int(x) for x in theirs[k]}
        j = jaccard(a, b)
        if a != b:
            differing += 1
            s = scores.get(k)
            diff = a ^ b
            if (s is not None and len(a) == len(b) and max(diff) < len(s)
                    and len({float(s[i]) for i in diff}) == 1):
                tied += 1
                tokens += len(a - b)
                j = 1.0
        vals.append(j)
    return {"jaccard_mean": mean, "jaccard_min": low, "tie_mean": sum(vals) / len(vals),
            "tie_min": min(vals), "sets": len(vals), "sets_differing": differing,
            "sets_tied": tied, "tokens_tied": tokens}


def exit_status(report: Mapping[str, Any]) -> int:
    """1 when a matched row of ``report`` missed its target, else 0 (the gate)."""
    return 1 if any(r.get("passed") is False for r in report["rows"]) else 0


def kvpress_pyramid_budgets(budget: int, tokens: int, layers: int, window: int = 32,
                            beta: int = 20) -> list[int]:
    """The kept tokens per layer of kvpress's ``PyramidKVPress`` (``get_layer_budget``,
    restated) at our ``compression_ratio(budget, tokens)``: the pyramid of PyramidKV's code
    between ``(B - w) / beta``-ish and ``2 (B - w)``, or, when its condition ``N >= max >= min >=
    window`` fails (its lowest budget ``B / beta`` below the window: ``B < beta window``), the
    uniform ``round(N (1 - ratio))`` = ``B`` in every layer."""
    cr = compression_ratio(budget, tokens)
    cap = window + tokens * (1 - cr)
    lo = (cap - window) / beta
    hi = (cap - window) * 2 - lo
    if hi >= tokens - window:
        hi = tokens - window
        lo = (cap - window) * 2 - hi
    if not tokens >= hi >= lo >= window:
        return [round(tokens * (1 - cr))] * layers
    step = (hi - lo) / max(1, layers - 1)
    return [round(hi - i * step) for i in range(layers)]


def kvpress_n_kept(k_len: int, compression_ratio: float) -> int:
    """Tokens a kvpress ``ScorerPress`` keeps: ``kvpress.utils.compute_n_kept`` (0.5.5),
    ``max(1, int(k_len * (1 - ratio)))``; the worker re-checks it with kvpress's own."""
    if compression_ratio >= 1.0:
        return 0
    return max(1, int(k_len * (1 - compression_ratio)))


def compression_ratio(budget: int, tokens: int) -> float:
    """The kvpress ``compression_ratio`` that keeps exactly ``budget`` of ``tokens`` tokens.

    ``(tokens - budget - 0.5) / tokens``: the half token keeps ``int()`` away from the
    rounding edge, so :func:`kvpress_n_kept` gives ``budget`` exactly (checked)."""
    if not 1 <= budget < tokens:
        raise ValueError(f"budget = {budget} is out of range: allowed [1, {tokens - 1}] for a "
                         f"{tokens}-token prompt")
    r = (tokens - budget - 0.5) / tokens
    if kvpress_n_kept(tokens, r) != budget:
        raise AssertionError(f"compression ratio {r} keeps {kvpress_n_kept(tokens, r)} tokens, "
                             f"not {budget}")
    return r


@dataclass(frozen=True)
class Pair:
    """One row of the cross-check: our method (its label, ``hikv.params.parse_method``, with
    ``overrides`` of :class:`~hikv.params.MethodSpec` fields) against a kvpress press (class
    name, keyword arguments, a ``variant`` the worker applies, the attention implementation it
    needs). ``matched`` rows carry the agreement target; the others document a known difference
    of rule."""

    name: str
    label: str
    press: str | None
    press_kwargs: Mapping[str, Any] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    variant: str = ""
    attn: str = "sdpa"
    matched: bool = True
    kind: str = "tokens"          # "tokens": kept positions; "logits": full KV only
    note: str = ""


def pairs(budget: int, tokens: int, *, window: int = 32, pool_kernel: int | None = None,
          layers: int | None = None) -> list[Pair]:
    """The settings mapping at ``budget`` kept tokens per (layer, KV head) of a ``tokens``
    prompt. ``window`` is the observation window of SnapKV, AdaKV and PyramidKV and H2O's recent
    window (our ``MethodSpec.recent``); ``pool_kernel`` is our SnapKV's
    (``hikv.model.methods.baselines.SnapKV.pool_kernel`` when None); with ``layers`` (the model's)
    and our PyramidKV schedule present, a PyramidKV row runs kvpress with our layer budgets."""
    if pool_kernel is None:
        from hikv.model.methods.baselines import SnapKV

        pool_kernel = SnapKV.pool_kernel
    cr = compression_ratio(budget, tokens)
    b = budget
    win = {"recent": window}
    snap = {"compression_ratio": cr, "window_size": window, "kernel_size": pool_kernel}
    # AdaKV's safeguard: ours keeps floor(alpha (B - w)) prefix tokens per head on top of the
    # window; kvpress keeps int(alpha' B) best scores, the window first (scored max + 1)
    safe = window + (budget - window) // 5
    return [
        Pair("full KV", "full", None, kind="logits",
             note="logits of the prompt's last token and of the teacher-forced decode steps"),
        Pair("SnapKV, kvpress defaults", f"snapkv@{b}", "SnapKVPress",
             {"compression_ratio": cr}, win, matched=False,
             note="kvpress defaults: window 64, kernel 5, average pooling, pool then mean "
                  "over the group"),
        Pair("SnapKV, matched", f"snapkv@{b}", "SnapKVPress", snap, win,
             variant="max_pool_group_sum",
             note=f"window {window}, kernel {pool_kernel}; kvpress's score with max pooling "
                  "and the group's query heads summed before pooling (ours)"),
        Pair("H2O vs ObservedAttentionPress", f"h2o@{b}", "ObservedAttentionPress",
             {"compression_ratio": cr}, win, attn="eager", matched=False,
             note=f"different rules: ours sums attention and keeps a recent window of "
                  f"{window}; kvpress averages over the queries that see each key, no window"),
        Pair("H2O, our rule in kvpress", f"h2o@{b}", "ObservedAttentionPress",
             {"compression_ratio": cr}, {"recent": 0}, variant="sum", attn="eager",
             note="recent window 0 and kvpress's observed attention summed (not averaged): "
                  "checks our accumulated-attention scores, not the rule"),
        Pair("H2O averaged", f"h2o@{b}/avg", "ObservedAttentionPress",
             {"compression_ratio": cr}, attn="eager",
             note="our averaged variant (no recent window) is kvpress's ObservedAttentionPress"),
        Pair("StreamingLLM", f"streamingllm@{b}", "StreamingLLMPress",
             {"compression_ratio": cr, "n_sink": 4}, {"sinks": 4}),
        Pair("TOVA", f"tova@{b}", "TOVAPress", {"compression_ratio": cr}),
        Pair("AdaKV (SnapKV scores)", f"adakv@{b}", "AdaKVPress",
             {**snap, "alpha_safeguard": (safe + 0.5) / budget}, win,
             variant="max_pool_group_sum",
             note=f"kvpress's alpha_safeguard set so its safeguard keeps the window and "
                  f"{safe - window} = floor(0.2 (B - w)) prefix tokens, as ours"),
        Pair("PyramidKV", f"pyramidkv@{b}", "PyramidKVPress", snap, win,
             variant="max_pool_group_sum", matched=False,
             note=_pyramid_note(budget, tokens, window, layers)),
        *_pyramid_ours(budget, tokens, window, layers, snap, win),
        Pair("ThinK (key channels)", "hikv-none/k:think32", "ThinKPress",
             {"key_channel_compression_ratio": 0.5, "window_size": window}, kind="channels"),
        Pair("Knorm", f"knorm@{b}", "KnormPress", {"compression_ratio": cr}),
    ]


def _pyramid_note(budget: int, tokens: int, window: int, layers: int | None) -> str:
    theirs = kvpress_pyramid_budgets(budget, tokens, layers or 2, window)
    if len(set(theirs)) == 1:
        return (f"not a pyramid: kvpress's lowest layer budget B/beta = {budget / 20:g} is "
                f"below its window {window} (B < {20 * window}), so PyramidKVPress keeps a "
                f"uniform {theirs[0]} tokens in every layer: our pyramid against uniform "
                "SnapKV (matched score)")
    return (f"kvpress's own layer budgets ({theirs[0]} .. {theirs[-1]} kept tokens) "
            "against ours (PyramidKV's code: prefix budgets averaging B - w)")


def _pyramid_ours(budget: int, tokens: int, window: int, layers: int | None,
                  snap: Mapping[str, Any], win: Mapping[str, Any]) -> list[Pair]:
    try:
        from hikv.model.methods.baselines_adaptive import pyramid_budgets
    except ImportError:
        return []
    if layers is None:
        return []
    sched = [int(x) for x in pyramid_budgets(layers, budget, window, tokens)]
    return [Pair("PyramidKV, our layer budgets", f"pyramidkv@{budget}", "PyramidKVPress",
                 {**snap, "layer_budgets": sched}, win, variant="max_pool_group_sum",
                 note=f"kvpress's PyramidKV with our per-layer budgets ({sched[0]} .. "
                      f"{sched[-1]}) and scoring: checks scores and per-layer selection")]


def our_spec(pair: Pair, cfg: Any) -> Any:
    """Our :class:`~hikv.params.MethodSpec` of ``pair`` under ``cfg`` (``ParamError`` when the
    kit has no such method)."""
    import dataclasses

    from hikv.params import parse_method

    spec = parse_method(pair.label, cfg.policy, cfg.layout.head_dim)
    return dataclasses.replace(spec, **dict(pair.overrides)) if pair.overrides else spec


def crosscheck_config(head_dim: int = 64) -> Any:
    """The configuration our side runs under (the ``default`` preset, the model's head dim)."""
    import dataclasses

    from hikv.presets import get_preset

    cfg = get_preset("default")
    return dataclasses.replace(cfg, layout=dataclasses.replace(cfg.layout, head_dim=head_dim))


# =========================================================================== environment
def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path, log: Any = print) -> Path:
    """Create ``venv`` with kvpress (:data:`KVPRESS_REQUIREMENTS`) unless it already imports
    it; return its interpreter."""
    py = venv_python(venv)
    probe = [str(py), "-c", "import kvpress, transformers, torch; print(transformers.__version__)"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return py
    log(f"building the kvpress environment in {venv} ({', '.join(KVPRESS_REQUIREMENTS)})")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *KVPRESS_REQUIREMENTS], check=True)
    subprocess.run(probe, check=True, capture_output=True)
    return py


# =========================================================================== our side
def prepare(out: Path, *, tokens: int, decode: int, windows: int, model: str
            ) -> tuple[Any, list[list[int]], Path]:
    """Load the model through the kit, cut the essays into windows, save the dequantised model
    (its config and float32 state dict, ``<out>/model.pt``) for the worker; return (lm,
    windows, that file)."""
    from hikv.model.accuracy.experiments import text_windows
    from hikv.model.lm.assets import essays_text
    from hikv.model.lm.runner import load_lm

    lm = load_lm(model)
    wins = text_windows(lm, essays_text(), tokens + decode, windows)
    import torch

    path = out / "model.pt"
    conf = lm.model.config.to_dict()
    for key in ("quantization_config", "_attn_implementation_autoset", "attn_implementation"):
        conf.pop(key, None)
    state = {k: v.detach().float().cpu().contiguous() for k, v in lm.model.state_dict().items()}
    torch.save({"config": conf, "state": state}, path)
    return lm, wins, path


def run_ours(lm: Any, wins: list[list[int]], todo: list[Pair], *, tokens: int,
             decode: int) -> dict[str, Any]:
    """Our golden model: kept positions per (window, layer, KV head) of each row's method,
    and full KV's logits (prompt's last token, then each decode step)."""
    import torch

    from hikv.model.lm.runner import Sequence as Seq
    from hikv.model.lm.runner import lm_config, prefill, step
    from hikv.presets import get_preset

    cfg = lm_config(get_preset("default"), lm.shape)
    kept: dict[str, dict[tuple[int, int, int], list[int]]] = {}
    scores: dict[str, dict[tuple[int, int, int], list[float]]] = {}
    logits = []
    layers = list(lm.shape.method_layers)
    for w, ids in enumerate(wins):
        prompt, cont = ids[:tokens], ids[tokens:tokens + decode]
        for pair in todo:
            spec = our_spec(pair, cfg)
            seq = Seq(lm, spec, cfg)
            record: list[Any] = []
            with _recording_snap_scores(record):
                first = prefill(lm, [seq], prompt)
            if pair.kind == "tokens" and len(record) == len(layers):
                sc = scores.setdefault(pair.name, {})
                for i, layer in enumerate(layers):
                    for h in range(lm.shape.kv_heads):
                        sc[(w, layer, h)] = [float(x) for x in record[i][h]]
            if pair.kind == "logits":
                rows = [first]
                for t in cont:
                    rows.append(step(lm, [seq], [t])[0])
                logits.append(torch.stack(rows))
                continue
            got = kept.setdefault(pair.name, {})
            for layer in lm.shape.method_layers:
                cache = seq.caches[layer]
                sel = _kept_of(cache, pair.kind)
                for h in range(lm.shape.kv_heads):
                    got[(w, layer, h)] = sel[h]
    return {"kept": kept, "scores": scores,
            "logits": torch.stack(logits) if logits else None}


@contextmanager
def _recording_snap_scores(record: list[Any]) -> Iterator[None]:
    """While prefilling, append every SnapKV-style prefix score our golden model computes
    (``snap_scores``: SnapKV, AdaKV, G-AdaKV and PyramidKV, one ``[Hkv, n - w]`` tensor per
    layer in depth order) to ``record``: the scores their top-k chose from (tie checks)."""
    from hikv.model.methods import baselines, baselines_adaptive, cache

    orig = cache.snap_scores

    def rec(obs: Any, n_prefix: int, kernel: int) -> Any:
        out = orig(obs, n_prefix, kernel)
        record.append(out.detach().clone())
        return out

    mods = [m for m in (baselines, baselines_adaptive) if m.snap_scores is orig]
    for m in mods:
        m.snap_scores = rec
    try:
        yield
    finally:
        for m in mods:
            m.snap_scores = orig


def _kept_of(cache: Any, kind: str) -> list[list[int]]:
    """Kept token positions (or key channels) per KV head of one of our layer caches."""
    if kind == "channels":
        mask = getattr(cache, "think_mask", None)       # HiKV's ThinK: [Hkv, d] kept channels
        if mask is None:
            raise RuntimeError(f"{type(cache).__name__} has chosen no key channels")
        return [[int(c) for c in row.nonzero().flatten()] for row in mask]
    pos = cache.pos                      # padded entries (per-head budgets) are negative
    return [sorted(int(p) for p in row if int(p) >= 0) for row in pos]


# =========================================================================== the worker
def worker(inp: Path, outp: Path) -> None:
    """Runs in the kvpress environment: full-KV logits and each press's kept sets."""
    import torch
    import torch.nn.functional as F
    from kvpress import (
        AdaKVPress,
        KnormPress,
        ObservedAttentionPress,
        PyramidKVPress,
        SnapKVPress,
        StreamingLLMPress,
        ThinKPress,
        TOVAPress,
    )
    from kvpress.utils import compute_n_kept
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

    job = torch.load(inp, weights_only=True)
    torch.manual_seed(0)

    def group_sum_max_pool(self, module, hidden_states, keys, values, attentions, kwargs):
        """kvpress's SnapKV score with our pooling: the window's attention summed over its
        queries and the group's query heads, then max-pooled (hikv SnapKV)."""
        bsz, hkv, k_len, _ = keys.shape
        g = module.config.num_attention_heads // hkv
        attn = SnapKVPress.compute_window_attention(module, hidden_states, keys,
                                                    self.window_size,
                                                    kwargs["position_embeddings"])
        s = attn.sum(dim=-2).view(bsz, hkv, g, k_len - self.window_size).sum(2)
        s = F.max_pool1d(s, kernel_size=self.kernel_size, padding=self.kernel_size // 2,
                         stride=1)
        return F.pad(s, (0, self.window_size), value=s.max().item() + 1)

    def matched(base: type, layer_budgets: list[int] | None = None) -> type:
        attrs: dict[str, Any] = {"score": group_sum_max_pool}
        if layer_budgets is not None:
            attrs["get_layer_budget"] = lambda self, module, q_len: \
                int(layer_budgets[module.layer_idx])
        return type(f"Matched{base.__name__}", (base,), attrs)

    class SumObservedAttention(ObservedAttentionPress):
        """Observed attention summed over queries and the group (H2O's accumulated score)."""

        def score(self, module, hidden_states, keys, values, attentions, kwargs):
            bsz, hkv, n, _ = keys.shape
            return attentions.sum(2).view(bsz, hkv, -1, n).sum(2)

    classes = {"SnapKVPress": SnapKVPress, "ObservedAttentionPress": ObservedAttentionPress,
               "StreamingLLMPress": StreamingLLMPress, "TOVAPress": TOVAPress,
               "PyramidKVPress": PyramidKVPress, "ThinKPress": ThinKPress,
               "KnormPress": KnormPress}

    def make(p: dict) -> Any:
        kw = dict(p["press_kwargs"])
        budgets = kw.pop("layer_budgets", None)
        if p["press"] == "AdaKVPress":
            alpha = kw.pop("alpha_safeguard", 0.20)
            inner = matched(SnapKVPress) if p["variant"] == "max_pool_group_sum" \
                else SnapKVPress
            return AdaKVPress(press=inner(**kw), alpha_safeguard=alpha)
        base = classes[p["press"]]
        if p["variant"] == "max_pool_group_sum":
            return matched(base, budgets)(**kw)
        if p["variant"] == "sum":
            return SumObservedAttention(**kw)
        return base(**kw)

    saved = torch.load(job["model"], weights_only=True)
    conf = dict(saved["config"])

    def load(attn: str) -> Any:
        cfg = AutoConfig.for_model(conf.pop("model_type", "llama"), **conf)
        conf["model_type"] = cfg.model_type
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn,
                                                 dtype=torch.float32)
        missing, unexpected = model.load_state_dict(saved["state"], strict=False)
        if unexpected or [m for m in missing if "rotary" not in m]:
            raise RuntimeError(f"weights do not fit: missing {missing}, unexpected "
                               f"{unexpected}")
        return model.eval()

    models: dict[str, Any] = {}
    result: dict[str, Any] = {"kept": {}, "n_kept": {}, "seconds": {}}
    tokens = int(job["tokens"])
    for p in job["pairs"]:
        t0 = time.perf_counter()
        model = models.setdefault(p["attn"], load(p["attn"]))
        if p["kind"] == "logits":
            rows = []
            for ids in job["windows"]:
                cache = DynamicCache()
                x = torch.tensor([ids[:tokens]])
                with torch.inference_mode():
                    out = model(input_ids=x, past_key_values=cache, use_cache=True)
                    r = [out.logits[0, -1].float()]
                    for t in ids[tokens:]:
                        out = model(input_ids=torch.tensor([[t]]), past_key_values=cache,
                                    use_cache=True)
                        r.append(out.logits[0, -1].float())
                rows.append(torch.stack(r))
            result["logits"] = torch.stack(rows)
            result["seconds"][p["name"]] = time.perf_counter() - t0
            continue
        press = make(p)
        if "compression_ratio" in p["press_kwargs"]:
            result["n_kept"][p["name"]] = compute_n_kept(tokens, press.compression_ratio)
        got: dict[str, list[int]] = {}
        for w, ids in enumerate(job["windows"]):
            rec: dict[int, list[list[int]]] = {}
            _record(press, rec, p["kind"])
            cache = DynamicCache()
            with torch.inference_mode(), press(model):
                model(input_ids=torch.tensor([ids[:tokens]]), past_key_values=cache,
                      use_cache=True)
            for layer, heads in rec.items():
                for h, sel in enumerate(heads):
                    got[f"{w},{layer},{h}"] = sel
        result["kept"][p["name"]] = got
        result["seconds"][p["name"]] = time.perf_counter() - t0
    from importlib.metadata import version

    import transformers

    result["versions"] = {"kvpress": version("kvpress"),
                          "transformers": str(transformers.__version__),
                          "torch": str(torch.__version__)}
    torch.save(result, outp)


def _record(press: Any, rec: dict, kind: str) -> None:
    """Wrap ``press.compress`` (on the instance) to record what each layer keeps."""
    orig = type(press).compress

    def compress(module, hidden_states, keys, values, attentions, kwargs):  # noqa: ANN001
        before = keys.detach().clone()
        if hasattr(module, "masked_key_indices"):
            module.masked_key_indices = None
        k2, v2 = orig(press, module, hidden_states, keys, values, attentions, kwargs)
        hkv, n = before.shape[1], before.shape[2]
        masked = getattr(module, "masked_key_indices", None)
        heads: list[list[int]] = []
        if kind == "channels":
            for h in range(hkv):
                zero = (k2[0, h] == 0).all(0) & ~(before[0, h] == 0).all(0)
                heads.append([c for c in range(before.shape[-1]) if not bool(zero[c])])
        elif masked is not None:
            _, hi, si = masked
            drop: list[set[int]] = [set() for _ in range(hkv)]
            for h, s in zip(hi.tolist(), si.tolist(), strict=True):
                drop[h].add(s)
            heads = [[i for i in range(n) if i not in drop[h]] for h in range(hkv)]
        else:
            for h in range(hkv):
                eq = (k2[0, h][:, None, :] == before[0, h][None, :, :]).all(-1)
                if not bool(eq.any(1).all()):
                    raise RuntimeError("a kept key matches no key of the prompt")
                heads.append(sorted(int(i) for i in eq.float().argmax(1)))
        rec[int(module.layer_idx)] = heads
        return k2, v2

    press.compress = compress


# =========================================================================== driver
def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    from hikv.params import ParamError

    cfg = crosscheck_config()
    todo, skipped = [], []
    from hikv.presets import MODEL_SHAPES

    shape = MODEL_SHAPES.get(args.model)
    for p in pairs(args.budget, args.tokens, window=args.window,
                   layers=shape.layers if shape else None):
        if args.methods and not any(m in p.label for m in args.methods):
            continue
        try:
            our_spec(p, cfg)
        except (ParamError, TypeError) as e:
            why = str(e).split(": use ")[0]
            skipped.append(f"skipped {p.name}: the kit has no {p.label!r} ({why})")
        else:
            todo.append(p)
    for line in skipped:
        print(line)
    py = ensure_venv(Path(args.venv).resolve() if args.venv else out / "kvpress-venv")
    t0 = time.perf_counter()
    lm, wins, folder = prepare(out, tokens=args.tokens, decode=args.decode,
                               windows=args.windows, model=args.model)
    ours = run_ours(lm, wins, todo, tokens=args.tokens, decode=args.decode)
    t_ours = time.perf_counter() - t0
    inp, res = out / "worker_in.pt", out / "worker_out.pt"
    torch.save({"model": str(folder), "tokens": args.tokens, "windows": wins,
                "pairs": [{"name": p.name, "press": p.press, "variant": p.variant,
                           "attn": p.attn, "kind": p.kind,
                           "press_kwargs": dict(p.press_kwargs)} for p in todo]}, inp)
    t1 = time.perf_counter()
    subprocess.run([str(py), str(Path(__file__).resolve()), "--worker", str(inp), str(res)],
                   check=True, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                    "TRANSFORMERS_OFFLINE": "1"})
    theirs = torch.load(res, weights_only=True)
    rows = []
    for p in todo:
        row: dict[str, Any] = {"name": p.name, "ours": p.label, "kvpress": p.press,
                               "variant": p.variant, "matched": p.matched, "note": p.note,
                               "settings": {"ours": {"label": p.label, **dict(p.overrides)},
                                            "kvpress": dict(p.press_kwargs)}}
        if p.kind == "logits":
            d = (ours["logits"] - theirs["logits"]).abs().max().item()
            row.update(logits_max_abs_diff=d, passed=d <= LOGITS_TARGET)
        else:
            tk = {tuple(int(x) for x in k.split(",")): v for k, v in theirs["kept"][p.name].items()}
            agree = tie_aware(ours["kept"][p.name], tk, ours["scores"].get(p.name))
            row.update(**agree, n_kept_kvpress=theirs["n_kept"].get(p.name),
                       passed=(agree["tie_mean"] >= JACCARD_TARGET) if p.matched else None)
        rows.append(row)
    report = {"model": args.model, "tokens": args.tokens, "budget": args.budget,
              "decode": args.decode, "windows": args.windows, "window": args.window,
              "versions": theirs.get("versions"), "rows": rows, "skipped": skipped,
              "seconds": {"ours": t_ours, "kvpress": time.perf_counter() - t1},
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])}
    (out / "crosscheck.json").write_text(json.dumps(report, indent=1))
    (out / "crosscheck.md").write_text(render(report))
    print(render(report))
    return report


def render(report: Mapping[str, Any]) -> str:
    """The agreement table as Markdown."""
    lines = [f"{report['model']}, {report['windows']} essay window(s) of {report['tokens']} "
             f"prompt tokens (+{report['decode']} decode steps), budget {report['budget']} "
             f"tokens per (layer, KV head); kvpress environment: {report.get('versions')}", "",
             "| ours | kvpress | settings | agreement | target |", "|---|---|---|---:|---|"]
    for r in report["rows"]:
        kw = ", ".join(_setting(k, v) for k, v in r["settings"]["kvpress"].items())
        if "logits_max_abs_diff" in r:
            agree = f"logits max abs diff {r['logits_max_abs_diff']:.2e}"
            target = f"<= {LOGITS_TARGET:g}: {'met' if r['passed'] else 'MISSED'}"
        else:
            agree = f"Jaccard mean {r['jaccard_mean']:.4f} (min {r['jaccard_min']:.3f})"
            if "tie_mean" in r:
                agree += (f"; tie-aware {r['tie_mean']:.4f} (min {r['tie_min']:.3f}): "
                          f"{r['sets_differing']} of {r['sets']} sets differ, "
                          f"{r['sets_tied']} only among exactly tied scores "
                          f"({r['tokens_tied']} tokens)")
            target = (f">= {JACCARD_TARGET} tie-aware: {'met' if r['passed'] else 'MISSED'}"
                      if r["matched"] else "none (not like for like: other settings or rule)")
        press = r["kvpress"] or "no press"
        if r["variant"]:
            press += f" ({r['variant']})"
        lines.append(f"| {r['name']} | {press} | {kw} | {agree} | {target} |")
    lines += [f"* {s}" for s in report["skipped"]]
    missed = [r["name"] for r in report["rows"] if r.get("passed") is False]
    lines += ["", f"Gate: {'FAILED, missed by ' + ', '.join(missed) if missed else 'passed'} "
              "(every matched row must meet its target)."]
    return "\n".join(lines) + "\n"


def _setting(name: str, value: Any) -> str:
    if isinstance(value, float):
        return f"{name}={value:.6g}"
    if isinstance(value, list) and len(value) > 3:
        return f"{name}=[{value[0]} .. {value[-1]}]"
    return f"{name}={value}"


#: the integer options: (name, default, smallest allowed value, help)
INT_OPTIONS = (
    ("tokens", 1024, 2, "prompt tokens"),
    ("budget", 256, 1, "kept tokens per (layer, KV head)"),
    ("window", 32, 1, "SnapKV observation / H2O recent window"),
    ("decode", 8, 0, "teacher-forced decode steps for the full-KV logits"),
    ("windows", 2, 1, "essay windows"),
)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        worker(Path(argv[1]), Path(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cache = Path(os.environ.get("HIKV_CACHE", Path.home() / ".cache" / "hikv"))
    ap.add_argument("--out", default=str(cache / "kvpress-crosscheck"),
                    help="output folder (also holds the kvpress venv and the saved model)")
    ap.add_argument("--venv", default=None, help="kvpress environment (default <out>/kvpress-venv)")
    ap.add_argument("--model", default="smollm2-135m", help="model asset (default smollm2-135m)")
    for name, default, lo, text in INT_OPTIONS:
        ap.add_argument(f"--{name}", type=int, default=default,
                        help=f"{text} (default {default}, at least {lo})")
    ap.add_argument("--methods", nargs="*", default=None,
                    help="check only pairs whose label contains one of these (default: all)")
    args = ap.parse_args(argv)
    for name, _, lo, _ in INT_OPTIONS:
        if getattr(args, name) < lo:
            ap.error(f"--{name} = {getattr(args, name)} is out of range: allowed >= {lo}")
    if not args.window < args.budget < args.tokens:
        ap.error(f"need --window < --budget < --tokens, got {args.window}, {args.budget}, "
                 f"{args.tokens}")
    return exit_status(run(args))


if __name__ == "__main__":
    sys.exit(main())
