"""The journal of an unfinished seed-suite cell: a run that is killed loses at most the trial
(task cell) or the window (perplexity cell) in flight.

A task cell's rows are written (``cells/<key>.json``,
:func:`hikv.model.accuracy.seed_suite.run_seed_suite`) only when the cell is decided; until then
each finished trial is appended to
``cells/<key>.partial.jsonl`` (:func:`partial_path`): a header line naming what the trials
depend on (cell, seed, suite key, the rows already on disk, the methods active at the start),
then one line per trial with the labels run, their scores and answers, the prompt length and the
cumulative time. Each line goes to the file in one ``write`` of an ``O_APPEND`` descriptor and is
fsynced; a torn last line (killed mid-write) is dropped on reading. A screened task cell (full KV
alone before the methods) journals its screen to ``cells/<key>.screen.partial.jsonl``
(:func:`screen_key`) first. On resume the cell's
bookkeeping replays the lines (:class:`hikv.model.accuracy.seed_trials._TaskCell`) as long as each
line's labels are the methods the replay has active at that trial, so the resumed cell's rows are an
uninterrupted run's; a header that does not match (other families, seed, suite) discards the
journal. A perplexity cell journals each finished window the same way (its header names the
methods and a hash of the windows' tokens; a line holds each method's NLL sum, per-token NLLs,
byte account and steps of that window, :func:`hikv.model.accuracy.experiments.perplexity`), so
its resumed rows equal an uninterrupted run's to the last bit. The journal is deleted once the
cell file is written.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from hikv.io import atomic_write_text

__all__ = ["Journal", "PARTIAL_SUFFIX", "partial_path", "read_journal", "screen_key"]

#: the journal format (the header's ``partial``)
JOURNAL_VERSION = 1


#: the file name ending of a cell's journal (:func:`partial_path`)
PARTIAL_SUFFIX = ".partial.jsonl"


def partial_path(cells_dir: Path, key: str) -> Path:
    """The journal of cell ``key`` in ``cells_dir``: ``<key>.partial.jsonl``."""
    return Path(cells_dir) / f"{key}{PARTIAL_SUFFIX}"


def screen_key(key: str) -> str:
    """The journal key of task cell ``key``'s screen (full KV alone before the methods,
    :func:`hikv.model.accuracy.seed_trials._adaptive_task`): ``<key>.screen``."""
    return f"{key}.screen"


def read_journal(path: Path) -> tuple[Any, list[dict[str, Any]], bool]:
    """(header, the records in order, whether a torn line ended them) of the journal at
    ``path``, read without changing it."""
    recs: list[dict[str, Any]] = []
    head: Any = None
    torn = False
    for i, raw in enumerate(Path(path).read_bytes().split(b"\n")):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            torn = True                         # killed mid-write: the rest is lost
            break
        if i == 0:
            head = obj
        elif isinstance(obj, dict) and obj.get("trial") == len(recs):
            recs.append(obj)
        else:
            torn = True
            break
    return head, recs, torn


def _norm(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


class Journal:
    """Finished trials of one task cell, on disk.

    ``header``: what the trials depend on (JSON-able); a file with another header is discarded.
    :attr:`records` the trial lines read back (in order), :attr:`prior` the cumulative
    ``(wall s, CPU s)`` of the last one (0 when none), :meth:`append` one trial,
    :meth:`keep` truncates to the first ``n`` records (a replay that diverged).
    """

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.header = _norm({"partial": JOURNAL_VERSION, **header})
        self.records: list[dict[str, Any]] = []
        self.dropped = ""
        self._load()
        last = self.records[-1] if self.records else {}
        self.prior = (float(last.get("wall_s", 0.0)), float(last.get("cpu_s", 0.0)))
        self._t0, self._c0 = time.perf_counter(), time.process_time()

    def _load(self) -> None:
        if not self.path.is_file():
            return
        head, recs, torn = read_journal(self.path)
        if head != self.header:
            self.dropped = f"{self.path.name}: written for other settings, discarded"
            self.path.unlink()
            return
        self.records = recs
        if torn:
            self.dropped = f"{self.path.name}: a torn line after trial {len(recs)} dropped"
            self._rewrite()

    def _rewrite(self) -> None:
        if not self.records:
            self.path.unlink(missing_ok=True)
            return
        atomic_write_text(self.path, "".join(json.dumps(x) + "\n"
                                             for x in [self.header, *self.records]))

    def keep(self, n: int) -> None:
        """Keep the first ``n`` trial lines (the replay diverged after them)."""
        if n < len(self.records):
            self.records = self.records[:n]
            self._rewrite()

    def now(self) -> tuple[float, float]:
        """Cumulative ``(wall s, CPU s)`` of the cell's trials: earlier runs' plus this one's."""
        return (self.prior[0] + time.perf_counter() - self._t0,
                self.prior[1] + time.process_time() - self._c0)

    def append(self, trial: int, prompt_tokens: int, labels: list[str], scores: list[float],
               texts: list[str]) -> None:
        """Write trial ``trial``'s answers (one per label, in the order the methods ran)."""
        self.append_record(trial, {"prompt_tokens": prompt_tokens, "labels": labels,
                                   "scores": scores, "texts": texts})

    def append_record(self, trial: int, payload: dict[str, Any],
                      spent: tuple[float, float] | None = None) -> None:
        """Write record ``trial`` (the next one: a trial of a task cell, a window of a
        perplexity cell) with ``payload`` (JSON-able; floats round-trip exactly) and the
        cell's cumulative ``(wall s, CPU s)``: ``spent`` where given (records measured in
        other processes), else :meth:`now`."""
        if trial != len(self.records):
            raise ValueError(f"record {trial} appended after {len(self.records)} records")
        wall, cpu = spent if spent is not None else self.now()
        rec = _norm({"trial": trial, **payload, "wall_s": wall, "cpu_s": cpu})
        self.records.append(rec)
        if not self.path.is_file():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._rewrite()
            return
        data = (json.dumps(rec) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
