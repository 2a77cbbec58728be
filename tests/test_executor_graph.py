"""hikv.executor.run_graph: work that becomes runnable as other work finishes (the seed
suite's perplexity cell unlocking its length's task cells), every result handed back the
moment it finishes, the smallest key first, on every executor."""

from __future__ import annotations

import math

import pytest

from hikv.executor import run_graph
from hikv.param_checks import ParamError


def _graph(executor: str, workers: int) -> tuple[list[int], dict[int, int]]:
    """3 and 1 are ready; finishing 3 makes 4 and 5 runnable, finishing 5 makes 6."""
    unlock = {3: [4, 5], 5: [6]}
    started: list[int] = []
    got: dict[int, int] = {}

    def done(a: int, r: int) -> list[int]:
        assert a not in got, f"{a} finished twice"
        started.append(a)
        got[a] = r
        return unlock.get(a, [])

    run_graph(math.factorial, [1, 3], done, executor=executor, workers=workers,
              key=lambda a: -a)
    return started, got


@pytest.mark.parametrize(("executor", "workers"), [("serial", 1), ("process", 1),
                                                   ("process", 2)])
def test_every_unit_runs_once_with_its_result(executor, workers) -> None:
    started, got = _graph(executor, workers)
    assert got == {a: math.factorial(a) for a in (1, 3, 4, 5, 6)}
    if workers == 1:
        # one at a time, the largest runnable first: 3 (unlocks 4, 5), 5 (unlocks 6), 6, 4, 1
        assert started == [3, 5, 6, 4, 1]


def test_errors_end_the_run() -> None:
    seen: list[int] = []
    with pytest.raises(ValueError):
        run_graph(math.factorial, [2, -1, 3], lambda a, r: seen.append(a) or [],
                  executor="serial")
    assert seen == [2]                      # nothing after the failing unit starts
    with pytest.raises(ValueError):
        run_graph(math.factorial, [-1], lambda a, r: [], executor="process", workers=2)
    with pytest.raises(RuntimeError, match="on_done"):
        def bad(a: int, r: int) -> list[int]:
            raise RuntimeError("on_done failed")
        run_graph(math.factorial, [1, 2], bad, executor="process", workers=2)


@pytest.mark.parametrize(("kw", "what"), [({"executor": "threads"}, "executor"),
                                          ({"workers": 0}, "workers")])
def test_bad_options_name_the_parameter(kw, what) -> None:
    with pytest.raises(ParamError, match=what):
        run_graph(math.factorial, [1], lambda a, r: [], **kw)


def test_suite_bar_eta_follows_the_weight_done(monkeypatch) -> None:
    """The seed suite's progress bar extrapolates the elapsed time by the weight done (a
    unit's context length), not by the unit count: with the 8k unit first, the four 2k units
    left are half the work, not four fifths."""
    import io
    import itertools

    from hikv.model.accuracy import seed_suite
    def bars(**kw):
        clock = itertools.chain([0.0], itertools.repeat(80.0))   # start, then 80 s on
        monkeypatch.setattr(seed_suite.time, "perf_counter", lambda: next(clock))
        out = io.StringIO()
        return seed_suite._Bar(5, "suite", stream=out, **kw), out

    bar, out = bars(weight_total=8192 + 4 * 2048)
    assert bar.eta() is None and "ETA" not in out.getvalue()
    bar(1, weight=8192)                     # half the weight done in 80 s
    assert bar.eta() == pytest.approx(80.0)
    assert out.getvalue().endswith("1/5 80 s ETA 80 s")
    plain, _ = bars()                       # every unit weighs 1: four more of 80 s
    plain(1)
    assert plain.eta() == pytest.approx(320.0)
