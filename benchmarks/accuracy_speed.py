"""Decode speed of the accuracy harness with full KV against plain ``transformers`` generation
on the same model, machine and thread count (a benchmark, not a test).

    python benchmarks/accuracy_speed.py --model smollm2-135m --prompt 2048 --new 64

Both sides prefill the same prompt once (not timed in the tokens/s), then decode ``--new``
tokens greedily, batch 1: the harness through :func:`hikv.model.lm.step` with a full-KV
:class:`~hikv.model.lm.Sequence` (the golden model's attention and byte accounts per step);
``transformers`` through the model's own ``sdpa`` attention and its ``DynamicCache``
(``model(next, past_key_values=...)``, what ``generate`` does per token), and ``generate``
end to end. Prints one line per side and the ratio; ``--profile N`` prints the harness's
N most expensive functions (cProfile, cumulative).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--prompt", type=int, default=2048, help="prompt tokens (default 2048)")
    ap.add_argument("--new", type=int, default=64, help="decoded tokens (default 64)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per side; the median is kept")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    a = ap.parse_args()

    import torch

    from hikv.model.accuracy import text_windows
    from hikv.model.assets import essays_text
    from hikv.model.lm import Sequence, lm_config, load_lm, prefill, step
    from hikv.params import MethodSpec
    from hikv.presets import get_preset

    torch.set_num_threads(a.threads)
    lm = load_lm(a.model, cache=a.cache, device=a.device)
    cfg = lm_config(get_preset("default"), lm.shape)
    ids = text_windows(lm, essays_text(a.cache), a.prompt, 1)[0]

    def harness() -> tuple[float, list[int]]:
        seq = Sequence(lm, MethodSpec(), cfg)
        logits = prefill(lm, [seq], ids)
        out = [int(logits.argmax())]
        t0 = time.perf_counter()
        for _ in range(a.new - 1):
            out.append(int(step(lm, [seq], [out[-1]])[0].argmax()))
        return (a.new - 1) / (time.perf_counter() - t0), out

    def plain() -> tuple[float, list[int]]:
        lm.model.set_attn_implementation("sdpa")
        try:
            with torch.inference_mode():
                x = torch.tensor([ids], device=lm.device)
                o = lm.model(input_ids=x, use_cache=True, logits_to_keep=1)
                past = o.past_key_values
                out = [int(o.logits[0, -1].argmax())]
                t0 = time.perf_counter()
                for _ in range(a.new - 1):
                    o = lm.model(input_ids=torch.tensor([[out[-1]]], device=lm.device),
                                 past_key_values=past, use_cache=True)
                    past = o.past_key_values
                    out.append(int(o.logits[0, -1].argmax()))
                return (a.new - 1) / (time.perf_counter() - t0), out
        finally:
            lm.model.set_attn_implementation("hikv")

    def generate() -> float:
        lm.model.set_attn_implementation("sdpa")
        try:
            with torch.inference_mode():
                x = torch.tensor([ids], device=lm.device)
                t0 = time.perf_counter()
                lm.model.generate(x, max_new_tokens=a.new, min_new_tokens=a.new,
                                  do_sample=False, attention_mask=torch.ones_like(x))
                return a.new / (time.perf_counter() - t0)
        finally:
            lm.model.set_attn_implementation("hikv")

    h = [harness() for _ in range(a.repeat)]
    p = [plain() for _ in range(a.repeat)]
    g = [generate() for _ in range(a.repeat)]
    h_tps = statistics.median(x[0] for x in h)
    p_tps = statistics.median(x[0] for x in p)
    g_tps = statistics.median(g)
    same = h[0][1] == p[0][1]
    print(f"model {lm.shape.name}, prompt {len(ids)} tokens, {a.new} decoded, threads "
          f"{a.threads}, device {lm.device}, median of {a.repeat}")
    print(f"harness (full KV, golden attention)  {h_tps:7.2f} tokens/s (decode)")
    print(f"transformers (sdpa, DynamicCache)    {p_tps:7.2f} tokens/s (decode)")
    print(f"transformers generate (incl. prefill) {g_tps:6.2f} tokens/s")
    print(f"harness time per decoded token / transformers': {p_tps / h_tps:.2f} (within 2x: "
          f"{p_tps / h_tps <= 2.0}); same greedy tokens: {same}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": lm.shape.name, "prompt": len(ids), "new": a.new,
                       "threads": a.threads, "harness_tps": h_tps, "transformers_tps": p_tps,
                       "generate_tps": g_tps, "same_tokens": same}, f, indent=1)
    if a.profile:
        pr = cProfile.Profile()
        pr.enable()
        harness()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(a.profile)
        print(s.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
