"""A loader job must keep its addresses inside the ``addr_width``-bit address space: the RTL
computes ``base + slot * stride`` in ``addr_width`` bits and does not flag a wrap, so the host
side refuses such a job (``LoaderJob.check`` for a job's own slots, ``check_region`` for a
configuration sent before its slots are known)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from amaranth_sim import run_until, stream_get, stream_put

from hikv.hw.loader_addr import AddressGen
from hikv.hw.loader_ports import MODE_OF_LAYOUT
from hikv.hw.loader_timing import LoaderGeometry
from hikv.model.refs.loader import LoaderJob, check_region, job_requests, region_bytes
from hikv.params import LoaderParams, ParamError, RecordLayout
from hikv.presets import get_preset

D, M, P = RecordLayout.DENSE, RecordLayout.MASKED_RECORD, RecordLayout.CHANNEL_PAGES
CFG = get_preset("tiny")
LAY = CFG.layout
LP = dataclasses.replace(CFG.loader, channel_pages=True)
SPACE = 1 << LP.addr_width


def test_a_job_whose_last_record_crosses_the_top_is_refused_naming_fields_and_range():
    stride = LAY.stride(LAY.row_bytes)
    slot = 5
    top = SPACE - (slot * stride + LAY.row_bytes)          # the highest base that fits
    LoaderJob(D, (0, slot), base=top).check(LAY, LP)
    with pytest.raises(ParamError) as e:
        LoaderJob(D, (0, slot), base=top + LAY.burst_bytes).check(LAY, LP)
    msg = str(e.value)
    for part in ("LoaderJob.base", f"slot {slot}", "LoaderParams.addr_width", "wrap",
                 f"[0, {top:#x}]"):
        assert part in msg, (part, msg)


@pytest.mark.parametrize("mode,kept,channels", [(D, 0, ()), (M, 5, ()), (M, 0, ()),
                                                (P, 0, (0, 7)), (P, 0, (LAY.head_dim - 1,))])
def test_every_accepted_job_reads_inside_the_address_space(mode, kept, channels):
    """Near the top, the jobs ``check`` accepts issue no request past ``2**addr_width`` and the
    next burst up is refused."""
    rng = random.Random(7)
    for _ in range(40):
        slots = tuple(sorted(rng.sample(range(LP.max_tokens), rng.randint(1, 8))))
        job = LoaderJob(mode, slots, 0, kept, channels)
        reqs = job_requests(job, LAY, LP)
        extent = max(q.addr + q.beats * LP.beat_bytes for q in reqs)
        base = (SPACE - extent) // LAY.burst_bytes * LAY.burst_bytes
        job = dataclasses.replace(job, base=base)
        job.check(LAY, LP)
        for q in job_requests(job, LAY, LP):
            assert base <= q.addr and q.addr + q.beats * LP.beat_bytes <= SPACE, (job, q)
        over = dataclasses.replace(job, base=base + LAY.burst_bytes)
        if over.base + extent > SPACE:
            with pytest.raises(ParamError, match="address space"):
                over.check(LAY, LP)


@pytest.mark.parametrize("mode,kept", [(D, 0), (M, 0), (M, LAY.head_dim), (P, 0)])
def test_check_region_is_base_plus_max_tokens_records(mode, kept):
    extent = region_bytes(mode, LP.max_tokens, LAY, kept)
    top = (SPACE - extent) // LAY.burst_bytes * LAY.burst_bytes
    check_region(mode, top, LAY, LP, kept=kept)
    with pytest.raises(ParamError) as e:
        check_region(mode, top + LAY.burst_bytes, LAY, LP, kept=kept)
    msg = str(e.value)
    for part in ("LoaderJob.base", f"{LP.max_tokens} tokens", "LoaderParams.addr_width",
                 f"[0, {top:#x}]"):
        assert part in msg, (part, msg)
    # a job at that base with a low slot fits (its own check passes): check_region is the
    # condition for any slot the tokens port can carry
    LoaderJob(mode, (0,), top + LAY.burst_bytes, kept, (0,) if mode is P else ()).check(LAY, LP)


def test_region_bytes_by_layout():
    assert region_bytes(D, 3, LAY) == 3 * LAY.stride(LAY.row_bytes)
    assert region_bytes(M, 3, LAY, 4) == 3 * LAY.stride(LAY.record_bytes(4))
    pt = LAY.page_tokens
    assert region_bytes(P, pt + 1, LAY) == 2 * LAY.head_dim * LAY.channel_chunk_bytes
    assert region_bytes(D, 0, LAY) == 0


def test_check_region_rejects_bad_arguments():
    with pytest.raises(ParamError, match=r"tokens = .* allowed \[0, "):
        check_region(D, 0, LAY, LP, tokens=LP.max_tokens + 1)
    with pytest.raises(ParamError, match="burst_bytes"):
        check_region(D, 1, LAY, LP)
    with pytest.raises(ParamError, match="kept"):
        check_region(M, 0, LAY, LP, kept=LAY.head_dim + 1)
    with pytest.raises(ParamError, match="RecordLayout"):
        check_region("dense", 0, LAY, LP)
    small = LoaderParams(addr_width=12, data_width=LP.data_width, max_tokens=128,
                         max_burst_beats=LP.max_burst_beats, masked_records=True)
    assert region_bytes(M, small.max_tokens, LAY, LAY.head_dim) > 1 << 12
    with pytest.raises(ParamError, match="none: the region alone exceeds"):
        check_region(M, 0, LAY, small, kept=LAY.head_dim)
    check_region(D, 0, LAY, LP, tokens=0)


def test_the_address_generator_wraps_silently_past_the_top():
    """Why the host checks: the RTL's address generator, given a job ``check`` refuses, emits a
    range below the job's base (the address wrapped) and no error."""
    geo = LoaderGeometry(LAY, LP)
    stride = LAY.stride(LAY.row_bytes)
    base = SPACE - LAY.burst_bytes
    job = LoaderJob(D, (1,), base=base)
    with pytest.raises(ParamError, match="address space"):
        job.check(LAY, LP)
    dut = AddressGen(geo)
    ranges: list[tuple[int, int] | None] = []

    async def driver(ctx):
        ctx.set(dut.mode, MODE_OF_LAYOUT[D])
        ctx.set(dut.base, base)
        ctx.set(dut.rec_len, LAY.row_bytes)
        ctx.set(dut.stride, stride)
        ctx.set(dut.cmask, 0)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        await stream_put(ctx, dut.tokens, {"index": 1, "last": 1})

    async def entry_sink(ctx):
        while True:
            await stream_get(ctx, dut.entries, random.Random(0), 1.0)

    async def collector(ctx):
        while True:
            p = await stream_get(ctx, dut.ranges, random.Random(0), 1.0)
            if p.end:
                ranges.append(None)
                return
            ranges.append((p.b0, p.b1))

    run_until(dut, [driver, entry_sink], collector, deadline=2000)
    burst = LAY.burst_bytes
    wrapped = (base + stride) % SPACE
    assert ranges[0] == (wrapped // burst, (wrapped + LAY.row_bytes - 1) // burst)
    assert ranges[0][0] * burst < base, ranges
