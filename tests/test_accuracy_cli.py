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


def test_tasks_both_protocols_and_iso_table(tiny_model, tmp_path) -> None:
    """`hikv accuracy tasks` under both protocols on the tiny model, then `table --tasks
    --protocol --length` selects one protocol's rows and writes an iso-point file naming
    it."""
    from hikv.model.accuracy.experiments import PROTOCOLS

    model, cache = tiny_model
    common = ["--model", str(model), "--cache", str(cache), "--preset", "tiny"]
    out = tmp_path / "tasks"
    methods = ["--methods", "full", "snapkv@64", "hikv-evict@64"]
    assert _run(["tasks", *common, *methods, "--tasks", "passkey", "niah_single",
                 "--lengths", "1024", "--trials", "2", "--protocols", "prompt", "follow-up",
                 "--out", str(out)]) == 0
    rows = json.loads((out / "tasks.json").read_text())["rows"]
    assert len(rows) == 2 * 2 * 3
    assert {(r["task"], r["protocol"]) for r in rows} == {
        (t, p) for t in ("passkey", "niah_single") for p in PROTOCOLS}
    for r in rows:
        assert r["length"] == 1024 and r["trials"] == 2 and len(r["scores"]) == 2, r
        assert r["ci_low"] <= r["accuracy"] <= r["ci_high"], r
        assert r["prompt_tokens"] <= 1024 - 12, r
    assert _run(["perplexity", *common, *methods, "--windows", "1", "--window", "1024",
                 "--prefix", "1000", "--out", str(out)]) == 0
    t = tmp_path / "table"
    assert _run(["table", "--perplexity", str(out / "perplexity.json"), "--tasks",
                 str(out / "tasks.json"), "--protocol", "follow-up", "--length", "1024",
                 "--out", str(t), "--iso-file", str(t / "iso.json")]) == 0
    iso = json.loads((t / "iso_table.json").read_text())["rows"]
    assert {r["protocol"] for r in iso} == {"follow-up"} and {r["length"] for r in iso} == {1024}
    assert all(r["task_trials"] == 4 for r in iso), iso        # 2 tasks x 2 trials, one protocol
    pts = json.loads((t / "iso.json").read_text())
    assert pts["protocol"] == "follow-up" and pts["length"] == 1024
    from hikv.presets import get_preset
    from hikv.sim.explore.report import load_iso_accuracy

    assert load_iso_accuracy(t / "iso.json", get_preset("tiny")).context == 1024
    # passkey rows of both protocols need --protocol: never mixed in one criterion
    for p in ("prompt", "follow-up"):
        assert _run(["passkey", *common, "--methods", "full", "--protocol", p, "--lengths",
                     "300", "--depths", "0.5", "--trials", "1", "--out", str(tmp_path / p)]) == 0
    pk = [str(tmp_path / p / "passkey.json") for p in ("prompt", "follow-up")]
    assert _run(["table", "--perplexity", str(out / "perplexity.json"), "--passkey", *pk,
                 "--out", str(t)]) == 2
    assert _run(["table", "--perplexity", str(out / "perplexity.json"), "--passkey", *pk,
                 "--protocol", "prompt", "--out", str(t), "--force"]) == 0
    # --tasks needs one protocol and length; the --question alias must agree
    assert _run(["table", "--perplexity", str(out / "perplexity.json"), "--tasks",
                 str(out / "tasks.json"), "--out", str(t)]) == 2
    assert _run(["passkey", *common, "--methods", "full", "--protocol", "prompt",
                 "--question", "decode", "--lengths", "300", "--out", str(out)]) == 2


def test_seed_smoke_suite_resumes(tiny_model, tmp_path) -> None:
    """The seed-smoke suite (both protocols, two tasks, scaled and fixed budgets) end to end:
    cells, task filter, one iso table and iso-point file per protocol; a second run resumes
    from the cell files."""
    from hikv.model.accuracy.io import read_rows

    model, cache = tiny_model
    out = tmp_path / "seed"
    args = ["run", "--suite", "seed-smoke", "--model", str(model), "--cache", str(cache),
            "--preset", "tiny", "--out", str(out)]
    assert _run(args) == 0
    for p in ("prompt", "follow-up"):
        assert (out / f"iso_{p}_1024.json").is_file(), p
        pts = json.loads((out / f"iso_points_{p}_1024.json").read_text())
        assert pts["protocol"] == p and pts["length"] == 1024
    filt = read_rows(out / "filter.json")[0]
    assert len(filt) == 4 and all(f["kept"] or "full KV" in f["reason"] for f in filt)
    cell = read_rows(out / "cells" / "ppl_1024.json")[0]
    rules = {r["label"]: r["budget_rule"] for r in cell}
    assert rules["snapkv@64"] == "B=N/16" and rules["snapkv@128"] == "B=128"
    names = {p.name for p in out.iterdir()}
    assert {"seed_table.md", "reductions_prompt_1024.json", "filter.json"} <= names
    stamp = (out / "cells" / "ppl_1024.json").stat().st_mtime_ns
    assert _run(args) == 0                                      # resumed: nothing rerun
    assert (out / "cells" / "ppl_1024.json").stat().st_mtime_ns == stamp


def test_redo_families_measures_them_again(tiny_model, tmp_path, capsys) -> None:
    """``--redo-families F``: F's rows and skip records leave every cell file on disk and the
    run measures just them again (the other rows stay as they were); a family the run does not
    have, or a run that is not a seed suite, exits 2 naming the flag before --out is taken."""
    import dataclasses

    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_spec import suite_key
    from hikv.model.accuracy.seed_suite import SEED_SUITES, redo_families, run_seed_suite

    model, cache = tiny_model
    small = dataclasses.replace(SEED_SUITES["seed-smoke"], tasks=("passkey",),
                                protocols=("prompt",))
    out = tmp_path / "seed"
    kw = {"model": str(model), "cache": cache, "preset": "tiny", "log": lambda _: None}
    run_seed_suite(small, out, **kw)
    cells = out / "cells"
    before = {p.stem: read_rows(p)[0] for p in cells.glob("*.json")}
    assert redo_families(cells, ["snapkv"], log=lambda _: None) == sorted(before)
    for key, rows in before.items():
        got, meta = read_rows(cells / f"{key}.json")
        assert "suite_key" not in meta and not any(k.startswith("snapkv@")
                                                   for k in meta["skipped"])
        assert got == [r for r in rows if not r["label"].startswith("snapkv@")]
    run_seed_suite(small, out, **kw)
    for key, rows in before.items():
        got, meta = read_rows(cells / f"{key}.json")
        assert meta["suite_key"] == suite_key(small)
        old = {r["label"]: r for r in rows}
        new = {r["label"]: r for r in got}
        assert sorted(new) == sorted(old), key
        for lab, r in new.items():
            if lab.startswith("snapkv@"):           # measured again (batched apart: last bits)
                assert r.get("ppl", 0) == pytest.approx(old[lab].get("ppl", 0), rel=1e-5)
            else:
                assert r == old[lab], (key, lab)
    base = ["run", "--suite", "seed-smoke", "--model", str(model), "--cache", str(cache),
            "--preset", "tiny", "--out", str(tmp_path / "none")]
    assert _run([*base, "--redo-families", "quest"]) == 2
    assert "--redo-families ['quest']: not families of this run" in capsys.readouterr().err
    assert _run([*base[:2], "smoke", *base[3:], "--redo-families", "snapkv"]) == 2
    assert "--redo-families apply to the seed suites" in capsys.readouterr().err
    assert _run([*base, "--screen", "passkey", "nope"]) == 2
    assert "--screen ['nope']: not tasks of suite 'seed-smoke'" in capsys.readouterr().err
    assert _run([*base, "--screen", "all", "--tables-only"]) == 2
    assert "--screen chooses how task cells run" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


def _check_like_one_process(tiny_model, tmp_path, **run) -> None:
    """The two-cell seed suite (passkey, prompt protocol; a perplexity cell of 4 windows with
    a look after 2, which runs window by window in parallel) run with ``run`` (workers,
    executor) gives the rows one process gives."""
    import dataclasses

    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite

    model, cache = tiny_model
    small = dataclasses.replace(SEED_SUITES["seed-smoke"], tasks=("passkey",),
                                protocols=("prompt",), ppl_windows=4, ppl_looks=(2,),
                                prune="noninferiority")
    one, other = tmp_path / "one", tmp_path / "other"
    run_seed_suite(small, one, model=str(model), cache=cache, preset="tiny",
                   log=lambda _: None)
    run_seed_suite(small, other, model=str(model), cache=cache, preset="tiny",
                   log=lambda _: None, **run)
    for key in ("ppl_1024", "passkey_prompt_1024"):
        assert read_rows(one / "cells" / f"{key}.json")[0] == \
            read_rows(other / "cells" / f"{key}.json")[0], key
        # each cell records the time its own worker spent on it, as one process does
        meta = read_rows(other / "cells" / f"{key}.json")[1]
        assert meta["cpu_s"] > 0 and 0 < meta["wall_s"], (key, meta["cpu_s"], meta["wall_s"])


def test_seed_suite_workers_match_one_process(tiny_model, tmp_path) -> None:
    """Two worker processes (--workers 2) give the rows one process gives."""
    _check_like_one_process(tiny_model, tmp_path, workers=2)


@pytest.mark.slow
def test_ray_executor_runs_two_cells(tiny_model, tmp_path) -> None:
    """The optional Ray executor: two cells on a local Ray instance give the rows one process
    gives."""
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("SKIPPED, NOT PASSED: ray is not installed (pip install -e \".[ray]\")")
    _check_like_one_process(tiny_model, tmp_path, executor="ray")


def test_device_option(tiny_model, tmp_path) -> None:
    """--device cpu and auto run on this machine; cuda where there is none is a clear error."""
    model, cache = tiny_model
    common = ["--model", str(model), "--cache", str(cache), "--preset", "tiny"]
    for dev in ("cpu", "auto"):
        out = tmp_path / dev
        assert _run(["perplexity", *common, "--methods", "full", "--windows", "1", "--window",
                     "200", "--prefix", "190", "--device", dev, "--out", str(out)]) == 0
        meta = json.loads((out / "perplexity.json").read_text())["meta"]
        assert meta["device"] == ("cuda" if torch.cuda.is_available() and dev == "auto"
                                  else "cpu")
    if not torch.cuda.is_available():
        assert _run(["perplexity", *common, "--methods", "full", "--windows", "1", "--window",
                     "200", "--prefix", "190", "--device", "cuda",
                     "--out", str(tmp_path / "c")]) == 2
    assert _run(["perplexity", *common, "--methods", "full", "--device", "tpu",
                 "--out", str(tmp_path / "t")]) == 2


def test_one_prefill_shared_by_every_batch_of_methods(tiny_model) -> None:
    """Methods split into batches of one adopt the first batch's recorded prompt pass: the
    rows equal those of one pass per batch, exactly (perplexity with H2O's column sums and
    SnapKV's / HiKV's observation windows, and generated task answers)."""
    from hikv.model.accuracy import experiments as A
    from hikv.model.accuracy.tasks import essay_words
    from hikv.model.lm.runner import lm_config, load_lm
    from hikv.presets import get_preset

    model, cache = tiny_model
    lm = load_lm(str(model), cache=cache)
    cfg = lm_config(get_preset("tiny"), lm.shape)
    specs = [A.parse_method(x, cfg.policy, lm.shape.head_dim)
             for x in ("full", "h2o@32", "snapkv@32", "hikv-evict@32", "quest@32")]
    text = (cache / "assets" / "pg-essays" / "PaulGrahamEssays" / "a.txt").read_text()
    wins = A.text_windows(lm, text, 200, 1)
    one = A.perplexity(lm, specs, cfg, wins, 180, batch=1)
    each = A.perplexity(lm, specs, cfg, wins, 180, batch=1, share_prefill=False)
    assert one == each
    kw = {"task": "passkey", "length": 400, "trials": 1, "protocol": "prompt",
          "words": essay_words(text), "batch": 2, "seed": SEED}
    assert A.task_accuracy(lm, specs, cfg, **kw) == \
        A.task_accuracy(lm, specs, cfg, share_prefill=False, **kw)


def test_each_batch_is_freed_before_the_next_runs(tiny_model) -> None:
    """Memory: once a batch of methods has been decoded, nothing keeps its
    sequences (and so their K/V copies) alive while the later batches run -- in perplexity
    windows, in task answers and in the two protocols' shared trial. A local list naming the
    later batches for the shared prompt pass would keep every batch alive to the end (an 8k
    perplexity cell at 14 GB: two workers run out of memory)."""
    import gc
    import random
    import weakref

    from hikv.model.accuracy import experiments as A
    from hikv.model.accuracy import seed_trials
    from hikv.model.accuracy.tasks import essay_words, make_case
    from hikv.model.lm.runner import lm_config, load_lm
    from hikv.presets import get_preset

    model, cache = tiny_model
    lm = load_lm(str(model), cache=cache)
    cfg = lm_config(get_preset("tiny"), lm.shape)
    specs = [A.parse_method(x, cfg.policy, lm.shape.head_dim)
             for x in ("full", "h2o@32", "snapkv@32", "quest@32")]
    text = (cache / "assets" / "pg-essays" / "PaulGrahamEssays" / "a.txt").read_text()
    seen: list[list[weakref.ref]] = []
    leaked: list[int] = []
    real_step = A.step

    def watching(lm_, seqs, tokens):
        ids = [id(s) for s in seqs]
        if not seen or [id(r()) for r in seen[-1]] != ids:
            gc.collect()
            # every batch before the previous one (the previous may still be on the stack of
            # the call that is building this batch) must be gone
            leaked.extend(i for i, batch in enumerate(seen[:-1])
                          if any(r() is not None for r in batch))
            seen.append([weakref.ref(s) for s in seqs])
        return real_step(lm_, seqs, tokens)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(A, "step", watching)
        mp.setattr("hikv.model.lm.route.step", watching)
        A.perplexity(lm, specs, cfg, A.text_windows(lm, text, 200, 1), 180, batch=1)
        assert len(seen) >= 4 and not leaked, (len(seen), leaked)
        seen.clear()
        A.task_accuracy(lm, specs, cfg, task="passkey", length=400, trials=1,
                        protocol="prompt", words=essay_words(text), batch=1, seed=SEED)
        assert len(seen) >= 4 and not leaked, (len(seen), leaked)
        seen.clear()
        case = make_case(lm, "passkey", 400, random.Random(SEED), words=essay_words(text))
        seed_trials._fork_generate(lm, specs, specs, cfg, case, batch=1)
        assert len(seen) >= 8 and not leaked, (len(seen), leaked)


def test_noninferiority_grid_and_frontier_on_the_tiny_model(tiny_model, tmp_path,
                                                            capsys) -> None:
    """The chain a long run takes, on the tiny model: a seed suite with the finer budget grid,
    more windows and trials and the non-inferiority pruning writes cells with per-block NLLs
    and the non-inferiority tables; `hikv frontier` reads them."""
    from hikv.model.accuracy.io import read_rows

    model, cache = tiny_model
    out = tmp_path / "seed"
    assert _run(["run", "--suite", "seed-smoke", "--model", str(model), "--cache", str(cache),
                 "--preset", "tiny", "--out", str(out), "--budget-step", "1.4142",
                 "--windows", "2", "--trials", "2", "--suite-protocols", "prompt",
                 "--prune-for", "noninferiority"]) == 0
    rows, meta = read_rows(out / "cells" / "ppl_1024.json")
    assert {r["budget"] for r in rows if r["label"].startswith("snapkv")} == {64, 91, 128}
    assert all(len(r["nll_blocks"]) == 2 for r in rows)
    assert meta["suite_key"][-2:] == ["noninferiority", "step 1.4142"]
    ni, nmeta = read_rows(out / "noninf_prompt_1024.json")
    assert {r["verdict"] for r in ni} <= {"yes", "no", "undecided"}
    assert nmeta["level"] == 0.95 and nmeta["task_margin"] == 0.05
    assert "## Non-inferiority: protocol `prompt`, N = 1024" in \
        (out / "seed_table.md").read_text()
    assert not (out / "iso_follow-up_1024.json").exists()
    name = meta["shape"]["name"]
    fr = tmp_path / "frontier"
    rc = main(["frontier", "--model", name, "--length", "1024", "--cells", str(out),
               "--preset", "tiny", "--no-area", "--out", str(fr)])
    assert rc == 0 and list(fr.glob("frontier_*.png"))
    # --task-top-budget on the finished folder: the perplexity cell is complete under it (the
    # file is not rewritten); each task cell runs or skips every family's largest budget
    before = (out / "cells" / "ppl_1024.json").read_bytes()
    assert _run(["run", "--suite", "seed-smoke", "--model", str(model), "--cache", str(cache),
                 "--preset", "tiny", "--out", str(out), "--budget-step", "1.4142",
                 "--windows", "2", "--trials", "2", "--suite-protocols", "prompt",
                 "--prune-for", "noninferiority", "--task-top-budget"]) == 0
    assert (out / "cells" / "ppl_1024.json").read_bytes() == before
    for task in ("passkey", "niah_single"):
        trows, tmeta = read_rows(out / "cells" / f"{task}_prompt_1024.json")
        assert tmeta["suite_key"][-1] == "task top"
        got = {r["label"] for r in trows}
        for fam in ("snapkv", "hikv-evict"):
            top_label = max((r for r in rows if r["label"].startswith(fam + "@")),
                            key=lambda r: r["budget"])["label"]
            assert top_label in got or "dropped" in tmeta["skipped"][top_label], (task, fam)
    # --tables-only rebuilds the tables from the cells, running nothing and drawing no bar
    cells = {q.name: q.read_bytes() for q in (out / "cells").iterdir()}
    (out / "seed_table.md").unlink()
    capsys.readouterr()
    assert _run(["run", "--suite", "seed-smoke", "--model", str(model), "--cache", str(cache),
                 "--preset", "tiny", "--out", str(out), "--budget-step", "1.4142",
                 "--windows", "2", "--trials", "2", "--suite-protocols", "prompt",
                 "--prune-for", "noninferiority", "--task-top-budget", "--tables-only"]) == 0
    assert "seed-smoke [" not in capsys.readouterr().err
    assert (out / "seed_table.md").is_file()
    assert {q.name: q.read_bytes() for q in (out / "cells").iterdir()} == cells
    # seed suites' options are refused elsewhere
    assert _run(["run", "--suite", "smoke", "--model", str(model), "--cache", str(cache),
                 "--out", str(tmp_path / "x"), "--variants"]) == 2
    assert _run(["run", "--suite", "smoke", "--model", str(model), "--cache", str(cache),
                 "--out", str(tmp_path / "x"), "--task-top-budget"]) == 2
