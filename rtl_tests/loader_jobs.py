"""Loader test jobs and their expected results, all from the golden model.

Used by the Amaranth unit tests (tests/test_loader_units.py) and the cocotb regression
(rtl_tests/loader_launch.py writes the cases as JSON for rtl_tests/tb_loader.py, which then
needs neither torch nor the golden model). Everything expected here comes from
:mod:`hikv.model.refs.loader` and :mod:`hikv.model.refs.layout`; the only loader-internal
expectation is :func:`expected_entries`, the address side's records / pages, written from their
definition in hw/loader.py.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

import torch

from hikv.hw.loader_timing import AXI_BOUNDARY, LoaderGeometry
from hikv.model.refs.layout import burst_bytes
from hikv.model.refs.loader import (
    LoaderJob,
    channel_page_image,
    dense_image,
    error_slots,
    job_ranges,
    job_requests,
    masked_image,
    packed_output,
    request_bytes,
)
from hikv.params import Config, ParamError, RecordLayout

__all__ = ["Case", "Entry", "expected_entries", "make_case", "make_cases", "make_timing_cases",
           "make_chain_cases", "packed_4k_case", "vector_bits"]

#: AXI RRESP codes.
SLVERR, DECERR = 2, 3
#: Timing jobs use slots below this (keeps the paper preset's timing run to minutes).
TIMING_MAX_SLOTS = 4096


@dataclass
class Case:
    """One job with its memory contents and everything the loader must produce."""

    name: str
    job: LoaderJob
    memory: dict[int, bytes]                 # address -> bytes to place in memory
    requests: list[tuple[int, int]]          # expected AR (address, beats), in order
    outputs: list[tuple[int, int, int, int]]  # expected (token, data bits, mask bits, err)
    bytes_read: int
    error_beats: dict[int, int] = field(default_factory=dict)  # beat address -> RRESP
    knobs: dict[str, Any] = field(default_factory=dict)        # testbench randomisation
    scores: list[int] | None = None    # chained sorter: Stage I keys of tokens 0..n-1
    k: int = 0                         # chained sorter: Stage I k

    def to_json(self, images: dict[int, str] | None = None) -> dict[str, Any]:
        """JSON of the case; with ``images`` (id of a memory dict -> key) the memory is stored
        once in that table and referenced, so jobs sharing an image do not repeat it."""
        memory: Any = {str(a): b.hex() for a, b in self.memory.items()}
        if images is not None:
            memory = images.setdefault(id(self.memory), f"m{len(images)}")
        return {
            "name": self.name,
            "mode": self.job.mode.value,
            "base": self.job.base,
            "slots": list(self.job.slots),
            "kept": self.job.kept,
            "channels": list(self.job.channels),
            "memory": memory,
            "requests": self.requests,
            "outputs": [[t, hex(d), hex(m), e] for t, d, m, e in self.outputs],
            "bytes_read": self.bytes_read,
            "error_beats": {str(a): r for a, r in self.error_beats.items()},
            "knobs": self.knobs,
            **({"scores": self.scores, "k": self.k} if self.scores is not None else {}),
        }


def vector_bits(vec: torch.Tensor, elem_bytes: int) -> int:
    """A vector's elements as one integer, element 0 in the low bits (raw bit patterns)."""
    dt = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[elem_bytes]
    raw = vec.contiguous().view(dt).tolist() if elem_bytes > 1 else vec.tolist()
    bits = 8 * elem_bytes
    mask = (1 << bits) - 1
    return sum((int(v) & mask) << (i * bits) for i, v in enumerate(raw))


def _mask_bits(mask: torch.Tensor) -> int:
    return sum(1 << i for i, b in enumerate(mask.tolist()) if b)


# --------------------------------------------------------------------------- images
def _random_elems(g: torch.Generator, n: int, d: int, elem_bytes: int) -> torch.Tensor:
    """Random raw element bit patterns as the image dtype (any pattern, NaNs included)."""
    if elem_bytes == 1:
        return torch.randint(0, 256, (n, d), generator=g, dtype=torch.int64).to(torch.uint8)
    raw = torch.randint(0, 1 << 16, (n, d * elem_bytes // 2), generator=g, dtype=torch.int64)
    raw = raw.to(torch.int32).to(torch.int16)  # wraps into int16 range
    t = raw.view(torch.float16)
    return t if elem_bytes == 2 else t.view(torch.float32)


def _region_image(job: LoaderJob, cfg: Config, g: torch.Generator, rng: random.Random,
                  masks: str) -> bytes:
    """Region bytes holding every slot up to the last one, padding randomised."""
    lay = cfg.layout
    d, eb = lay.head_dim, lay.elem_bytes
    n = job.slots[-1] + 1
    x = _random_elems(g, n, d, eb)
    if job.mode is RecordLayout.DENSE:
        img = bytearray(dense_image(x, lay))
        rec, stride = lay.row_bytes, lay.stride(lay.row_bytes)
    elif job.mode is RecordLayout.MASKED_RECORD:
        if masks == "ones" or job.kept == d:
            mask = torch.ones(n, d, dtype=torch.bool)
        elif masks == "zeros" or job.kept == 0:
            mask = torch.zeros(n, d, dtype=torch.bool)
        else:
            idx = torch.argsort(torch.rand(n, d, generator=g), dim=-1)[:, :job.kept]
            mask = torch.zeros(n, d, dtype=torch.bool).scatter(1, idx, True)
        img = bytearray(masked_image(x, mask, lay))
        rec, stride = lay.record_bytes(job.kept), lay.stride(lay.record_bytes(job.kept))
    else:
        return channel_page_image(x, lay)
    # stride padding is random too: the loader must ignore it
    for s in range(n):
        for b in range(s * stride + rec, (s + 1) * stride):
            img[b] = rng.randrange(256)
    return bytes(img)


# --------------------------------------------------------------------------- slots
def _slots(rng: random.Random, limit: int, kind: str, count: int | None = None) -> list[int]:
    """Ascending slots below ``limit``: 'one', 'all', 'runs' (runs and gaps), 'sparse'."""
    if kind == "one":
        return [rng.randrange(limit)]
    if kind == "all":
        return list(range(limit))
    if kind == "sparse":
        k = count or max(1, limit // 8)
        return sorted(rng.sample(range(limit), min(k, limit)))
    out, s = [], rng.randrange(min(4, limit))
    inside = True
    while s < limit:
        if inside:
            out.append(s)
        s += 1
        if rng.random() < 0.3:
            inside = not inside
    return out or [rng.randrange(limit)]


# --------------------------------------------------------------------------- cases
def make_case(cfg: Config, rng: random.Random, *, name: str, mode: RecordLayout,
              slot_kind: str = "runs", kept: int | None = None, masks: str = "random",
              channels: list[int] | None = None, base: int | None = None,
              error: int | None = None, max_slots: int | None = None,
              knobs: dict[str, Any] | None = None, window: int | None = None,
              slots: list[int] | None = None) -> Case:
    """One job of ``mode`` with its memory and expected results.

    ``slots`` fixes the job's slots (default: drawn as ``slot_kind`` says).

    ``error``: RRESP (SLVERR or DECERR) injected on one randomly chosen beat the job reads.
    ``max_slots`` caps the slot range (default ``max_tokens``); ``window`` the address range
    the region is placed in (default: the address space, at most 1 MiB or twice the region).
    """
    lay, lp = cfg.layout, cfg.loader
    geo = LoaderGeometry(lay, lp)
    d = lay.head_dim
    limit = min(max_slots or lp.max_tokens, lp.max_tokens)
    slots = _slots(rng, limit, slot_kind) if slots is None else list(slots)
    if kept is None:
        kept = rng.randint(0, d)
    if mode is RecordLayout.MASKED_RECORD and masks == "ones":
        kept = d
    if mode is RecordLayout.MASKED_RECORD and masks == "zeros":
        kept = 0
    if channels is None:
        channels = sorted(rng.sample(range(d), rng.randint(0, d)))
    probe = LoaderJob(mode, tuple(slots), 0, kept, tuple(channels))
    r = job_ranges(probe, lay)
    extent = int((r.start + r.length).max()) if len(r) else 0
    extent = max(extent, (slots[-1] + 1) * lay.stride(probe.record_bytes(lay)))
    if mode is RecordLayout.CHANNEL_PAGES:     # the image holds whole pages
        extent = max(extent, (slots[-1] // lay.page_tokens + 1) * d * lay.channel_chunk_bytes)
    extent = -(-extent // lay.burst_bytes) * lay.burst_bytes + lay.burst_bytes
    space = min(1 << lp.addr_width, window or max(1 << 20, 2 * extent))
    if base is None:
        base = rng.randrange(0, max(1, (space - extent) // lay.burst_bytes)) * lay.burst_bytes
    job = LoaderJob(mode, tuple(slots), base, kept if mode is RecordLayout.MASKED_RECORD
                    else 0, tuple(channels) if mode is RecordLayout.CHANNEL_PAGES else ())
    job.check(lay, lp)
    g = torch.Generator().manual_seed(rng.randrange(1 << 62))
    img = _region_image(job, cfg, g, rng, masks)
    reqs = job_requests(job, lay, lp)
    nbytes = request_bytes(reqs, lp.beat_bytes)
    if nbytes != burst_bytes(job_ranges(job, lay), lay.burst_bytes):
        raise AssertionError("golden model disagrees with itself on the byte count")
    vecs, msks = packed_output(job, img, lay)
    errs = [False] * len(slots)
    error_beats: dict[int, int] = {}
    if error is not None and reqs:
        beats = [q.addr + i * lp.beat_bytes for q in reqs for i in range(q.beats)]
        e = rng.choice(beats)
        error_beats[e] = error
        errs = error_slots(job, lay, lp, {e})
    outputs = [(s, vector_bits(vecs[i], lay.elem_bytes), _mask_bits(msks[i]), int(errs[i]))
               for i, s in enumerate(slots)]
    del geo
    return Case(name=name, job=job, memory={base: img},
                requests=[(q.addr, q.beats) for q in reqs], outputs=outputs,
                bytes_read=nbytes, error_beats=error_beats, knobs=dict(knobs or {}))


def packed_4k_case(cfg: Config, rng: random.Random, *, name: str, slot_kind: str = "all",
                   knobs: dict[str, Any] | None = None) -> Case:
    """A masked-record job on a packed layout (``align_bytes < burst_bytes``, records back to
    back as the evicting HiKV stores them) whose records cross burst boundaries mid-record and
    one of which crosses a 4 KiB line mid-record (the AXI request is cut there).

    The slots are ``slot_kind`` ones plus the crossing slot. Raises :class:`ParamError` if the
    layout is not packed. For contiguous slots (``"all"``) the byte count is also checked
    against the closed form of one contiguous run: every burst of ``[first record's start,
    last record's end)``.
    """
    lay, lp = cfg.layout, cfg.loader
    burst = lay.burst_bytes
    if lay.align_bytes >= burst:
        raise ParamError(f"packed_4k_case needs align_bytes < burst_bytes, not "
                         f"{lay.align_bytes} >= {burst}")
    for _ in range(10_000):
        kept = rng.randint(1, lay.head_dim)
        rec = lay.record_bytes(kept)
        stride = lay.stride(rec)
        if stride % burst == 0 or rec <= 1:
            continue
        s = rng.randrange(1, lp.max_tokens)
        # burst-aligned base with base + s*stride < 4096 < base + s*stride + rec
        lo, hi = AXI_BOUNDARY - rec + 1 - s * stride, AXI_BOUNDARY - 1 - s * stride
        b = max(0, -(-lo // burst) * burst)
        if b > hi:
            continue
        extent = lp.max_tokens * stride + burst
        lines = max(1, ((1 << lp.addr_width) - extent - b) // AXI_BOUNDARY)
        base = b + AXI_BOUNDARY * rng.randrange(min(lines, 16))
        slots = sorted(set(_slots(rng, lp.max_tokens, slot_kind)) | {s})
        case = make_case(cfg, rng, name=name, mode=RecordLayout.MASKED_RECORD, kept=kept,
                         base=base, knobs=knobs, slots=slots)
        a = base + s * stride
        if not (a % AXI_BOUNDARY and a // AXI_BOUNDARY != (a + rec - 1) // AXI_BOUNDARY):
            raise AssertionError(f"{name}: record {s} at {a:#x} does not cross 4 KiB")
        starts = [base + t * stride for t in slots]
        if not any(x % burst and x % burst + rec > burst for x in starts):
            raise AssertionError(f"{name}: no record crosses a burst boundary mid-record")
        if slot_kind == "all":
            first, end = starts[0], starts[-1] + rec
            run = (-(-end // burst) - first // burst) * burst
            if run != case.bytes_read:
                raise AssertionError(f"{name}: {case.bytes_read} B read, the contiguous run "
                                     f"of its records holds {run} B")
        return case
    raise ParamError(f"no masked record of layout {lay} can cross a 4 KiB line mid-record")


def _group_channels(rng: random.Random, d: int, group: int) -> list[int]:
    """A channel-group selection: whole groups of ``group`` channels."""
    groups = d // group
    chosen = rng.sample(range(groups), rng.randint(1, groups))
    return sorted(c for gi in chosen for c in range(gi * group, (gi + 1) * group))


def _knobs(rng: random.Random, quiet: bool = False) -> dict[str, Any]:
    if quiet:
        return {"memory": "pipe", "ar_ready": 1.0, "r_gap": 0.0, "latency": [4, 4],
                "out_ready": 1.0, "tok_valid": 1.0}
    return {
        "memory": rng.choice(["axiram", "pipe"]),
        "ar_ready": rng.choice([1.0, 0.7, 0.3]),
        "r_gap": rng.choice([0.0, 0.2, 0.6]),
        "latency": rng.choice([[0, 0], [1, 8], [10, 30]]),
        "out_ready": rng.choice([1.0, 0.8, 0.3]),
        "tok_valid": rng.choice([1.0, 0.7, 0.2]),
    }


def make_cases(cfg: Config, seed: int, jobs: int) -> list[Case]:
    """The corner cases, then random jobs up to ``jobs`` in all (at least the corners).

    Corners: one token and every token (max_tokens) for each layout; masks all zero, all one
    and random; channel masks all zero, all one, random and in groups; a region across a 4 KiB
    boundary; SLVERR and DECERR injected.
    """
    rng = random.Random(seed)
    lay, lp = cfg.layout, cfg.loader
    d = lay.head_dim
    D, M, P = RecordLayout.DENSE, RecordLayout.MASKED_RECORD, RecordLayout.CHANNEL_PAGES
    group = cfg.policy.k_rule.group if d % cfg.policy.k_rule.group == 0 else 1
    k = _knobs
    corners: list[tuple[str, dict[str, Any]]] = [
        ("dense-one", dict(mode=D, slot_kind="one")),
        ("dense-max", dict(mode=D, slot_kind="all")),
        ("masked-ones", dict(mode=M, masks="ones")),
        ("masked-zeros", dict(mode=M, masks="zeros")),
        ("masked-random", dict(mode=M)),
        ("masked-one", dict(mode=M, slot_kind="one")),
        ("masked-max", dict(mode=M, slot_kind="all")),
        ("pages-none", dict(mode=P, channels=[])),
        ("pages-all", dict(mode=P, channels=list(range(d)))),
        ("pages-random", dict(mode=P)),
        ("pages-groups", dict(mode=P, channels=_group_channels(rng, d, group))),
        ("pages-one", dict(mode=P, slot_kind="one")),
        ("pages-max", dict(mode=P, slot_kind="all")),
        ("dense-4k", dict(mode=D, base=4096 - 2 * lay.burst_bytes * rng.randint(1, 4))),
        ("masked-slverr", dict(mode=M, error=SLVERR)),
        ("dense-decerr", dict(mode=D, error=DECERR)),
        ("pages-slverr", dict(mode=P, channels=list(range(d)), error=SLVERR)),
    ]
    # a path not built (LoaderParams.channel_pages / masked_records): no job of its layout;
    # instead a dense job configured as that layout, which the RTL must read as dense rows
    # and flag with status.cfg_error (knob ``unbuilt_mode``: the layout driven on cfg.mode)
    unbuilt = [m for m in (M, P) if not lp.builds(m)]
    corners = [(n, kw) for n, kw in corners if kw["mode"] not in unbuilt]
    corners += [(f"dense-as-{m.value}", dict(mode=D, knobs=dict(k(rng), unbuilt_mode=m.value)))
                for m in unbuilt]
    modes = [m for m in (D, M, P) if m not in unbuilt]
    cases = []
    for name, kw in corners:
        kw.setdefault("knobs", k(rng))
        if kw.get("error") == DECERR:
            kw["knobs"]["memory"] = "pipe"      # the RAM model can only answer SLVERR
        cases.append(make_case(cfg, rng, name=name, **kw))
    if lay.align_bytes < lay.burst_bytes:       # packed records: mid-record bursts and 4 KiB
        for kind in ("all", "runs", "sparse"):
            cases.append(packed_4k_case(cfg, rng, name=f"packed-4k-{kind}", slot_kind=kind,
                                        knobs=k(rng)))
    while len(cases) < jobs:
        mode = rng.choice(modes)
        kw = dict(mode=mode, slot_kind=rng.choice(["runs", "runs", "sparse", "one"]),
                  knobs=k(rng))
        if mode is P and rng.random() < 0.3:
            kw["channels"] = _group_channels(rng, d, group)
        if rng.random() < 0.1:
            kw["error"] = rng.choice([SLVERR, DECERR])
            kw["knobs"]["memory"] = "pipe"
        cases.append(make_case(cfg, rng, name=f"random-{len(cases)}", **kw))
    for c in cases:
        if c.job.base + max(len(b) for b in c.memory.values()) > 1 << lp.addr_width:
            raise ParamError(f"case {c.name} does not fit the address space")
    return cases


def make_timing_cases(cfg: Config, seed: int, latencies: tuple[int, ...] = (1, 8, 32),
                      extra: int = 6, limits: tuple[int, ...] | None = None) -> list[Case]:
    """Jobs for the timing contract, without any backpressure: every layout with every token,
    with runs and gaps, and with sparse tokens (slots below ``min(max_tokens,
    TIMING_MAX_SLOTS)``), each at every read latency and every outstanding limit (powers of two
    and the maximum when there are more than four, or ``limits``); then ``extra`` random jobs
    (random layout, kept count, channels, latency and limit), and channel pages without any
    channel."""
    rng = random.Random(seed)
    d = cfg.layout.head_dim
    lp = cfg.loader
    D, M, P = RecordLayout.DENSE, RecordLayout.MASKED_RECORD, RecordLayout.CHANNEL_PAGES
    cases = []
    slots = min(lp.max_tokens, TIMING_MAX_SLOTS)
    limits_given = limits
    limits = list(range(1, lp.max_outstanding + 1))
    if lp.max_outstanding > 4:                 # powers of two and the maximum
        limits = sorted({1 << i for i in range(lp.max_outstanding.bit_length())
                         if 1 << i <= lp.max_outstanding} | {lp.max_outstanding})
    if limits_given is not None:
        bad = [x for x in limits_given if not 1 <= x <= lp.max_outstanding]
        if bad:
            raise ParamError(f"timing limits {bad} out of range: allowed [1, "
                             f"{lp.max_outstanding}] (max_outstanding)")
        limits = sorted(set(limits_given))

    def add(case: Case, lat: int, lim: int) -> None:
        cases.append(dataclasses.replace(case, name=f"{case.name}-L{lat}-O{lim}",
                                         knobs=dict(case.knobs, latency=[lat, lat],
                                                    outstanding=lim)))

    layouts = [(D, {}), (M, {"kept": d * 3 // 4}), (P, {"channels": list(range(0, d, 2))})]
    # only the layouts the loader is built for (LoaderParams.masked_records / channel_pages)
    layouts = [(m, kw) for m, kw in layouts if lp.builds(m)]
    for mode, kw in layouts:
        for kind in ("all", "runs", "sparse"):
            case = make_case(cfg, rng, name=f"timing-{mode.value}-{kind}", mode=mode,
                             slot_kind=kind, knobs=_knobs(rng, quiet=True), max_slots=slots,
                             **kw)
            for lat in latencies:
                for lim in limits:
                    add(case, lat, lim)
    for i in range(extra):
        mode = [m for m, _ in layouts][i % len(layouts)]
        case = make_case(cfg, rng, name=f"timing-random{i}-{mode.value}", mode=mode,
                         slot_kind=rng.choice(["runs", "sparse", "one"]),
                         knobs=_knobs(rng, quiet=True), max_slots=slots)
        add(case, rng.randint(1, 2 * max(latencies)), rng.randint(1, lp.max_outstanding))
    if cfg.layout.align_bytes < cfg.layout.burst_bytes:     # packed records across 4 KiB
        for kind in ("all", "runs"):
            case = packed_4k_case(cfg, rng, name=f"timing-packed-4k-{kind}", slot_kind=kind,
                                  knobs=_knobs(rng, quiet=True))
            add(case, latencies[-1], lp.max_outstanding)
    if lp.channel_pages:
        case = make_case(cfg, rng, name="timing-pages-none", mode=P, channels=[],
                         knobs=_knobs(rng, quiet=True), max_slots=slots)
        add(case, latencies[0], lp.max_outstanding)
    return cases


def captured_heads(capture: dict[str, Any]) -> list[tuple[str, torch.Tensor, torch.Tensor,
                                                          torch.Tensor]]:
    """Real attention heads from a ``hikv accuracy capture`` file (``torch.load``-ed): per
    (layer, query head), its decode queries ``q`` [S, d], and its KV head's ``k``, ``v`` [T, d]
    (T = prefix + S; decode query ``s`` sees keys ``0 .. prefix + s``)."""
    out = []
    for layer, t in sorted(capture["layers"].items()):
        q, k, v = t["q"], t["k"], t["v"]
        prefix = int(capture["meta"]["prefix"])
        g = q.shape[0] // k.shape[0]
        for h in range(q.shape[0]):
            out.append((f"layer {layer} head {h}", q[h, prefix:], k[h // g], v[h // g]))
    return out


def _real_head(heads: list[Any], rng: random.Random, n_max: int
               ) -> tuple[str, int, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decode step of a captured head: the query and the last ``n`` (<= ``n_max``) keys
    and values it attends, in fp16."""
    name, q, k, v = heads[rng.randrange(len(heads))]
    steps = q.shape[0]
    s = rng.randrange(steps)
    seen = k.shape[0] - steps + s + 1
    n = min(n_max, seen)
    lo = seen - n
    return (f"{name} step {s} tokens {lo}..{seen - 1}", n, q[s].to(torch.float16),
            k[lo:seen].to(torch.float16), v[lo:seen].to(torch.float16))


def make_chain_cases(cfg: Config, seed: int, jobs: int,
                     capture: dict[str, Any] | None = None) -> list[Case]:
    """Jobs for the sorter -> loader chain, from one attention head each: a real head of
    ``capture`` (a ``hikv accuracy capture`` file: a random layer, query head and decode step,
    its most recent ``max_n`` tokens at most) or, without one, a seeded random head.

    Per job: a query ``q`` and ``n`` cached keys ``K`` and values ``V`` (fp16); Stage I
    keys are ``float_to_key(softmax(q K^T / sqrt(d)))``; the golden Stage I is
    ``stage1_topk(keys, 0..n-1, k)``. The loader then reads, for the selected tokens, one of:
    V as masked records pruned at write time by the golden Stage II (top ``v_rule.keep`` of
    ``|V|`` per token, or ``3d/4`` when V is kept whole); K as dense rows; K as channel pages
    with the query-aware channels (golden Stage II: top ``d/2`` of ``|q|``). Expected: the
    golden packed output of those tokens (``packed_output``), requests and byte count.
    """
    from hikv.model.refs.keys import float_to_key
    from hikv.model.refs.sorter import stage1_topk, topk_indices, topk_mask

    rng = random.Random(seed)
    lay, lp, sp = cfg.layout, cfg.loader, cfg.sorter
    d, fmt, w = lay.head_dim, cfg.key_format, sp.key_width
    heads = captured_heads(capture) if capture is not None else None
    if heads:
        got = heads[0][1].shape[-1]
        if got != d:
            raise ParamError(f"capture head_dim = {got} but {cfg.name}.layout.head_dim = {d}; "
                             "use chain_variant(cfg, head_dim) (hikv rtl --capture does)")
    r_v = cfg.policy.v_rule.keep if cfg.policy.v_rule.keep else d * 3 // 4
    kinds = ["v-masked", "k-dense"] + (["k-channels"] if lp.channel_pages else [])
    cases = []
    for i in range(jobs):
        g = torch.Generator().manual_seed(rng.randrange(1 << 62))
        n = sp.max_n if i < len(kinds) else rng.randint(1, sp.max_n)
        source = "seeded random head"
        if heads:
            source, n, q, kk, vv = _real_head(heads, rng, n)
        k = rng.randint(1, min(sp.max_k, n))
        if not heads:
            q = torch.randn(d, generator=g).to(torch.float16)
            kk = torch.randn(n, d, generator=g).to(torch.float16)
            vv = torch.randn(n, d, generator=g).to(torch.float16)
        probs = torch.softmax(kk.float() @ q.float() / d ** 0.5, -1).to(torch.float16)
        keys = [int(x) for x in float_to_key(probs, fmt, w).tolist()]
        slots = tuple(idx for _, idx in stage1_topk(keys, list(range(n)), k))
        kind = kinds[i % len(kinds)]
        if kind == "v-masked":
            mask = topk_mask(float_to_key(vv.abs(), fmt, w), r_v)
            img, mode, kept, ch = masked_image(vv, mask, lay), RecordLayout.MASKED_RECORD, r_v, ()
        elif kind == "k-dense":
            img, mode, kept, ch = dense_image(kk, lay), RecordLayout.DENSE, 0, ()
        else:
            ch = tuple(int(c) for c in topk_indices(float_to_key(q.abs(), fmt, w), d // 2))
            img, mode, kept = channel_page_image(kk, lay), RecordLayout.CHANNEL_PAGES, 0
        space = min(1 << lp.addr_width, max(1 << 20, 2 * len(img)))
        base = rng.randrange(0, max(1, (space - len(img) - lay.burst_bytes)
                                    // lay.burst_bytes)) * lay.burst_bytes
        job = LoaderJob(mode, slots, base, kept, ch)
        job.check(lay, lp)
        reqs = job_requests(job, lay, lp)
        vecs, msks = packed_output(job, img, lay)
        outputs = [(s, vector_bits(vecs[j], lay.elem_bytes), _mask_bits(msks[j]), 0)
                   for j, s in enumerate(slots)]
        knobs = _knobs(rng)
        knobs["score_valid"] = rng.choice([1.0, 0.5])
        cases.append(Case(name=f"chain-{kind}-{i} ({source})", job=job, memory={base: img},
                          requests=[(q_.addr, q_.beats) for q_ in reqs], outputs=outputs,
                          bytes_read=request_bytes(reqs, lp.beat_bytes), knobs=knobs,
                          scores=keys, k=k))
    return cases


# --------------------------------------------------------------------------- entries
@dataclass(frozen=True)
class Entry:
    """What the address side tells the data side about one record or page (hw/loader.py)."""

    page: bool
    token: int
    fa: int
    la: int
    off: int
    last: bool
    nodata: bool
    bitmap: int


def expected_entries(job: LoaderJob, geo: LoaderGeometry) -> list[Entry]:
    """Entries for ``job`` as defined in hw/loader.py: per record its first and last beat
    and first byte lane; per page its first beat,
    the last beat of its last (channel, token group) block, and its retained-token bitmap."""
    lay = geo.layout
    bb, burst = geo.beat_bytes, lay.burst_bytes
    out: list[Entry] = []
    if job.mode is not RecordLayout.CHANNEL_PAGES:
        rec = job.record_bytes(lay)
        stride = lay.stride(rec)
        starts = [job.base + s * stride for s in job.slots]
        for i, (s, a) in enumerate(zip(job.slots, starts, strict=True)):
            la = (a + rec - 1) // bb
            out.append(Entry(False, s, a // bb, la, a % bb, i == len(starts) - 1, False, 0))
        return out
    pt = lay.page_tokens
    pages: dict[int, int] = {}
    for s in job.slots:
        pages[s // pt] = pages.get(s // pt, 0) | 1 << (s % pt)
    order = sorted(pages)
    for i, p in enumerate(order):
        pb = job.base + p * geo.page_bytes
        bitmap = pages[p]
        la = 0
        if job.channels:
            groups = [gi for gi in range(geo.groups)
                      if (bitmap >> (gi * geo.group_tokens)) & ((1 << geo.group_tokens) - 1)]
            last_blk = (pb + job.channels[-1] * lay.channel_chunk_bytes
                        + groups[-1] * geo.group_bytes) // burst
            la = (last_blk + 1) * burst // bb - 1
        out.append(Entry(True, p, pb // bb, la, 0, i == len(order) - 1, not job.channels,
                         bitmap))
    return out
