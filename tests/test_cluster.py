"""The cluster simulator (hikv.sim.cluster.engine): one replica is the lone engine; routers on a
skewed load; P/D reduces to known behaviour with an ideal link; transfer bytes are the closed
form's; conservation, determinism, Little's law per instance; EWSJF, MAPS, the predictor;
bad parameters. Small workloads: seconds."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from serving_helpers import burst_workload, tight

from hikv.params import ParamError
from hikv.presets import get_preset, resolve_methods
from hikv.scripts.cli import main
from hikv.sim.cluster.engine import simulate_cluster, transfer_bytes
from hikv.sim.cluster.params import LINKS, ClusterParams, DynamicRatio, KVLink, get_link
from hikv.sim.cluster.report import parse_pd
from hikv.sim.cluster.router import jain_index
from hikv.sim.cluster.sched import OutputPredictor, split_workload
from hikv.sim.cost.closed_form import closed_form
from hikv.sim.serving.engine import simulate
from hikv.sim.serving.report import steady_state
from hikv.sim.serving.workload import Workload, find_azure_trace, read_azure_trace

ROOT = Path(__file__).resolve().parents[1]


def _pred(wl: Workload) -> OutputPredictor:
    return OutputPredictor.train(wl.prompt_tokens, wl.output_tokens)


# --------------------------------------------------------------------------- reduction
@pytest.mark.parametrize("name", ["full", "hikv-evict", "quest"])
def test_one_replica_round_robin_is_the_lone_engine(name):
    seed = 3
    cfg = tight(get_preset("default"), 9_000)          # tight: preemptions happen
    spec = resolve_methods(cfg, name)[name]
    wl = burst_workload(seed)
    lone = simulate(cfg, spec, wl, method=name)
    cl = simulate_cluster(cfg, spec, wl, ClusterParams(), predictor=_pred(wl), method=name)
    inst = cl.instances[0]
    ctx = f"{name}, seed {seed}"
    for f in ("first_scheduled_s", "first_token_s", "finish_s", "preemptions",
              "generated_tokens", "kv_time_s", "kv_used_blocks"):
        assert np.array_equal(getattr(lone, f), getattr(inst, f)), f"{ctx}: {f}"
    assert (lone.iterations, lone.events, lone.kv_block_seconds, lone.l_integral if False
            else lone.little_integral) == (inst.iterations, inst.events, inst.kv_block_seconds,
                                           inst.little_integral), ctx
    assert np.array_equal(lone.finish_s, cl.finish_s), ctx
    assert np.array_equal(lone.first_token_s, cl.first_token_s), ctx
    if name == "full":
        assert lone.preemptions.sum() > 0, f"{ctx}: the test must exercise preemption"


@pytest.mark.parametrize("name", ["full", "hikv-evict"])
def test_pd_with_an_ideal_link_reduces_to_known_behaviour(name):
    """1 prefill + 1 decode instance, ideal link: TTFTs are those of a lone engine serving
    one-token jobs; a request alone in the system finishes exactly when it does on one
    aggregated replica, and with a finite link exactly one transfer time later."""
    cfg = get_preset("default")
    spec = resolve_methods(cfg, name)[name]
    wl = burst_workload(7, n=120)
    pd = ClusterParams(prefill=1, decode=1, link=LINKS["ideal"])
    res = simulate_cluster(cfg, spec, wl, pd, predictor=_pred(wl))
    one_token = simulate(cfg, spec, Workload(wl.arrival_s, wl.prompt_tokens,
                                             np.ones(len(wl), np.int64), wl.rate_per_s, "x"))
    assert np.array_equal(res.first_token_s, one_token.first_token_s), name
    moved = res.output_tokens > 1
    assert np.array_equal(res.transfer_end_s[moved], res.first_token_s[moved]), name
    # sparse arrivals: every request alone
    sparse = Workload(np.arange(20) * 50.0, wl.prompt_tokens[:20], wl.output_tokens[:20], 0.02,
                      "sparse")
    agg = simulate(cfg, spec, sparse)
    ideal = simulate_cluster(cfg, spec, sparse, pd, predictor=_pred(wl))
    np.testing.assert_allclose(ideal.finish_s, agg.finish_s, rtol=1e-12, err_msg=name)
    link = KVLink("slow", 1e9, 1e-3)
    slow = simulate_cluster(cfg, spec, sparse, dataclasses.replace(pd, link=link),
                            predictor=_pred(wl))
    delay = np.where(sparse.output_tokens > 1,
                     1e-3 + transfer_bytes(cfg, spec, sparse.prompt_tokens) / 1e9, 0.0)
    np.testing.assert_allclose(slow.finish_s - agg.finish_s, delay, rtol=1e-9, atol=1e-12,
                               err_msg=name)


# --------------------------------------------------------------------------- transfer bytes
def test_transfer_bytes_are_the_closed_forms():
    cfg = get_preset("paper")
    m = cfg.model
    heads = m.layers * m.kv_heads
    prompts = np.array([1, 100, 511, 512, 513, 2048, 9000])
    specs = resolve_methods(cfg, "full,hikv-evict,snapkv,quest,hikv")
    got = {n: transfer_bytes(cfg, s, prompts) for n, s in specs.items()}
    for n, s in specs.items():
        kv = closed_form(s, cfg.layout)
        keep = np.minimum(prompts, s.budget) if kv.evicts else prompts
        assert np.array_equal(got[n], heads * kv.storage_bytes(keep)), n
    # full KV ships every token's K and V rows
    row = cfg.layout.stride(cfg.layout.row_bytes)
    assert np.array_equal(got["full"] % (heads * 2 * row), np.zeros(len(prompts))), got["full"]
    long = prompts > specs["hikv-evict"].budget
    assert (got["hikv-evict"][long] < got["full"][long]).all()
    assert (got["quest"] >= got["full"]).all() and (got["hikv"] >= got["full"]).all()
    # what a run ships is these numbers, request by request
    wl = burst_workload(2, n=60)
    res = simulate_cluster(cfg, specs["hikv-evict"], wl, ClusterParams(prefill=1, decode=2),
                           predictor=_pred(wl), with_isolated=False)
    want = np.where(wl.output_tokens > 1, transfer_bytes(cfg, specs["hikv-evict"],
                                                         wl.prompt_tokens), 0)
    assert np.array_equal(res.transfer_bytes, want)


# --------------------------------------------------------------------------- conservation
LAYOUTS = [ClusterParams(replicas=3, router="least-tokens"),
           ClusterParams(replicas=3, router="quartz", scheduler="ewsjf"),
           ClusterParams(prefill=1, decode=2, decode_router="maps"),
           ClusterParams(prefill=2, decode=2, decode_router="least-kv", router="p2c",
                         dynamic=DynamicRatio(interval_s=0.2, reconfig_s=0.1, cooldown_s=0.5))]


@pytest.mark.parametrize("params", LAYOUTS, ids=lambda p: f"{p.label}-{p.router}")
def test_conservation_determinism_and_little(params):
    seed = 13
    cfg = tight(get_preset("default"), 12_000)
    spec = resolve_methods(cfg, "full")["full"]
    wl = burst_workload(seed, n=200, rate=120.0)
    # the bare roofline keeps this load below saturation, so every pool has a steady window for
    # Little's law (with the measured efficiencies of the default step cost, 120/s saturates)
    kw = dict(predictor=_pred(wl), with_isolated=False, cost_model="attention-model")
    a = simulate_cluster(cfg, spec, wl, params, **kw)
    b = simulate_cluster(cfg, spec, wl, params, **kw)
    ctx = f"{params.label} {params.router}, seed {seed}"
    assert (a.completions == 1).all(), ctx
    assert np.array_equal(a.generated_tokens, wl.output_tokens), ctx
    # every instance's sequences complete once and free their KV
    for r in a.instances:
        assert (r.completions == 1).all() and r.kv_used_blocks[-1] == 0, ctx
    # tokens: prefill and decode iterations produce exactly the output tokens
    made = sum(r.decode_tokens + r.prefill_completions for r in a.instances)
    assert made == int(wl.output_tokens.sum()), ctx
    jobs = sum(len(r.arrival_s) for r in a.instances)
    assert jobs == len(wl) + (int((wl.output_tokens > 1).sum()) if params.prefill else 0), ctx
    assert (a.first_token_s >= a.arrival_s).all() and (a.finish_s >= a.first_token_s).all()
    # transferred bytes: shipped once per request with a decode phase, none in aggregation
    assert int(a.transfer_bytes.sum()) == (int(np.where(
        wl.output_tokens > 1, transfer_bytes(cfg, spec, wl.prompt_tokens), 0).sum())
        if params.prefill else 0), ctx
    for f in ("first_token_s", "finish_s", "route", "decode_route", "transfer_end_s"):
        assert np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True), f"{ctx}: {f}"
    # Little's law per pool, every term over the same window: exact (float rounding), also
    # where roles move
    for q in a.pools:
        assert q.window.requests > 0 and abs(q.window.rel_error) < 1e-9, f"{ctx}: {q}"
    if params.dynamic is None:
        checked = 0
        for r in a.instances:
            lc = r.little
            if steady_state(r)[0] and lc.requests >= 30:
                # the windowed law is exact up to the requests in flight at the window's two
                # edges: a relative error of order W / window
                tol = 2 * lc.mean_time_in_system_s / (lc.end_s - lc.start_s)
                assert abs(lc.rel_error) < tol, f"{ctx}: {r.method} {lc}, tol {tol:.3f}"
                checked += 1
        assert checked >= 2, ctx
    else:
        moves = sum(1 for _, _, role in a.roles[params.instances:] if role == "switching")
        assert moves >= 1, f"{ctx}: the dynamic ratio never moved"
        assert a.summary()["reconfigurations"] == moves, ctx
        # the instances are conserved: every one ends in a pool
        assert a.summary()["final_prefill_instances"] >= 1, ctx


def test_scale_up_does_not_lose_requests_on_a_trace():
    path = find_azure_trace("code", start=ROOT / "tests")
    if path is None:
        pytest.skip("Azure code trace not found (HIKV_DATA or shared/data/azure-llm-2023)")
    cfg = get_preset("paper")
    spec = resolve_methods(cfg, "hikv-evict")["hikv-evict"]
    pred, wl = split_workload(read_azure_trace(path, limit=400), 0.3)
    res = simulate_cluster(cfg, spec, wl.at_rate(4.0), ClusterParams(prefill=2, decode=2),
                           predictor=pred, with_isolated=False)
    assert (res.completions == 1).all()
    assert res.summary()["transfer_bytes_total"] == int(res.transfer_bytes.sum()) > 0


# --------------------------------------------------------------------------- routers
def _skewed(n: int = 160, k: int = 4, rate: float = 30.0) -> Workload:
    """Every k-th request is heavy: round-robin over k instances sends them all to one."""
    heavy = np.arange(n) % k == 0
    return Workload(np.arange(n) / rate, np.where(heavy, 3000, 200), np.where(heavy, 300, 20),
                    rate, "skewed")


def test_power_of_two_beats_round_robin_on_a_skewed_load():
    cfg = get_preset("paper")
    spec = resolve_methods(cfg, "full")["full"]
    wl = _skewed()
    pred = _pred(wl)
    res = {r: simulate_cluster(cfg, spec, wl, ClusterParams(replicas=4, router=r, seed=1),
                               predictor=pred, with_isolated=False)
           for r in ("round-robin", "p2c", "least-tokens")}
    rr, p2 = res["round-robin"], res["p2c"]
    ctx = f"seed 1: rr {rr.summary()['e2e_p99_s']}, p2c {p2.summary()['e2e_p99_s']}"
    assert set(rr.route[::4].tolist()) == {0}, "round-robin must pile the heavy ones up"
    assert p2.summary()["e2e_p99_s"] < rr.summary()["e2e_p99_s"], ctx
    assert np.nanmean(p2.e2e_s) < np.nanmean(rr.e2e_s), ctx
    assert jain_index(p2.instance_tokens()) > jain_index(rr.instance_tokens()), ctx
    assert res["least-tokens"].summary()["e2e_p99_s"] < rr.summary()["e2e_p99_s"], ctx


def test_jain_index():
    assert jain_index([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([0, 0]) == 1.0


# --------------------------------------------------------------------------- schedulers
def test_ewsjf_cuts_head_of_line_blocking_and_bounds_starvation():
    """A long prompt at the head of a queue of short ones: EWSJF lets the short ones go
    first (mean TTFT falls); the long one is not overtaken by requests arriving more than
    size / a seconds after it."""
    cfg = get_preset("paper")
    cfg = cfg.replace(serving=dataclasses.replace(cfg.serving, max_batched_tokens=512))
    spec = resolve_methods(cfg, "full")["full"]
    # groups 2 s apart: a medium prompt keeps the engine busy while a long one and then ten
    # short ones queue behind it
    arrival, prompt = [], []
    for g in range(4):
        t0 = 2.0 * g
        arrival += [t0, t0 + 1e-3] + [t0 + 2e-3 + 1e-4 * j for j in range(10)]
        prompt += [1000, 6000] + [300] * 10
    n = len(prompt)
    prompt = np.asarray(prompt)
    wl = Workload(np.asarray(arrival), prompt, np.full(n, 5), 6.0, "hol")
    pred = OutputPredictor.train(prompt, np.full(n, 5))
    base = ClusterParams(replicas=1)
    fcfs = simulate_cluster(cfg, spec, wl, base, predictor=pred, with_isolated=False)
    a = 20000.0
    ew = simulate_cluster(cfg, spec, wl, dataclasses.replace(base, scheduler="ewsjf",
                                                             ewsjf_tokens_per_s=a),
                          predictor=pred, with_isolated=False)
    assert np.mean(ew.ttft_s) < np.mean(fcfs.ttft_s), (np.mean(ew.ttft_s), np.mean(fcfs.ttft_s))
    sched = ew.instances[0].first_scheduled_s
    for i in np.nonzero(prompt == 6000)[0]:
        size = 6000 + pred.predict_one(6000)
        late = (wl.arrival_s > wl.arrival_s[i] + size / a)
        assert (sched[late] >= sched[i]).all(), f"request {i} overtaken after its window"


def test_maps_admission_avoids_decode_preemptions():
    seed = 21
    cfg = tight(get_preset("default"), 14_000)
    spec = resolve_methods(cfg, "full")["full"]
    wl = burst_workload(seed, n=200, rate=150.0)
    pred = _pred(wl)
    runs = {d: simulate_cluster(cfg, spec, wl, ClusterParams(prefill=1, decode=2,
                                                             decode_router=d),
                                predictor=pred, with_isolated=False)
            for d in ("round-robin", "maps")}
    pre = {d: int(r.preemptions.sum()) for d, r in runs.items()}
    assert pre["round-robin"] > 0, f"seed {seed}: no memory pressure to test ({pre})"
    assert pre["maps"] < pre["round-robin"], f"seed {seed}: {pre}"


def test_output_predictor_learns_and_reports_its_error():
    rng = np.random.default_rng(4)
    prompt = rng.integers(1, 8000, 3000)
    output = np.maximum(1, (prompt // 8)).astype(np.int64)       # output follows the prompt
    wl = Workload(np.arange(3000) * 0.1, prompt, output, 10.0, "linked")
    pred, rest = split_workload(wl, 0.5)
    ev = pred.evaluate(rest.prompt_tokens, rest.output_tokens)
    assert len(rest) == 1500 and pred.trained_on == 1500
    assert ev.spearman > 0.8 and ev.mae_tokens < 0.5 * ev.baseline_mae_tokens, ev
    noise = Workload(np.arange(3000) * 0.1, prompt, rng.integers(1, 500, 3000), 10.0, "indep")
    p2, r2 = split_workload(noise, 0.5)
    assert abs(p2.evaluate(r2.prompt_tokens, r2.output_tokens).spearman) < 0.1


# --------------------------------------------------------------------------- bad parameters
@pytest.mark.parametrize("kwargs,match", [
    ({"replicas": 0}, r"ClusterParams.replicas = 0 is out of range: allowed \[1, 1024\]"),
    ({"router": "random"}, r"ClusterParams.router = 'random' is not one of"),
    ({"prefill": 2}, r"ClusterParams.decode = 0 is out of range: allowed \[1, 1024\]"),
    ({"decode": 2}, r"ClusterParams.decode = 2 needs prefill"),
    ({"quantile": 0.0}, r"ClusterParams.quantile = 0.0 is out of range: allowed \(0, 1\]"),
    ({"train_fraction": 0.95}, r"ClusterParams.train_fraction = 0.95 is out of range"),
    ({"scheduler": "lifo"}, r"ClusterParams.scheduler = 'lifo' is not one of: fcfs, ewsjf"),
    ({"dynamic": DynamicRatio()}, r"ClusterParams.dynamic needs a P/D cluster"),
])
def test_bad_cluster_params(kwargs, match):
    with pytest.raises(ParamError, match=match):
        ClusterParams(**kwargs)


def test_bad_link_and_ratio_params():
    with pytest.raises(ParamError, match=r"KVLink.bandwidth_bytes_per_s = 0 is out of range"):
        KVLink("x", 0, 0.0)
    with pytest.raises(ParamError, match=r"KVLink.latency_s = -1.0 is out of range"):
        KVLink("x", 1e9, -1.0)
    with pytest.raises(ParamError, match=r"DynamicRatio.high = 0.1 is out of range"):
        DynamicRatio(low=0.2, high=0.1)
    with pytest.raises(ParamError, match="link = 'wifi' is not one of: nvlink"):
        get_link("wifi")
    with pytest.raises(ParamError, match="--pd = '3' is out of range"):
        parse_pd("3")
    assert math.isinf(LINKS["ideal"].bandwidth_bytes_per_s) and LINKS["ideal"].transfer_s(9) == 0


@pytest.mark.parametrize("argv,match", [
    (["--replicas", "0"], "--replicas = 0 is out of range"),
    (["--pd", "0:4"], "--pd = '0:4' is out of range"),
    (["--router", "nearest"], "router = 'nearest' is not one of"),
    (["--link", "wifi"], "link = 'wifi' is not one of"),
    (["--dynamic"], "--dynamic-ratio (--dynamic) and --reconfig-s need --pd"),
    (["--dynamic-ratio", "fast"], "--dynamic-ratio = 'fast' is not one of: dopd, threshold"),
    (["--cluster", "big"], "--cluster = 'big' is not one of: agg4"),
    (["--breakdown"], "--breakdown: not available in a cluster run"),
    (["--system", "tpu"], "--system = 'tpu' is not one of: gpu, gpu+hikv, hikv"),
    (["--rate", "-1"], "--rate = -1.0 is out of range"),
])
def test_cli_rejects_bad_flags(argv, match, capsys):
    assert main(["cluster", *argv]) == 2
    assert match in capsys.readouterr().err


def test_cli_runs_and_writes(tmp_path, capsys):
    rc = main(["cluster", "--preset", "default", "--requests", "120", "--rate", "40",
               "--replicas", "2", "--pd", "1:1", "--router", "round-robin,p2c",
               "--method", "full", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "output-length predictor" in out and "P/D 1:1" in out and "2x p2c" in out
    for f in ("summary.csv", "decisions.csv", "tails.png"):
        assert (tmp_path / f).is_file(), f
    head = (tmp_path / "summary.csv").read_text().splitlines()
    assert len(head) == 1 + 4 and "code_version" in head[0]
    assert main(["cluster", "--preset", "default", "--requests", "50", "--out",
                 str(tmp_path)]) == 2                     # earlier files need --force
