"""The prompt pass leaves out the keys a causal chunk cannot see
(:func:`hikv.model.methods.attention.prefill_pass`): the same floats as a pass over the full
square with those keys masked for the column sums, every observation window and the prefix
statistics of the follow-up fork, the output within float32 rounding (bit-equal where the BLAS
kernel rounds a product independently of its length); and a seed-smoke suite run gives the same
cell files with either pass."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hikv.model.methods.attention import PrefixStats, prefill_pass

SEED = 2718


def masked_square_pass(q, k, v, scale, *, col_sums=False, windows=(), prefix=0,
                        prefix_col_sums=False, prefix_windows=(), chunk=512):
    """The reference prefill pass: the full square, the keys a chunk cannot see masked."""
    hq, n, d = q.shape
    hkv = k.shape[0]
    g = hq // hkv
    out = torch.empty_like(q)
    sums = torch.zeros(hkv, n, dtype=torch.float32) if col_sums else None
    obs = {w: torch.zeros(hkv, n, dtype=torch.float32) for w in windows if w > 0}
    pre = None
    if prefix:
        pre = PrefixStats(prefix, torch.zeros(hkv, prefix, dtype=torch.float32)
                          if prefix_col_sums else None,
                          {w: torch.zeros(hkv, prefix, dtype=torch.float32)
                           for w in prefix_windows if w > 0})
    qg = q.reshape(hkv, g, n, d)
    keys_pos = torch.arange(n)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        qc = qg[:, :, s:e]
        logits = torch.matmul(qc, k[:, None].transpose(-1, -2)) * scale
        causal = keys_pos[None, :] <= torch.arange(s, e)[:, None]
        logits = logits.masked_fill(~causal, float("-inf"))
        probs = torch.softmax(logits.float(), dim=-1)
        out.reshape(hkv, g, n, d)[:, :, s:e] = torch.matmul(probs.to(q.dtype), v[:, None])
        if sums is not None:
            sums += probs.sum(dim=(1, 2))
        for w, o in obs.items():
            if e > n - w:
                lo = max(s, n - w) - s
                o += probs[:, :, lo:].sum(dim=(1, 2))
        if pre is not None and s < prefix:
            pe = min(e, prefix)
            pp = probs[:, :, :pe - s, :prefix]
            if pre.sums is not None:
                pre.sums += pp.sum(dim=(1, 2))
            for w, o in pre.obs.items():
                if pe > prefix - w:
                    o += pp[:, :, max(s, prefix - w) - s:].sum(dim=(1, 2))
    return out, sums, obs, pre


@pytest.mark.parametrize(("n", "hq", "hkv", "d", "chunk", "prefix"), [
    (1024, 4, 2, 16, 512, 0), (1000, 4, 2, 16, 512, 990), (777, 9, 3, 64, 512, 700),
    (2048, 9, 3, 64, 512, 2030), (1500, 8, 1, 256, 512, 1200), (300, 6, 3, 32, 64, 257),
    (4096, 9, 3, 64, 512, 4080), (8281, 9, 3, 64, 512, 8265)])
def test_causal_key_range_gives_the_same_floats(n, hq, hkv, d, chunk, prefix) -> None:
    gen = torch.Generator().manual_seed(SEED + n)
    q, k, v = (torch.randn(h, n, d, generator=gen) for h in (hq, hkv, hkv))
    kw = {"col_sums": True, "windows": (1, 7, 32, 64), "chunk": chunk}
    if prefix:
        kw.update(prefix=prefix, prefix_col_sums=True, prefix_windows=(1, 32))
    got = prefill_pass(q, k, v, d ** -0.5, **kw)
    want = masked_square_pass(q, k, v, d ** -0.5, **kw)
    ctx = f"seed {SEED + n}, n {n}, d {d}, chunk {chunk}, prefix {prefix}"
    # the output: the values' product over the visible keys only against the full square's
    # (whose further probabilities are exactly 0). Whether these are the same floats is the
    # BLAS kernel's choice, not the code's: MKL's sgemm gives identical floats at the
    # harness's chunk of 512 on some machines; on one with AVX-512 and AMX it rounds by the
    # key count (max |difference| 2.4e-7, in a quarter of the elements), and at chunk 64 on
    # both. So the output is held to float32 rounding, the statistics
    # below (sums of the same probabilities) to equality
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6, msg=ctx)
    assert torch.equal(got[1], want[1]), ctx
    assert got[2].keys() == want[2].keys()
    for w in want[2]:
        assert torch.equal(got[2][w], want[2][w]), (ctx, w)
    if prefix:
        assert torch.equal(got[3].sums, want[3].sums), ctx
        for w in want[3].obs:
            assert torch.equal(got[3].obs[w], want[3].obs[w]), (ctx, w)


pytest.importorskip("transformers")

from test_accuracy_cli import tiny_model  # noqa: E402,F401  (the shared fixture)


def test_seed_smoke_cells_equal_with_the_masked_square_pass(tiny_model, tmp_path,  # noqa: F811
                                                             monkeypatch) -> None:
    from hikv.model.accuracy.io import read_rows
    from hikv.model.accuracy.seed_suite import SEED_SUITES, run_seed_suite
    from hikv.model.lm import route as lm_route

    model, cache = tiny_model
    suite = dataclasses.replace(SEED_SUITES["seed-smoke"], trials=2, keep_min=0.0,
                                ppl_tol=10.0, families=("h2o", "snapkv", "hikv-evict",
                                                        "hikv-qa/lowbit4"))
    kw = {"model": str(model), "cache": cache, "preset": "tiny", "log": lambda _: None}
    run_seed_suite(suite, tmp_path / "causal", **kw)
    monkeypatch.setattr(lm_route, "prefill_pass", masked_square_pass)
    run_seed_suite(suite, tmp_path / "square", **kw)
    cells = sorted(p.name for p in (tmp_path / "square" / "cells").glob("*.json"))
    assert len(cells) == 5, cells
    for name in cells:
        got = read_rows(tmp_path / "causal" / "cells" / name)[0]
        want = read_rows(tmp_path / "square" / "cells" / name)[0]
        assert got == want, (SEED, name)
