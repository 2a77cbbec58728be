"""Where one seed-suite trial's time goes (against a 3-hour suite target): one trial of one task,
both protocols sharing the prompt pass as ``hikv accuracy run`` does
(:func:`hikv.model.accuracy.seed_suite.run_cells`), every method of the suite that the length's
perplexity cell lets run, split into process-CPU seconds per part and per method family.

    python benchmarks/trial_profile.py --length 4096 --task passkey \
        --ppl-rows RUN/cells/ppl_4096.json --threads 1 --json OUT.json

Parts (instrumented by wrapping the harness's functions; nested calls are counted once):

* ``prompt pass``: :func:`hikv.model.lm.runner.prefill` and
  :func:`~hikv.model.lm.runner.adopt_prefill` (dense layers and full causal attention over the
  prompt, once per trial), of which
  ``method prefill hooks`` is each method's own work at the end of prefill
  (``KVCache.adopt_prefill``: SnapKV-style compaction, ThinK's channels, ...), per family;
* ``decode, dense layers``: :func:`hikv.model.lm.runner.step` minus the methods' attention, i.e. the
  transformer's projections, MLP and logits for every sequence decoded side by side;
* ``decode, golden attention``: ``Sequence._decode_layer`` per family (the method's cache:
  append, selection, attention, byte accounting), of which ``selection`` (top-k, scores,
  compaction, page bounds, channel choice) and ``byte accounting`` (reads as byte ranges,
  burst counting, :class:`~hikv.model.refs.layout.ByteAccount` sums) are listed apart;
* ``other``: case generation, tokenisation, scoring, bookkeeping of the cells.

Not a test: the numbers depend on the machine and its load (process CPU seconds, not wall).
"""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import functools
import inspect
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

#: module-level functions that build byte ranges or count bytes (patched where imported)
BYTE_FUNCS = ("contiguous", "dense_rows", "masked_records", "page_channels",
              "page_channel_runs", "account", "burst_bytes", "burst_blocks")
#: module-level selection helpers
SEL_FUNCS = ("float_topk", "stable_topk", "topk_indices", "snap_scores", "quest_scores",
             "global_topk", "page_bounds")
#: methods of the cache classes: byte accounting, selection
BYTE_METHODS = ("_accounts", "_dense_reads", "_reads", "_meta_read")
SEL_METHODS = ("_topk", "_compact", "_select_query_aware", "_k_channels", "_think",
               "_page_bounds", "_select", "_scores", "_evict", "_keep")

_FAMILY: contextvars.ContextVar[str] = contextvars.ContextVar("family", default="?")


class Clock:
    """CPU seconds per (family, part); a part already open is not counted again inside."""

    def __init__(self) -> None:
        self.t: dict[tuple[str, str], float] = {}
        self.n: dict[tuple[str, str], int] = {}
        self.open: dict[str, int] = {}

    def wrap(self, fn: Any, part: str, family_of: Any = None) -> Any:
        @functools.wraps(fn)
        def inner(*a: Any, **k: Any) -> Any:
            if self.open.get(part):
                return fn(*a, **k)
            fam = family_of(a) if family_of is not None else _FAMILY.get()
            tok = _FAMILY.set(fam) if family_of is not None else None
            self.open[part] = 1
            t0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                dt = time.process_time() - t0
                self.open[part] = 0
                if tok is not None:
                    _FAMILY.reset(tok)
                key = (fam, part)
                self.t[key] = self.t.get(key, 0.0) + dt
                self.n[key] = self.n.get(key, 0) + 1
        inner.__wrapped_part__ = part  # type: ignore[attr-defined]
        return inner


def _subclasses(cls: type) -> list[type]:
    out = [cls]
    for c in cls.__subclasses__():
        out += _subclasses(c)
    return out


def instrument(clock: Clock) -> None:
    """Wrap the harness's functions (see the module docstring)."""
    from hikv.model.accuracy import experiments as A
    from hikv.model.lm import route as lm_route
    from hikv.model.lm import runner as lm
    from hikv.model.methods import baselines, baselines_adaptive, cache
    from hikv.model.methods import hikv as hikv_cache
    from hikv.model.methods.cache import KVCache
    from hikv.model.refs import layout

    def fam_of_cache(a: tuple) -> str:
        spec = getattr(a[0], "spec", None)
        return A.family(spec) if spec is not None else type(a[0]).__name__

    for mod in (lm, lm_route, A):
        for name in ("prefill", "adopt_prefill"):
            if hasattr(mod, name):
                setattr(mod, name, clock.wrap(getattr(lm_route, name), "prompt pass",
                                              lambda a: "(all)"))
    step = clock.wrap(lm_route.step, "decode step", lambda a: "(all)")
    for mod in (lm, lm_route, A):
        if hasattr(mod, "step"):
            mod.step = step
    seq = lm_route.Sequence
    seq._decode_layer = clock.wrap(seq._decode_layer, "golden attention",
                                   lambda a: A.family(a[0].spec))
    wrapped: dict[int, Any] = {}
    for mod in (cache, baselines, baselines_adaptive, hikv_cache, layout):
        for names, part in ((BYTE_FUNCS, "byte accounting"), (SEL_FUNCS, "selection")):
            for name in names:
                f = getattr(mod, name, None)
                if f is None or not inspect.isfunction(f):
                    continue
                if id(f) not in wrapped:
                    wrapped[id(f)] = clock.wrap(f, part)
                setattr(mod, name, wrapped[id(f)])
    for cls in _subclasses(KVCache):
        for names, part in ((BYTE_METHODS, "byte accounting"), (SEL_METHODS, "selection")):
            for name in names:
                if name in cls.__dict__ and inspect.isfunction(cls.__dict__[name]):
                    setattr(cls, name, clock.wrap(cls.__dict__[name], part))
        if "adopt_prefill" in cls.__dict__:
            cls.adopt_prefill = clock.wrap(cls.__dict__["adopt_prefill"],
                                           "method prefill hooks", fam_of_cache)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="default: the suite's model")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--suite", default="seed-smollm2")
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--task", default="passkey")
    ap.add_argument("--trial", type=int, default=0, help="the trial's index (its case)")
    ap.add_argument("--ppl-rows", default=None, help="the length's perplexity cell (prunes "
                    "the methods over the tolerance, as the suite does)")
    ap.add_argument("--add-families", nargs="*", default=[])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import torch

    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import SEED_SUITES, Cell, run_cells, worker_env

    base = SEED_SUITES[a.suite]
    suite = dataclasses.replace(base, trials=1, lengths=(a.length,),
                                families=base.families + tuple(a.add_families))
    t_load = time.process_time()
    env = worker_env(a.model or suite.model, Path(a.cache) if a.cache else None, "default", "cpu",
                 a.threads)
    t_load = time.process_time() - t_load
    ppl = read_rows(Path(a.ppl_rows))[0] if a.ppl_rows else []
    clock = Clock()
    instrument(clock)
    pair = [Cell("task", a.length, p, a.task) for p in ("prompt", "follow-up")]

    # the trial's case: a.trial-th of the cell (make_case seeded as the suite seeds it)
    from hikv.model.accuracy import seed_trials
    real_case = seed_trials._TaskCell.case
    seed_trials._TaskCell.case = lambda self, lm, words, i: real_case(self, lm, words,
                                                                       i + a.trial)
    t0, w0 = time.process_time(), time.perf_counter()
    rows = run_cells(pair, suite, env, seed=0, ppl_rows=ppl)
    total, wall = time.process_time() - t0, time.perf_counter() - w0
    lm = env["lm"]
    ran = {k: [r["label"] for r in v] for k, v in rows.items()}
    prompt = clock.t.get(("(all)", "prompt pass"), 0.0)
    stepping = clock.t.get(("(all)", "decode step"), 0.0)
    fams = sorted({f for f, p in clock.t if p == "golden attention"})
    attn = {f: clock.t.get((f, "golden attention"), 0.0) for f in fams}
    sel = {f: clock.t.get((f, "selection"), 0.0) for f in fams}
    byt = {f: clock.t.get((f, "byte accounting"), 0.0) for f in fams}
    hooks = {f: v for (f, p), v in clock.t.items() if p == "method prefill hooks"}
    steps = {f: clock.n.get((f, "golden attention"), 0) for f in fams}
    dense = stepping - sum(attn.values())
    out = {"model": lm.shape.name, "length": a.length, "task": a.task, "trial": a.trial,
           "threads": a.threads, "torch": torch.__version__, "load_cpu_s": t_load,
           "trial_cpu_s": total, "trial_wall_s": wall, "prompt_pass_cpu_s": prompt,
           "method_prefill_hooks_cpu_s": hooks, "decode_step_cpu_s": stepping,
           "decode_dense_cpu_s": dense, "golden_attention_cpu_s": attn,
           "selection_cpu_s": sel, "byte_accounting_cpu_s": byt,
           "decode_layer_calls": steps, "other_cpu_s": total - prompt - stepping,
           "rows_run": ran, "command": " ".join(sys.argv),
           "answers": {k: {r["label"]: [r["scores"], r["sample"]] for r in v}
                       for k, v in rows.items()}}
    print(f"model {lm.shape.name}, N = {a.length}, task {a.task} trial {a.trial}, both "
          f"protocols (shared prompt pass), threads {a.threads}, torch {torch.__version__}")
    print(f"methods run: prompt {len(ran[pair[0].key])}, follow-up {len(ran[pair[1].key])}")
    print(f"trial total            {total:8.1f} CPU s  ({wall:.0f} s wall)")
    print(f"  prompt pass          {prompt:8.1f}  (method prefill hooks "
          f"{sum(hooks.values()):.1f})")
    print(f"  decode, dense layers {dense:8.1f}")
    print(f"  decode, golden attn  {sum(attn.values()):8.1f}  (selection "
          f"{sum(sel.values()):.1f}, byte accounting {sum(byt.values()):.1f})")
    print(f"  other                {total - prompt - stepping:8.1f}")
    print(f"{'family':40s} {'layer calls':>11s} {'attn CPU s':>10s} {'select':>8s} "
          f"{'bytes':>8s} {'prefill hook':>12s}")
    for f in sorted(fams, key=lambda f: -attn[f]):
        print(f"{f:40s} {steps[f]:11d} {attn[f]:10.2f} {sel[f]:8.2f} {byt[f]:8.2f} "
              f"{hooks.get(f, 0.0):12.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
