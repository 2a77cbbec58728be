"""The two-level KV loader's geometry and timing contract (standard library only).

:class:`LoaderGeometry` derives every structural constant of the RTL (``hw/loader.py``) from a
:class:`~hikv.params.KVLayout` and :class:`~hikv.params.LoaderParams`: the RTL, its testbench
and the cost model (``hikv.sim``) all read them from here, so none is written twice.

The timing part (:func:`job_cycles`, :func:`steady_bytes_per_cycle`) is filled in below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hikv.params import KVLayout, LoaderParams, ParamError, clog2

__all__ = ["AXI_BOUNDARY", "COUNTER_WIDTH", "LoaderGeometry"]

#: AXI4 bursts never cross this boundary (bytes).
AXI_BOUNDARY = 4096
#: Width of the loader's statistics counters (bits); they wrap at 2**32.
COUNTER_WIDTH = 32


@dataclass(frozen=True)
class LoaderGeometry:
    """Structural constants of the loader RTL for one layout and loader configuration.

    Raises :class:`~hikv.params.ParamError` for geometries the RTL does not support: a beat
    narrower than one element, a beat wider than a burst, a request shorter than a burst, a
    channel page that is not a whole number of bursts, or a region of ``max_tokens`` records
    that does not fit the address space.
    """

    layout: KVLayout
    loader: LoaderParams

    def __post_init__(self) -> None:
        lay, lp = self.layout, self.loader
        if lp.beat_bytes < lay.elem_bytes:
            raise ParamError(f"loader beat of {lp.beat_bytes} B (data_width = {lp.data_width}) "
                             f"is narrower than one element (elem_bytes = {lay.elem_bytes})")
        if lp.beat_bytes > lay.burst_bytes:
            raise ParamError(f"loader beat of {lp.beat_bytes} B (data_width = {lp.data_width}) "
                             f"is wider than burst_bytes = {lay.burst_bytes}")
        if self.max_request_bytes < lay.burst_bytes:
            raise ParamError(f"a request of max_burst_beats = {lp.max_burst_beats} beats of "
                             f"{lp.beat_bytes} B is shorter than burst_bytes = "
                             f"{lay.burst_bytes}: the loader issues whole bursts")
        if self.page_bytes % lay.burst_bytes:
            raise ParamError(f"a channel page of {self.page_bytes} B (head_dim * page_tokens * "
                             f"elem_bytes) must be a multiple of burst_bytes = "
                             f"{lay.burst_bytes}")
        pages = -(-lp.max_tokens // lay.page_tokens)
        region = max(lp.max_tokens * lay.stride(self.record_bytes_max),
                     pages * self.page_bytes)
        if region > 1 << lp.addr_width:
            raise ParamError(f"a region of max_tokens = {lp.max_tokens} records needs "
                             f"{region} B, more than the {lp.addr_width}-bit address space")

    # ------------------------------------------------------------------ bus
    @property
    def beat_bytes(self) -> int:
        return self.loader.beat_bytes

    @property
    def max_request_bytes(self) -> int:
        """Longest AXI request: ``max_burst_beats`` beats."""
        return self.loader.max_burst_beats * self.loader.beat_bytes

    # ------------------------------------------------------------------ records
    @property
    def record_bytes_max(self) -> int:
        """Largest record: a masked record keeping every element (mask + dense row)."""
        return self.layout.mask_bytes + self.layout.row_bytes

    @property
    def record_words(self) -> int:
        """Beats one record can span (start lane offset included)."""
        bb = self.beat_bytes
        max_off = bb - self.layout.align_bytes if self.layout.align_bytes < bb else 0
        return -(-(max_off + self.record_bytes_max) // bb)

    @property
    def lanes(self) -> int:
        """Elements the masked-record expander produces per cycle: ``gcd(d, beat / elem)``."""
        return math.gcd(self.layout.head_dim, self.beat_bytes // self.layout.elem_bytes)

    @property
    def expand_cycles(self) -> int:
        """Cycles to expand one masked record into a dense vector."""
        return self.layout.head_dim // self.lanes

    # ------------------------------------------------------------------ channel pages
    @property
    def page_bytes(self) -> int:
        return self.layout.head_dim * self.layout.channel_chunk_bytes

    @property
    def page_words(self) -> int:
        return self.page_bytes // self.beat_bytes

    @property
    def group_bytes(self) -> int:
        """Bytes of a chunk read as one unit: the chunk, or one burst of a longer chunk."""
        return min(self.layout.channel_chunk_bytes, self.layout.burst_bytes)

    @property
    def groups(self) -> int:
        """Token groups per chunk (chunks longer than a burst are read per burst)."""
        return self.layout.channel_chunk_bytes // self.group_bytes

    @property
    def group_tokens(self) -> int:
        return self.group_bytes // self.layout.elem_bytes

    # ------------------------------------------------------------------ buffers
    @property
    def buffer_words(self) -> int:
        """Beat-wide words of the shared record / page buffer."""
        return max(self.record_words, self.page_words)

    @property
    def entry_fifo_depth(self) -> int:
        """Depth of the FIFO of records / pages between address and data side.

        Enough for the records of ``max_outstanding + 1`` full requests at the smallest record
        stride (or page), plus two: the address side can then keep every allowed request in
        flight, and can never wait on the FIFO while the data side waits for a request that the
        address side has not issued yet (that needs ``ceil(request / unit) + 2``).
        """
        unit = min(self.layout.stride(self.layout.mask_bytes), self.page_bytes)
        per_request = -(-self.max_request_bytes // unit) + 1
        return (self.loader.max_outstanding + 1) * per_request + 2

    # ------------------------------------------------------------------ widths
    @property
    def index_width(self) -> int:
        return self.loader.index_width

    @property
    def beat_shift(self) -> int:
        return clog2(self.beat_bytes) if self.beat_bytes > 1 else 0

    @property
    def burst_shift(self) -> int:
        return clog2(self.layout.burst_bytes)
