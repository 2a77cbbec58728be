"""Misuse suite, property-based (Hypothesis): the trace reader, the parameter classes (through
``--set``'s path) and the sweep axes, fed random strings, numbers and encodings. The property:
a clear error (``ParamError``, exit 2 with one line) or a valid result -- never a traceback,
never a NaN or infinity, never a silent change of a value the user gave.

Example counts are small in CI (profile ``ci``); ``HYPOTHESIS_PROFILE=fuzz`` raises them, and
``benchmarks/fuzz_cli.py`` runs >= 10,000 cases through the command line itself."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hikv.params import ParamError, to_dict
from hikv.presets import get_preset, with_overrides
from hikv.sim.serving.workload import MAX_REQUEST_TOKENS, TraceError, Workload, read_azure_trace

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow])
settings.register_profile("fuzz", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


# --------------------------------------------------------------------------- trace reader
def _check_workload(wl: Workload) -> None:
    assert len(wl) >= 1
    for a in (wl.arrival_s, wl.prompt_tokens, wl.output_tokens):
        assert np.isfinite(a).all()
    assert (np.diff(wl.arrival_s) >= 0).all() and wl.arrival_s[0] == 0
    assert wl.prompt_tokens.min() >= 1 and wl.prompt_tokens.max() <= MAX_REQUEST_TOKENS
    assert math.isfinite(wl.rate_per_s) and wl.rate_per_s > 0


def _read(path: Path, data: bytes) -> Workload | None:
    path.write_bytes(data)
    try:
        wl = read_azure_trace(path)
    except TraceError as e:
        assert str(path.name) in str(e)       # every error names the file
        return None
    _check_workload(wl)
    return wl


@given(st.binary(max_size=300))
def test_trace_reader_random_bytes(tmp_path_factory, data):
    _read(tmp_path_factory.mktemp("t") / "trace.csv", data)


@given(st.text(max_size=200), st.sampled_from(["utf-8", "utf-16", "utf-8-sig", "latin-1"]))
def test_trace_reader_random_text_and_encodings(tmp_path_factory, text, enc):
    body = (HEADER + "\n" + text).encode(enc, errors="replace")
    _read(tmp_path_factory.mktemp("t") / "trace.csv", body)


_field = st.one_of(st.integers(-5, 10**15).map(str), st.sampled_from(["", " 7", "1.5", "0x10",
                   "１２", "nan", "-0", "007"]), st.text(max_size=6))
_stamp = st.one_of(
    st.builds(lambda s, f: f"2023-11-16 18:15:{s:02d}.{f:07d}", st.integers(0, 59),
              st.integers(0, 9_999_999)),
    st.sampled_from(["2023-02-30 00:00:00", "2023-11-16 24:00:00", "x", ""]))


@given(st.lists(st.tuples(_stamp, _field, _field), min_size=1, max_size=8))
def test_trace_reader_rows_no_silent_change(tmp_path_factory, rows):
    body = HEADER + "\n" + "".join(f"{t},{c},{g}\n" for t, c, g in rows)
    wl = _read(tmp_path_factory.mktemp("t") / "trace.csv", body.encode())
    if wl is not None:                     # accepted: every value exactly as written
        assert len(wl) == len(rows)
        assert wl.prompt_tokens.tolist() == [int(c) for _, c, _ in rows]
        assert wl.output_tokens.tolist() == [int(g) for _, _, g in rows]


# --------------------------------------------------------------------------- parameters
_TINY = get_preset("tiny")


def _leaves(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _leaves(v, f"{prefix}{k}.")
        elif k != "name":
            out.append(f"{prefix}{k}")
    return out


_PATHS = _leaves(to_dict(_TINY))
_values = st.one_of(
    st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.text(max_size=8),
    st.sampled_from([0, 1, -1, 8.9, 1e308, "page_bounds", "static", "hbm2", "fp16"]))


def _get(d: dict, path: str):
    for part in path.split("."):
        d = d[part]
    return d


@given(st.sampled_from(_PATHS), _values)
def test_parameter_classes_error_or_exact(path, value):
    try:
        cfg = with_overrides(_TINY, [f"{path}={json.dumps(value)}"])
    except ParamError as e:
        assert str(e)                       # a message, naming the problem
        return
    got = _get(to_dict(cfg), path)
    # accepted: the value is stored as given (an enum by its value), never clamped or cut
    assert got == value or (isinstance(value, str) and str(got) == value), (path, value, got)
    if isinstance(got, float):
        assert math.isfinite(got)


# --------------------------------------------------------------------------- sweep axes
_AXES = {"--context": "context", "--budget": "policy.budget", "--head-dim": "layout.head_dim",
         "--pe-lanes": "accel.pe_lanes", "--node": "accel.tech_nm",
         "--bandwidth": "accel.mem_bandwidth_bytes_per_s", "--keep-v": "policy.v_rule.keep"}
_item = st.one_of(st.integers(-3, 300).map(str), st.sampled_from(
    ["8.9", "1e1", "16.0", "inf", "nan", "", " ", "x", "-0", "64", "2.56e11", "7", "45"]))


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("HIKV_SWEEP_EXAMPLES", "15")))
@given(st.sampled_from(sorted(_AXES)), st.lists(_item, min_size=0, max_size=3))
def test_sweep_axes_error_or_exact(tmp_path_factory, capsys, flag, items):
    import csv

    from hikv.scripts.cli import main

    out = tmp_path_factory.mktemp("sw")
    raw = ",".join(items)
    argv = ["sweep", "--preset", "tiny", f"{flag}={raw}", "--no-area", "--no-plots",
            "--out", str(out / "o"), "--methods", "full,hikv"]
    if flag != "--context":
        argv.append("--context=64")
    rc = main(argv)                         # argparse errors too: usage + one line, exit 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert rc in (0, 2), (flag, raw, rc, err)
    if rc == 2:
        assert err.strip().splitlines()[-1].startswith("hikv sweep: error:"), err
        return
    with (out / "o" / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            assert v.lower() not in ("nan", "inf", "-inf"), (k, v)
    col = _AXES[flag]
    want = sorted({float(x) for x in items})
    assert sorted({float(r[col]) for r in rows}) == want     # no value changed or dropped
