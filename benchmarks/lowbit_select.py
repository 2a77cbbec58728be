"""CPU cost of the query-aware HiKV's low-bit scoring in the golden model: one layer's cache,
keys quantised incrementally (each token once, :meth:`hikv.model.methods.hikv.HiKV._lowbit_keys`)
against re-quantising the whole cache every step (a benchmark, not a test; random tensors)::

    python benchmarks/lowbit_select.py --preset default --prompt 4096 --steps 64

Prints the decode's process CPU seconds both ways, the ratio, and whether the outputs are
bit-identical (they must be: the quantisation is per token).
"""

from __future__ import annotations

import argparse
import time

import torch

from hikv.model.methods import hikv as hikv_cache
from hikv.model.methods.registry import make_cache
from hikv.params import parse_method
from hikv.presets import get_preset


def _decode(spec, cfg, q, k, v, n: int) -> tuple[float, torch.Tensor]:
    c = make_cache(spec, cfg)
    c.prefill(q[:, :n], k[:, :n], v[:, :n])
    t = time.process_time()
    outs = [c.decode(q[:, i:i + 1], k[:, i:i + 1], v[:, i:i + 1])[0]
            for i in range(n, q.shape[1])]
    return time.process_time() - t, torch.cat(outs, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="default")
    ap.add_argument("--method", default="hikv-query_aware@512/lowbit4")
    ap.add_argument("--prompt", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = get_preset(a.preset)
    d = cfg.layout.head_dim
    spec = parse_method(a.method, cfg.policy, d)
    g = torch.Generator().manual_seed(0)
    n = a.prompt + a.steps
    q = torch.randn(cfg.model.q_heads, n, d, generator=g)
    k = torch.randn(cfg.model.kv_heads, n, d, generator=g)
    v = torch.randn(cfg.model.kv_heads, n, d, generator=g)
    t_new, o_new = _decode(spec, cfg, q, k, v, a.prompt)
    incremental = hikv_cache.HiKV._lowbit_keys
    hikv_cache.HiKV._lowbit_keys = lambda self, bits: hikv_cache._lowbit(self.k, bits)
    try:
        t_old, o_old = _decode(spec, cfg, q, k, v, a.prompt)
    finally:
        hikv_cache.HiKV._lowbit_keys = incremental
    print(f"{spec.label}, preset {a.preset} ({cfg.model.kv_heads} KV heads, d = {d}), prompt "
          f"{a.prompt}, {a.steps} decode steps, {a.threads} thread(s), process CPU s: "
          f"re-quantising every step {t_old:.2f}, incremental {t_new:.2f} "
          f"({t_old / t_new:.2f}x); outputs bit-identical: {torch.equal(o_new, o_old)}")


if __name__ == "__main__":
    main()
