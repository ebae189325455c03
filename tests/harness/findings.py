"""Findings built in code for the reaper's tests: one idle-looking finding per call, at a fixed time."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from common.model import Finding, FindingKind, FindingsReport, TimeWindow, WorkloadRef

NOW = datetime(2026, 1, 5, tzinfo=UTC)
WINDOW = TimeWindow.ending(NOW, timedelta(hours=6))


def finding(
    kind: FindingKind | str = FindingKind.IDLE_ENDPOINT,
    name: str = "api",
    namespace: str = "serving",
    workload_kind: str = "Deployment",
    gpus: int = 1,
    wasted: float = 6.0,
    confidence: float = 1.0,
    window: TimeWindow = WINDOW,
    evidence: Mapping[str, Any] | None = None,
) -> Finding:
    ref = WorkloadRef(kind=workload_kind, name=name, namespace="" if workload_kind == "Node" else namespace)
    return Finding(
        kind=FindingKind(kind),
        workload=ref,
        gpus=tuple(f"GPU-{name}-{i}" for i in range(gpus)),
        nodes=("gpu-a",),
        window=window,
        evidence=evidence or {"mean_util_percent": 0.2, "max_util_percent": 0.9},
        confidence=confidence,
        wasted_gpu_hours=wasted,
    )


def report(*findings: Finding, window: TimeWindow = WINDOW) -> FindingsReport:
    return FindingsReport(window=window, generated_at=window.end, source="test", findings=findings)
