"""Lazy re-exports: a package that names its modules' public objects without importing the modules.

A package whose ``__init__`` imports every module makes importing any one of them cost all of
them (Python runs the package's ``__init__`` first): ``coffer kb search`` would load the pack
format to open the store. Such a package instead lists where each name lives and gets its
``__getattr__`` (PEP 562) from here; type checkers read the same names from an
``if TYPE_CHECKING:`` block of imports beside it, and a test checks that every name of its
``__all__`` resolves::

    __getattr__ = lazy_exports(__name__, {"._export": ("export_kb",), "._import": ("import_pack",)})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, tuple[str, ...]]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``: each name in ``homes`` imported from its module on first use.

    Args:
        package: The package's ``__name__``.
        homes: Module (relative, e.g. ``"._export"``) -> the names it exports through the package.
    """
    module_of = {name: module for module, names in homes.items() for name in names}

    def load(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # later look-ups find it without this function
        return value

    return load
