"""The dashboards' JSON is what their code (``dashboards/``, grafana-foundation-sdk) generates.

The chart ships the JSON files; they are generated, never edited: a file that differs from what the
code builds (a hand edit, or code changed without regenerating) fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dashboards import BUILDERS, DIRECTORY, Options, render
from harness.grafana import dashboard_files, variables

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(BUILDERS))
def test_committed_json_is_what_the_code_generates(name: str) -> None:
    committed = (DIRECTORY / f"{name}.json").read_text(encoding="utf-8")
    assert committed == render(name), (
        f"dashboards/{name}.json differs from what dashboards/{name}.py generates (a hand edit, or code "
        "changed without regenerating): run `python -m dashboards` and commit the JSON with the code"
    )


def test_every_shipped_file_has_a_builder() -> None:
    assert {p.stem for p in dashboard_files()} == set(BUILDERS)


def test_the_command_line_regenerates_and_checks(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "dashboards", *args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)

    check = run("--check")
    assert check.returncode == 0, f"stale dashboards ({check.stderr.strip()}): run `python -m dashboards`"
    assert run("--out", str(tmp_path)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.json" for n in BUILDERS)
    assert (tmp_path / "node.json").read_text(encoding="utf-8") == render("node")
    (tmp_path / "node.json").write_text("{}", encoding="utf-8")
    stale = run("--check", "--out", str(tmp_path))
    assert stale.returncode == 1
    assert "node.json" in stale.stderr


@pytest.mark.parametrize("name", list(BUILDERS))
def test_hiding_the_cluster_picker_changes_nothing_else(name: str) -> None:
    shown = json.loads(render(name))
    hidden = json.loads(render(name, Options(show_cluster=False)))
    (shown_cluster,) = [v for v in variables(shown) if v["name"] == "cluster"]
    (hidden_cluster,) = [v for v in variables(hidden) if v["name"] == "cluster"]
    assert (shown_cluster["hide"], hidden_cluster["hide"]) == (0, 2)
    hidden_cluster["hide"] = 0
    assert hidden == shown
