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
import math
import re
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
    "SorterParams",
    "LoaderParams",
    "loader_needs_channel_pages",
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


class ParamError(ValueError):
    """A parameter is out of its allowed range; the message names it."""


def clog2(n: int) -> int:
    """Bits needed to index ``n`` items (at least 1)."""
    return max(1, math.ceil(math.log2(n))) if n > 1 else 1


# --------------------------------------------------------------------------- checks
#: Largest integer any parameter takes: the models compute in int64 arrays.
INT_MAX = 2**62


def _int(owner: str, name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParamError(f"{owner}.{name} must be an integer, not {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ParamError(f"{owner}.{name} = {value} is out of range: allowed {rng}")
    if value > INT_MAX:
        raise ParamError(f"{owner}.{name} = {value} is out of range: allowed [{lo}, {INT_MAX}] "
                         "(a 64-bit integer)")


def _pow2(owner: str, name: str, value: int) -> None:
    if value & (value - 1):
        raise ParamError(f"{owner}.{name} = {value} must be a power of two")


def _num(owner: str, name: str, value: Any, lo: float, hi: float | None = None,
         lo_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ParamError(f"{owner}.{name} must be a finite number, not {value!r}")
    if isinstance(value, int) and abs(value) > INT_MAX:
        raise ParamError(f"{owner}.{name} = {value} is out of range: allowed magnitude <= "
                         f"{INT_MAX} for an integer (write it as a float, e.g. 1e30)")
    bad_lo = value <= lo if lo_open else value < lo
    if bad_lo or (hi is not None and value > hi):
        left = "(" if lo_open else "["
        rng = f"{left}{lo}, {hi}]" if hi is not None else (f"> {lo}" if lo_open else f">= {lo}")
        raise ParamError(f"{owner}.{name} = {value} is out of range: allowed {rng}")


def _enum(owner: str, name: str, value: Any, cls: type[enum.Enum]) -> None:
    if not isinstance(value, cls):
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ParamError(f"{owner}.{name} = {value!r} is not one of: {allowed}")


# --------------------------------------------------------------------------- enums
class KeyFormat(enum.Enum):
    """How a non-negative float becomes an unsigned sorter key (see hikv.model.keys)."""

    FP16 = "fp16"   # IEEE binary16 bits, sign cleared; keys narrower than 16 bits keep the MSBs
    BF16 = "bf16"   # bfloat16 bits (fp32 truncated towards zero), sign cleared
    UINT = "uint"   # the value already is an unsigned integer < 2**key_width


class RecordLayout(enum.Enum):
    """How a KV array lies in external memory, per (layer, KV head)."""

    DENSE = "dense"                 # token-major rows of d elements
    MASKED_RECORD = "masked"        # per token: d-bit mask, then r compacted elements
    CHANNEL_PAGES = "channel_pages"  # pages of page_tokens tokens stored channel-major


class Stage1Variant(enum.Enum):
    NONE = "none"                # keep every token (Stage II only)
    EVICT = "evict"              # capacity: sinks + recent + top importance, evicted for good
    QUERY_AWARE = "query_aware"  # bandwidth: keep all, load the per-step top-B


class Stage1Scorer(enum.Enum):
    """Metadata the query-aware Stage I scores tokens with."""

    PAGE_BOUNDS = "page_bounds"  # per-page channel min/max of K (Quest-style upper bound)
    LOWBIT_KEYS = "lowbit_keys"  # per-token keys quantised to `lowbit_bits` bits


class Stage2Kind(enum.Enum):
    NONE = "none"                      # whole vectors
    STATIC = "static"                  # top-r by |x| per vector, chosen at write time
    QUERY_CHANNELS = "query_channels"  # top-r channels of |q| per head and step (K only)
    CHANNEL_GROUPS = "channel_groups"  # query-aware, groups of burst-aligned channels (K only)


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
        _int(o, "head_dim", self.head_dim, 8, 1024)
        if self.head_dim % 8:
            raise ParamError(f"{o}.head_dim = {self.head_dim} must be a multiple of 8 "
                             "(the element mask is stored in whole bytes)")
        _int(o, "elem_bytes", self.elem_bytes, 1, 4)
        _pow2(o, "elem_bytes", self.elem_bytes)
        _int(o, "burst_bytes", self.burst_bytes, 4, 4096)
        _pow2(o, "burst_bytes", self.burst_bytes)
        _int(o, "align_bytes", self.align_bytes, 1, 4096)
        _pow2(o, "align_bytes", self.align_bytes)
        _int(o, "page_tokens", self.page_tokens, 1, 1024)
        _pow2(o, "page_tokens", self.page_tokens)

    @property
    def row_bytes(self) -> int:
        """Bytes of one dense K or V vector."""
        return self.head_dim * self.elem_bytes

    @property
    def mask_bytes(self) -> int:
        return self.head_dim // 8

    def record_bytes(self, kept: int) -> int:
        """Bytes of a masked record keeping ``kept`` elements: mask then compacted elements."""
        _int("KVLayout.record_bytes", "kept", kept, 0, self.head_dim)
        return self.mask_bytes + kept * self.elem_bytes

    def stride(self, payload_bytes: int) -> int:
        """Distance between consecutive records of ``payload_bytes`` (rounded up to alignment)."""
        return -(-payload_bytes // self.align_bytes) * self.align_bytes

    @property
    def channel_chunk_bytes(self) -> int:
        """One channel of one page in the channel-major page layout."""
        return self.page_tokens * self.elem_bytes


# --------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class Stage2Rule:
    """Stage II element rule for K or for V: which elements of a retained vector are read."""

    kind: Stage2Kind = Stage2Kind.NONE
    keep: int = 0          # elements (channels) kept out of head_dim; ignored for NONE
    group: int = 8         # channels per group for CHANNEL_GROUPS

    def __post_init__(self) -> None:
        o = "Stage2Rule"
        _enum(o, "kind", self.kind, Stage2Kind)
        _int(o, "keep", self.keep, 0, 1024)
        _int(o, "group", self.group, 1, 1024)
        if self.kind is not Stage2Kind.NONE and self.keep < 1:
            raise ParamError(f"{o}.keep = {self.keep} must be >= 1 for kind {self.kind.value!r}")
        if self.kind is Stage2Kind.CHANNEL_GROUPS and self.keep % self.group:
            raise ParamError(f"{o}.keep = {self.keep} must be a multiple of "
                             f"{o}.group = {self.group} for channel groups")

    def kept(self, head_dim: int) -> int:
        return head_dim if self.kind is Stage2Kind.NONE else self.keep


@dataclass(frozen=True)
class HiKVPolicy:
    """HiKV's two stages. Budget ``B`` = sinks ``S`` + recent ``R`` + ``B-S-R`` important tokens.

    Evicting Stage I lets the cache grow to ``B + Δ`` during decode and compacts it back to ``B``
    every ``Δ`` = ``compact_interval`` steps (Δ = 1 evicts every step, as H2O does).
    """

    budget: int = 256
    sinks: int = 4
    recent: int = 32
    obs_window: int = 32
    pool_kernel: int = 7
    compact_interval: int = 16
    # defaults = what the accuracy study measured best (docs/RESULTS.md): query-aware Stage I
    # scored by 4-bit keys; no Stage II (with 64-byte aligned records it saves no burst bytes)
    stage1: Stage1Variant = Stage1Variant.QUERY_AWARE
    scorer: Stage1Scorer = Stage1Scorer.LOWBIT_KEYS
    lowbit_bits: int = 4
    k_rule: Stage2Rule = field(default_factory=Stage2Rule)
    v_rule: Stage2Rule = field(default_factory=Stage2Rule)

    def __post_init__(self) -> None:
        o = "HiKVPolicy"
        _int(o, "budget", self.budget, 1)
        _int(o, "sinks", self.sinks, 0, self.budget)
        _int(o, "recent", self.recent, 0, self.budget - self.sinks)
        _int(o, "obs_window", self.obs_window, 1, 4096)
        _int(o, "pool_kernel", self.pool_kernel, 1, 63)
        if self.pool_kernel % 2 == 0:
            raise ParamError(f"{o}.pool_kernel = {self.pool_kernel} must be odd")
        _int(o, "compact_interval", self.compact_interval, 1, 65536)
        _enum(o, "stage1", self.stage1, Stage1Variant)
        _enum(o, "scorer", self.scorer, Stage1Scorer)
        _int(o, "lowbit_bits", self.lowbit_bits, 1, 8)
        if not isinstance(self.k_rule, Stage2Rule) or not isinstance(self.v_rule, Stage2Rule):
            raise ParamError(f"{o}.k_rule and {o}.v_rule must be Stage2Rule instances")
        if self.v_rule.kind not in (Stage2Kind.NONE, Stage2Kind.STATIC):
            raise ParamError(f"{o}.v_rule.kind = {self.v_rule.kind.value!r} is not allowed: "
                             "V has no query, allowed 'none', 'static'")

    @property
    def forced(self) -> int:
        """Tokens Stage I keeps whatever their importance: the sinks and the recent window.
        The query-aware Stage I always attends the current token, so its window holds at least
        one token (``S + max(R, 1)``); the evicting one keeps ``S + R``."""
        r = max(self.recent, 1) if self.stage1 is Stage1Variant.QUERY_AWARE else self.recent
        return self.sinks + r

    def important_tokens(self, budget: Any = None) -> Any:
        """Stage I's ``k``: tokens chosen by importance, ``B -`` :attr:`forced` (at least 0).

        The one definition used by the golden model, the closed forms and the sorter jobs.
        ``budget`` overrides ``B`` and may be a numpy array (design points)."""
        k = (self.budget if budget is None else budget) - self.forced
        return k * (k > 0)

    @property
    def important(self) -> int:
        """:meth:`important_tokens` at the policy's budget."""
        return int(self.important_tokens())

    def check_head_dim(self, head_dim: int) -> None:
        for name, rule in (("k_rule", self.k_rule), ("v_rule", self.v_rule)):
            if rule.kind is not Stage2Kind.NONE:
                _int(f"HiKVPolicy.{name}", "keep", rule.keep, 1, head_dim)
                if rule.kind is Stage2Kind.CHANNEL_GROUPS and head_dim % rule.group:
                    raise ParamError(f"HiKVPolicy.{name}.group = {rule.group} must divide "
                                     f"head_dim = {head_dim}")


class Method(enum.Enum):
    """KV-cache methods the golden model implements (docs/design.md, "Baselines")."""

    FULL = "full"
    H2O = "h2o"
    SNAPKV = "snapkv"
    QUEST = "quest"
    SPARQ = "sparq"
    DOUBLE_SPARSITY = "ds"
    HIKV = "hikv"


@dataclass(frozen=True)
class MethodSpec:
    """One method at one operating point.

    ``budget`` is the number of cached tokens attended per decode step (H2O, SnapKV: resident
    tokens; Quest: tokens in the selected pages; SparQ and Double Sparsity: rows fetched). For
    HiKV the budget and everything else come from ``hikv`` (use :meth:`for_hikv`).
    ``recent`` is H2O's recent window and SnapKV's observation window (both kept, so at most
    ``budget``). ``channels`` is SparQ's ``r`` and Double Sparsity's label channels.
    """

    method: Method = Method.FULL
    budget: int = 256
    recent: int = 32
    channels: int = 16
    page_tokens: int = 16
    label_bits: int = 16
    hikv: HiKVPolicy | None = None

    def __post_init__(self) -> None:
        o = "MethodSpec"
        _enum(o, "method", self.method, Method)
        _int(o, "budget", self.budget, 1)
        _int(o, "recent", self.recent, 0,
             self.budget if self.method in (Method.H2O, Method.SNAPKV) else None)
        _int(o, "channels", self.channels, 1, 1024)
        _int(o, "page_tokens", self.page_tokens, 1, 1024)
        _pow2(o, "page_tokens", self.page_tokens)
        if self.label_bits not in (2, 4, 8, 16):
            raise ParamError(f"{o}.label_bits = {self.label_bits!r} is not one of (2, 4, 8, 16)")
        if self.method is Method.HIKV:
            if not isinstance(self.hikv, HiKVPolicy):
                raise ParamError(f"{o}.hikv must be a HiKVPolicy for method 'hikv' "
                                 "(use MethodSpec.for_hikv(policy))")
            if self.budget != self.hikv.budget:
                raise ParamError(f"{o}.budget = {self.budget} must equal "
                                 f"{o}.hikv.budget = {self.hikv.budget} for method 'hikv'")
        elif self.hikv is not None:
            raise ParamError(f"{o}.hikv is only allowed for method 'hikv', "
                             f"not {self.method.value!r}")

    @classmethod
    def for_hikv(cls, policy: HiKVPolicy) -> MethodSpec:
        return cls(method=Method.HIKV, budget=policy.budget, recent=policy.recent, hikv=policy)

    @property
    def label(self) -> str:
        """Short name that :meth:`from_label` (:func:`parse_method`) turns back into this spec,
        e.g. ``full``, ``h2o@256``, ``quest@256/p4`` (pages of 4 tokens; 16 unnamed),
        ``ds@256/r16/b4`` (16 label channels of 4 bits; 16 bits unnamed),
        ``hikv-query_aware@256/lowbit4`` (query-aware Stage I scored by 4-bit keys),
        ``.../k:channel_groups32g8`` (32 channels kept in groups of 8).

        Fields the label does not name are those :func:`parse_method` derives from a policy
        (recent and observation windows, HiKV's sinks, pooling, compaction interval), so two
        specs of one policy differ in their labels."""
        if self.method is Method.HIKV:
            p = self.hikv
            assert p is not None
            parts = [f"hikv-{p.stage1.value}@{p.budget}"]
            if p.stage1 is Stage1Variant.QUERY_AWARE and p.scorer is Stage1Scorer.LOWBIT_KEYS:
                parts.append(f"lowbit{p.lowbit_bits}")
            for n, r in (("k", p.k_rule), ("v", p.v_rule)):
                if r.kind is not Stage2Kind.NONE:
                    g = f"g{r.group}" if r.kind is Stage2Kind.CHANNEL_GROUPS else ""
                    parts.append(f"{n}:{r.kind.value}{r.keep}{g}")
            return "/".join(parts)
        if self.method is Method.FULL:
            return "full"
        extra = ""
        if self.method is Method.QUEST and self.page_tokens != _DEFAULT_PAGE_TOKENS:
            extra += f"/p{self.page_tokens}"
        if self.method in (Method.SPARQ, Method.DOUBLE_SPARSITY):
            extra += f"/r{self.channels}"
        if self.method is Method.DOUBLE_SPARSITY and self.label_bits != _FULL_LABEL_BITS:
            extra += f"/b{self.label_bits}"
        return f"{self.method.value}@{self.budget}{extra}"

    @classmethod
    def from_label(cls, text: str, policy: HiKVPolicy, head_dim: int) -> MethodSpec:
        """The spec :attr:`label` names, other fields from ``policy``: :func:`parse_method`."""
        return parse_method(text, policy, head_dim)


_DEFAULT_PAGE_TOKENS = 16
_FULL_LABEL_BITS = 16
_HIKV_RE = re.compile(r"^hikv-(?P<s1>[a-z_]+)(?:@(?P<b>\d+))?(?:/lowbit(?P<lb>\d+))?"
                      r"(?P<rest>(?:/[kv]:[a-z_]+\d+(?:g\d+)?)*)$")
_RULE_RE = re.compile(r"/(?P<t>[kv]):(?P<kind>[a-z_]+?)(?P<keep>\d+)(?:g(?P<g>\d+))?")
#: the baselines by label name: every method but full KV and HiKV
_BASELINE_METHODS = {m.value: m for m in Method if m not in (Method.FULL, Method.HIKV)}
_BASE_RE = re.compile(rf"^(?P<m>{'|'.join(_BASELINE_METHODS)})@(?P<b>\d+)(?:/p(?P<p>\d+))?"
                      r"(?:/r(?P<r>\d+))?(?:/b(?P<bits>\d+))?$")
#: Stage I names in HiKV labels; ``qa`` and ``query`` are old spellings of ``query_aware``
_S1_ALIASES = {"qa": "query_aware", "query": "query_aware", "query_aware": "query_aware",
               "evict": "evict", "none": "none"}


def parse_method(text: str, policy: HiKVPolicy, head_dim: int) -> MethodSpec:
    """A :class:`MethodSpec` from its :attr:`MethodSpec.label` (or an old spelling), such as
    ``full``, ``h2o@256``, ``sparq@256/r16``, ``ds@256/r16/b4``, ``quest@256/p4``,
    ``hikv-evict@256``, ``hikv-qa@256/v:static48``, ``hikv-query_aware@256/lowbit4``
    (query-aware Stage I scored by 4-bit keys instead of page bounds) or
    ``hikv-none/k:channel_groups32g8``.

    The accuracy study's settings for what a label does not name: SparQ's and Double
    Sparsity's ``r`` default to ``head_dim / 4``, Double Sparsity's labels to 16 bits, Quest's
    pages to 16 tokens; H2O's recent window and SnapKV's observation window are
    ``policy.recent`` (at most half the budget). HiKV labels take sinks, recent window,
    observation window, pooling and compaction interval from ``policy`` (and scorer and
    low-bit width when Stage I is not query-aware); Stage II rules come only from the label
    (absent = whole vectors).
    """
    t = text.strip()
    if t == "full":
        return MethodSpec()
    m = _BASE_RE.match(t)
    if m:
        method = _BASELINE_METHODS[m["m"]]
        r = int(m["r"]) if m["r"] else max(1, head_dim // 4)
        b = int(m["b"])
        return MethodSpec(method=method, budget=b, channels=r,
                          recent=min(policy.recent, b // 2),
                          page_tokens=int(m["p"]) if m["p"] else _DEFAULT_PAGE_TOKENS,
                          label_bits=int(m["bits"]) if m["bits"] else _FULL_LABEL_BITS)
    m = _HIKV_RE.match(t)
    if m:
        s1 = _S1_ALIASES.get(m["s1"])
        if s1 is None:
            raise ParamError(f"method {text!r}: Stage I {m['s1']!r} is not one of "
                             f"{sorted(_S1_ALIASES)}")
        budget = int(m["b"]) if m["b"] else policy.budget
        rules = {"k": Stage2Rule(), "v": Stage2Rule()}
        for r in _RULE_RE.finditer(m["rest"]):
            try:
                kind = Stage2Kind(r["kind"])
            except ValueError:
                raise ParamError(f"method {text!r}: Stage II kind {r['kind']!r} is not one of "
                                 f"{[k.value for k in Stage2Kind]}") from None
            group = int(r["g"]) if r["g"] else Stage2Rule().group
            rules[r["t"]] = Stage2Rule(kind, int(r["keep"]), group)
        recent = min(policy.recent, max(0, budget - policy.sinks))
        if Stage1Variant(s1) is Stage1Variant.QUERY_AWARE:
            scorer = Stage1Scorer.LOWBIT_KEYS if m["lb"] else Stage1Scorer.PAGE_BOUNDS
        else:
            scorer = policy.scorer
        bits = int(m["lb"]) if m["lb"] else policy.lowbit_bits
        pol = dataclasses.replace(policy, budget=budget, recent=recent,
                                  stage1=Stage1Variant(s1), k_rule=rules["k"],
                                  v_rule=rules["v"], scorer=scorer, lowbit_bits=bits)
        pol.check_head_dim(head_dim)
        return MethodSpec.for_hikv(pol)
    raise ParamError(f"method {text!r} is not a method label: use full, h2o@B, snapkv@B, "
                     "quest@B[/pP], sparq@B[/rR], ds@B[/rR][/bBITS], "
                     "hikv-{evict,query_aware,none}@B[/lowbitN]"
                     "[/k:{static,query_channels,channel_groups}N[gG]][/v:staticN]")


# --------------------------------------------------------------------------- hardware
@dataclass(frozen=True)
class SorterParams:
    """Reconfigurable importance sorter, fixed at elaboration."""

    lanes: int = 8          # P: keys accepted per cycle
    key_width: int = 16     # W
    max_n: int = 4096       # longest Stage I stream
    max_k: int = 512        # largest Stage I k
    max_vec: int = 128      # longest Stage II vector (d)

    def __post_init__(self) -> None:
        o = "SorterParams"
        _int(o, "lanes", self.lanes, 2, 64)
        _pow2(o, "lanes", self.lanes)
        _int(o, "key_width", self.key_width, 1, 32)
        _int(o, "max_n", self.max_n, 2, 1 << 20)
        _int(o, "max_k", self.max_k, 1, self.max_n)
        _int(o, "max_vec", self.max_vec, 2, 4096)

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
    """

    addr_width: int = 32
    data_width: int = 128       # AXI data bus, bits
    max_burst_beats: int = 16   # AXI4 INCR allows up to 256
    max_outstanding: int = 4
    id_width: int = 4
    max_tokens: int = 4096      # longest token stream of one job
    channel_pages: bool = True  # elaborate the channel-page (transpose) path

    def __post_init__(self) -> None:
        o = "LoaderParams"
        _int(o, "addr_width", self.addr_width, 12, 64)
        _int(o, "data_width", self.data_width, 8, 1024)
        _pow2(o, "data_width", self.data_width)
        _int(o, "max_burst_beats", self.max_burst_beats, 1, 256)
        _int(o, "max_outstanding", self.max_outstanding, 1, 64)
        _int(o, "id_width", self.id_width, 1, 16)
        _int(o, "max_tokens", self.max_tokens, 1, 1 << 20)
        if not isinstance(self.channel_pages, bool):
            raise ParamError(f"{o}.channel_pages must be True or False, not "
                             f"{self.channel_pages!r}")

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


@dataclass(frozen=True)
class ScorerParams:
    """Low-bit scoring unit (Stage I scores from b-bit keys; ``hikv.hw.scorer``).

    The key bits are ``policy.lowbit_bits`` and the head size ``layout.head_dim`` (not repeated
    here); the query enters as ``query_bits``-bit signed integers (:mod:`hikv.model.lowbit`).
    """

    lanes: int = 8          # L: tokens scored per cycle
    query_bits: int = 8     # signed integer query element

    def __post_init__(self) -> None:
        o = "ScorerParams"
        _int(o, "lanes", self.lanes, 1, 64)
        _int(o, "query_bits", self.query_bits, 2, 16)


_TECH_NODES_NM = (45, 28, 16, 7)


@dataclass(frozen=True)
class AcceleratorParams:
    """The attention accelerator HiKV sits in (and the baseline without HiKV)."""

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

    def __post_init__(self) -> None:
        o = "AcceleratorParams"
        _num(o, "clock_hz", self.clock_hz, 0, lo_open=True)
        _int(o, "pe_lanes", self.pe_lanes, 1, 1 << 16)
        _int(o, "softmax_lanes", self.softmax_lanes, 1, 1 << 16)
        _int(o, "sram_kv_bytes", self.sram_kv_bytes, 1024)
        _int(o, "sram_q_bytes", self.sram_q_bytes, 64)
        _enum(o, "memory", self.memory, MemoryType)
        _num(o, "mem_bandwidth_bytes_per_s", self.mem_bandwidth_bytes_per_s, 0, lo_open=True)
        _num(o, "mem_latency_s", self.mem_latency_s, 0)
        if self.tech_nm not in _TECH_NODES_NM:
            raise ParamError(f"AcceleratorParams.tech_nm = {self.tech_nm!r} is not one of "
                             f"{_TECH_NODES_NM}")
        _int(o, "device_memory_bytes", self.device_memory_bytes, 1 << 20)
        _num(o, "linear_flops_per_s", self.linear_flops_per_s, 0, lo_open=True)


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
        if not isinstance(self.name, str) or not self.name:
            raise ParamError(f"{o}.name must be a non-empty string, not {self.name!r}")
        _int(o, "layers", self.layers, 1, 1024)
        _int(o, "q_heads", self.q_heads, 1, 1024)
        _int(o, "kv_heads", self.kv_heads, 1, self.q_heads)
        if self.q_heads % self.kv_heads:
            raise ParamError(f"{o}.kv_heads = {self.kv_heads} must divide "
                             f"{o}.q_heads = {self.q_heads}")
        _int(o, "head_dim", self.head_dim, 8, 1024)
        _int(o, "hidden", self.hidden, 8)
        _int(o, "intermediate", self.intermediate, 8)
        _int(o, "vocab", self.vocab, 2)
        _num(o, "weight_bytes_per_param", self.weight_bytes_per_param, 0, 8, lo_open=True)
        if not isinstance(self.tied_embeddings, bool):
            raise ParamError(f"{o}.tied_embeddings must be true or false, "
                             f"not {self.tied_embeddings!r}")

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
        _num(o, "rate_per_s", self.rate_per_s, 0, lo_open=True)
        _int(o, "requests", self.requests, 1, 1 << 24)
        _num(o, "prompt_median_tokens", self.prompt_median_tokens, 1)
        _num(o, "prompt_sigma", self.prompt_sigma, 0, 10)
        _num(o, "output_median_tokens", self.output_median_tokens, 1)
        _num(o, "output_sigma", self.output_sigma, 0, 10)
        _int(o, "max_prompt_tokens", self.max_prompt_tokens, 1, 1 << 24)
        _int(o, "max_output_tokens", self.max_output_tokens, 1, 1 << 24)


@dataclass(frozen=True)
class ServingParams:
    """Iteration-level serving of one replica (hikv.sim.serving, docs/serving.md).

    ``policy`` names a scheduler of :data:`hikv.sim.scheduler.POLICIES`. Each iteration
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
        if not isinstance(self.policy, str) or not self.policy:
            raise ParamError(f"{o}.policy must be a non-empty string, not {self.policy!r}")
        _int(o, "max_batched_tokens", self.max_batched_tokens, 1, 1 << 24)
        _int(o, "max_running", self.max_running, 1, 1 << 20)
        _int(o, "block_tokens", self.block_tokens, 1, 4096)
        _int(o, "workspace_bytes", self.workspace_bytes, 0)
        _num(o, "ttft_slo_s", self.ttft_slo_s, 0, lo_open=True)
        _num(o, "tpot_slo_s", self.tpot_slo_s, 0, lo_open=True)
        _num(o, "slo_attainment", self.slo_attainment, 0, 1, lo_open=True)
        _num(o, "steady_trim", self.steady_trim, 0, 0.45)
        if not isinstance(self.synthetic, SyntheticWorkload):
            raise ParamError(f"{o}.synthetic must be a SyntheticWorkload, "
                             f"not {self.synthetic!r}")


@dataclass(frozen=True)
class RooflineEfficiency:
    """Achieved efficiencies for the serving roofline (``--cost-model roofline-eff`` and
    ``attention-model-eff``, :mod:`hikv.sim.device`).

    GEMMs run at ``compute_fraction`` of ``linear_flops_per_s`` or ``bandwidth_fraction`` of
    the memory bandwidth (weight reads); the non-GEMM operators of a layer (norms, rotary
    embedding, activation, residual add) move their activation bytes at
    ``elementwise_bandwidth_fraction`` of the bandwidth plus ``elementwise_fixed_s`` per layer
    and iteration; attention kernels reach ``attention_compute_fraction`` (prefill) and
    ``attention_bandwidth_fraction`` (decode) plus ``attention_fixed_s`` per layer and kernel.
    Defaults: :func:`hikv.sim.device.derive_efficiency` of the measured A100 Llama-3-8B
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
            _num(o, name, getattr(self, name), 0, 1, lo_open=True)
        _num(o, "elementwise_fixed_s", self.elementwise_fixed_s, 0, 1)
        _num(o, "attention_fixed_s", self.attention_fixed_s, 0, 1)


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
        _enum(o, "key_format", self.key_format, KeyFormat)
        _int(o, "context", self.context, 1)
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
    """Plain JSON-able structure of a parameter object (enums become their values)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
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
        elif isinstance(typ, type) and issubclass(typ, enum.Enum):
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
