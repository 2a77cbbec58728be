"""Serving workloads: Poisson synthetic arrivals and Azure LLM inference trace replay.

A :class:`Workload` is arrays of arrival times (seconds from the first arrival), prompt
tokens and output tokens, plus the nominal arrival rate and where it came from.

* :func:`poisson_workload`: exponential inter-arrival times at ``rate_per_s``; prompt and
  output lengths lognormal, ``round(exp(N(ln median, sigma^2)))`` clipped to
  ``[1, max_*_tokens]`` (:class:`~hikv.params.SyntheticWorkload`); one local
  ``numpy.random.default_rng(seed)`` per call.
* :func:`read_azure_trace`: the Azure LLM inference trace format (header
  ``TIMESTAMP,ContextTokens,GeneratedTokens``, timestamps ``YYYY-MM-DD HH:MM:SS[.fffffff]``).
  The traces (Azure LLM inference trace 2023, CC-BY 4.0; Patel et al., "Splitwise: Efficient
  generative LLM inference using phase splitting", ISCA 2024) are read from a path the user
  gives; the project does not ship them. Every malformed row is an error that names the file
  and line; no row is dropped silently.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hikv.params import ParamError, SyntheticWorkload

__all__ = [
    "TraceError",
    "Workload",
    "poisson_workload",
    "read_azure_trace",
    "find_azure_trace",
    "AZURE_HEADER",
    "MAX_REQUEST_TOKENS",
    "MAX_REQUESTS",
    "MAX_ARRIVAL_S",
    "MAX_RATE_PER_S",
]

AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: Largest prompt or output of one request (tokens) a trace may hold: the serving model keeps
#: per-token state, and no served model has a context near this.
MAX_REQUEST_TOKENS = 1 << 24
#: Latest arrival a workload may hold (s): 2**30 s (34 years) keeps float64 times at 0.24 us
#: resolution (np.spacing(2.0**30) is 2.4e-7 s), 400x finer than the shortest SLO of a preset
#: (0.1 ms); the goodput search's 12 halvings of an hour-long trace stay well inside it.
MAX_ARRIVAL_S = float(2**30)
#: Highest nominal arrival rate (requests/s): one request per nanosecond.
MAX_RATE_PER_S = 1e9
#: Most requests one workload holds (the simulator keeps per-request arrays).
MAX_REQUESTS = 1 << 24
_TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$")


class TraceError(ParamError):
    """A trace file is malformed; the message names the file and the line."""


@dataclass(frozen=True)
class Workload:
    """Requests of one run, sorted by arrival.

    ``arrival_s`` float64 seconds from the first arrival (non-decreasing), ``prompt_tokens`` and
    ``output_tokens`` int64 >= 1; ``rate_per_s`` the nominal arrival rate (Poisson: its rate;
    trace: requests per second over its span); ``source`` a short description.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    rate_per_s: float
    source: str

    def __post_init__(self) -> None:
        a = np.asarray(self.arrival_s, dtype=np.float64).reshape(-1)
        p = np.asarray(self.prompt_tokens, dtype=np.int64).reshape(-1)
        o = np.asarray(self.output_tokens, dtype=np.int64).reshape(-1)
        if not (a.size == p.size == o.size) or a.size == 0:
            raise ParamError("Workload: arrival_s, prompt_tokens and output_tokens must be "
                             f"non-empty and of one length, got {a.size}, {p.size}, {o.size}")
        if not np.isfinite(a).all() or (np.diff(a) < 0).any():
            raise ParamError("Workload.arrival_s must be finite and non-decreasing")
        if a.size and (a.min() < 0 or a.max() > MAX_ARRIVAL_S):
            raise ParamError(f"Workload.arrival_s spans up to {a.max():.4g} s: allowed [0, "
                             f"{MAX_ARRIVAL_S:.4g}] s, beyond which float64 times lose the "
                             "resolution the simulator needs (is the rate too low?)")
        if p.min() < 1 or o.min() < 1:
            raise ParamError("Workload: prompt_tokens and output_tokens must be >= 1")
        if not (0 < self.rate_per_s <= MAX_RATE_PER_S):
            raise ParamError(f"Workload.rate_per_s = {self.rate_per_s} is out of range: allowed "
                             f"(0, {MAX_RATE_PER_S:g}] requests per second (faster arrivals are "
                             "closer than the simulator's nanosecond resolution)")
        for name, v in (("arrival_s", a), ("prompt_tokens", p), ("output_tokens", o)):
            v.setflags(write=False)
            object.__setattr__(self, name, v)

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    @property
    def span_s(self) -> float:
        """Seconds from the first arrival to the last (0 for one request or a burst)."""
        return float(self.arrival_s[-1] - self.arrival_s[0])

    def at_rate(self, rate_per_s: float) -> Workload:
        """The same requests with arrival times scaled so the nominal rate is ``rate_per_s``
        (for a Poisson workload: the same draws at another rate). A workload of several
        requests that all arrive at once has no rate to rescale: that is an error."""
        if not (isinstance(rate_per_s, int | float) and math.isfinite(rate_per_s)
                and rate_per_s > 0):
            raise ParamError(f"rate_per_s = {rate_per_s} is out of range: allowed a finite "
                             "number > 0 (requests per second)")
        if len(self) > 1 and self.span_s == 0:
            raise ParamError(f"{self.source}: all {len(self)} requests arrive at the same time "
                             "(zero span), so there is no arrival rate to rescale to "
                             f"{rate_per_s:g}/s; drop --rate / --goodput or give a trace whose "
                             "arrivals span time")
        f = self.rate_per_s / rate_per_s
        arrival = self.arrival_s * f
        if not np.isfinite(arrival).all():
            raise ParamError(f"rate_per_s = {rate_per_s:g} is too small for {self.source}: "
                             "its arrival times overflow; allowed rates keep them finite")
        return Workload(arrival, self.prompt_tokens, self.output_tokens,
                        float(rate_per_s), f"{self.source} @ {rate_per_s:.4g}/s")

    def head(self, n: int) -> Workload:
        """The first ``n`` requests (the nominal rate recomputed for a trace)."""
        if n < 1:
            raise ParamError(f"max requests = {n} must be >= 1")
        if n >= len(self):
            return self
        a = self.arrival_s[:n]
        rate = (n - 1) / (a[-1] - a[0]) if n > 1 and a[-1] > a[0] else self.rate_per_s
        return Workload(a, self.prompt_tokens[:n], self.output_tokens[:n], float(rate),
                        f"{self.source}[:{n}]")


def poisson_workload(params: SyntheticWorkload, *, seed: int, rate_per_s: float | None = None,
                     requests: int | None = None) -> Workload:
    """Poisson arrivals with lognormal lengths (see the module docstring)."""
    rate = params.rate_per_s if rate_per_s is None else float(rate_per_s)
    n = params.requests if requests is None else requests
    if not (math.isfinite(rate) and rate > 0):
        raise ParamError(f"rate = {rate} is out of range: allowed a finite number > 0 requests "
                         "per second")
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= n <= MAX_REQUESTS:
        raise ParamError(f"requests = {n!r} is out of range: allowed an integer in "
                         f"[1, {MAX_REQUESTS}]")
    n = int(n)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ParamError(f"seed = {seed!r} is out of range: allowed an integer >= 0")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0, n)
    gaps[0] = 0.0
    arrival = np.cumsum(gaps) / rate
    if not np.isfinite(arrival).all():
        raise ParamError(f"rate = {rate:g} requests per second is too small: the arrival times "
                         "overflow; allowed rates keep them finite")

    def lengths(median: float, sigma: float, hi: int) -> np.ndarray:
        x = np.exp(rng.normal(np.log(median), sigma, n))
        return np.clip(np.rint(x), 1, hi).astype(np.int64)

    prompt = lengths(params.prompt_median_tokens, params.prompt_sigma, params.max_prompt_tokens)
    output = lengths(params.output_median_tokens, params.output_sigma, params.max_output_tokens)
    return Workload(arrival, prompt, output, rate, f"poisson({rate:.4g}/s, seed {seed})")


def _parse_ts(text: str) -> int:
    """Timestamp -> integer nanoseconds since 0001-01-01 (exact, no float rounding)."""
    m = _TS.match(text)
    if not m:
        raise ValueError("timestamp is not YYYY-MM-DD HH:MM:SS[.fffffff]")
    y, mo, d, hh, mm, ss = (int(g) for g in m.groups()[:6])
    frac = m.group(7) or ""
    day = _dt.date(y, mo, d).toordinal()          # raises on a bad date
    if hh > 23 or mm > 59 or ss > 59:
        raise ValueError("time of day out of range")
    ns = int((frac + "000000000")[:9])
    return ((day * 24 + hh) * 60 + mm) * 60 * 10**9 + ss * 10**9 + ns


def read_azure_trace(path: str | os.PathLike[str], *, limit: int | None = None) -> Workload:
    """Read an Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    Rows must have exactly three fields, a valid timestamp not earlier than the previous row's,
    and integer token counts >= 1 (a request with no prompt or no output is not servable).
    Any violation raises :class:`TraceError` naming ``path`` and the 1-based line number.
    ``limit`` reads only the first ``limit`` requests.
    """
    p = Path(path)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise TraceError(f"max requests = {limit!r} is out of range: allowed an integer >= 1")
    if not p.is_file():
        raise TraceError(f"{p}: trace file not found" + (" (it is a folder)" if p.is_dir()
                                                          else ""))
    ts: list[int] = []
    ctx: list[int] = []
    gen: list[int] = []
    try:
        with p.open("rb") as fb:
            magic = fb.read(4)
    except OSError as e:
        raise TraceError(f"{p}: cannot be read: {e.strerror or e}") from None
    if magic[:2] == b"\x1f\x8b":
        raise TraceError(f"{p}: is gzip-compressed; decompress it first (gunzip); expected a "
                         "UTF-8 CSV")
    if magic[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise TraceError(f"{p}: is UTF-16; convert it to UTF-8 (iconv -f UTF-16 -t UTF-8); "
                         "expected a UTF-8 CSV")
    try:
        return _read_rows(p, limit, ts, ctx, gen)
    except UnicodeDecodeError as e:
        raise TraceError(f"{p}:{len(ts) + 2}: not UTF-8 text ({e.reason}); expected a UTF-8 "
                         "CSV") from None
    except OSError as e:
        raise TraceError(f"{p}: cannot be read: {e.strerror or e}") from None


def _read_rows(p: Path, limit: int | None, ts: list[int], ctx: list[int], gen: list[int]
               ) -> Workload:
    with p.open(newline="", encoding="utf-8-sig") as f:
        header = f.readline().rstrip("\r\n")
        if tuple(h.strip() for h in header.split(",")) != AZURE_HEADER:
            raise TraceError(f"{p}:1: header {header!r} is not {','.join(AZURE_HEADER)}")
        for lineno, line in enumerate(f, start=2):
            if limit is not None and len(ts) >= limit:
                break
            row = line.rstrip("\r\n")
            fields = row.split(",")
            if len(fields) != 3:
                raise TraceError(f"{p}:{lineno}: expected 3 fields "
                                 f"(TIMESTAMP,ContextTokens,GeneratedTokens), got "
                                 f"{len(fields)}: {row!r}")
            try:
                t = _parse_ts(fields[0].strip())
            except ValueError as e:
                raise TraceError(f"{p}:{lineno}: bad TIMESTAMP {fields[0]!r}: {e}") from None
            vals = []
            for name, text in zip(AZURE_HEADER[1:], fields[1:], strict=True):
                s = text.strip()
                if not (s.isascii() and s.isdigit()):
                    raise TraceError(f"{p}:{lineno}: {name} = {text!r} is not a non-negative "
                                     "integer")
                if len(s.lstrip("0")) > 12:
                    raise TraceError(f"{p}:{lineno}: {name} = {s[:20]}... is out of range: "
                                     f"allowed [1, {MAX_REQUEST_TOKENS}]")
                v = int(s)
                if not 1 <= v <= MAX_REQUEST_TOKENS:
                    raise TraceError(f"{p}:{lineno}: {name} = {v} is out of range: allowed "
                                     f"[1, {MAX_REQUEST_TOKENS}]")
                vals.append(v)
            if ts and t < ts[-1]:
                raise TraceError(f"{p}:{lineno}: TIMESTAMP {fields[0].strip()} is earlier than "
                                 "the previous row's (the trace must be in arrival order)")
            ts.append(t)
            ctx.append(vals[0])
            gen.append(vals[1])
    if not ts:
        raise TraceError(f"{p}: no requests after the header")
    t0 = ts[0]
    arrival = np.asarray([x - t0 for x in ts], dtype=np.int64) / 1e9
    n = len(ts)
    span = float(arrival[-1])
    # one request, or a burst at one instant, has no arrival rate: 1/s is only a nominal
    # placeholder (Workload.at_rate refuses to rescale such a trace; summaries print n/a)
    rate = (n - 1) / span if n > 1 and span > 0 else 1.0
    return Workload(arrival, np.asarray(ctx, dtype=np.int64), np.asarray(gen, dtype=np.int64),
                    rate, p.name if limit is None else f"{p.name}[:{limit}]")


def find_azure_trace(name: str = "conv", start: str | os.PathLike[str] | None = None
                     ) -> Path | None:
    """Path of ``AzureLLMInferenceTrace_{name}.csv`` if it can be found, else None.

    Looks in ``$HIKV_DATA`` (a directory holding ``azure-llm-2023/`` or the files themselves),
    then in ``shared/data/azure-llm-2023`` beside ``start`` (default: this package's source)
    or any of its parents.
    """
    fname = f"AzureLLMInferenceTrace_{name}.csv"
    env = os.environ.get("HIKV_DATA")
    if env:
        for d in (Path(env) / "azure-llm-2023", Path(env)):
            if (d / fname).is_file():
                return d / fname
    return shared_data_file(Path("azure-llm-2023") / fname, start)


def shared_data_file(rel: str | os.PathLike[str],
                     start: str | os.PathLike[str] | None = None) -> Path | None:
    """``shared/data/<rel>`` in the nearest parent of ``start`` (default: this package's
    source) that holds it, or None."""
    here = Path(start) if start is not None else Path(__file__)
    for parent in here.resolve().parents:
        f = parent / "shared" / "data" / rel
        if f.is_file():
            return f
    return None
