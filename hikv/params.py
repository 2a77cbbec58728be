"""One source of truth for every HiKV parameter.

Frozen dataclasses, standard library only (importing this module pulls in neither Amaranth nor
torch). Each class validates itself in ``__post_init__`` and raises :class:`ParamError` with a
message naming the parameter, its value and the allowed range. Derived quantities (bit widths,
strides) are properties, never stored twice. Named presets live in :mod:`hikv.presets`.

Units are SI without prefixes unless the name says otherwise (``_bytes``, ``_bits``, ``_hz``,
``_s``, ``_nm``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
from dataclasses import dataclass, field
from typing import Any, Self

__all__ = [
    "ParamError",
    "KeyFormat",
    "RecordLayout",
    "KVLayout",
    "Stage1Variant",
    "Stage1Scorer",
    "Stage2Kind",
    "Stage2Rule",
    "HiKVPolicy",
    "SorterKind",
    "SorterParams",
    "LoaderParams",
    "loader_needs_channel_pages",
    "loader_needs_masked_records",
    "ScorerParams",
    "MemoryType",
    "AcceleratorParams",
    "ModelShape",
    "SyntheticWorkload",
    "ServingParams",
    "Method",
    "MethodSpec",
    "parse_method",
    "Config",
    "to_dict",
    "from_dict",
    "clog2",
]


from .method_spec import (  # noqa: F401  (re-exported: one definition, two import paths)
    HiKVPolicy,
    Method,
    MethodSpec,
    Stage1Scorer,
    Stage1Variant,
    Stage2Kind,
    Stage2Rule,
    parse_method,
)
from .param_checks import (  # noqa: F401
    INT_MAX,
    ParamError,
    check_bool,
    check_enum,
    check_int,
    check_name,
    check_num,
    check_pow2,
    clog2,
)


# --------------------------------------------------------------------------- enums
class KeyFormat(enum.Enum):
    """How a non-negative float becomes an unsigned sorter key (see hikv.model.refs.keys)."""

    FP16 = "fp16"   # IEEE binary16 bits, sign cleared; keys narrower than 16 bits keep the MSBs
    BF16 = "bf16"   # bfloat16 bits (fp32 truncated towards zero), sign cleared
    UINT = "uint"   # the value already is an unsigned integer < 2**key_width


class RecordLayout(enum.Enum):
    """How a KV array lies in external memory, per (layer, KV head)."""

    DENSE = "dense"                 # token-major rows of d elements
    MASKED_RECORD = "masked"        # per token: d-bit mask, then r compacted elements
    CHANNEL_PAGES = "channel_pages"  # pages of page_tokens tokens stored channel-major


class SorterKind(enum.Enum):
    """The engine of Stage I's top-k (docs/topk.md): the cost model, the area flow and the
    report price the one named; a policy with a Stage II rule runs Stage II beside the radix
    engine on the Stage II selection block (hikv.hw.stage2_select; both priced)."""

    MERGE = "merge"   # the reconfigurable merge sorter (hikv.hw.sorter): Stage I and Stage II
    RADIX = "radix"   # radix select (hikv.hw.topk) for Stage I, hikv.hw.stage2_select for II


class MemoryType(enum.Enum):
    HBM2 = "hbm2"
    LPDDR4 = "lpddr4"
    GDDR5 = "gddr5"
    DDR3 = "ddr3"


# --------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class KVLayout:
    """Element format and external-memory geometry of the KV cache of one (layer, KV head).

    ``burst_bytes`` is the memory's access granularity: a read of any byte of a burst-aligned
    block of ``burst_bytes`` costs the whole block. Records and rows start at multiples of
    ``align_bytes`` (a power of two; ``align_bytes == burst_bytes`` wastes no partial bursts at
    record starts, a small value packs records densely so neighbours share bursts).
    """

    head_dim: int = 64
    elem_bytes: int = 2
    burst_bytes: int = 64
    align_bytes: int = 64
    page_tokens: int = 16

    def __post_init__(self) -> None:
        o = "KVLayout"
        check_int(o, "head_dim", self.head_dim, 8, 1024)
        if self.head_dim % 8:
            raise ParamError(f"{o}.head_dim = {self.head_dim} must be a multiple of 8 "
                             "(the element mask is stored in whole bytes)")
        check_int(o, "elem_bytes", self.elem_bytes, 1, 4)
        check_pow2(o, "elem_bytes", self.elem_bytes)
        check_int(o, "burst_bytes", self.burst_bytes, 4, 4096)
        check_pow2(o, "burst_bytes", self.burst_bytes)
        check_int(o, "align_bytes", self.align_bytes, 1, 4096)
        check_pow2(o, "align_bytes", self.align_bytes)
        check_int(o, "page_tokens", self.page_tokens, 1, 1024)
        check_pow2(o, "page_tokens", self.page_tokens)

    @property
    def row_bytes(self) -> int:
        """Bytes of one dense K or V vector."""
        return self.head_dim * self.elem_bytes

    @property
    def mask_bytes(self) -> int:
        return self.head_dim // 8

    def record_bytes(self, kept: int) -> int:
        """Bytes of a masked record keeping ``kept`` elements: mask then compacted elements."""
        check_int("KVLayout.record_bytes", "kept", kept, 0, self.head_dim)
        return self.mask_bytes + kept * self.elem_bytes

    def stride(self, payload_bytes: int) -> int:
        """Distance between consecutive records of ``payload_bytes`` (rounded up to alignment)."""
        return -(-payload_bytes // self.align_bytes) * self.align_bytes

    @property
    def channel_chunk_bytes(self) -> int:
        """One channel of one page in the channel-major page layout."""
        return self.page_tokens * self.elem_bytes


# --------------------------------------------------------------------------- hardware
@dataclass(frozen=True)
class SorterParams:
    """Reconfigurable importance sorter, fixed at elaboration."""

    lanes: int = 8          # P: keys accepted per cycle
    key_width: int = 16     # W
    max_n: int = 4096       # longest Stage I stream
    max_k: int = 512        # largest Stage I k
    max_vec: int = 128      # longest Stage II vector (d)
    kind: SorterKind = SorterKind.MERGE   # Stage I engine: merge sorter or radix select
    digit_bits: int = 4     # b: radix-select digit (2^b - 1 counters; min(b, W) is used)

    def __post_init__(self) -> None:
        o = "SorterParams"
        check_int(o, "lanes", self.lanes, 2, 64)
        check_pow2(o, "lanes", self.lanes)
        check_int(o, "key_width", self.key_width, 1, 32)
        check_int(o, "max_n", self.max_n, 2, 1 << 20)
        check_int(o, "max_k", self.max_k, 1, self.max_n)
        check_int(o, "max_vec", self.max_vec, 2, 4096)
        check_enum(o, "kind", self.kind, SorterKind)
        check_int(o, "digit_bits", self.digit_bits, 1, 8)

    @property
    def index_width(self) -> int:
        """Bits of a token index (Stage I) or element index (Stage II)."""
        return max(clog2(self.max_n), clog2(self.max_vec))

    @property
    def count_width(self) -> int:
        """Bits of a count up to ``max_n`` inclusive."""
        return (self.max_n).bit_length()


@dataclass(frozen=True)
class LoaderParams:
    """Two-level KV loader: AXI4 read master geometry.

    ``channel_pages`` builds the channel-page (transposed) read path: a page buffer of
    ``head_dim x page_tokens`` elements read out token-major. Only a Stage II rule that selects
    K channels per query needs it (:func:`loader_needs_channel_pages`); without it the loader
    answers a channel-page job with ``status.cfg_error`` and reads it as dense rows.
    ``masked_records`` builds the masked-record path: records of a mask and the kept elements
    (a buffer one mask longer, the expander that scatters ``lanes`` elements per cycle back to
    their channels). Only a Stage II rule that stores masked records needs it
    (:func:`loader_needs_masked_records`); without it a masked job is answered the same way.
    """

    addr_width: int = 32
    data_width: int = 128       # AXI data bus, bits
    max_burst_beats: int = 16   # AXI4 INCR allows up to 256
    max_outstanding: int = 4
    id_width: int = 4
    max_tokens: int = 4096      # longest token stream of one job
    channel_pages: bool = True  # elaborate the channel-page (transpose) path
    masked_records: bool = True  # elaborate the masked-record path (mask + expander)

    def __post_init__(self) -> None:
        o = "LoaderParams"
        check_int(o, "addr_width", self.addr_width, 12, 64)
        check_int(o, "data_width", self.data_width, 8, 1024)
        check_pow2(o, "data_width", self.data_width)
        check_int(o, "max_burst_beats", self.max_burst_beats, 1, 256)
        check_int(o, "max_outstanding", self.max_outstanding, 1, 64)
        check_int(o, "id_width", self.id_width, 1, 16)
        check_int(o, "max_tokens", self.max_tokens, 1, 1 << 20)
        if not isinstance(self.channel_pages, bool):
            raise ParamError(f"{o}.channel_pages must be True or False, not "
                             f"{self.channel_pages!r}")
        if not isinstance(self.masked_records, bool):
            raise ParamError(f"{o}.masked_records must be True or False, not "
                             f"{self.masked_records!r}")

    def builds(self, layout: RecordLayout) -> bool:
        """Whether this loader is built for jobs of ``layout``: dense rows always, masked
        records with ``masked_records``, channel pages with ``channel_pages``."""
        return {RecordLayout.MASKED_RECORD: self.masked_records,
                RecordLayout.CHANNEL_PAGES: self.channel_pages}.get(layout, True)

    @property
    def beat_bytes(self) -> int:
        return self.data_width // 8

    @property
    def axsize(self) -> int:
        """AXI ARSIZE encoding of a full-width beat."""
        return clog2(self.beat_bytes) if self.beat_bytes > 1 else 0

    @property
    def index_width(self) -> int:
        """Bits of a token slot index below ``max_tokens`` (the loader's token input)."""
        return clog2(self.max_tokens)


def loader_needs_channel_pages(policy: HiKVPolicy) -> bool:
    """Whether ``policy`` reads K as channel pages (its K Stage II rule selects channels per
    query: ``QUERY_CHANNELS`` or ``CHANNEL_GROUPS``), so the loader must be built with
    ``LoaderParams.channel_pages``."""
    return policy.k_rule.kind in (Stage2Kind.QUERY_CHANNELS, Stage2Kind.CHANNEL_GROUPS)


def loader_needs_masked_records(policy: HiKVPolicy) -> bool:
    """Whether ``policy`` stores masked records (a ``STATIC`` Stage II rule on K or V: a mask
    and the kept elements per token), so the loader must be built with
    ``LoaderParams.masked_records``."""
    return Stage2Kind.STATIC in (policy.k_rule.kind, policy.v_rule.kind)


@dataclass(frozen=True)
class ScorerParams:
    """Low-bit scoring unit (Stage I scores from b-bit keys; ``hikv.hw.scorer``).

    The key bits are ``policy.lowbit_bits`` and the head size ``layout.head_dim`` (not repeated
    here); the query enters as ``query_bits``-bit signed integers (:mod:`hikv.model.refs.lowbit`).
    """

    lanes: int = 8          # L: tokens scored per cycle
    query_bits: int = 8     # signed integer query element

    def __post_init__(self) -> None:
        o = "ScorerParams"
        check_int(o, "lanes", self.lanes, 1, 64)
        check_int(o, "query_bits", self.query_bits, 2, 16)


_TECH_NODES_NM = (45, 28, 16, 7)
#: the clocked parts of the accelerator the cost model times (hikv.sim.cost.clocks): the baseline's
#: PE array (MAC and softmax lanes) and HiKV's sorter, loader and low-bit scoring unit
CLOCK_BLOCKS = ("pe_array", "sorter", "loader", "scorer")
#: ``per_block``: every block at its own clock; ``single``: the whole accelerator at the
#: slowest block's clock
CLOCK_POLICIES = ("per_block", "single")


@dataclass(frozen=True)
class AcceleratorParams:
    """The attention accelerator HiKV sits in (and the baseline without HiKV).

    Clocks (:mod:`hikv.sim.cost.clocks`): ``clock_hz`` is the *assumed* clock, used for a block
    whose clock is neither given nor estimated (no synthesis allowed: the report says "assumed, not
    checked"). ``<block>_clock_hz`` (``pe_array``, ``sorter``, ``loader``, ``scorer``) set a block's
    clock by hand, 0 = from the timing flow's ASIC estimate at ``tech_nm``
    (:func:`hikv.sim.eda.sta.block_clock`); a hand-set clock needs ``clock_source`` (where the
    number comes from). ``clock_policy``: one of :data:`CLOCK_POLICIES`.
    """

    clock_hz: float = 1.0e9
    pe_lanes: int = 64               # MACs per cycle for q.K and p.V
    softmax_lanes: int = 16          # exponentials per cycle
    sram_kv_bytes: int = 256 * 1024  # on-chip K/V buffer
    sram_q_bytes: int = 16 * 1024
    memory: MemoryType = MemoryType.HBM2
    mem_bandwidth_bytes_per_s: float = 256e9
    mem_latency_s: float = 100e-9
    tech_nm: int = 28
    device_memory_bytes: int = 24 * 2**30   # serving: KV + weights + workspace
    linear_flops_per_s: float = 100e12      # serving: dense-layer throughput of the device
    clock_policy: str = "per_block"
    pe_array_clock_hz: float = 0.0   # 0: from the timing flow (else clock_hz, assumed)
    sorter_clock_hz: float = 0.0
    loader_clock_hz: float = 0.0
    scorer_clock_hz: float = 0.0
    clock_source: str = ""           # where hand-set <block>_clock_hz values come from

    def __post_init__(self) -> None:
        o = "AcceleratorParams"
        check_num(o, "clock_hz", self.clock_hz, 0, lo_open=True)
        if self.clock_policy not in CLOCK_POLICIES:
            raise ParamError(f"{o}.clock_policy = {self.clock_policy!r} is not one of "
                             f"{CLOCK_POLICIES}")
        for b in CLOCK_BLOCKS:
            check_num(o, f"{b}_clock_hz", getattr(self, f"{b}_clock_hz"), 0, 100e9)
        if not isinstance(self.clock_source, str):
            raise ParamError(f"{o}.clock_source must be a string, not {self.clock_source!r}")
        given = [b for b in CLOCK_BLOCKS if getattr(self, f"{b}_clock_hz") > 0]
        if given and not self.clock_source.strip():
            raise ParamError(f"{o}.clock_source must say where the hand-set clock(s) "
                             f"{', '.join(f'{b}_clock_hz' for b in given)} come from "
                             "(e.g. 'place and route of our netlist, ss corner'); allowed: a "
                             "non-empty string")
        check_int(o, "pe_lanes", self.pe_lanes, 1, 1 << 16)
        check_int(o, "softmax_lanes", self.softmax_lanes, 1, 1 << 16)
        check_int(o, "sram_kv_bytes", self.sram_kv_bytes, 1024)
        check_int(o, "sram_q_bytes", self.sram_q_bytes, 64)
        check_enum(o, "memory", self.memory, MemoryType)
        check_num(o, "mem_bandwidth_bytes_per_s", self.mem_bandwidth_bytes_per_s, 0, lo_open=True)
        check_num(o, "mem_latency_s", self.mem_latency_s, 0)
        if self.tech_nm not in _TECH_NODES_NM:
            raise ParamError(f"AcceleratorParams.tech_nm = {self.tech_nm!r} is not one of "
                             f"{_TECH_NODES_NM}")
        check_int(o, "device_memory_bytes", self.device_memory_bytes, 1 << 20)
        check_num(o, "linear_flops_per_s", self.linear_flops_per_s, 0, lo_open=True)


@dataclass(frozen=True)
class ModelShape:
    """Transformer shape as far as KV cache, attention and serving need it."""

    name: str = "smollm2-135m"
    layers: int = 30
    q_heads: int = 9
    kv_heads: int = 3
    head_dim: int = 64
    hidden: int = 576
    intermediate: int = 1536
    vocab: int = 49152
    weight_bytes_per_param: float = 2.0
    tied_embeddings: bool = True

    def __post_init__(self) -> None:
        o = "ModelShape"
        check_name(o, "name", self.name)
        check_int(o, "layers", self.layers, 1, 1024)
        check_int(o, "q_heads", self.q_heads, 1, 1024)
        check_int(o, "kv_heads", self.kv_heads, 1, self.q_heads)
        if self.q_heads % self.kv_heads:
            raise ParamError(f"{o}.kv_heads = {self.kv_heads} must divide "
                             f"{o}.q_heads = {self.q_heads}")
        check_int(o, "head_dim", self.head_dim, 8, 1024)
        check_int(o, "hidden", self.hidden, 8)
        check_int(o, "intermediate", self.intermediate, 8)
        check_int(o, "vocab", self.vocab, 2)
        check_num(o, "weight_bytes_per_param", self.weight_bytes_per_param, 0, 8, lo_open=True)
        check_bool(o, "tied_embeddings", self.tied_embeddings)

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA)."""
        return self.q_heads // self.kv_heads

    @property
    def params(self) -> int:
        """Weight count: attention projections, gated MLP, embedding (and LM head if untied)."""
        attn = self.hidden * self.head_dim * (2 * self.q_heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        embed = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * (attn + mlp) + embed

    @property
    def weight_bytes(self) -> int:
        return int(self.params * self.weight_bytes_per_param)


# --------------------------------------------------------------------------- serving
@dataclass(frozen=True)
class SyntheticWorkload:
    """Poisson arrivals with lognormal prompt and output lengths (``hikv serve --rate``).

    Lengths are ``round(exp(N(ln median, sigma^2)))`` clipped to ``[1, max_*_tokens]``; the
    default medians and sigmas are those of the Azure LLM conversation trace (2023).
    """

    rate_per_s: float = 5.0
    requests: int = 2000
    prompt_median_tokens: float = 1020.0
    prompt_sigma: float = 0.99
    output_median_tokens: float = 129.0
    output_sigma: float = 0.86
    max_prompt_tokens: int = 16384
    max_output_tokens: int = 1024

    def __post_init__(self) -> None:
        o = "SyntheticWorkload"
        check_num(o, "rate_per_s", self.rate_per_s, 0, lo_open=True)
        check_int(o, "requests", self.requests, 1, 1 << 24)
        check_num(o, "prompt_median_tokens", self.prompt_median_tokens, 1)
        check_num(o, "prompt_sigma", self.prompt_sigma, 0, 10)
        check_num(o, "output_median_tokens", self.output_median_tokens, 1)
        check_num(o, "output_sigma", self.output_sigma, 0, 10)
        check_int(o, "max_prompt_tokens", self.max_prompt_tokens, 1, 1 << 24)
        check_int(o, "max_output_tokens", self.max_output_tokens, 1, 1 << 24)


@dataclass(frozen=True)
class ServingParams:
    """Iteration-level serving of one replica (hikv.sim.serving.engine, docs/serving.md).

    ``policy`` names a scheduler of :data:`hikv.sim.serving.scheduler.POLICIES`. Each iteration
    schedules at most ``max_batched_tokens`` tokens and at most ``max_running`` sequences. KV lives
    in blocks of ``block_tokens`` tokens of full KV (all layers and KV heads); KV capacity is
    device memory minus weights minus ``workspace_bytes``. Goodput counts a request as good
    when its TTFT <= ``ttft_slo_s`` and its TPOT <= ``tpot_slo_s``, and is the highest rate at
    which a fraction ``slo_attainment`` of requests is good. The Little's-law check skips
    ``steady_trim`` of the arrival span at each end (warm-up and drain).
    """

    policy: str = "vllm-v1"
    max_batched_tokens: int = 8192
    max_running: int = 256
    block_tokens: int = 16
    workspace_bytes: int = 1 << 30
    ttft_slo_s: float = 1.0
    tpot_slo_s: float = 0.1
    slo_attainment: float = 0.9
    steady_trim: float = 0.1
    synthetic: SyntheticWorkload = field(default_factory=SyntheticWorkload)

    def __post_init__(self) -> None:
        o = "ServingParams"
        check_name(o, "policy", self.policy)
        check_int(o, "max_batched_tokens", self.max_batched_tokens, 1, 1 << 24)
        check_int(o, "max_running", self.max_running, 1, 1 << 20)
        check_int(o, "block_tokens", self.block_tokens, 1, 4096)
        check_int(o, "workspace_bytes", self.workspace_bytes, 0)
        check_num(o, "ttft_slo_s", self.ttft_slo_s, 0, lo_open=True)
        check_num(o, "tpot_slo_s", self.tpot_slo_s, 0, lo_open=True)
        check_num(o, "slo_attainment", self.slo_attainment, 0, 1, lo_open=True)
        check_num(o, "steady_trim", self.steady_trim, 0, 0.45)
        if not isinstance(self.synthetic, SyntheticWorkload):
            raise ParamError(f"{o}.synthetic must be a SyntheticWorkload, "
                             f"not {self.synthetic!r}")


@dataclass(frozen=True)
class RooflineEfficiency:
    """Achieved efficiencies for the serving roofline (``--cost-model roofline-eff`` and
    ``attention-model-eff``, :mod:`hikv.sim.serving.device`).

    GEMMs run at ``compute_fraction`` of ``linear_flops_per_s`` or ``bandwidth_fraction`` of
    the memory bandwidth (weight reads); the non-GEMM operators of a layer (norms, rotary
    embedding, activation, residual add) move their activation bytes at
    ``elementwise_bandwidth_fraction`` of the bandwidth plus ``elementwise_fixed_s`` per layer
    and iteration; attention kernels reach ``attention_compute_fraction`` (prefill) and
    ``attention_bandwidth_fraction`` (decode) plus ``attention_fixed_s`` per layer and kernel.
    Defaults: :func:`hikv.sim.serving.device.derive_efficiency` of the measured A100 Llama-3-8B
    profile (Vidur ``mlp.csv``) and the fitted A100 attention kernels, rounded to two
    significant digits (``tests/test_device.py`` recomputes them).
    """

    compute_fraction: float = 0.73
    bandwidth_fraction: float = 0.76
    elementwise_bandwidth_fraction: float = 0.47
    elementwise_fixed_s: float = 26e-6
    attention_compute_fraction: float = 0.58
    attention_bandwidth_fraction: float = 0.72
    attention_fixed_s: float = 15e-6

    def __post_init__(self) -> None:
        o = "RooflineEfficiency"
        for name in ("compute_fraction", "bandwidth_fraction", "elementwise_bandwidth_fraction",
                     "attention_compute_fraction", "attention_bandwidth_fraction"):
            check_num(o, name, getattr(self, name), 0, 1, lo_open=True)
        check_num(o, "elementwise_fixed_s", self.elementwise_fixed_s, 0, 1)
        check_num(o, "attention_fixed_s", self.attention_fixed_s, 0, 1)


# --------------------------------------------------------------------------- config
@dataclass(frozen=True)
class Config:
    """Everything one experiment needs; presets are instances of this."""

    name: str = "default"
    layout: KVLayout = field(default_factory=KVLayout)
    policy: HiKVPolicy = field(default_factory=HiKVPolicy)
    sorter: SorterParams = field(default_factory=SorterParams)
    loader: LoaderParams = field(default_factory=LoaderParams)
    scorer: ScorerParams = field(default_factory=ScorerParams)
    accel: AcceleratorParams = field(default_factory=AcceleratorParams)
    model: ModelShape = field(default_factory=ModelShape)
    key_format: KeyFormat = KeyFormat.FP16
    context: int = 2048   # N: prompt tokens of the operating point
    serving: ServingParams = field(default_factory=ServingParams)

    def __post_init__(self) -> None:
        o = "Config"
        check_enum(o, "key_format", self.key_format, KeyFormat)
        check_int(o, "context", self.context, 1)
        if self.layout.head_dim != self.model.head_dim:
            raise ParamError(f"{o}.layout.head_dim = {self.layout.head_dim} must equal "
                             f"{o}.model.head_dim = {self.model.head_dim}")
        self.policy.check_head_dim(self.layout.head_dim)
        if self.sorter.max_vec < self.layout.head_dim:
            raise ParamError(f"{o}.sorter.max_vec = {self.sorter.max_vec} must be >= "
                             f"head_dim = {self.layout.head_dim} (Stage II sorts one vector)")
        if self.key_format is KeyFormat.FP16 and self.sorter.key_width > 16:
            raise ParamError(f"{o}.sorter.key_width = {self.sorter.key_width} must be <= 16 "
                             "for key_format 'fp16'")
        if self.key_format is KeyFormat.BF16 and self.sorter.key_width > 16:
            raise ParamError(f"{o}.sorter.key_width = {self.sorter.key_width} must be <= 16 "
                             "for key_format 'bf16'")
        if self.loader.beat_bytes > self.layout.burst_bytes:
            raise ParamError(f"{o}.loader.data_width = {self.loader.data_width} bits is wider "
                             f"than one burst of layout.burst_bytes = {self.layout.burst_bytes}")
        self._check_fits_hardware()
        kv_room = (self.accel.device_memory_bytes - self.model.weight_bytes
                   - self.serving.workspace_bytes)
        if kv_room <= 0:
            raise ParamError(f"{o}.serving.workspace_bytes = {self.serving.workspace_bytes} "
                             f"leaves no KV memory: device_memory_bytes = "
                             f"{self.accel.device_memory_bytes} minus weights "
                             f"{self.model.weight_bytes} must exceed it")

    def _check_fits_hardware(self) -> None:
        """The operating point fits the sorter and the loader this configuration builds."""
        o = "Config"
        p, st, ld, lay = self.policy, self.sorter, self.loader, self.layout
        if p.budget > st.max_k:
            raise ParamError(f"{o}.policy.budget = {p.budget} exceeds {o}.sorter.max_k = "
                             f"{st.max_k}: the sorter cannot select the budget's tokens")
        if self.context > st.max_n:
            raise ParamError(f"{o}.context = {self.context} exceeds {o}.sorter.max_n = "
                             f"{st.max_n}: the sorter cannot score every cached token")
        if self.context > ld.max_tokens:
            raise ParamError(f"{o}.context = {self.context} exceeds {o}.loader.max_tokens = "
                             f"{ld.max_tokens}: the loader cannot take every cached token")
        region = max(self.context * lay.stride(lay.row_bytes),
                     -(-self.context // lay.page_tokens) * lay.head_dim * lay.channel_chunk_bytes)
        if region > 1 << ld.addr_width:
            raise ParamError(f"{o}.context = {self.context} tokens need a KV region of {region} "
                             f"B, more than {o}.loader.addr_width = {ld.addr_width} bits address")

    def replace(self, **changes: Any) -> Self:
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------- JSON
def to_dict(obj: Any) -> Any:
    """Plain JSON-able structure of a parameter object (enums and methods become their
    values)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (enum.Enum, Method)):
        return obj.value
    return obj


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Inverse of :func:`to_dict`; unknown keys are an error, missing keys take defaults."""
    if not isinstance(data, dict):
        raise ParamError(f"{cls.__name__} expects a JSON object, not {type(data).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ParamError(f"{cls.__name__} has no parameter(s) {unknown}; "
                         f"known: {sorted(names)}")
    hints = _field_types(cls)
    kwargs = {}
    for key, value in data.items():
        typ = _strip_optional(hints[key]) if value is not None else None
        if isinstance(typ, type) and dataclasses.is_dataclass(typ):
            kwargs[key] = from_dict(typ, value)
        elif isinstance(typ, type) and issubclass(typ, (enum.Enum, Method)):
            try:
                kwargs[key] = typ(value)
            except ValueError:
                allowed = ", ".join(repr(m.value) for m in typ)
                raise ParamError(f"{cls.__name__}.{key} = {value!r} is not one of: "
                                 f"{allowed}") from None
        else:
            kwargs[key] = value
    return cls(**kwargs)


def _strip_optional(typ: Any) -> Any:
    """``X | None`` -> ``X``; other types unchanged."""
    args = [a for a in getattr(typ, "__args__", ()) if a is not type(None)]
    if isinstance(typ, types.UnionType) and len(args) == 1:
        return args[0]
    return typ


def _field_types(cls: type) -> dict[str, Any]:
    import typing

    return typing.get_type_hints(cls)


def config_to_json(cfg: Config, indent: int | None = 2) -> str:
    return json.dumps(to_dict(cfg), indent=indent, sort_keys=True)


def config_from_json(text: str) -> Config:
    return from_dict(Config, json.loads(text))
