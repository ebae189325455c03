"""Layering: the decision code named in pyproject.toml's no-I/O contract imports no I/O library.

import-linter checks the import graph statically; this test imports the same modules, read from the
contract itself, in a clean interpreter, so imports made at run time (or pulled in indirectly) count
too.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _contract(name_prefix: str) -> dict[str, Any]:
    contracts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    matching = [c for c in contracts if c["name"].startswith(name_prefix)]
    assert len(matching) == 1, f"expected one contract named {name_prefix!r}..."
    return matching[0]


def test_decision_code_does_no_io() -> None:
    contract = _contract("Decision code does no I/O")
    modules, forbidden = contract["source_modules"], contract["forbidden_modules"]
    assert modules and forbidden
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {set(forbidden)!r})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""


def test_layers_cover_every_package() -> None:
    """A new top-level package must be placed in the layers, not silently left outside them."""
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    layered = {
        layer
        for contract in config["contracts"]
        if contract["type"] == "layers"
        for layer in contract["layers"]
        if "." not in layer  # layers inside a package (the analyzer's) are that package's own order
    }
    assert layered == set(config["root_packages"])
