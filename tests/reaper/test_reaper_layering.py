"""Layering: the reaper's decision code (policy, planner, snapshot, state, messages) does no I/O.

The import-linter contract in pyproject.toml states the same; this test checks it in a clean
interpreter so it also holds for imports pulled in indirectly (through the analyzer, say).
"""

from __future__ import annotations

import subprocess
import sys

DECISION_MODULES = (
    "reaper.policy",
    "reaper.planner",
    "reaper.cluster",
    "reaper.state",
    "reaper.messages",
    "reaper.names",
    "reaper.demo_cluster",
)
IO_PACKAGES = ("kubernetes", "requests", "slack_sdk", "grpc", "pynvml", "urllib3", "prometheus_api_client")


def test_decision_code_does_no_io() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in DECISION_MODULES)
        + f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {set(IO_PACKAGES)!r})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""
