"""The controller a stop must act on, named from the pod labels kube-state-metrics exports.

A fleet of workloads held through KServe, Kubeflow Notebooks and a LeaderWorkerSet, beside a plain
Deployment, goes through real Prometheus and VictoriaMetrics (and the in-memory twin): each idle
endpoint's advice names the controller the reaper would stop, the same one the reaper finds by
following ownerReferences in the cluster built from the same scenario. Without the labels
allowed, the advice says the reaper resolves the owner.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from analyzer.detection.controllers import owner_above
from analyzer.sources.aggregates import PodRecord
from common.model import Finding, FindingKind, WorkloadRef
from harness.analyses import TSDBS, report_on
from reaper.cluster import read_snapshot
from simulation.fleet import Fleet, Scenario, simulate
from simulation.in_memory_cluster import InMemoryCluster, fleet_objects

SCENARIO = """
name: controller-owned
end: 2026-01-05T00:00:00Z
duration: 8h
nodes:
  - {name: gpu-a, gpus: 8}
workloads:
  - {namespace: serving, name: summarizer-predictor, controller: InferenceService, behaviour: idle,
     replicas: 2}
  - {namespace: research, name: alice, kind: StatefulSet, controller: Notebook, behaviour: idle}
  - {namespace: serving, name: llama, kind: StatefulSet, controller: LeaderWorkerSet, behaviour: idle}
  - {namespace: serving, name: legacy-ranker, behaviour: idle}
"""
OWNERS = {
    "serving/Deployment/summarizer-predictor": WorkloadRef(
        kind="InferenceService", name="summarizer", namespace="serving"
    ),
    "research/StatefulSet/alice": WorkloadRef(kind="Notebook", name="alice", namespace="research"),
    "serving/StatefulSet/llama": WorkloadRef(kind="LeaderWorkerSet", name="llama", namespace="serving"),
}


def _fleet(**changes: object) -> Fleet:
    return simulate(Scenario.model_validate(yaml.safe_load(SCENARIO) | changes))


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return _fleet()


def _analyze(fleet: Fleet, tsdb: str, tmp_path: Path) -> dict[str, Finding]:
    return {f.workload.key(): f for f in report_on(fleet, tsdb, tmp_path).findings}


@pytest.mark.parametrize("tsdb", TSDBS)
def test_advice_names_the_controller_the_reaper_stops(tsdb: str, fleet: Fleet, tmp_path: Path) -> None:
    found = _analyze(fleet, tsdb, tmp_path)
    assert {k for k, f in found.items() if f.kind is FindingKind.IDLE_ENDPOINT} == {
        *OWNERS,
        "serving/Deployment/legacy-ranker",
    }
    snapshot = read_snapshot(InMemoryCluster(fleet_objects(fleet)), "gpu-reaper")
    for key, owner in OWNERS.items():
        f = found[key]
        assert f.owner == owner, key
        # The reaper, following ownerReferences through the API, stops the same object.
        chain, unlisted = snapshot.controllers(snapshot.workloads[key])
        assert unlisted is None and chain[-1].ref == owner, key
        assert f.recommendation.startswith(f"Stop {owner.kind} {owner.namespace}/{owner.name} ("), key
        assert f"of {f.workload.kind} {f.workload.namespace}/{f.workload.name} stayed" in f.recommendation
    assert found["serving/Deployment/summarizer-predictor"].recommendation.startswith(
        'Stop InferenceService serving/summarizer (set its serving.kserve.io/stop annotation to "true")'
    )
    plain = found["serving/Deployment/legacy-ranker"]
    assert plain.owner is None and plain.recommendation.startswith("Scale Deployment serving/legacy-ranker")
    assert (
        Finding.from_dict(found["research/StatefulSet/alice"].to_dict()).owner
        == OWNERS["research/StatefulSet/alice"]
    )


@pytest.mark.parametrize("tsdb", [TSDBS[0], TSDBS[1]])
def test_without_the_labels_allowed_the_advice_leaves_the_owner_to_the_reaper(
    tsdb: str, tmp_path: Path
) -> None:
    found = _analyze(_fleet(pod_labels_allowed=[]), tsdb, tmp_path)
    for key in OWNERS:
        f = found[key]
        assert f.kind is FindingKind.IDLE_ENDPOINT and f.owner is None
        w = f.workload
        assert f.recommendation.startswith(f"Scale {w.kind} {w.namespace}/{w.name} to zero")
        assert "gpu-reaper finds it through the Kubernetes API before it acts" in f.recommendation
        assert "owner" not in f.to_dict()


def _pod(name: str, owner_kind: str, owner_name: str, **labels: str) -> PodRecord:
    return PodRecord("ns", name, owner_kind=owner_kind, owner_name=owner_name, labels=tuple(labels.items()))


HASH = {"label_rollouts_pod_template_hash": "6d9f8b7c5"}


@pytest.mark.parametrize(
    ("ref", "pods", "expected"),
    [
        pytest.param(
            WorkloadRef(kind="Deployment", name="web", namespace="ns"),
            [_pod("web-6d9f8b7c5-x", "ReplicaSet", "web-6d9f8b7c5", **HASH)],
            WorkloadRef(kind="Rollout", name="web", namespace="ns"),
            id="rollout-replicaset-without-kube_replicaset_owner",
        ),
        pytest.param(
            WorkloadRef(kind="Rollout", name="web", namespace="ns"),
            [_pod("web-6d9f8b7c5-x", "ReplicaSet", "web-6d9f8b7c5", **HASH)],
            None,
            id="kube_replicaset_owner-already-names-the-rollout",
        ),
        pytest.param(
            WorkloadRef(kind="Deployment", name="p", namespace="ns"),
            [
                _pod("p-1", "ReplicaSet", "p-x", label_serving_kserve_io_inferenceservice="a"),
                _pod("p-2", "ReplicaSet", "p-x", label_serving_kserve_io_inferenceservice="b"),
            ],
            None,
            id="pods-that-disagree-name-none",
        ),
        pytest.param(
            WorkloadRef(kind="Deployment", name="p", namespace="ns"),
            [
                _pod("p-1", "ReplicaSet", "p-x", label_serving_kserve_io_inferenceservice="a"),
                _pod("p-2", "ReplicaSet", "p-x"),
            ],
            None,
            id="a-pod-without-the-label-names-none",
        ),
        pytest.param(
            WorkloadRef(kind="Job", name="j", namespace="ns"),
            [_pod("j-1", "Job", "j", label_notebook_name="j")],
            None,
            id="a-label-on-a-kind-its-controller-never-makes",
        ),
    ],
)
def test_owner_above(ref: WorkloadRef, pods: list[PodRecord], expected: WorkloadRef | None) -> None:
    assert owner_above(ref, pods) == expected
