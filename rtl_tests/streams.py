"""The cocotb verification kit of every testbench: valid/ready stream sources and sinks driven
by seeded idle / backpressure patterns (rtl_tests/tb_sorter.py, rtl_tests/tb_loader.py).

The classes drive and sample signals only (``.value``), with no cocotb import, so a testbench
owns its clock loop: after each rising edge it calls ``drive()`` on every source and sink, then,
in the read-only phase, ``sample()``. Every random decision comes from the ``random.Random``
the testbench passes in (seeded from the launcher's seed), so a seed replays the same run.

:class:`StreamBench` is the clock loop of a block with a ``cfg`` and an ``i`` source and an
``o`` sink (sorter, scorer); it awaits the triggers the testbench hands it.

Ports are found by Amaranth's flattened names: a stream port ``o`` is ``o__valid``,
``o__ready`` and ``o__payload``.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

__all__ = ["PATTERNS", "Pattern", "StreamBench", "StreamSource", "StreamSink", "read_int"]

#: Pattern kinds a regression draws from.
PATTERNS = ("always", "random", "bursty")


def read_int(sig: Any) -> int:
    """The unsigned value of a cocotb handle (an int for 1-bit and wide signals alike)."""
    v = sig.value
    return v.to_unsigned() if hasattr(v, "to_unsigned") else int(v)


class Pattern:
    """Per-cycle yes/no: ``always``; ``random`` (yes with probability ``duty``, drawn between
    0.3 and 0.9); ``bursty`` (runs of yes and no of random lengths up to 8).
    :meth:`with_duty` makes a ``random`` pattern of a given probability (a job's knob).

    The constructor draws the duty from ``rng`` whatever the kind, so one seed gives one
    sequence of draws whichever kinds a regression picks.
    """

    def __init__(self, kind: str, rng: random.Random) -> None:
        if kind not in PATTERNS:
            raise ValueError(f"pattern kind {kind!r}: allowed {PATTERNS}")
        self.kind, self.rng = kind, rng
        self.duty = rng.uniform(0.3, 0.9)
        self.state, self.left = True, 0

    @classmethod
    def with_duty(cls, duty: float, rng: random.Random) -> Pattern:
        """``random`` with probability ``duty`` (nothing drawn here)."""
        p = cls.__new__(cls)
        if not 0.0 <= duty <= 1.0:
            raise ValueError(f"pattern duty = {duty} is out of range: allowed [0, 1]")
        p.kind, p.rng, p.duty = "random", rng, duty
        p.state, p.left = True, 0
        return p

    def __call__(self) -> bool:
        if self.kind == "always":
            return True
        if self.kind == "random":
            return self.rng.random() < self.duty
        if self.left == 0:
            self.state = not self.state
            self.left = self.rng.randint(1, 8)
        self.left -= 1
        return self.state


class StreamSource:
    """Drives ``<name>__valid/payload`` from a queue of payload words; an offered beat is held
    until taken. A new beat is offered when the pattern says yes (no pattern: at once)."""

    def __init__(self, dut: Any, name: str) -> None:
        self.valid = getattr(dut, f"{name}__valid")
        self.payload = getattr(dut, f"{name}__payload")
        self.ready = getattr(dut, f"{name}__ready")
        self.queue: deque[int] = deque()
        self.pattern: Pattern | None = None
        self.offering = False
        self._valid_out = -1

    def clear(self) -> None:
        """Drop the queue and the beat on offer (a reset)."""
        self.queue.clear()
        self.offering = False

    def drive(self) -> None:
        """After the clock edge: offer the next beat if the pattern allows."""
        if not self.offering and self.queue and (self.pattern is None or self.pattern()):
            self.offering = True
            self.payload.value = self.queue[0]
        v = int(self.offering)
        if v != self._valid_out:
            self.valid.value = v
            self._valid_out = v

    def sample(self) -> bool:
        """At ReadOnly: did the offered beat transfer at the coming edge?"""
        if self.offering and self.ready.value:
            self.queue.popleft()
            self.offering = False
            return True
        return False


class StreamSink:
    """Drives ``<name>__ready`` by a pattern (no pattern: always ready) and returns the
    transferred payloads."""

    def __init__(self, dut: Any, name: str) -> None:
        self.valid = getattr(dut, f"{name}__valid")
        self.payload = getattr(dut, f"{name}__payload")
        self.ready = getattr(dut, f"{name}__ready")
        self.pattern: Pattern | None = None
        self._ready = -1

    def drive(self) -> None:
        """After the clock edge: raise or drop ready."""
        r = int(self.pattern is None or self.pattern())
        if r != self._ready:
            self.ready.value = r
            self._ready = r

    def sample(self) -> int | None:
        """At ReadOnly: the payload transferred at the coming edge, or None."""
        if self._ready and self.valid.value:
            return self.payload.value.to_unsigned()
        return None


class StreamBench:
    """The ``cfg`` and ``i`` sources, the ``o`` sink and the clock loop of one block.

    ``edge`` and ``settle`` are the testbench's cocotb triggers (``RisingEdge(dut.clk)``,
    ``ReadOnly()``); the testbench starts the clock. ``cycle`` counts rising edges.
    """

    def __init__(self, dut: Any, edge: Any, settle: Any) -> None:
        self.dut = dut
        self.cfg = StreamSource(dut, "cfg")
        self.inp = StreamSource(dut, "i")
        self.out = StreamSink(dut, "o")
        self.cycle = 0
        self._edge = edge
        self._ro = settle

    def _drive(self) -> None:
        self.cfg.drive()
        self.inp.drive()
        self.out.drive()

    async def step(self) -> tuple[bool, bool, int | None]:
        """One clock cycle: drive, settle, sample. Returns (cfg taken, input taken, output)."""
        await self._edge
        self.cycle += 1
        self._drive()
        await self._ro
        return self.cfg.sample(), self.inp.sample(), self.out.sample()

    async def reset(self, cycles: int = 2) -> None:
        """Hold ``rst`` for ``cycles`` edges, dropping what the sources had queued."""
        await self._edge
        self.dut.rst.value = 1
        self.cfg.clear()
        self.inp.clear()
        for _ in range(cycles):
            self._drive()
            await self._edge
            self.cycle += 1
        self.dut.rst.value = 0
