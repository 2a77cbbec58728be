"""The fast paths of hikv.model.refs.layout (no sort in page_channels, numpy burst counting, a
one-range region) give exactly what the plain definitions give."""

from __future__ import annotations

import torch

from hikv.model.refs.layout import (
    Ranges,
    Read,
    account,
    burst_blocks,
    burst_bytes,
    contiguous,
    page_channels,
)
from hikv.params import KVLayout


def _blocks_reference(r: Ranges, burst: int) -> set[int]:
    out: set[int] = set()
    for s, n in zip(r.start.tolist(), r.length.tolist(), strict=True):
        if n > 0:
            out.update(range(s // burst, (s + n - 1) // burst + 1))
    return out


def _page_channels_reference(t: torch.Tensor, c: torch.Tensor, lay: KVLayout) -> torch.Tensor:
    t = torch.sort(t).values
    c = torch.sort(c).values
    chunk = lay.channel_chunk_bytes
    start = ((t // lay.page_tokens)[:, None] * lay.head_dim * chunk + c[None, :] * chunk
             + ((t % lay.page_tokens) * lay.elem_bytes)[:, None])
    return torch.sort(start.reshape(-1)).values


def test_page_channels_matches_sorted_definition() -> None:
    seed = 7
    g = torch.Generator().manual_seed(seed)
    for trial in range(60):
        lay = KVLayout(head_dim=[16, 64, 256][trial % 3], page_tokens=[4, 16][trial % 2],
                       burst_bytes=64, align_bytes=[2, 64][trial % 2])
        n = int(torch.randint(1, 300, (1,), generator=g))
        m = int(torch.randint(0, n + 1, (1,), generator=g))
        t = torch.randperm(n, generator=g)[:m]
        r = int(torch.randint(0, lay.head_dim + 1, (1,), generator=g))
        c = torch.randperm(lay.head_dim, generator=g)[:r]
        if trial % 7 == 0 and r > 1:
            c = torch.cat([c, c[:1]])        # a repeated channel takes the sorting path
        got = page_channels(t, c, lay)
        want = _page_channels_reference(t, c, lay)
        assert torch.equal(got.start, want), f"seed {seed} trial {trial}: start differs"
        assert int(got.length.sum()) == want.numel() * lay.elem_bytes


def test_burst_counting_matches_set_of_blocks() -> None:
    seed = 11
    g = torch.Generator().manual_seed(seed)
    for trial in range(200):
        k = int(torch.randint(0, 40, (1,), generator=g))
        start = torch.randint(0, 2000, (k,), generator=g)
        length = torch.randint(0, 150, (k,), generator=g)
        if trial % 3 == 0:
            start = torch.sort(start).values
        r = Ranges(start, length)
        burst = [4, 16, 64][trial % 3]
        ref = _blocks_reference(r, burst)
        assert burst_bytes(r, burst) == len(ref) * burst, f"seed {seed} trial {trial}"
        assert burst_blocks(r, burst).tolist() == sorted(ref), f"seed {seed} trial {trial}"


def test_account_one_range_region() -> None:
    lay = KVLayout(head_dim=64, burst_bytes=64, align_bytes=64)
    for start, length in [(0, 0), (0, 1), (63, 2), (10, 300), (128, 64), (5, 59), (5, 60)]:
        r = contiguous(start, length)
        a = account([Read("meta", "m", r)], lay, 0, 0)
        assert a.meta_burst == len(_blocks_reference(r, 64)) * 64, (start, length)
        # the same range split in two parts goes through the general path
        if length > 1:
            h = length // 2
            parts = [Read("meta", "m", contiguous(start, h)),
                     Read("meta", "m", contiguous(start + h, length - h))]
            assert account(parts, lay, 0, 0).meta_burst == a.meta_burst, (start, length)


def test_page_channel_runs_read_the_same_bytes() -> None:
    from hikv.model.refs.layout import page_channel_runs

    seed = 13
    g = torch.Generator().manual_seed(seed)
    for trial in range(80):
        lay = KVLayout(head_dim=[16, 64, 256][trial % 3], page_tokens=[4, 16, 64][trial % 3],
                       burst_bytes=[16, 64][trial % 2], align_bytes=64)
        n = int(torch.randint(1, 400, (1,), generator=g))
        if trial % 4 == 0:
            t = torch.arange(n)                             # every token: long runs
        else:
            t = torch.randperm(n, generator=g)[: int(torch.randint(0, n + 1, (1,),
                                                                   generator=g))]
        c = torch.randperm(lay.head_dim, generator=g)[: int(torch.randint(0, lay.head_dim + 1,
                                                                          (1,), generator=g))]
        runs, elems = page_channel_runs(t, c, lay), page_channels(t, c, lay)
        a = account([Read("k", "k", runs)], lay, 0, 0)
        b = account([Read("k", "k", elems)], lay, 0, 0)
        assert (a.k_ideal, a.k_burst) == (b.k_ideal, b.k_burst), f"seed {seed} trial {trial}"
        assert torch.equal(torch.sort(runs.start).values, runs.start)
        assert len(runs) <= len(elems)
