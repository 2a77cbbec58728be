"""The Amaranth-simulation helpers of every unit test of hw/ (not a test module).

* :func:`run_sim` runs a testbench to completion; :func:`run_until` runs background drivers
  and a collector until the collector returns (or fails after ``deadline`` cycles).
* :func:`stream_put` / :func:`stream_get` move one payload through a valid/ready stream with
  random idle cycles (valid) or backpressure (ready) from the test's seeded generator.
* :func:`pump` streams a list of payloads through a block, input and output at once, with
  random valid / ready, and collects the decoded outputs.

Every random decision comes from the ``random.Random`` a test passes in; a test's seed is in
its failure messages.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from amaranth.hdl import Value
from amaranth.sim import Simulator

__all__ = ["Deadline", "run_sim", "run_until", "stream_put", "stream_get", "pump"]

Testbench = Callable[[Any], Awaitable[None]]


def run_sim(dut: Any, testbench: Testbench, *, clock: bool = True) -> None:
    """Run ``testbench`` to completion (testbench loops bound their own cycles); ``clock``
    False for purely combinational blocks."""
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


def run_until(dut: Any, drivers: Sequence[Testbench], collector: Testbench, *,
              deadline: int) -> None:
    """Run ``drivers`` in the background and ``collector`` until it returns; fail if it has
    not returned after ``deadline`` cycles."""
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for d in drivers:
        sim.add_testbench(d, background=True)
    finished = []

    async def main(ctx: Any) -> None:
        await collector(ctx)
        finished.append(True)

    sim.add_testbench(main)
    sim.run_until(deadline * 1e-6)
    assert finished, f"simulation did not finish in {deadline} cycles"


class Deadline:
    """Fails a testbench loop that runs past ``cycles`` iterations."""

    def __init__(self, cycles: int, what: str) -> None:
        self.left, self.what = cycles, what

    def tick(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise AssertionError(f"{self.what}: timed out")


def _set_payload(ctx: Any, stream: Any, payload: Any) -> None:
    if isinstance(payload, int):         # raw bits of a layout-shaped payload
        ctx.set(Value.cast(stream.payload), payload)
    else:
        ctx.set(stream.payload, payload)


async def stream_put(ctx: Any, stream: Any, payload: Any, rng: random.Random | None = None,
                     p_valid: float = 1.0) -> None:
    """Offer ``payload`` on ``stream`` after random idle cycles (each cycle idle with
    probability ``1 - p_valid``; no ``rng``: at once) and hold it until taken."""
    while rng is not None and rng.random() > p_valid:
        await ctx.tick()
    _set_payload(ctx, stream, payload)
    ctx.set(stream.valid, 1)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx: Any, stream: Any, rng: random.Random, p_ready: float) -> Any:
    """The next payload of ``stream``, with ready raised each cycle with probability
    ``p_ready``."""
    while True:
        ready = rng.random() < p_ready
        ctx.set(stream.ready, ready)
        _, _, valid, payload = await ctx.tick().sample(stream.valid, stream.payload)
        if ready and valid:
            ctx.set(stream.ready, 0)
            return payload


async def pump(ctx: Any, rng: random.Random, src: Any, dst: Any, payloads: Sequence[Any],
               got: list[Any], want: int | None, decode: Callable[[Any], Any], *, p_in: float,
               p_out: float, seed: int, free: int = 0, events: dict[str, int] | None = None,
               until: Callable[[list[Any]], bool] | None = None,
               deadline: int = 5000) -> None:
    """Stream ``payloads`` into ``src`` and collect ``decode(payload)`` of every ``dst``
    handshake into ``got`` until it holds ``want`` items (or ``until(got)`` is true).
    ``src.valid`` is offered with probability ``p_in`` and ``dst.ready`` raised with
    probability ``p_out``, except that both are held high while fewer than ``free`` payloads
    have been accepted. ``events`` (a dict) gets the cycle of the first input (``first``), the
    first output (``first_out``) and the last output (``last_out``) handshake."""
    def done() -> bool:
        return until(got) if until is not None else len(got) >= want

    sent, cycle = 0, 0
    dl = Deadline(deadline, f"seed={seed}")
    while not done():
        dl.tick()
        free_now = sent < free
        offer = sent < len(payloads) and (free_now or rng.random() < p_in)
        ctx.set(src.valid, offer)
        if offer:
            _set_payload(ctx, src, payloads[sent])
        ctx.set(dst.ready, 1 if free_now else rng.random() < p_out)
        _, _, iv, ir, ov, orr, op = await ctx.tick().sample(
            src.valid, src.ready, dst.valid, dst.ready, dst.payload)
        if iv and ir:
            if events is not None:
                events.setdefault("first", cycle)
            sent += 1
        if ov and orr:
            if events is not None:
                events.setdefault("first_out", cycle)
                events["last_out"] = cycle
            got.append(decode(op))
        cycle += 1
    ctx.set(src.valid, 0)
