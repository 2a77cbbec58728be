"""Accuracy of HiKV and the baselines on a real language model, with real decoding: every
attention layer runs through the golden model's KV-cache methods, which evict or select tokens
step by step as decoding proceeds.

Subcommands (each writes CSV + JSON rows, with the command, model, configuration, seed and code
version, into --out; progress goes to stdout):

  perplexity  teacher-forced perplexity on long text (windows of --window tokens; the first
              --prefix are prefilled, the rest decoded token by token) and bytes per step
  passkey     passkey retrieval per (length, depth) cell (classic repeated filler or essays)
  tasks       RULER-style tasks (passkey, niah_single, niah_multikey, niah_multivalue, vt) per
              length, answers generated through each method's cache and string-matched
  fidelity    per-layer relative error and cosine of attention outputs vs full KV
  capture     save real q, k, v and attention probabilities of chosen layers (a .pt file)
  table       the iso-accuracy table from perplexity and passkey/tasks JSON files, per
              --protocol and --length (with --tasks also the non-inferiority test: one-sided
              95 % bounds, margins 1 % perplexity and 5 points per task)
  run         the whole study (Stage I and baselines, Stage II, layout, fidelity, iso table,
              plots) as one resumable run; --suite seed-smollm2 / seed-gemma: the protocol x
              length x task grid of cells (resumable per cell, --workers N, --executor ray)
  status      where a seed-suite run folder stands (cells written, cells in progress with
              their windows or trials and the methods still running); reads only

Protocols (--protocol): prompt = context and question prefilled but the question's last token,
which is decoded through the method's cache (compression decided at the end of prefill with the
question in the observation window; the primary protocol); follow-up = the context prefilled,
the question fed through decode afterwards. --question prefill|decode are their aliases.

Methods are labels: full, h2o@B[/avg], snapkv@B, quest@B, sparq@B[/rR], ds@B[/rR],
streamingllm@B, tova@B, adakv@B, gadakv@B, pyramidkv@B,
hikv-{evict,qa,none}@B[/lowbitN][/k:{static,query_channels,channel_groups}N[gG]][/v:staticN].
A label without @B (e.g. h2o, hikv-qa) is expanded over --budgets. Bytes are per decode step
per (layer, KV head) of the layers the method manages, ideal and at burst granularity (the
preset's KVLayout), metadata included. --model takes an asset name (smollm2-135m,
gemma3-270m; fetched if absent), a .gguf file, or a Hugging Face model folder."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HELP = "accuracy of HiKV and baselines on a real LM (perplexity, passkey, fidelity, table, run)"


def _common(p: argparse.ArgumentParser, out_required: bool = True) -> None:
    p.add_argument("--model", default=None,
                   help="asset name, .gguf file or Hugging Face model folder "
                        "(default: smollm2-135m; a seed suite's own model)")
    p.add_argument("--preset", default="default",
                   help="preset for layout, HiKV policy fields and sorter keys (default: default)")
    p.add_argument("--cache", type=Path, default=None,
                   help="asset cache folder (default: $HIKV_CACHE or ~/.cache/hikv)")
    p.add_argument("--out", type=Path, required=out_required, help="output folder")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: the work is many small operations, and "
                        "extra threads slow it down badly on a shared machine)")
    p.add_argument("--batch", type=int, default=64,
                   help="methods decoded side by side in one model call (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of passkey keys and offsets")
    p.add_argument("--device", default="cpu",
                   help="where the model's dense layers and the prompt attention run: cpu, "
                        "cuda, cuda:N or auto (default cpu; the golden KV caches run on the "
                        "CPU)")


def _protocol(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--protocol", choices=("prompt", "follow-up"), default=None,
                   help=f"prompt: the question is in the prompt (all but its last token "
                        f"prefilled); follow-up: it is fed through decode after the context "
                        f"(default {default})")
    p.add_argument("--question", choices=("decode", "prefill"), default=None,
                   help="alias of --protocol: decode = follow-up, prefill = prompt")
    p.set_defaults(protocol_default=default)


def _chosen_protocol(args: argparse.Namespace) -> str:
    from hikv.model.accuracy.iso import QUESTION_ALIASES
    from hikv.params import ParamError

    p, q = args.protocol, args.question
    if p is not None and q is not None and QUESTION_ALIASES[q] != p:
        raise ParamError(f"--protocol {p} and --question {q} disagree (--question {q} is "
                         f"--protocol {QUESTION_ALIASES[q]})")
    return p or (QUESTION_ALIASES[q] if q else args.protocol_default)


def _force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="replace this subcommand's files of an earlier run (otherwise an "
                        "existing one is an error)")


#: The files each subcommand writes into --out (refused without --force when present).
OWNED = {"perplexity": ("perplexity.csv", "perplexity.json"),
         "passkey": ("passkey.csv", "passkey.json"),
         "tasks": ("tasks.csv", "tasks.json"),
         "fidelity": ("fidelity.csv", "fidelity.json", "fidelity.png"),
         "table": ("iso_table.csv", "iso_table.json", "reductions.csv", "reductions.json",
                   "noninf_table.csv", "noninf_table.json", "noninf_families.csv",
                   "noninf_families.json")}


def _methods(p: argparse.ArgumentParser, default: list[str]) -> None:
    p.add_argument("--methods", nargs="+", default=default, metavar="LABEL",
                   help=f"method labels (default: {' '.join(default)})")
    p.add_argument("--budgets", nargs="+", type=int, default=[64, 256],
                   help="budgets for labels without @B (default: 64 256)")


_MODEL = "smollm2-135m"
_DEFAULT_METHODS = ["full", "h2o", "snapkv", "quest", "sparq", "ds", "hikv-evict", "hikv-qa"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="what", metavar="WHAT", required=True)
    a = sub.add_parser("perplexity", help="teacher-forced perplexity and bytes per step")
    _common(a)
    _methods(a, _DEFAULT_METHODS)
    a.add_argument("--windows", type=int, default=4, help="text windows (default 4)")
    a.add_argument("--window", type=int, default=2048, help="tokens per window (default 2048)")
    a.add_argument("--prefix", type=int, default=1024,
                   help="prefilled tokens per window; the rest is decoded (default 1024)")
    _force(a)

    b = sub.add_parser("passkey", help="passkey retrieval accuracy per length and depth")
    _common(b)
    _methods(b, _DEFAULT_METHODS)
    b.add_argument("--lengths", nargs="+", type=int, default=[1024, 2048])
    b.add_argument("--depths", nargs="+", type=float, default=[0.1, 0.5, 0.9])
    b.add_argument("--trials", type=int, default=6, help="trials per cell (default 6)")
    b.add_argument("--filler", choices=("classic", "essays"), default="classic")
    _protocol(b, "follow-up")
    _force(b)

    t = sub.add_parser("tasks", help="RULER-style tasks per length and protocol")
    _common(t)
    _methods(t, _DEFAULT_METHODS)
    t.add_argument("--tasks", nargs="+", default=["passkey", "niah_single"],
                   help="passkey niah_single niah_multikey niah_multivalue vt "
                        "(default: passkey niah_single)")
    t.add_argument("--lengths", nargs="+", type=int, default=[2048],
                   help="prompt + generated tokens per case (default 2048)")
    t.add_argument("--trials", type=int, default=20, help="cases per task cell (default 20)")
    t.add_argument("--protocols", nargs="+", default=["prompt"], metavar="PROTOCOL",
                   help="prompt and/or follow-up (default prompt)")
    _force(t)

    c = sub.add_parser("fidelity", help="per-layer attention-output error vs full KV")
    _common(c)
    _methods(c, [m for m in _DEFAULT_METHODS if m != "full"])
    c.add_argument("--tokens", type=int, default=1536, help="tokens in all (default 1536)")
    c.add_argument("--prefix", type=int, default=1024, help="prefilled tokens (default 1024)")
    _force(c)

    d = sub.add_parser("capture", help="save real q, k, v and attention probabilities (.pt)")
    _common(d, out_required=False)
    d.add_argument("--layers", nargs="+", type=int, default=[0],
                   help="layer indices (default 0)")
    d.add_argument("--tokens", type=int, default=1088, help="tokens in all (default 1088)")
    d.add_argument("--prefix", type=int, default=1024, help="prefilled tokens (default 1024)")
    d.add_argument("--prob-rows", type=int, default=32,
                   help="last prompt queries whose probabilities are saved (default 32)")
    d.add_argument("--file", type=Path, required=True, help="output .pt file")
    _force(d)

    e = sub.add_parser("table", help="iso-accuracy table from perplexity/passkey JSON files")
    e.add_argument("--perplexity", nargs="+", type=Path, required=True, help="JSON files")
    e.add_argument("--passkey", nargs="*", type=Path, default=[], help="JSON files")
    e.add_argument("--tasks", nargs="*", type=Path, default=[],
                   help="task JSON files (`hikv accuracy tasks`; with --protocol and --length)")
    e.add_argument("--protocol", default=None,
                   help="use only rows of this protocol (prompt or follow-up); needed with "
                        "--tasks")
    e.add_argument("--length", type=int, default=None,
                   help="use only rows of this length (perplexity: window); needed with --tasks")
    e.add_argument("--acc-tol", type=float, default=0.01,
                   help="with --tasks: allowed task accuracy drop (default 0.01 = one point)")
    e.add_argument("--ppl-tol", type=float, default=0.01,
                   help="allowed relative perplexity increase (default 0.01)")
    e.add_argument("--passkey-tol", type=float, default=0.0,
                   help="allowed passkey accuracy drop (default 0)")
    e.add_argument("--hikv", default=None,
                   help="HiKV family the reductions are relative to (default: the reached "
                        "HiKV family with the fewest burst bytes)")
    e.add_argument("--out", type=Path, required=True, help="output folder")
    e.add_argument("--iso-file", type=Path, default=None, metavar="FILE",
                   help="also write the operating points for `hikv report --iso FILE` "
                        "(hikv.iso_accuracy/1; the config is the perplexity JSON's)")
    _force(e)

    f = sub.add_parser("run", help="the whole study, resumable (see hikv.model.accuracy.suite"
                       " and hikv.model.accuracy.seed_suite)")
    _common(f)
    f.add_argument("--suite", default="full",
                   help="full, gemma, long, quick, smoke, or a seed suite: seed-smollm2, "
                        "seed-gemma, seed-smoke (default full)")
    f.add_argument("--redo", action="store_true", help="rerun phases whose results exist")
    f.add_argument("--workers", type=int, default=1,
                   help="seed suites: cells run in this many processes (default 1)")
    f.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="seed suites: local processes, or Ray (pip install -e \".[ray]\"; "
                        "joins RAY_ADDRESS or starts a local instance)")
    f.add_argument("--ppl-tol", type=float, default=0.01)
    f.add_argument("--passkey-tol", type=float, default=0.0)
    f.add_argument("--tables-only", action="store_true",
                   help="seed suites: run no cell, build the tables from the cells on disk")
    f.add_argument("--suite-lengths", type=int, nargs="+", default=None, metavar="N",
                   help="seed suites: run only these of the suite's lengths (the same --out "
                        "resumes with more later)")
    f.add_argument("--families", nargs="+", default=None, metavar="LABEL",
                   help="seed suites: method families (labels without @B) replacing the "
                        "suite's; --add-families appends to them")
    f.add_argument("--redo-families", nargs="+", default=(), metavar="LABEL",
                   help="seed suites: measure these families again in the cells on disk (their "
                        "rows and skip records leave the cell files; the run measures just "
                        "them), e.g. after their method's code changed")
    f.add_argument("--screen", nargs="+", default=(), metavar="TASK",
                   help="seed suites: these tasks' cells (or 'all') run full KV alone first "
                        "and the methods only if the task filter keeps the task; the rows "
                        "are the same either way: worth it for tasks the filter is expected "
                        "to drop (a dropped task saves every method's answers, a kept one "
                        "costs full KV's trials twice). A task dropped at a shorter length "
                        "of the suite is screened anyway")
    f.add_argument("--add-families", nargs="+", default=(), metavar="LABEL",
                   help="seed suites: extra families (e.g. hikv-evict/v:static48/k:think32); "
                        "cells on disk run only the new methods")
    f.add_argument("--variants", action="store_true",
                   help="seed suites: add the methods at their authors' settings and HiKV's "
                        "bit and channel variants (DS r=d/8 4-bit and r=d/2 2-bit labels, "
                        "SparQ r = d/16, d/8, d/2, HiKV query-aware from 2/3-bit keys and a "
                        "calibrated half of the channels, the seed HiKV's Stage II on it)")
    f.add_argument("--budget-step", type=float, default=None, metavar="X",
                   help="seed suites: insert budgets in geometric steps of X between the "
                        "suite's at each length (1.4142 = sqrt(2) halves the factor-of-2 "
                        "grid; (1, 2]); cells on disk run only the new budgets")
    f.add_argument("--windows", type=int, default=None,
                   help="seed suites: perplexity windows per length (default: the suite's); "
                        "rows measured over other windows are measured again")
    f.add_argument("--trials", type=int, default=None,
                   help="seed suites: trials per task cell (default: the suite's); rows "
                        "planned with other trials are measured again")
    f.add_argument("--suite-protocols", nargs="+", default=None, metavar="PROTOCOL",
                   choices=("prompt", "follow-up"),
                   help="seed suites: run only these protocols (default: the suite's)")
    f.add_argument("--prune-for", choices=("point", "noninferiority"), default=None,
                   help="seed suites: what the adaptive task cells keep running for: the "
                        "point rule (default) or the non-inferiority test (a method stops "
                        "only once it can no longer be non-inferior: perplexity bound >= 1 "
                        "%%, best-case task score below full KV's - 5 points)")
    f.add_argument("--ppl-looks", type=int, nargs="+", default=None, metavar="WINDOWS",
                   help="seed suites with --prune-for noninferiority: a sequential perplexity "
                        "cell; after each of these window counts every method whose test "
                        "decides stops (the error split over the looks, half to the last; "
                        "full KV runs every window), e.g. 6 12 24 48")
    f.add_argument("--task-top-budget", action="store_true",
                   help="seed suites: each family's largest budget runs the task cells even "
                        "where its perplexity already rules out iso-accuracy (its retrieval "
                        "measured beside its verdict, until it can no longer pass the task); "
                        "cells on disk run just those")

    g = sub.add_parser("status", help="where a seed-suite run folder stands: cells written, "
                       "cells in progress, the run writing into it (reads only)")
    g.add_argument("--out", type=Path, required=True,
                   help="the folder of a `hikv accuracy run --suite seed-...` run")
    g.add_argument("--each", action="store_true",
                   help="every method's verdict so far in a perplexity cell in progress "
                        "(default: the non-inferior ones)")


def _status(args: argparse.Namespace) -> int:
    from hikv.model.accuracy.status import status_lines, suite_status

    print("\n".join(status_lines(suite_status(args.out), each=args.each)))
    return 0


def _seed_suite(suite: Any, args: argparse.Namespace) -> Any:
    """The seed suite with ``--suite-lengths``, ``--families`` and ``--add-families``."""
    import dataclasses

    from hikv.params import ParamError

    if args.suite_lengths:
        bad = [n for n in args.suite_lengths if n not in suite.lengths]
        if bad:
            raise ParamError(f"--suite-lengths {bad} are not lengths of suite {suite.name!r}: "
                             f"allowed {list(suite.lengths)}")
        suite = dataclasses.replace(suite, lengths=tuple(args.suite_lengths))
    fams = tuple(args.families) if args.families else suite.families
    extra = tuple(args.add_families)
    if args.variants:
        from hikv.model.accuracy.seed_spec import variant_families
        from hikv.presets import get_model_shape

        if not suite.model:
            raise ParamError(f"--variants: suite {suite.name!r} has no model to size them for")
        extra += variant_families(get_model_shape(suite.model).head_dim)
    fams += tuple(f for f in dict.fromkeys(extra) if f not in fams)
    for f in fams:
        if "@" in f or f == "full":
            raise ParamError(f"--families {f!r}: a family is a method label without @B "
                             "(e.g. snapkv, hikv-qa/lowbit4), not 'full'")
    bad = [f for f in args.redo_families if f not in fams]
    if bad:
        raise ParamError(f"--redo-families {bad}: not families of this run (allowed: "
                         f"{list(fams)})")
    if args.redo_families and args.tables_only:
        raise ParamError("--redo-families measures methods again: it cannot go with "
                         "--tables-only")
    more: dict[str, Any] = {}
    if args.budget_step is not None:
        more["budget_step"] = args.budget_step
    if args.windows is not None:
        more["ppl_windows"] = args.windows
    if args.trials is not None:
        more["trials"] = args.trials
    if args.suite_protocols:
        more["protocols"] = tuple(dict.fromkeys(args.suite_protocols))
    if args.prune_for is not None:
        more["prune"] = args.prune_for
    if args.ppl_looks is not None:
        more["ppl_looks"] = tuple(args.ppl_looks)
    if args.task_top_budget:
        more["task_top"] = True
    return dataclasses.replace(suite, families=fams, **more)


def _expand(labels: list[str], budgets: list[int]) -> list[str]:
    out = []
    for lab in labels:
        head = lab.split("/")[0]
        if lab == "full" or "@" in head or head == "hikv-none":
            out.append(lab)
        else:
            rest = lab[len(head):]
            out += [f"{head}@{b}{rest}" for b in budgets]
    return out


def run(args: argparse.Namespace) -> int:
    import time

    import torch

    from hikv.params import ParamError

    if args.what == "status":          # reads the folder only: no lock, no torch
        return _status(args)
    if getattr(args, "threads", 1) < 1:
        raise ParamError(f"--threads = {args.threads} is out of range: allowed >= 1")
    _check_numbers(args)
    if args.what == "table":
        _check_inputs(args)
    # the suite and its flags are checked before --out is taken (a refused run leaves no trace)
    run_suite_of = _run_suite_of(args) if args.what == "run" else (False, None)
    _prepare_out(args)
    torch.set_num_threads(getattr(args, "threads", 1))
    if args.what == "table":
        return _table(args)
    if args.what != "run" and args.model is None:
        args.model = _MODEL

    from hikv.model.accuracy import experiments as A
    from hikv.model.accuracy.io import code_version, plot_fidelity, write_rows
    from hikv.model.accuracy.iso import passkey_by_label
    from hikv.model.lm.assets import essays_text
    from hikv.model.lm.runner import lm_config, load_lm
    from hikv.params import to_dict
    from hikv.presets import get_preset

    if args.what == "run":
        from hikv.model.accuracy.seed_suite import run_seed_suite
        from hikv.model.accuracy.suite import run_suite

        seed_suite, suite = run_suite_of
        if seed_suite:
            run_seed_suite(suite, args.out, model=args.model or suite.model or _MODEL,
                           preset=args.preset, cache=args.cache,
                           seed=args.seed, batch=args.batch, workers=args.workers,
                           executor=args.executor, device=args.device, threads=args.threads,
                           redo=args.redo, tables_only=args.tables_only, argv=sys.argv,
                           remeasure=tuple(args.redo_families), screen=tuple(args.screen))
            return 0
        args.model = args.model or _MODEL
        run_suite(args.model, args.out, suite=suite, preset=args.preset,
                  cache=args.cache, redo=args.redo, batch=args.batch, ppl_tol=args.ppl_tol,
                  passkey_tol=args.passkey_tol, seed=args.seed, argv=sys.argv)
        return 0

    t0 = time.perf_counter()
    with _as_param_error((ValueError, KeyError, IndexError, EOFError), lambda e: (
            f"--model {args.model}: cannot be read as a model ({type(e).__name__}: "
            f"{str(e)[:200]}); is the file complete? fetch it again "
            "(`hikv fetch-assets`) or give another .gguf file")):
        lm = load_lm(args.model, cache=args.cache, device=args.device)
    cfg = lm_config(get_preset(args.preset), lm.shape)
    print(f"model {lm.shape.name}: {lm.shape.layers} layers, d = {lm.shape.head_dim}, "
          f"loaded in {lm.load_s:.0f} s")
    meta = {"command": " ".join(sys.argv), "model": args.model, "model_source": lm.source,
            "preset": args.preset, "config": to_dict(cfg), "seed": args.seed,
            "code_version": code_version(), "device": str(lm.device)}
    if args.what == "capture":
        if args.tokens <= args.prefix:
            raise ParamError(f"--tokens = {args.tokens} must exceed --prefix = {args.prefix}")
        ids = A.text_windows(lm, essays_text(args.cache), args.tokens, 1)[0]
        data = A.capture(lm, cfg, ids, args.layers, args.prefix, prob_rows=args.prob_rows)
        data["meta"].update(meta)
        import io as _stdio

        from hikv.io import atomic_write_bytes

        buf = _stdio.BytesIO()
        torch.save(data, buf)
        atomic_write_bytes(args.file, buf.getvalue())
        print(f"captured layers {args.layers} ({args.tokens} tokens, {args.prefix} prefilled) "
              f"-> {args.file}")
        return 0
    labels = _expand(args.methods, args.budgets)
    specs = [A.parse_method(lab, cfg.policy, lm.shape.head_dim) for lab in labels]
    print(f"methods: {' '.join(s.label for s in specs)}")
    if args.what == "perplexity":
        wins = A.text_windows(lm, essays_text(args.cache), args.window, args.windows)
        rows = A.perplexity(lm, specs, cfg, wins, args.prefix, batch=args.batch, log=print)
        name = "perplexity"
        for r in rows:
            print(f"{r['label']:42s} ppl {r['ppl']:8.3f}  bytes/step/(layer,head) ideal "
                  f"{r['bytes_ideal']:9.0f} burst {r['bytes_burst']:9.0f}")
    elif args.what == "passkey":
        text = essays_text(args.cache) if args.filler == "essays" else None
        proto = _chosen_protocol(args)
        rows = A.passkey(lm, specs, cfg, lengths=args.lengths, depths=args.depths,
                         trials=args.trials, filler=args.filler, protocol=proto,
                         essay_text=text, seed=args.seed, batch=args.batch, log=print)
        name = "passkey"
        agg = passkey_by_label(rows)
        for lab, (c, n) in agg.items():
            print(f"{lab:42s} passkey ({proto}) {c}/{n}")
    elif args.what == "tasks":
        from hikv.model.accuracy.tasks import essay_words

        words = essay_words(essays_text(args.cache))
        rows = []
        for n in args.lengths:
            for p in args.protocols:
                for task in args.tasks:
                    rows += A.task_accuracy(lm, specs, cfg, task=task, length=n,
                                            trials=args.trials, protocol=p, seed=args.seed,
                                            words=words, batch=args.batch, log=print)
        name = "tasks"
        for r in rows:
            print(f"{r['label']:42s} {r['task']:16s} {r['protocol']:9s} N={r['length']:6d} "
                  f"{r['score_sum']:g}/{r['trials']} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]")
    else:
        if args.tokens <= args.prefix:
            raise ParamError(f"--tokens = {args.tokens} must exceed --prefix = {args.prefix}")
        ids = A.text_windows(lm, essays_text(args.cache), args.tokens, 1)[0]
        rows = A.fidelity(lm, specs, cfg, ids, args.prefix, batch=args.batch, log=print)
        name = "fidelity"
        plot_fidelity(args.out / "fidelity.png", rows, title=f"{lm.shape.name}")
        for r in rows:
            print(f"{r['label']:42s} layer {r['layer']:3d} rel err {r['rel_err_mean']:.4f} "
                  f"cos {r['cosine_mean']:.5f}")
    path = write_rows(args.out, name, rows, {**meta, "wall_s": time.perf_counter() - t0})
    print(f"wrote {path} and {path.with_suffix('.csv')} in {time.perf_counter() - t0:.0f} s")
    return 0


@contextmanager
def _as_param_error(errors: tuple[type[Exception], ...],
                    message: Callable[[Exception], str]) -> Iterator[None]:
    """Re-raise one of ``errors`` from the block (a ParamError as it is) as a ParamError of
    ``message(error)``, without the chained traceback."""
    from hikv.params import ParamError

    try:
        yield
    except errors as e:
        if isinstance(e, ParamError):
            raise
        raise ParamError(message(e)) from None


def _table(args: argparse.Namespace) -> int:
    from hikv.model.accuracy import experiments as A
    from hikv.model.accuracy.io import markdown_table, read_rows, write_rows
    from hikv.model.accuracy.iso import (
        NI_LEVEL,
        PPL_MARGIN,
        TASK_MARGIN,
        noninferiority_table,
    )
    from hikv.params import ParamError

    ni: tuple[list, list] = ([], [])
    loaded = [read_rows(p) for p in args.perplexity]
    with _as_param_error((KeyError, TypeError, ValueError, AttributeError), lambda e: (
            f"--perplexity/--passkey/--tasks: the rows are not those of `hikv accuracy "
            f"perplexity` / `passkey` / `tasks` ({type(e).__name__}: {e}); give files they "
            "wrote")):
        ppl = A.select_rows([r for rows, _ in loaded for r in rows], protocol=args.protocol,
                            length=args.length)
        pk = A.select_rows([r for p in args.passkey for r in read_rows(p)[0]],
                           protocol=args.protocol, length=args.length)
        if not ppl:
            raise ParamError(f"--perplexity: no rows of length {args.length}")
        if args.tasks:
            if args.protocol is None or args.length is None:
                raise ParamError("--tasks needs --protocol and --length (one iso table each)")
            if args.passkey:
                raise ParamError("use --passkey or --tasks, not both")
            tk = [r for p in args.tasks for r in read_rows(p)[0]]
            iso = A.iso_table_tasks(ppl, tk, protocol=args.protocol, length=args.length,
                                    ppl_tol=args.ppl_tol, acc_tol=args.acc_tol)
            ni = noninferiority_table(ppl, tk, length=args.length, protocol=args.protocol)
        else:
            both = {r.get("protocol") or A.QUESTION_ALIASES.get(r.get("question") or "", "")
                    for r in pk} - {""}
            if len(both) > 1:
                raise ParamError(f"--passkey rows of protocols {sorted(both)}: pass --protocol "
                                 "(one iso table per protocol, never mixed)")
            iso = A.iso_table(ppl, pk, ppl_tol=args.ppl_tol, passkey_tol=args.passkey_tol)
            for r in iso:
                r.update({"protocol": args.protocol, "length": args.length})
    meta = {"command": " ".join(sys.argv), "perplexity": [str(p) for p in args.perplexity],
            "passkey": [str(p) for p in args.passkey], "tasks": [str(p) for p in args.tasks],
            "protocol": args.protocol, "length": args.length}
    write_rows(args.out, "iso_table", iso, {**meta, "test": (
        f"point rule: perplexity within {args.ppl_tol:g} of full KV's and task/passkey "
        f"accuracy at least full KV's minus {args.acc_tol if args.tasks else args.passkey_tol:g}"
    )})
    if args.tasks:
        test = {"level": NI_LEVEL, "ppl_margin": PPL_MARGIN, "task_margin": TASK_MARGIN}
        write_rows(args.out, "noninf_table", ni[0], {**meta, **test})
        write_rows(args.out, "noninf_families", ni[1], {**meta, **test})
    fam = args.hikv
    if fam is None:
        hk = [r for r in iso if r["family"].startswith("hikv-") and r["reached"]]
        fam = min(hk, key=lambda r: r["bytes_burst"])["family"] if hk else None
    red = A.reductions(iso, fam) if fam else []
    write_rows(args.out, "reductions", red, meta)
    if args.iso_file is not None:
        tol = args.acc_tol if args.tasks else args.passkey_tol
        _write_iso_file(args, iso, fam, ppl, loaded[0][1], tol)
    print(markdown_table(iso, [("family", "method", ""), ("iso_budget", "iso budget", ""),
                               ("ppl", "ppl", ".3f"), ("ppl_rel", "Δppl", "+.4f"),
                               ("passkey_correct", "pk ok", ""), ("passkey_trials", "of", ""),
                               ("bytes_ideal", "bytes ideal", ".0f"),
                               ("bytes_burst", "bytes burst", ".0f")]))
    if red:
        print()
        print(markdown_table(red, [("baseline", "baseline", ""), ("hikv", "HiKV", ""),
                                   ("x_ideal", "x ideal", ".2f"), ("x_burst", "x burst", ".2f")]))
    if args.tasks:
        print(f"\nNon-inferiority (one-sided {100 * NI_LEVEL:.0f} %; margins "
              f"{100 * PPL_MARGIN:g} % perplexity, {100 * TASK_MARGIN:g} points per task):")
        print(markdown_table(ni[1], [("family", "method", ""), ("verdict", "verdict", ""),
                                     ("iso_budget_low", "iso low", ""),
                                     ("iso_budget", "iso budget", ""),
                                     ("verdicts", "per budget", "")]))
    return 0



def _write_iso_file(args: argparse.Namespace, iso: list[dict], fam: str | None,
                    ppl: list[dict], meta: dict, acc_tol: float) -> None:
    """``meta``: the first perplexity file's metadata (its configuration and model)."""
    from hikv.io import write_json
    from hikv.model.accuracy import experiments as A
    from hikv.params import Config, ParamError, from_dict

    if "config" not in meta:
        raise ParamError(f"--perplexity {args.perplexity[0]}: its metadata has no 'config' "
                         "(written by an older hikv); rerun the perplexity phase")
    cfg = from_dict(Config, meta["config"])
    data = A.iso_accuracy_file(
        iso, cfg, hikv_family=fam, ppl_tol=args.ppl_tol, passkey_tol=acc_tol,
        model=str(meta.get("model", "")), preset=str(meta.get("preset", cfg.name)),
        context=max((int(r["window"]) for r in ppl if r.get("window")), default=None),
        source=" ".join(sys.argv), protocol=args.protocol, length=args.length)
    args.iso_file.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.iso_file, data, indent=1)
    from hikv.presets import get_preset

    use = (f"hikv report --preset {data['preset']} --iso {args.iso_file}"
           if get_preset(data["preset"]).layout.head_dim == cfg.layout.head_dim else
           f"head_dim {cfg.layout.head_dim} differs from preset {data['preset']!r}'s, so "
           "hikv report cannot use it")
    print(f"wrote {args.iso_file} ({len(data['points'])} operating points; {use})")


def _check_numbers(args: argparse.Namespace) -> None:
    """Counts and sizes in range before any model is loaded (ParamError names the flag)."""
    import math

    from hikv.params import ParamError

    for flag in ("batch", "windows", "window", "prefix", "tokens", "trials", "prob_rows"):
        v = getattr(args, flag, None)
        if v is not None and v < 1:
            raise ParamError(f"--{flag.replace('_', '-')} = {v} is out of range: allowed >= 1")
    if getattr(args, "seed", 0) < 0:
        raise ParamError(f"--seed = {args.seed} is out of range: allowed >= 0")
    for flag in ("budgets", "lengths", "layers"):
        vals = getattr(args, flag, None) or []
        lo = 0 if flag == "layers" else 1
        bad = [v for v in vals if v < lo]
        if bad:
            raise ParamError(f"--{flag} {bad} out of range: allowed >= {lo}")
    for v in getattr(args, "depths", None) or []:
        if not (math.isfinite(v) and 0.0 <= v <= 1.0):
            raise ParamError(f"--depths value {v} is out of range: allowed [0, 1]")
    for flag in ("ppl_tol", "passkey_tol"):
        v = getattr(args, flag, None)
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise ParamError(f"--{flag.replace('_', '-')} = {v} is out of range: allowed a "
                             "finite number >= 0")


def _check_inputs(args: argparse.Namespace) -> None:
    """``table``: every input file, before anything is written, as the run that wrote it
    left it (its folder's MANIFEST.json, :func:`hikv.io.check_result_file`): a folder whose
    run did not finish, or a file changed since or not listed, is an error naming it."""
    from hikv.io import check_result_file

    for flag, paths in (("--perplexity", args.perplexity), ("--passkey", args.passkey),
                        ("--tasks", args.tasks)):
        for path in paths:
            check_result_file(path, flag)


def _run_suite_of(args: argparse.Namespace) -> tuple[bool, Any]:
    """``(is a seed suite, the suite)`` that ``accuracy run`` will run, with every flag checked
    against it (:class:`~hikv.params.ParamError` naming the flag)."""
    from hikv.model.accuracy.seed_suite import SEED_SUITES, check_screen
    from hikv.model.accuracy.suite import SUITES
    from hikv.params import ParamError

    if args.suite in SEED_SUITES:
        suite = _seed_suite(SEED_SUITES[args.suite], args)
        if args.screen and args.tables_only:
            raise ParamError("--screen chooses how task cells run: it cannot go with "
                             "--tables-only")
        check_screen(suite, args.screen)
        return True, suite
    seed_only = {"--workers": args.workers != 1, "--executor": args.executor != "local",
                 "--variants": args.variants, "--budget-step": args.budget_step is not None,
                 "--windows": args.windows is not None, "--trials": args.trials is not None,
                 "--suite-protocols": bool(args.suite_protocols),
                 "--prune-for": args.prune_for is not None,
                 "--ppl-looks": args.ppl_looks is not None,
                 "--task-top-budget": args.task_top_budget,
                 "--redo-families": bool(args.redo_families),
                 "--screen": bool(args.screen)}
    given = [k for k, v in seed_only.items() if v]
    if given:
        raise ParamError(f"{', '.join(given)} apply to the seed suites "
                         f"({sorted(SEED_SUITES)}), not to --suite {args.suite}")
    if args.suite not in SUITES:
        raise ParamError(f"--suite = {args.suite!r} is not one of "
                         f"{sorted(SUITES) + sorted(SEED_SUITES)}")
    return False, SUITES[args.suite]


def _prepare_out(args: argparse.Namespace) -> None:
    """Check --out (or --file) before the model loads: writable, and no earlier result of
    this subcommand in it unless --force (which deletes it first). ``run`` resumes: it holds
    its folder (one run at a time; MANIFEST.json when it finishes) and keeps what is there."""
    from hikv.io import check_writable, hold_out_dir, prepare_out_dir
    from hikv.params import ParamError

    force = getattr(args, "force", False)
    if args.what in OWNED:
        prepare_out_dir(args.out, OWNED[args.what], force=force)
    elif args.what == "run":
        prepare_out_dir(args.out, ())
    if args.what == "capture":
        check_writable(args.file.parent, "--file")
        if args.file.is_dir():
            raise ParamError(f"--file {args.file} is a folder: give a .pt file path")
        if args.file.exists() and not force:
            raise ParamError(f"--file {args.file} exists; pass --force to replace it")
    if args.what == "table" and args.iso_file is not None:
        check_writable(args.iso_file.parent, "--iso-file")
        if args.out.resolve() in args.iso_file.resolve().parents:     # listed in its manifest
            name = "".join(f"[{c}]" if c in "*?[" else c for c in args.iso_file.name)
            hold_out_dir(args.out, "--out", (name,))
