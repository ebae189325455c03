"""scripts/setup.sh stops, naming the step, when an install step fails: a new user must never read
"setup: ok" over a broken environment."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _checkout_with_failing_pip(tmp_path: Path, failing: str) -> Path:
    """A copy of the setup script and project file whose virtualenv's pip fails, as a network or
    resolver error would, on the install whose arguments contain ``failing`` (the script only ever
    calls the venv's own Python)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        "#!/usr/bin/env bash\n"
        f'if [[ "$*" == *"{failing}"* ]]; then\n'
        '  echo "WARNING: Location noise the script filters" >&2\n'
        '  echo "ERROR: No matching distribution found for prometheus-client>=0.20" >&2\n'
        "  exit 1\n"
        "fi\n"
        "exit 0\n"
    )
    python.chmod(0o755)
    return tmp_path


@pytest.mark.parametrize(
    ("failing", "step"),
    [("--upgrade pip", "pip install --upgrade pip"), ("-e .", "pip install -e .")],
    ids=["pip-itself", "the-project"],
)
def test_a_failing_pip_stops_the_setup_and_names_the_step(tmp_path: Path, failing: str, step: str) -> None:
    checkout = _checkout_with_failing_pip(tmp_path, failing)
    done = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=checkout, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "setup: ok" not in done.stdout
    assert "No matching distribution found" in done.stdout + done.stderr  # pip's own reason
    assert f"setup: '{step}' failed (exit 1)" in done.stderr  # the step that failed
    assert "WARNING: Location" not in done.stdout + done.stderr
