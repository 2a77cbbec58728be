"""Decode speed of the accuracy harness with full KV against plain ``transformers`` generation
on the same model, machine and thread count (a benchmark, not a test).

    python benchmarks/accuracy_speed.py --model smollm2-135m --prompt 2048 --new 64

Both sides prefill the same prompt once (not timed in the tokens/s), then decode ``--new``
tokens greedily, batch 1: the harness through :func:`hikv.model.lm.runner.step` with a full-KV
:class:`~hikv.model.lm.runner.Sequence` (the golden model's attention and byte accounts per step);
``transformers`` through the model's own ``sdpa`` attention and its ``DynamicCache``
(``model(next, past_key_values=...)``, what ``generate`` does per token), and ``generate``
end to end. Prints tokens/s of wall time and of process CPU time (what a loaded machine does
not distort) per side and the ratio; ``--profile N`` prints the harness's
N most expensive functions (cProfile, cumulative).

``--trial N`` measures instead what one trial of a seed suite costs at ``N`` tokens, in process
CPU seconds (the machine may be loaded; CPU time is what a projection needs): the prompt pass
alone, then one trial of ``--task`` for every method of ``--suite`` under both protocols, run
with a prompt pass per protocol (each protocol's cell alone:
:func:`hikv.model.accuracy.seed_suite.run_cell`) and shared
(:func:`hikv.model.accuracy.seed_suite.run_cells`), and whether the two give the same rows
(answers, stops, bytes)::

    python benchmarks/accuracy_speed.py --trial 2048 --ppl-rows OUT/cells/ppl_2048.json

``--project CELLS`` projects a seed suite's CPU hours per length from the CPU seconds its
finished cells record (``cells/*.json`` of one length, e.g. 2k), with a prompt pass per protocol
and with the pass shared: each cell's cost is split into its trials' prompt passes
(``--prefill N=S``: measured CPU seconds of one pass at each length; lengths beyond the last are
extrapolated linearly) and the rest (decode), which is scaled by ``--step N=R`` (measured cost
of a decode step at N over the cells' length, linear beyond); sharing saves, per task, the
follow-up cell's passes while both protocols run (``min`` of their trial counts)::

    python benchmarks/accuracy_speed.py --project RUN/cells --prefill 2048=19.6,4096=38 \
        --step 4096=1.21 --lengths 2048,4096,8192
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
    ap.add_argument("--model", default=None, help="default: smollm2-135m (--trial: the "
                    "suite's model)")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--prompt", type=int, default=2048, help="prompt tokens (default 2048)")
    ap.add_argument("--new", type=int, default=64, help="decoded tokens (default 64)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per side; the median is kept")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    ap.add_argument("--trial", type=int, default=0, metavar="N",
                    help="measure one seed-suite trial at N tokens instead (see above)")
    ap.add_argument("--suite", default="seed-smollm2")
    ap.add_argument("--task", default="passkey")
    ap.add_argument("--ppl-rows", default=None,
                    help="a perplexity cell file of the suite at N (budgets over the "
                    "perplexity tolerance then do not run, as in the suite)")
    ap.add_argument("--project", default=None, metavar="CELLS",
                    help="project the suite's CPU hours from these cells (see above)")
    ap.add_argument("--prefill", default="", help="N=CPU s of one prompt pass, comma-separated")
    ap.add_argument("--step", default="", help="N=decode cost ratio to the cells' length")
    ap.add_argument("--lengths", default="2048,4096,8192")
    a = ap.parse_args()
    if a.trial:
        return trial_cost(a)
    if a.project:
        return project(a)

    import torch

    from hikv.model.accuracy.experiments import text_windows
    from hikv.model.lm.assets import essays_text
    from hikv.model.lm.runner import Sequence, lm_config, load_lm, prefill, step
    from hikv.params import MethodSpec
    from hikv.presets import get_preset

    torch.set_num_threads(a.threads)
    lm = load_lm(a.model or "smollm2-135m", cache=a.cache, device=a.device)
    cfg = lm_config(get_preset("default"), lm.shape)
    ids = text_windows(lm, essays_text(a.cache), a.prompt, 1)[0]

    def rates(t0: float, c0: float, n: int) -> tuple[float, float]:
        """(tokens/s of wall time, tokens/s of process CPU time) since (t0, c0)."""
        return n / (time.perf_counter() - t0), n / (time.process_time() - c0)

    def harness() -> tuple[tuple[float, float], list[int]]:
        seq = Sequence(lm, MethodSpec(), cfg)
        logits = prefill(lm, [seq], ids)
        out = [int(logits.argmax())]
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(a.new - 1):
            out.append(int(step(lm, [seq], [out[-1]])[0].argmax()))
        return rates(t0, c0, a.new - 1), out

    def plain() -> tuple[tuple[float, float], list[int]]:
        lm.model.set_attn_implementation("sdpa")
        try:
            with torch.inference_mode():
                x = torch.tensor([ids], device=lm.device)
                o = lm.model(input_ids=x, use_cache=True, logits_to_keep=1)
                past = o.past_key_values
                out = [int(o.logits[0, -1].argmax())]
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(a.new - 1):
                    o = lm.model(input_ids=torch.tensor([[out[-1]]], device=lm.device),
                                 past_key_values=past, use_cache=True)
                    past = o.past_key_values
                    out.append(int(o.logits[0, -1].argmax()))
                return rates(t0, c0, a.new - 1), out
        finally:
            lm.model.set_attn_implementation("hikv")

    def generate() -> tuple[float, float]:
        lm.model.set_attn_implementation("sdpa")
        try:
            with torch.inference_mode():
                x = torch.tensor([ids], device=lm.device)
                t0, c0 = time.perf_counter(), time.process_time()
                lm.model.generate(x, max_new_tokens=a.new, min_new_tokens=a.new,
                                  do_sample=False, attention_mask=torch.ones_like(x))
                return rates(t0, c0, a.new)
        finally:
            lm.model.set_attn_implementation("hikv")

    h = [harness() for _ in range(a.repeat)]
    p = [plain() for _ in range(a.repeat)]
    g = [generate() for _ in range(a.repeat)]
    h_tps = statistics.median(x[0][0] for x in h)
    p_tps = statistics.median(x[0][0] for x in p)
    g_tps = statistics.median(x[0] for x in g)
    h_cpu = statistics.median(x[0][1] for x in h)
    p_cpu = statistics.median(x[0][1] for x in p)
    g_cpu = statistics.median(x[1] for x in g)
    same = h[0][1] == p[0][1]
    print(f"model {lm.shape.name}, prompt {len(ids)} tokens, {a.new} decoded, threads "
          f"{a.threads}, device {lm.device}, median of {a.repeat}; tokens/s of wall time and "
          "of process CPU time")
    print(f"harness (full KV, golden attention)   {h_tps:7.2f} wall  {h_cpu:7.2f} CPU (decode)")
    print(f"transformers (sdpa, DynamicCache)     {p_tps:7.2f} wall  {p_cpu:7.2f} CPU (decode)")
    print(f"transformers generate (incl. prefill) {g_tps:7.2f} wall  {g_cpu:7.2f} CPU")
    print(f"harness CPU time per decoded token / transformers': {p_cpu / h_cpu:.2f} (within "
          f"2x: {p_cpu / h_cpu <= 2.0}); wall: {p_tps / h_tps:.2f}; same greedy tokens: {same}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": lm.shape.name, "prompt": len(ids), "new": a.new,
                       "threads": a.threads, "harness_tps": h_tps, "transformers_tps": p_tps,
                       "generate_tps": g_tps, "harness_cpu_tps": h_cpu,
                       "transformers_cpu_tps": p_cpu, "generate_cpu_tps": g_cpu,
                       "same_tokens": same}, f, indent=1)
    if a.profile:
        pr = cProfile.Profile()
        pr.enable()
        harness()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(a.profile)
        print(s.getvalue())
    return 0


def trial_cost(a: argparse.Namespace) -> int:
    """CPU seconds of one suite trial at ``a.trial`` tokens, both protocols, with a prompt pass
    each and with the pass shared; prints them and whether the rows agree."""
    import dataclasses
    import random

    import torch

    from hikv.model.accuracy import experiments as A
    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import (
        SEED_SUITES,
        Cell,
        run_cell,
        run_cells,
        suite_specs,
        worker_env,
    )
    from hikv.model.accuracy.tasks import make_case
    from hikv.model.lm.runner import Sequence, prefill

    suite = dataclasses.replace(SEED_SUITES[a.suite], trials=1, lengths=(a.trial,))
    env = worker_env(a.model or suite.model, a.cache, "default", a.device, a.threads)
    lm, cfg = env["lm"], env["cfg"]
    ppl = read_rows(a.ppl_rows)[0] if a.ppl_rows else []
    case = make_case(lm, a.task, a.trial, random.Random(f"0/{a.task}/{a.trial}/0"),
                     words=env["words"])
    ctx, _ = A.split_prompt(case.context, case.question, "prompt")
    t = time.process_time()
    prefill(lm, [Sequence(lm, A.parse_method("full", cfg.policy, cfg.layout.head_dim), cfg)],
            ctx)
    pre = time.process_time() - t
    pair = [Cell("task", a.trial, p, a.task) for p in ("prompt", "follow-up")]
    t = time.process_time()
    alone = {c.key: run_cell(c, suite, env, seed=0, ppl_rows=ppl) for c in pair}
    before = time.process_time() - t
    t = time.process_time()
    shared = run_cells(pair, suite, env, seed=0, ppl_rows=ppl)
    after = time.process_time() - t
    same = alone == shared
    ans = {k: sorted((r["label"], r["score_sum"]) for r in v) for k, v in shared.items()}
    n_specs = len(suite_specs(suite, cfg, a.trial))
    print(f"model {lm.shape.name}, task {a.task}, prompt {case.length} tokens, {n_specs} specs "
          f"({sum(len(v) for v in shared.values())} rows run), threads {a.threads}, "
          f"torch {torch.__version__}")
    print(f"prompt pass alone (full KV)           {pre:8.1f} CPU s")
    print(f"one trial, both protocols, a pass each {before:8.1f} CPU s")
    print(f"one trial, both protocols, shared pass {after:8.1f} CPU s")
    print(f"rows identical (answers, stops, bytes): {same}")
    if not same:
        for k in shared:
            for x, y in zip(shared[k], alone[k], strict=False):
                if x != y:
                    diff = sorted(f for f in x if x.get(f) != y.get(f))
                    print(f"  {k} {x['label']}: fields differ {diff}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": lm.shape.name, "length": a.trial, "task": a.task,
                       "prompt_tokens": case.length, "specs": n_specs, "threads": a.threads,
                       "prefill_cpu_s": pre, "trial_cpu_s_before": before,
                       "trial_cpu_s_shared": after, "rows_identical": same,
                       "scores": ans}, f, indent=1)
    return 0


def _points(text: str) -> dict[int, float]:
    return {int(k): float(v) for k, v in (x.split("=") for x in text.split(",") if x)}


def _linear(points: dict[int, float], n: int) -> float:
    """``points`` at ``n``, linear through the two largest lengths beyond them."""
    if n in points:
        return points[n]
    (n0, y0), (n1, y1) = sorted(points.items())[-2:]
    return y1 + (y1 - y0) * (n - n1) / (n1 - n0)


def project(a: argparse.Namespace) -> int:
    """CPU hours of a seed suite per length, a prompt pass per protocol / the pass shared,
    projected from the CPU seconds of finished cells of one length (see the docstring)."""
    from pathlib import Path

    from hikv.model.accuracy.io import read_rows

    cells: dict[str, tuple[float, int, dict]] = {}
    paths = sorted(Path(a.project).glob("*_*.json"))
    if not paths:
        raise SystemExit(f"{a.project}: no cell files")
    base = min(int(p.stem.rsplit("_", 1)[1]) for p in paths)
    for path in paths:
        if not path.stem.endswith(f"_{base}"):
            continue                    # projected from the shortest length's cells only
        rows, meta = read_rows(path)
        if meta.get("cpu_s") is None:
            continue
        full = [r for r in rows if r["label"] == "full"]
        if meta.get("pair_cpu_s") is not None:
            raise SystemExit(f"{path}: a shared-pass cell; project from cells run alone")
        trials = (full[0].get("windows") or 1) if full and full[0].get("ppl") is not None \
            else (full[0]["trials"] if full else 0)
        cells[path.stem] = (float(meta["cpu_s"]), int(trials), full[0] if full else {})
    pre = _points(a.prefill)
    step = {base: 1.0, **_points(a.step)}
    print(f"cells of N = {base}: {len(cells)}, {sum(c[0] for c in cells.values()):.0f} CPU s; "
          f"prompt pass {pre}, decode ratio {step}")
    total = [0.0, 0.0]
    for n in (int(x) for x in a.lengths.split(",")):
        p_n, r_n = _linear(pre, n), _linear(step, n)
        before = after = 0.0
        for key, (cpu, t, _) in cells.items():
            dec = max(0.0, cpu - t * pre[base])
            c = t * p_n + dec * r_n
            before += c
            after += c
            if "_follow-up_" in key:
                mate = cells.get(key.replace("_follow-up_", "_prompt_"))
                if mate is not None:
                    after -= min(t, mate[1]) * p_n
        total[0] += before
        total[1] += after
        print(f"N = {n}: prompt pass {p_n:.1f} CPU s, decode x{r_n:.2f}: a pass each "
              f"{before / 3600:.2f} CPU h, shared {after / 3600:.2f} CPU h")
    print(f"suite: a pass each {total[0] / 3600:.2f} CPU h, shared {total[1] / 3600:.2f} CPU h; "
          f"on 2 cores (--workers 2, ideal) {total[1] / 7200:.2f} h: within 3 h: "
          f"{total[1] / 7200 <= 3.0}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
