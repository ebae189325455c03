"""What one analysis produced: the findings report and what it was built from.

Its own module so that the pipeline (which builds it) and the report (which plots from it) both
read it without either importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.detection.views import NodeView, WorkloadView
from analyzer.sources.aggregates import FleetSnapshot
from analyzer.sources.metrics_source import MetricsSource
from common.model import FindingsReport

__all__ = ["Analysis", "ClusterAnalysis"]


@dataclass(frozen=True)
class Analysis:
    """The report plus what it was built from (the HTML report plots from these).

    Where the source holds several clusters, each is analysed apart: ``parts`` holds each one's
    analysis with the source it read, ``report`` their findings together, and ``snapshot``,
    ``workloads`` and ``nodes`` are the first cluster's (use ``parts`` to read them all)."""

    report: FindingsReport
    snapshot: FleetSnapshot
    workloads: tuple[WorkloadView, ...]
    nodes: tuple[NodeView, ...]
    parts: tuple[ClusterAnalysis, ...] = ()
    # The namespaces whose pods held GPUs in the window, whatever the namespace scope: what a scope
    # that matched nothing is told.
    held: frozenset[str] = frozenset()

    @property
    def capabilities(self) -> str:
        if self.parts:
            return self.parts[0].analysis.capabilities + f"; {len(self.parts)} clusters"
        return self.snapshot.capabilities.describe()

    @property
    def gpu_count(self) -> int:
        """GPUs and MIG instances judged, in the namespace scope (the report says it too)."""
        return self.report.gpus_judged or 0


@dataclass(frozen=True)
class ClusterAnalysis:
    """One cluster's analysis, and the source restricted to that cluster it was read from."""

    cluster: str
    analysis: Analysis
    source: MetricsSource
