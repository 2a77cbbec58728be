"""One executor for sweeps: run a picklable function over argument tuples in order, on local
processes or on a Ray cluster (the optional ``ray`` extra: ``pip install -e ".[ray]"``).

Used by the accuracy suite (``hikv accuracy run --executor ray``,
:mod:`hikv.model.accuracy.seed_suite`: :func:`run_graph`, work that becomes runnable as other work
finishes) and the cluster benchmark (``benchmarks/cluster_bench.py --executor ray``:
:func:`run_tasks`). Standard library only; Ray is imported only when asked for. With
``executor="ray"`` and no running Ray instance, a local one is started for the call and shut down
after it (``RAY_ADDRESS`` or a prior ``ray.init`` selects a cluster, which is left running).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .param_checks import ParamError

__all__ = ["EXECUTORS", "run_tasks", "run_graph", "ray_available"]

#: Executor names: in this process, a local process pool, or Ray.
EXECUTORS = ("serial", "process", "ray")


def ray_available() -> bool:
    """Whether Ray can be imported (the optional ``ray`` extra is installed)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def run_tasks(fn: Callable[[Any], Any], args: Sequence[Any], *, executor: str = "process",
              workers: int = 1, num_cpus: float = 1, spawn: bool = False) -> list[Any]:
    """``[fn(a) for a in args]``, in order, computed by ``executor``.

    Parameters
    ----------
    fn : a module-level (picklable) function of one argument.
    args : the arguments, each picklable.
    executor : ``"serial"``, ``"process"`` (a pool of ``workers`` local processes; one worker
        runs serially) or ``"ray"`` (one Ray task per argument, each reserving ``num_cpus``).
    spawn : start pool processes with ``spawn`` instead of the platform default (for callers
        holding threads, e.g. torch).

    Raises
    ------
    ParamError : an unknown executor, ``workers < 1``, or ``"ray"`` without Ray installed.
    """
    _check(executor, workers)
    if not args:
        return []
    if executor == "ray":
        return _run_ray(fn, args, num_cpus)
    if executor == "serial" or workers == 1:
        return [fn(a) for a in args]
    import concurrent.futures as cf
    import multiprocessing as mp

    ctx = mp.get_context("spawn") if spawn else None
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        return list(pool.map(fn, args))


def run_graph(fn: Callable[[Any], Any], ready: Sequence[Any],
              on_done: Callable[[Any, Any], Sequence[Any]], *, executor: str = "process",
              workers: int = 1, num_cpus: float = 1, spawn: bool = False,
              key: Callable[[Any], Any] | None = None) -> None:
    """Run ``fn`` over work that becomes runnable as other work finishes.

    ``ready`` are the arguments runnable at the start. Whenever ``fn(a)`` finishes,
    ``on_done(a, result)`` runs in this process (so it can save the result at once) and
    returns the arguments that result made runnable. ``"process"`` keeps at most ``workers``
    calls running (``"serial"``: one, here); ``"ray"`` submits every runnable argument at once,
    each reserving ``num_cpus``. Among the runnable ones, the smallest ``key(a)`` starts first
    (default: the order they became runnable). An exception from ``fn`` or ``on_done`` ends
    the run: nothing more starts, the calls already running are waited for, and it is raised.

    Raises
    ------
    ParamError : as :func:`run_tasks`.
    """
    _check(executor, workers)
    order = 0
    pending: list[tuple[Any, int, Any]] = []

    def push(args: Sequence[Any]) -> None:
        nonlocal order
        for a in args:
            pending.append((key(a) if key is not None else (), order, a))
            order += 1
        pending.sort(key=lambda t: (t[0], t[1]))

    push(ready)
    if executor == "ray":
        _graph_ray(fn, pending, push, on_done, num_cpus)
        return
    if executor == "serial" or workers == 1:
        while pending:
            a = pending.pop(0)[2]
            push(on_done(a, fn(a)))
        return
    import concurrent.futures as cf
    import multiprocessing as mp

    ctx = mp.get_context("spawn") if spawn else None
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        running: dict[cf.Future, Any] = {}
        try:
            while pending or running:
                while pending and len(running) < workers:
                    a = pending.pop(0)[2]
                    running[pool.submit(fn, a)] = a
                done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for f in done:
                    a = running.pop(f)
                    push(on_done(a, f.result()))
        finally:
            pending.clear()


def _graph_ray(fn: Callable[[Any], Any], pending: list[tuple[Any, int, Any]],
               push: Callable[[Sequence[Any]], None],
               on_done: Callable[[Any, Any], Sequence[Any]], num_cpus: float) -> None:
    with _ray_remote(fn, num_cpus) as (ray, remote):
        running: dict[Any, Any] = {}
        while pending or running:
            while pending:
                a = pending.pop(0)[2]
                running[remote.remote(a)] = a
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                a = running.pop(ref)
                push(on_done(a, ray.get(ref)))


def _run_ray(fn: Callable[[Any], Any], args: Sequence[Any], num_cpus: float) -> list[Any]:
    with _ray_remote(fn, num_cpus) as (ray, remote):
        return list(ray.get([remote.remote(a) for a in args]))


def _check(executor: str, workers: int) -> None:
    """The options :func:`run_tasks` and :func:`run_graph` share."""
    if executor not in EXECUTORS:
        raise ParamError(f"executor = {executor!r} is not one of: {', '.join(EXECUTORS)}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ParamError(f"workers = {workers!r} is out of range: allowed an integer >= 1")


@contextlib.contextmanager
def _ray_remote(fn: Callable[[Any], Any], num_cpus: float) -> Iterator[tuple[Any, Any]]:
    """``(ray, fn as a remote function reserving num_cpus)``; a Ray instance started here (none
    was running and ``RAY_ADDRESS`` names none) is shut down on leaving."""
    try:
        import ray
    except ImportError:
        raise ParamError("executor 'ray' needs Ray: pip install -e \".[ray]\"") from None
    started = not ray.is_initialized()
    if started:
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    try:
        yield ray, ray.remote(num_cpus=num_cpus)(fn)
    finally:
        if started:
            ray.shutdown()
