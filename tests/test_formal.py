"""Formal properties of the RTL interfaces (hikv.hw.formal, hikv.sim.eda.formal, `hikv prove`).

Checked here: the property table (names, methods, mutants, depths), the harnesses' argument
checks, the SymbiYosys file, `hikv prove`'s exit status on bad input, and on `tiny` every
property proven by its own method and depth and every property's mutant rejected (a mutant
that passes means the property does not see the bug it is about). docs/formal.md has the
times on a 2-core machine: checks that take longer than about a minute there are marked
``extended``; CI runs a shallower bounded variant of such a proof instead (``CI_DEPTH``).
"""

from __future__ import annotations

import shutil

import pytest

from hikv.hw.formal import PROPERTIES, harness, properties
from hikv.params import ParamError
from hikv.presets import get_preset

TINY = get_preset("tiny")

#: properties (block, name) whose proof takes about a minute or more on 2 cores
#: (docs/formal.md); CI keeps the sorter's s1.topk, idle and o.stable proofs and s1.count's
#: shallower variant, ``pytest --extended`` runs these too. The top-k engine's proofs take
#: seconds; its s1.count (the slowest, over 10 s) runs to a one-beat job in CI.
SLOW = {("sorter", "s1.count"), ("sorter", "s1.order"), ("sorter", "s1.member"),
        ("topk", "s1.count")}
#: properties whose mutant check takes over a minute (their proofs stay in CI)
SLOW_MUTANTS = {("sorter", "o.stable")}
#: BMC depth of the CI variant of a slow property: a Stage I job of one beat (n <= P), from its
#: configuration beat to its last output beat
CI_DEPTH = {("sorter", "s1.count"): 22, ("topk", "s1.count"): 16}
assert set(CI_DEPTH) <= SLOW


def _tools_or_skip() -> None:
    from hikv.sim.eda.formal import FormalToolMissing, tools

    try:
        tools()
    except FormalToolMissing as e:
        pytest.skip(str(e))


def _all() -> list[tuple[str, str]]:
    return [(b, p.name) for b, ps in PROPERTIES.items() for p in ps]


def _param(block: str, name: str, *, mutant: bool) -> object:
    marks = [pytest.mark.slow]
    if (block, name) in (SLOW_MUTANTS if mutant else SLOW):
        marks.append(pytest.mark.extended)
    return pytest.param(block, name, marks=marks,
                        id=f"{block}-{name}" + ("-mutant" if mutant else ""))


# --------------------------------------------------------------------------- no solver
def test_property_table():
    """Every block's properties: unique names and mutants, a known method, positive depths on
    tiny, and BMC depths that cover at least the block's job (its mutants' depth)."""
    assert set(PROPERTIES) == {"sorter", "topk", "loader", "scorer"}
    for block, props in PROPERTIES.items():
        names = [p.name for p in props]
        assert len(set(names)) == len(names), block
        mutants = [p.mutant for p in props]
        assert len(set(mutants)) == len(mutants), block
        for p in props:
            assert p.block == block and p.method in ("induction", "bmc"), p
            assert p.depth(TINY) >= 1 and p.mutant_depth(TINY) >= 1, p
            assert p.text and p.mutant_text, p
            if p.method == "bmc":
                assert p.depth_note and p.depth(TINY) >= p.mutant_depth(TINY), p


def test_unknown_block_property_mutant():
    with pytest.raises(ParamError, match="no formal properties"):
        properties("sorter_loader")
    with pytest.raises(ParamError, match="no property 'nope'"):
        harness("sorter", TINY, only="nope")
    with pytest.raises(ParamError, match="no mutant 'nope'"):
        harness("loader", TINY, mutant="nope")
    with pytest.raises(TypeError, match="needs a Config"):
        harness("scorer", "tiny")


def test_sorter_job():
    """The sorter's bounded Stage I job: its depth covers the longest job it allows, the
    default is the property table's, and fields outside the preset are refused by name."""
    from hikv.hw.formal import SORTER_BMC_ITEMS, SorterJob, find_property

    assert SorterJob().depth(TINY) == find_property("sorter", "s1.topk").depth(TINY)
    assert SorterJob().max_items == SORTER_BMC_ITEMS and SorterJob().keys() == 3
    assert SorterJob(TINY.sorter.max_n, key_bits=1).keys() == 1
    assert SorterJob(TINY.sorter.max_n).depth(TINY) > SorterJob().depth(TINY)
    for bad, field in ((SorterJob(TINY.sorter.max_n + 1), "max_items"),
                       (SorterJob(4, 5), "min_items"),
                       (SorterJob(key_bits=TINY.sorter.key_width + 1), "key_bits"),
                       (SorterJob(key_bits=0), "key_bits")):
        with pytest.raises(ParamError, match=f"job {field} = .* out of range"):
            harness("sorter", TINY, only="s1.topk", job=bad)
    with pytest.raises(ParamError, match="Stage I engines' .sorter, topk.; block 'loader'"):
        harness("loader", TINY, job=SorterJob())
    with pytest.raises(TypeError, match="SorterJob"):
        harness("sorter", TINY, job=(1, 8))


def test_topk_job_depth():
    """The top-k engine's bounded job follows its own timing contract (TopKTiming, no
    dependence on k) and idle cycles, not the sorter's; its properties are the sorter's Stage I
    ones with the same mutants."""
    from hikv.hw.formal import TOPK_IDLE_CYCLES, SorterJob, TopKHarness, find_property
    from hikv.hw.topk_timing import TopKTiming

    t = TopKTiming.from_params(TINY.sorter)
    for n in (1, TINY.sorter.lanes, 8, 33, TINY.sorter.max_n):
        for kb in (None, 1):
            want = 1 + t.stage1_cycles(n, 1) + TOPK_IDLE_CYCLES + 1
            assert SorterJob(n, key_bits=kb).depth(TINY, "topk") == want, n
    for p in properties("topk"):
        if p.method == "bmc":
            assert p.depth(TINY) == SorterJob().depth(TINY, "topk") == p.mutant_depth(TINY), p
    assert SorterJob().depth(TINY, "topk") != SorterJob().depth(TINY, "sorter")
    assert [(p.name, p.method, p.mutant) for p in properties("topk")] == \
        [(p.name, p.method, p.mutant) for p in properties("sorter")]
    assert "TOPK_IDLE_CYCLES" in find_property("topk", "idle").text
    assert isinstance(harness("topk", TINY, job=SorterJob(16, key_bits=1)), TopKHarness)
    with pytest.raises(ParamError, match="runs no Stage I job"):
        SorterJob().depth(TINY, "loader")
    with pytest.raises(ParamError, match="job max_items = 65 is out of range"):
        harness("topk", TINY, only="idle", job=SorterJob(TINY.sorter.max_n + 1))


def test_cli_sorter_job(capsys):
    """``hikv prove --items MAX --min-items MIN --key-bits B`` sets the sorter's bounded job:
    its depth in ``--list``; another block, or a field outside the preset, exits 2 naming it."""
    from hikv.hw.formal import SorterJob
    from hikv.scripts.cli import main

    assert main(["prove", "--block", "sorter", "--items", "16", "--key-bits", "1",
                 "--property", "s1.topk", "--list"]) == 0
    out = capsys.readouterr().out
    assert f"bounded, {SorterJob(16, key_bits=1).depth(TINY)} cycles (the --items job)" in out
    assert main(["prove", "--block", "loader", "--items", "4", "--list"]) == 2
    assert "apply to --block sorter" in capsys.readouterr().err
    assert main(["prove", "--block", "sorter", "--items", "99", "--list"]) == 2
    assert "max_items = 99 is out of range: allowed [1, 64]" in capsys.readouterr().err
    assert main(["prove", "--block", "sorter", "--items", "4", "--min-items", "5",
                 "--list"]) == 2
    assert "min_items = 5 is out of range: allowed [1, 4]" in capsys.readouterr().err
    # the top-k engine takes the same job, to its own depth
    assert main(["prove", "--block", "topk", "--items", "64", "--key-bits", "1",
                 "--list"]) == 0
    out = capsys.readouterr().out
    assert out.count(f"bounded, {SorterJob(64, key_bits=1).depth(TINY, 'topk')} cycles "
                     "(the --items job)") == 5 and "mutant smallest_k" in out
    assert main(["prove", "--block", "scorer", "--key-bits", "1", "--list"]) == 2
    assert "apply to --block sorter or topk, not 'scorer'" in capsys.readouterr().err


def test_sby_text():
    from hikv.sim.eda.formal import sby_text

    t = sby_text("induction", 7)
    assert "mode prove" in t and "depth 7" in t and "smtbmc yices" in t
    assert "mode bmc" in sby_text("bmc", 3, timeout_s=60) and "timeout 60" in sby_text(
        "bmc", 3, timeout_s=60)
    with pytest.raises(ParamError, match="unknown"):
        sby_text("pdr", 3)


def test_harness_design_has_one_property():
    """The RTLIL of a harness asserts the property it was built for (named after it), the
    clock is its only port, and the rest of the block's properties are left out."""
    from amaranth.back import rtlil

    h = harness("scorer", TINY, only="latency")
    text = rtlil.convert(h, name="top", ports=[h.clock], emit_src=False)
    assert '\\FORMAT "latency"' in text
    assert '\\FORMAT "count"' not in text and '\\FORMAT "o.stable"' not in text
    top = text[text.index("module \\top\n"):]
    top = top[:top.index("\nend\n")]
    assert top.count(" input ") == 1


def test_prove_cli_bad_input(capsys):
    from hikv.scripts.cli import main

    assert main(["prove", "--block", "nope"]) == 2
    assert main(["prove", "--block", "scorer", "--property", "nope"]) == 2
    assert main(["prove", "--block", "scorer", "--depth", "0"]) == 2
    assert main(["prove", "--block", "loader", "--list"]) == 0
    out = capsys.readouterr().out
    assert "ar.4k" in out and "induction, k = 2" in out and "mutant cross_4k" in out
    assert main(["prove", "--block", "topk", "--list"]) == 0
    out = capsys.readouterr().out
    depth = properties("topk")[1].depth(TINY)
    assert "s1.topk" in out and f"bounded, {depth} cycles" in out and "TOPK_IDLE_CYCLES" in out


# --------------------------------------------------------------------------- proofs
@pytest.mark.slow
@pytest.mark.parametrize("block,name", [_param(b, n, mutant=False) for b, n in _all()])
def test_property_proven(block, name, tmp_path):
    """Each property passes on tiny by its own method and depth (docs/formal.md)."""
    from hikv.sim.eda.formal import prove_property

    _tools_or_skip()
    r = prove_property(block, TINY, name, workdir=tmp_path)
    assert r.passed, f"{block} {name}: {r.status} ({r.detail}) trace {r.trace}"


@pytest.mark.slow
@pytest.mark.parametrize("block,name", [pytest.param(b, n, id=f"{b}-{n}")
                                        for b, n in sorted(CI_DEPTH)])
def test_property_bounded_ci(block, name, tmp_path):
    """CI's variant of the slow bounded properties that have one: the same check to
    ``CI_DEPTH`` cycles (s1.order and s1.member run only under ``--extended``)."""
    from hikv.sim.eda.formal import prove_property

    _tools_or_skip()
    depth = CI_DEPTH[(block, name)]
    r = prove_property(block, TINY, name, depth=depth, workdir=tmp_path)
    assert r.passed and r.depth == depth, f"{block} {name}: {r.status} ({r.detail})"


@pytest.mark.slow
@pytest.mark.parametrize("block,name", [_param(b, n, mutant=True) for b, n in _all()])
def test_mutant_rejected(block, name, tmp_path):
    """Each property's mutant fails it, with a counterexample trace."""
    from hikv.sim.eda.formal import prove_property

    _tools_or_skip()
    r = prove_property(block, TINY, name, mutant=True, workdir=tmp_path)
    assert r.status == "fail", f"{block} {name} mutant {r.mutant}: {r.status} ({r.detail})"
    assert r.trace and r.trace.endswith(".vcd")


@pytest.mark.slow
def test_sorter_job_mutant_rejected(tmp_path):
    """A job of one full beat exactly (min_items = max_items = lanes): the s1.topk mutant
    still fails within that job's depth (the job's assumptions leave a run to the end)."""
    from hikv.hw.formal import SorterJob
    from hikv.sim.eda.formal import prove_property

    _tools_or_skip()
    lanes = TINY.sorter.lanes
    job = SorterJob(lanes, lanes)
    r = prove_property("sorter", TINY, "s1.topk", mutant=True, job=job, workdir=tmp_path)
    assert r.status == "fail" and r.depth == job.depth(TINY), (r.status, r.detail)


#: sorter properties checked to every Stage I job of up to four beats with 1-bit keys
#: (docs/formal.md, "Longer Stage I jobs": about 2 to 3 minutes each)
FOUR_BEAT = ("s1.topk", "s1.order", "s1.member")


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize("name", FOUR_BEAT)
def test_sorter_four_beat_jobs(name, tmp_path):
    """A Stage I property to every job of up to four beats (16 items, any k) with 1-bit keys,
    and its mutant rejected there."""
    from hikv.hw.formal import SorterJob
    from hikv.sim.eda.formal import prove_property

    _tools_or_skip()
    job = SorterJob(4 * TINY.sorter.lanes, key_bits=1)
    r = prove_property("sorter", TINY, name, job=job, workdir=tmp_path / "proof")
    assert r.passed and r.depth == job.depth(TINY), (name, r.status, r.detail)
    r = prove_property("sorter", TINY, name, mutant=True, job=job,
                       workdir=tmp_path / "mutant")
    assert r.status == "fail", (name, r.mutant, r.status, r.detail)


@pytest.mark.slow
@pytest.mark.extended
def test_topk_full_length_job(tmp_path):
    """The top-k engine's s1.topk to a full-length tiny job (max_n items less at most three,
    every beat of the buffer, any k) with 1-bit keys: passes to that job's depth
    (docs/formal.md, "Top-k engine": about 3 minutes), and its mutant is rejected there."""
    from hikv.hw.formal import SorterJob
    from hikv.sim.eda.formal import prove_property

    _tools_or_skip()
    n = TINY.sorter.max_n
    job = SorterJob(n, n - TINY.sorter.lanes + 1, key_bits=1)
    r = prove_property("topk", TINY, "s1.topk", job=job, workdir=tmp_path / "proof")
    assert r.passed and r.depth == job.depth(TINY, "topk"), (r.status, r.detail)
    r = prove_property("topk", TINY, "s1.topk", mutant=True, job=job,
                       workdir=tmp_path / "mutant")
    assert r.status == "fail", (r.mutant, r.status, r.detail)


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.parametrize("name", [p.name for p in PROPERTIES["scorer"]])
def test_scorer_default_proven(name, tmp_path):
    """The scoring unit's properties on `default` (32 lanes of 64 4-bit MACs): each by its
    induction, as on tiny (docs/formal.md, "Properties on `default`": 3 to 6 minutes each)."""
    from hikv.sim.eda.formal import prove_property

    _tools_or_skip()
    r = prove_property("scorer", get_preset("default"), name, workdir=tmp_path)
    assert r.passed and r.method == "induction", (name, r.status, r.detail)


@pytest.mark.slow
def test_prove_cli_scorer(tmp_path, monkeypatch, capsys):
    """`hikv prove --block scorer --preset tiny` proves every property and exits 0; a
    property that does not close is exit 1, naming it."""
    from hikv.scripts.cli import main

    _tools_or_skip()
    monkeypatch.setenv("HIKV_CACHE", str(tmp_path))
    assert main(["prove", "--block", "scorer", "--preset", "tiny", "--out",
                 str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "all 3 properties proven" in out and "induction, k = 13" in out
    assert (tmp_path / "out" / "prove_scorer_tiny.json").exists()
    # the scoring unit's latency property does not close by induction of length 3
    assert main(["prove", "--block", "scorer", "--property", "latency", "--depth", "3"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: latency" in out and "did not close" in out
    shutil.rmtree(tmp_path / "formal", ignore_errors=True)
