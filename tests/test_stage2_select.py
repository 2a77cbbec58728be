# amaranth: UnusedElaboratable=no
"""The Stage II selection block (hw/stage2_select.py) against the golden Stage II reference.

Vectors of random keys (1 to 3 distinct values, the full range, all equal, all zero, all
maximal) stream through the block in the Amaranth simulator, with and without random
valid/ready; every vector's output must equal ``stage2_topr`` item for item, in the sorter's
dense beat format, and without backpressure the job's cycles must equal ``Stage2Select.cycles``
(one vector every ``ceil(d / P)`` cycles in steady state). Each configuration is built with
one radix step per engine cycle (several engines in turn) and with as many steps per cycle as
fit one engine.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import replace

import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator
from amaranth_sim import pump

from hikv.hw.sorter_compact import lanes_layout
from hikv.hw.stage2_select import Stage2Select, stage2_select_from_params
from hikv.model.refs.sorter import stage2_topr
from hikv.params import ParamError
from hikv.presets import get_preset


def _vectors(rng: random.Random, count: int, d: int, w: int) -> list[list[int]]:
    top = (1 << w) - 1
    out = []
    for _ in range(count):
        shape = rng.randrange(6)
        if shape == 0:
            vals = [rng.randint(0, top) for _ in range(rng.randint(1, 3))]
            out.append([rng.choice(vals) for _ in range(d)])
        elif shape == 1:
            out.append([rng.choice((0, top))] * d)
        elif shape == 2:
            v = rng.randint(0, top)
            out.append([v] * d)
        else:
            out.append([rng.randint(0, top) for _ in range(d)])
    return out


def _beats(dut: Stage2Select, vec: list[int]) -> list[dict]:
    p = dut.lanes
    beats = []
    for q in range(dut.rows):
        lanes = [{"key": vec[q * p + i] if q * p + i < len(vec) else 0, "index": 0}
                 for i in range(p)]
        n = min(p, len(vec) - q * p)
        beats.append({"lanes": lanes, "valid": (1 << n) - 1, "last": int(q == dut.rows - 1)})
    return beats


def _run_vectors(dut, tb, got: list) -> list[list]:
    """Simulate ``tb`` on ``dut``; the output beats it collected in ``got`` (``(items,
    last)``) grouped into vectors."""
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    sim.run()
    per_vec, cur = [], []
    for items, last in got:
        cur.extend(items)
        if last:
            per_vec.append(cur)
            cur = []
    return per_vec


def _run(dut: Stage2Select, vectors: list[list[int]], r: int, rng: random.Random, *,
         p_in: float, p_out: float, seed: int) -> tuple[list[list[tuple[int, int]]], int]:
    payloads = [b for v in vectors for b in _beats(dut, v)]
    got: list = []
    events: dict[str, int] = {}
    full = p_in == 1.0 and p_out == 1.0

    def decode(op):
        mask = int(op.valid)
        return ([(int(op.lanes[i].key), int(op.lanes[i].index))
                 for i in range(dut.lanes) if mask >> i & 1], int(op.last))

    def until(g):
        return sum(last for _, last in g) >= len(vectors)

    error = []

    async def tb(ctx):
        ctx.set(dut.r, r)
        await pump(ctx, rng, dut.i, dut.o, payloads, got, None, decode, p_in=p_in,
                   p_out=p_out, seed=seed, free=len(payloads) if full else 0,
                   events=events, until=until, deadline=50 * len(payloads) + 500)
        error.append(ctx.get(dut.error))

    per_vec = _run_vectors(dut, tb, got)
    assert error == [0], f"seed={seed} r={r}: error raised on a well-formed job"
    return per_vec, events["last_out"] - events["first"] + 1


CONFIGS = {
    # name: (preset, d); tiny at its head_dim, a default-like block with fewer lanes
    "tiny": ("tiny", None),
    "tiny-d6": ("tiny", 6),
    "default-p8-d24": ("default", 24),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("handshake", ["full", "random"])
@pytest.mark.parametrize("wide_steps", [False, True])
def test_against_reference(name, handshake, wide_steps):
    preset, d = CONFIGS[name]
    cfg = get_preset(preset)
    d = d or cfg.layout.head_dim
    params = cfg.sorter
    if name.startswith("default"):
        params = replace(params, lanes=8)
    seed = zlib.crc32(f"{name}/{handshake}/{wide_steps}".encode()) % 10_000
    rng = random.Random(seed)
    rows, comp = -(-d // params.lanes), params.key_width + (d - 1).bit_length()
    b = -(-comp // rows) if wide_steps else 1
    dut = stage2_select_from_params(params, d, bits_per_cycle=b)
    assert dut.engines == (1 if wide_steps else -(-comp // rows))
    name = f"{name} B={b}"
    for r in sorted({1, rng.randint(2, d - 1), d, dut.max_r}):
        vectors = _vectors(rng, 5, d, params.key_width)
        p = (1.0, 1.0) if handshake == "full" else (0.7, 0.6)
        got, cycles = _run(dut, vectors, r, rng, p_in=p[0], p_out=p[1], seed=seed)
        want = stage2_topr(vectors, r)
        assert len(got) == len(vectors), f"config={name} seed={seed} r={r}: {len(got)} vectors"
        for n, (vec, exp, act) in enumerate(zip(vectors, want, got, strict=True)):
            assert act == exp, (f"config={name} seed={seed} r={r} vector {n}: input {vec}, "
                                f"expected {exp}, got {act}")
        if handshake == "full":
            assert cycles == dut.cycles(len(vectors)), (
                f"config={name} seed={seed} r={r}: {cycles} cycles, "
                f"formula {dut.cycles(len(vectors))}")


def test_rejects_bad_arguments():
    with pytest.raises(ParamError, match="lanes"):
        Stage2Select(lanes=6, key_width=8, length=16)
    with pytest.raises(ParamError, match="key_width"):
        Stage2Select(lanes=4, key_width=0, length=16)
    with pytest.raises(ParamError, match="length"):
        Stage2Select(lanes=4, key_width=8, length=1)
    with pytest.raises(ParamError, match="index_width"):
        Stage2Select(lanes=4, key_width=8, length=16, index_width=3)
    with pytest.raises(ParamError, match="bits_per_cycle"):
        Stage2Select(lanes=4, key_width=8, length=16, bits_per_cycle=13)
    with pytest.raises(ParamError, match="max_r"):
        Stage2Select(lanes=4, key_width=8, length=16, max_r=15)


@pytest.mark.parametrize("case", ["r=0", "r>max_r", "valid", "last"])
def test_error_is_sticky_and_the_stream_stays_in_step(case):
    """A vector with ``r`` out of range or a beat whose ``valid`` / ``last`` disagrees sets
    ``error``; the vector still leaves as one output vector, the next one is exact."""
    cfg = get_preset("tiny")
    d = 6
    dut = Stage2Select(lanes=4, key_width=cfg.sorter.key_width, length=d, max_r=9)
    rng = random.Random(7)
    vectors = _vectors(rng, 3, d, cfg.sorter.key_width)
    payloads = [b for v in vectors for b in _beats(dut, v)]
    bad_r = {"r=0": 0, "r>max_r": 10}.get(case, 3)
    if case == "valid":
        payloads[0] = {**payloads[0], "valid": 0b0111}
    if case == "last":
        payloads[0] = {**payloads[0], "last": 1}
    got: list = []
    seen: list[int] = []

    def decode(op):
        return ([(int(op.lanes[i].key), int(op.lanes[i].index))
                 for i in range(dut.lanes) if int(op.valid) >> i & 1], int(op.last))

    async def tb(ctx):
        ctx.set(dut.r, bad_r)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.o.ready, 1)
        sent = 0
        for _ in range(200):
            if sent < len(payloads):
                ctx.set(dut.i.payload, dut.i.payload.shape().const(payloads[sent]))
            ctx.set(dut.i.valid, sent < len(payloads))
            *_, iv, ir, ov, op = await ctx.tick().sample(dut.i.valid, dut.i.ready,
                                                        dut.o.valid, dut.o.payload)
            if iv and ir:
                sent += 1
                if sent == dut.rows:
                    ctx.set(dut.r, 3)      # the vectors after the first are well formed
            if ov:
                got.append(decode(op))
            seen.append(ctx.get(dut.error))
            if sum(last for _, last in got) == len(vectors):
                break

    per_vec = _run_vectors(dut, tb, got)
    assert len(per_vec) == len(vectors), f"case={case}: {len(per_vec)} vectors out"
    assert seen[-1] == 1, f"case={case}: error not raised"
    assert per_vec[1:] == stage2_topr(vectors[1:], 3), f"case={case}: {per_vec}"


def test_payload_is_the_sorter_beat():
    cfg = get_preset("tiny")
    s = cfg.sorter
    dut = Stage2Select(lanes=s.lanes, key_width=s.key_width, length=cfg.layout.head_dim,
                       index_width=s.index_width)

    want = lanes_layout(cfg.sorter.lanes, cfg.sorter.key_width, cfg.sorter.index_width)
    assert dut.o.payload.shape() == want and dut.i.payload.shape() == want
    assert len(Value.cast(dut.r)) >= cfg.layout.head_dim.bit_length()
