"""Output files and provenance for every command: atomic writes, CSV/JSON rows, figures, the
code version, output folders a command owns, and file locks.

* Every file is written to a temporary file in its folder and renamed over the target
  (:func:`atomic_write_text`, :func:`atomic_open`): a full disk, a crash or Ctrl-C leaves the
  previous complete file or none, never a file cut mid-row.
* :func:`write_csv` / :func:`write_json` refuse non-finite numbers (:class:`NonFiniteError`
  names the file, the row and the column); a column may be declared ``missing_ok`` where NaN
  means "not applicable" (written as an empty cell / ``null``).
* :func:`prepare_out_dir` is called before any long work: it checks the folder can be written
  and refuses to mix two runs (a command's own files already there need ``--force``, which
  removes them first).
* :func:`code_version` is the one provenance string (``<version>+<git describe>``).
* :func:`file_lock` serialises work on one shared cache entry across processes (``fcntl``).
* A run that finishes writes :data:`MANIFEST` into its folder last (:func:`finish_out_dirs`); a
  command that reads another run's results checks them against it first (:func:`run_folder`,
  :func:`check_result_file`).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import fnmatch
import functools
import hashlib
import io
import json
import math
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hikv.params import ParamError

__all__ = [
    "NonFiniteError",
    "code_version",
    "atomic_open",
    "atomic_write_text",
    "atomic_write_bytes",
    "write_csv",
    "write_json",
    "json_text",
    "save_figure",
    "read_text",
    "read_json",
    "check_finite",
    "prepare_out_dir",
    "check_writable",
    "file_lock",
    "out_dir_holder",
    "unique_dir",
    "MANIFEST",
    "FOLDER_README",
    "RunFolder",
    "run_folder",
    "check_result_file",
    "folder_complete",
]


class NonFiniteError(ParamError):
    """A result meant for a file is NaN or infinite (the message names file, row, column)."""


# --------------------------------------------------------------------------- provenance
@functools.cache
def code_version() -> str:
    """``<hikv version>+<git describe --always --dirty --abbrev=12>`` of the source tree, or
    the bare package version outside a git checkout. One string per commit, for every
    command's result files."""
    from hikv import __version__

    root = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty",
                              "--abbrev=12"], capture_output=True, text=True, timeout=10)
        tag = rev.stdout.strip() if rev.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        tag = ""
    return f"{__version__}+{tag}" if tag else __version__


# --------------------------------------------------------------------------- atomic writes
@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", *,
                newline: str | None = None, encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on a clean exit flush, fsync and rename it over
    ``path`` (``os.replace``); on an exception delete it and leave ``path`` untouched.

    ``mode`` is ``"w"`` (text) or ``"wb"`` (binary). The parent folder must exist.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open mode must be 'w' or 'wb', not {mode!r}")
    p = Path(path)
    if p.is_symlink():                 # a link is followed: the file it names is replaced
        p = p.resolve()
    if p.is_dir():
        raise ParamError(f"{p} is a folder: give a file path")
    if p.exists() and not p.is_file():
        raise ParamError(f"{p} is {_file_kind(p)}, not a regular file: refusing to replace it "
                         "(give the path of a regular file)")
    if not p.parent.is_dir():
        raise ParamError(f"{p}: its folder {p.parent} does not exist"
                         + (" (it is a file)" if p.parent.exists() else ""))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as e:
        raise ParamError(f"{p} cannot be written: {e.strerror or e}") from None
    try:
        if mode == "wb":
            f: IO[Any] = os.fdopen(fd, "wb")
        else:
            f = os.fdopen(fd, "w", newline=newline, encoding=encoding)
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _file_kind(p: Path) -> str:
    """What a path that is neither a folder nor a regular file is, in words."""
    mode = p.stat().st_mode
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


@functools.cache
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str, *,
                      encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_open`); returns the path."""
    with atomic_open(path, "w", encoding=encoding, newline="") as f:
        f.write(text)
    return Path(path)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


# --------------------------------------------------------------------------- finite results
def _bad_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, float):
        return not math.isfinite(v)
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is a dependency
        return False
    if isinstance(v, np.floating):
        return not bool(np.isfinite(v))
    if isinstance(v, np.ndarray) and v.dtype.kind in "fc":
        return not bool(np.isfinite(v).all())
    return False


def check_finite(obj: Any, where: str, missing_ok: Iterable[str] = ()) -> None:
    """Raise :class:`NonFiniteError` if ``obj`` (nested dicts, lists, numbers) holds NaN or
    an infinity, naming ``where`` and the key path; keys in ``missing_ok`` may be NaN."""
    ok = set(missing_ok)

    def walk(x: Any, path: str, key: str | None) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, f"{path}.{k}" if path else str(k), str(k))
        elif isinstance(x, list | tuple):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]", key)
        elif _bad_number(x):
            if key in ok and not _is_inf(x):
                return
            raise NonFiniteError(f"{where}: {path or 'value'} = {x} is not a finite number "
                                 "(a result must be finite; this run is degenerate or its "
                                 "inputs are corrupt)")

    walk(obj, "", None)


def _is_inf(x: Any) -> bool:
    try:
        return math.isinf(float(x))
    except (TypeError, ValueError):
        return False


def _missing(v: Any) -> bool:
    return _bad_number(v) and not _is_inf(v)


# --------------------------------------------------------------------------- CSV / JSON
def write_csv(path: str | os.PathLike[str], rows: Sequence[dict[str, Any]], *,
              fieldnames: Sequence[str] | None = None, missing_ok: Iterable[str] = (),
              cell: Any = None) -> Path:
    """Write ``rows`` as CSV atomically; returns the path.

    Columns are ``fieldnames`` or the union of the rows' keys in first-seen order. NaN and
    infinities raise :class:`NonFiniteError`, except NaN in a ``missing_ok`` column (written
    as an empty cell). ``cell`` optionally formats each value (e.g. fixed precision).
    """
    p = Path(path)
    ok = set(missing_ok)
    if fieldnames is None:
        keys: dict[str, None] = {}
        for row in rows:
            keys.update(dict.fromkeys(row))
        fieldnames = list(keys)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fieldnames), lineterminator="\r\n")
    w.writeheader()
    for i, row in enumerate(rows):
        out = {}
        for k in fieldnames:
            v = row.get(k)
            if _bad_number(v):
                if k in ok and _missing(v):
                    out[k] = ""
                    continue
                raise NonFiniteError(f"{p}: row {i + 1}, column {k!r} = {v} is not a finite "
                                     "number (a result must be finite; this run is degenerate "
                                     "or its inputs are corrupt)")
            out[k] = cell(v) if cell is not None else v
        w.writerow(out)
    return atomic_write_text(p, buf.getvalue())


def json_text(obj: Any, *, indent: int | None = 1, missing_ok: Iterable[str] = (),
              where: str = "JSON", **kw: Any) -> str:
    """``json.dumps`` that rejects NaN/infinity (:class:`NonFiniteError`); NaN under a key in
    ``missing_ok`` becomes ``null``."""
    ok = set(missing_ok)
    check_finite(obj, where, ok)

    def clean(x: Any, key: str | None) -> Any:
        if isinstance(x, dict):
            return {k: clean(v, str(k)) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v, key) for v in x]
        if key in ok and _missing(x):
            return None
        return x

    return json.dumps(clean(obj, None) if ok else obj, indent=indent, allow_nan=False, **kw)


def write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 1,
               missing_ok: Iterable[str] = (), **kw: Any) -> Path:
    """Write ``obj`` as JSON (ending in a newline) atomically; non-finite numbers raise
    :class:`NonFiniteError` naming the file and key (NaN under ``missing_ok`` keys -> null)."""
    p = Path(path)
    return atomic_write_text(p, json_text(obj, indent=indent, missing_ok=missing_ok,
                                          where=str(p), **kw) + "\n")


# --------------------------------------------------------------------------- reading user files
def regular_file(path: str | os.PathLike[str], *, what: str = "a file", flag: str = ""
                 ) -> Path:
    """``path`` if it is a regular file (symlinks followed); else :class:`ParamError` saying
    what it is (missing, a folder, a FIFO that would block the reader, a device ...)."""
    p = Path(path)
    lead = f"{flag} {p}" if flag else f"{p}"
    try:
        if p.is_file():
            return p
        if p.exists():
            kind = "a folder" if p.is_dir() else _file_kind(p)
            raise ParamError(f"{lead}: is {kind}, not a regular file (expected {what})")
    except OSError as e:
        raise ParamError(f"{lead}: cannot be read: {e.strerror or e} (expected {what})") from None
    raise ParamError(f"{lead}: no such file (expected {what})")


def read_text(path: str | os.PathLike[str], *, what: str = "a text file",
              max_bytes: int = 1 << 30) -> str:
    """The UTF-8 text of a user's file (a BOM is dropped). A missing, unreadable, binary,
    compressed or non-UTF-8 file raises :class:`ParamError` naming it and what was expected."""
    p = regular_file(path, what=what)
    try:
        if p.stat().st_size > max_bytes:
            raise ParamError(f"{p}: {p.stat().st_size} bytes is larger than the {max_bytes} "
                             f"allowed for {what}")
        data = p.read_bytes()
    except OSError as e:
        raise ParamError(f"{p}: cannot be read: {e.strerror or e} (expected {what})") from None
    if data[:2] == b"\x1f\x8b":
        raise ParamError(f"{p}: is gzip-compressed; decompress it first (gunzip), expected "
                         f"{what}")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise ParamError(f"{p}: is UTF-16; convert it to UTF-8 (iconv -f UTF-16 -t UTF-8), "
                         f"expected {what}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ParamError(f"{p}: byte {e.start} is not UTF-8 (expected {what} in UTF-8)") from None
    if "\0" in text:
        raise ParamError(f"{p}: holds NUL bytes (a binary file?), expected {what}")
    return text


def read_json(path: str | os.PathLike[str], *, what: str = "a JSON file") -> Any:
    """Parse a user's JSON file (no code runs; NaN/Infinity literals are rejected); errors are
    :class:`ParamError` naming the file, the line and what was expected."""
    text = read_text(path, what=what)

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a finite number")

    try:
        return json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as e:
        raise ParamError(f"{path}:{e.lineno}: not valid JSON ({e.msg}); expected {what}") \
            from None
    except (ValueError, RecursionError) as e:
        raise ParamError(f"{path}: not valid JSON ({e}); expected {what}") from None


# --------------------------------------------------------------------------- figures
def save_figure(fig: Any, path: str | os.PathLike[str], *, dpi: int = 120,
                tight: bool = True) -> Path:
    """Lay out ``fig`` (``tight_layout``), write it to ``path`` (format from the suffix)
    atomically, close it; returns the path."""
    import matplotlib.pyplot as plt

    p = Path(path)
    try:
        if tight:
            fig.tight_layout()
        with atomic_open(p, "wb") as f:
            fig.savefig(f, dpi=dpi, format=p.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    return p


# --------------------------------------------------------------------------- output folders
def check_writable(folder: str | os.PathLike[str], flag: str = "--out") -> Path:
    """Create ``folder`` (and parents) and prove a file can be written there; raise
    :class:`ParamError` naming ``flag`` and the reason otherwise."""
    p = Path(folder)
    if p.exists() and not p.is_dir():
        raise ParamError(f"{flag} {p} exists and is not a folder: give a folder path")
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".hikv-probe-", dir=p)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ParamError(f"{flag} {p} cannot be written: {e.strerror or e}; give a writable "
                         "folder") from None
    return p


def prepare_out_dir(folder: str | os.PathLike[str], owned: Sequence[str], *,
                    force: bool = False, flag: str = "--out") -> Path:
    """Make ``folder`` ready for a command that writes the files matching the glob patterns
    ``owned``: writable (checked now, before long work), and holding none of those files from
    an earlier run unless ``force`` (then they are deleted first, so no old file stays beside
    new ones). Files that match no pattern are left alone."""
    p = check_writable(folder, flag)
    hold_out_dir(p, flag, owned)
    remove_orphan_temps(p)
    with contextlib.suppress(FileNotFoundError):   # the folder is incomplete until the run ends
        os.replace(p / MANIFEST, p / MANIFEST_KEPT)
    old = sorted(f.name for f in p.iterdir()
                 if f.is_file() and any(fnmatch.fnmatchcase(f.name, g) for g in owned))
    if old and not force:
        shown = ", ".join(old[:4]) + (f" and {len(old) - 4} more" if len(old) > 4 else "")
        raise ParamError(f"{flag} {p} already holds this command's files from an earlier run "
                         f"({shown}); pass --force to replace them, or give another folder")
    for name in old:
        try:
            (p / name).unlink()
        except OSError as e:
            raise ParamError(f"{flag} {p}: cannot remove the old {name}: "
                             f"{e.strerror or e}") from None
    return p


#: The lock file of an output folder (held by the run writing into it).
OUT_LOCK = ".hikv-run.lock"
#: Written last into an output folder by a run that finished: without it the folder is
#: incomplete (the run was killed, failed or is still going).
MANIFEST = "MANIFEST.json"
MANIFEST_SCHEMA = "hikv.manifest/1"
#: Where :func:`prepare_out_dir` moves the manifest of the folder's last finished run while a
#: new run writes: :func:`finish_out_dirs` carries over its entries of files the new run did not
#: write (another command's files in the same folder), so the folder's manifest lists them all.
MANIFEST_KEPT = ".hikv-manifest-kept.json"
#: A result folder's hand-written description (how it was made, what it holds): no command
#: writes or reads it, so no manifest lists it and editing it leaves the manifest true.
FOLDER_README = "README.md"
_HELD: dict[Path, int] = {}
_OWNED: dict[Path, tuple[str, ...]] = {}


def _holder_line(fd: int) -> str:
    """The ``pid ...: command`` line a holder wrote into the lock file ``fd`` ("unknown" when
    unreadable or empty)."""
    try:
        return os.pread(fd, 400, 0).decode("utf-8", "replace").strip() or "unknown"
    except OSError:
        return "unknown"


def hold_out_dir(folder: str | os.PathLike[str], flag: str = "--out",
                 owned: Sequence[str] = ()) -> Path:
    """Make this process the one run writing into ``folder`` until it exits: an exclusive
    ``flock`` on ``folder/.hikv-run.lock`` (which records the holder's pid and command). A
    second process asking for the same folder gets :class:`ParamError` naming the holder; the
    same process asking again is fine. The lock goes with the process, however it ends."""
    p = Path(folder).resolve()
    _OWNED[p] = tuple(dict.fromkeys((*_OWNED.get(p, ()), *owned)))
    if p in _HELD:
        return p
    # the process's code version (cached) is read before it writes anything here: a run's own
    # outputs in a committed result folder (and the manifest moved aside) are tracked files,
    # not code, and must not mark its results `-dirty`
    code_version()
    lock = p / OUT_LOCK
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
    except OSError as e:
        raise ParamError(f"{flag} {p}: cannot create its lock file: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = _holder_line(fd)
        os.close(fd)
        raise ParamError(f"{flag} {p} is in use by another run ({holder}); wait "
                         "for it to finish or give another folder") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()}: {' '.join(sys.argv)}"[:400].encode(), 0)
    _HELD[p] = fd
    return p


def out_dir_holder(folder: str | os.PathLike[str]) -> str | None:
    """The run holding ``folder`` (its lock file's ``pid ...: command`` line), or None when no
    process holds it; looks without taking the folder (a shared ``flock`` tried and dropped)."""
    lock = Path(folder) / OUT_LOCK
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return _holder_line(fd)
    finally:
        os.close(fd)
    return None


def release_out_dir(folder: str | os.PathLike[str]) -> None:
    """Give up the lock :func:`hold_out_dir` took (a no-op when not held)."""
    p = Path(folder).resolve()
    _OWNED.pop(p, None)
    fd = _HELD.pop(p, None)
    if fd is not None:
        os.close(fd)


def release_all_out_dirs() -> None:
    """Release every folder this process holds, writing no manifest (the run did not finish)."""
    for p in list(_HELD):
        release_out_dir(p)


def finish_out_dirs(arguments: Sequence[str]) -> list[Path]:
    """The run ended normally: write :data:`MANIFEST` into every folder this process holds
    (the run's files with sizes and SHA-256, the code version and the arguments; not the files
    of a sub-folder with a manifest of its own, :func:`_nested_run_folders`, nor a
    :data:`FOLDER_README`), last, and release the folders. Returns the manifests written."""
    written = []
    for p in list(_HELD):
        owned = _OWNED.get(p, ())
        found = [f for f in p.rglob("*") if f.is_file()]
        nested = _nested_run_folders(p, found)
        files = sorted(f for f in found if f.name != MANIFEST and not f.name.startswith(".")
                       and _listed(f.relative_to(p).as_posix(), nested)
                       and (not owned or any(fnmatch.fnmatchcase(f.name, g) for g in owned)))
        entries = [{"path": f.relative_to(p).as_posix(), "bytes": f.stat().st_size,
                    "sha256": _sha256(f)} for f in files]
        entries += [e for e in _kept_entries(p, {e["path"] for e in entries})
                    if _listed(e["path"], nested)]
        atomic_write_text(p / MANIFEST, json.dumps(
            {"schema": MANIFEST_SCHEMA, "complete": True, "code_version": code_version(),
             "arguments": list(arguments), "files": entries}, indent=1) + "\n")
        with contextlib.suppress(OSError):
            (p / MANIFEST_KEPT).unlink()
        written.append(p / MANIFEST)
        release_out_dir(p)
    return written


def _nested_run_folders(folder: Path, files: Iterable[Path]) -> tuple[str, ...]:
    """The sub-folders of ``folder`` (relative, POSIX) among whose ``files`` is a
    :data:`MANIFEST` of their own: another command's finished output (``hikv frontier --out
    DIR/frontier``), which that manifest lists, so the folder's own manifest leaves them out
    and never goes stale when that command runs again."""
    return tuple(sorted(f.parent.relative_to(folder).as_posix()
                        for f in files if f.name == MANIFEST and f.parent != folder))


def _listed(rel: str, nested: Sequence[str]) -> bool:
    """Whether the folder's manifest lists its file ``rel``: not a :data:`FOLDER_README`, nor
    in one of the ``nested`` run folders."""
    return (Path(rel).name != FOLDER_README
            and not any(rel.startswith(f"{d}/") for d in nested))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _kept_entries(folder: Path, written: set[str]) -> list[dict[str, Any]]:
    """The entries of the folder's previous manifest (:data:`MANIFEST_KEPT`) for files this run
    did not write and that are still there, each with the arguments and code version of the
    run that wrote it; their size and hash stay as that run recorded them."""
    try:
        old = json.loads((folder / MANIFEST_KEPT).read_text())
        if not isinstance(old, dict) or not isinstance(old.get("files"), list):
            return []
    except (OSError, ValueError):
        return []
    kept = []
    for e in old["files"]:
        if not _valid_entry(e) or e["path"] in written or not (folder / e["path"]).is_file():
            continue
        kept.append({**e, "arguments": e.get("arguments", old.get("arguments")),
                     "code_version": e.get("code_version", old.get("code_version"))})
    return kept


def _valid_entry(e: Any) -> bool:
    return (isinstance(e, dict) and isinstance(e.get("path"), str)
            and isinstance(e.get("bytes"), int) and not isinstance(e["bytes"], bool)
            and isinstance(e.get("sha256"), str) and len(e["sha256"]) == 64)


def folder_complete(folder: str | os.PathLike[str]) -> tuple[bool, str]:
    """``(True, "")`` when ``folder`` holds a run's :data:`MANIFEST` and every file it lists is
    there with its size and hash; else ``(False, why)``."""
    p = Path(folder)
    m = p / MANIFEST
    if not m.is_file():
        return False, (f"{p} has no {MANIFEST}: the run that wrote it did not finish (killed, "
                       "failed or still running)")
    try:
        data = json.loads(m.read_text())
        entries = data["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return False, f"{m}: unreadable manifest ({e})"
    for e in entries:
        f = p / e["path"]
        if not f.is_file() or f.stat().st_size != e["bytes"]:
            return False, f"{f}: missing or changed since the run ({MANIFEST})"
        if hashlib.sha256(f.read_bytes()).hexdigest() != e["sha256"]:
            return False, f"{f}: changed since the run (hash differs from {MANIFEST})"
    return True, ""


@dataclass(frozen=True)
class RunFolder:
    """The folder of a run whose results a command is about to read (:func:`run_folder`).

    Members
    -------
    path : Path
        The run's folder (where its :data:`MANIFEST` is), or the folder asked about when
        there is no run folder.
    state : str
        ``"complete"``: a finished run's folder; :meth:`check` verifies each file against its
        manifest. ``"own"``: this process is writing it (nothing to verify).
        ``"unverified"``: no manifest and no sign of a run (written before manifests
        existed, or not by a hikv command): files are read as they are.
    entries : Mapping[str, Mapping[str, Any]]
        The manifest's entries by path relative to ``path``.
    """

    path: Path
    state: str
    entries: Mapping[str, Mapping[str, Any]]

    @property
    def note(self) -> str:
        """One line for the reader to print when the folder cannot be verified, else ``""``."""
        if self.state != "unverified":
            return ""
        return (f"{self.path} has no {MANIFEST} (written before manifests existed, or not by "
                "a hikv command): its completeness cannot be verified")

    def check(self, file: str | os.PathLike[str], flag: str = "") -> None:
        """Raise :class:`ParamError` naming ``file`` unless the finished run wrote it as it
        is now: listed in the manifest with the same size and SHA-256. A file that is not
        there is left to the reader to report (unless the manifest lists it: deleted)."""
        if self.state != "complete":
            return
        f = Path(file)
        where = f"{flag} {f}" if flag else str(f)
        rel = Path(os.path.relpath(os.path.abspath(f), os.path.abspath(self.path))).as_posix()
        e = self.entries.get(rel)
        manifest = self.path / MANIFEST
        if not f.is_file():
            if e is not None:
                raise ParamError(f"{where}: deleted or replaced after the run finished "
                                 f"({manifest} lists it); rerun the command that writes it")
            return
        if e is None:
            raise ParamError(f"{where}: not in {manifest}, so not written by the run that "
                             "finished there (added or rewritten later); rerun the command "
                             "that writes it")
        size = f.stat().st_size
        if size != e["bytes"]:
            raise ParamError(f"{where}: modified after the run finished ({size} bytes, "
                             f"{manifest} lists {e['bytes']}); rerun the command that "
                             "writes it")
        if _sha256(f) != e["sha256"]:
            raise ParamError(f"{where}: modified after the run finished (its SHA-256 differs "
                             f"from {manifest}'s); rerun the command that writes it")


def run_folder(folder: str | os.PathLike[str], flag: str = "", *,
               temps: bool = True) -> RunFolder:
    """Where the results in ``folder`` come from, before a command reads them.

    The run's folder is ``folder`` or its parent (a seed suite's ``cells/``): the nearer one
    holding a :data:`MANIFEST` (the parent's only when it lists files in ``folder``) or a
    run's lock. Raises :class:`ParamError` naming the folder when it is incomplete: a run's
    lock but no manifest (the run is still writing, or was killed or failed), or (with
    ``temps``) no manifest and leftover temporary files of an interrupted write in
    ``folder``; or when its manifest is not one.
    Returns a ``"complete"`` :class:`RunFolder` (verify each file read with
    :meth:`RunFolder.check`), ``"own"`` (this process holds it) or ``"unverified"``."""
    d = Path(os.path.abspath(folder))
    lead = f"{flag} " if flag else ""
    if "\0" in str(d):                   # no such folder: the reader names the bad path
        return RunFolder(d, "unverified", {})
    for c in dict.fromkeys((d, d.parent)):
        if c.resolve() in _HELD:
            return RunFolder(c, "own", {})
        m = c / MANIFEST
        if m.exists() or m.is_symlink():
            entries = _read_manifest(m, lead)
            if c == d or any(k.startswith(f"{d.name}/") for k in entries):
                return RunFolder(c, "complete", entries)
            break                       # a finished run's folder that did not write this one
        if (c / OUT_LOCK).is_file():
            holder = _lock_holder(c / OUT_LOCK)
            if holder is not None:
                raise ParamError(f"{lead}{c} is incomplete: a run is still writing it "
                                 f"({holder}); wait for it to finish")
            raise ParamError(f"{lead}{c} is incomplete: it has no {MANIFEST}, so the run that "
                             "wrote it did not finish (killed or failed); rerun that command "
                             "(`hikv accuracy run` resumes where it stopped) or give a "
                             "finished run's folder")
        left = sorted(f.name for f in _orphan_temps(c)) if temps and c == d else []
        if left:
            raise ParamError(f"{lead}{c} is incomplete: it has no {MANIFEST} and holds "
                             f"temporary files of an interrupted write ({left[0]}"
                             + (f" and {len(left) - 1} more" if len(left) > 1 else "")
                             + "); rerun the command that writes it")
    return RunFolder(d, "unverified", {})


def check_result_file(path: str | os.PathLike[str], flag: str = "") -> RunFolder:
    """Check one result file a command is about to read against its run folder's manifest
    (:func:`run_folder` of its folder, then :meth:`RunFolder.check`); a file outside any
    run's folder is read as it is, temporary files beside it or not (one atomically written
    file is complete on its own)."""
    rf = run_folder(Path(path).parent, flag, temps=False)
    rf.check(path, flag)
    return rf


def _read_manifest(m: Path, lead: str) -> dict[str, Mapping[str, Any]]:
    bad = (f"{lead}{m}: not a manifest of a hikv run ({MANIFEST_SCHEMA}), so its folder "
           "cannot be verified; rerun the command that wrote the folder")
    if not m.is_file():
        raise ParamError(bad)
    data = read_json(m, what=f"a run's manifest ({MANIFEST_SCHEMA})")
    files = data.get("files") if isinstance(data, dict) else None
    if (not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA
            or not isinstance(files, list) or not all(_valid_entry(e) for e in files)):
        raise ParamError(bad)
    return {e["path"]: e for e in files}


def _lock_holder(lock: Path) -> str | None:
    """What the lock file says of the live process holding it, or None when none does."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = os.pread(fd, 400, 0).decode("utf-8", "replace").strip()
            return text or "holder unknown"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _orphan_temps(folder: Path) -> list[Path]:
    try:
        return [f for f in folder.iterdir()
                if f.name.startswith(".") and f.name.endswith(".tmp") and f.is_file()]
    except OSError:
        return []


def remove_orphan_temps(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files (``.NAME.*.tmp``) that a run killed mid-write left in
    ``folder``; call it only while holding the folder (:func:`hold_out_dir`)."""
    gone = []
    for f in Path(folder).iterdir():
        if f.name.startswith(".") and f.name.endswith(".tmp") and f.is_file():
            with contextlib.suppress(OSError):
                f.unlink()
                gone.append(f)
    return gone


def unique_dir(parent: str | os.PathLike[str], prefix: str) -> Path:
    """A new, empty folder under ``parent`` whose name starts with ``prefix`` and is unique
    to this call (process id and a random part): concurrent runs never share one."""
    root = Path(parent)
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-p{os.getpid()}-", dir=root))


# --------------------------------------------------------------------------- locks
@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], *, shared: bool = False) -> Iterator[Path]:
    """Hold an ``fcntl.flock`` on ``path`` (created if needed) for the ``with`` block:
    exclusive by default, ``shared`` for readers. The lock dies with the process, so a killed
    holder never leaves it stuck."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield p
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
