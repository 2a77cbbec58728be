"""The loader's golden-model additions (jobs, packed output, error semantics) and the
loader's geometry / timing module (stdlib), each checked from its definition."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from hikv.hw.loader_timing import LoaderGeometry, job_timing, steady_bytes_per_cycle
from hikv.model.refs.layout import burst_bytes, dense_rows, masked_records, page_channels
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
    unpack_masked,
)
from hikv.params import (
    KVLayout,
    LoaderParams,
    ParamError,
    RecordLayout,
    loader_needs_channel_pages,
    loader_needs_masked_records,
)
from hikv.presets import PRESETS, get_preset
from hikv.rtl_tests.loader_launch import packed_variant, pages_variant, wide_variant

D, M, P = RecordLayout.DENSE, RecordLayout.MASKED_RECORD, RecordLayout.CHANNEL_PAGES
TINY = get_preset("tiny")


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int16)


def _random_f16(g: torch.Generator, n: int, d: int) -> torch.Tensor:
    raw = torch.randint(-(1 << 15), 1 << 15, (n, d), generator=g, dtype=torch.int32)
    return raw.to(torch.int16).view(torch.float16)


# --------------------------------------------------------------------------- jobs
def test_job_validation() -> None:
    with pytest.raises(ParamError, match="strictly ascending"):
        LoaderJob(D, (3, 3))
    with pytest.raises(ParamError, match="strictly ascending"):
        LoaderJob(D, (4, 2))
    lay, lp = TINY.layout, TINY.loader
    with pytest.raises(ParamError, match="slots"):
        LoaderJob(D, ()).check(lay, lp)
    with pytest.raises(ParamError, match="out of range"):
        LoaderJob(D, (lp.max_tokens,)).check(lay, lp)
    with pytest.raises(ParamError, match="kept"):
        LoaderJob(M, (1,), kept=lay.head_dim + 1).check(lay, lp)
    with pytest.raises(ParamError, match="burst_bytes"):
        LoaderJob(D, (1,), base=1).check(lay, lp)
    with pytest.raises(ParamError, match="address space"):
        LoaderJob(D, (lp.max_tokens - 1,), base=(1 << lp.addr_width) - lay.burst_bytes
                  ).check(lay, lp)
    with pytest.raises(ParamError, match="channel_pages"):   # tiny builds no page path
        LoaderJob(P, (0, 5), channels=(3, 1, 3)).check(lay, lp)
    LoaderJob(P, (0, 5), channels=(3, 1, 3)).check(lay, dataclasses.replace(
        lp, channel_pages=True))
    assert LoaderJob(P, (0,), channels=(3, 1, 3)).channels == (1, 3)


def test_job_ranges_are_the_layout_ranges() -> None:
    lay = TINY.layout
    s = torch.tensor([1, 2, 7])
    assert torch.equal(job_ranges(LoaderJob(D, (1, 2, 7)), lay).start, dense_rows(s, lay).start)
    r = job_ranges(LoaderJob(M, (1, 2, 7), kept=5), lay)
    assert torch.equal(r.length, masked_records(s, lay, 5).length)
    r = job_ranges(LoaderJob(P, (1, 2, 7), channels=(0, 9)), lay)
    want = page_channels(s, torch.tensor([0, 9]), lay)
    assert torch.equal(r.start, want.start) and len(r) == 6


def test_requests_deliver_the_burst_account() -> None:
    rng = random.Random(5)
    for name in PRESETS:
        cfg = get_preset(name)
        lay, lp = cfg.layout, cfg.loader
        for mode in (D, M, P):
            slots = sorted(rng.sample(range(min(lp.max_tokens, 512)), 40))
            job = LoaderJob(mode, tuple(slots), base=lay.burst_bytes * 3,
                            kept=rng.randint(0, lay.head_dim),
                            channels=tuple(rng.sample(range(lay.head_dim), 5)))
            reqs = job_requests(job, lay, lp)
            assert request_bytes(reqs, lp.beat_bytes) == burst_bytes(job_ranges(job, lay),
                                                                      lay.burst_bytes)
            for q in reqs:
                assert 1 <= q.beats <= lp.max_burst_beats
                assert q.addr // 4096 == (q.addr + q.beats * lp.beat_bytes - 1) // 4096


def test_chunks_longer_than_a_burst_are_read_per_token_group() -> None:
    """Channel pages read the bursts holding retained tokens, not whole chunks."""
    lay = KVLayout(head_dim=16, elem_bytes=2, burst_bytes=16, align_bytes=16, page_tokens=32)
    lp = LoaderParams(addr_width=16, data_width=32, max_burst_beats=8)
    job = LoaderJob(P, (0,), channels=(2,))           # token 0 of page 0, channel 2
    reqs = job_requests(job, lay, lp)
    chunk = lay.channel_chunk_bytes                    # 64 B: four bursts
    assert [(q.addr, q.beats) for q in reqs] == [(2 * chunk, lay.burst_bytes // 4)]


# --------------------------------------------------------------------------- packed data
@pytest.mark.parametrize("mode", [D, M, P])
def test_packed_output_is_the_vector_with_zeros_where_masked(mode: RecordLayout) -> None:
    g = torch.Generator().manual_seed(7)
    lay = TINY.layout
    d, n = lay.head_dim, 12
    x = _random_f16(g, n, d)
    x[0, 0] = torch.tensor(0x7D01, dtype=torch.int16).view(torch.float16)  # a NaN payload
    slots = (0, 3, 4, 11)
    if mode is D:
        img, job, mask = dense_image(x, lay), LoaderJob(D, slots), torch.ones(n, d, dtype=bool)
    elif mode is M:
        kept = 5
        idx = torch.argsort(torch.rand(n, d, generator=g), -1)[:, :kept]
        mask = torch.zeros(n, d, dtype=torch.bool).scatter(1, idx, True)
        mask[0] = torch.arange(d) < kept          # slot 0 keeps element 0 (the NaN payload)
        img, job = masked_image(x, mask, lay), LoaderJob(M, slots, kept=kept)
    else:
        ch = (0, 2, 3, 9)
        mask = torch.zeros(n, d, dtype=torch.bool)
        mask[:, list(ch)] = True
        img, job = channel_page_image(x, lay), LoaderJob(P, slots, channels=ch)
    vecs, masks = packed_output(job, img, lay)
    want = torch.where(mask, _bits(x), torch.zeros_like(_bits(x)))[list(slots)]
    assert torch.equal(_bits(vecs), want)
    assert torch.equal(masks, mask[list(slots)])


def test_unpack_masked_keeps_nothing_and_every_bit_pattern() -> None:
    lay = TINY.layout
    x = torch.full((2, lay.head_dim), 0x7F4D, dtype=torch.int16).view(torch.float16)
    none = torch.zeros(2, lay.head_dim, dtype=torch.bool)
    v, m = unpack_masked(masked_image(x, none, lay), [0, 1], 0, lay)
    assert not bool(m.any()) and int(_bits(v).abs().sum()) == 0
    one = none.clone()
    one[:, 3] = True
    v, _ = unpack_masked(masked_image(x, one, lay), [1], 1, lay)
    assert int(_bits(v)[0, 3]) == 0x7F4D      # NaN payload preserved (no float round trip)


def test_error_slots() -> None:
    lay, lp = TINY.layout, TINY.loader
    bb = lp.beat_bytes
    rec = lay.record_bytes(3)                      # 8 B records, 16 B stride
    job = LoaderJob(M, (0, 1, 2), base=0, kept=3)
    assert error_slots(job, lay, lp, {lay.stride(rec)}) == [False, True, False]
    assert error_slots(job, lay, lp, {rec // bb * bb + bb}) == [False, False, False]
    page = LoaderJob(P, (0, 1, lay.page_tokens), channels=(1,))
    page_bytes = lay.head_dim * lay.channel_chunk_bytes
    assert error_slots(page, lay, lp, {page_bytes + bb}) == [False, False, True]


# --------------------------------------------------------------------------- geometry
def test_geometry_rejects_what_the_rtl_cannot_build() -> None:
    lay = TINY.layout
    with pytest.raises(ParamError, match="narrower than one element"):
        LoaderGeometry(KVLayout(head_dim=16, elem_bytes=4, burst_bytes=16, align_bytes=16,
                                page_tokens=4), LoaderParams(addr_width=16, data_width=16))
    with pytest.raises(ParamError, match="whole number of bursts"):
        LoaderGeometry(lay, LoaderParams(addr_width=16, data_width=32, max_burst_beats=6))
    with pytest.raises(ParamError, match="channel page"):
        LoaderGeometry(KVLayout(head_dim=8, elem_bytes=1, burst_bytes=64, align_bytes=64,
                                page_tokens=1), LoaderParams(addr_width=16, data_width=32))
    with pytest.raises(ParamError, match="address space"):
        LoaderGeometry(lay, LoaderParams(addr_width=12, data_width=32, max_tokens=4096))
    for name in PRESETS:
        geo = LoaderGeometry(get_preset(name).layout, get_preset(name).loader)
        assert geo.lanes * geo.expand_cycles == geo.layout.head_dim
        assert geo.entry_fifo_depth & (geo.entry_fifo_depth - 1) == 0
        assert geo.buffer_words * geo.beat_bytes >= (geo.page_bytes if geo.channel_pages
                                                     else geo.record_bytes_max)
        # presets build the channel-page path exactly when their K Stage II rule needs it
        assert geo.channel_pages == loader_needs_channel_pages(get_preset(name).policy)
        # and the masked-record path exactly when a Stage II rule stores masked records
        assert geo.masked_records == loader_needs_masked_records(get_preset(name).policy)


def test_a_loader_without_the_masked_path_refuses_masked_jobs() -> None:
    """Built without ``LoaderParams.masked_records`` (as `default` and `paper`, whose Stage II
    is off): the golden model and the timing contract refuse a masked job, the record buffer
    holds a row (no mask), the entry queue is sized for rows (half as deep here), and dense
    jobs time exactly as on the loader with the path."""
    import dataclasses

    from hikv.rtl_tests.loader_launch import rows_variant, wide_variant

    assert not get_preset("default").loader.masked_records
    assert not get_preset("paper").loader.masked_records
    assert TINY.loader.masked_records            # tiny keeps static V records
    for cfg in (rows_variant(TINY), get_preset("default"), get_preset("paper")):
        lay, lp = cfg.layout, cfg.loader
        with pytest.raises(ParamError, match="masked_records = True"):
            LoaderJob(M, (0, 1), kept=1).check(lay, lp)
        geo = LoaderGeometry(lay, lp)
        with pytest.raises(ParamError, match="masked_records = True"):
            job_timing(geo, mode="masked", slots=[0, 1], kept=1)
        full = LoaderGeometry(lay, dataclasses.replace(lp, masked_records=True))
        assert geo.record_bytes_max == lay.row_bytes
        assert full.record_bytes_max == lay.row_bytes + lay.mask_bytes
        assert geo.entry_fifo_depth == full.entry_fifo_depth // 2
        rng = random.Random(5)
        for _ in range(5):
            slots = sorted(rng.sample(range(min(lp.max_tokens, 200)), rng.randint(1, 40)))
            kw = dict(mode="dense", slots=slots, latency=rng.randint(1, 100),
                      outstanding=rng.randint(1, lp.max_outstanding))
            assert job_timing(geo, **kw) == job_timing(full, **kw)
    assert wide_variant(TINY).loader.masked_records


# --------------------------------------------------------------------------- timing model
@pytest.mark.parametrize("name", ["tiny", "tiny+packed", "tiny+wide", "default", "paper"])
def test_timing_model_requests_are_the_golden_requests(name: str) -> None:
    cfg = {"tiny+packed": packed_variant(TINY), "tiny+wide": wide_variant(TINY)}.get(name) \
        or get_preset(name)
    lay, lp = cfg.layout, cfg.loader
    geo = LoaderGeometry(lay, lp)
    rng = random.Random(11)
    for mode in [m for m in (D, M, P) if lp.builds(m)]:
        for _ in range(3):
            slots = sorted(rng.sample(range(min(lp.max_tokens, 300)), rng.randint(1, 60)))
            job = LoaderJob(mode, tuple(slots), base=lay.burst_bytes * rng.randrange(200),
                            kept=rng.randint(0, lay.head_dim),
                            channels=tuple(rng.sample(range(lay.head_dim),
                                                      rng.randint(0, lay.head_dim))))
            t = job_timing(geo, mode=mode.value, slots=slots, base=job.base, kept=job.kept,
                           channels=list(job.channels), latency=rng.randint(1, 40),
                           outstanding=rng.randint(1, lp.max_outstanding))
            want = [(q.addr, q.beats) for q in job_requests(job, lay, lp)]
            assert list(t.requests) == want, f"{name} {job}"
            assert len(t.issue) == len(want) and list(t.issue) == sorted(set(t.issue))


def test_timing_model_obeys_its_bounds() -> None:
    """Cycles never beat the bus (one beat per cycle) nor the outstanding limit, and more
    latency or fewer outstanding reads never make a job faster."""
    cfg = pages_variant(TINY)
    geo = LoaderGeometry(cfg.layout, cfg.loader)
    slots = list(range(0, TINY.loader.max_tokens, 2))
    for mode in ("dense", "masked", "channel_pages"):
        prev = None
        for lat in (1, 4, 16, 64):
            row = [job_timing(geo, mode=mode, slots=slots, kept=9, channels=[1, 5],
                              latency=lat, outstanding=o)
                   for o in range(1, TINY.loader.max_outstanding + 1)]
            for o, t in enumerate(row, start=1):
                assert t.cycles > t.beats
                per_slot = sum(lat + b for _, b in t.requests) / o
                assert t.cycles >= per_slot
            assert all(a.cycles >= b.cycles for a, b in zip(row, row[1:], strict=False))
            if prev is not None:
                assert all(t.cycles >= p.cycles for t, p in zip(row, prev, strict=True))
            prev = row


@pytest.mark.parametrize("name", ["tiny", "default"])
def test_steady_formula_matches_the_model_on_long_jobs(name: str) -> None:
    cfg = get_preset(name)
    geo = LoaderGeometry(cfg.layout, cfg.loader)
    slots = list(range(min(cfg.loader.max_tokens, 4096)))
    for lat in (1, 8, 32, 100):
        for o in sorted({1, cfg.loader.max_outstanding}):
            t = job_timing(geo, mode="dense", slots=slots, latency=lat, outstanding=o)
            got = t.beats * geo.beat_bytes / t.cycles
            want = steady_bytes_per_cycle(geo, latency=lat, outstanding=o)
            assert abs(got - want) <= 0.05 * want, (name, lat, o, got, want)


def test_timing_model_rejects_bad_arguments() -> None:
    geo = LoaderGeometry(TINY.layout, TINY.loader)
    with pytest.raises(ParamError, match="latency"):
        job_timing(geo, mode="dense", slots=[1], latency=0)
    with pytest.raises(ParamError, match="outstanding"):
        job_timing(geo, mode="dense", slots=[1], outstanding=TINY.loader.max_outstanding + 1)


@pytest.mark.parametrize("name", ["tiny", "tiny+pages", "default", "paper"])
def test_closed_form_estimate_within_ten_percent_of_the_model(name: str) -> None:
    """estimate_cycles (byte and request counts only) against job_timing (cycle-exact against
    the RTL) for contiguous jobs and runs with gaps, every layout, latencies 1..100."""
    from hikv.hw.loader_timing import estimate_cycles

    cfg = pages_variant(TINY) if name == "tiny+pages" else get_preset(name)
    geo = LoaderGeometry(cfg.layout, cfg.loader)
    d, n = cfg.layout.head_dim, min(cfg.loader.max_tokens, 512)
    layouts = [("dense", {}), ("masked", {"kept": d * 3 // 4}),
               ("channel_pages", {"channels": list(range(0, d, 2))})]
    for mode, kw in [(m, kw) for m, kw in layouts if cfg.loader.builds(RecordLayout(m))]:
        for slots in (list(range(n)), [s for s in range(n) if (s // 7) % 2 == 0]):
            for lat in (1, 8, 32, 100):
                for o in sorted({1, cfg.loader.max_outstanding}):
                    t = job_timing(geo, mode=mode, slots=slots, latency=lat, outstanding=o, **kw)
                    e = estimate_cycles(geo, beats=t.beats, requests=len(t.requests),
                                        latency=lat, outstanding=o, mode=mode,
                                        records=len(slots),
                                        page_tokens=len(slots) if mode == "channel_pages" else 0)
                    assert abs(e - t.cycles) <= 0.10 * t.cycles, (mode, lat, o, t.cycles, e)
