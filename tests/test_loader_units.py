"""Amaranth-simulator unit tests of the loader's sub-blocks against the golden model.

Coalescer: block ranges -> AXI requests, equal to ``axi_requests``. AddressGen: tokens -> the
ranges whose requests equal ``job_requests`` and the entries of ``expected_entries``. Packer:
entries + beats read from the golden memory image -> ``packed_output``. Every stream gets random
valid / ready gaps from a seeded generator; failures name the seed, the job and the item.
"""

from __future__ import annotations

import random

import pytest
import torch
from amaranth_sim import run_sim, run_until, stream_get, stream_put

from hikv.hw.loader import KVLoader
from hikv.hw.loader_addr import AddressGen
from hikv.hw.loader_coalesce import Coalescer
from hikv.hw.loader_pack import Packer
from hikv.hw.loader_ports import MODE_OF_LAYOUT
from hikv.hw.loader_timing import AXI_BOUNDARY, LoaderGeometry, job_timing
from hikv.model.refs.layout import Ranges
from hikv.model.refs.loader import axi_requests, job_requests
from hikv.params import RecordLayout
from hikv.presets import get_preset
from hikv.rtl_tests.loader_jobs import SLVERR, expected_entries, make_case
from hikv.rtl_tests.loader_launch import (
    packed_variant,
    pages_variant,
    rows_variant,
    wide_variant,
)

CFG = get_preset("tiny")
GEO = LoaderGeometry(CFG.layout, CFG.loader)
#: records packed at element alignment (sharing beats), channel chunks of two bursts
PACKED = packed_variant(CFG)
#: tiny with the channel-page path; tiny with one burst per beat (as default and paper)
CONFIGS = {"tiny": pages_variant(CFG), "packed": PACKED, "wide": wide_variant(CFG),
           "rows": rows_variant(CFG)}


def _needs_path(cfg, mode: RecordLayout) -> None:
    if not cfg.loader.builds(mode):
        pytest.skip(f"{cfg.name} builds no {mode.value} path")


# --------------------------------------------------------------------------- coalescer
def _random_blocks(rng: random.Random, n: int, space_blocks: int,
                   line_blocks: int) -> list[tuple[int, int]]:
    out, b = [], rng.randrange(space_blocks // 4)
    for _ in range(n):
        b += rng.choice([0, 0, 1, 1, 1, 2, 5, 40])
        if rng.random() < 0.1:      # just before a 4 KiB line: requests cut at the boundary
            b += -(b + 3) % line_blocks
        width = line_blocks + 3 if rng.random() < 0.05 else rng.choice([0, 0, 1, 3, 9])
        if b + width >= space_blocks:
            break
        out.append((b, b + width))
        b += rng.choice([0, width])
    return out


@pytest.mark.parametrize("cfg_name", ["tiny", "packed", "wide"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_coalescer_matches_axi_requests(seed: int, cfg_name: str) -> None:
    rng = random.Random(seed)
    cfg = CONFIGS[cfg_name]
    burst = cfg.layout.burst_bytes
    lp = cfg.loader
    blocks = _random_blocks(rng, 40, (1 << lp.addr_width) // burst, AXI_BOUNDARY // burst)
    ranges = Ranges(torch.tensor([b0 * burst for b0, _ in blocks]),
                    torch.tensor([(b1 - b0 + 1) * burst for b0, b1 in blocks]))
    want = [(r.addr, r.beats) for r in axi_requests(ranges, burst=burst,
                                                    beat_bytes=lp.beat_bytes,
                                                    max_beats=lp.max_burst_beats)]
    dut = Coalescer(LoaderGeometry(cfg.layout, lp))
    got: list[tuple[int, int]] = []

    async def driver(ctx):
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for b0, b1 in blocks:
            await stream_put(ctx, dut.ranges, {"b0": b0, "b1": b1, "end": 0}, rng, 0.7)
        await stream_put(ctx, dut.ranges, {"b0": 0, "b1": 0, "end": 1}, rng, 0.7)

    async def collector(ctx):
        while True:
            if ctx.get(dut.done) and len(got) >= len(want):
                return
            ready = rng.random() < 0.6
            ctx.set(dut.requests.ready, ready)
            _, _, valid, p = await ctx.tick().sample(dut.requests.valid, dut.requests.payload)
            if valid and ready:
                got.append((p.addr, p.beats))

    run_until(dut, [driver], collector, deadline=5000)
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        assert g == w, (f"seed {seed} ({cfg_name}): request {i}: expected {w}, got {g}; "
                        f"blocks {blocks}")
    assert len(got) == len(want), f"seed {seed}: {len(got)} requests, expected {len(want)}"


# --------------------------------------------------------------------------- address gen
@pytest.mark.parametrize("cfg_name", ["tiny", "packed", "wide"])
@pytest.mark.parametrize("seed,mode", [(11, RecordLayout.DENSE),
                                       (12, RecordLayout.MASKED_RECORD),
                                       (13, RecordLayout.CHANNEL_PAGES),
                                       (14, RecordLayout.CHANNEL_PAGES)])
def test_address_gen_ranges_and_entries(seed: int, mode: RecordLayout, cfg_name: str) -> None:
    rng = random.Random(seed)
    cfg = CONFIGS[cfg_name]
    _needs_path(cfg, mode)
    geo = LoaderGeometry(cfg.layout, cfg.loader)
    case = make_case(cfg, rng, name="agen", mode=mode, max_slots=24)
    job = case.job
    lay = cfg.layout
    dut = AddressGen(geo)
    ranges: list[tuple[int, int]] = []
    entries = []
    want_entries = expected_entries(job, geo)
    rec = job.record_bytes(lay)

    async def driver(ctx):
        ctx.set(dut.mode, MODE_OF_LAYOUT[mode])
        ctx.set(dut.base, job.base)
        ctx.set(dut.rec_len, rec)
        ctx.set(dut.stride, lay.stride(rec))
        ctx.set(dut.cmask, sum(1 << c for c in job.channels))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for i, s in enumerate(job.slots):
            await stream_put(ctx, dut.tokens, {"index": s, "last": i == len(job.slots) - 1}, rng,
                       0.6)

    async def range_sink(ctx):
        while True:
            p = await stream_get(ctx, dut.ranges, rng, 0.7)
            if p.end:
                ranges.append(None)
                return
            ranges.append((p.b0, p.b1))

    async def collector(ctx):
        while len(entries) < len(want_entries):
            p = await stream_get(ctx, dut.entries, rng, 0.5)
            entries.append(p)
        while not (ctx.get(dut.done) and ranges and ranges[-1] is None):
            await ctx.tick()

    run_until(dut, [driver, range_sink], collector, deadline=20000)
    msg = f"{cfg_name} seed {seed}, job {job}"
    assert ranges[-1] is None and None not in ranges[:-1], msg
    burst = lay.burst_bytes
    got_req = axi_requests(Ranges(torch.tensor([b0 * burst for b0, _ in ranges[:-1]]),
                                  torch.tensor([(b1 - b0 + 1) * burst
                                                for b0, b1 in ranges[:-1]])),
                           burst=burst, beat_bytes=geo.beat_bytes,
                           max_beats=cfg.loader.max_burst_beats)
    assert got_req == job_requests(job, lay, cfg.loader), msg
    for i, (g, w) in enumerate(zip(entries, want_entries, strict=True)):
        page = bool(g.page) if geo.channel_pages else False
        got = (page, g.token, g.fa, g.bitmap if w.page else 0, bool(g.last),
               bool(g.nodata) if w.page else False)
        exp = (w.page, w.token, w.fa, w.bitmap, w.last, w.nodata)
        assert got == exp, f"{msg}: entry {i}: expected {w}, got {g}"
        if not w.nodata:
            assert g.la == w.la, f"{msg}: entry {i}: la expected {w.la}, got {g.la}"
        if not w.page:
            assert g.off == w.off, f"{msg}: entry {i}: {w} vs {g}"


# --------------------------------------------------------------------------- packer
PACKER_JOBS = [(21, RecordLayout.DENSE, None), (22, RecordLayout.MASKED_RECORD, None),
               (23, RecordLayout.MASKED_RECORD, SLVERR), (24, RecordLayout.CHANNEL_PAGES, None),
               (25, RecordLayout.CHANNEL_PAGES, SLVERR), (26, RecordLayout.MASKED_RECORD, "shared"),
               (27, RecordLayout.DENSE, SLVERR)]


@pytest.mark.parametrize("cfg_name,seed,mode,error", [
    (c, *job) for c in CONFIGS for job in PACKER_JOBS if CONFIGS[c].loader.builds(job[1])])
def test_packer_matches_packed_output(seed: int, mode: RecordLayout, error: int | str | None,
                                      cfg_name: str) -> None:
    rng = random.Random(seed)
    cfg = CONFIGS[cfg_name]
    _needs_path(cfg, mode)
    geo = LoaderGeometry(cfg.layout, cfg.loader)
    kw = {}
    if error == "shared":
        # consecutive records ending inside a beat: with packed records they share beats
        lay = cfg.layout
        kw = {"slot_kind": "all", "kept": next(k for k in range(lay.head_dim + 1)
                                                if lay.record_bytes(k) % geo.beat_bytes)}
        error = None
    case = make_case(cfg, rng, name="pack", mode=mode, max_slots=24, error=error, **kw)
    job = case.job
    lay = cfg.layout
    bb = geo.beat_bytes
    mem = bytearray(1 << cfg.loader.addr_width)
    for a, b in case.memory.items():
        mem[a:a + len(b)] = b
    beats = [(q_addr + i * bb) for q_addr, n in case.requests for i in range(n)]
    dut = Packer(geo)
    got = []

    async def setup_and_entries(ctx):
        ctx.set(dut.mode, MODE_OF_LAYOUT[mode])
        ctx.set(dut.rec_len, job.record_bytes(lay))
        ctx.set(dut.cmask, sum(1 << c for c in job.channels))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for e in expected_entries(job, geo):
            ent = {"token": e.token, "fa": e.fa, "la": e.la, "off": e.off, "last": e.last,
                   "nodata": e.nodata}
            if geo.channel_pages:
                ent.update(page=e.page, bitmap=e.bitmap)
            await stream_put(ctx, dut.entries, ent, rng, 0.5)

    async def beat_source(ctx):
        await ctx.tick()
        for a in beats:
            data = int.from_bytes(mem[a:a + bb], "little")
            await stream_put(ctx, dut.beats, {"data": data, "err": int(a in case.error_beats),
                                        "addr": a // bb}, rng, 0.7)

    async def collector(ctx):
        while len(got) < len(case.outputs):
            p = await stream_get(ctx, dut.o, rng, 0.6)
            got.append((p.token, p.data, p.mask, p.err, p.last))

    run_until(dut, [setup_and_entries, beat_source], collector, deadline=40000)
    n = len(case.outputs)
    for i, (g, w) in enumerate(zip(got, case.outputs, strict=True)):
        exp = (*w, int(i == n - 1))
        assert g == exp, (f"{cfg_name} seed {seed}, job {job}: output {i}: expected "
                          f"{tuple(hex(v) for v in exp)}, got {tuple(hex(v) for v in g)}")


# --------------------------------------------------------------------------- contract
@pytest.mark.parametrize("block", [KVLoader, AddressGen, Coalescer, Packer])
def test_blocks_reject_a_config_instead_of_a_geometry(block) -> None:
    with pytest.raises(TypeError, match=f"{block.__name__} needs a LoaderGeometry"):
        block(CFG)


@pytest.mark.parametrize("cfg_name", list(CONFIGS))
def test_latency_is_the_fixed_part_of_the_timing_contract(cfg_name: str) -> None:
    """A one-request job (one dense row) takes ``latency + L + beats - 1`` cycles at read
    latency ``L``, for every ``L`` (``job_timing``, which the cocotb timing jobs check
    against the RTL cycle for cycle)."""
    cfg = CONFIGS[cfg_name]
    geo = LoaderGeometry(cfg.layout, cfg.loader)
    lat = KVLoader(geo).latency
    for slot in (0, 1, 5):
        for read_latency in (1, 2, 8, 33, 100):
            t = job_timing(geo, mode="dense", slots=[slot], latency=read_latency)
            assert len(t.requests) == 1, (cfg_name, slot, t.requests)
            assert t.cycles == lat + read_latency + t.beats - 1, (cfg_name, slot, read_latency)


def test_eq_const_rejects_a_constant_that_does_not_fit() -> None:
    from amaranth.hdl import Signal

    from hikv.hw.uops import eq_const

    with pytest.raises(ValueError, match="does not fit a 3-bit value"):
        eq_const(Signal(3), 8)


@pytest.mark.parametrize("width,slice_bits", [(27, 8), (9, 4), (8, 8), (5, 8)])
def test_carry_select_add_sub_and_sliced_compare(width: int, slice_bits: int) -> None:
    """``add_cs`` / ``sub_cs`` / ``ult_cs`` (the coalescer's and address generator's fast
    adders and compares) against Python integers, random operands and carries."""
    from amaranth.hdl import Module, Signal

    from hikv.hw.uops import add_cs, sub_cs, ult_cs

    seed = 13
    rng = random.Random(seed)
    m = Module()
    a, b, c = Signal(width), Signal(width), Signal()
    add, sub, lt = Signal(width), Signal(width), Signal()
    m.d.comb += [add.eq(add_cs(a, b, width, cin=c, slice_bits=slice_bits)),
                 sub.eq(sub_cs(a, b, width, slice_bits=slice_bits)),
                 lt.eq(ult_cs(a, b, width, slice_bits=slice_bits))]
    mod = 1 << width

    async def tb(ctx):
        for i in range(1500):
            x = rng.getrandbits(width)
            r = rng.random()
            if r < 0.2:
                y = mod - 1 - x                   # every carry propagates
            elif r < 0.6:
                y = x ^ (rng.getrandbits(width) >> rng.randrange(width + 1))   # equal high bits
            else:
                y = rng.getrandbits(width)
            cc = rng.getrandbits(1)
            ctx.set(a, x)
            ctx.set(b, y)
            ctx.set(c, cc)
            assert ctx.get(add) == (x + y + cc) % mod, f"seed={seed} i={i} {x}+{y}+{cc}"
            assert ctx.get(sub) == (x - y) % mod, f"seed={seed} i={i} {x}-{y}"
            assert ctx.get(lt) == (x < y), f"seed={seed} i={i} {x}<{y}"

    run_sim(m, tb, clock=False)
