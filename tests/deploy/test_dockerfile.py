"""The image the chart runs: a pinned slim base, a non-root user, and only the sources it needs.

No container engine runs in the test environment, so the Dockerfile is checked as text against
what the chart and the packaging expect.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.chart import only, render
from harness.requirements import declared, normal

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
DOCKERIGNORE = [
    line.strip()
    for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    if line.strip() and not line.startswith("#")
]


def _instructions(name: str) -> list[str]:
    return re.findall(rf"^{name}\s+(.+)$", DOCKERFILE, flags=re.MULTILINE)


def test_base_image_is_a_slim_python_release_pinned_by_digest() -> None:
    # A tag can be re-pushed; a digest names one image. Both stages use the same one (Dependabot
    # updates FROM lines, not build arguments).
    images = {line.split()[0] for line in _instructions("FROM")}
    assert len(images) == 1
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim-[a-z]+@sha256:[0-9a-f]{64}", images.pop())


def _locked(path: Path) -> dict[str, list[str]]:
    """Requirement → its hashes, from a lock written by scripts/lock.sh."""
    pins: dict[str, list[str]] = {}
    name = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"^[A-Za-z0-9]", line):
            name = re.split(r"[=;\s]", line, maxsplit=1)[0].lower()
            assert "==" in line, f"{path.name}: {name} is not pinned to one version"
            pins.setdefault(name, [])
        elif line.strip().startswith("--hash=sha256:"):
            pins[name].append(line.strip())
    return pins


def test_every_package_the_image_installs_is_pinned_with_hashes() -> None:
    for lock in ("image.txt", "build.txt"):
        pins = _locked(ROOT / "requirements" / lock)
        assert pins and all(pins.values()), f"requirements/{lock}: a requirement without a hash"
    assert re.search(
        r"pip install --require-hashes --only-binary :all: -r requirements/image\.txt", DOCKERFILE
    )
    assert re.search(r"pip install --require-hashes -r requirements/build\.txt", DOCKERFILE)
    # The project itself is installed from the locked environment: nothing else is fetched.
    assert re.search(r"pip install --no-deps --no-build-isolation \.", DOCKERFILE)


def test_the_locks_cover_what_pyproject_declares() -> None:
    """A dependency added to pyproject.toml without re-running scripts/lock.sh fails here, not in an
    image build."""
    assert declared() <= {normal(n) for n in _locked(ROOT / "requirements" / "image.txt")}
    assert declared("build-system", "requires") <= {
        normal(n) for n in _locked(ROOT / "requirements" / "build.txt")
    }


def test_dependabot_keeps_the_locks_and_the_base_image_current() -> None:
    config = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text(encoding="utf-8"))
    ecosystems = {(u["package-ecosystem"], u["directory"]) for u in config["updates"]}
    assert {("pip", "/requirements"), ("docker", "/")} <= ecosystems


def test_the_build_script_publishes_an_sbom_and_provenance_with_the_image() -> None:
    script = (ROOT / "scripts" / "build-image.sh").read_text(encoding="utf-8")
    assert re.search(r"docker buildx build --sbom=true --provenance=mode=max .*--push", script)


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
