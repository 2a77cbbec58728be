"""The serving simulator: conservation, determinism, Little's law, M/G/1, capacity effects,
batched decode runs against iteration-by-iteration simulation, traces, goodput and the CLI.

The Azure traces are found via $HIKV_DATA or a ``shared/data/azure-llm-2023`` directory above
the repository (never copied into it); tests that need them skip with the reason otherwise.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

import numpy as np
import pytest
from cost_helpers import assert_same_run
from serving_helpers import burst_workload, tight

from hikv.params import ParamError, SyntheticWorkload
from hikv.presets import get_preset, resolve_methods
from hikv.scripts.cli import main
from hikv.sim.serving.engine import kv_capacity_blocks, little_check, simulate
from hikv.sim.serving.report import best_baseline, goodput, serving_summary
from hikv.sim.serving.scheduler import POLICIES, get_policy
from hikv.sim.serving.step_cost import (
    STEP_COST_MODELS,
    IterationBatch,
    RooflineStepCost,
    StepCostBase,
    StepCostModel,
    make_step_cost,
)
from hikv.sim.serving.workload import (
    TraceError,
    Workload,
    find_azure_trace,
    poisson_workload,
    read_azure_trace,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def conv_trace() -> Path:
    path = find_azure_trace("conv", start=ROOT / "tests")
    if path is None:
        pytest.skip("Azure LLM conversation trace not found: set HIKV_DATA to a directory "
                    "holding azure-llm-2023/, or place shared/data/azure-llm-2023 above the "
                    "repository")
    return path


# --------------------------------------------------------------------------- conservation
@pytest.mark.parametrize("name", ["full", "h2o", "snapkv", "sparq", "hikv", "hikv-evict"])
def test_every_request_completes_once_and_tokens_are_conserved(name):
    # room for 9,000 tokens of full KV: with the RTL loader timing full-KV decode is
    # memory-bound, not loader-bound, so 12,000 tokens would not force a preemption
    cfg = tight(get_preset("default"), 9_000)
    spec = resolve_methods(cfg, name)[name]
    wl = burst_workload(seed=11)
    r = simulate(cfg, spec, wl, method=name)
    ctx = f"{name}, seed 11"
    assert (r.completions == 1).all(), ctx
    assert (r.generated_tokens == wl.output_tokens).all(), ctx
    assert r.decode_tokens + r.prefill_completions == int(wl.output_tokens.sum()), ctx
    assert r.prefill_tokens == int((wl.prompt_tokens + r.recomputed_tokens).sum()), ctx
    assert (r.recomputed_tokens >= 0).all() and ((r.preemptions == 0)
                                                 <= (r.recomputed_tokens == 0)).all(), ctx
    assert (r.first_scheduled_s >= r.arrival_s).all(), ctx
    assert (r.first_token_s > r.first_scheduled_s).all(), ctx
    assert (r.finish_s >= r.first_token_s).all(), ctx
    assert int(r.kv_used_blocks.max()) <= r.kv_capacity_blocks, ctx
    assert r.kv_used_blocks[-1] == 0, f"{ctx}: blocks leaked"
    if name == "full":
        assert r.preemptions.sum() > 0, "the tight configuration must exercise preemption"


def test_capacity_methods_preempt_less_under_memory_pressure():
    cfg = tight(get_preset("default"), 9_000)
    wl = burst_workload(seed=11)
    pre = {n: int(simulate(cfg, s, wl, method=n).preemptions.sum())
           for n, s in resolve_methods(cfg, "full,quest,h2o,hikv-evict").items()}
    assert pre["h2o"] < pre["full"] and pre["hikv-evict"] < pre["full"], pre
    # one request at a time (same residency whatever the timing): page bounds cost memory,
    # eviction frees it
    peak = {n: int(simulate(cfg, s, wl.head(40), policy="serial").kv_used_blocks.max())
            for n, s in resolve_methods(cfg, "full,quest,h2o").items()}
    assert peak["quest"] > peak["full"] > peak["h2o"], peak


def test_snapkv_holds_the_whole_prompt_until_its_last_chunk():
    """A prompt whose full KV exceeds the capacity: H2O (evicts after every chunk) serves it;
    SnapKV and evicting HiKV (evict after the last chunk) cannot."""
    cfg = tight(get_preset("default"), 3000)
    cfg = cfg.replace(serving=dataclasses.replace(cfg.serving, max_batched_tokens=512))
    wl = Workload(np.array([0.0]), np.array([5000]), np.array([20]), 1.0, "one long prompt")
    specs = resolve_methods(cfg, "h2o,snapkv,hikv-evict")
    r = simulate(cfg, specs["h2o"], wl)
    assert r.completions[0] == 1
    for name in ("snapkv", "hikv-evict"):
        with pytest.raises(ParamError, match="cannot make progress"):
            simulate(cfg, specs[name], wl)


# --------------------------------------------------------------------------- engine
@pytest.mark.parametrize("name,policy", [("full", "vllm-v1"), ("h2o", "vllm-v1"),
                                         ("snapkv", "vllm-v1"), ("hikv", "vllm-v1"),
                                         ("hikv-evict", "vllm-v1"), ("full", "sjf")])
def test_batched_decode_runs_equal_iteration_by_iteration(name, policy):
    cfg = tight(get_preset("default"), 12_000)
    spec = resolve_methods(cfg, name)[name]
    wl = burst_workload(seed=5, n=100, rate=40.0)
    a = simulate(cfg, spec, wl, fast_forward=True, policy=policy)
    b = simulate(cfg, spec, wl, fast_forward=False, policy=policy)
    assert_same_run(a, b, name)


def test_same_seed_same_result_and_seed_matters():
    cfg = get_preset("default")
    spec = resolve_methods(cfg, "hikv")["hikv"]
    runs = [simulate(cfg, spec, poisson_workload(cfg.serving.synthetic, seed=s, requests=300))
            for s in (3, 3, 4)]
    for f in ("arrival_s", "prompt_tokens", "first_token_s", "finish_s"):
        assert np.array_equal(getattr(runs[0], f), getattr(runs[1], f)), f
    assert not np.array_equal(runs[0].prompt_tokens, runs[2].prompt_tokens)


def test_policies_registry():
    assert set(POLICIES) >= {"vllm-v1", "sjf", "serial"}
    with pytest.raises(ParamError, match="not one of: vllm-v1"):
        get_policy("fifo")
    cfg = get_preset("default")
    cfg = cfg.replace(serving=dataclasses.replace(cfg.serving, max_running=2))  # queues form
    spec = resolve_methods(cfg, "full")["full"]
    wl = burst_workload(seed=2, n=120, rate=200.0)
    fcfs = simulate(cfg, spec, wl, policy="vllm-v1")
    sjf = simulate(cfg, spec, wl, policy="sjf")
    assert np.mean(sjf.wait_s) < np.mean(fcfs.wait_s)   # SJF minimises mean wait
    assert (sjf.completions == 1).all()


def test_pollaczek_khinchine_for_one_request_at_a_time():
    """serial policy = M/G/1: mean wait = lambda E[S^2] / (2 (1 - rho)), with S computed
    independently from the step-cost model for each request alone."""
    cfg = get_preset("default")
    spec = resolve_methods(cfg, "full")["full"]
    params = SyntheticWorkload(rate_per_s=1.0, requests=20000, prompt_median_tokens=800.0,
                               prompt_sigma=0.5, output_median_tokens=100.0, output_sigma=0.5,
                               max_prompt_tokens=8000, max_output_tokens=1000)
    probe = poisson_workload(params, seed=21)
    cost = RooflineStepCost(cfg, spec)
    budget = cfg.serving.max_batched_tokens
    service = np.empty(len(probe))
    for i, (p, g) in enumerate(zip(probe.prompt_tokens.tolist(),
                                   probe.output_tokens.tolist(), strict=True)):
        s = 0.0
        for done in range(0, p, budget):
            s += cost.iteration_time_s(IterationBatch(prefill_done=[done],
                                                      prefill_chunk=[min(budget, p - done)],
                                                      prefill_total=[p]))
        if g > 1:
            s += float(cost.decode_run_times_s(np.array([p]), np.array([1]), g - 1).sum())
        service[i] = s
    rate = 0.6 / service.mean()                       # utilisation 0.6
    wl = poisson_workload(params, seed=21, rate_per_s=rate)
    r = simulate(cfg, spec, wl, policy="serial", cost_model="roofline")
    np.testing.assert_allclose(r.finish_s - r.first_scheduled_s, service, rtol=1e-9)
    rho = rate * service.mean()
    pk = rate * np.mean(service**2) / (2 * (1 - rho))
    got = float(np.mean(r.wait_s))
    # the sample mean wait of 20,000 requests scatters by about 4% over seeds (measured:
    # -5.8%, -0.8%, +3.9%, +0.0% for seeds 21-24); serving two at once would halve it
    assert abs(got - pk) / pk < 0.08, f"mean wait {got:.4g} s vs P-K {pk:.4g} s (seed 21)"


# --------------------------------------------------------------------------- Little's law
def test_littles_law_on_the_conversation_trace(conv_trace):
    cfg = get_preset("default")
    spec = resolve_methods(cfg, "hikv")["hikv"]
    wl = read_azure_trace(conv_trace)
    assert len(wl) == 19366
    r = simulate(cfg, spec, wl)
    lc = r.little
    assert lc.requests > 0.7 * len(wl)
    assert abs(lc.rel_error) < 0.02, f"L {lc.L:.4f} vs lambda*W {lc.lambda_w:.4f}"
    assert (r.completions == 1).all()


def test_littles_check_can_fail():
    """The check compares the scheduler's queues with the records: wrong records fail it."""
    cfg = get_preset("default")
    spec = resolve_methods(cfg, "full")["full"]
    r = simulate(cfg, spec, poisson_workload(cfg.serving.synthetic, seed=8, requests=3000,
                                             rate_per_s=10.0))
    lc = r.little
    assert abs(lc.rel_error) < 0.02
    # records that stop the clock at the first token instead of the last
    bad = little_check(r.little_integral, lc.start_s, lc.end_s, r.arrival_s, r.first_token_s)
    assert abs(bad.rel_error) > 0.5


# --------------------------------------------------------------------------- step cost
@pytest.mark.parametrize("model", sorted(STEP_COST_MODELS))
def test_every_step_cost_model_keeps_the_interface(model):
    """decode_run_times_s agrees with iteration_time_s, times are positive and grow with the
    context for full KV (true of every registered cost model)."""
    cfg = get_preset("default")
    prompt = np.array([10, 700, 3000])
    step = np.array([1, 40, 200])

    class Loop(StepCostBase):        # a cost model that implements only iteration_time_s
        def __init__(self, inner):
            self.inner = inner

        def iteration_time_s(self, batch):
            return self.inner.iteration_time_s(batch)

    for name, spec in resolve_methods(cfg, "all").items():
        cost = make_step_cost(model, cfg, spec)
        assert isinstance(cost, StepCostModel)
        fast = cost.decode_run_times_s(prompt, step, 25)
        slow = Loop(cost).decode_run_times_s(prompt, step, 25)
        np.testing.assert_allclose(fast, slow, rtol=1e-9, err_msg=f"{model} {name}")
        assert (fast > 0).all()
        pre = cost.iteration_time_s(IterationBatch(prefill_done=[0, 512], prefill_chunk=[300, 512],
                                                   prefill_total=[300, 2000]))
        assert pre > 0
    full = make_step_cost(model, cfg, resolve_methods(cfg, "full")["full"])
    t = [full.iteration_time_s(IterationBatch(decode_prompt=[n] * 64, decode_step=[1] * 64))
         for n in (100, 1000, 10000)]
    assert t[0] < t[1] < t[2]


def test_roofline_limits():
    cfg = get_preset("default")
    specs = resolve_methods(cfg, "full")
    full = RooflineStepCost(cfg, specs["full"])
    # one short decode: reading the weights dominates
    t1 = full.iteration_time_s(IterationBatch(decode_prompt=[1], decode_step=[1]))
    w = full.weight_read_bytes / cfg.accel.mem_bandwidth_bytes_per_s
    assert w <= t1 < 1.01 * w
    # a long prefill is compute-bound in its linear layers
    n = cfg.serving.max_batched_tokens
    t2 = full.linear_time_s(n, 1)
    assert math.isclose(t2, (n * full.linear_flops_per_token + full.logit_flops_per_token)
                        / cfg.accel.linear_flops_per_s)
    with pytest.raises(ParamError, match="cost model"):
        make_step_cost("cycles", cfg, specs["full"])
    with pytest.raises(ParamError, match="done \\+ chunk <= total"):
        IterationBatch(prefill_done=[5], prefill_chunk=[10], prefill_total=[12])


# --------------------------------------------------------------------------- traces
GOOD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize("body,line,words", [
    ("2023-11-16 18:15:46.6805900,374\n", 3, "expected 3 fields"),
    ("2023-11-16 18:15:46.6805900,374,44,1\n", 3, "expected 3 fields"),
    ("2023-11-16 25:15:46.6805900,374,44\n", 3, "bad TIMESTAMP"),
    ("2023-02-30 18:15:46,374,44\n", 3, "bad TIMESTAMP"),
    ("yesterday,374,44\n", 3, "bad TIMESTAMP"),
    ("2023-11-16 18:15:46.6805900,37x,44\n", 3, "ContextTokens = '37x'"),
    ("2023-11-16 18:15:46.6805900,374,-4\n", 3, "GeneratedTokens = '-4'"),
    ("2023-11-16 18:15:46.6805900,0,44\n", 3, "ContextTokens = 0 is out of range"),
    ("2023-11-16 18:15:46.6805900,374,0\n", 3, "GeneratedTokens = 0 is out of range"),
    ("2023-11-16 18:15:47,1,1\n2023-11-16 18:15:46,374,44\n", 4, "earlier than"),
    ("2023-11-16 18:15:46,1,1\n\n2023-11-16 18:15:47,1,1\n", 4, "expected 3 fields"),
])
def test_malformed_trace_rows_are_rejected_with_file_and_line(tmp_path, body, line, words):
    f = tmp_path / "t.csv"
    f.write_text(GOOD + "2023-11-16 18:15:45.0000000,10,5\n" + body)
    with pytest.raises(TraceError) as exc:
        read_azure_trace(f)
    msg = str(exc.value)
    assert f"{f}:{line}:" in msg and words in msg, msg


def test_trace_header_and_exact_times(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("TIME,Context,Generated\n2023-11-16 18:15:46,1,1\n")
    with pytest.raises(TraceError, match=":1: header"):
        read_azure_trace(f)
    f.write_text(GOOD + "2023-11-16 23:59:59.9999999,5,7\n2023-11-17 00:00:00.0000001,6,8\n")
    wl = read_azure_trace(f)
    assert wl.arrival_s.tolist() == [0.0, 2e-7]
    assert wl.prompt_tokens.tolist() == [5, 6] and wl.output_tokens.tolist() == [7, 8]
    with pytest.raises(TraceError, match="not found"):
        read_azure_trace(tmp_path / "missing.csv")


def test_real_traces_parse_completely(conv_trace):
    conv = read_azure_trace(conv_trace)
    code = read_azure_trace(conv_trace.with_name("AzureLLMInferenceTrace_code.csv"))
    assert (len(conv), len(code)) == (19366, 8819)
    assert 5.0 < conv.rate_per_s < 6.0
    assert int(np.median(conv.prompt_tokens)) == 1020


# --------------------------------------------------------------------------- goodput, rows
def test_goodput_search_brackets_the_slo_rate():
    cfg = get_preset("default")
    spec = resolve_methods(cfg, "full")["full"]
    wl = poisson_workload(cfg.serving.synthetic, seed=1, requests=400)
    g = goodput(cfg, spec, wl, rel_tol=0.05)
    assert g.bracketed and g.attainment >= cfg.serving.slo_attainment
    fails = [r for r, a in g.runs if a < g.target]
    assert fails and min(fails) <= g.rate_per_s * 1.05 + 1e-9
    assert all(a >= g.target for r, a in g.runs if r <= g.rate_per_s)


def test_serving_summary_rows(conv_trace):
    cfg = get_preset("default")
    rows = serving_summary(cfg, conv_trace, "full,h2o,hikv", max_requests=300,
                           with_goodput=False)
    assert [r["method"] for r in rows] == ["full", "h2o", "hikv"]
    for r in rows:
        assert r["requests"] == 300 and r["config.serving.max_batched_tokens"] == 8192
        assert r["config.model.name"] == "smollm2-135m" and "code_version" in r
        assert abs(r["little_rel_error"]) < 0.05
    assert best_baseline(rows)["method"] == "h2o"


# --------------------------------------------------------------------------- CLI
def test_cli_serve_writes_only_under_out(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["serve", "--preset", "tiny", "--method", "all", "--rate", "2000",
               "--requests", "150", "--seed", "4"])
    out = capsys.readouterr().out
    assert rc == 0 and "Little's law [hikv-evict]" in out and "Little err" in out
    assert os.listdir(tmp_path) == []
    rc = main(["serve", "--preset", "tiny", "--method", "full,hikv", "--rate", "2000",
               "--requests", "150", "--out", str(tmp_path / "o")])
    assert rc == 0
    files = sorted(os.listdir(tmp_path / "o"))
    assert files == [".hikv-run.lock", "MANIFEST.json", "kv_use.png", "latency_cdf.png",
                     "requests_full.csv", "requests_hikv.csv", "summary.csv"]
    summary = (tmp_path / "o" / "summary.csv").read_text().splitlines()
    assert len(summary) == 3 and "config.serving.block_tokens" in summary[0]
    assert "seed" in summary[0] and "code_version" in summary[0]
    assert len((tmp_path / "o" / "requests_full.csv").read_text().splitlines()) == 151


def test_cli_serve_rejects_bad_input(capsys):
    assert main(["serve", "--preset", "tiny", "--method", "fullkv"]) == 2
    assert "method = 'fullkv' is not one of" in capsys.readouterr().err
    assert main(["serve", "--preset", "tiny", "--policy", "fifo", "--requests", "5"]) == 2
    assert "policy = 'fifo'" in capsys.readouterr().err
    assert main(["serve", "--preset", "tiny", "--rate", "-1"]) == 2
    assert "rate" in capsys.readouterr().err


def test_capacity_accounts_for_weights_and_workspace():
    cfg = get_preset("paper")
    m = cfg.model
    per_block = cfg.serving.block_tokens * m.layers * m.kv_heads * 2 * 2 * m.head_dim
    room = cfg.accel.device_memory_bytes - m.weight_bytes - cfg.serving.workspace_bytes
    assert kv_capacity_blocks(cfg) == room // per_block


@pytest.mark.parametrize("flag", ["--max-batched-tokens", "--token-budget"])
def test_batched_token_limit_flag_and_its_alias(flag, capsys):
    """ServingParams.max_batched_tokens (the scheduler's per-iteration token limit, not the KV
    budget): the flag and its alias both set it."""
    rc = main(["serve", "--preset", "tiny", "--method", "full", "--rate", "2000",
               "--requests", "20", "--seed", "3", flag, "40"])
    assert rc == 0 and "max batched tokens 40," in capsys.readouterr().out
