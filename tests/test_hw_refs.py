"""Bit-exact hardware references against brute force: keys, sorter, bursts, loader requests."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from hikv.model.refs.keys import float_to_key
from hikv.model.refs.layout import (
    Ranges,
    burst_blocks,
    burst_bytes,
    contiguous,
    dense_rows,
    masked_records,
    page_channels,
)
from hikv.model.refs.loader import (
    axi_requests,
    bytes_to_mask,
    channel_page_image,
    coalesce,
    dense_image,
    mask_to_bytes,
    masked_image,
    request_bytes,
    unpack_dense,
    unpack_masked,
)
from hikv.model.refs.sorter import stage1_topk, stage2_topr, topk_indices, topk_mask
from hikv.params import KeyFormat, KVLayout, ParamError


# --------------------------------------------------------------------------- keys
@pytest.mark.parametrize("fmt", [KeyFormat.FP16, KeyFormat.BF16])
@pytest.mark.parametrize("width", [16, 11, 8, 4])
def test_keys_order_like_values(fmt, width):
    g = torch.Generator().manual_seed(width)
    x = torch.cat([torch.rand(2000, generator=g) * 10 ** torch.randint(-6, 5, (2000,),
                                                                    generator=g),
                   torch.tensor([0.0, 1e-8, 65504.0, 1e6])])
    key = float_to_key(x, fmt, width)
    assert int(key.min()) >= 0 and int(key.max()) < 1 << width
    order = torch.argsort(x)
    assert bool((key[order][1:] >= key[order][:-1]).all()), "keys must not invert the order"
    if width == 16 and fmt is KeyFormat.FP16:
        # at full width, distinct fp16 values give distinct keys
        h = x.to(torch.float16)
        assert len(torch.unique(h)) == len(torch.unique(key))


def test_signed_keys_order_like_values():
    x = torch.tensor([-65504.0, -3.0, -1.0, -1e-3, -0.0, 0.0, 1e-3, 1.0, 3.0, 65504.0])
    key = float_to_key(x, KeyFormat.FP16, 16, signed=True)
    assert key.tolist() == sorted(key.tolist())
    assert key[4] == key[5], "-0.0 and +0.0 must give the same key"
    assert float_to_key(x, KeyFormat.BF16, 8, signed=True).tolist() == sorted(
        float_to_key(x, KeyFormat.BF16, 8, signed=True).tolist())


def test_fp16_key_is_the_raw_bit_pattern():
    x = torch.tensor([1.0, 0.5, 2.0])
    assert float_to_key(x, KeyFormat.FP16, 16).tolist() == [0x3C00, 0x3800, 0x4000]
    assert float_to_key(x, KeyFormat.FP16, 8).tolist() == [0x3C, 0x38, 0x40]
    assert float_to_key(x, KeyFormat.BF16, 16).tolist() == [0x3F80, 0x3F00, 0x4000]


def test_key_errors():
    with pytest.raises(ParamError, match="non-negative"):
        float_to_key(torch.tensor([-1.0]), KeyFormat.FP16, 16)
    with pytest.raises(ParamError, match="NaN"):
        float_to_key(torch.tensor([float("nan")]), KeyFormat.FP16, 16)
    with pytest.raises(ParamError, match=r"\[0, 256\)"):
        float_to_key(torch.tensor([256]), KeyFormat.UINT, 8)
    with pytest.raises(ParamError, match=r"key width = 0 is out of range: allowed \[1, 32\]"):
        float_to_key(torch.tensor([1.0]), KeyFormat.FP16, 0)
    with pytest.raises(ParamError, match=r"allowed \[1, 16\]"):
        float_to_key(torch.tensor([1.0]), KeyFormat.FP16, 20)
    assert float_to_key(torch.tensor([0, 7, 255]), KeyFormat.UINT, 8).tolist() == [0, 7, 255]


# --------------------------------------------------------------------------- sorter
def _brute_topk(keys, labels, k):
    """The unique subset of size min(k, n) in which every member beats every non-member
    (larger key, or equal key and lower label); listed by ascending label."""
    n = len(keys)

    def beats(a, b):
        return keys[a] > keys[b] or (keys[a] == keys[b] and labels[a] < labels[b])

    found = [sub for sub in itertools.combinations(range(n), min(k, n))
             if all(beats(a, b) for a in sub for b in range(n) if b not in sub)]
    assert len(found) == 1
    return sorted(((keys[i], labels[i]) for i in found[0]), key=lambda t: t[1])


def test_stage1_against_brute_force_with_ties():
    rng = random.Random(1)
    for trial in range(300):
        n = rng.randint(1, 7)
        keys = [rng.randint(0, 3) for _ in range(n)]        # many ties
        labels = rng.sample(range(20), n)
        k = rng.randint(0, n + 1)
        got = stage1_topk(keys, labels, k)
        want = _brute_topk(keys, labels, k)
        assert got == want, (trial, keys, labels, k, got, want)


def test_ties_go_to_the_lower_index_whatever_the_order():
    assert stage1_topk([5, 5, 5, 5], [3, 0, 2, 1], 2) == [(5, 0), (5, 1)]
    assert stage1_topk([1, 2, 2, 0], [0, 1, 2, 3], 1) == [(2, 1)]
    assert stage1_topk([0, 0], [0, 1], 5) == [(0, 0), (0, 1)]


def test_stage2_and_batched_agree_with_stage1():
    g = torch.Generator().manual_seed(3)
    keys = torch.randint(0, 4, (50, 16), generator=g)
    for r in (1, 4, 16):
        idx = topk_indices(keys, r)
        ref = stage2_topr(keys.tolist(), r)
        assert idx.tolist() == [[i for _, i in row] for row in ref]
        assert topk_mask(keys, r).sum(-1).tolist() == [r] * 50


def test_sorter_ref_errors():
    with pytest.raises(ParamError, match="unique"):
        stage1_topk([1, 2], [0, 0], 1)
    with pytest.raises(ParamError, match="differ in length"):
        stage1_topk([1, 2], [0], 1)
    with pytest.raises(ParamError, match="k = -1"):
        stage1_topk([1], [0], -1)
    with pytest.raises(ParamError, match="unsigned"):
        topk_indices(torch.tensor([[-1, 2]]), 1)


# --------------------------------------------------------------------------- bursts
def _dense_count(r: Ranges, burst: int) -> tuple[int, int]:
    """Independent count with a byte bitmap: (ideal bytes, burst bytes)."""
    size = int((r.start + r.length).max()) + burst if len(r) else 0
    touched = torch.zeros(size, dtype=torch.bool)
    ideal = 0
    for s, n in zip(r.start.tolist(), r.length.tolist(), strict=True):
        touched[s: s + n] = True
        ideal += n
    blocks = touched[: size - size % burst].reshape(-1, burst).any(1) if size else touched
    return ideal, int(blocks.sum()) * burst


def test_burst_bytes_against_bitmap():
    rng = random.Random(7)
    for _ in range(200):
        burst = rng.choice([4, 16, 64])
        m = rng.randint(0, 12)
        start = torch.tensor([rng.randint(0, 300) for _ in range(m)], dtype=torch.int64)
        length = torch.tensor([rng.randint(1, 90) for _ in range(m)], dtype=torch.int64)
        r = Ranges(start, length)
        ideal, want = _dense_count(r, burst)
        assert r.ideal_bytes == ideal
        assert burst_bytes(r, burst) == want
        assert len(burst_blocks(r, burst)) * burst == want


def test_layout_ranges():
    lay = KVLayout(head_dim=64, elem_bytes=2, burst_bytes=64, align_bytes=64, page_tokens=16)
    r = dense_rows(torch.tensor([0, 3]), lay)
    assert r.start.tolist() == [0, 384] and r.length.tolist() == [128, 128]
    r = masked_records(torch.tensor([1]), lay, 48)
    assert r.start.tolist() == [128] and r.length.tolist() == [104]
    assert burst_bytes(r, 64) == 128
    packed = KVLayout(head_dim=64, elem_bytes=2, burst_bytes=64, align_bytes=8)
    r = masked_records(torch.arange(8), packed, 48)      # 8 adjacent 104-byte records
    assert r.ideal_bytes == 832 and burst_bytes(r, 64) == 832
    # channel pages: 2 tokens of page 0, 1 of page 2, channels 1 and 5 -> 3 elements x 2 ch
    r = page_channels(torch.tensor([0, 3, 40]), torch.tensor([5, 1]), lay)
    assert r.ideal_bytes == 12
    assert burst_bytes(r, 64) == 4 * 64      # chunks (p0,c1) (p0,c5) (p2,c1) (p2,c5): 32 B each
    whole = page_channels(torch.tensor([0, 3, 40]), torch.tensor([5, 1]), lay, whole_chunks=True)
    assert whole.start.tolist() == [32, 160, 4096 + 32, 4096 + 160]
    assert contiguous(0, 0).ideal_bytes == 0


# --------------------------------------------------------------------------- loader
def _brute_requests(r: Ranges, burst, beat, max_beats, base=0):
    """Block set, then greedy walk; independent of coalesce()'s run logic."""
    blocks = sorted({(base + s) // burst + i
                     for s, n in zip(r.start.tolist(), r.length.tolist(), strict=True)
                     for i in range((((base + s) % burst) + n + burst - 1) // burst)})
    reqs = []
    i = 0
    while i < len(blocks):
        addr = blocks[i] * burst
        end = addr
        while i < len(blocks) and blocks[i] * burst == end:
            end += burst
            i += 1
        while addr < end:
            n = min(max_beats * beat, 4096 - addr % 4096, end - addr)
            reqs.append((addr, n // beat))
            addr += n
    return reqs


def test_axi_requests_against_brute_force():
    rng = random.Random(11)
    for trial in range(300):
        burst = rng.choice([16, 32, 64])
        beat = rng.choice([b for b in (4, 8, 16) if b <= burst])
        max_beats = rng.choice([1, 2, 4, 16, 256])
        stride = rng.choice([8, 16, 104, 128, 200])
        length = rng.randint(1, stride)
        slots = sorted(rng.sample(range(100), rng.randint(1, 30)))
        base = rng.choice([0, 4096 - burst, 8192])
        r = Ranges(torch.tensor(slots) * stride, torch.full((len(slots),), length))
        reqs = axi_requests(r, burst=burst, beat_bytes=beat, max_beats=max_beats, base=base)
        assert [(q.addr, q.beats) for q in reqs] == _brute_requests(r, burst, beat, max_beats,
                                                                     base), trial
        for q in reqs:
            assert q.addr % 4096 + q.beats * beat <= 4096, "crosses a 4 KiB boundary"
            assert 1 <= q.beats <= max_beats
        shifted = Ranges(r.start + base, r.length)
        assert request_bytes(reqs, beat) == burst_bytes(shifted, burst)


def test_coalesce_shares_boundary_blocks_and_rejects_descending():
    r = Ranges(torch.tensor([0, 40, 200]), torch.tensor([40, 40, 8]))
    assert coalesce(r, 64) == [(0, 1), (3, 3)]
    with pytest.raises(ParamError, match="ascending"):
        coalesce(Ranges(torch.tensor([100, 0]), torch.tensor([4, 4])), 64)
    with pytest.raises(ParamError, match="aligned"):
        coalesce(r, 64, base=32)
    with pytest.raises(ParamError, match="max_burst_beats = 0"):
        axi_requests(r, burst=64, beat_bytes=16, max_beats=0)


def test_images_round_trip():
    g = torch.Generator().manual_seed(5)
    lay = KVLayout(head_dim=16, elem_bytes=2, burst_bytes=16, align_bytes=8, page_tokens=4)
    x = torch.randn(10, 16, generator=g).to(torch.float16)
    img = dense_image(x, lay)
    assert len(img) == 10 * 32
    assert torch.equal(unpack_dense(img, [0, 3, 9], lay), x[[0, 3, 9]])
    keys = float_to_key(x.float().abs(), KeyFormat.FP16, 16)
    mask = topk_mask(keys, 12)
    img = masked_image(x, mask, lay)
    assert len(img) == 10 * lay.stride(lay.record_bytes(12))
    dense, masks = unpack_masked(img, [1, 4], 12, lay)
    assert torch.equal(masks, mask[[1, 4]])
    assert torch.equal(dense, torch.where(mask[[1, 4]], x[[1, 4]], torch.zeros(())).half())
    assert torch.equal(bytes_to_mask(mask_to_bytes(mask), 16), mask)
    assert mask_to_bytes(torch.tensor([[True] + [False] * 7 + [False] * 7 + [True]])).tolist() \
        == [[1, 128]]
    cp = channel_page_image(x, lay)
    buf = torch.frombuffer(bytearray(cp), dtype=torch.float16)
    # token 5 channel 3: page 1, chunk 3, slot 1
    assert buf[(1 * 16 * 4 + 3 * 4 + 1)] == x[5, 3]
    assert len(cp) == 3 * 16 * 4 * 2     # 3 pages (last padded)
