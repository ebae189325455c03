"""Every declared runtime dependency is imported by the project's code, and every third-party module the
code imports is declared: the list in pyproject.toml says what an install really needs.

A dependency no module imports costs every install, image and CronJob its download for nothing, and its
comment tells a reader something untrue; one imported but undeclared works only where something else
happened to install it.
"""

from __future__ import annotations

import ast
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

from harness.requirements import declared, normal

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "exporter", "analyzer", "reaper", "simulation", "cli", "dashboards")


def _imported_modules(package: str) -> set[str]:
    """Top-level names of every module imported anywhere in the package, lazily or not."""
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    return names


def _distributions_of(modules: set[str]) -> dict[str, set[str]]:
    """Distribution → the modules the code imports from it (standard library and our own left out)."""
    owners = packages_distributions()
    found: dict[str, set[str]] = {}
    for module in modules:
        top = module.split(".")[0]
        if top in sys.stdlib_module_names or top in PACKAGES:
            continue
        # Namespace packages (google.protobuf) are looked up by their full name's first two parts too.
        for key in (top, ".".join(module.split(".")[:2])):
            for distribution in owners.get(key, ()):
                found.setdefault(normal(distribution), set()).add(module)
    return found


def _build_time_only() -> set[str]:
    """Distributions imported only by dashboards/, which is build-time code shipped as JSON."""
    runtime = _distributions_of(set().union(*(_imported_modules(p) for p in PACKAGES if p != "dashboards")))
    build = _distributions_of(_imported_modules("dashboards"))
    return set(build) - set(runtime)


def test_every_declared_runtime_dependency_is_imported_by_the_code() -> None:
    used = _distributions_of(set().union(*(_imported_modules(p) for p in PACKAGES)))
    unused = declared() - set(used)
    assert not unused, (
        f"declared in pyproject.toml [project.dependencies] but imported by no module of "
        f"{', '.join(PACKAGES)}: {sorted(unused)}; remove them, or say in their comment what uses them"
    )


def test_every_third_party_import_of_the_code_isdeclared() -> None:
    used = _distributions_of(set().union(*(_imported_modules(p) for p in PACKAGES)))
    undeclared = {d: sorted(m) for d, m in used.items() if d not in declared()}
    # dashboards/ is built with the test extra's Grafana SDK and ships JSON: nothing at run time imports it.
    undeclared = {d: m for d, m in undeclared.items() if d not in _build_time_only()}
    assert not undeclared, f"imported by the code but not declared as a runtime dependency: {undeclared}"
