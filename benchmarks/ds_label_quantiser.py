"""How much Double Sparsity's label quantiser matters: perplexity of its low-bit variants on
SmolLM2 windows with its code's quantiser (per token, asymmetric min/max, ``2^b`` levels, the
query's label channels too: :meth:`hikv.model.methods.baselines.DoubleSparsity._quantise`)
against a symmetric per-token quantiser with ``2^(b-1) - 1`` levels a side (3 levels at 2
bits) applied to the key labels only (a benchmark, not a test; it needs the SmolLM2 asset,
``hikv fetch-assets``)::

    python benchmarks/ds_label_quantiser.py --length 2048 --windows 4 --budget 512

Prints, per quantiser and method, the perplexity over the windows and its change against full
KV on the same tokens, and the CPU seconds taken.
"""

from __future__ import annotations

import argparse
import time

import torch

from hikv.model.accuracy import experiments as A
from hikv.model.accuracy.seed_suite import worker_env
from hikv.model.methods.baselines import DoubleSparsity

#: the label variants compared (``ds@B/...``): the suites' fp16 labels, its code's default
#: (``r = d/8``, 4 bits) and its LongBench script's (``r = d/2``, 2 bits) at SmolLM2's d = 64
VARIANTS = ("r16", "r16/b4", "r8/b4", "r32/b2")


def _symmetric(self: DoubleSparsity, x: torch.Tensor) -> torch.Tensor:
    """Symmetric per-token quantisation, ``2^(b-1) - 1`` levels a side, fp16 scale."""
    bits = self.spec.label_bits
    if bits >= 16 or x.shape[1] == self.group:      # the query's labels [Hkv, group, r]: as is
        return x
    top = 2 ** (bits - 1) - 1
    scale = x.abs().amax(-1, keepdim=True).clamp_min(1e-8) / top
    return torch.round(x / scale).clamp(-top, top) * scale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--windows", type=int, default=4,
                    help="windows spread over the essays (every 24th of the suites' 96)")
    ap.add_argument("--decode", type=int, default=64, help="decoded tokens per window")
    ap.add_argument("--budget", type=int, default=512)
    ap.add_argument("--batch", type=int, default=12)
    a = ap.parse_args()
    torch.set_num_threads(1)
    env = worker_env(a.model, None, "default", "cpu", 1)
    lm, cfg = env["lm"], env["cfg"]
    every = A.text_windows(lm, env["text"], a.length, 96, scored=a.decode)
    wins = every[:: max(1, 96 // a.windows)][: a.windows]
    specs = [A.parse_method(x, cfg.policy, cfg.layout.head_dim)
             for x in ("full", *(f"ds@{a.budget}/{v}" for v in VARIANTS))]
    own = DoubleSparsity._quantise
    for name, quantise in (("its code's (asymmetric, 2^b levels)", own),
                           ("symmetric, 2^(b-1)-1 levels a side", _symmetric)):
        DoubleSparsity._quantise = quantise           # type: ignore[method-assign]
        t = time.process_time()
        rows = A.perplexity(lm, specs, cfg, wins, a.length - a.decode, batch=a.batch)
        print(f"{name}: {a.windows} windows of {a.length} tokens, {a.decode} decoded each")
        for r in rows:
            rel = 100 * (r["ppl"] / rows[0]["ppl"] - 1)
            print(f"  {r['label']:18s} ppl {r['ppl']:8.3f}  {rel:+8.2f} %")
        print(f"  {time.process_time() - t:.0f} CPU s")
    DoubleSparsity._quantise = own                    # type: ignore[method-assign]


if __name__ == "__main__":
    main()
