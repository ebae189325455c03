"""A namespace scope (``--namespace``, repeatable): the analysis and the run see only these namespaces.

Applied to the snapshot, before any workload is built, so every later query, view, finding and
summary is about the scope alone. Not as a PromQL matcher on the fleet-wide queries: the unit of
``DCGM_FI_DEV_GPU_UTIL`` is decided per scrape job from all its devices' maxima, and a scope's few
idle devices alone could not tell percent from ratio. GPUs held by no pod and whole-node findings belong to no
namespace: a scoped analysis leaves them out, and a scoped run never cordons a node.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from analyzer.sources.aggregates import FleetSnapshot
from common.model import FindingsReport


def scope_snapshot(snapshot: FleetSnapshot, namespaces: Collection[str]) -> FleetSnapshot:
    """The part of ``snapshot`` in ``namespaces``; the whole snapshot when no scope is given."""
    if not namespaces:
        return snapshot
    return replace(
        snapshot,
        devices={k: v for k, v in snapshot.devices.items() if k.allocated and k.namespace in namespaces},
        pods={k: v for k, v in snapshot.pods.items() if k[0] in namespaces},
        replicasets={k: v for k, v in snapshot.replicasets.items() if k[0] in namespaces},
        cpu={k: v for k, v in snapshot.cpu.items() if k[0] in namespaces},
    )


def scope_report(report: FindingsReport, namespaces: Collection[str]) -> FindingsReport:
    """The findings of ``report`` in ``namespaces`` (a findings file written for the whole fleet)."""
    if not namespaces:
        return report
    kept = tuple(f for f in report.findings if f.workload.namespace in namespaces)
    return report.model_copy(update={"findings": kept})
