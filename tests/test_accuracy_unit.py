"""Method labels, prompts, windows, the iso-accuracy table and the suite's method lists."""

from __future__ import annotations

import pytest

from hikv.model.accuracy import experiments as A
from hikv.model.accuracy.suite import SUITES, stage1_specs, stage2_specs
from hikv.model.lm.runner import LMShape, lm_config
from hikv.params import Method, ParamError, Stage1Scorer, Stage1Variant, Stage2Kind
from hikv.presets import get_preset

CFG = get_preset("default")
POL = CFG.policy


@pytest.mark.parametrize("label", [
    "full", "h2o@64", "snapkv@256", "quest@128", "sparq@256/r8", "ds@64/r16",
    "hikv-evict@256", "hikv-query_aware@64", "hikv-query_aware@256/lowbit4",
    "hikv-evict@128/v:static48", "hikv-query_aware@256/k:query_channels32/v:static56",
    "hikv-none@256/k:channel_groups32g16", "hikv-none@256/k:static48",
])
def test_labels_round_trip(label: str) -> None:
    spec = A.parse_method(label, POL, 64)
    assert spec.label == label
    assert A.parse_method(spec.label, POL, 64) == spec


def test_label_fields() -> None:
    s = A.parse_method("hikv-qa@128/lowbit3/k:channel_groups32g16/v:static40", POL, 64)
    p = s.hikv
    assert p is not None and s.budget == 128 and p.budget == 128
    assert p.stage1 is Stage1Variant.QUERY_AWARE and p.scorer is Stage1Scorer.LOWBIT_KEYS
    assert p.lowbit_bits == 3
    assert (p.k_rule.kind, p.k_rule.keep, p.k_rule.group) == (Stage2Kind.CHANNEL_GROUPS, 32, 16)
    assert (p.v_rule.kind, p.v_rule.keep) == (Stage2Kind.STATIC, 40)
    assert (p.sinks, p.compact_interval) == (POL.sinks, POL.compact_interval)
    b = A.parse_method("sparq@64", POL, 256)
    assert b.method is Method.SPARQ and b.channels == 64 and b.recent == 32
    assert A.parse_method("h2o@40", POL, 64).recent == 20
    assert A.family(s) == "hikv-query_aware/lowbit3/k:channel_groups32g16/v:static40"


@pytest.mark.parametrize("label,match", [
    ("h2o", "not a method label"), ("hikv-sometimes@64", "Stage I"),
    ("hikv-qa@64/v:query_channels32", "v_rule.kind"), ("hikv-qa@64/k:static99", "keep"),
    ("hikv-qa@64/k:wild32", "Stage II kind"), ("quest@0", "budget"),
])
def test_bad_labels(label: str, match: str) -> None:
    with pytest.raises(ParamError, match=match):
        A.parse_method(label, POL, 64)


def _row(label: str, ppl: float, burst: float, budget: int) -> dict:
    spec = A.parse_method(label, POL, 64)
    return {"label": spec.label, "family": A.family(spec), "method": spec.method.value,
            "budget": budget, "ppl": ppl, "bytes_ideal": burst, "bytes_burst": burst,
            "units": 90}


def _pk(label: str, correct: int, trials: int = 6) -> dict:
    return {"label": label, "correct": correct, "trials": trials}


def test_iso_table_picks_smallest_budget_with_all_larger_passing() -> None:
    ppl = [_row("full", 10.0, 1000, 256),
           _row("h2o@64", 10.05, 100, 64), _row("h2o@128", 10.5, 200, 128),
           _row("h2o@256", 10.09, 400, 256),
           _row("hikv-qa@64", 11.0, 80, 64), _row("hikv-qa@128", 10.08, 150, 128),
           _row("hikv-qa@256", 10.0, 300, 256),
           _row("quest@64", 12.0, 90, 64), _row("quest@256", 10.2, 350, 256)]
    pk = [_pk("full", 6), _pk("h2o@64", 6), _pk("h2o@128", 6), _pk("h2o@256", 5),
          _pk("hikv-query_aware@64", 6), _pk("hikv-query_aware@128", 6),
          _pk("hikv-query_aware@256", 6), _pk("quest@64", 6), _pk("quest@256", 6)]
    t = {r["family"]: r for r in A.iso_table(ppl, pk, ppl_tol=0.01)}
    # h2o@64 passes on its own, but h2o@128 (perplexity) and h2o@256 (passkey 5/6) fail
    assert t["h2o"]["iso_budget"] is None and not t["h2o"]["reached"]
    assert t["hikv-query_aware"]["iso_budget"] == 128
    assert t["hikv-query_aware"]["bytes_burst"] == 150
    assert t["hikv-query_aware"]["step_bytes_burst"] == 150 * 90
    assert t["quest"]["iso_budget"] is None            # +2% at its largest budget
    # full KV is the reference and keeps every token: no budget of its rows is an iso budget
    assert t["full"]["iso_budget"] == A.ALL_TOKENS and t["full"]["reached"]
    t2 = {r["family"]: r for r in A.iso_table(ppl, pk, ppl_tol=0.03, passkey_tol=0.2)}
    # h2o@128 is +5%: the smallest budget with every larger one passing is 256
    assert t2["h2o"]["iso_budget"] == 256 and t2["quest"]["iso_budget"] == 256
    red = {r["baseline"]: r for r in A.reductions(A.iso_table(ppl, pk, ppl_tol=0.03,
                                                              passkey_tol=0.2),
                                                  "hikv-query_aware")}
    assert red["quest"]["x_burst"] == pytest.approx(350 / 150)
    with pytest.raises(ParamError, match="full"):
        A.iso_table(ppl[1:], pk)


def test_iso_file_feeds_the_report() -> None:
    """The iso table written as hikv.iso_accuracy/1 is what `hikv report --iso` reads: one
    point per baseline and HiKV's best family, unreached methods left out and named."""
    import json

    from hikv.sim.explore.report import load_iso_accuracy

    ppl = [_row("full", 10.0, 1000, 256),
           _row("h2o@64", 10.5, 100, 64), _row("h2o@256", 10.5, 400, 256),
           _row("quest@64", 10.05, 90, 64), _row("quest@256", 10.0, 350, 256),
           _row("hikv-qa@64", 10.08, 80, 64), _row("hikv-qa@256", 10.0, 300, 256),
           _row("hikv-evict@64", 10.0, 50, 64), _row("hikv-evict@256", 10.0, 200, 256)]
    pk = [_pk(r["label"], 6) for r in ppl]
    iso = A.iso_table(ppl, pk, ppl_tol=0.01)
    data = A.iso_accuracy_file(iso, CFG, hikv_family="hikv-evict", ppl_tol=0.01,
                               passkey_tol=0.0, model="m", preset="default", context=2048,
                               source="test")
    assert {p["family"] for p in data["points"]} == {"h2o", "quest", "hikv-evict"}
    got = load_iso_accuracy_from(data, load_iso_accuracy)
    by = {s.method: s for s in got.specs}
    assert by[Method.QUEST].budget == 64 and by[Method.HIKV].budget == 64
    assert by[Method.HIKV].hikv.stage1 is Stage1Variant.EVICT
    assert Method.H2O not in by and got.unreached == ("h2o",)
    assert got.context == 2048 and got.tolerance == 1.0
    bad = {**data, "head_dim": CFG.layout.head_dim * 2}
    with pytest.raises(ParamError, match="head_dim"):
        load_iso_accuracy_from(bad, load_iso_accuracy)
    json.dumps(data)


def load_iso_accuracy_from(data, load):
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "iso.json"
        p.write_text(json.dumps(data))
        return load(p, CFG)


class _FakeLM:
    """Whitespace 'tokenizer': each word is one token (the word's index in a vocabulary)."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.inv: list[str] = []

    def encode(self, text: str) -> list[int]:
        out = []
        for w in text.replace(".", " .").split():
            if w not in self.vocab:
                self.vocab[w] = len(self.inv)
                self.inv.append(w)
            out.append(self.vocab[w])
        return out

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.inv[i] for i in ids)

    @property
    def prefix_ids(self) -> list[int]:
        return [self.encode("<bos>")[0]]


@pytest.mark.parametrize("depth", [0.0, 0.3, 1.0])
def test_passkey_case_classic(depth: float) -> None:
    lm = _FakeLM()
    c = A.passkey_case(lm, 400, depth, "12345")  # type: ignore[arg-type]
    assert abs(c.length - 400) <= len(lm.encode(A.CLASSIC_FILLER))
    needle = lm.encode(A.NEEDLE.format(key="12345"))
    assert c.haystack[c.needle_at: c.needle_at + len(needle)] == needle
    assert c.haystack[0] == lm.prefix_ids[0]
    frac = (c.needle_at - 1 - len(lm.encode(A.CLASSIC_INTRO))) / (len(c.haystack) - len(needle))
    assert abs(frac - depth) < 0.1
    assert c.answer == lm.encode(" 12345")


def test_passkey_case_essays_and_errors() -> None:
    lm = _FakeLM()
    essay = lm.encode("This is an essay sentence. " * 200)
    c = A.passkey_case(lm, 300, 0.5, "99999", "essays", essay_ids=essay)  # type: ignore[arg-type]
    assert lm.decode([c.haystack[c.needle_at - 1]]) == "."        # needle after a sentence
    with pytest.raises(ParamError, match="depth"):
        A.passkey_case(lm, 300, 1.5, "1")  # type: ignore[arg-type]
    with pytest.raises(ParamError, match="length"):
        A.passkey_case(lm, 20, 0.5, "1")  # type: ignore[arg-type]
    with pytest.raises(ParamError, match="filler"):
        A.passkey_case(lm, 300, 0.5, "1", "lorem")  # type: ignore[arg-type]


def test_text_windows() -> None:
    lm = _FakeLM()
    text = " ".join(f"w{i}" for i in range(1000))
    ws = A.text_windows(lm, text, 100, 4)  # type: ignore[arg-type]
    assert len(ws) == 4 and all(len(w) == 100 for w in ws)
    assert all(w[0] == lm.prefix_ids[0] for w in ws)
    firsts = [w[1] for w in ws]
    assert firsts == sorted(set(firsts))
    with pytest.raises(ParamError, match="need"):
        A.text_windows(lm, text, 600, 2)  # type: ignore[arg-type]


def test_text_windows_scored_tails_disjoint() -> None:
    """With ``scored``, windows may share context but their scored tails never overlap; the
    windows that fit without it are the same windows with it."""
    lm = _FakeLM()
    text = " ".join(f"w{i}" for i in range(1000))
    assert A.text_windows(lm, text, 100, 4, scored=20) == A.text_windows(lm, text, 100, 4)
    ws = A.text_windows(lm, text, 600, 8, scored=50)  # type: ignore[arg-type]
    assert len(ws) == 8 and all(len(w) == 600 for w in ws)
    tails = [tuple(w[-50:]) for w in ws]
    assert all(not set(a) & set(b) for i, a in enumerate(tails) for b in tails[i + 1:])
    with pytest.raises(ParamError, match="last 50 tokens disjoint"):
        A.text_windows(lm, text, 600, 10, scored=50)  # type: ignore[arg-type]
    with pytest.raises(ParamError, match="scored"):
        A.text_windows(lm, text, 600, 2, scored=0)  # type: ignore[arg-type]


def test_suite_method_lists() -> None:
    s = SUITES["full"]
    s1 = stage1_specs(s, CFG)
    labels = [x.label for x in s1]
    assert labels[0] == "full" and len(labels) == len(set(labels))
    assert len(s1) == 1 + len(s.budgets) * (len(s.baselines) + 3)
    assert all(x.hikv is None or (x.hikv.k_rule.kind is Stage2Kind.NONE and
                                  x.hikv.v_rule.kind is Stage2Kind.NONE) for x in s1)
    best = A.parse_method("hikv-qa@256", POL, 64)
    s2 = stage2_specs(s, CFG, best)
    keeps = sorted({(x.hikv.k_rule.keep or x.hikv.v_rule.keep) for x in s2})  # type: ignore
    assert keeps == [32, 48, 56]
    on_top = [x for x in s2 if x.hikv.stage1 is Stage1Variant.QUERY_AWARE]  # type: ignore
    alone = [x for x in s2 if x.hikv.stage1 is Stage1Variant.NONE]  # type: ignore
    assert len(on_top) == len(alone) == 12 and all(x.budget == 256 for x in on_top)
    shape = LMShape(name="g", layers=2, q_heads=4, kv_heads=1, head_dim=256, hidden=640,
                    intermediate=2048, vocab=1000, scale=0.0625, windows=(None, 512))
    gem = lm_config(CFG, shape)
    assert gem.layout.head_dim == 256 and gem.sorter.max_vec >= 256
    keeps256 = sorted({(x.hikv.k_rule.keep or x.hikv.v_rule.keep)  # type: ignore
                       for x in stage2_specs(s, gem, None)})
    assert keeps256 == [128, 192, 224]


def test_iso_table_compares_passkey_on_the_same_cells() -> None:
    ppl = [_row("full", 10.0, 1000, 256), _row("h2o@64", 10.0, 100, 64)]
    pk = [{"label": "full", "correct": 3, "trials": 6, "filler": "classic",
           "question": "decode", "length": 4096, "depth": 0.5},
          {"label": "full", "correct": 6, "trials": 6, "filler": "classic",
           "question": "decode", "length": 1024, "depth": 0.5},
          {"label": "h2o@64", "correct": 6, "trials": 6, "filler": "classic",
           "question": "decode", "length": 1024, "depth": 0.5}]
    # h2o ran only the 1024 cell, where full KV scores 6/6: 6/6 passes
    t = {r["family"]: r for r in A.iso_table(ppl, pk)}
    assert t["h2o"]["reached"] and t["h2o"]["passkey_full_acc"] == 1.0
    pk[2] = {**pk[2], "correct": 5}
    assert not {r["family"]: r for r in A.iso_table(ppl, pk)}["h2o"]["reached"]


def test_committed_iso_points_feed_the_default_report() -> None:
    """docs/results/smollm2/iso_points.json (the measured SmolLM2 study) loads for the default
    preset: HiKV's point with its 4-bit Stage I, and the baselines that never reached
    iso-accuracy named."""
    from pathlib import Path

    from hikv.params import Stage1Scorer
    from hikv.sim.explore.report import load_iso_accuracy

    path = Path(__file__).resolve().parents[1] / "docs/results/smollm2/iso_points.json"
    iso = load_iso_accuracy(path, CFG)
    by = {s.method: s for s in iso.specs}
    assert by[Method.HIKV].hikv.scorer is Stage1Scorer.LOWBIT_KEYS
    assert by[Method.HIKV].budget == 256 and iso.context == CFG.context
    assert iso.unreached == ("h2o", "quest", "snapkv")
