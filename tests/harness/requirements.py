"""What pyproject.toml declares, by normalised distribution name (PEP 503: ``-``, ``_`` and ``.`` alike,
lower case), so declarations, locks and installed distributions compare by one spelling."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def normal(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def requirement_name(spec: str) -> str:
    """``"prometheus-api-client>=0.7"`` → ``prometheus-api-client``."""
    return normal(re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0])


def declared(table: str = "project", key: str = "dependencies") -> set[str]:
    """The names a list of pyproject.toml declares: the runtime dependencies by default,
    ``declared("build-system", "requires")`` for the build backend."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    return {requirement_name(spec) for spec in project[table][key]}
