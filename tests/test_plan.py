"""Fleet sizing (hikv.sim.cluster.plan, `hikv plan`): the SLO parser, the replica search, an
unmet target reported as unmet, and the command's errors and files. The command's runs need
the A100 operator profile and skip with that reason when it is absent."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hikv.params import ParamError
from hikv.presets import get_preset, resolve_methods
from hikv.scripts.cli import main
from hikv.sim.cluster import plan as planmod
from hikv.sim.cluster.plan import parse_slo, pd_splits, smallest_fleet, with_slo
from hikv.sim.cluster.sched import OutputPredictor
from hikv.sim.serving.device import PROFILE_MODELS, find_profile
from hikv.sim.serving.workload import Workload

ROOT = Path(__file__).resolve().parents[1]


def test_slo_parser_names_what_is_wrong() -> None:
    assert parse_slo("ttft=0.5,tpot=0.1") == (0.5, 0.1)
    assert parse_slo(" TPOT=0.05 , ttft=2 ") == (2.0, 0.05)
    for bad, why in (("ttft=0.5", "tpot missing"), ("ttft=x,tpot=1", "not a number"),
                     ("ttft=-1,tpot=1", "out of range"), ("latency=1", "not ttft=SECONDS"),
                     ("ttft=1,ttft=2,tpot=1", "given twice"), ("ttft=inf,tpot=1", "range")):
        with pytest.raises(ParamError, match="--slo") as e:
            parse_slo(bad)
        assert why in str(e.value), bad


def _fake_cluster(threshold: dict[str, int]):
    """simulate_cluster stand-in: attainment 1 from ``threshold`` instances on (aggregated) or
    with at least that many decode instances (P/D), falling with fewer."""
    calls = []

    def sim(cfg, spec, wl, params, **kw):
        n = params.replicas if not params.prefill else params.decode
        calls.append((params.replicas, params.prefill, params.decode))
        a = min(1.0, n / threshold["n"])
        return SimpleNamespace(slo_met=lambda: np.array([a]))
    return sim, calls


@pytest.mark.parametrize("need, start", [(1, 1), (5, 1), (13, 1), (13, 8), (13, 32), (3, 8)])
def test_search_finds_the_smallest_fleet(monkeypatch, need, start) -> None:
    sim, calls = _fake_cluster({"n": need})
    monkeypatch.setattr(planmod, "simulate_cluster", sim)
    cfg = with_slo(get_preset("paper"), 1.0, 0.1, 0.99)
    spec = resolve_methods(cfg, "full")["full"]
    wl = Workload(np.array([0.0, 1.0]), np.array([10, 10]), np.array([2, 2]), 1.0, "w")
    pred = OutputPredictor.train(wl.prompt_tokens, wl.output_tokens)
    p = smallest_fleet(cfg, spec, wl, cost_model="roofline", predictor=pred, method="full",
                       cap=64, start=start)
    assert p.met and p.replicas == need and p.layout == "aggregated"
    assert len(calls) == len({c[0] for c in calls}) <= 2 * 7       # each size run once
    # unmet up to the cap: no count, the best attainment seen
    sim, calls = _fake_cluster({"n": 100})
    monkeypatch.setattr(planmod, "simulate_cluster", sim)
    p = smallest_fleet(cfg, spec, wl, cost_model="roofline", predictor=pred, method="full",
                       cap=64, start=start)
    assert not p.met and p.replicas is None and p.best.instances == 64
    assert p.best.attainment == pytest.approx(0.64)


def test_pd_search_tries_splits(monkeypatch) -> None:
    sim, calls = _fake_cluster({"n": 6})
    monkeypatch.setattr(planmod, "simulate_cluster", sim)
    cfg = with_slo(get_preset("paper"), 1.0, 0.1, 0.99)
    spec = resolve_methods(cfg, "full")["full"]
    wl = Workload(np.array([0.0, 1.0]), np.array([10, 10]), np.array([2, 2]), 1.0, "w")
    pred = OutputPredictor.train(wl.prompt_tokens, wl.output_tokens)
    p = smallest_fleet(cfg, spec, wl, cost_model="roofline", predictor=pred, method="full",
                       cap=64, pd=True)
    assert p.met and p.layout == "P/D 2:6" and p.replicas == 8       # 6 decode, 25 % prefill
    assert pd_splits(2) == [1] and pd_splits(8) == [2, 4, 6]


@pytest.fixture(scope="module")
def profile() -> Path:
    p = find_profile("a100", PROFILE_MODELS["llama3-8b"], start=ROOT / "tests")
    if p is None:
        pytest.skip("Vidur-format profiles not found: set HIKV_DATA or place "
                    "shared/data/vidur-profiles above the repository")
    return p


def _trace(path: Path, n: int = 40, rate: float = 2.0) -> Path:
    rng = np.random.default_rng(3)
    t = np.cumsum(rng.exponential(1 / rate, n))
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i, ti in enumerate(t):
        sec = int(ti)
        lines.append(f"2023-11-16 18:{sec // 60:02d}:{sec % 60:02d}.{int((ti % 1) * 1e6):06d}0,"
                     f"{200 + 37 * i % 1500},{5 + 11 * i % 90}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_plan_answers_and_reports_unmet(tmp_path, capsys, profile) -> None:
    tr = _trace(tmp_path / "t.csv")
    out = tmp_path / "plan"
    assert main(["plan", "--trace", str(tr), "--slo", "ttft=2,tpot=0.2", "--attainment", "0.9",
                 "--method", "hikv", "--max-replicas", "4", "--rates", "1,2",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "system gpu:" in text and "unmet" not in text
    rows = list(csv.DictReader((out / "plan.csv").open()))
    assert {r["method"] for r in rows} == {"full", "hikv"}
    assert all(r["met"] == "True" and int(r["replicas"]) >= 1 for r in rows)
    assert (out / "replicas_vs_rate.png").stat().st_size > 0
    # a TTFT no prefill can meet: unmet, with the best attainment, never a count
    assert main(["plan", "--trace", str(tr), "--slo", "ttft=0.001,tpot=0.2",
                 "--method", "full", "--max-replicas", "2", "--rates", "2",
                 "--out", str(tmp_path / "p2")]) == 0
    text = capsys.readouterr().out
    assert "unmet (best " in text
    rows = list(csv.DictReader((tmp_path / "p2" / "plan.csv").open()))
    assert rows and all(r["met"] == "False" and r["replicas"] == "" for r in rows)
    # nor as a fleet: no GPU count, layout or saving against full KV
    assert all(r["gpus"] == "" and r["layout"] == "" and float(r["attainment"]) < 1
               for r in rows)
    unmet = [line for line in text.splitlines() if "unmet (best " in line]
    assert unmet and all(line.rstrip().endswith("n/a") for line in unmet)


def test_plan_errors_name_the_input(tmp_path, capsys) -> None:
    tr = _trace(tmp_path / "t.csv", n=5)
    assert main(["plan", "--trace", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,x,3\n")
    assert main(["plan", "--trace", str(bad)]) == 2
    assert "bad.csv" in capsys.readouterr().err
    assert main(["plan", "--trace", str(tr), "--slo", "ttft=fast"]) == 2
    assert "--slo" in capsys.readouterr().err
    assert main(["plan", "--trace", str(tr), "--system", "hikv"]) == 2
    assert main(["plan", "--trace", str(tr), "--attainment", "1.5"]) == 2
    assert "--attainment" in capsys.readouterr().err
