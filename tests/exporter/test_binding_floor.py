"""The exporter works with the oldest NVML binding (nvidia-ml-py) that pyproject.toml allows.

scripts/setup.sh --test installs exactly that release apart from the venv (.venv/oldest-pynvml); a
subprocess imports the exporter and the simulator with it first on the path and runs collections, so
a constant the floor lacks (NVML_VALUE_TYPE_UNSIGNED_SHORT came with 12.560.30) fails here, not at a
user's import.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OLDEST = ROOT / ".venv" / "oldest-pynvml"

#: Runs in the subprocess: which ``pynvml.NAME`` references the old binding lacks, and a few cycles.
_PROBE = """
import json, pathlib, re, sys
import pynvml
root = pathlib.Path(sys.argv[1])
sources = [p for d in ("exporter", "simulation") for p in (root / d).rglob("*.py")]
names = {n for p in sources for n in re.findall(r"\\bpynvml\\.([A-Za-z_]\\w*)", p.read_text())}
from exporter.cycle import Cycle
from exporter.exposition import Exposition
from exporter.nvml import Nvml
from exporter.snapshot import SnapshotBuilder
from simulation.gpu_scenarios import build_scenario
clock = [1_750_000_000.0]
library = build_scenario("mig", clock=lambda: clock[0], sleep=lambda s: None)
now = lambda: clock[0]
cycle = Cycle(Nvml(library), SnapshotBuilder("node-a", version="old"), wall_clock=now, monotonic=now)
for _ in range(3):
    snapshot = cycle.run()
    clock[0] += 5
body = Exposition(lambda: snapshot).render()[0].decode()
print(json.dumps({
    "binding": pynvml.__file__,
    "missing": sorted(n for n in names if not hasattr(pynvml, n)),
    "ok": snapshot.ok,
    "families": sorted({line.split()[2] for line in body.splitlines() if line.startswith("# TYPE")}),
}))
"""


def _floor() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    (spec,) = [d for d in dependencies if d.startswith("nvidia-ml-py")]
    match = re.fullmatch(r"nvidia-ml-py>=([\d.]+)", spec)
    assert match, f"pyproject.toml: expected 'nvidia-ml-py>=X.Y.Z', got {spec!r}"
    return match.group(1)


def test_the_exporter_runs_with_the_oldest_binding_it_allows() -> None:
    floor = _floor()
    if not (OLDEST / f"nvidia_ml_py-{floor}.dist-info").is_dir():
        message = f"nvidia-ml-py {floor} is not installed in {OLDEST}; scripts/setup.sh --test installs it"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(OLDEST), str(ROOT)])}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(ROOT)], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert Path(found["binding"]).parent == OLDEST  # the old binding, not the venv's
    assert found["missing"] == [], (
        f"nvidia-ml-py {floor} lacks {found['missing']}: guard them or raise the floor"
    )
    assert found["ok"]
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "gpu_exporter_capability"} <= set(
        found["families"]
    )
