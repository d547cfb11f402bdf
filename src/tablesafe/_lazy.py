"""Lazy re-exports for packages (PEP 562), so that ``import tablesafe`` is cheap.

A package lists which module defines each public name; the module is
imported the first time the name is used. Commands import only what they
need, so ``tablesafe --help`` does not load scipy, pandas or DuckDB.
Type checkers see ordinary imports under ``TYPE_CHECKING`` in each package.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["attach"]

#: A public name's value: any class, function or constant of the package (a
#: deprecated alias is typed through here, so it stays as usable as before).
Export = Any


def attach(
    package: str,
    exports: Mapping[str, str],
    deprecated: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], Export], Callable[[], list[str]]]:
    """Return ``__getattr__`` and ``__dir__`` for ``package``.

    Args:
        package: The package's ``__name__``.
        exports: Public name -> the module that defines it.
        deprecated: Former public name -> the public package that now exports
            it. Still importable for one release, with a ``DeprecationWarning``
            naming the new place; not listed by ``dir()``.
    """
    moved = dict(deprecated or {})

    def __getattr__(name: str) -> Export:
        module = exports.get(name)
        if module is None and name in moved:
            warnings.warn(
                f"{package}.{name} is deprecated and will be removed in the next release; "
                f"import it from {moved[name]}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(moved[name]), name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        # Cache on the package so the next access is a plain attribute.
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
