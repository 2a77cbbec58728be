"""KV-cache methods and their operating points: HiKV's policy, the built-in methods, the
method registry and the label grammar (``h2o@256``, ``hikv-evict@256/v:static48``, ...).

A method is one :class:`MethodInfo` (name, label options, which :class:`MethodSpec` fields it
uses) given to :func:`register_method`: the built-in ones here
(:data:`BUILTIN_METHODS`), a method of one's own wherever it is defined; its closed form
(:mod:`hikv.sim.cost.closed_form_baselines`, :mod:`hikv.sim.cost.closed_form_hikv`) and its
golden class (:mod:`hikv.model.methods.registry`) name it (``method = Method.<ATTR>``).
:class:`Method` is built from the registry (:mod:`hikv.method_registry`), and
:class:`MethodSpec` checks, spells and parses (:func:`parse_method`) a spec by it. Standard
library only. :mod:`hikv.params` re-exports the names most code uses, so
``from hikv.params import MethodSpec`` works too; code may import from either.
Adding a method: docs/design.md, "Adding a KV method".
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass, field
from typing import Any

from .param_checks import ParamError, check_bool, check_enum, check_int, check_pow2

__all__ = ["Stage1Variant", "Stage1Scorer", "Stage2Kind", "Stage2Rule", "HiKVPolicy",
           "LABEL_FIELDS", "LabelOption", "LabelGrammar", "MethodInfo", "Method",
           "register_method", "register_class", "unregister_method", "MethodSpec",
           "parse_method", "HIKV_GRAMMAR", "BUILTIN_METHODS"]


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
        check_enum(o, "kind", self.kind, Stage2Kind)
        check_int(o, "keep", self.keep, 0, 1024)
        check_int(o, "group", self.group, 1, 1024)
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
    # channels the low-bit scorer keys hold (0: every one of head_dim); fewer are chosen per
    # KV head once, at the end of prefill, as Double Sparsity calibrates its label channels
    lowbit_channels: int = 0

    def __post_init__(self) -> None:
        o = "HiKVPolicy"
        check_int(o, "budget", self.budget, 1)
        check_int(o, "sinks", self.sinks, 0, self.budget)
        check_int(o, "recent", self.recent, 0, self.budget - self.sinks)
        check_int(o, "obs_window", self.obs_window, 1, 4096)
        check_int(o, "pool_kernel", self.pool_kernel, 1, 63)
        if self.pool_kernel % 2 == 0:
            raise ParamError(f"{o}.pool_kernel = {self.pool_kernel} must be odd")
        check_int(o, "compact_interval", self.compact_interval, 1, 65536)
        check_enum(o, "stage1", self.stage1, Stage1Variant)
        check_enum(o, "scorer", self.scorer, Stage1Scorer)
        check_int(o, "lowbit_bits", self.lowbit_bits, 1, 8)
        check_int(o, "lowbit_channels", self.lowbit_channels, 0, 1024)
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

    def scored_channels(self, head_dim: Any) -> Any:
        """Channels of each low-bit scorer key: ``lowbit_channels``, or ``head_dim`` when 0."""
        return self.lowbit_channels or head_dim

    def check_head_dim(self, head_dim: int) -> None:
        check_int("HiKVPolicy", "lowbit_channels", self.lowbit_channels, 0, head_dim)
        for name, rule in (("k_rule", self.k_rule), ("v_rule", self.v_rule)):
            if rule.kind is not Stage2Kind.NONE:
                check_int(f"HiKVPolicy.{name}", "keep", rule.keep, 1, head_dim)
                if rule.kind is Stage2Kind.CHANNEL_GROUPS and head_dim % rule.group:
                    raise ParamError(f"HiKVPolicy.{name}.group = {rule.group} must divide "
                                     f"head_dim = {head_dim}")


# --------------------------------------------------------------------------- method registry
from .method_registry import (  # noqa: E402, F401  (re-exported: one definition, two paths)
    LABEL_FIELDS,
    LabelGrammar,
    LabelOption,
    Method,
    MethodInfo,
    register_class,
    register_method,
    unregister_method,
)


@dataclass(frozen=True)
class MethodSpec:
    """One method at one operating point.

    ``budget`` is the number of cached tokens attended per decode step (H2O, SnapKV: resident
    tokens; Quest: tokens in the selected pages; SparQ and Double Sparsity: rows fetched). For
    HiKV the budget and everything else come from ``hikv`` (use :meth:`for_hikv`).
    ``recent`` is H2O's recent window and the observation window of SnapKV, AdaKV, G-AdaKV and
    PyramidKV (all kept, so at most ``budget``; :attr:`MethodInfo.windowed`). ``channels`` is
    SparQ's ``r`` and Double Sparsity's label channels. ``sinks`` is StreamingLLM's attention
    sinks (its recent window is ``budget - sinks``). ``averaged`` (H2O only) scores a token by
    its attention averaged over the queries that saw it, with no recent window (kvpress's
    ``ObservedAttentionPress``) instead of the accumulated sum. Which method uses which field,
    and how its label spells it, is the method's :class:`MethodInfo`.
    """

    method: Method = field(default_factory=lambda: Method.FULL)
    budget: int = 256
    recent: int = LABEL_FIELDS["recent"]
    channels: int = LABEL_FIELDS["channels"]
    page_tokens: int = LABEL_FIELDS["page_tokens"]
    label_bits: int = LABEL_FIELDS["label_bits"]
    hikv: HiKVPolicy | None = None
    sinks: int = LABEL_FIELDS["sinks"]
    averaged: bool = LABEL_FIELDS["averaged"]

    def __post_init__(self) -> None:
        o = "MethodSpec"
        check_enum(o, "method", self.method, Method)
        info = self.method.info
        check_int(o, "budget", self.budget, 1)
        check_int(o, "recent", self.recent, 0, self.budget if info.windowed else None)
        check_int(o, "sinks", self.sinks, 0, self.budget if info.sinks else None)
        check_bool(o, "averaged", self.averaged)
        if self.averaged:
            _check_flag(o, "averaged", self.method)
        check_int(o, "channels", self.channels, 1, 1024)
        check_int(o, "page_tokens", self.page_tokens, 1, 1024)
        check_pow2(o, "page_tokens", self.page_tokens)
        if self.label_bits not in (2, 4, 8, 16):
            raise ParamError(f"{o}.label_bits = {self.label_bits!r} is not one of (2, 4, 8, 16)")
        if info.policy:
            if not isinstance(self.hikv, HiKVPolicy):
                raise ParamError(f"{o}.hikv must be a HiKVPolicy for method {info.name!r} "
                                 "(use MethodSpec.for_hikv(policy))")
            if self.budget != self.hikv.budget:
                raise ParamError(f"{o}.budget = {self.budget} must equal "
                                 f"{o}.hikv.budget = {self.hikv.budget} for method "
                                 f"{info.name!r}")
        elif self.hikv is not None:
            raise ParamError(f"{o}.hikv is only allowed for method "
                             f"{_users('policy')}, not {info.name!r}")

    @classmethod
    def for_hikv(cls, policy: HiKVPolicy) -> MethodSpec:
        return cls(method=Method.HIKV, budget=policy.budget, recent=policy.recent, hikv=policy)

    @property
    def label(self) -> str:
        """Short name that :meth:`from_label` (:func:`parse_method`) turns back into this spec,
        e.g. ``full``, ``h2o@256``, ``quest@256/p4`` (pages of 4 tokens; 16 unnamed),
        ``ds@256/r16/b4`` (16 label channels of 4 bits; 16 bits unnamed),
        ``hikv-query_aware@256/lowbit4`` (query-aware Stage I scored by 4-bit keys;
        ``lowbit4c32``: keys of 32 calibrated channels),
        ``.../k:channel_groups32g8`` (32 channels kept in groups of 8), ``h2o@256/avg``
        (H2O's averaged score), ``streamingllm@256``, ``tova@256``, ``adakv@256``,
        ``gadakv@256``, ``pyramidkv@256``: ``name@B`` and the options of the method's
        :class:`MethodInfo` (or its :class:`LabelGrammar`).

        Fields the label does not name are those :func:`parse_method` derives from a policy
        (recent and observation windows, HiKV's sinks, pooling, compaction interval), so two
        specs of one policy differ in their labels."""
        info = self.method.info
        if info.grammar is not None:
            return info.grammar.label(self)
        if not info.budgeted:
            return info.name
        return f"{info.name}@{self.budget}" + "".join(o.spelt(self) for o in info.options)

    @classmethod
    def from_label(cls, text: str, policy: HiKVPolicy, head_dim: int) -> MethodSpec:
        """The spec :attr:`label` names, other fields from ``policy``: :func:`parse_method`."""
        return parse_method(text, policy, head_dim)


def _users(what: str) -> str:
    """The methods whose :class:`MethodInfo` sets ``what`` (an attribute, or ``"/key"`` for a
    label option), quoted, for error messages."""
    if what.startswith("/"):
        users = [m for m in Method if any(o.key == what[1:] for o in m.info.options)]
    else:
        users = [m for m in Method if getattr(m.info, what)]
    return ", ".join(repr(m.value) for m in users) or "(none)"


def _check_flag(owner: str, name: str, method: Method) -> None:
    """``name`` (a flag field set to ``True``) must be an option of ``method``."""
    if not any(o.flag and o.field == name for o in method.info.options):
        users = [m for m in Method if any(o.flag and o.field == name for o in m.info.options)]
        raise ParamError(f"{owner}.{name} is only allowed for method "
                         f"{', '.join(repr(m.value) for m in users) or '(none)'}, "
                         f"not {method.value!r}")


def _hikv_label(spec: MethodSpec) -> str:
    p = spec.hikv
    assert p is not None
    parts = [f"hikv-{p.stage1.value}@{p.budget}"]
    if p.stage1 is Stage1Variant.QUERY_AWARE and p.scorer is Stage1Scorer.LOWBIT_KEYS:
        parts.append(f"lowbit{p.lowbit_bits}" + (f"c{p.lowbit_channels}"
                                                 if p.lowbit_channels else ""))
    for n, r in (("k", p.k_rule), ("v", p.v_rule)):
        if r.kind is not Stage2Kind.NONE:
            g = f"g{r.group}" if r.kind is Stage2Kind.CHANNEL_GROUPS else ""
            parts.append(f"{n}:{r.kind.value}{r.keep}{g}")
    return "/".join(parts)


_HIKV_RE = re.compile(r"^hikv-(?P<s1>[a-z_]+)(?:@(?P<b>\d+))?"
                      r"(?:/lowbit(?P<lb>\d+)(?:c(?P<lc>\d+))?)?"
                      r"(?P<rest>(?:/[kv]:[a-z_]+\d+(?:g\d+)?)*)$")
_RULE_RE = re.compile(r"/(?P<t>[kv]):(?P<kind>[a-z_]+?)(?P<keep>\d+)(?:g(?P<g>\d+))?")
#: Stage I names in HiKV labels; ``qa`` and ``query`` are old spellings of ``query_aware``
_S1_ALIASES = {"qa": "query_aware", "query": "query_aware", "query_aware": "query_aware",
               "evict": "evict", "none": "none"}
#: ThinK's readable alias: ``think@B/rR`` is ThinK on the evicting (SnapKV-seeded) Stage I at
#: budget ``B`` (``hikv-evict@B/k:thinkR``; ``B`` omitted: the policy's budget, ``R`` omitted:
#: ``head_dim / 2``). ThinK alone (every token kept) has no alias: ``hikv-none/k:thinkR``
_THINK_RE = re.compile(r"^think(?:@(?P<b>\d+))?(?:/r(?P<r>\d+))?$")


def _parse_hikv(text: str, policy: HiKVPolicy, head_dim: int) -> MethodSpec | None:
    """HiKV's labels (and ThinK's alias), or ``None`` when ``text`` is none of them."""
    m = _THINK_RE.match(text)
    if m:
        r = int(m["r"]) if m["r"] else max(1, head_dim // 2)
        b = f"@{m['b']}" if m["b"] else ""
        return _parse_hikv(f"hikv-evict{b}/k:{Stage2Kind.THINK.value}{r}", policy, head_dim)
    m = _HIKV_RE.match(text)
    if not m:
        return None
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
    chans = int(m["lc"]) if m["lc"] else 0 if m["lb"] else policy.lowbit_channels
    pol = dataclasses.replace(policy, budget=budget, recent=recent,
                              stage1=Stage1Variant(s1), k_rule=rules["k"],
                              v_rule=rules["v"], scorer=scorer, lowbit_bits=bits,
                              lowbit_channels=chans)
    pol.check_head_dim(head_dim)
    return MethodSpec.for_hikv(pol)


#: HiKV's label grammar (HiKV's :class:`MethodInfo` in :data:`BUILTIN_METHODS`)
HIKV_GRAMMAR = LabelGrammar(
    label=_hikv_label, parse=_parse_hikv,
    usage="hikv-{evict,query_aware,none}@B[/lowbitN[cC]]"
          "[/k:{static,query_channels,channel_groups,think}N[gG]][/v:staticN], think[@B][/rR]")

_BASE_RE = re.compile(r"^(?P<m>[a-z][a-z0-9]*)@(?P<b>\d+)(?P<rest>(?:/[a-z]+\d*)*)$")
_OPT_RE = re.compile(r"/(?P<key>[a-z]+)(?P<n>\d*)")


def _parse_options(text: str, method: Method, rest: str, head_dim: int) -> dict[str, Any]:
    """The fields the label's options (``/p4/avg``) set, absent ones at their defaults."""
    info = method.info
    given: dict[str, Any] = {}
    implied: dict[str, Any] = {}
    for tok in _OPT_RE.finditer(rest):
        key, n = tok["key"], tok["n"]
        opt = next((o for o in info.options if o.key == key), None)
        if opt is None:
            users = [(x, o) for x in Method for o in x.info.options if o.key == key]
            if users:
                doc = f" ({users[0][1].doc})" if users[0][1].doc else ""
                raise ParamError(f"method {text!r}: '/{key}'{doc} is only allowed for "
                                 f"{', '.join(x.value for x, _ in users)}")
            raise ParamError(f"method {text!r}: '/{key}' is not an option of {info.name!r} "
                             f"(its label: {info.usage})")
        if opt.field in given:
            raise ParamError(f"method {text!r}: '/{key}' is given twice")
        if opt.flag != (n == ""):
            form = f"/{key}" if opt.flag else f"/{key}{opt.metavar or 'N'}"
            raise ParamError(f"method {text!r}: write the option as '{form}'")
        given[opt.field] = True if opt.flag else int(n)
        if opt.flag:
            implied.update(opt.implies)
    fields = {o.field: o.absent(head_dim) for o in info.options}
    return {**fields, **given, **implied}


def _study_defaults(method: Method, budget: int, policy: HiKVPolicy,
                    head_dim: int) -> dict[str, Any]:
    """What a ``name@B`` label leaves to the accuracy study's settings, whatever the method
    uses: windows ``min(policy.recent, B / 2)``, ``r = head_dim / 4``, sinks
    ``min(policy.sinks, B)`` for methods that keep sinks (:attr:`MethodInfo.sinks`)."""
    return {"recent": min(policy.recent, budget // 2), "channels": max(1, head_dim // 4),
            "sinks": min(policy.sinks, budget) if method.info.sinks else MethodSpec.sinks}


def parse_method(text: str, policy: HiKVPolicy, head_dim: int) -> MethodSpec:
    """A :class:`MethodSpec` from its :attr:`MethodSpec.label` (or an old spelling), such as
    ``full``, ``h2o@256``, ``h2o@256/avg``, ``sparq@256/r16``, ``ds@256/r16/b4``,
    ``quest@256/p4``, ``streamingllm@256``, ``tova@256``, ``adakv@256``, ``gadakv@256``,
    ``pyramidkv@256``,
    ``hikv-evict@256``, ``hikv-qa@256/v:static48``, ``hikv-query_aware@256/lowbit4``
    (query-aware Stage I scored by 4-bit keys instead of page bounds; ``/lowbit4c32``: keys of
    32 channels per KV head, chosen at the end of prefill) or
    ``hikv-none/k:channel_groups32g8``. ThinK (key channels chosen once after prefill,
    docs/accuracy.md) is the Stage II kind ``think``: ``hikv-none/k:think32`` (ThinK alone),
    ``hikv-evict@256/k:think32`` (on the SnapKV-seeded evicting Stage I), which the alias
    ``think@256/r32`` names too (``/rR`` omitted: ``head_dim / 2``). Every registered method
    is accepted, by its :class:`MethodInfo`.

    The accuracy study's settings for what a label does not name: SparQ's and Double
    Sparsity's ``r`` default to ``head_dim / 4``, Double Sparsity's labels to 16 bits, Quest's
    pages to 16 tokens (each :class:`LabelOption`'s default); H2O's recent window and the
    observation window of SnapKV, AdaKV, G-AdaKV and PyramidKV are ``policy.recent`` (at most
    half the budget; H2O's averaged variant has none); StreamingLLM's sinks are
    ``policy.sinks`` (at most the budget). HiKV labels take sinks, recent window, observation
    window, pooling and compaction interval from ``policy`` (and scorer and low-bit width when
    Stage I is not query-aware); Stage II rules come only from the label (absent = whole
    vectors).
    """
    t = text.strip()
    methods = list(Method)
    for method in methods:
        info = method.info
        if info.grammar is not None:
            spec = info.grammar.parse(t, policy, head_dim)
            if spec is not None:
                return spec
        elif not info.budgeted and t == info.name:
            return MethodSpec(method=method)
    m = _BASE_RE.match(t)
    by_name = {x.value: x for x in methods if x.info.budgeted and x.info.grammar is None}
    if m and m["m"] in by_name:
        method = by_name[m["m"]]
        b = int(m["b"])
        fields = {**_study_defaults(method, b, policy, head_dim),
                  **_parse_options(t, method, m["rest"], head_dim)}
        return MethodSpec(method=method, budget=b, **fields)
    raise ParamError(f"method {text!r} is not a method label: use "
                     f"{', '.join(x.info.usage for x in methods)}")


# --------------------------------------------------------------------------- built-in methods
#: The built-in methods, registered when this module is imported, so that :class:`Method` knows
#: them wherever a :class:`MethodSpec` is made (standard library only). Their closed forms
#: (:mod:`hikv.sim.cost.closed_form_baselines`, :mod:`hikv.sim.cost.closed_form_hikv`) and
#: golden classes (:mod:`hikv.model.methods.baselines`, :mod:`hikv.model.methods.hikv`, ...)
#: name them: ``method = Method.<ATTR>``. ``order`` is the place in tables.
BUILTIN_METHODS: tuple[Method, ...] = tuple(register_method(info) for info in (
    MethodInfo("full", "FULL", "full KV", budgeted=False, order=0),
    MethodInfo("h2o", "H2O", "heavy hitters + recent window", windowed=True, order=1,
               options=(LabelOption("avg", "averaged", flag=True, implies=(("recent", 0),),
                                    doc="averaged score"),)),
    MethodInfo("streamingllm", "STREAMING_LLM", "StreamingLLM", sinks=True, order=6),
    MethodInfo("tova", "TOVA", "TOVA", order=7),
    MethodInfo("snapkv", "SNAPKV", "SnapKV", windowed=True, order=2),
    MethodInfo("adakv", "ADAKV", "AdaKV", windowed=True, order=8),
    MethodInfo("gadakv", "G_ADAKV", "G-AdaKV", windowed=True, order=9),
    MethodInfo("pyramidkv", "PYRAMIDKV", "PyramidKV", windowed=True, order=10),
    MethodInfo("quest", "QUEST", "Quest", order=3,
               options=(LabelOption("p", "page_tokens", "P", doc="tokens per page"),)),
    MethodInfo("sparq", "SPARQ", "SparQ", order=4,
               options=(LabelOption("r", "channels", "R", per_head_dim=4,
                                    doc="query channels"),)),
    MethodInfo("ds", "DOUBLE_SPARSITY", "Double Sparsity", order=5,
               options=(LabelOption("r", "channels", "R", per_head_dim=4, doc="label channels"),
                        LabelOption("b", "label_bits", "BITS", doc="label bits"))),
    MethodInfo("hikv", "HIKV", "HiKV", policy=True, grammar=HIKV_GRAMMAR, order=1000),
))
