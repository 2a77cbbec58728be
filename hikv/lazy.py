"""Lazy package APIs (PEP 562): a package's ``__init__`` names its public API as a table of
``module -> names`` and imports a module only when one of its names (or the module itself) is
first used, so importing a package costs no more than its cheapest module (``import hikv.sim``
imports neither torch nor Amaranth, ``import hikv.model`` no torch)::

    from hikv.lazy import lazy_api

    __all__, __getattr__, __dir__ = lazy_api(__name__, {
        "closed_form": ("CLOSED_FORMS", "step_bytes"),
        "energy": (),                     # a module of the package with no name re-exported
    })

``__all__`` is every name of the table, then every module of it (``hikv.sim.cost.energy`` is
public too). A name belongs to one module, and no name is also a module of the package (the
import system would set the module over it). Standard library only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_api"]


def lazy_api(package: str, api: Mapping[str, Sequence[str]]
             ) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` of ``package`` whose public API is ``api``
    (``module -> names``, modules relative to the package, in the order to list them)."""
    owner: dict[str, str] = {}
    for module, names in api.items():
        if isinstance(names, str):
            raise TypeError(f"{package}: the names of {module!r} must be a sequence, not a str")
        for name in names:
            if name in owner:
                raise ValueError(f"{package}: {name!r} is exported by both {owner[name]!r} and "
                                 f"{module!r}")
            if name in api:
                raise ValueError(f"{package}: {name!r} is both a name of {module!r} and a "
                                 "module of the package")
            owner[name] = module
    public = [*owner, *api]

    def __getattr__(name: str) -> Any:
        if name in api:
            return importlib.import_module(f"{package}.{name}")
        if name not in owner:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{owner[name]}"), name)
        setattr(sys.modules[package], name, value)     # looked up once
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(public))

    return public, __getattr__, __dir__
