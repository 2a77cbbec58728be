"""The attention-level result table (hikv.sim.explore.report, `hikv report`)."""

from __future__ import annotations

import json
import math

import pytest
from cost_helpers import cells_or_skip

from hikv.params import Method, MethodSpec, ParamError, to_dict
from hikv.presets import BASELINES, get_preset
from hikv.scripts.cli import main
from hikv.sim.explore import render as RR
from hikv.sim.explore import report as R


def test_table_rows_and_ratios():
    cfg = get_preset("default")
    rep = R.build_report(cfg, area=False)
    assert [r.method for r in rep.rows] == ["full", *BASELINES, "hikv"]
    assert BASELINES[:5] == ("h2o", "snapkv", "quest", "sparq", "ds")
    full, hikv = rep.row(Method.FULL), rep.row(Method.HIKV)
    assert full.speedup_vs_full == 1.0 and hikv.hikv_speedup_vs_this == 1.0
    for r in rep.rows:
        assert r.speedup_vs_full == pytest.approx(full.time_s / r.time_s)
        assert r.hikv_speedup_vs_this == pytest.approx(r.time_s / hikv.time_s)
        assert r.hikv_roofline_bound_vs_this == pytest.approx(r.roofline_s / hikv.roofline_s)
        assert r.bound in ("memory", "compute")
        assert r.speedup_vs_full <= r.roofline_bound_vs_full * 1.05
    assert rep.timing_model == "rtl" and "nominal" in rep.budgets
    assert any("sorter_timing" in n and "4 instances" in n for n in rep.notes)   # 64 B/cycle
    assert not any("PROVISIONAL" in n.upper() for n in rep.notes)
    assert "provisional" not in RR.rows_csv(rep).lower()


def test_claims_mark_references_and_ours():
    rep = R.build_report(get_preset("paper"), area=False)
    claims = {c["claim"]: c for c in rep.claims}
    assert len(claims) == 5
    sp = claims["attention speedup vs full KV"]
    assert "7.95x" in sp["reference"] and sp["origin"] == "model"
    assert sp["ours_value"] == pytest.approx(rep.row(Method.HIKV).speedup_vs_full)
    assert "90%" in claims["attention energy vs full KV"]["reference"]
    assert "1.82x to 4.87x" in claims["external bytes vs importance-based baselines"][
        "reference"]
    assert claims["HiKV units' area"]["origin"] == "unavailable"
    assert claims["attention energy vs full KV, static included"]["origin"] == "unavailable"
    md = RR.markdown(rep)
    assert "reference (seed paper, not measured here)" in md and "PROVISIONAL" not in md
    # SparQ's and Double Sparsity's Stage I over N + 1 = 32,769 tokens exceeds max_n = 32,768
    assert any("larger than the built sorter" in n and "sparq" in n for n in rep.notes)


def test_iso_accuracy_file(tmp_path):
    cfg = get_preset("default")
    hikv = MethodSpec.for_hikv(cfg.policy)
    pts = [{"spec": to_dict(hikv), "metric_value": 0.5, "within_tolerance": True},
           {"spec": to_dict(MethodSpec(Method.H2O, budget=512, recent=32)),
            "metric_value": 0.9, "within_tolerance": True},
           {"spec": to_dict(MethodSpec(Method.H2O, budget=1024, recent=32)),
            "metric_value": 0.2, "within_tolerance": True},
           {"spec": to_dict(MethodSpec(Method.QUEST, budget=128, recent=32)),
            "metric_value": 5.0, "within_tolerance": False}]
    f = tmp_path / "iso.json"
    f.write_text(json.dumps({"schema": R.ISO_SCHEMA, "metric": "ppl_increase_pct",
                             "tolerance": 1.0, "context": 1024, "points": pts}))
    iso = R.load_iso_accuracy(f, cfg)
    assert [s.label for s in iso.specs] == ["full", "h2o@512", hikv.label]
    rep = R.build_report(cfg, iso=iso, area=False)
    assert "iso-accuracy" in rep.budgets and [r.label for r in rep.rows][1] == "h2o@512"
    assert any("context 1024" in n for n in rep.notes)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ParamError, match="schema"):
        R.load_iso_accuracy(bad, cfg)
    bad.write_text(json.dumps({"schema": R.ISO_SCHEMA, "metric": "x", "tolerance": 1,
                               "points": pts[1:3]}))
    with pytest.raises(ParamError, match="no HiKV point"):
        R.load_iso_accuracy(bad, cfg)


def _section(cfg, rep, **kw):
    return R.ReportSection("Serving", f"serving of {rep.preset} {kw}", [{"x": 1}])


def test_extra_sections_hook(monkeypatch):
    monkeypatch.setattr(R, "REPORT_SECTIONS", {"serving": _section})
    assert R.build_report(get_preset("tiny"), area=False).sections == ()
    rep = R.build_report(get_preset("tiny"), area=False, sections=True,
                         section_options={"serving": {"max_requests": 7}})
    assert [s.title for s in rep.sections] == ["Serving"]
    assert "## Serving\n\nserving of tiny {'max_requests': 7}" in RR.markdown(rep)
    with pytest.raises(ParamError, match="report section"):
        R.build_report(get_preset("tiny"), area=False, sections=("nope",))


def _trace(path, n=60, gap_s=0.4):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):
        rows.append(f"2023-11-16 18:{15 + int(i * gap_s) // 60:02d}:"
                    f"{int(i * gap_s) % 60:02d}.{int(1e7 * (i * gap_s % 1)):07d},"
                    f"{200 + 37 * (i % 11)},{5 + 3 * (i % 7)}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_serving_section_full_best_baseline_and_hikv(tmp_path):
    from hikv.sim.serving.report import report_section

    sec = report_section(get_preset("default"), None, max_requests=40,
                         trace=_trace(tmp_path / "conv.csv"))
    roles = [r["role"] for r in sec.rows]
    assert roles == ["full KV", "best baseline", "HiKV"]
    assert sec.rows[0]["method"] == "full" and sec.rows[2]["method"] == "hikv"
    assert sec.rows[1]["method"] in BASELINES
    assert all(r["requests"] == 40 and r["goodput_req_per_s"] > 0 for r in sec.rows)
    assert "the first 40 requests" in sec.markdown and "TPOT P99" in sec.markdown
    missing = report_section(get_preset("default"), None, trace=tmp_path / "none.csv")
    assert missing.rows == [] and "Skipped" in missing.markdown and "HIKV_DATA" in \
        missing.markdown
    with pytest.raises(ParamError, match="max_requests"):
        report_section(get_preset("default"), None, max_requests=0,
                       trace=tmp_path / "conv.csv")


def test_cli_writes_all_outputs(tmp_path, capsys, monkeypatch):
    out = tmp_path / "rep"
    monkeypatch.setenv("HIKV_DATA", str(tmp_path))
    _trace(tmp_path / "AzureLLMInferenceTrace_conv.csv", n=30)
    assert main(["report", "--preset", "default", "--no-area", "--out", str(out),
                 "--serving-requests", "20"]) == 0
    text = capsys.readouterr().out
    assert "Reference claims against ours" in text
    assert "## Serving (model): Azure conversation trace" in text and "first 20" in text
    for name in ("report.md", "report.csv", "report.json", "config.json", "methods.png",
                 "speedup_vs_context.png"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads((out / "report.json").read_text())
    assert data["preset"] == "default" and len(data["rows"]) == len(BASELINES) + 2
    assert [r["role"] for r in data["sections"][0]["rows"]] == ["full KV", "best baseline",
                                                                  "HiKV"]
    lines = (out / "report.csv").read_text().splitlines()
    assert len(lines) == len(BASELINES) + 3 and "speedup_vs_full" in lines[0]
    assert main(["report", "--preset", "tiny", "--no-area", "--no-serving", "--out",
                 str(out)]) == 2          # an earlier report's files: refused without --force
    assert main(["report", "--preset", "tiny", "--no-area", "--no-serving", "--out",
                 str(out), "--force"]) == 0
    assert main(["report", "--preset", "nope", "--no-area", "--out", str(out)]) == 2
    assert main(["report", "--preset", "tiny", "--no-area", "--serving-requests", "-1",
                 "--out", str(out)]) == 2


def test_area_section_with_synthesis():
    cells_or_skip()
    rep = R.build_report(get_preset("tiny"), fetch_cells=False)
    a = rep.area
    assert a["available"] and a["baseline_m2"] > 0
    assert {i["name"] for i in a["items"] if i["part"] == "baseline"} >= {
        "MAC lane (fp16 x fp16 + fp32)", "softmax lane: exp unit"}
    from hikv.hw.blocks import BLOCKS

    if "sorter" not in BLOCKS or "loader" not in BLOCKS:
        assert math.isnan(a["overhead_vs_baseline"]) and a["missing_blocks"]
    else:
        assert a["overhead_vs_baseline"] > 0


def test_clocks_assumed_without_synthesis():
    from hikv.sim.explore.render import markdown

    rep = R.build_report(get_preset("default"), area=False)
    ck = rep.clocks
    assert ck["policy"] == "per_block" and set(ck["assumed"]) == {
        "pe_array", "sorter", "loader", "scorer"}
    text = markdown(rep)
    assert "## Clocks" in text and "**Assumed, not checked:**" in text
    assert any("assumed at 1 GHz" in n and "not checked" in n for n in rep.notes)
    h = rep.row(Method.HIKV)
    assert h.scorer_cycles_per_head > 0 and 0 < h.bytes_bound_fraction <= 1
    assert h.bytes_bound_s == pytest.approx(h.bytes_burst / 256e9)


def test_clocks_from_the_timing_flow_and_each_unit_in_the_area():
    """With synthesis: every used block's clock from the ASIC estimate (origin, source and
    critical path printed), the phases at those clocks, each unit in its own area row."""
    cells_or_skip()
    from hikv.sim.explore.render import markdown

    cfg = get_preset("tiny")
    rep = R.build_report(cfg, fetch_cells=False)
    ck = rep.clocks
    for b in ("topk", "stage2", "loader"):     # tiny: the radix engine and the Stage II block
        c = ck["blocks"][b]
        assert c["origin"] == "sta" and c["critical_path"] and c["hz"] > 0, b
    pe = ck["blocks"]["pe_array"]   # the reference clock, our lanes' estimate beside it
    assert pe["origin"] == "assumed" and pe["hz"] == cfg.accel.clock_hz
    assert "would close" in pe["source"]
    assert not ck["blocks"]["scorer"]["used"] and ck["assumed"] == ["pe_array"]
    text = markdown(rep)
    assert "| topk | " in text and "Stillmaker-Baas" in text
    assert "Baseline accelerator (the system the overhead is measured against): our " \
           "assumption" in text
    units = [i["name"] for i in rep.area["items"] if i["part"] == "hikv" and "." not in i["name"]]
    buffers = [u for u in units if u.startswith("SRAM: pipeline")]   # the pipeline's SRAMs
    assert len(buffers) == 2
    assert [u for u in units if u not in buffers] == ["topk", "stage2", "loader"]   # no scorer
    assert rep.area["loader_clock_hz"] == ck["blocks"]["loader"]["effective_hz"]
    from hikv.sim.cost.attention_model import attention_cost
    from hikv.sim.cost.clocks import accelerator_clocks

    full = attention_cost(R.baseline_specs(cfg)[0], cfg, clocks=accelerator_clocks(cfg))
    assert rep.row(Method.FULL).time_s == pytest.approx(float(full.time_s))
