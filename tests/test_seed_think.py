"""ThinK alone (``hikv-none/k:thinkR``, every token kept, R = d / 2 key channels) as a seed-suite
family: one spec per length at B = N (it has no token budget), an iso row that says
so (``iso_budget`` ``all`` or none, bytes = the golden byte account of reading every token's
kept channels), never HiKV's best family, its own iso point. The label is the presets' ThinK
(one source of truth for R). On the tiny random model of ``test_accuracy_cli`` (no network)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hikv.model.accuracy import experiments as A
from hikv.model.accuracy.seed_spec import (
    ALL_TOKENS_RULE,
    EXTRA_BASELINES,
    EXTRA_BASELINES_GEMMA,
    SEED_SUITES,
    THINK_ALONE,
    suite_specs,
)
from hikv.model.lm.runner import LMShape, lm_config
from hikv.presets import get_preset, method_specs

pytest.importorskip("transformers")

from test_accuracy_cli import tiny_model  # noqa: E402,F401  (the shared fixture)

SEED = 4321


def _cfg(head_dim: int):
    shape = LMShape(name="m", layers=2, q_heads=4, kv_heads=2, head_dim=head_dim, hidden=64,
                    intermediate=96, vocab=100, scale=head_dim ** -0.5, windows=(None, None))
    return lm_config(get_preset("default"), shape)


@pytest.mark.parametrize(("model", "head_dim", "extra"), [
    ("smollm2-135m", 64, EXTRA_BASELINES), ("gemma3-270m", 256, EXTRA_BASELINES_GEMMA)])
def test_think_alone_family_is_the_presets_think(model: str, head_dim: int, extra) -> None:
    fam = A.family(method_specs(_cfg(head_dim))["think"])
    assert THINK_ALONE[model] == fam == f"hikv-none/k:think{head_dim // 2}", model
    assert extra[-1] == fam and extra[:-1] == EXTRA_BASELINES[:-1], model


@pytest.mark.parametrize("length", [2048, 4096])
def test_think_alone_runs_once_per_length_at_every_token(length: int) -> None:
    cfg = _cfg(64)
    suite = dataclasses.replace(SEED_SUITES["seed-smollm2"],
                                families=("snapkv", THINK_ALONE["smollm2-135m"]))
    pairs = suite_specs(suite, cfg, length)
    think = [(sp, r) for sp, r in pairs if A.is_think(sp)]
    assert len(think) == 1, [sp.label for sp, _ in pairs]
    sp, rule = think[0]
    assert rule == ALL_TOKENS_RULE and sp.budget == length and A.keeps_every_token(sp)
    assert sp.label == f"hikv-none@{length}/k:think32"
    snap = {p[0].budget for p in pairs if p[0].method.value == "snapkv"}
    assert snap == {A.resolve_budget(r, length) for r in suite.budgets}, "budgeted as before"


def test_budget_changes_no_decision_of_think_alone(tiny_model) -> None:  # noqa: F811
    """The @B of a label that keeps every token is a name, not a setting: perplexity and every
    byte equal at two budgets, and the bytes are every token's (V whole, K R of d channels)."""
    from hikv.model.accuracy.seed_suite import worker_env

    model, cache = tiny_model
    env = worker_env(str(model), cache, "tiny", "cpu", 1)
    lm, cfg = env["lm"], env["cfg"]
    d = cfg.layout.head_dim
    specs = [A.parse_method(lab, cfg.policy, d) for lab in
             ("full", f"hikv-none@64/k:think{d // 2}", f"hikv-none@1024/k:think{d // 2}")]
    wins = A.text_windows(lm, env["text"], 200, 1)
    full, small, big = A.perplexity(lm, specs, cfg, wins, 180)
    drop = {"label", "budget", "hikv_budget"}
    assert {k: v for k, v in small.items() if k not in drop} == \
        {k: v for k, v in big.items() if k not in drop}, SEED
    assert big["bytes_v_ideal"] == full["bytes_v_ideal"], "every token's V is read"
    assert big["bytes_k_ideal"] == pytest.approx(full["bytes_k_ideal"] / 2), "R = d / 2 of K"


def test_seed_smoke_suite_with_think_alone(tiny_model, tmp_path) -> None:  # noqa: F811
    """seed-smoke with ThinK alone: cells, iso rows (every_token, iso budget all or none,
    budgets tested = [N], the perplexity row's bytes), its own iso point, not HiKV's best."""
    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import run_seed_suite

    model, cache = tiny_model
    d = 16                                          # the tiny model's head dim
    fam = f"hikv-none/k:think{d // 2}"
    suite = dataclasses.replace(SEED_SUITES["seed-smoke"], tasks=("passkey",),
                                families=("snapkv", "hikv-evict", fam), keep_min=0.0)
    out = tmp_path / "seed"
    run_seed_suite(suite, out, model=str(model), cache=cache, preset="tiny",
                   log=lambda _: None)
    ppl = {r["label"]: r for r in read_rows(out / "cells" / "ppl_1024.json")[0]}
    lab = f"hikv-none@1024/{fam.split('/', 1)[1]}"
    assert ppl[lab]["budget_rule"] == ALL_TOKENS_RULE
    for p in ("prompt", "follow-up"):
        task = {r["label"]: r for r in read_rows(out / "cells" / f"passkey_{p}_1024.json")[0]}
        iso = {r["family"]: r for r in read_rows(out / f"iso_{p}_1024.json")[0]}
        t = iso[fam]
        assert t["every_token"] and not iso["snapkv"]["every_token"], p
        assert t["budgets_tested"] == [1024] and t["label"] == lab, p
        assert t["iso_budget"] == (A.ALL_TOKENS if t["reached"] else None), p
        assert t["bytes_burst"] == ppl[lab]["bytes_burst"], p
        assert (lab in task) == (ppl[lab]["ppl"] <= ppl["full"]["ppl"] * 1.01), p
        pts = json.loads((out / f"iso_points_{p}_1024.json").read_text())
        assert fam in {x["family"] for x in pts["points"]}, p
        assert pts["hikv_family"] != fam, p
    md = (out / "seed_table.md").read_text()
    assert f"{fam}: no token budget" in md
