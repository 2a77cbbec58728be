"""The KV-method registry: a method is one :class:`MethodInfo` (name, label options, which
:class:`hikv.method_spec.MethodSpec` fields it uses) given to :func:`register_method`;
:class:`Method` is built from the registry (enum-like: ``Method.H2O``, ``Method("h2o")``,
iteration in table order), and the golden model and the closed forms register their classes
against it with :func:`register_class`. Standard library only, and the lowest module of the
method layer: it imports nothing of the kit but :mod:`hikv.param_checks`.
:mod:`hikv.method_spec` declares the built-in methods (:data:`~hikv.method_spec.BUILTIN_METHODS`)
and re-exports every name here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .param_checks import ParamError

__all__ = ["LABEL_FIELDS", "LabelOption", "LabelGrammar", "MethodInfo", "Method",
           "register_method", "register_class", "unregister_method"]

if TYPE_CHECKING:  # types only: the spec module imports this one
    from .method_spec import HiKVPolicy, MethodSpec

#: The :class:`~hikv.method_spec.MethodSpec` fields a :class:`LabelOption` may set, with their
#: defaults (the spec's field defaults, which :class:`~hikv.method_spec.MethodSpec` takes from
#: here).
LABEL_FIELDS: Mapping[str, Any] = MappingProxyType({
    "recent": 32, "channels": 16, "page_tokens": 16, "label_bits": 16, "sinks": 4,
    "averaged": False})


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
        if self.field not in LABEL_FIELDS:
            raise ParamError(f"LabelOption.field = {self.field!r} is not one of "
                             f"{sorted(LABEL_FIELDS)}")

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
        return LABEL_FIELDS[self.field]

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
    """Makes :class:`Method` behave like an enum: ``Method.H2O``, ``Method("h2o")``,
    ``for m in Method``, ``len(Method)``, over the registered methods."""

    def __getattr__(cls, attr: str) -> Method:
        if attr.startswith("_") or not attr.isupper():
            raise AttributeError(attr)
        for m in _REGISTRY.values():
            if m.name == attr:
                return m
        raise AttributeError(f"Method has no registered method {attr!r} (registered: "
                             f"{', '.join(m.name for m in _REGISTRY.values())})")

    def __call__(cls, value: Any) -> Method:
        if isinstance(value, Method):
            return value
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
        return tuple(sorted(_REGISTRY.values(), key=lambda m: (m.info.order, m._index)))


class Method(metaclass=_MethodRegistry):
    """A registered KV-cache method (docs/design.md, "Baselines" and "Adding a KV method").

    Used like an enum: ``Method.H2O``, ``Method("h2o")``, ``m.value`` (the label name),
    ``m.name`` (the attribute), ``for m in Method`` (table order). Each method is one
    :class:`MethodInfo` given to :func:`register_method` (the built-in ones:
    :data:`hikv.method_spec.BUILTIN_METHODS`); its closed form and its golden class name it
    (``method = Method.<ATTR>``).
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
