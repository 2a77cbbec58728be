"""KV-cache methods and their operating points: HiKV's policy, the method names and the
label grammar (``h2o@256``, ``hikv-evict@256/v:static48``, ...).

Standard library only. :mod:`hikv.params` re-exports every name here, so
``from hikv.params import MethodSpec`` keeps working; new code may import from either.
Adding a method: docs/design.md, "Adding a KV method".
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from typing import Any

from .param_checks import ParamError, _enum, _int, _pow2

__all__ = ["Stage1Variant", "Stage1Scorer", "Stage2Kind", "Stage2Rule", "HiKVPolicy",
           "Method", "MethodSpec", "parse_method"]


# --------------------------------------------------------------------------- enums
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
    THINK = "think"                    # ThinK: top-r K channels per head, fixed after prefill


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
    STREAMING_LLM = "streamingllm"   # attention sinks + recent window
    TOVA = "tova"                    # evict the lowest attention of the current query
    ADAKV = "adakv"                  # per-head adaptive budgets under a layer budget
    G_ADAKV = "gadakv"               # one budget over all layers and KV heads
    PYRAMIDKV = "pyramidkv"          # per-layer budgets decreasing with depth
    HIKV = "hikv"


@dataclass(frozen=True)
class MethodSpec:
    """One method at one operating point.

    ``budget`` is the number of cached tokens attended per decode step (H2O, SnapKV: resident
    tokens; Quest: tokens in the selected pages; SparQ and Double Sparsity: rows fetched). For
    HiKV the budget and everything else come from ``hikv`` (use :meth:`for_hikv`).
    ``recent`` is H2O's recent window and the observation window of SnapKV, AdaKV, G-AdaKV and
    PyramidKV (all kept, so at most ``budget``). ``channels`` is SparQ's ``r`` and Double
    Sparsity's label channels. ``sinks`` is StreamingLLM's attention sinks (its recent window
    is ``budget - sinks``). ``averaged`` (H2O only) scores a token by its attention averaged
    over the queries that saw it, with no recent window (kvpress's ``ObservedAttentionPress``)
    instead of the accumulated sum.
    """

    method: Method = Method.FULL
    budget: int = 256
    recent: int = 32
    channels: int = 16
    page_tokens: int = 16
    label_bits: int = 16
    hikv: HiKVPolicy | None = None
    sinks: int = 4
    averaged: bool = False

    def __post_init__(self) -> None:
        o = "MethodSpec"
        _enum(o, "method", self.method, Method)
        _int(o, "budget", self.budget, 1)
        _int(o, "recent", self.recent, 0,
             self.budget if self.method.value in _WINDOWED else None)
        _int(o, "sinks", self.sinks, 0,
             self.budget if self.method is Method.STREAMING_LLM else None)
        if not isinstance(self.averaged, bool):
            raise ParamError(f"{o}.averaged = {self.averaged!r} must be a bool")
        if self.averaged and self.method is not Method.H2O:
            raise ParamError(f"{o}.averaged is only allowed for method 'h2o', "
                             f"not {self.method.value!r}")
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
        ``.../k:channel_groups32g8`` (32 channels kept in groups of 8), ``h2o@256/avg``
        (H2O's averaged score), ``streamingllm@256``, ``tova@256``, ``adakv@256``,
        ``gadakv@256``, ``pyramidkv@256``.

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
        if self.averaged:
            extra += "/avg"
        return f"{self.method.value}@{self.budget}{extra}"

    @classmethod
    def from_label(cls, text: str, policy: HiKVPolicy, head_dim: int) -> MethodSpec:
        """The spec :attr:`label` names, other fields from ``policy``: :func:`parse_method`."""
        return parse_method(text, policy, head_dim)


#: methods whose ``recent`` is a window kept whatever the scores (H2O's recent window, the
#: observation window of SnapKV and its adaptive-budget relatives)
_WINDOWED = frozenset({"h2o", "snapkv", "adakv", "gadakv", "pyramidkv"})
_DEFAULT_PAGE_TOKENS = 16
_FULL_LABEL_BITS = 16
_HIKV_RE = re.compile(r"^hikv-(?P<s1>[a-z_]+)(?:@(?P<b>\d+))?(?:/lowbit(?P<lb>\d+))?"
                      r"(?P<rest>(?:/[kv]:[a-z_]+\d+(?:g\d+)?)*)$")
_RULE_RE = re.compile(r"/(?P<t>[kv]):(?P<kind>[a-z_]+?)(?P<keep>\d+)(?:g(?P<g>\d+))?")
#: the baselines by label name: every method but full KV and HiKV
_BASELINE_METHODS = {m.value: m for m in Method if m not in (Method.FULL, Method.HIKV)}
_BASE_RE = re.compile(rf"^(?P<m>{'|'.join(_BASELINE_METHODS)})@(?P<b>\d+)(?:/p(?P<p>\d+))?"
                      r"(?:/r(?P<r>\d+))?(?:/b(?P<bits>\d+))?(?P<avg>/avg)?$")
#: Stage I names in HiKV labels; ``qa`` and ``query`` are old spellings of ``query_aware``
_S1_ALIASES = {"qa": "query_aware", "query": "query_aware", "query_aware": "query_aware",
               "evict": "evict", "none": "none"}
#: ThinK's readable alias: ``think@B/rR`` is ThinK on the evicting (SnapKV-seeded) Stage I at
#: budget ``B`` (``hikv-evict@B/k:thinkR``; ``B`` omitted: the policy's budget, ``R`` omitted:
#: ``head_dim / 2``). ThinK alone (every token kept) has no alias: ``hikv-none/k:thinkR``
_THINK_RE = re.compile(r"^think(?:@(?P<b>\d+))?(?:/r(?P<r>\d+))?$")


def parse_method(text: str, policy: HiKVPolicy, head_dim: int) -> MethodSpec:
    """A :class:`MethodSpec` from its :attr:`MethodSpec.label` (or an old spelling), such as
    ``full``, ``h2o@256``, ``h2o@256/avg``, ``sparq@256/r16``, ``ds@256/r16/b4``,
    ``quest@256/p4``, ``streamingllm@256``, ``tova@256``, ``adakv@256``, ``gadakv@256``,
    ``pyramidkv@256``,
    ``hikv-evict@256``, ``hikv-qa@256/v:static48``, ``hikv-query_aware@256/lowbit4``
    (query-aware Stage I scored by 4-bit keys instead of page bounds) or
    ``hikv-none/k:channel_groups32g8``. ThinK (key channels chosen once after prefill,
    docs/accuracy.md) is the Stage II kind ``think``: ``hikv-none/k:think32`` (ThinK alone),
    ``hikv-evict@256/k:think32`` (on the SnapKV-seeded evicting Stage I), which the alias
    ``think@256/r32`` names too (``/rR`` omitted: ``head_dim / 2``).

    The accuracy study's settings for what a label does not name: SparQ's and Double
    Sparsity's ``r`` default to ``head_dim / 4``, Double Sparsity's labels to 16 bits, Quest's
    pages to 16 tokens; H2O's recent window and the observation window of SnapKV, AdaKV,
    G-AdaKV and PyramidKV are ``policy.recent`` (at most half the budget; H2O's averaged
    variant has none); StreamingLLM's sinks are ``policy.sinks`` (at most the budget). HiKV
    labels take sinks, recent window, observation window, pooling and compaction interval from
    ``policy`` (and scorer and low-bit width when Stage I is not query-aware); Stage II rules
    come only from the label (absent = whole vectors).
    """
    t = text.strip()
    if t == "full":
        return MethodSpec()
    m = _THINK_RE.match(t)
    if m:
        r = int(m["r"]) if m["r"] else max(1, head_dim // 2)
        b = f"@{m['b']}" if m["b"] else ""
        return parse_method(f"hikv-evict{b}/k:{Stage2Kind.THINK.value}{r}", policy, head_dim)
    m = _BASE_RE.match(t)
    if m:
        method = _BASELINE_METHODS[m["m"]]
        r = int(m["r"]) if m["r"] else max(1, head_dim // 4)
        b = int(m["b"])
        if m["avg"] and method is not Method.H2O:
            raise ParamError(f"method {text!r}: '/avg' (averaged score) is only allowed for h2o")
        return MethodSpec(method=method, budget=b, channels=r,
                          recent=0 if m["avg"] else min(policy.recent, b // 2),
                          sinks=(min(policy.sinks, b) if method is Method.STREAMING_LLM
                                 else MethodSpec.sinks),
                          averaged=bool(m["avg"]),
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
    raise ParamError(f"method {text!r} is not a method label: use full, h2o@B[/avg], snapkv@B, "
                     "quest@B[/pP], sparq@B[/rR], ds@B[/rR][/bBITS], streamingllm@B, tova@B, "
                     "adakv@B, gadakv@B, pyramidkv@B, "
                     "hikv-{evict,query_aware,none}@B[/lowbitN]"
                     "[/k:{static,query_channels,channel_groups,think}N[gG]][/v:staticN], "
                     "think[@B][/rR]")
