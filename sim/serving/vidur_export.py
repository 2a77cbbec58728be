"""Export attention timings as a Vidur ``attention.csv`` (simulate HiKV hardware in Vidur).

Vidur (microsoft/vidur) prices attention from a per-(device, model) profile
``data/profiling/compute/<device>/<model>/attention.csv`` written by
``vidur/profiling/attention/main.py``: one row per profiled input, the timer statistics
flattened as ``time_stats.<timer>.<stat>`` (milliseconds, one layer) followed by the input's
fields (``attention_wrapper.py``). Its predictor (``sklearn_execution_time_predictor.py``)
keeps the rows whose ``n_embd``, ``n_q_head``, ``n_kv_head``, ``block_size`` and
``num_tensor_parallel_workers`` match the simulated replica, and trains
``attn_prefill`` on the rows with ``prefill_chunk_size > 0`` (features ``kv_cache_size``,
``prefill_chunk_size ** 2``), ``attn_decode`` on the rows with ``prefill_chunk_size == 0``
(features ``batch_size``, ``kv_cache_size``) and ``attn_kv_cache_save`` on all rows (feature
``max(prefill_chunk_size, batch_size)``), using the ``median`` statistic.

:func:`attention_rows` writes the same columns from this project's models, for one KV method:

* decode rows (``batch_size`` B sequences of ``kv_cache_size`` K cached tokens each):
  ``attn_decode`` = B x the attention cost model's step time of one sequence at context K
  (:class:`hikv.sim.serving.step_cost.AttentionModelStepCost`, the RTL-validated cost model: select,
  sort and attend phases on the HiKV accelerator), divided by the layers;
* prefill rows (one chunk of ``prefill_chunk_size`` C tokens after a prefix of K):
  ``attn_prefill`` = the roofline prefill attention of :class:`hikv.sim.serving.step_cost.
  RooflineStepCost` on the accelerator, divided by the layers (the cost model covers decode
  only);
* ``attn_kv_cache_save``: writing the iteration's new tokens' K and V of one layer in the
  method's layout at the memory bandwidth (``max(C, B)`` tokens, as Vidur's feature).

The model is deterministic: ``min = max = mean = median``, ``std = 0``. A statistic of a timer
that does not run in a row (``attn_decode`` in a prefill row, and the reverse) is left empty,
as pandas writes the NaN Vidur's own files hold there. ``attention_backend`` names the method
(``hikv:<method>``; Vidur does not filter on it).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hikv.params import Config, MethodSpec, ParamError

__all__ = ["VIDUR_ATTENTION_COLUMNS", "TIMERS", "STATS", "attention_rows", "write_attention_csv",
           "export_methods"]

#: Vidur's timer names for the attention profile (vidur/metrics/constants.py).
TIMERS = ("attn_prefill", "attn_kv_cache_save", "attn_decode")
STATS = ("min", "max", "mean", "median", "std")
#: Input fields after the statistics (vidur/profiling/attention/attention_wrapper.py).
INPUT_COLUMNS = ("n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers",
                 "max_model_len", "batch_size", "prefill_chunk_size", "kv_cache_size",
                 "is_prefill", "attention_backend")
#: Columns of a Vidur ``attention.csv``, in its order.
VIDUR_ATTENTION_COLUMNS = tuple(f"time_stats.{t}.{s}" for t in TIMERS for s in STATS) \
    + INPUT_COLUMNS

#: Default grid (Vidur profiles decode batches up to 128 and contexts up to max_model_len).
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _grid(max_len: int) -> list[int]:
    """Powers of two and their 1.5x from 16 to ``max_len`` (and ``max_len`` itself)."""
    out = set()
    p = 16
    while p <= max_len:
        out.add(p)
        if p * 3 // 2 <= max_len:
            out.add(p * 3 // 2)
        p *= 2
    out.add(max_len)
    return sorted(out)


def attention_rows(cfg: Config, spec: MethodSpec, *, method: str, max_model_len: int = 4096,
                   decode_batches: Sequence[int] = DECODE_BATCHES) -> list[dict[str, Any]]:
    """Rows of a Vidur ``attention.csv`` for KV method ``spec`` on ``cfg`` (see module)."""
    from hikv.sim.serving.step_cost import AttentionModelStepCost

    if max_model_len < 16:
        raise ParamError(f"max_model_len = {max_model_len} is out of range: allowed >= 16")
    m = cfg.model
    cost = AttentionModelStepCost(cfg, spec)
    layers = m.layers
    save_per_token_s = (m.layers * m.kv_heads * cost.kv.token_write_bytes()
                        / cfg.accel.mem_bandwidth_bytes_per_s / layers)
    grid = _grid(max_model_len)
    table = cost.attention_table_s(max_model_len + 2)
    base = {"n_embd": m.hidden, "n_q_head": m.q_heads, "n_kv_head": m.kv_heads,
            "block_size": cfg.serving.block_tokens, "num_tensor_parallel_workers": 1,
            "max_model_len": max_model_len, "attention_backend": f"hikv:{method}"}

    def stats(timer: str, ms: float | None) -> dict[str, Any]:
        if ms is None:
            return {f"time_stats.{timer}.{s}": "" for s in STATS}
        return {**{f"time_stats.{timer}.{s}": ms for s in STATS[:4]},
                f"time_stats.{timer}.std": 0.0}

    rows: list[dict[str, Any]] = []
    for c in grid:                                     # prefill: one chunk after a prefix
        for k in [0, *grid]:
            if c + k > max_model_len:
                continue
            t = cost.prefill_attention_time_s(np.array([k]), np.array([c]), np.array([k + c]))
            rows.append({**stats("attn_prefill", 1e3 * t / layers),
                         **stats("attn_kv_cache_save", 1e3 * c * save_per_token_s),
                         **stats("attn_decode", None), **base, "batch_size": 1,
                         "prefill_chunk_size": c, "kv_cache_size": k, "is_prefill": True})
    for b in decode_batches:                           # decode: b sequences of k cached tokens
        for k in grid:
            t = b * float(table[k + 1])                # decode key x = k + 1 attends k tokens
            rows.append({**stats("attn_prefill", None),
                         **stats("attn_kv_cache_save", 1e3 * b * save_per_token_s),
                         **stats("attn_decode", 1e3 * t / layers), **base, "batch_size": b,
                         "prefill_chunk_size": 0, "kv_cache_size": k, "is_prefill": False})
    return [{c: r[c] for c in VIDUR_ATTENTION_COLUMNS} for r in rows]


def write_attention_csv(path: str | os.PathLike[str], rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``rows`` with Vidur's header (floats in full precision)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(VIDUR_ATTENTION_COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow({k: (repr(float(v)) if isinstance(v, float) else v) for k, v in r.items()})
    return p


def export_methods(cfg: Config, methods: str | Sequence[str], out_dir: str | os.PathLike[str],
                   *, max_model_len: int = 4096) -> list[Path]:
    """One ``<out_dir>/<method>/attention.csv`` per method (``"all"``: full KV and every
    method); returns the paths written."""
    from hikv.presets import resolve_methods

    written = []
    for name, spec in resolve_methods(cfg, methods).items():
        rows = attention_rows(cfg, spec, method=name, max_model_len=max_model_len)
        written.append(write_attention_csv(Path(out_dir) / name / "attention.csv", rows))
    return written
