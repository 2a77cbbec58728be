"""Accuracy of HiKV and the baselines on a real language model, with real decoding: every
attention layer runs through the golden model's KV-cache methods, which evict or select tokens
step by step as decoding proceeds.

Subcommands (each writes CSV + JSON rows, with the command, model, configuration, seed and code
version, into --out; progress goes to stdout):

  perplexity  teacher-forced perplexity on long text (windows of --window tokens; the first
              --prefix are prefilled, the rest decoded token by token) and bytes per step
  passkey     passkey retrieval per (length, depth) cell (classic repeated filler or essays)
  fidelity    per-layer relative error and cosine of attention outputs vs full KV
  capture     save real q, k, v and attention probabilities of chosen layers (a .pt file)
  table       the iso-accuracy table from perplexity and passkey JSON files
  run         the whole study (Stage I and baselines, Stage II, layout, fidelity, iso table,
              plots) as one resumable run

Methods are labels: full, h2o@B, snapkv@B, quest@B, sparq@B[/rR], ds@B[/rR],
hikv-{evict,qa,none}@B[/lowbitN][/k:{static,query_channels,channel_groups}N[gG]][/v:staticN].
A label without @B (e.g. h2o, hikv-qa) is expanded over --budgets. Bytes are per decode step
per (layer, KV head) of the layers the method manages, ideal and at burst granularity (the
preset's KVLayout), metadata included. --model takes an asset name (smollm2-135m,
gemma3-270m; fetched if absent), a .gguf file, or a Hugging Face model folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "accuracy of HiKV and baselines on a real LM (perplexity, passkey, fidelity, table, run)"


def _common(p: argparse.ArgumentParser, out_required: bool = True) -> None:
    p.add_argument("--model", default="smollm2-135m",
                   help="asset name, .gguf file or Hugging Face model folder "
                        "(default: smollm2-135m)")
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


def _force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="replace this subcommand's files of an earlier run (otherwise an "
                        "existing one is an error)")


#: The files each subcommand writes into --out (refused without --force when present).
OWNED = {"perplexity": ("perplexity.csv", "perplexity.json"),
         "passkey": ("passkey.csv", "passkey.json"),
         "fidelity": ("fidelity.csv", "fidelity.json", "fidelity.png"),
         "table": ("iso_table.csv", "iso_table.json", "reductions.csv", "reductions.json")}


def _methods(p: argparse.ArgumentParser, default: list[str]) -> None:
    p.add_argument("--methods", nargs="+", default=default, metavar="LABEL",
                   help=f"method labels (default: {' '.join(default)})")
    p.add_argument("--budgets", nargs="+", type=int, default=[64, 256],
                   help="budgets for labels without @B (default: 64 256)")


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
    b.add_argument("--question", choices=("decode", "prefill"), default="decode",
                   help="decode: the question is fed through decode after the haystack "
                        "(default); prefill: it is part of the prompt but its last token")
    _force(b)

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

    f = sub.add_parser("run", help="the whole study, resumable (see hikv.model.accuracy_suite)")
    _common(f)
    f.add_argument("--suite", default="full",
                   help="full, gemma, long, quick or smoke (default full)")
    f.add_argument("--redo", action="store_true", help="rerun phases whose results exist")
    f.add_argument("--ppl-tol", type=float, default=0.01)
    f.add_argument("--passkey-tol", type=float, default=0.0)


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

    if getattr(args, "threads", 1) < 1:
        raise ParamError(f"--threads = {args.threads} is out of range: allowed >= 1")
    _check_numbers(args)
    _prepare_out(args)
    torch.set_num_threads(getattr(args, "threads", 1))
    if args.what == "table":
        return _table(args)

    from hikv.model import accuracy as A
    from hikv.model.accuracy_io import code_version, plot_fidelity, write_rows
    from hikv.model.assets import essays_text
    from hikv.model.lm import lm_config, load_lm
    from hikv.params import to_dict
    from hikv.presets import get_preset

    if args.what == "run":
        from hikv.model.accuracy_suite import SUITES, run_suite

        if args.suite not in SUITES:
            raise ParamError(f"--suite = {args.suite!r} is not one of {sorted(SUITES)}")
        run_suite(args.model, args.out, suite=SUITES[args.suite], preset=args.preset,
                  cache=args.cache, redo=args.redo, batch=args.batch, ppl_tol=args.ppl_tol,
                  passkey_tol=args.passkey_tol, seed=args.seed, argv=sys.argv)
        return 0

    t0 = time.perf_counter()
    try:
        lm = load_lm(args.model, cache=args.cache)
    except (ValueError, KeyError, IndexError, EOFError) as e:
        if isinstance(e, ParamError):
            raise
        raise ParamError(f"--model {args.model}: cannot be read as a model ({type(e).__name__}: "
                         f"{str(e)[:200]}); is the file complete? fetch it again "
                         "(`hikv fetch-assets`) or give another .gguf file") from None
    cfg = lm_config(get_preset(args.preset), lm.shape)
    print(f"model {lm.shape.name}: {lm.shape.layers} layers, d = {lm.shape.head_dim}, "
          f"loaded in {lm.load_s:.0f} s")
    meta = {"command": " ".join(sys.argv), "model": args.model, "model_source": lm.source,
            "preset": args.preset, "config": to_dict(cfg), "seed": args.seed,
            "code_version": code_version()}
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
        rows = A.passkey(lm, specs, cfg, lengths=args.lengths, depths=args.depths,
                         trials=args.trials, filler=args.filler, question=args.question,
                         essay_text=text, seed=args.seed, batch=args.batch, log=print)
        name = "passkey"
        agg = A._passkey_by_label(rows)
        for lab, (c, n) in agg.items():
            print(f"{lab:42s} passkey {c}/{n}")
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


def _table(args: argparse.Namespace) -> int:
    from hikv.model import accuracy as A
    from hikv.model.accuracy_io import markdown_table, read_rows, write_rows
    from hikv.params import ParamError

    loaded = [read_rows(p) for p in args.perplexity]
    ppl = [r for rows, _ in loaded for r in rows]
    pk = [r for p in args.passkey for r in read_rows(p)[0]]
    try:
        iso = A.iso_table(ppl, pk, ppl_tol=args.ppl_tol, passkey_tol=args.passkey_tol)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, ParamError):
            raise
        raise ParamError(f"--perplexity/--passkey: the rows are not those of `hikv accuracy "
                         f"perplexity` / `passkey` ({type(e).__name__}: {e}); give files they "
                         "wrote") from None
    meta = {"command": " ".join(sys.argv), "perplexity": [str(p) for p in args.perplexity],
            "passkey": [str(p) for p in args.passkey]}
    write_rows(args.out, "iso_table", iso, meta)
    fam = args.hikv
    if fam is None:
        hk = [r for r in iso if r["family"].startswith("hikv-") and r["reached"]]
        fam = min(hk, key=lambda r: r["bytes_burst"])["family"] if hk else None
    red = A.reductions(iso, fam) if fam else []
    write_rows(args.out, "reductions", red, meta)
    if args.iso_file is not None:
        _write_iso_file(args, iso, fam, ppl, loaded[0][1])
    print(markdown_table(iso, [("family", "method", ""), ("iso_budget", "iso budget", ""),
                               ("ppl", "ppl", ".3f"), ("ppl_rel", "Δppl", "+.4f"),
                               ("passkey_correct", "pk ok", ""), ("passkey_trials", "of", ""),
                               ("bytes_ideal", "bytes ideal", ".0f"),
                               ("bytes_burst", "bytes burst", ".0f")]))
    if red:
        print()
        print(markdown_table(red, [("baseline", "baseline", ""), ("hikv", "HiKV", ""),
                                   ("x_ideal", "x ideal", ".2f"), ("x_burst", "x burst", ".2f")]))
    return 0



def _write_iso_file(args: argparse.Namespace, iso: list[dict], fam: str | None,
                    ppl: list[dict], meta: dict) -> None:
    """``meta``: the first perplexity file's metadata (its configuration and model)."""
    from hikv.io import write_json
    from hikv.model import accuracy as A
    from hikv.params import Config, ParamError, from_dict

    if "config" not in meta:
        raise ParamError(f"--perplexity {args.perplexity[0]}: its metadata has no 'config' "
                         "(written by an older hikv); rerun the perplexity phase")
    cfg = from_dict(Config, meta["config"])
    data = A.iso_accuracy_file(
        iso, cfg, hikv_family=fam, ppl_tol=args.ppl_tol, passkey_tol=args.passkey_tol,
        model=str(meta.get("model", "")), preset=str(meta.get("preset", cfg.name)),
        context=max((int(r["window"]) for r in ppl if r.get("window")), default=None),
        source=" ".join(sys.argv))
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


def _prepare_out(args: argparse.Namespace) -> None:
    """Check --out (or --file) before the model loads: writable, and no earlier result of
    this subcommand in it unless --force (which deletes it first). ``run`` resumes: it owns
    its folder and keeps earlier phases."""
    from hikv.io import check_writable, prepare_out_dir
    from hikv.params import ParamError

    force = getattr(args, "force", False)
    if args.what in OWNED:
        prepare_out_dir(args.out, OWNED[args.what], force=force)
    elif args.what == "run":
        check_writable(args.out)
    if args.what == "capture":
        check_writable(args.file.parent, "--file")
        if args.file.is_dir():
            raise ParamError(f"--file {args.file} is a folder: give a .pt file path")
        if args.file.exists() and not force:
            raise ParamError(f"--file {args.file} exists; pass --force to replace it")
    if args.what == "table" and args.iso_file is not None:
        check_writable(args.iso_file.parent, "--iso-file")
