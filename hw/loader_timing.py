"""The two-level KV loader's geometry and timing contract (standard library only).

:class:`LoaderGeometry` derives every structural constant of the RTL (``hw/loader.py``) from a
:class:`~hikv.params.KVLayout` and :class:`~hikv.params.LoaderParams`: the RTL, its testbench
and the cost model (``hikv.sim``) all read them from here, so none is written twice.

The timing contract (docs/loader.md, "Timing contract"), asserted against the RTL in cocotb:

* :func:`job_timing`: cycle-level model of one job with an ideal producer and consumer and a
  fixed-latency pipelined memory; the regression requires the measured cycles to equal it.
* :func:`steady_bytes_per_cycle`: ``beat_bytes * min(1, outstanding * beats / (latency +
  beats))``, the memory-side bandwidth of back-to-back requests.
* :func:`estimate_cycles`: a closed form from byte and request counts, for cost sweeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hikv.params import KVLayout, LoaderParams, ParamError, clog2

__all__ = ["AXI_BOUNDARY", "COUNTER_WIDTH", "LoaderGeometry", "JobTiming", "job_timing",
           "steady_bytes_per_cycle", "estimate_cycles"]

#: AXI4 bursts never cross this boundary (bytes).
AXI_BOUNDARY = 4096
#: Width of the loader's statistics counters (bits); they wrap at 2**32.
COUNTER_WIDTH = 32


def _pow2_ceil(n: int) -> int:
    return 1 << max(1, (n - 1).bit_length())


@dataclass(frozen=True)
class LoaderGeometry:
    """Structural constants of the loader RTL for one layout and loader configuration.

    Raises :class:`~hikv.params.ParamError` for geometries the RTL does not support: a beat
    narrower than one element, a beat wider than a burst, a longest request or a channel page
    that is not a whole number of bursts, or a region of ``max_tokens`` records that does not
    fit the address space.
    """

    layout: KVLayout
    loader: LoaderParams

    def __post_init__(self) -> None:
        lay, lp = self.layout, self.loader
        if lp.beat_bytes < lay.elem_bytes:
            raise ParamError(f"loader beat of {lp.beat_bytes} B (data_width = {lp.data_width}) "
                             f"is narrower than one element (elem_bytes = {lay.elem_bytes})")
        if lp.beat_bytes > lay.burst_bytes:
            raise ParamError(f"loader beat of {lp.beat_bytes} B (data_width = {lp.data_width}) "
                             f"is wider than burst_bytes = {lay.burst_bytes}")
        if self.max_request_bytes % lay.burst_bytes:
            raise ParamError(f"a request of max_burst_beats = {lp.max_burst_beats} beats of "
                             f"{lp.beat_bytes} B is not a whole number of bursts "
                             f"(burst_bytes = {lay.burst_bytes}): the loader issues whole "
                             "bursts")
        if lp.channel_pages and self.page_bytes % lay.burst_bytes:
            raise ParamError(f"a channel page of {self.page_bytes} B (head_dim * page_tokens * "
                             f"elem_bytes) must be a multiple of burst_bytes = "
                             f"{lay.burst_bytes}")
        pages = -(-lp.max_tokens // lay.page_tokens) if lp.channel_pages else 0
        region = max(lp.max_tokens * lay.stride(self.record_bytes_max),
                     pages * self.page_bytes)
        if region > 1 << lp.addr_width:
            raise ParamError(f"a region of max_tokens = {lp.max_tokens} records needs "
                             f"{region} B, more than the {lp.addr_width}-bit address space")

    # ------------------------------------------------------------------ bus
    @property
    def beat_bytes(self) -> int:
        return self.loader.beat_bytes

    @property
    def max_request_bytes(self) -> int:
        """Longest AXI request: ``max_burst_beats`` beats."""
        return self.loader.max_burst_beats * self.loader.beat_bytes

    # ------------------------------------------------------------------ records
    @property
    def masked_records(self) -> bool:
        """Whether the masked-record path (mask, expander) is built
        (``LoaderParams.masked_records``)."""
        return self.loader.masked_records

    @property
    def record_bytes_max(self) -> int:
        """Largest record: a masked record keeping every element (mask + dense row), or a
        dense row on a loader built without the masked-record path."""
        return (self.layout.mask_bytes if self.masked_records else 0) + self.layout.row_bytes

    @property
    def record_words(self) -> int:
        """Beats one record can span (start lane offset included)."""
        bb = self.beat_bytes
        max_off = bb - self.layout.align_bytes if self.layout.align_bytes < bb else 0
        return -(-(max_off + self.record_bytes_max) // bb)

    @property
    def lanes(self) -> int:
        """Elements the masked-record expander produces per cycle: ``gcd(d, beat / elem)``."""
        return math.gcd(self.layout.head_dim, self.beat_bytes // self.layout.elem_bytes)

    @property
    def expand_cycles(self) -> int:
        """Cycles to expand one masked record into a dense vector."""
        return self.layout.head_dim // self.lanes

    # ------------------------------------------------------------------ channel pages
    @property
    def page_bytes(self) -> int:
        return self.layout.head_dim * self.layout.channel_chunk_bytes

    @property
    def page_words(self) -> int:
        return self.page_bytes // self.beat_bytes

    @property
    def group_bytes(self) -> int:
        """Bytes of a chunk read as one unit: the chunk, or one burst of a longer chunk."""
        return min(self.layout.channel_chunk_bytes, self.layout.burst_bytes)

    @property
    def groups(self) -> int:
        """Token groups per chunk (chunks longer than a burst are read per burst)."""
        return self.layout.channel_chunk_bytes // self.group_bytes

    @property
    def group_tokens(self) -> int:
        return self.group_bytes // self.layout.elem_bytes

    # ------------------------------------------------------------------ buffers
    @property
    def channel_pages(self) -> bool:
        """Whether the channel-page (transposed) read path is built
        (``LoaderParams.channel_pages``)."""
        return self.loader.channel_pages

    @property
    def buffer_words(self) -> int:
        """Beat-wide words of the record buffer, or of the shared record / page buffer when
        the channel-page path is built (a power of two)."""
        pages = self.page_words if self.channel_pages else 0
        return _pow2_ceil(max(self.record_words, pages))

    @property
    def entry_fifo_depth(self) -> int:
        """Depth of the FIFO of records / pages between address and data side.

        Enough for the records of ``max_outstanding + 1`` full requests at the smallest record
        stride (or page), plus two, rounded up to a power of two: the address side can then
        keep every allowed request in flight, and can never wait on the FIFO while the data
        side waits for a request that the address side has not issued yet (that needs
        ``ceil(request / unit) + 2``). The smallest record is a mask alone (a masked record
        keeping no element) on a loader built with the masked-record path, else a row.
        """
        unit = self.layout.stride(self.layout.mask_bytes if self.masked_records
                                  else self.layout.row_bytes)
        if self.channel_pages:
            unit = min(unit, self.page_bytes)
        per_request = -(-self.max_request_bytes // unit) + 1
        return _pow2_ceil((self.loader.max_outstanding + 1) * per_request + 2)

    @property
    def inflight_depth(self) -> int:
        """Slots of the in-flight request FIFO (``max_outstanding`` used, a power of two)."""
        return _pow2_ceil(self.loader.max_outstanding)

    # ------------------------------------------------------------------ widths
    @property
    def index_width(self) -> int:
        return self.loader.index_width

    @property
    def beat_shift(self) -> int:
        return clog2(self.beat_bytes) if self.beat_bytes > 1 else 0

    @property
    def burst_shift(self) -> int:
        return clog2(self.layout.burst_bytes)


# --------------------------------------------------------------------------- timing
#: Cycles from the cfg handshake (cycle 0) to the first token the address side takes.
FIRST_TOKEN_CYCLE = 2
#: Cycles from the last output handshake (or the last R beat) until status.done shows.
DONE_CYCLES = 2


@dataclass(frozen=True)
class JobTiming:
    """Predicted timing of one loader job with an ideal consumer and producer.

    ``cycles`` counts from the cycle the cfg handshake happens to the first cycle in which
    ``status.busy`` is low and ``status.done`` high; ``requests`` are the AXI requests
    ``(address, beats)``; ``issue`` the cycle of each AR handshake; ``beats`` the total beats.
    """

    cycles: int
    requests: tuple[tuple[int, int], ...]
    issue: tuple[int, ...]
    beats: int
    tokens: int

    @property
    def bytes_per_cycle(self) -> float:
        return 0.0 if not self.cycles else self.beats / self.cycles

    @property
    def first_issue(self) -> int | None:
        return self.issue[0] if self.issue else None


@dataclass
class _Items:
    """What the data side works through: one item per row / record or per page, in order."""

    fa: list[int]                 # first beat the item needs (page: its first beat)
    la: list[int | None]          # last beat the item needs (None: nothing to read)
    drain: list[int]              # page: retained tokens leaving one per cycle; record: 0


def _steps(geo: LoaderGeometry, mode: str, slots: list[int], base: int, kept: int,
           channels: list[int]) -> tuple[list[tuple[str, Any]], _Items]:
    """The address side's cycle-by-cycle steps, and the data side's items.

    Steps: ``("rng", (b0, b1))`` (a token of a row / record, or a page's block), ``("tok",
    None)`` (a page token, or the cycle that sees the next page's first token), ``("entry",
    None)`` (a page closes) and ``("end", None)``. A row / record step also pushes its entry.
    """
    lay = geo.layout
    bb, burst = geo.beat_bytes, lay.burst_bytes
    steps: list[tuple[str, Any]] = []
    items = _Items([], [], [])
    if mode != "channel_pages":
        rec = lay.row_bytes if mode == "dense" else lay.record_bytes(kept)
        stride = lay.stride(rec)
        for s in slots:
            a = base + s * stride
            steps.append(("rng", (a // burst, (a + rec - 1) // burst)))
            items.fa.append(a // bb)
            items.la.append((a + rec - 1) // bb)
            items.drain.append(0)
        steps.append(("end", None))
        return steps, items
    pt = lay.page_tokens
    pages: list[tuple[int, list[int]]] = []
    for s in slots:
        if pages and pages[-1][0] == s // pt:
            pages[-1][1].append(s % pt)
        else:
            pages.append((s // pt, [s % pt]))
    chans = sorted(channels)
    for i, (p, offs) in enumerate(pages):
        steps += [("tok", None)] * len(offs)
        if i + 1 < len(pages):
            steps.append(("tok", None))        # the next page's first token is seen, not taken
        steps.append(("entry", None))
        pb = base + p * geo.page_bytes
        groups = sorted({o * lay.elem_bytes // geo.group_bytes for o in offs})
        last = None
        for c in chans:
            for gi in groups:
                blk = (pb + c * lay.channel_chunk_bytes + gi * geo.group_bytes) // burst
                steps.append(("rng", (blk, blk)))
                last = (blk + 1) * burst // bb - 1
        items.fa.append(pb // bb)
        items.la.append(last)
        items.drain.append(len(offs))
    steps.append(("end", None))
    return steps, items


def job_timing(geo: LoaderGeometry, *, mode: str, slots: list[int], base: int = 0,
               kept: int = 0, channels: list[int] = (), latency: int = 1,
               outstanding: int | None = None) -> JobTiming:
    """Cycle-level timing model of one job (see docs/loader.md, "Timing contract").

    Assumes tokens offered every cycle, the output always ready, ARREADY always high, and a
    memory that returns the first beat of every request ``latency`` cycles (>= 1) after its AR
    handshake and then one beat per cycle while RREADY is high. It replays, in order:

    * the address side, one step per cycle (a token, a cycle seeing the next page, a page
      close, a page block); a step waits while the entry FIFO is full, and a range step while
      the two-entry register slice to the coalescer is full;
    * the slice: a range reaches the coalescer the cycle after it was written (and after the
      one before it); one that does not continue the current run waits there until the run's
      last request is issued;
    * the coalescer: a request is known the cycle after the range that makes it full, or, for
      the tail of a run, the cycle the next range (or the job's end) shows up;
    * AR issue: one per cycle, at most ``outstanding`` in flight (a slot frees the cycle after
      the request's last beat);
    * the data side, beat by beat: beats before the current item are dropped, one per cycle; a
      record's last beat waits until the expander took the previous record
      (``expand_cycles`` for masked records, 1 for rows), and is taken again for the next
      record when that one starts in it or is not known yet; after a page's last beat its
      retained tokens leave one per cycle while R waits; an item enters the data side's
      register the cycle its predecessor leaves (or the cycle after its entry was pushed).
    """
    if latency < 1:
        raise ParamError(f"latency = {latency} is out of range: allowed >= 1 (cycles from "
                         "the AR handshake to the first R beat)")
    lp = geo.loader
    if mode == "channel_pages" and not geo.channel_pages:
        raise ParamError("mode = 'channel_pages' needs a loader built with "
                         "LoaderParams.channel_pages = True")
    if mode == "masked" and not geo.masked_records:
        raise ParamError("mode = 'masked' needs a loader built with "
                         "LoaderParams.masked_records = True")
    o = lp.max_outstanding if outstanding is None else outstanding
    if not 1 <= o <= lp.max_outstanding:
        raise ParamError(f"outstanding = {o} is out of range: allowed [1, "
                         f"{lp.max_outstanding}]")
    bb, burst = geo.beat_bytes, geo.layout.burst_bytes
    steps, items = _steps(geo, mode, list(slots), base, kept, list(channels))
    n_items = len(items.fa)
    hold = geo.expand_cycles if mode == "masked" else 1
    pages = mode == "channel_pages"
    depth = geo.entry_fifo_depth

    reqs: list[tuple[int, int]] = []
    known: list[int] = []
    issue: list[int] = []
    finish: list[int] = []
    push: list[int] = []            # item -> cycle its entry was pushed
    retire: dict[int, int] = {}     # item -> cycle it left the data side's register
    ds = {"t_prev": -1, "free_at": 0, "rec_end": -(10 ** 9), "out": 0, "cur": 0,
          "valid_at": None}

    def pop(e: int) -> int:
        """Cycle item ``e`` enters the data side's register."""
        return push[e] + 1 if e == 0 else max(push[e] + 1, retire[e - 1])

    def beats_of(i: int) -> None:
        addr, beats = reqs[i]
        for j in range(beats):
            beat = addr // bb + j
            t = max(ds["t_prev"] + 1, ds["free_at"], issue[i] + latency if j == 0 else 0)
            while True:
                e = ds["cur"]
                if e >= n_items:                       # after the last item: dropped
                    break
                t = max(t, pop(e) + 1)
                if beat < items.fa[e] or (items.la[e] is not None and beat < items.la[e]):
                    break                              # padding before it, or one of its beats
                if pages:                              # the page's last beat
                    n = items.drain[e]
                    retire[e] = t + n
                    ds["out"] = t + n + 1
                    ds["cur"] = e + 1
                    ds["free_at"] = t + n + 1
                    break
                t = max(t, ds["rec_end"] + hold)       # the expander takes the record
                ds["rec_end"] = t
                ds["out"] = t + hold + 1
                retire[e] = t
                ds["cur"] = e + 1
                if e + 1 == n_items:
                    break
                seen = push[e + 1] <= t - 1
                if seen and items.fa[e + 1] != beat:
                    break
                t += 1                                 # kept for the next record
            ds["t_prev"] = t
        finish.append(ds["t_prev"])

    def beats_upto(i: int) -> None:
        while len(finish) <= i:
            beats_of(len(finish))

    def issue_upto(i: int) -> None:
        while len(issue) <= i:
            k = len(issue)
            a = max(known[k], issue[-1] + 1 if issue else 0)
            if k >= o:
                beats_upto(k - o)
                a = max(a, finish[k - o] + 1)
            issue.append(a)

    def retired(e: int) -> int:
        while e not in retire and len(finish) < len(reqs):
            issue_upto(len(finish))
            beats_of(len(finish))
        return retire.get(e, -1)

    max_req = geo.max_request_bytes

    def cap(a: int) -> int:
        return min(max_req, AXI_BOUNDARY - a % AXI_BOUNDARY)

    addr = run_end = 0
    have = False
    t = FIRST_TOKEN_CYCLE - 1
    tcs = [-2, -1]          # cycles the coalescer took the ranges out of the register slice
    for kind, arg in steps:
        t += 1
        pushes = kind == "entry" or (kind == "rng" and not pages)
        if pushes and len(push) >= depth:   # the entry FIFO is full until an item leaves
            j = len(push) - depth
            t = max(t, (push[j] + 1 if j == 0 else max(push[j] + 1, retired(j - 1))) + 1)
        if kind in ("rng", "end"):
            # the slice (two entries) takes a range while it holds fewer than two at the
            # start of the cycle; the coalescer sees it the next cycle, after the one before
            t = max(t, tcs[-2] + 1)
            show = max(t + 1, tcs[-1] + 1)
        if kind == "end":
            while run_end > addr:
                n = min(cap(addr), run_end - addr)
                reqs.append((addr, n // bb))
                known.append(show + 1)
                addr += n
            tcs.append(show)
        elif kind == "rng":
            b0, b1 = arg
            tc = show
            if have and b0 * burst <= run_end:
                run_end = max(run_end, (b1 + 1) * burst)
            else:
                while run_end > addr:           # close the run: its tail is known now
                    n = min(cap(addr), run_end - addr)
                    reqs.append((addr, n // bb))
                    known.append(show)
                    addr += n
                if have:
                    # the range waits until the run's last request is issued: its tail, or
                    # an eager request (a run that ended at its cap) still waiting for AR
                    issue_upto(len(reqs) - 1)
                    tc = max(show, issue[-1] + 1)
                addr, run_end, have = b0 * burst, (b1 + 1) * burst, True
            while run_end - addr >= cap(addr):  # eager: known once the range is registered
                reqs.append((addr, cap(addr) // bb))
                known.append(tc + 1)
                addr += cap(addr)
            tcs.append(tc)
        if pushes:
            push.append(t)
    if reqs:
        issue_upto(len(reqs) - 1)
        beats_upto(len(reqs) - 1)
    out = ds["out"]
    if pages and not reqs:                      # no channel: pages drain without data
        end_prev = None
        for e in range(n_items):
            start = push[e] + 3 if end_prev is None else max(push[e] + 3, end_prev + 2)
            end_prev = start + items.drain[e] - 1
        out = (end_prev or 0) + 1
    cycles = max(out, finish[-1] if finish else 0) + DONE_CYCLES
    return JobTiming(cycles=cycles, requests=tuple(reqs), issue=tuple(issue),
                     beats=sum(b for _, b in reqs), tokens=len(slots))


def steady_bytes_per_cycle(geo: LoaderGeometry, *, latency: int, outstanding: int | None = None,
                           request_beats: int | None = None) -> float:
    """Memory-side steady-state bandwidth of back-to-back requests of ``request_beats`` beats
    (default ``max_burst_beats``): each of ``outstanding`` slots carries one request per
    ``latency + beats`` cycles, and R carries at most one beat per cycle::

        bytes/cycle = beat_bytes * min(1, outstanding * beats / (latency + beats))

    The data side adds its own bounds (see docs/loader.md): a masked record needs
    ``expand_cycles`` per record, a channel page one cycle per retained token after its data.
    """
    o = geo.loader.max_outstanding if outstanding is None else outstanding
    b = geo.loader.max_burst_beats if request_beats is None else request_beats
    if latency < 1 or o < 1 or b < 1:
        raise ParamError("latency, outstanding and request_beats must be >= 1")
    return geo.beat_bytes * min(1.0, o * b / (latency + b))


def estimate_cycles(geo: LoaderGeometry, *, beats: int, requests: int, latency: int,
                    outstanding: int | None = None, mode: str = "dense", records: int = 0,
                    page_tokens: int = 0) -> float:
    """Closed-form cycles of a job with ``requests`` AXI requests of ``beats`` beats in all,
    when the address side keeps up (tokens come every cycle and ranges are long enough that
    requests are known before a slot frees)::

        FIRST_TOKEN_CYCLE + 1                          first AR
        + max(latency + beats - 1 + page_tokens,       R: one beat per cycle, pages pause R
              ceil(requests / N) * (latency + beats / requests) - 1,   N slots, round trips
              (records - 1) * expand_cycles)           masked: the expander, one record each
        + hold + 1 + DONE_CYCLES                       last record out, status.done

    ``hold`` is 1 for rows, ``expand_cycles`` for masked records, 0 for pages (their drains are
    in ``page_tokens``, the retained tokens of all pages). :func:`job_timing` is the exact
    model; this form is for cost sweeps that know only byte and request counts.
    """
    o = geo.loader.max_outstanding if outstanding is None else outstanding
    if requests <= 0 or beats <= 0:
        return float(FIRST_TOKEN_CYCLE + DONE_CYCLES + (page_tokens + 1 if page_tokens else 0))
    hold = {"masked": geo.expand_cycles, "channel_pages": 0}.get(mode, 1)
    bus = latency + beats - 1 + page_tokens
    mem = -(-requests // o) * (latency + beats / requests) - 1
    exp = (records - 1) * geo.expand_cycles if mode == "masked" and records else 0
    return FIRST_TOKEN_CYCLE + 1 + max(bus, mem, exp) + hold + 1 + DONE_CYCLES
