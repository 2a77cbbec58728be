"""`hikv accuracy` and `hikv fetch-assets` end to end on a tiny random Llama saved as a Hugging
Face folder with a character-level tokenizer, and a made-up essay folder in a temporary cache
(no network): every subcommand runs and writes what it says."""

from __future__ import annotations

import json
import string

import pytest
import torch

pytest.importorskip("transformers")

from hikv.scripts.cli import main  # noqa: E402

SEED = 4321


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    import transformers
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    root = tmp_path_factory.mktemp("tiny")
    chars = ["<unk>"] + list(string.ascii_letters + string.digits + string.punctuation + " \n")
    tok = Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        cfg = transformers.LlamaConfig(
            vocab_size=len(chars), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=4096)
        model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(root / "model")
    fast.save_pretrained(root / "model")
    cache = root / "cache"
    essays = cache / "assets" / "pg-essays" / "PaulGrahamEssays"
    essays.mkdir(parents=True)
    words = "the cat sat on a mat. a dog ran far away! why? because it could. "
    (essays / "a.txt").write_text(words * 80)
    return root / "model", cache


def _run(args: list[str]) -> int:
    return main(["accuracy", *args])


def test_accuracy_subcommands(tiny_model, tmp_path) -> None:
    model, cache = tiny_model
    common = ["--model", str(model), "--cache", str(cache), "--preset", "tiny"]
    out = tmp_path / "out"
    assert _run(["perplexity", *common, "--methods", "full", "h2o", "hikv-qa/v:static12",
                 "--budgets", "16", "32", "--windows", "2", "--window", "200", "--prefix",
                 "160", "--out", str(out)]) == 0
    ppl = json.loads((out / "perplexity.json").read_text())
    labels = [r["label"] for r in ppl["rows"]]
    assert labels == ["full", "h2o@16", "h2o@32", "hikv-query_aware@16/v:static12",
                      "hikv-query_aware@32/v:static12"]
    assert all(r["tokens"] == 2 * 39 for r in ppl["rows"])
    assert ppl["meta"]["preset"] == "tiny" and "code_version" in ppl["meta"]
    assert _run(["passkey", *common, "--methods", "full", "quest@16", "--lengths", "300",
                 "--depths", "0.5", "--trials", "2", "--out", str(out)]) == 0
    pk = json.loads((out / "passkey.json").read_text())["rows"]
    assert [(r["label"], r["trials"]) for r in pk] == [("full", 2), ("quest@16", 2)]
    assert _run(["fidelity", *common, "--methods", "h2o@16", "--tokens", "180", "--prefix",
                 "160", "--out", str(out)]) == 0
    fid = json.loads((out / "fidelity.json").read_text())["rows"]
    assert [r["layer"] for r in fid] == [0, 1] and (out / "fidelity.png").is_file()
    assert _run(["capture", *common, "--layers", "1", "--tokens", "170", "--prefix", "160",
                 "--file", str(out / "qkv.pt")]) == 0
    cap = torch.load(out / "qkv.pt")
    assert cap["layers"][1]["q"].shape == (4, 170, 16)
    assert _run(["table", "--perplexity", str(out / "perplexity.json"), "--passkey",
                 str(out / "passkey.json"), "--out", str(out / "t")]) == 0
    iso = json.loads((out / "t" / "iso_table.json").read_text())["rows"]
    assert {r["family"] for r in iso} == {"full", "h2o", "hikv-query_aware/v:static12"}


def test_run_smoke_suite(tiny_model, tmp_path) -> None:
    model, cache = tiny_model
    out = tmp_path / "run"
    assert _run(["run", "--suite", "smoke", "--model", str(model), "--cache", str(cache),
                 "--preset", "tiny", "--out", str(out)]) == 0
    for name in ("ppl_stage1", "passkey_stage1", "ppl_stage2", "layout", "fidelity",
                 "iso_table", "reductions", "points", "iso_points"):
        assert (out / f"{name}.json").is_file(), name
    for png in ("ppl_vs_bytes", "passkey_vs_bytes", "stage2_ppl_vs_bytes", "fidelity"):
        assert (out / f"{png}.png").is_file(), png
    assert "Iso-accuracy table" in (out / "iso_table.md").read_text()
    lay = json.loads((out / "layout.json").read_text())["rows"]
    # the same selections under two alignments: the same perplexity, never fewer ideal bytes
    by = {}
    for r in lay:
        by.setdefault(r["label"], {})[r["align_bytes"]] = r
    for lab, d in by.items():
        assert d[64]["ppl"] == pytest.approx(d[8]["ppl"], rel=1e-6), lab
        assert d[64]["bytes_ideal"] == d[8]["bytes_ideal"], lab
        assert d[8]["bytes_burst"] <= d[64]["bytes_burst"], lab
    # resumable: a second run loads every phase instead of recomputing it
    assert _run(["run", "--suite", "smoke", "--model", str(model), "--cache", str(cache),
                 "--preset", "tiny", "--out", str(out)]) == 0


def test_fetch_assets_list(tmp_path, capsys) -> None:
    assert main(["fetch-assets", "--list", "--cache", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "smollm2-135m" in text and "Gemma Terms of Use" in text and "absent" in text
    assert main(["fetch-assets", "--only", "nope", "--cache", str(tmp_path)]) == 2
