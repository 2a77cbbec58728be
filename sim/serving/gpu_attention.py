"""Attention on a GPU with FlashAttention / FlashInfer-class kernels: a fitted model.

The measured operator profiles (Vidur's ``mlp.csv``) hold every operator of a transformer
layer except attention; this module supplies attention from a small model whose parameters
are fitted to published kernel measurements on the device, listed in :data:`PUBLISHED` with
their source and conditions (docs/serving.md, "Measured device", tables the fit).

Per layer, one kernel per phase (SI units):

* decode, all decoding sequences of an iteration in one kernel (FlashDecoding / FlashInfer
  split-KV): ``decode_fixed_s + bytes / decode_bytes_per_s``, where ``bytes`` is the KV read
  (the attended tokens' K and V of every KV head) plus the queries read and outputs written;
* prefill, all prefill chunks of an iteration in one kernel (FlashAttention-2 varlen):
  ``prefill_fixed_s + max(FLOPs / prefill_flops_per_s, bytes / decode_bytes_per_s)`` with
  ``4 d`` FLOPs per (query head, query token, key) over the causal pairs plus
  ``causal_waste_keys`` keys per query token that the diagonal tiles compute and mask away,
  and bytes the chunk's Q, K, V, O and its prefix's K, V.

A mixed iteration runs both kernels. The parameters are those of :data:`A100_ATTENTION`
(fitted by :func:`fit_attention` to :data:`PUBLISHED`; ``tests/test_device.py`` refits and
checks every prediction).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hikv.params import ParamError

__all__ = ["GpuAttention", "Measurement", "PUBLISHED", "A100_ATTENTION", "fit_attention",
           "predict_measurement"]

_FP16 = 2


@dataclass(frozen=True)
class GpuAttention:
    """Achieved rates and fixed costs of FlashAttention-class kernels on one GPU (per layer).

    ``decode_bytes_per_s``: achieved memory bandwidth of the decode kernel; ``decode_fixed_s``:
    its fixed cost per layer and iteration (launch, split-KV reduction); ``prefill_flops_per_s``:
    achieved tensor-core FLOP/s of the prefill kernel; ``prefill_fixed_s``: its fixed cost;
    ``causal_waste_keys``: keys per query token computed on diagonal tiles and masked.
    """

    device: str
    decode_bytes_per_s: float
    decode_fixed_s: float
    prefill_flops_per_s: float
    prefill_fixed_s: float
    causal_waste_keys: float
    source: str

    def __post_init__(self) -> None:
        for name in ("decode_bytes_per_s", "prefill_flops_per_s"):
            if not getattr(self, name) > 0:
                raise ParamError(f"GpuAttention.{name} = {getattr(self, name)!r} must be > 0")
        for name in ("decode_fixed_s", "prefill_fixed_s", "causal_waste_keys"):
            if not getattr(self, name) >= 0:
                raise ParamError(f"GpuAttention.{name} = {getattr(self, name)!r} must be >= 0")

    # ----------------------------------------------------------------- one layer
    def decode_time_s(self, kv_tokens: float, seqs: int, q_heads: int, kv_heads: int,
                      head_dim: int) -> float:
        """One layer's decode kernel over ``seqs`` sequences attending ``kv_tokens`` in all."""
        if seqs == 0:
            return 0.0
        nbytes = (kv_tokens * kv_heads * 2 + seqs * q_heads * 2) * head_dim * _FP16
        return self.decode_fixed_s + nbytes / self.decode_bytes_per_s

    def prefill_time_s(self, chunk: np.ndarray, prefix: np.ndarray, q_heads: int,
                       kv_heads: int, head_dim: int) -> float:
        """One layer's prefill kernel over chunks ``chunk`` after prefixes ``prefix``."""
        chunk = np.asarray(chunk, dtype=np.float64)
        prefix = np.asarray(prefix, dtype=np.float64)
        if chunk.size == 0:
            return 0.0
        pairs = chunk * prefix + chunk * (chunk + 1) / 2 + self.causal_waste_keys * chunk
        flops = 4.0 * head_dim * q_heads * float(pairs.sum())
        nbytes = head_dim * _FP16 * float((chunk * (2 * q_heads + 2 * kv_heads)
                                           + prefix * 2 * kv_heads).sum())
        return self.prefill_fixed_s + max(flops / self.prefill_flops_per_s,
                                          nbytes / self.decode_bytes_per_s)


@dataclass(frozen=True)
class Measurement:
    """One published kernel time: ``batch`` sequences of ``q_len`` query tokens (1 = decode)
    attending ``kv_len`` keys each (causal when ``causal``), ``q_heads`` / ``kv_heads`` heads
    of ``head_dim``, fp16; ``time_s`` as published; ``source`` a key of :data:`SOURCES`."""

    source: str
    batch: int
    q_len: int
    kv_len: int
    q_heads: int
    kv_heads: int
    head_dim: int
    causal: bool
    time_s: float

    @property
    def label(self) -> str:
        kind = "decode" if self.q_len == 1 else ("causal" if self.causal else "non-causal")
        return (f"{kind} B={self.batch} q={self.q_len} kv={self.kv_len} "
                f"H={self.q_heads}/{self.kv_heads}")


#: Where the measurements come from (cited in docs/serving.md).
SOURCES: dict[str, str] = {
    "flash-decoding": "T. Dao, D. Haziza, F. Massa, G. Sizov, 'Flash-Decoding for long-context "
                      "inference', PyTorch blog / Stanford CRFM, 2023-10-12 (component-level "
                      "micro-benchmark table, A100, fp16, Flash-Decoding column)",
    "fa2-a100": "liangan1/GPU_travel, performance/flash-attn/README.md (commit 07d0469): "
                "FlashAttention-2 forward on A100 (SM80), fp16, 32 query heads of 128, SM "
                "clock throttled to about 1200 MHz by the power limit as stated there",
}

_FD = dict(source="flash-decoding", q_len=1, q_heads=16, kv_heads=2, head_dim=128,
           causal=False)
_FA = dict(source="fa2-a100", q_heads=32, head_dim=128)

#: Published A100 attention kernel times (fp16, head dim 128).
PUBLISHED: tuple[Measurement, ...] = (
    Measurement(batch=256, kv_len=256, time_s=63.4e-6, **_FD),
    Measurement(batch=128, kv_len=512, time_s=67.7e-6, **_FD),
    Measurement(batch=64, kv_len=1024, time_s=77.7e-6, **_FD),
    Measurement(batch=32, kv_len=2048, time_s=58.5e-6, **_FD),
    Measurement(batch=16, kv_len=4096, time_s=57.0e-6, **_FD),
    Measurement(batch=8, kv_len=8192, time_s=56.4e-6, **_FD),
    Measurement(batch=4, kv_len=16384, time_s=58.2e-6, **_FD),
    Measurement(batch=2, kv_len=32768, time_s=60.3e-6, **_FD),
    Measurement(batch=1, kv_len=65536, time_s=64.4e-6, **_FD),
    Measurement(batch=1, kv_len=131072, time_s=106.6e-6, **_FD),
    Measurement(batch=16, q_len=1024, kv_len=1024, kv_heads=32, causal=True, time_s=0.956e-3,
                **_FA),
    Measurement(batch=16, q_len=1024, kv_len=1024, kv_heads=8, causal=True, time_s=0.978e-3,
                **_FA),
    Measurement(batch=4, q_len=1024, kv_len=4096, kv_heads=32, causal=True, time_s=1.401e-3,
                **_FA),
    Measurement(batch=4, q_len=1024, kv_len=4096, kv_heads=8, causal=True, time_s=1.377e-3,
                **_FA),
    Measurement(batch=1, q_len=4096, kv_len=4096, kv_heads=32, causal=True, time_s=0.879e-3,
                **_FA),
    Measurement(batch=1, q_len=4096, kv_len=4096, kv_heads=8, causal=True, time_s=0.862e-3,
                **_FA),
    Measurement(batch=16, q_len=1024, kv_len=1024, kv_heads=32, causal=False, time_s=1.535e-3,
                **_FA),
    Measurement(batch=4, q_len=1024, kv_len=4096, kv_heads=32, causal=False, time_s=1.528e-3,
                **_FA),
    Measurement(batch=1, q_len=4096, kv_len=4096, kv_heads=32, causal=False, time_s=1.494e-3,
                **_FA),
)


def predict_measurement(att: GpuAttention, m: Measurement) -> float:
    """The model's time for the conditions of ``m`` (one layer, one kernel)."""
    if m.q_len == 1:
        return att.decode_time_s(m.batch * m.kv_len, m.batch, m.q_heads, m.kv_heads,
                                 m.head_dim)
    chunk = np.full(m.batch, m.q_len, dtype=np.float64)
    if m.causal:            # the chunk is the last q_len tokens of kv_len (bottom-right causal)
        return att.prefill_time_s(chunk, chunk * 0 + (m.kv_len - m.q_len), m.q_heads,
                                  m.kv_heads, m.head_dim)
    # non-causal: every query sees every key, no diagonal tiles
    flops = 4.0 * m.head_dim * m.q_heads * m.batch * m.q_len * m.kv_len
    return att.prefill_fixed_s + flops / att.prefill_flops_per_s


def fit_attention(measurements: tuple[Measurement, ...] = PUBLISHED, *, device: str = "a100",
                  source: str = "fit_attention(PUBLISHED)") -> GpuAttention:
    """Least-squares fit (relative errors) of the decode and prefill parameters.

    Decode: ``t = fixed + bytes / bandwidth`` is linear in (1, bytes): solved in closed form
    weighted by ``1 / t``. Prefill: the published prefill times are all near 1 ms and do not
    determine a fixed cost, so the prefill kernel takes the decode kernel's fixed cost (both
    are one launch per layer); ``t = fixed + FLOPs / rate`` is then solved for the rate in
    closed form for each causal waste on a grid (0 to 512 keys per query token in steps of
    8), and the best relative fit wins.
    """
    dec = [m for m in measurements if m.q_len == 1]
    pre = [m for m in measurements if m.q_len > 1]
    if len(dec) < 2 or len(pre) < 2:
        raise ParamError("fit_attention needs at least two decode and two prefill measurements")
    probe = GpuAttention(device, 1.0, 0.0, 1.0, 0.0, 0.0, source)
    # decode: design matrix rows (1, bytes) / t
    t = np.array([m.time_s for m in dec])
    b = np.array([predict_measurement(probe, m) for m in dec])     # = bytes at 1 B/s
    a = np.stack([np.ones_like(t), b], axis=1) / t[:, None]
    (fixed_d, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    best = None
    fixed_p = max(float(fixed_d), 0.0)
    tp = np.array([m.time_s for m in pre])
    for waste in np.arange(0.0, 513.0, 8.0):
        unit = GpuAttention(device, 1e30, 0.0, 1.0, 0.0, float(waste), source)
        f = np.array([predict_measurement(unit, m) for m in pre])   # = FLOPs at 1 FLOP/s
        # minimise sum((fixed + f x) / t - 1)^2 over x = 1 / rate
        x = float(np.sum(f / tp * (1 - fixed_p / tp)) / np.sum((f / tp) ** 2))
        if x <= 0:
            continue
        err = float(np.sum(((fixed_p + f * x) / tp - 1) ** 2))
        if best is None or err < best[0]:
            best = (err, fixed_p, 1.0 / x, float(waste))
    assert best is not None
    return GpuAttention(device=device, decode_bytes_per_s=float(1.0 / inv_bw),
                        decode_fixed_s=max(float(fixed_d), 0.0), prefill_flops_per_s=best[2],
                        prefill_fixed_s=best[1], causal_waste_keys=best[3], source=source)


#: A100 (fp16): :func:`fit_attention` of :data:`PUBLISHED`, rounded to 3 significant digits
#: (``tests/test_device.py`` refits and compares).
A100_ATTENTION = GpuAttention(
    device="a100", decode_bytes_per_s=1.46e12, decode_fixed_s=15.4e-6,
    prefill_flops_per_s=1.80e14, prefill_fixed_s=15.4e-6, causal_waste_keys=136.0,
    source="fit_attention(PUBLISHED): Flash-Decoding blog (A100 decode) and FlashAttention-2 "
           "A100 forward times (liangan1/GPU_travel)")
