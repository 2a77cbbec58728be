"""The dynamic P:D ratio (DOPD's rule and the threshold rule), Little's law per pool under
overload and moving roles, `hikv serve` with cluster flags, and cluster sweeps on the shared
executor (local processes; Ray when installed)."""

from __future__ import annotations

import numpy as np
import pytest
from serving_helpers import burst_workload, tight

from hikv.executor import ray_available, run_tasks
from hikv.params import ParamError
from hikv.presets import get_preset, resolve_methods
from hikv.scripts.cli import main
from hikv.sim.cluster.engine import simulate_cluster
from hikv.sim.cluster.params import CLUSTER_PRESETS, ClusterParams, DynamicRatio
from hikv.sim.cluster.report import run_cell, shifting_workload
from hikv.sim.cluster.sched import OutputPredictor
from hikv.sim.serving.result import little_window


def _shift_run(policy: str, seed: int = 4):
    cfg = get_preset("default")
    spec = resolve_methods(cfg, "full")["full"]
    wl = shifting_workload(seed)
    dr = DynamicRatio(policy=policy, interval_s=0.25, reconfig_s=0.1, cooldown_s=0.0)
    params = ClusterParams(prefill=2, decode=2, router="least-tokens", dynamic=dr)
    # the predictor knows both phases (the work DOPD forecasts is the arrivals' prompt and
    # predicted output tokens)
    pred = OutputPredictor.train(wl.prompt_tokens, wl.output_tokens)
    res = simulate_cluster(cfg, spec, wl, params, predictor=pred, with_isolated=False,
                           cost_model="attention-model")
    return wl, dr, res


def test_dopd_ratio_follows_the_work_mix_and_pays_reconfiguration():
    seed = 4
    wl, dr, res = _shift_run("dopd", seed)
    ctx = f"seed {seed}"
    assert (res.completions == 1).all(), ctx
    shift = float(wl.arrival_s[len(wl) // 2])
    end = float(wl.arrival_s[-1])
    s = [x for x in res.ratio_samples if not np.isnan(x.target_prefill)]
    first = [x for x in s if 1.0 < x.t < shift]
    second = [x for x in s if shift + 2.0 < x.t < end]
    assert first and second, ctx
    # the proportional target is the forecast work's prefill share in instances ...
    for x in s:
        xp, xd = x.prefill_work / x.prefill_rate, x.decode_work / x.decode_rate
        want = float(np.clip(4 * xp / (xp + xd), 1, 3))
        assert x.target_prefill == pytest.approx(want), ctx
    # ... and it follows the mix: mostly prefill work first, mostly decode work after
    assert np.mean([x.target_prefill for x in first]) > 2.5, ctx
    assert np.mean([x.target_prefill for x in second]) < 1.5, ctx
    assert np.mean([x.chosen_prefill for x in first]) > np.mean(
        [x.chosen_prefill for x in second]) + 1, ctx
    # the split moved both ways, one instance at a time, each paying the drain and reconfig_s
    moves = [(t, k, r) for t, k, r in res.roles[4:]]
    to_p = [m for m in moves if m[2] == "drain-to-prefill"]
    to_d = [m for m in moves if m[2] == "drain-to-decode"]
    assert to_p and to_d, f"{ctx}: {moves}"
    assert min(m[0] for m in to_p) < shift < max(m[0] for m in to_d), f"{ctx}: {moves}"
    for i, (t, k, r) in enumerate(moves):
        if r == "switching":
            nxt = next(m for m in moves[i + 1:] if m[1] == k)
            assert nxt[2] in ("prefill", "decode") and nxt[0] == pytest.approx(
                t + dr.reconfig_s), f"{ctx}: {moves}"
            # no request is routed to an instance while it drains or reconfigures
            start = max(m[0] for m in moves[:i + 1] if m[1] == k and m[2].startswith("drain"))
            busy = ((res.arrival_s >= start) & (res.arrival_s < nxt[0]) & (res.route == k))
            busy |= ((res.transfer_end_s >= start) & (res.transfer_end_s < nxt[0])
                     & (res.decode_route == k))
            assert not busy.any(), f"{ctx}: instance {k} got work while moving"
    assert res.summary()["reconfigurations"] == sum(1 for m in moves if m[2] == "switching")


def test_threshold_rule_is_kept_as_an_option():
    wl, _, res = _shift_run("threshold")
    assert (res.completions == 1).all()
    assert res.ratio_samples == ()                 # DOPD's log only
    assert res.params.label == "P/D 2:2 dyn-threshold"
    with pytest.raises(ParamError, match="DynamicRatio.policy = 'psychic' is not one of"):
        DynamicRatio(policy="psychic")


def test_little_window_is_exact_and_can_fail():
    # one request in the system over [0, 10], window [2, 6]: L = 1, lambda * W = 1
    a, f = np.array([0.0]), np.array([10.0])
    lc = little_window(4.0, 2.0, 6.0, a, f)
    assert lc.L == 1 and lc.lambda_w == pytest.approx(1) and lc.rel_error == pytest.approx(0)
    # a queue integral that missed a second of it is caught
    assert little_window(3.0, 2.0, 6.0, a, f).rel_error == pytest.approx(-0.25)


@pytest.mark.parametrize("pd", [(3, 1), (1, 3)])
def test_little_per_pool_holds_under_overload(pd):
    seed = 8
    cfg = tight(get_preset("default"), 12_000)
    spec = resolve_methods(cfg, "full")["full"]
    wl = burst_workload(seed, n=240, rate=400.0)      # far past either pool's capacity
    pred = OutputPredictor.train(wl.prompt_tokens, wl.output_tokens)
    res = simulate_cluster(cfg, spec, wl, ClusterParams(prefill=pd[0], decode=pd[1]),
                           predictor=pred, with_isolated=False)
    ctx = f"P/D {pd}, seed {seed}"
    assert {q.pool for q in res.pools} == {"prefill", "decode"}, ctx
    assert not all(q.steady for q in res.pools), f"{ctx}: expected an overloaded pool"
    for q in res.pools:
        assert abs(q.window.rel_error) < 1e-9, f"{ctx}: {q}"
    # the steady-state form is off on the overloaded pool (what the window form fixes)
    bad = [q for q in res.pools if not q.steady]
    assert max(abs(q.steady_form.rel_error) for q in bad) > 0.05, f"{ctx}: {bad}"


def test_hikv_serve_runs_the_cluster_from_flags_or_a_preset(capsys):
    argv = ["--preset", "default", "--requests", "80", "--rate", "40", "--method", "full"]
    assert main(["serve", *argv, "--replicas", "2", "--router", "p2c"]) == 0
    out = capsys.readouterr().out
    assert "2x p2c" in out and "output-length predictor" in out
    assert main(["serve", *argv, "--cluster", "pd-dopd"]) == 0
    out = capsys.readouterr().out
    assert "P/D 2:2 dopd" in out and "KV link rdma-200" in out
    # `hikv cluster` takes the same flags and gives the same table
    assert main(["cluster", *argv, "--cluster", "pd-dopd"]) == 0

    def table(text: str) -> list[str]:      # the last column is the simulation's wall time
        return [line.rsplit(None, 1)[0] for line in text.splitlines() if line.strip()]
    assert table(capsys.readouterr().out) == table(out)
    assert set(CLUSTER_PRESETS) == {"agg4", "pd2:2", "pd3:1", "pd-dopd"}
    # a single-replica flag in a cluster run is refused, naming it
    assert main(["serve", *argv, "--replicas", "2", "--policy", "sjf"]) == 2
    assert "--policy: not available in a cluster run" in capsys.readouterr().err
    # without cluster flags it is the single-replica simulator
    assert main(["serve", *argv]) == 0
    out = capsys.readouterr().out
    assert "Little's law [full]" in out and "output-length predictor" not in out


def _cells(seed: int) -> list[dict]:
    base = {"preset": "default", "method": "full", "trace": None, "requests": 120,
            "rate": 40.0, "ttft_slo_s": None, "cost_model": "attention-model",
            "goodput": False, "version": "test", "keep": False, "experiment": "layout",
            "trace_name": "poisson", "command": "test"}
    return [{**base, "params": ClusterParams(replicas=2, router="least-tokens", seed=seed)},
            {**base, "params": ClusterParams(prefill=1, decode=1, seed=seed)}]


def _same(rows_a, rows_b, ctx):
    keys = ("layout", "ttft_p99_s", "tpot_p99_s", "transfer_bytes_total", "slo_attainment")
    for a, b in zip(rows_a, rows_b, strict=True):
        assert {k: a["row"][k] for k in keys} == {k: b["row"][k] for k in keys}, ctx


def test_cluster_cells_on_local_processes_equal_serial():
    seed = 3
    cells = _cells(seed)
    _same(run_tasks(run_cell, cells, executor="serial"),
          run_tasks(run_cell, cells, executor="process", workers=2), f"seed {seed}")


@pytest.mark.skipif(not ray_available(),
                    reason="Ray is not installed (optional extra: pip install -e '.[ray]'); "
                           "the Ray executor is not exercised")
def test_cluster_cells_on_a_local_ray_instance():
    seed = 3
    cells = _cells(seed)
    _same(run_tasks(run_cell, cells, executor="serial"),
          run_tasks(run_cell, cells, executor="ray"), f"seed {seed}")


def test_executor_rejects_bad_names():
    with pytest.raises(ParamError, match="executor = 'mpi' is not one of: serial, process, ray"):
        run_tasks(run_cell, [], executor="mpi")
    with pytest.raises(ParamError, match="workers = 0 is out of range"):
        run_tasks(run_cell, [], workers=0)
