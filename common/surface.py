"""A package's public surface, loaded name by name.

A package that offers a few names to the others lists them in a dict, name → the module that
defines it, and hands it to :func:`lazy_surface` for its module ``__getattr__`` and ``__dir__``
(PEP 562): ``from reaper import run`` imports ``reaper.runner`` then, and importing the package
alone imports none of its modules (docs/architecture.md, "Public surfaces" and "Start-up time").
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping


def lazy_surface(
    package: str, surface: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose public names are ``surface``'s keys.

    A name is looked up in its module on every access, not kept in the package: whatever its
    module holds (a test's stand-in included) is what the package gives. Any other name raises
    ``AttributeError``, as a module's missing attribute does."""

    def __getattr__(name: str) -> object:
        module = surface.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # __import__, not importlib.import_module: only the former shows in `python -X importtime`,
        # from which tests/cli/test_start.py learns what a command loads.
        __import__(module)
        return getattr(sys.modules[module], name)

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *surface})

    return __getattr__, __dir__
