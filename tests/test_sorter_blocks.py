"""Sub-blocks of the sorter in Amaranth's simulator, each against a naive Python model.

Every test uses its own ``random.Random(seed)``; the seed is in every assertion message.
"""

from __future__ import annotations

import itertools
import random
from collections import deque

import pytest
from amaranth.hdl import Cat, Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth_sim import pump, run_sim

from hikv.hw.sorter_compact import Compactor, select_prefix
from hikv.hw.sorter_merge import MergeLevel, Reducer
from hikv.hw.sorter_net import (
    RowMerger,
    RowSorter,
    apply_network_ints,
    bitonic_merge_network,
    bitonic_sort_network,
    compact_left,
)
from hikv.hw.sorter_queue import LaneQueue, RowQueue


def row_const(width: int, items: list[int]) -> int:
    return sum(v << (i * width) for i, v in enumerate(items))


def row_items(width: int, lanes: int, bits: int) -> list[int]:
    return [(bits >> (i * width)) & ((1 << width) - 1) for i in range(lanes)]


# --------------------------------------------------------------------------- networks
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_bitonic_sort_network_zero_one(n):
    """0-1 principle: a comparator network sorts everything iff it sorts every 0/1 input."""
    for bits in itertools.product((0, 1), repeat=n):
        assert apply_network_ints(bits, bitonic_sort_network(n)) == sorted(bits, reverse=True)
    lg = n.bit_length() - 1
    assert len(bitonic_sort_network(n)) == lg * (lg + 1) // 2


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_bitonic_merge_network_sorts_bitonic(n):
    checked = 0
    for bits in itertools.product((0, 1), repeat=n):
        if len([k for k, _ in itertools.groupby(bits)]) > 3:
            continue  # 0/1 bitonic sequences have at most three runs: 0*1*0* or 1*0*1*
        checked += 1
        assert apply_network_ints(bits, bitonic_merge_network(n)) == sorted(bits, reverse=True)


def test_network_rejects_bad_width():
    with pytest.raises(ValueError, match="power of two"):
        bitonic_sort_network(6)
    with pytest.raises(TypeError, match="width must be a positive integer"):
        RowSorter(lanes=4, width=0)
    with pytest.raises(ValueError, match="power of two"):
        RowSorter(lanes=3, width=8)
    with pytest.raises(TypeError, match="depth must be an integer >= 2"):
        RowQueue(width=8, depth=1)
    with pytest.raises(TypeError, match="head_register needs skip=False"):
        RowQueue(width=8, depth=4, head_register=True)
    with pytest.raises(TypeError, match="level must be a non-negative integer"):
        MergeLevel(lanes=4, width=8, level=-1, max_seg_rows=8)
    with pytest.raises(ValueError, match="run_rows"):
        Reducer(lanes=4, width=8, list_rows=8, run_rows=4, max_seg_rows=16)


@pytest.mark.parametrize("lanes", [2, 4, 8])
def test_row_merger(lanes):
    seed = 11 + lanes
    rng = random.Random(seed)
    width = 6
    dut = RowMerger(lanes=lanes, width=width)

    async def tb(ctx):
        for trial in range(200):
            vals = [rng.randrange(1 << width) for _ in range(2 * lanes)]
            x = sorted(vals[:lanes], reverse=True)
            y = sorted(vals[lanes:], reverse=True)
            ctx.set(dut.x, x)
            ctx.set(dut.y, y)
            hi = row_items(width, lanes, ctx.get(dut.hi.as_value()))
            lo = row_items(width, lanes, ctx.get(dut.lo.as_value()))
            exp = sorted(vals, reverse=True)
            assert hi + lo == exp, f"seed={seed} trial={trial} x={x} y={y}: {hi}+{lo} != {exp}"

    run_sim(dut, tb, clock=False)


@pytest.mark.parametrize("lanes", [4, 8])
def test_row_sorter_with_backpressure(lanes):
    seed = 3 + lanes
    rng = random.Random(seed)
    width = 5
    dut = RowSorter(lanes=lanes, width=width)
    rows = [[rng.randrange(1 << width) for _ in range(lanes)] for _ in range(60)]
    got: list[list[int]] = []

    async def tb(ctx):
        await pump(ctx, rng, dut.i, dut.o, rows, got, len(rows),
                   lambda op: [op[q] for q in range(lanes)], p_in=0.7, p_out=0.6, seed=seed)
        ctx.set(dut.i.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.idle), f"seed={seed}: rows left in the pipeline"

    run_sim(dut, tb)
    assert got == [sorted(r, reverse=True) for r in rows], f"seed={seed}"
    assert dut.stages == len(bitonic_sort_network(lanes))


# --------------------------------------------------------------------------- queue
@pytest.mark.parametrize("with_skip,head_register,depth", [(True, False, 5), (False, False, 5),
                                                           (False, True, 5), (False, True, 2)])
def test_row_queue_against_deque(with_skip, head_register, depth):
    """The variants: with ``skip``, pop-only (pointer successor in a register), and pop-only
    with the head in a register of its own (the loader's in-flight queue; same cycles)."""
    seed = 5
    rng = random.Random(seed)
    dut = RowQueue(width=8, depth=depth, skip=with_skip, head_register=head_register)
    model: deque[int] = deque()
    pending_drop = 0

    async def tb(ctx):
        nonlocal pending_drop
        nxt = 0
        assert hasattr(dut, "skip") == with_skip, f"seed={seed}"
        for cycle in range(3000):
            valid = ctx.get(dut.r_valid)
            # the head is visible exactly when the model has a row and nothing left to drop
            assert valid == (len(model) > 0 and pending_drop == 0), f"seed={seed} cycle={cycle}"
            if valid:
                assert ctx.get(dut.r_data) == model[0], f"seed={seed} cycle={cycle}"
            w = ctx.get(dut.w_rdy) and rng.random() < 0.55
            pop = valid and rng.random() < 0.5
            skip = rng.choice([0, 0, 0, 1, 2]) if (pop or rng.random() < 0.1) else 0
            if not with_skip:
                skip = 0
            ctx.set(dut.w_en, w)
            ctx.set(dut.w_data, nxt)
            ctx.set(dut.pop, pop)
            if with_skip:
                ctx.set(dut.skip, skip)
            await ctx.tick()
            if pop:
                model.popleft()
            pending_drop += skip
            while pending_drop and model:
                model.popleft()
                pending_drop -= 1
            if w:
                model.append(nxt)
                nxt = (nxt + 1) & 0xFF
            assert ctx.get(dut.level) == len(model), f"seed={seed} cycle={cycle}"

    run_sim(dut, tb)


@pytest.mark.parametrize("depth", [2, 3, 6])
def test_lane_queue_against_deques(depth):
    """Each lane a FIFO with drop-on-arrival; ``w_rdy`` (a register of its own) equals "no lane
    full" of the counts on every cycle, through pops given as comparator-selected pairs, ends
    of 0, 1 and more items than stored, and writes into the last free slot."""
    lanes, seed = 3, 7 + depth
    rng = random.Random(seed)
    dut = LaneQueue(lanes=lanes, width=8, depth=depth)
    items = [deque() for _ in range(lanes)]
    drop = [0] * lanes

    async def tb(ctx):
        nxt = 0
        for cycle in range(4000):
            where = f"seed={seed} depth={depth} cycle={cycle}"
            count = [len(items[j]) - drop[j] for j in range(lanes)]
            assert ctx.get(dut.w_rdy) == all(c < depth for c in count), where
            valid = ctx.get(dut.r_valid)
            for j in range(lanes):
                assert (valid >> j) & 1 == (count[j] > 0), where
                if count[j] > 0:
                    assert (ctx.get(dut.r_data) >> (8 * j)) & 0xFF == items[j][0], where
            w = ctx.get(dut.w_rdy) and rng.random() < 0.6
            end = rng.random() < 0.08
            # (as in the engine, a lane never owes more rows than a run: count >= -depth)
            amt = [min(rng.choice([0, 1, rng.randrange(depth + 1)]), count[j] + depth)
                   for j in range(lanes)]
            pops = [not end and (valid >> j) & 1 and rng.random() < 0.5 for j in range(lanes)]
            sel = [rng.random() < 0.5 for _ in range(lanes)]
            # the pop is whichever of pop1/pop0 the comparator selects; the other is random
            p1 = [pops[j] if sel[j] else rng.random() < 0.5 for j in range(lanes)]
            p0 = [pops[j] if not sel[j] else rng.random() < 0.5 for j in range(lanes)]
            row = [(nxt + j) & 0xFF for j in range(lanes)]
            ctx.set(dut.w_en, w)
            ctx.set(dut.w_data, sum(v << (8 * j) for j, v in enumerate(row)))
            ctx.set(dut.end, end)
            for j in range(lanes):
                ctx.set(dut.amt[j], amt[j])
            ctx.set(dut.pop_sel, sum(b << j for j, b in enumerate(sel)))
            ctx.set(dut.pop1, sum(b << j for j, b in enumerate(p1)))
            ctx.set(dut.pop0, sum(b << j for j, b in enumerate(p0)))
            await ctx.tick()
            for j in range(lanes):
                if pops[j]:
                    items[j].popleft()
                if end:
                    gone = min(amt[j], len(items[j]))
                    for _ in range(gone):
                        items[j].popleft()
                    drop[j] += amt[j] - gone
                if w:
                    if drop[j]:
                        drop[j] -= 1
                    else:
                        items[j].append(row[j])
            nxt = (nxt + lanes) & 0xFF

    run_sim(dut, tb)


# --------------------------------------------------------------------------- merge tree level
def _segments(rng, lanes, seg_rows, nsegs, width, run=1):
    """Random segments of rows, sorted descending in runs of ``run`` rows (unique values, some
    zero pads)."""
    segs = []
    for _ in range(nsegs):
        vals = rng.sample(range(1, 1 << width), seg_rows * lanes)
        for i in range(len(vals)):
            if rng.random() < 0.05:
                vals[i] = 0
        rows = []
        for q in range(0, seg_rows * lanes, run * lanes):
            items = sorted(vals[q:q + run * lanes], reverse=True)
            rows += [items[i:i + lanes] for i in range(0, len(items), lanes)]
        segs.append(rows)
    return segs


def _merge_model(seg, run):
    """Rows of a segment after merging pairs of runs of ``run`` rows."""
    out = []
    lanes = len(seg[0])
    for p in range(0, len(seg), 2 * run):
        items = sorted([x for r in seg[p:p + 2 * run] for x in r], reverse=True)
        out += [items[i:i + lanes] for i in range(0, len(items), lanes)]
    return out


@pytest.mark.parametrize("level,seg_rows,used", [(0, 5, 1), (1, 7, 1), (2, 6, 1), (2, 16, 1),
                                                 (1, 4, 0)])
def test_merge_level(level, seg_rows, used):
    seed = 100 + 10 * level + seg_rows
    rng = random.Random(seed)
    lanes, width = 4, 12
    dut = MergeLevel(lanes=lanes, width=width, level=level, max_seg_rows=16)
    segs = _segments(rng, lanes, seg_rows, 4, width, run=1 << level)
    rows_in = [r for s in segs for r in s]
    exp = [r for s in segs for r in (_merge_model(s, 1 << level) if used else s)]
    got: list[list[int]] = []
    gapless: dict[str, int] = {}

    async def tb(ctx):
        ctx.set(dut.seg_rows, seg_rows)
        ctx.set(dut.used, used)
        # first half of the rows without gaps (checks the fixed delay), then random gaps
        await pump(ctx, rng, dut.i, dut.o, rows_in, got, len(exp),
                   lambda op: [op[q] for q in range(lanes)], p_in=0.6, p_out=0.7, seed=seed,
                   free=len(rows_in) // 2, events=gapless)
        for _ in range(4):
            await ctx.tick()
        assert ctx.get(dut.idle), f"seed={seed}: not idle after the last row"

    run_sim(dut, tb)
    assert got == exp, f"seed={seed} level={level} seg_rows={seg_rows}"
    delay = gapless["first_out"] - gapless["first"]
    lp = (lanes - 1).bit_length()   # the engine's pipelined bitonic-merge stages
    assert delay == ((1 << level) if used else 0) + 2 + lp, f"seed={seed}: delay {delay}"


# --------------------------------------------------------------------------- reducer
@pytest.mark.parametrize("seg_rows,k_rows,k", [(16, 4, 13), (10, 4, 16), (9, 2, 1), (3, 4, 12),
                                               (4, 4, 5)])
def test_reducer_threshold(seg_rows, k_rows, k):
    seed = 200 + seg_rows * 7 + k
    rng = random.Random(seed)
    lanes, width = 4, 12
    dut = Reducer(lanes=lanes, width=width, list_rows=4, run_rows=4, max_seg_rows=16)
    segs = _segments(rng, lanes, seg_rows, 3, width)
    # the tree delivers each segment as sorted runs of k_rows rows
    rows_in = []
    for s in segs:
        for q in range(0, seg_rows, k_rows):
            items = sorted([x for r in s[q:q + k_rows] for x in r], reverse=True)
            rows_in += [items[i:i + lanes] for i in range(0, len(items), lanes)]
    keff = min(k, seg_rows * lanes)
    exp = [sorted([x for r in s for x in r], reverse=True)[keff - 1] for s in segs]
    got: list[int] = []

    async def tb(ctx):
        ctx.set(dut.seg_rows, seg_rows)
        ctx.set(dut.k_rows, k_rows)
        ctx.set(dut.thr_row, (keff - 1) // lanes)
        ctx.set(dut.thr_lane, (keff - 1) % lanes)
        await pump(ctx, rng, dut.i, dut.thr, rows_in, got, len(exp), lambda tp: tp,
                   p_in=0.8, p_out=0.5, seed=seed)
        for _ in range(2 * k_rows + 4):
            await ctx.tick()
        assert ctx.get(dut.idle), f"seed={seed}: reducer not idle"

    run_sim(dut, tb)
    assert got == exp, f"seed={seed} seg_rows={seg_rows} k_rows={k_rows} k={k}"


# --------------------------------------------------------------------------- compactor
def test_compactor_against_model():
    seed = 17
    rng = random.Random(seed)
    lanes, kw, iw = 4, 5, 6
    dut = Compactor(lanes=lanes, key_width=kw, index_width=iw)
    width = 1 + kw + iw
    rows = []
    exp_beats: list[tuple[list[tuple[int, int]], int]] = []
    for _ in range(40):  # segments
        nrows = rng.randint(1, 6)
        seg_items = []
        for r in range(nrows):
            items, sel = [], []
            for _ in range(lanes):
                key, idx = rng.randrange(1 << kw), rng.randrange(1 << iw)
                items.append((1 << (width - 1)) | (key << iw) | ((~idx) & ((1 << iw) - 1)))
                s = rng.random() < rng.choice([0.1, 0.5, 0.9])
                sel.append(s)
                if s:
                    seg_items.append((key, idx))
            if r == nrows - 1 and not seg_items:  # every segment selects at least one item
                sel[0] = True
                seg_items.append(((items[0] >> iw) & ((1 << kw) - 1),
                                  (~items[0]) & ((1 << iw) - 1)))
            rows.append((items, sel, r == nrows - 1))
        for b in range(0, len(seg_items), lanes):
            exp_beats.append((seg_items[b:b + lanes], int(b + lanes >= len(seg_items))))

    # the compactor takes the prefix counts computed before its input register
    layout = dut.in_layout
    got: list[tuple[list[tuple[int, int]], int]] = []

    payloads = []
    for items, sel, last in rows:
        dist = [sum(1 for j in range(i) if not sel[j]) for i in range(lanes)]
        payloads.append(layout.const({
            "row": items, "sel": sum(int(s) << i for i, s in enumerate(sel)), "dist": dist,
            "count": sum(sel), "last": int(last)}))

    def decode(op):
        return ([(op.lanes[i].key, op.lanes[i].index) for i in range(lanes)
                 if (op.valid >> i) & 1], op.last)

    async def tb(ctx):
        await pump(ctx, rng, dut.i, dut.o, payloads, got, len(exp_beats), decode,
                   p_in=0.8, p_out=0.7, seed=seed)

    run_sim(dut, tb)
    assert got == exp_beats, f"seed={seed}"


class _Pack(wiring.Component):
    """select_prefix + compact_left on its dist, combinational (for the test below)."""

    def __init__(self, lanes: int, width: int) -> None:
        self._lanes, self._width = lanes, width
        super().__init__({"items": In(data.ArrayLayout(width, lanes)), "sel": In(lanes),
                          "packed": Out(data.ArrayLayout(width, lanes)),
                          "count": Out(range(lanes + 1)), "valid": Out(lanes)})

    def elaborate(self, platform):
        m = Module()
        items = [self.items[i] for i in range(self._lanes)]
        sel = [self.sel[i] for i in range(self._lanes)]
        dist, count = select_prefix(m, sel)
        packed, valid = compact_left(m, items, sel, dist=dist)
        m.d.comb += [self.packed.eq(Cat(*packed)), self.count.eq(count),
                     self.valid.eq(Cat(*valid))]
        return m


@pytest.mark.parametrize("lanes", [1, 2, 4, 8, 16])
def test_select_prefix_and_compact_left(lanes):
    """Selected items in order in the low lanes, their count and valid mask: every mask up to
    8 lanes, random masks (and items) at 16."""
    seed = 29 + lanes
    rng = random.Random(seed)
    width = 7
    dut = _Pack(lanes, width)
    masks = range(1 << lanes) if lanes <= 8 else [rng.randrange(1 << lanes) for _ in range(600)]

    async def tb(ctx):
        for mask in masks:
            items = [rng.randrange(1 << width) for _ in range(lanes)]
            ctx.set(dut.items, items)
            ctx.set(dut.sel, mask)
            exp = [it for i, it in enumerate(items) if (mask >> i) & 1]
            cnt, valid = ctx.get(dut.count), ctx.get(dut.valid)
            got = row_items(width, lanes, ctx.get(dut.packed.as_value()))[:len(exp)]
            assert (got, cnt, valid) == (exp, len(exp), (1 << len(exp)) - 1), \
                f"seed={seed} mask={mask:#x} items={items}"

    run_sim(dut, tb, clock=False)
