"""Compare-exchange networks of the sorter: bitonic row sort, two-row merge, stream compaction.

Items are unsigned values compared as integers (the sorter's composite ``{valid, key, ~index}``);
every network here orders rows **descending** (largest item in lane 0). The network shapes are
plain Python lists so that tests can check them on integers without building hardware.
"""

from __future__ import annotations

from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .uops import uadd

__all__ = [
    "bitonic_sort_network",
    "bitonic_merge_network",
    "apply_network_ints",
    "cas",
    "wires",
    "apply_stage",
    "merge_rows",
    "compact_dist",
    "compact_left",
    "shift_up",
    "RowSorter",
    "RowMerger",
]

#: A network is a list of stages; a stage is a list of (hi, lo) lane pairs: after the
#: compare-exchange the larger item is in lane ``hi`` and the smaller in lane ``lo``.
Network = list[list[tuple[int, int]]]


def _check_lanes(n: int) -> int:
    if not isinstance(n, int) or n < 1 or n & (n - 1):
        raise ValueError(f"network width must be a power of two >= 1, not {n!r}")
    return n.bit_length() - 1


def bitonic_sort_network(n: int) -> Network:
    """Batcher's bitonic sorter of ``n`` lanes, descending: ``log n (log n + 1) / 2`` stages."""
    _check_lanes(n)
    stages: Network = []
    size = 2
    while size <= n:
        stride = size // 2
        while stride >= 1:
            stage = []
            for i in range(n):
                j = i ^ stride
                if j > i:
                    stage.append((i, j) if (i & size) == 0 else (j, i))
            stages.append(stage)
            stride //= 2
        size *= 2
    return stages


def bitonic_merge_network(n: int) -> Network:
    """Sorts any bitonic sequence of ``n`` lanes descending: ``log n`` half-cleaner stages."""
    _check_lanes(n)
    stages: Network = []
    stride = n // 2
    while stride >= 1:
        stages.append([(i, i ^ stride) for i in range(n) if (i ^ stride) > i])
        stride //= 2
    return stages


def apply_network_ints(values: Sequence[int], network: Network) -> list[int]:
    """Run ``network`` on Python integers (reference behaviour of :func:`apply_stage`)."""
    out = list(values)
    for stage in network:
        for hi, lo in stage:
            if out[hi] < out[lo]:
                out[hi], out[lo] = out[lo], out[hi]
    return out


def wires(m: Module, values: Sequence[Value], name: str) -> list[Signal]:
    """Drive one combinational signal per value and return the signals.

    Amaranth lowers an expression each time it is used, so a network built from plain
    expressions grows exponentially with its depth; naming every stage keeps it linear.
    """
    out = []
    for i, v in enumerate(values):
        s = Signal(len(Value.cast(v)), name=f"{name}{i}")
        m.d.comb += s.eq(v)
        out.append(s)
    return out


def cas(m: Module, a: Value, b: Value, name: str) -> tuple[Signal, Signal]:
    """Compare-exchange: ``(max(a, b), min(a, b))`` of two unsigned values, as signals."""
    ge = Signal(name=f"{name}_ge")
    m.d.comb += ge.eq(a >= b)
    hi, lo = wires(m, [Mux(ge, a, b), Mux(ge, b, a)], f"{name}_")
    return hi, lo


def apply_stage(m: Module, items: Sequence[Value], stage: list[tuple[int, int]],
                name: str) -> list[Value]:
    """One stage of compare-exchanges on ``items`` (lanes not in the stage pass through)."""
    out = list(items)
    for hi, lo in stage:
        out[hi], out[lo] = cas(m, items[hi], items[lo], f"{name}_{hi}_{lo}")
    return out


def merge_rows(m: Module, x: Sequence[Value], y: Sequence[Value],
               name: str = "merge") -> tuple[list[Value], list[Value]]:
    """Merge two descending rows of ``P`` items into the top ``P`` and the bottom ``P``.

    A half-cleaner on ``x`` and reversed ``y`` splits the ``2P`` items into the larger and the
    smaller half, each a bitonic sequence, which a ``log P``-stage bitonic merge sorts: depth
    ``1 + log P`` compare-exchanges, ``P (1 + log P)`` units.
    """
    p = len(x)
    if len(y) != p:
        raise ValueError("merge_rows needs two rows of equal width")
    hi, lo = [], []
    for i in range(p):
        h, lw = cas(m, x[i], y[p - 1 - i], f"{name}_hc{i}")
        hi.append(h)
        lo.append(lw)
    for s, stage in enumerate(bitonic_merge_network(p)):
        hi = apply_stage(m, hi, stage, f"{name}_hi{s}")
        lo = apply_stage(m, lo, stage, f"{name}_lo{s}")
    return hi, lo


def compact_dist(m: Module, sel: Sequence[Value], name: str = "compact") -> list[Value]:
    """Per lane, the number of unselected lanes below it (``log P + 1`` bits; lane 0: 0).

    A parallel prefix count (Kogge-Stone): ``log P`` levels of adders at most ``log P + 1``
    bits wide. The first half of :func:`compact_left`.
    """
    p = len(sel)
    lg = _check_lanes(p)
    width = max(1, lg + 1)
    # inclusive prefix count of unselected lanes, one power of two of reach per level
    incl: list[Value] = [~Value.cast(sel[i])[0] for i in range(p)]
    for s in range(lg):
        step = 1 << s
        incl = wires(m, [uadd(incl[i], incl[i - step]) if i >= step else incl[i]
                         for i in range(p)], f"{name}_pre{s}_")
    return [Const(0, width)] + [Cat(incl[i], Const(0, width))[:width] for i in range(p - 1)]


def compact_left(m: Module, items: Sequence[Value], sel: Sequence[Value],
                 name: str = "compact",
                 dist: Sequence[Value] | None = None) -> tuple[list[Value], list[Value]]:
    """Move the selected items to the lowest lanes, keeping their order.

    Each selected item moves down by the number of unselected lanes below it
    (:func:`compact_dist`, or ``dist`` when given, e.g. from a register), one power of two per
    stage, least significant bit first; such moves never collide (checked for every mask up to
    8 lanes and random masks of 16 lanes in tests/test_sorter_blocks.py). ``log P`` stages of
    ``P`` multiplexers after the prefix count.
    Returns (items, valid) per lane; lanes past the selected count have valid 0.
    """
    p = len(items)
    lg = _check_lanes(p)
    if dist is None:
        dist = compact_dist(m, sel, name)
    cur_i, cur_v, cur_d = list(items), list(sel), list(dist)
    for s in range(lg):
        step = 1 << s
        ni, nv, nd = [], [], []
        for q in range(p):
            stay = cur_v[q] & ~cur_d[q][s]
            if q + step < p:
                come = cur_v[q + step] & cur_d[q + step][s]
                ni.append(Mux(come, cur_i[q + step], cur_i[q]))
                nv.append(come | stay)
                nd.append(Mux(come, cur_d[q + step], cur_d[q]))
            else:
                ni.append(cur_i[q])
                nv.append(stay)
                nd.append(cur_d[q])
        cur_i = wires(m, ni, f"{name}_s{s}_item")
        cur_v = wires(m, nv, f"{name}_s{s}_valid")
        cur_d = wires(m, nd, f"{name}_s{s}_dist")
    return cur_i, cur_v


def shift_up(m: Module, items: Sequence[Value], amount: Value, size: int, zero: Value,
             name: str = "shift") -> list[Value]:
    """Place ``items`` at lanes ``amount ..`` of a window of ``size`` lanes (barrel shifter).

    Lanes below ``amount`` (and above the items) hold ``zero``; items shifted past ``size`` are
    dropped.
    """
    cur = list(items) + [zero] * (size - len(items))
    for s in range(len(amount)):
        step = 1 << s
        cur = wires(m, [Mux(amount[s], cur[q - step] if q >= step else zero, cur[q])
                        for q in range(size)], f"{name}_s{s}_")
    return cur


class RowSorter(wiring.Component):
    """Pipelined bitonic sorter of one row of ``lanes`` items per cycle, descending.

    One register per compare-exchange stage (``log P (log P + 1) / 2`` stages), a global stall
    when the output is held (``o.valid & ~o.ready``). Data registers have no reset.

    Parameters
    ----------
    lanes : int
        Items per row ``P`` (a power of two).
    width : int
        Bits per item.

    Members
    -------
    i : ``In(stream.Signature(ArrayLayout(width, lanes)))``
    o : ``Out(stream.Signature(ArrayLayout(width, lanes)))``
    idle : ``Out(1)``  no row in the pipeline
    """

    def __init__(self, *, lanes: int, width: int) -> None:
        _check_lanes(lanes)
        if not isinstance(width, int) or width < 1:
            raise TypeError(f"RowSorter width must be a positive integer, not {width!r}")
        self._lanes = lanes
        self._width = width
        self._layout = data.ArrayLayout(width, lanes)
        super().__init__({"i": In(stream.Signature(self._layout)),
                          "o": Out(stream.Signature(self._layout)), "idle": Out(1)})

    @property
    def stages(self) -> int:
        """Pipeline depth in cycles."""
        return len(bitonic_sort_network(self._lanes))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._lanes
        adv = Signal()
        m.d.comb += adv.eq(~self.o.valid | self.o.ready)
        m.d.comb += self.i.ready.eq(adv)
        items = [self.i.payload[i] for i in range(p)]
        valid: Value = self.i.valid
        valids: list[Value] = []
        reg = None
        for s, stage in enumerate(bitonic_sort_network(p)):
            items = apply_stage(m, items, stage, f"cas{s}")
            reg = Signal(self._layout, name=f"stage{s}", reset_less=True)
            v = Signal(name=f"stage{s}_valid")
            with m.If(adv):
                m.d.sync += [reg.eq(Cat(*items)), v.eq(valid)]
            items = [reg[i] for i in range(p)]
            valid = v
            valids.append(v)
        if reg is None:  # one lane: a single register
            reg = Signal(self._layout, name="stage0", reset_less=True)
            v = Signal(name="stage0_valid")
            with m.If(adv):
                m.d.sync += [reg.eq(self.i.payload), v.eq(self.i.valid)]
            valid = v
            valids.append(v)
        m.d.comb += [self.o.payload.eq(reg), self.o.valid.eq(valid),
                     self.idle.eq(~Cat(*valids).any())]
        return m


class RowMerger(wiring.Component):
    """Combinational two-row merge (:func:`merge_rows`) as a component, for tests and area.

    Members
    -------
    x, y : ``In(ArrayLayout(width, lanes))``  descending rows
    hi, lo : ``Out(ArrayLayout(width, lanes))``  top and bottom ``lanes`` items, descending
    """

    def __init__(self, *, lanes: int, width: int) -> None:
        _check_lanes(lanes)
        layout = data.ArrayLayout(width, lanes)
        self._lanes = lanes
        super().__init__({"x": In(layout), "y": In(layout), "hi": Out(layout),
                          "lo": Out(layout)})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._lanes
        hi, lo = merge_rows(m, [self.x[i] for i in range(p)], [self.y[i] for i in range(p)])
        m.d.comb += [self.hi.eq(Cat(*hi)), self.lo.eq(Cat(*lo))]
        return m
