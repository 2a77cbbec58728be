"""Why PyramidKV's kept sets differ from kvpress's: each differing token, scored by our golden
model (a benchmark, not CI; run after ``kvpress_crosscheck.py``).

Reads ``<out>/worker_out.pt`` of a ``kvpress_crosscheck.py --out <out> --methods pyramidkv``
run (same ``--tokens``, ``--budget``, ``--window``, ``--windows``), re-runs our PyramidKV
with kvpress's pair settings (:func:`kvpress_crosscheck.pairs`, "PyramidKV, our layer
budgets"), keeps our prefix scores (SnapKV's pooled window attention, ``[Hkv, n - w]`` per
layer) and, for every (window, layer, KV head) whose kept sets differ, compares our scores of
the tokens only we keep with those of the tokens only kvpress keeps: ``tie`` when the lowest of
ours equals the highest of theirs (a max-pooling plateau cut by the budget: we keep the lower
positions, kvpress's ``torch.topk`` other ones), ``near`` when they differ by less than
1e-4 relative, ``far`` otherwise (a real disagreement). Prints the mean Jaccard per layer and
the counts; writes ``<out>/ties.json``.

    python benchmarks/kvpress_ties.py --out OUT --tokens 1024 --budget 256
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kvpress_crosscheck as X  # noqa: E402

PAIR = "PyramidKV, our layer budgets"


def classify(ours_only: list[float], theirs_only: list[float]) -> str:
    """``tie``, ``near`` or ``far``: how the lowest score among the tokens only we keep compares
    with the highest among those only kvpress keeps (our scores)."""
    lo, hi = min(ours_only), max(theirs_only)
    if lo == hi:
        return "tie"
    return "near" if abs(hi - lo) < 1e-4 * max(abs(hi), abs(lo), 1e-30) else "far"


def main(argv: list[str] | None = None) -> int:
    import torch

    from hikv.model.methods import baselines_adaptive as BA
    from hikv.presets import MODEL_SHAPES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the kvpress_crosscheck.py output folder")
    ap.add_argument("--model", default="smollm2-135m")
    for name, default, _, text in X.INT_OPTIONS:
        ap.add_argument(f"--{name}", type=int, default=default, help=text)
    args = ap.parse_args(argv)
    out = Path(args.out)
    shape = MODEL_SHAPES[args.model]
    pair = [p for p in X.pairs(args.budget, args.tokens, window=args.window,
                               layers=shape.layers) if p.name == PAIR]
    scores: list[dict[int, Any]] = []
    orig = BA.PyramidKV.end_prefill.__func__

    def keep_scores(cls: Any, caches: Any) -> None:
        todo = [c for c in caches if isinstance(c, BA.PyramidKV)]
        scores.append({i: c.pending.clone() for i, c in enumerate(todo)
                       if c.pending is not None})
        orig(cls, caches)

    BA.PyramidKV.end_prefill = classmethod(keep_scores)  # type: ignore[method-assign]
    lm, wins, _ = X.prepare(out, tokens=args.tokens, decode=args.decode, windows=args.windows,
                            model=args.model)
    ours = X.run_ours(lm, wins, pair, tokens=args.tokens, decode=args.decode)["kept"][PAIR]
    theirs = torch.load(out / "worker_out.pt", weights_only=True)["kept"][PAIR]
    layers = sorted({key[1] for key in ours})
    per_layer: dict[int, list[float]] = defaultdict(list)
    kinds: Counter[str] = Counter()
    swapped = 0
    for (w, layer, h), mine in ours.items():
        a, b = set(mine), set(theirs[f"{w},{layer},{h}"])
        per_layer[layer].append(X.jaccard(a, b))
        if a == b:
            continue
        s = scores[w][layers.index(layer)][h].double()
        kinds[classify([s[i].item() for i in a - b], [s[i].item() for i in b - a])] += 1
        swapped += len(a - b)
    budgets = BA.pyramid_budgets(len(layers), args.budget, args.window, args.tokens)
    rows = [{"layer": layer, "budget": budgets[i],
             "jaccard_mean": sum(per_layer[layer]) / len(per_layer[layer]),
             "jaccard_min": min(per_layer[layer])} for i, layer in enumerate(layers)]
    for r in rows:
        print(f"layer {r['layer']:2d} budget {r['budget']:4d} Jaccard mean "
              f"{r['jaccard_mean']:.4f} min {r['jaccard_min']:.3f}")
    total = sum(len(v) for v in per_layer.values())
    mean = sum(sum(v) for v in per_layer.values()) / total
    print(f"mean Jaccard {mean:.4f} over {total} sets; {sum(kinds.values())} sets differ "
          f"({swapped} tokens swapped): {dict(kinds)}")
    (out / "ties.json").write_text(json.dumps({"pair": PAIR, "mean_jaccard": mean,
                                               "differing_sets": dict(kinds),
                                               "tokens_swapped": swapped, "layers": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
