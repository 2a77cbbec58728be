"""KV-cache methods and their operating points: HiKV's policy, the method registry and the
label grammar (``h2o@256``, ``hikv-evict@256/v:static48``, ...).

A method is one :class:`MethodInfo` (name, label options, which :class:`MethodSpec` fields it
uses) given to :func:`register_method` by the method's closed form
(:mod:`hikv.sim.closed_form_baselines`, :mod:`hikv.sim.closed_form_hikv`); :class:`Method` is
built from the registry, and :class:`MethodSpec` checks, spells and parses (:func:`parse_method`)
a spec by it. Standard library only: :class:`Method` imports the built-in closed forms (numpy,
no torch) when first used. :mod:`hikv.params` re-exports the names most code uses, so
``from hikv.params import MethodSpec`` keeps working; new code may import from either.
Adding a method: docs/design.md, "Adding a KV method".
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .param_checks import ParamError, _bool, _enum, _int, _pow2

__all__ = ["Stage1Variant", "Stage1Scorer", "Stage2Kind", "Stage2Rule", "HiKVPolicy",
           "LabelOption", "LabelGrammar", "MethodInfo", "Method", "register_method",
           "register_class", "unregister_method", "MethodSpec", "parse_method", "HIKV_GRAMMAR"]


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


# --------------------------------------------------------------------------- method registry
@dataclass(frozen=True)
class LabelOption:
    """One option of a method's label: ``/<key><N>`` sets the :class:`MethodSpec` field
    ``field`` to ``N``; a ``flag`` option ``/<key>`` sets it to ``True`` (and the fields in
    ``implies``). Absent, the field takes ``default`` (``None``: the :class:`MethodSpec`
    field's default; the label spells other values), or ``max(1, head_dim // per_head_dim)``
    when ``per_head_dim`` is set (then the label always spells it: its value is not known
    without a head dimension). ``doc`` names the option in error messages."""

    key: str
    field: str
    metavar: str = ""
    flag: bool = False
    default: Any = None
    per_head_dim: int = 0
    implies: tuple[tuple[str, Any], ...] = ()
    doc: str = ""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z]+", self.key):
            raise ParamError(f"LabelOption.key = {self.key!r} must be lowercase letters")
        if self.field not in _SPEC_FIELDS:
            raise ParamError(f"LabelOption.field = {self.field!r} is not one of "
                             f"{sorted(_SPEC_FIELDS)}")

    def absent(self, head_dim: int) -> Any:
        """The field's value when the label does not spell the option."""
        if self.per_head_dim:
            return max(1, head_dim // self.per_head_dim)
        return False if self.flag else self.fallback

    @property
    def fallback(self) -> Any:
        """``default``, or (``None``) the :class:`MethodSpec` field's default."""
        if self.default is not None:
            return self.default
        return next(f.default for f in dataclasses.fields(MethodSpec) if f.name == self.field)

    def spelt(self, spec: MethodSpec) -> str:
        """What ``spec``'s label spells for this option (``""``: nothing)."""
        value = getattr(spec, self.field)
        if self.flag:
            return f"/{self.key}" if value else ""
        if self.per_head_dim or value != self.fallback:
            return f"/{self.key}{value}"
        return ""

    @property
    def usage(self) -> str:
        return f"[/{self.key}]" if self.flag else f"[/{self.key}{self.metavar or 'N'}]"


@dataclass(frozen=True)
class LabelGrammar:
    """A method whose label is not ``name@B[/options]`` (HiKV): ``label(spec)`` spells it,
    ``parse(text, policy, head_dim)`` returns the spec or ``None`` when ``text`` is not one
    of its labels; ``usage`` is its syntax in error messages."""

    label: Callable[[MethodSpec], str]
    parse: Callable[[str, HiKVPolicy, int], MethodSpec | None]
    usage: str


@dataclass(frozen=True)
class MethodInfo:
    """Everything the parameters and the label grammar know of one KV method, declared once
    beside its closed form (:func:`register_method`; docs/design.md, "Adding a KV method").

    ``name`` is the label name (``h2o``) and ``attr`` the :class:`Method` attribute
    (``Method.H2O``). ``options`` are the label's options in label order. ``windowed``: the
    spec's ``recent`` is a window kept whatever the scores (at most the budget); ``sinks``:
    the spec's ``sinks`` are kept (at most the budget; parsed as ``min(policy.sinks, B)``).
    ``budgeted = False``: the label is the bare name (full KV). ``policy``: the operating
    point is a :class:`HiKVPolicy` (``MethodSpec.hikv``). ``grammar`` replaces the
    ``name@B[/options]`` label. ``order`` is the method's place in tables and in iteration
    over :class:`Method` (ties: registration order): full KV 0, the baselines 1 to 10, HiKV
    last (1000); the default puts a new method after the built-in baselines, before HiKV."""

    name: str
    attr: str
    summary: str = ""
    options: tuple[LabelOption, ...] = ()
    windowed: bool = False
    sinks: bool = False
    budgeted: bool = True
    policy: bool = False
    grammar: LabelGrammar | None = None
    order: int = 100

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9]*", self.name):
            raise ParamError(f"MethodInfo.name = {self.name!r} must be lowercase letters and "
                             "digits, starting with a letter")
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", self.attr):
            raise ParamError(f"MethodInfo.attr = {self.attr!r} must be an upper-case "
                             "identifier")
        keys = [o.key for o in self.options]
        if len(set(keys)) != len(keys):
            raise ParamError(f"MethodInfo.options of {self.name!r} repeat a key: {keys}")

    @property
    def usage(self) -> str:
        """The label's syntax, e.g. ``ds@B[/rR][/bBITS]``."""
        if self.grammar is not None:
            return self.grammar.usage
        if not self.budgeted:
            return self.name
        return f"{self.name}@B" + "".join(o.usage for o in self.options)


class _MethodRegistry(type):
    """Makes :class:`Method` behave like the enum it was: ``Method.H2O``, ``Method("h2o")``,
    ``for m in Method``, ``len(Method)``, over the registered methods."""

    def __getattr__(cls, attr: str) -> Method:
        if attr.startswith("_") or not attr.isupper():
            raise AttributeError(attr)
        _load_builtin()
        for m in _REGISTRY.values():
            if m.name == attr:
                return m
        raise AttributeError(f"Method has no registered method {attr!r} (registered: "
                             f"{', '.join(m.name for m in _REGISTRY.values())})")

    def __call__(cls, value: Any) -> Method:
        if isinstance(value, Method):
            return value
        _load_builtin()
        try:
            return _REGISTRY[value]
        except (KeyError, TypeError):
            raise ValueError(f"{value!r} is not a registered Method (registered: "
                             f"{', '.join(repr(n) for n in _REGISTRY)})") from None

    def __iter__(cls) -> Iterator[Method]:
        return iter(cls._all())

    def __len__(cls) -> int:
        return len(cls._all())

    def __contains__(cls, value: Any) -> bool:
        return value in cls._all()

    def _all(cls) -> tuple[Method, ...]:
        _load_builtin()
        if _LOADING:
            raise RuntimeError("the KV methods are used while the built-in ones are being "
                               "registered (a module-level use of Method in a module "
                               "hikv.sim.closed_form imports)")
        return tuple(sorted(_REGISTRY.values(), key=lambda m: (m.info.order, m._index)))


class Method(metaclass=_MethodRegistry):
    """A registered KV-cache method (docs/design.md, "Baselines" and "Adding a KV method").

    Used like an enum: ``Method.H2O``, ``Method("h2o")``, ``m.value`` (the label name),
    ``m.name`` (the attribute), ``for m in Method`` (table order). Each method is one
    :class:`MethodInfo` given to :func:`register_method`, which the method's closed form
    calls (the built-in ones: :mod:`hikv.sim.closed_form_baselines`,
    :mod:`hikv.sim.closed_form_hikv`); the golden class of the same method names it too.
    """

    __slots__ = ("info", "_index")
    info: MethodInfo
    _index: int

    @property
    def value(self) -> str:
        """The label name (``h2o``), where the enum had its value."""
        return self.info.name

    @property
    def name(self) -> str:
        """The attribute (``H2O`` of ``Method.H2O``), where the enum had its member name."""
        return self.info.attr

    def __repr__(self) -> str:
        return f"<Method.{self.name}: {self.value!r}>"

    def __str__(self) -> str:
        return f"Method.{self.name}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Method, (self.value,))


_REGISTRY: dict[str, Method] = {}
_LOADED = False
_LOADING = False
#: the module whose import registers the built-in methods (their closed forms)
_BUILTIN = "hikv.sim.closed_form"


def _load_builtin() -> None:
    global _LOADED, _LOADING
    if _LOADED:
        return
    _LOADED = _LOADING = True
    try:
        importlib.import_module(_BUILTIN)
    except BaseException:
        _LOADED = False
        raise
    finally:
        _LOADING = False


def register_method(info: MethodInfo) -> Method:
    """Register ``info`` and return its :class:`Method` (the closed form's ``method``).

    Registering the same ``info`` again returns the same method (module reloads); another
    method under a registered name or attribute is a :class:`ParamError`."""
    if not isinstance(info, MethodInfo):
        raise ParamError(f"register_method needs a MethodInfo, not {type(info).__name__}")
    old = _REGISTRY.get(info.name)
    if old is not None:
        if old.info == info:
            return old
        raise ParamError(f"method {info.name!r} is already registered")
    for m in _REGISTRY.values():
        if m.name == info.attr:
            raise ParamError(f"Method.{info.attr} is already registered (method {m.value!r})")
    m = object.__new__(Method)
    object.__setattr__(m, "info", info)
    object.__setattr__(m, "_index", len(_REGISTRY))
    _REGISTRY[info.name] = m
    return m


def register_class(registry: dict[Method, type], method: Method, cls: type) -> None:
    """``registry[method] = cls`` for the per-method registries (closed forms, golden
    classes); a second class for one method is an error (the same class defined again, a
    module reload, replaces it)."""
    if not isinstance(method, Method):
        raise ParamError(f"{cls.__qualname__}.method = {method!r} is not a registered Method "
                         "(register_method(MethodInfo(...)) first)")
    old = registry.get(method)
    if old is not None and (old.__module__, old.__qualname__) != (cls.__module__,
                                                                  cls.__qualname__):
        raise ParamError(f"method {method.value!r} already has {old.__qualname__}; "
                         f"{cls.__qualname__} cannot register it too")
    registry[method] = cls


def unregister_method(method: Method) -> None:
    """Remove ``method`` from the registry (tests that register a method of their own)."""
    if _REGISTRY.get(method.value) is not method:
        raise ParamError(f"method {method.value!r} is not registered")
    del _REGISTRY[method.value]


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
        info = self.method.info
        _int(o, "budget", self.budget, 1)
        _int(o, "recent", self.recent, 0, self.budget if info.windowed else None)
        _int(o, "sinks", self.sinks, 0, self.budget if info.sinks else None)
        _bool(o, "averaged", self.averaged)
        if self.averaged:
            _check_flag(o, "averaged", self.method)
        _int(o, "channels", self.channels, 1, 1024)
        _int(o, "page_tokens", self.page_tokens, 1, 1024)
        _pow2(o, "page_tokens", self.page_tokens)
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
        ``hikv-query_aware@256/lowbit4`` (query-aware Stage I scored by 4-bit keys),
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


#: the :class:`MethodSpec` fields a :class:`LabelOption` may set
_SPEC_FIELDS = frozenset({"recent", "channels", "page_tokens", "label_bits", "sinks",
                          "averaged"})


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
        parts.append(f"lowbit{p.lowbit_bits}")
    for n, r in (("k", p.k_rule), ("v", p.v_rule)):
        if r.kind is not Stage2Kind.NONE:
            g = f"g{r.group}" if r.kind is Stage2Kind.CHANNEL_GROUPS else ""
            parts.append(f"{n}:{r.kind.value}{r.keep}{g}")
    return "/".join(parts)


_HIKV_RE = re.compile(r"^hikv-(?P<s1>[a-z_]+)(?:@(?P<b>\d+))?(?:/lowbit(?P<lb>\d+))?"
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
    pol = dataclasses.replace(policy, budget=budget, recent=recent,
                              stage1=Stage1Variant(s1), k_rule=rules["k"],
                              v_rule=rules["v"], scorer=scorer, lowbit_bits=bits)
    pol.check_head_dim(head_dim)
    return MethodSpec.for_hikv(pol)


#: HiKV's label grammar (registered with HiKV's closed form, :mod:`hikv.sim.closed_form_hikv`)
HIKV_GRAMMAR = LabelGrammar(
    label=_hikv_label, parse=_parse_hikv,
    usage="hikv-{evict,query_aware,none}@B[/lowbitN]"
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
    (query-aware Stage I scored by 4-bit keys instead of page bounds) or
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
