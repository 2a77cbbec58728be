"""Scoring-unit jobs for the testbenches: generation, packing with the RTL's own layouts,
expectations from the bit-exact reference :mod:`hikv.model.refs.lowbit`.

Used by the cocotb testbench (:mod:`hikv.rtl_tests.tb_scorer`) and the Amaranth-simulator
test (tests/test_scorer_sim.py). Beats are packed with ``Layout.const`` and unpacked with
``Layout.from_bits`` of the layouts the RTL is built from (:class:`hikv.hw.scorer.
ScorerGeometry`), so no field offset is written by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hikv.model.refs import lowbit as LB
from hikv.params import Config, ParamError

__all__ = ["ScorerJob", "JOB_KINDS", "make_job", "expected_beats", "ScorerCodec"]

#: generators: ``random`` (real keys through the quantiser), ``raw`` (any finite fp16 lo/step
#: patterns and codes, negative scales included), ``extreme`` (scales near the fp16 limits:
#: 65504 and subnormals), ``zero`` (all-zero keys: step 0, every score 0), ``saturate``
#: (full-scale query and codes with the largest lo/step: scores overflow to infinity)
JOB_KINDS = ("random", "raw", "extreme", "zero", "saturate")


@dataclass(frozen=True)
class ScorerJob:
    """One job: an integer query, the tokens' stored metadata and the first index."""

    query: tuple[int, ...]
    codes: tuple[tuple[int, ...], ...]
    lo16: tuple[int, ...]
    step16: tuple[int, ...]
    first: int
    kind: str = "user"

    @property
    def n(self) -> int:
        return len(self.codes)


def _finite_fp16(rng: np.random.Generator, n: int) -> np.ndarray:
    pats = rng.integers(0, 1 << 16, n)
    return np.where((pats & 0x7C00) == 0x7C00, pats & 0x83FF, pats)


def make_job(cfg: Config, rng: np.random.Generator, kind: str, n: int | None = None
             ) -> ScorerJob:
    """A job of ``kind`` (:data:`JOB_KINDS`) for the scoring unit of ``cfg``."""
    d, b, qb = cfg.layout.head_dim, cfg.policy.lowbit_bits, cfg.scorer.query_bits
    qmax = 2 ** (qb - 1) - 1
    max_n = cfg.sorter.max_n
    if n is None:
        n = int(rng.integers(1, min(max_n, 8 * cfg.scorer.lanes) + 1))
    if not 1 <= n <= max_n:
        raise ParamError(f"scorer job n = {n} is out of range: allowed [1, {max_n}]")
    first = int(rng.integers(0, max_n - n + 1))
    q_int = rng.integers(-qmax, qmax + 1, d)
    if kind == "random":
        k = rng.standard_normal((n, d)) * rng.uniform(0.01, 10, (n, 1)) + rng.normal(0, 1, (n, 1))
        meta = LB.store(k.astype(np.float32), b)
        q_int, _ = LB.quantise_query(rng.standard_normal(d), qb)
        codes, lo, step = meta.codes, meta.lo16, meta.step16
    elif kind == "raw":
        codes = rng.integers(0, 2**b, (n, d))
        lo, step = _finite_fp16(rng, n), _finite_fp16(rng, n)
    elif kind == "extreme":
        big = rng.random(n) < 0.5
        k = np.where(big[:, None], rng.uniform(-65504, 65504, (n, d)),
                     rng.uniform(-1e-6, 1e-6, (n, d)))
        k[:, 0] = np.where(big, -65504.0, k[:, 0])
        meta = LB.store(k.astype(np.float32), b)
        codes, lo, step = meta.codes, meta.lo16, meta.step16
        q_int = rng.choice([-qmax, qmax], d)
    elif kind == "zero":
        meta = LB.store(np.zeros((n, d), np.float32), b)
        codes, lo, step = meta.codes, meta.lo16, meta.step16
    elif kind == "saturate":
        codes = np.full((n, d), 2**b - 1)
        lo = np.where(rng.random(n) < 0.5, 0x7BFF, 0xFBFF)       # +-65504
        step = np.full(n, 0x7BFF)
        q_int = np.full(d, qmax if rng.random() < 0.5 else -qmax)
    else:
        raise ParamError(f"scorer job kind = {kind!r} is not one of {JOB_KINDS}")
    return ScorerJob(query=tuple(int(x) for x in q_int),
                     codes=tuple(tuple(int(c) for c in row) for row in np.asarray(codes)),
                     lo16=tuple(int(x) for x in lo), step16=tuple(int(x) for x in step),
                     first=first, kind=kind)


def expected_keys(cfg: Config, job: ScorerJob) -> list[int]:
    """Sorter keys of the job's tokens, in order (the reference)."""
    meta = LB.LowbitMeta(codes=np.array(job.codes, dtype=np.int64).reshape(job.n, -1),
                         lo16=np.array(job.lo16), step16=np.array(job.step16),
                         bits=cfg.policy.lowbit_bits)
    _, keys = LB.score_keys(np.array(job.query), meta, cfg.sorter.key_width)
    return [int(k) for k in keys]


def expected_beats(cfg: Config, job: ScorerJob) -> list[tuple[tuple[tuple[int, int], ...], bool]]:
    """Output beats: per beat the valid lanes' (key, index) and ``last``."""
    keys = expected_keys(cfg, job)
    lanes = cfg.scorer.lanes
    beats = []
    for s in range(0, job.n, lanes):
        items = tuple((keys[t], job.first + t) for t in range(s, min(s + lanes, job.n)))
        beats.append((items, s + lanes >= job.n))
    return beats


class ScorerCodec:
    """Packs configuration and input beats and unpacks output beats with the RTL's layouts."""

    def __init__(self, cfg: Config) -> None:
        from hikv.hw.scorer import ScorerGeometry

        self.geometry = g = ScorerGeometry.of(cfg)
        self.lanes = g.lanes
        self._cfg, self._in, self._out = g.config_layout(), g.input_layout(), g.output_layout()

    @staticmethod
    def _int(c) -> int:
        from amaranth.hdl import Const

        return Const.cast(c).value

    def config(self, job: ScorerJob) -> int:
        return self._int(self._cfg.const({"query": list(job.query), "first": job.first}))

    def inputs(self, job: ScorerJob) -> list[int]:
        """Input beats: ``L`` tokens each, the last beat's low lanes valid."""
        out = []
        for s in range(0, job.n, self.lanes):
            ts = list(range(s, min(s + self.lanes, job.n)))
            lanes = [{"codes": list(job.codes[t]), "lo": job.lo16[t], "step": job.step16[t]}
                     for t in ts]
            lanes += [{"codes": [0] * len(job.query), "lo": 0, "step": 0}] * (
                self.lanes - len(ts))
            out.append(self._int(self._in.const({
                "lanes": lanes, "valid": (1 << len(ts)) - 1,
                "last": int(s + self.lanes >= job.n)})))
        return out

    def output(self, bits: int) -> tuple[tuple[tuple[int, int], ...], bool]:
        """(valid lanes' (key, index), last) of an output beat."""
        v = self._out.from_bits(bits)
        mask = int(v.valid)
        n = 0
        while n < self.lanes and (mask >> n) & 1:
            n += 1
        return (tuple((int(v.lanes[j].key), int(v.lanes[j].index)) for j in range(n)),
                bool(v.last))
