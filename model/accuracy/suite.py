"""The full accuracy study as one resumable run: Stage I and baselines, Stage II, iso table.

Phases (each writes ``<out>/<phase>.csv`` and ``.json``; a phase whose JSON exists is loaded,
not rerun, unless ``redo``):

1. ``ppl_stage1``: perplexity of full KV, the baselines (H2O, SnapKV, Quest, SparQ, Double
   Sparsity) and HiKV's Stage I variants (evicting; query-aware with page bounds; query-aware
   with low-bit keys), no Stage II, at every budget of the suite.
2. ``passkey_stage1``: passkey with the classic filler (question decoded after the haystack,
   and question in the prompt), and with the essays filler (question in the prompt).
3. ``iso_stage1``: the iso-accuracy table of phase 1-2 (passkey rows of the suite's first
   question placement only: protocols are never mixed in one criterion); the HiKV Stage I
   family with the fewest burst bytes at its iso budget is the *best Stage I*, its iso
   budget ``B*``.
4. ``ppl_stage2`` / ``passkey_stage2``: Stage II rules (K static, V static, K query-aware
   channels, K channel groups of 8) at r/d = 7/8, 3/4, 1/2, alone (all tokens) and on top of
   the best Stage I at ``B*``.
5. ``layout``: bytes of the best Stage I and its Stage II variants under the preset's layout
   (``align_bytes`` = burst) and a packed one (records 8-byte aligned); one window.
6. ``fidelity``: per-layer attention-output error of every family at ``B*`` (one window).
7. ``iso_table`` (+ ``iso_table.md``), ``reductions`` and plots (``*.png``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hikv.io import atomic_write_text
from hikv.model.accuracy import experiments as A
from hikv.model.accuracy.io import (
    code_version,
    markdown_table,
    plot_fidelity,
    plot_tradeoff,
    read_rows,
    write_rows,
)
from hikv.model.accuracy.iso import passkey_by_label
from hikv.params import Config, MethodSpec, ParamError, Stage1Variant, Stage2Kind, Stage2Rule

__all__ = ["Suite", "SUITES", "stage1_specs", "stage2_specs", "run_suite"]

Log = Callable[[str], None]


@dataclass(frozen=True)
class Suite:
    """How much of the study to run (token counts, budgets, trials)."""

    name: str
    budgets: tuple[int, ...]
    ppl_windows: int
    ppl_window: int
    ppl_prefix: int
    pk_lengths: tuple[int, ...]
    pk_depths: tuple[float, ...]
    pk_trials: int
    pk_questions: tuple[str, ...]
    essay_lengths: tuple[int, ...]
    essay_depths: tuple[float, ...]
    essay_trials: int
    essay_budgets: tuple[int, ...] = (256,)
    stage2_questions: tuple[str, ...] | None = None   # passkey question modes of Stage II
    ratios: tuple[tuple[int, int], ...] = ((7, 8), (3, 4), (1, 2))
    layout_aligns: tuple[int, ...] = (64, 8)
    aux_tokens: int = 1536       # layout and fidelity: one window of this many tokens
    aux_prefix: int = 1024
    lowbit: bool = True          # include the low-bit-key scorer among Stage I variants
    baselines: tuple[str, ...] = ("h2o", "snapkv", "quest", "sparq", "ds")


SUITES: dict[str, Suite] = {s.name: s for s in (
    Suite(name="full", budgets=(64, 128, 256, 512, 1024), ppl_windows=4, ppl_window=2048,
          ppl_prefix=1536, pk_lengths=(1024, 2048), pk_depths=(0.1, 0.5, 0.9),
          pk_trials=6, pk_questions=("decode", "prefill"), essay_lengths=(2048,),
          essay_depths=(0.25, 0.75), essay_trials=30, stage2_questions=("decode",)),
    Suite(name="gemma", budgets=(64, 128, 256, 512, 1024), ppl_windows=4, ppl_window=2048,
          ppl_prefix=1536, pk_lengths=(1024, 2048), pk_depths=(0.1, 0.5, 0.9), pk_trials=6,
          pk_questions=("decode",), essay_lengths=(), essay_depths=(), essay_trials=0,
          aux_tokens=1280),
    Suite(name="long", budgets=(128, 256, 512), ppl_windows=3, ppl_window=2048,
          ppl_prefix=1792, pk_lengths=(1024, 2048), pk_depths=(0.1, 0.5, 0.9), pk_trials=3,
          pk_questions=("decode",), essay_lengths=(), essay_depths=(), essay_trials=0,
          aux_tokens=2048, aux_prefix=1920),
    Suite(name="quick", budgets=(64, 256), ppl_windows=2, ppl_window=1024, ppl_prefix=768,
          pk_lengths=(1024,), pk_depths=(0.5,), pk_trials=2, pk_questions=("decode",),
          essay_lengths=(), essay_depths=(), essay_trials=0, ratios=((3, 4),),
          aux_tokens=900, aux_prefix=768),
    Suite(name="smoke", budgets=(64,), ppl_windows=1, ppl_window=320, ppl_prefix=256,
          pk_lengths=(320,), pk_depths=(0.5,), pk_trials=1, pk_questions=("decode",),
          essay_lengths=(), essay_depths=(), essay_trials=0, ratios=((3, 4),),
          layout_aligns=(64, 8), aux_tokens=300, aux_prefix=256, lowbit=False,
          baselines=("h2o", "quest")),
)}


def stage1_specs(suite: Suite, cfg: Config) -> list[MethodSpec]:
    """Full KV, the baselines and HiKV's Stage I variants (no Stage II) at every budget."""
    d = cfg.layout.head_dim
    pol = cfg.policy
    specs = [MethodSpec()]
    for b in suite.budgets:
        specs += [A.parse_method(f"{m}@{b}", pol, d) for m in suite.baselines]
    variants = ["evict", "qa"] + (["qa@{b}/lowbit4"] if suite.lowbit else [])
    for b in suite.budgets:
        for v in variants:
            lab = f"hikv-{v.format(b=b)}" if "@" in v else f"hikv-{v}@{b}"
            specs.append(A.parse_method(lab, pol, d))
    return specs


_RULES = (("k", Stage2Kind.STATIC), ("v", Stage2Kind.STATIC), ("k", Stage2Kind.QUERY_CHANNELS),
          ("k", Stage2Kind.CHANNEL_GROUPS))


def stage2_specs(suite: Suite, cfg: Config, best: MethodSpec | None) -> list[MethodSpec]:
    """Each Stage II rule at each ratio, alone (Stage I none) and on top of ``best``."""
    d = cfg.layout.head_dim
    out = []
    bases = [A.hikv_spec(cfg.policy, stage1=Stage1Variant.NONE, k_rule=Stage2Rule(),
                         v_rule=Stage2Rule())]
    if best is not None:
        assert best.hikv is not None
        bases.append(best)
    for base in bases:
        assert base.hikv is not None
        for num, den in suite.ratios:
            keep = d * num // den
            for t, kind in _RULES:
                group = Stage2Rule().group
                if kind is Stage2Kind.CHANNEL_GROUPS and (keep % group or d % group):
                    continue
                rule = Stage2Rule(kind, keep, group)
                out.append(A.hikv_spec(base.hikv, k_rule=rule if t == "k" else Stage2Rule(),
                                       v_rule=rule if t == "v" else Stage2Rule()))
    return out


class _Runner:
    def __init__(self, out: Path, meta: dict[str, Any], redo: bool, log: Log) -> None:
        self.out, self.meta, self.redo, self.log = out, meta, redo, log
        self.times: dict[str, float] = {}

    def phase(self, name: str, fn: Callable[[], list[dict[str, Any]]],
              extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        path = self.out / f"{name}.json"
        if path.is_file() and not self.redo:
            rows, meta = read_rows(path)
            self.times[name] = float(meta.get("wall_s", 0.0))
            self.log(f"[{name}] loaded {len(rows)} rows from {path}")
            return rows
        self.log(f"[{name}] running")
        t0 = time.perf_counter()
        rows = fn()
        wall = time.perf_counter() - t0
        self.times[name] = wall
        write_rows(self.out, name, rows, {**self.meta, **(extra or {}), "phase": name,
                                          "wall_s": wall})
        self.log(f"[{name}] {len(rows)} rows in {wall:.0f} s -> {path}")
        return rows


def _best_stage1(table: list[dict[str, Any]]) -> dict[str, Any] | None:
    cands = [r for r in table if r["family"].startswith("hikv-") and
             not r["family"].startswith("hikv-none") and "/k:" not in r["family"] and
             "/v:" not in r["family"]]
    reached = [r for r in cands if r["reached"]]
    if reached:
        return min(reached, key=lambda r: (r["bytes_burst"], r["bytes_ideal"]))
    return min(cands, key=lambda r: r["ppl"]) if cands else None


def run_suite(model: str, out: Path, *, suite: Suite, preset: str = "default",
              cache: Path | None = None, redo: bool = False, batch: int = 64,
              ppl_tol: float = 0.01, passkey_tol: float = 0.0, seed: int = 0,
              log: Log = print, argv: list[str] | None = None) -> dict[str, Any]:
    """Run the study (see the module docstring) on ``model``; returns a summary dict (also
    written to ``out/summary.json``)."""
    from hikv.model.lm.assets import essays_text
    from hikv.model.lm.runner import lm_config, load_lm
    from hikv.params import to_dict
    from hikv.presets import get_preset

    t_start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    lm = load_lm(model, cache=cache)
    cfg = lm_config(get_preset(preset), lm.shape)
    d = cfg.layout.head_dim
    log(f"model {lm.shape.name} ({lm.source}) loaded in {lm.load_s:.0f} s: {lm.shape.layers} "
        f"layers, {lm.shape.q_heads}/{lm.shape.kv_heads} heads, d = {d}, method layers "
        f"{list(lm.shape.method_layers)}")
    text = essays_text(cache)
    meta = {"command": " ".join(argv if argv is not None else sys.argv), "model": model,
            "model_source": lm.source, "shape": dataclasses.asdict(lm.shape),
            "preset": preset, "config": to_dict(cfg), "suite": dataclasses.asdict(suite),
            "seed": seed, "code_version": code_version(), "ppl_tol": ppl_tol,
            "passkey_tol": passkey_tol}
    R = _Runner(out, meta, redo, log)
    windows = A.text_windows(lm, text, suite.ppl_window, suite.ppl_windows)

    def ppl(specs: list[MethodSpec], c: Config = cfg) -> list[dict[str, Any]]:
        return A.perplexity(lm, specs, c, windows, suite.ppl_prefix, batch=batch, log=log)

    def pk(specs: list[MethodSpec], questions: tuple[str, ...] | None = None
           ) -> list[dict[str, Any]]:
        rows = []
        for q in questions or suite.pk_questions:
            rows += A.passkey(lm, specs, cfg, lengths=suite.pk_lengths, depths=suite.pk_depths,
                              trials=suite.pk_trials, filler="classic", question=q, seed=seed,
                              batch=batch, log=log)
        return rows

    def essays(specs: list[MethodSpec]) -> list[dict[str, Any]]:
        specs = [s for s in specs if s.method.value == "full" or s.budget in suite.essay_budgets]
        if not suite.essay_trials or not specs:
            return []
        return A.passkey(lm, specs, cfg, lengths=suite.essay_lengths,
                         depths=suite.essay_depths, trials=suite.essay_trials, filler="essays",
                         question="prefill", essay_text=text, seed=seed + 1, batch=batch,
                         log=log)

    s1 = stage1_specs(suite, cfg)
    ppl1 = R.phase("ppl_stage1", lambda: ppl(s1))
    pk1 = R.phase("passkey_stage1", lambda: pk(s1))
    es1 = R.phase("passkey_essays", lambda: essays(s1))
    # the iso criterion uses one protocol (the suite's first question placement), never both
    proto = A.protocol_name(suite.pk_questions[0])
    iso1 = A.iso_table(ppl1, A.select_rows(pk1, protocol=proto), ppl_tol=ppl_tol,
                       passkey_tol=passkey_tol)
    write_rows(out, "iso_stage1", iso1, {**meta, "phase": "iso_stage1"})
    best_row = _best_stage1(iso1)
    best = None
    if best_row is not None:
        best_label = best_row["label"]
        best = A.parse_method(best_label, cfg.policy, d)
        log(f"best Stage I: {best_label} (iso budget {best_row['iso_budget']}, "
            f"{best_row['bytes_burst']:.0f} burst bytes per step per (layer, KV head))")
    s2 = stage2_specs(suite, cfg, best)
    ppl2 = R.phase("ppl_stage2", lambda: ppl(s2))
    pk2 = R.phase("passkey_stage2", lambda: pk(s2, suite.stage2_questions))

    lay_specs = [MethodSpec()] + ([best] if best is not None else []) + \
        [s for s in s2 if best is not None and s.hikv is not None and
         s.hikv.stage1 is best.hikv.stage1]      # type: ignore[union-attr]
    aux = A.text_windows(lm, text, suite.aux_tokens, 1)

    def layout_rows() -> list[dict[str, Any]]:
        rows = []
        for al in suite.layout_aligns:
            c = dataclasses.replace(cfg, layout=dataclasses.replace(cfg.layout, align_bytes=al))
            for r in A.perplexity(lm, lay_specs, c, aux, suite.aux_prefix, batch=batch,
                                  log=log):
                rows.append({**r, "align_bytes": al, "burst_bytes_layout":
                             c.layout.burst_bytes})
        return rows

    lay = R.phase("layout", layout_rows)
    b_star = best.budget if best is not None else suite.budgets[-1]
    fid_specs = [s for s in s1 if s.budget == b_star and s.method.value != "full"]
    if best is not None:
        num, den = suite.ratios[len(suite.ratios) // 2]
        mid = d * num // den
        fid_specs += [s for s in lay_specs[2:] if s.hikv is not None and
                      mid in (s.hikv.k_rule.keep, s.hikv.v_rule.keep)]
    fid = R.phase("fidelity", lambda: A.fidelity(lm, fid_specs, cfg, aux[0], suite.aux_prefix,
                                                 batch=batch, log=log))

    # ------------------------------------------------------------------ final tables
    all_ppl = ppl1 + ppl2
    all_pk = pk1 + pk2
    iso = A.iso_table(all_ppl, A.select_rows(all_pk, protocol=proto), ppl_tol=ppl_tol,
                      passkey_tol=passkey_tol)
    for r in iso:
        r["protocol"] = proto
    for r in iso:
        if r["family"] in ("full",) or r["family"].startswith("hikv-none"):
            r["iso_budget"] = "all" if r["reached"] else None
    write_rows(out, "iso_table", iso, {**meta, "phase": "iso_table"})
    hikv_rows = [r for r in iso if r["family"].startswith("hikv-") and r["reached"]
                 and not r["family"].startswith("hikv-none")]
    best_all = min(hikv_rows, key=lambda r: r["bytes_burst"]) if hikv_rows else None
    red = A.reductions(iso, best_all["family"]) if best_all else []
    write_rows(out, "reductions", red, {**meta, "phase": "reductions"})
    iso_file = A.iso_accuracy_file(
        iso, cfg, hikv_family=best_all["family"] if best_all else None, ppl_tol=ppl_tol,
        passkey_tol=passkey_tol, model=lm.shape.name, preset=preset,
        context=suite.ppl_window, source=meta["command"])
    atomic_write_text(out / "iso_points.json", json.dumps(iso_file, indent=1) + "\n")
    pk_by = passkey_by_label(A.select_rows(all_pk, protocol=proto))
    es_by = passkey_by_label(es1)
    for r in all_ppl:
        c = pk_by.get(r["label"])
        r["passkey_acc"] = None if c is None else c[0] / c[1]
        e = es_by.get(r["label"])
        r["essay_acc"] = None if e is None else e[0] / e[1]
        r["ppl_rel_pct"] = 100 * (r["ppl"] / iso_ref(all_ppl) - 1)
    write_rows(out, "points", all_ppl, {**meta, "phase": "points"})
    _write_markdown(out, lm.shape.name, iso, red, all_ppl, lay, es1, meta, R.times, suite)
    s1_fams = sorted({A.family(s) for s in s1})
    plot_tradeoff(out / "ppl_vs_bytes.png", all_ppl, "ppl_rel_pct",
                  ylabel="perplexity change vs full KV (%)", ref=100 * ppl_tol,
                  ref_label=f"+{100 * ppl_tol:.0f}%", families=s1_fams,
                  title=f"{lm.shape.name}: perplexity vs bytes, Stage I and baselines")
    plot_tradeoff(out / "passkey_vs_bytes.png", all_ppl, "passkey_acc",
                  ylabel=f"passkey accuracy (classic filler, protocol {proto})",
                  families=s1_fams,
                  title=f"{lm.shape.name}: passkey vs bytes, Stage I and baselines")
    s2_fams = sorted({A.family(s) for s in s2} | ({A.family(best)} if best else set()))
    plot_tradeoff(out / "stage2_ppl_vs_bytes.png", all_ppl, "ppl_rel_pct",
                  ylabel="perplexity change vs full KV (%)", ref=100 * ppl_tol,
                  families=s2_fams, ref_label=f"+{100 * ppl_tol:.0f}%",
                  title=f"{lm.shape.name}: Stage II rules alone and on top of the best Stage I")
    if fid:
        plot_fidelity(out / "fidelity.png", fid,
                      title=f"{lm.shape.name}: attention-output error per layer at B = {b_star}")
    summary = {"model": lm.shape.name, "best_stage1": best_row, "best_hikv": best_all,
               "phase_wall_s": R.times, "total_wall_s": time.perf_counter() - t_start,
               "out": str(out)}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=str))
    log(f"done in {summary['total_wall_s']:.0f} s (phases: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in R.times.items()) + f"); results in {out}")
    return summary


def iso_ref(rows: list[dict[str, Any]]) -> float:
    full = [r for r in rows if r["label"] == "full"]
    if not full:
        raise ParamError("no full KV row")
    return float(full[0]["ppl"])


def _write_markdown(out: Path, model: str, iso: list[dict[str, Any]], red: list[dict[str, Any]],
                    pts: list[dict[str, Any]], lay: list[dict[str, Any]],
                    es: list[dict[str, Any]], meta: dict[str, Any], times: dict[str, float],
                    suite: Suite) -> None:
    iso_rows = [{**r, "ppl_rel_pct": 100 * r["ppl_rel"],
                 "pk": (f"{r['passkey_correct']}/{r['passkey_trials']}"
                        if r["passkey_trials"] else "-")} for r in iso]
    lines = [f"# Accuracy study: {model}", "",
             f"Command: `{meta['command']}`  ", f"Code: {meta['code_version']}  ",
             "Wall time per phase (s): " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()),
             "", "## Iso-accuracy table", "",
             f"Smallest tested budget (of {list(suite.budgets)}) keeping perplexity within "
             f"{100 * meta['ppl_tol']:.0f}% of full KV and classic-filler passkey accuracy "
             f"(protocol {A.protocol_name(suite.pk_questions[0])}) at "
             "least full KV's; bytes per decode step per (layer, KV head), mean over the "
             "perplexity decode steps.", "",
             markdown_table(iso_rows, [
                 ("family", "method", ""), ("iso_budget", "iso budget", ""),
                 ("ppl", "ppl", ".3f"), ("ppl_rel_pct", "Δppl %", "+.2f"), ("pk", "passkey", ""),
                 ("bytes_ideal", "bytes ideal", ".0f"), ("bytes_burst", "bytes burst", ".0f"),
                 ("bytes_meta_burst", "of which meta", ".0f"),
                 ("step_bytes_burst", "per step, all layers", ".0f")]),
             "", "## HiKV's byte reduction at iso-accuracy", "",
             markdown_table(red, [("baseline", "baseline", ""),
                                  ("baseline_reached", "baseline reached", ""),
                                  ("hikv", "HiKV", ""), ("x_ideal", "x ideal", ".2f"),
                                  ("x_burst", "x burst", ".2f")]),
             "", "## Every point", "",
             markdown_table(sorted(pts, key=lambda r: (r["family"], r["budget"])), [
                 ("label", "method", ""), ("ppl", "ppl", ".3f"),
                 ("ppl_rel_pct", "Δppl %", "+.2f"), ("passkey_acc", "passkey", ".2f"),
                 ("essay_acc", "essay passkey", ".2f"),
                 ("bytes_ideal", "bytes ideal", ".0f"), ("bytes_burst", "bytes burst", ".0f"),
                 ("bytes_resident", "resident", ".0f")]),
             "", "## Layout: the same selections under two alignments", "",
             markdown_table(lay, [("label", "method", ""), ("align_bytes", "align", ""),
                                  ("ppl", "ppl", ".4f"), ("bytes_ideal", "bytes ideal", ".0f"),
                                  ("bytes_burst", "bytes burst", ".0f"),
                                  ("bytes_v_burst", "V burst", ".0f"),
                                  ("bytes_k_burst", "K burst", ".0f")])]
    if es:
        lines += ["", "## Passkey with essay filler (question in the prompt)", "",
                  markdown_table(es, [("label", "method", ""), ("length", "length", ""),
                                      ("depth", "depth", ".2f"), ("correct", "correct", ""),
                                      ("trials", "trials", "")])]
    atomic_write_text(out / "iso_table.md", "\n".join(lines) + "\n")
