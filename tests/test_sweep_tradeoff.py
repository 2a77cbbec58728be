"""The area / throughput trade-off curve (hikv.sim.explore.tradeoff, `hikv sweep --tradeoff`):
block areas from cached syntheses with the rest interpolated, the share of the system against
throughput, the 8 % line and the CLI's checks. Synthesis is replaced by fixed per-lane areas
here (the real run reads the synthesis cache; docs/cost_model.md gives its command and
numbers)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from hikv.params import ParamError
from hikv.presets import get_preset
from hikv.scripts.cli import main
from hikv.sim.explore import tradeoff as T

#: fake synthesis results: NAND2 equivalents per lane count (linear in the lanes + a constant)
_GE = {"sorter": (20_000, 3_000), "scorer": (5_000, 2_000)}


def _fake_cache(known: dict[str, set[int]], loader_ge: float = 30_000):
    def cached(block, cfg):
        if block == "loader":
            return SimpleNamespace(nand2_equivalents=loader_ge, macro_bytes=4096)
        lanes = getattr(cfg, block).lanes
        if lanes not in known.get(block, set()):
            return None
        c, per = _GE[block]
        return SimpleNamespace(nand2_equivalents=c + per * lanes, macro_bytes=0)
    return cached


def test_block_areas_interpolate_between_cached_builds(monkeypatch):
    cfg = get_preset("default")
    monkeypatch.setattr(T, "cached_synth", _fake_cache({"sorter": {8, 32}}))
    a = T.block_areas(cfg, "sorter", [4, 8, 16, 32, 64])
    assert a[8].origin == "synthesised" and a[32].origin == "synthesised"
    assert a[16].origin.startswith("interpolated") and a[64].origin.startswith("extrapolated")
    assert a[4].origin.startswith("extrapolated")
    # the fake areas are linear in the lanes, so interpolation is exact
    assert a[16].area_m2 == pytest.approx(
        a[8].area_m2 + (a[32].area_m2 - a[8].area_m2) * (16 - 8) / (32 - 8))
    assert a[4].area_m2 < a[8].area_m2 < a[16].area_m2 < a[32].area_m2 < a[64].area_m2
    monkeypatch.setattr(T, "cached_synth", _fake_cache({}))
    with pytest.raises(ParamError, match="no synthesis of the sorter"):
        T.block_areas(cfg, "sorter", [8])


def _run(monkeypatch, cfg, **kw):
    import hikv.sim.eda.area as A

    monkeypatch.setattr(T, "cached_synth", _fake_cache({"sorter": {8, 16, 32},
                                                         "scorer": {8, 32}}))
    base = SimpleNamespace(baseline_m2=1e-6)     # 1 mm^2
    monkeypatch.setattr(A, "accelerator_area", lambda cfg, blocks=(): base)
    kw = {"sorter_lanes": [8, 16, 32], "scorer_lanes": [8, 16, 32], "loaders": [1, 2, 4],
          **kw}
    return T.tradeoff(cfg, **kw)


def test_tradeoff_share_throughput_and_summary(monkeypatch, tmp_path):
    cfg = get_preset("default")
    r = _run(monkeypatch, cfg)
    n = 27
    assert r.share.shape == (n,) and r.scorer_used
    assert np.allclose(r.share, r.area_hikv_m2 / (1e-6 + r.area_hikv_m2))
    # more of any unit never costs less area and, in the pipelined model, never runs slower
    for ax in ("sorter_lanes", "scorer_lanes", "loaders"):
        v = getattr(r, ax)
        for i in range(n):
            for j in range(n):
                others = [a for a in ("sorter_lanes", "scorer_lanes", "loaders") if a != ax]
                if all(getattr(r, a)[i] == getattr(r, a)[j] for a in others) and v[i] < v[j]:
                    assert r.area_hikv_m2[i] < r.area_hikv_m2[j]
                    assert r.steps_per_s[i] <= r.steps_per_s[j] * (1 + 1e-12)
    # the fewest loaders are loader-bound on `default` (the rule asks for 4 at 1 GHz)
    assert r.loader_rule == (4, 1e9)
    assert set(r.bottleneck[r.loaders == 1]) == {"loaders"}
    w = r.best_within(1.0)
    assert w == int(np.argmax(r.steps_per_s))
    assert r.best_within(0.0) is None
    c = r.cheapest_reaching(0.0)
    assert r.share[c] == r.share.min()
    files = T.write_tradeoff(r, tmp_path)
    md = (tmp_path / "tradeoff.md").read_text()
    assert "**8 % line**" in md and "interpolated" in md
    assert len(files) == 2 and (tmp_path / "tradeoff.csv").read_text().count("\n") == n + 1
    assert T.plot_tradeoff(r, tmp_path).exists()
    text = " ".join(T.summary(r))
    assert "Fastest point" in text and "bytes roofline" in text


def test_tradeoff_without_the_scoring_unit(monkeypatch):
    from hikv.params import Stage1Variant

    cfg = get_preset("default")
    cfg = cfg.replace(policy=dataclasses.replace(cfg.policy, stage1=Stage1Variant.EVICT))
    r = _run(monkeypatch, cfg)
    assert not r.scorer_used and set(r.scorer_lanes) == {cfg.scorer.lanes}
    assert r.share.shape == (9,)


def test_cli_tradeoff_checks(tmp_path, capsys):
    assert main(["sweep", "--preset", "default", "--loaders", "2", "--no-area",
                 "--out", str(tmp_path / "a")]) == 2
    assert "only with --tradeoff" in capsys.readouterr().err
    assert main(["sweep", "--preset", "default", "--tradeoff", "--context", "1024",
                 "--out", str(tmp_path / "b")]) == 2
    assert "--context" in capsys.readouterr().err
    assert main(["sweep", "--preset", "default", "--tradeoff", "--loaders", "0",
                 "--out", str(tmp_path / "c")]) == 2
    assert "--loaders 0" in capsys.readouterr().err


def test_each_sorter_lane_count_at_its_own_builds_clock(monkeypatch):
    """With the timing flow's sorter clock, a lane count with a synthesised build is timed at
    that build's estimate, one without keeps the
    preset's build's clock and says so; assumed clocks apply to every lane count."""
    import hikv.sim.eda.sta as S
    from hikv.params import MethodSpec
    from hikv.sim.cost.attention_model import Overrides, attention_cost
    from hikv.sim.cost.clocks import assumed_clocks

    cfg = get_preset("default")
    monkeypatch.setattr(T, "cached_synth", _fake_cache({"sorter": {8, 16}}))
    slow_hz = {8: 9e8, 16: 3e8}
    monkeypatch.setattr(S, "block_clock", lambda block, c: {
        "clock_hz": slow_hz[c.sorter.lanes], "source": "fake STA", "critical_path": "a -> b"})
    base = assumed_clocks(cfg)
    assert all(n == "" and ck is base
               for n, ck in T.sorter_clocks(cfg, [8, 16, 32], base).values())
    sta = dataclasses.replace(base, blocks={**base.blocks, "sorter": dataclasses.replace(
        base.blocks["sorter"], origin="sta", hz=8e8)})
    own = cfg.sorter.lanes
    got = T.sorter_clocks(cfg, sorted({8, 16, 64, own}), sta)
    assert got[own] == ("", sta)
    for p in {8, 16} - {own}:
        assert got[p][0] == "" and got[p][1].hz("sorter") == slow_hz[p]
        assert got[p][1].hz("loader") == sta.hz("loader")
    assert "64: clock of the" in got[64][0] and got[64][1] is sta
    # the trade-off times each point at its sorter's clock: equal to a direct evaluation
    import hikv.sim.eda.area as A

    monkeypatch.setattr(A, "accelerator_area",
                        lambda cfg, blocks=(): SimpleNamespace(baseline_m2=1e-6))
    monkeypatch.setattr(T, "cached_synth", _fake_cache({"sorter": {8, 16, 64},
                                                         "scorer": {8, 32}}))
    slow_hz[64] = 7e8
    r = T.tradeoff(cfg, sorter_lanes=[16, 64], scorer_lanes=[32], loaders=[4], clocks=sta)
    ck16 = T.sorter_clocks(cfg, [16], sta)[16][1]
    want = attention_cost(MethodSpec.for_hikv(cfg.policy), cfg,
                          Overrides(sorter_lanes=16, scorer_lanes=32, loader_instances=4),
                          clocks=ck16)
    i = int(np.flatnonzero(r.sorter_lanes == 16)[0])
    assert r.steps_per_s[i] == pytest.approx(1.0 / float(want.time_s))
    assert r.origin[i] == "synthesised"
    # the table's instance rule is the loader's, at its own clock (256 GB/s / (64 B x 0.5 GHz))
    half = dataclasses.replace(sta, blocks={**sta.blocks, "loader": dataclasses.replace(
        sta.blocks["loader"], origin="sta", hz=5e8)})
    assert T._loader_rule(cfg, half) == (8, 5e8) and T._loader_rule(cfg, None) == (4, 1e9)
