"""Sorter jobs for the testbenches: generation, packing with the RTL's own layouts, expectations.

Used by the cocotb testbench (:mod:`hikv.rtl_tests.tb_sorter`), the Amaranth-simulator tests
and the replay entry point (:mod:`hikv.rtl_tests.sorter_replay`). Beats are packed and unpacked
through :class:`BeatCodec`, whose field offsets are read from the Amaranth layouts of
:mod:`hikv.hw.sorter` (the same objects the RTL is built from), never written by hand.
Expected outputs come from the golden model :mod:`hikv.model.refs.sorter`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from hikv.hw.sorter_timing import SorterTiming
from hikv.params import ParamError, SorterParams

__all__ = ["SorterJob", "BeatCodec", "random_job", "directed_jobs", "expected_output",
           "STAGE1", "STAGE2"]

STAGE1 = "stage1"
STAGE2 = "stage2"


@dataclass(frozen=True)
class SorterJob:
    """One sorter job: Stage I (one stream with labels) or Stage II (vectors).

    ``segments`` holds the keys: one tuple for Stage I, one per vector for Stage II.
    ``labels`` are the Stage I indices (strictly increasing); Stage II indices are positions.
    ``kind`` names the generator (for logs).
    """

    mode: str
    k: int
    segments: tuple[tuple[int, ...], ...]
    labels: tuple[int, ...] = ()
    kind: str = "user"

    @property
    def length(self) -> int:
        """Items per segment: ``n`` (Stage I) or ``d`` (Stage II)."""
        return len(self.segments[0])

    @property
    def count(self) -> int:
        """The configuration's count field: ``n`` (Stage I) or the number of vectors."""
        return self.length if self.mode == STAGE1 else len(self.segments)

    def check(self, params: SorterParams) -> None:
        """Raise :class:`ParamError` unless the job fits ``params`` and the sorter's contract."""
        t = SorterTiming.from_params(params)
        if self.mode not in (STAGE1, STAGE2):
            raise ParamError(f"sorter job mode must be {STAGE1!r} or {STAGE2!r}, "
                             f"not {self.mode!r}")
        if not self.segments or not all(self.segments):
            raise ParamError("sorter job has an empty segment")
        if self.mode == STAGE1:
            t.check_stage1(self.length, self.k)
            if len(self.labels) != self.length:
                raise ParamError(f"Stage I job has {self.length} keys but {len(self.labels)} "
                                 "labels")
            top = 1 << params.index_width
            for a, b in zip(self.labels, self.labels[1:], strict=False):
                if b <= a:
                    raise ParamError(f"Stage I labels must be strictly increasing (the sorter "
                                     f"emits arrival order); got {a} then {b}")
            if self.labels and (self.labels[0] < 0 or self.labels[-1] >= top):
                raise ParamError(f"Stage I labels must lie in [0, {top}) (index_width = "
                                 f"{params.index_width})")
        else:
            if len({len(s) for s in self.segments}) != 1:
                raise ParamError("Stage II vectors must all have the same length d")
            t.check_stage2(len(self.segments), self.length, self.k)
        kmax = (1 << params.key_width) - 1
        for seg in self.segments:
            for key in seg:
                if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key <= kmax:
                    raise ParamError(f"sorter keys must be integers in [0, {kmax}] "
                                     f"(key_width = {params.key_width}), got {key!r}")

    def config(self) -> dict[str, int]:
        """Configuration fields other than the mode (see :func:`hikv.hw.sorter.config_layout`)."""
        return {"k": self.k, "length": self.length if self.mode == STAGE2 else 0,
                "count": self.count}

    def items(self) -> list[list[tuple[int, int]]]:
        """(key, index) per segment, in stream order."""
        if self.mode == STAGE1:
            return [list(zip(self.segments[0], self.labels, strict=True))]
        return [[(key, i) for i, key in enumerate(seg)] for seg in self.segments]

    def cycles(self, timing: SorterTiming) -> int:
        """The timing contract's cycle count for this job."""
        if self.mode == STAGE1:
            return timing.stage1_cycles(self.length, self.k)
        return timing.stage2_cycles(len(self.segments), self.length, self.k)

    def describe(self, limit: int = 64) -> str:
        segs = [list(s) for s in self.segments]
        text = (f"{self.mode} kind={self.kind} k={self.k} length={self.length} "
                f"count={self.count} keys={segs}")
        if self.mode == STAGE1:
            text += f" labels={list(self.labels)}"
        return text if len(text) <= 40 * limit else text[:40 * limit] + "..."

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "k": self.k, "segments": [list(s) for s in self.segments],
                "labels": list(self.labels), "kind": self.kind}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SorterJob:
        return cls(mode=d["mode"], k=int(d["k"]),
                   segments=tuple(tuple(int(x) for x in s) for s in d["segments"]),
                   labels=tuple(int(x) for x in d.get("labels", ())),
                   kind=d.get("kind", "user"))


def expected_output(job: SorterJob) -> list[list[tuple[int, int]]]:
    """Golden output per segment: selected (key, index), ascending index."""
    from hikv.model.refs.sorter import stage1_topk, stage2_topr

    if job.mode == STAGE1:
        return [[(int(a), int(b)) for a, b in
                 stage1_topk(list(job.segments[0]), list(job.labels), job.k)]]
    return [[(int(a), int(b)) for a, b in v]
            for v in stage2_topr([list(s) for s in job.segments], job.k)]


# --------------------------------------------------------------------------- packing
@dataclass
class BeatCodec:
    """Packs configuration and input beats, unpacks output beats, with offsets taken from the
    Amaranth layouts of the RTL (:func:`config_layout`, :func:`io_layout`)."""

    params: SorterParams
    _off: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        from amaranth.hdl import Shape
        from amaranth.lib import data

        from hikv.hw.sorter import SorterMode, config_layout, io_layout

        self.mode_values = {STAGE1: SorterMode.STAGE1.value, STAGE2: SorterMode.STAGE2.value}
        cl = config_layout(self.params)
        il = io_layout(self.params)
        self.config_layout, self.io_layout = cl, il
        self.config_width = cl.size
        self.io_width = il.size
        self._cfg = {name: (cl[name].offset, Shape.cast(cl[name].shape).width)
                     for name in ("mode", "k", "length", "count")}
        lanes = il["lanes"]
        arr = lanes.shape
        assert isinstance(arr, data.ArrayLayout)
        lane_layout = data.Layout.cast(arr.elem_shape)
        self._lane_base = lanes.offset
        self._lane_size = lane_layout.size
        self._key = (lane_layout["key"].offset, Shape.cast(lane_layout["key"].shape).width)
        self._index = (lane_layout["index"].offset,
                       Shape.cast(lane_layout["index"].shape).width)
        self._valid = (il["valid"].offset, Shape.cast(il["valid"].shape).width)
        self._last = il["last"].offset
        self.lanes = arr.length

    def config(self, job: SorterJob) -> int:
        f = self._cfg
        mode = self.mode_values[job.mode]
        fields = {"mode": mode, "k": job.k, "length": job.config()["length"],
                  "count": job.count}
        bits = 0
        for name, value in fields.items():
            off, width = f[name]
            if not 0 <= value < 1 << width:
                raise ParamError(f"sorter configuration field {name} = {value} does not fit "
                                 f"{width} bits")
            bits |= value << off
        return bits

    def beat(self, items: list[tuple[int, int]], last: bool) -> int:
        """One input beat: up to ``P`` (key, index) items, valid mask, last flag."""
        ko, kw = self._key
        io, iw = self._index
        bits = 0
        for lane, (key, index) in enumerate(items):
            base = self._lane_base + lane * self._lane_size
            bits |= (key & ((1 << kw) - 1)) << (base + ko)
            bits |= (index & ((1 << iw) - 1)) << (base + io)
        bits |= ((1 << len(items)) - 1) << self._valid[0]
        bits |= int(last) << self._last
        return bits

    def beats(self, job: SorterJob) -> list[int]:
        out = []
        p = self.lanes
        for seg in job.items():
            for b in range(0, len(seg), p):
                out.append(self.beat(seg[b:b + p], b + p >= len(seg)))
        return out

    def unpack(self, bits: int) -> tuple[list[tuple[int, int]], bool, int]:
        """(valid items, last, valid mask) of an output beat."""
        ko, kw = self._key
        io, iw = self._index
        vo, vw = self._valid
        mask = (bits >> vo) & ((1 << vw) - 1)
        items = []
        for lane in range(self.lanes):
            if (mask >> lane) & 1:
                base = self._lane_base + lane * self._lane_size
                items.append(((bits >> (base + ko)) & ((1 << kw) - 1),
                              (bits >> (base + io)) & ((1 << iw) - 1)))
        return items, bool((bits >> self._last) & 1), mask


# --------------------------------------------------------------------------- generators
KEY_KINDS = ("random", "ties", "equal", "max", "zero", "ascending", "descending")


def _keys(rng: random.Random, n: int, width: int, kind: str) -> list[int]:
    top = (1 << width) - 1
    if kind == "random":
        return [rng.randint(0, top) for _ in range(n)]
    if kind == "ties":
        vals = [rng.randint(0, top) for _ in range(rng.randint(1, 3))]
        return [rng.choice(vals) for _ in range(n)]
    if kind == "equal":
        v = rng.randint(0, top)
        return [v] * n
    if kind == "max":
        return [top] * n
    if kind == "zero":
        return [0] * n
    base = sorted(rng.randint(0, top) for _ in range(n))
    return base if kind == "ascending" else base[::-1]


def _labels(rng: random.Random, n: int, index_width: int) -> tuple[int, ...]:
    top = 1 << index_width
    if rng.random() < 0.5 or n == top:
        start = rng.randint(0, top - n)
        return tuple(range(start, start + n))
    return tuple(sorted(rng.sample(range(top), n)))


def _small(rng: random.Random, hi: int) -> int:
    """Sizes biased towards small values and the extremes."""
    r = rng.random()
    if r < 0.1:
        return 1
    if r < 0.2:
        return hi
    if r < 0.6:
        return rng.randint(1, max(1, min(hi, 3 * hi // 8 + 1)))
    return rng.randint(1, hi)


def random_job(rng: random.Random, params: SorterParams, mode: str, *,
               max_n: int | None = None, max_count: int = 6) -> SorterJob:
    """A random job: sizes biased to the extremes, keys of a random kind (many ties)."""
    kind = rng.choice(KEY_KINDS + ("ties", "ties", "random"))
    if mode == STAGE1:
        n = _small(rng, min(params.max_n, max_n or params.max_n))
        r = rng.random()
        k = 1 if r < 0.1 else min(n, params.max_k) if r < 0.2 else _small(rng, params.max_k)
        return SorterJob(STAGE1, k, (tuple(_keys(rng, n, params.key_width, kind)),),
                         _labels(rng, n, params.index_width), kind)
    d = _small(rng, params.max_vec)
    r = rng.random()
    k = 1 if r < 0.1 else d if r < 0.2 else _small(rng, params.max_vec)
    count = rng.randint(1, max_count)
    segs = tuple(tuple(_keys(rng, d, params.key_width, kind)) for _ in range(count))
    return SorterJob(STAGE2, k, segs, (), kind)


def directed_jobs(params: SorterParams, rng: random.Random) -> list[SorterJob]:
    """Corner cases of both modes, in an order that alternates modes back to back."""
    p, n, kmax, dmax = params.lanes, params.max_n, params.max_k, params.max_vec
    w = params.key_width
    top = (1 << w) - 1
    s1: list[SorterJob] = []
    sizes = sorted({1, 2, p - 1, p, p + 1, min(n, 3 * p + 1), n - 1, n} - {0})
    for size in sizes:
        for k in sorted({1, min(size, kmax), kmax, max(1, min(kmax, size // 2))}):
            for kind in ("equal", "max", "zero", "ascending", "descending", "ties"):
                if kind != "ties" and size not in (sizes[-1], p + 1, 1):
                    continue
                s1.append(SorterJob(STAGE1, k, (tuple(_keys(rng, size, w, kind)),),
                                    tuple(range(size)), f"directed-{kind}"))
    # highest labels: the tie-break bits of the composite at their extremes
    hi = 1 << params.index_width
    s1.append(SorterJob(STAGE1, min(kmax, n), (tuple([top] * n),), tuple(range(hi - n, hi)),
                        "directed-high-labels"))
    s2: list[SorterJob] = []
    for d in sorted({1, 2, p - 1, p, p + 1, dmax - 1, dmax} - {0}):
        for r in sorted({1, d, max(1, d // 2), dmax}):
            for kind in ("equal", "max", "zero", "ascending", "descending", "ties"):
                count = 1 if kind != "ties" else 5
                segs = tuple(tuple(_keys(rng, d, w, kind)) for _ in range(count))
                s2.append(SorterJob(STAGE2, r, segs, (), f"directed-{kind}"))
    # reference points reported by ``hikv rtl``: the largest jobs, and Stage II steady state
    for k in sorted({kmax, max(1, kmax // 2)}):
        s1.append(SorterJob(STAGE1, k, (tuple(_keys(rng, n, w, "random")),),
                            tuple(range(n)), "bench"))
    for d in sorted({dmax, max(1, dmax // 2)}):
        s2.append(SorterJob(STAGE2, max(1, (3 * d) // 4),
                            tuple(tuple(_keys(rng, d, w, "random")) for _ in range(64)), (),
                            "bench"))
    out: list[SorterJob] = []
    for i in range(max(len(s1), len(s2))):
        if i < len(s1):
            out.append(s1[i])
        if i < len(s2):
            out.append(s2[i])
    return out
