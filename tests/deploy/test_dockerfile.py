"""The image the chart runs: a pinned slim base, a non-root user, and only the sources it needs.

No container engine runs in the test environment, so the Dockerfile is checked as text against
what the chart and the packaging expect.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.chart import only, render

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
DOCKERIGNORE = [
    line.strip()
    for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    if line.strip() and not line.startswith("#")
]


def _instructions(name: str) -> list[str]:
    return re.findall(rf"^{name}\s+(.+)$", DOCKERFILE, flags=re.MULTILINE)


def test_base_image_is_a_pinned_slim_python_release() -> None:
    (default,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, flags=re.MULTILINE)
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", default)
    assert all(line.split()[0] == "${PYTHON_IMAGE}" for line in _instructions("FROM"))


def test_final_stage_runs_as_a_numeric_non_root_user() -> None:
    user = _instructions("USER")[-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    reaper_pod = only(render(), "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert reaper_pod["securityContext"]["runAsUser"] == int(uid)


def test_runtime_stage_carries_only_the_virtual_environment() -> None:
    runtime = DOCKERFILE.rsplit("\nFROM ", 1)[1]
    assert re.findall(r"^COPY\s+(.+)$", runtime, flags=re.MULTILINE) == ["--from=build /opt/venv /opt/venv"]


@pytest.mark.parametrize("source", ["pyproject.toml", "README.md", "exporter/", "analyzer/", "reaper/"])
def test_build_context_allows_what_the_build_copies(source: str) -> None:
    assert DOCKERIGNORE[0] == "*", ".dockerignore is an allow-list"
    assert f"!{source}" in DOCKERIGNORE
    assert (ROOT / source).exists()
    assert any(source in line for line in _instructions("COPY"))


def test_every_package_the_project_ships_is_in_the_image() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (include,) = re.findall(r"include = \[(.+)\]", pyproject)
    packages = {p.strip().strip('"').rstrip("*") for p in include.split(",")}
    assert {f"!{p}/" for p in packages} <= set(DOCKERIGNORE)
