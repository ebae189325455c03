"""Each package's public surface (docs/architecture.md, "Public surfaces"): ``from reaper import run``
gives the very object its module defines, the package lists its names once in three agreeing places
(``_SURFACE``, ``__all__``, the ``TYPE_CHECKING`` imports), and importing the package alone loads
none of its modules — nor the heavy libraries behind them.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

PACKAGES = ["analyzer", "reaper", "exporter", "simulation"]

# What the packages' modules import, and none of them may cost a bare `import <package>`.
HEAVY = {
    "kubernetes",
    "slack_sdk",
    "pydantic",
    "numpy",
    "pynvml",
    "prometheus_client",
    "prometheus_api_client",
    "requests",
    "grpc",
    "yaml",
    "jinja2",
    "matplotlib",
}


def _surface(package: str) -> tuple[ModuleType, dict[str, str]]:
    module = importlib.import_module(package)
    surface = module._SURFACE
    assert surface, package
    return module, dict(surface)


def _top_level_assignments(module: ModuleType) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_is_the_object_its_module_defines(package: str) -> None:
    module, surface = _surface(package)
    assert sorted(module.__all__) == sorted(surface)
    for name, where in surface.items():
        defining = importlib.import_module(where)
        value = getattr(module, name)
        assert value is getattr(defining, name), name
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__ == where, f"{package}.{name} comes from {value.__module__}"
        else:  # a constant: assigned there, not imported from elsewhere
            assert name in _top_level_assignments(defining), f"{where} does not define {name}"


@pytest.mark.parametrize("package", PACKAGES)
def test_type_checkers_see_the_same_names_from_the_same_modules(package: str) -> None:
    module, surface = _surface(package)
    tree = ast.parse(inspect.getsource(module))
    blocks = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, package
    seen = {
        alias.name: node.module
        for node in blocks[0].body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert seen == surface


@pytest.mark.parametrize("package", PACKAGES)
def test_unknown_names_raise_attribute_error(package: str) -> None:
    module, surface = _surface(package)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such_name'"):
        _ = module.no_such_name
    assert not hasattr(module, "_internals")
    listed = dir(module)
    assert set(surface) <= set(listed)
    assert "no_such_name" not in listed
    assert listed == sorted(listed)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_name_is_shadowed_by_a_module(package: str) -> None:
    """Once ``package.x`` is imported, the package's attribute ``x`` is that module: a surface name
    spelled like a submodule would change meaning with the import order."""
    module, surface = _surface(package)
    submodules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    assert submodules
    assert sorted(submodules & set(surface)) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_the_package_loads_none_of_its_modules(package: str) -> None:
    code = f"import json, sys\nimport {package}\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    modules = set(json.loads(done.stdout))
    assert package in modules
    assert sorted(m for m in modules if m.split(".")[0] in HEAVY) == []
    assert sorted(m for m in modules if m.startswith(f"{package}.")) == []
