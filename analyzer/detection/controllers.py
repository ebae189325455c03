"""The custom controller above a workload, named by the labels it writes on the workload's pods.

A KServe InferenceService's predictor Deployment, a Kubeflow Notebook's StatefulSet, a
LeaderWorkerSet's StatefulSets and an Argo Rollout's ReplicaSets are reconciled by their
controller: scaled down alone, they are scaled back up. The advice must name the controller, and
the metrics can name it where kube-state-metrics exports the pod labels these controllers write
(``--metric-labels-allowlist``, see docs/analyzer.md):

* ``serving.kserve.io/inferenceservice`` — the InferenceService (raw deployment and serverless
  predictors alike);
* ``notebook-name`` — the Kubeflow Notebook;
* ``leaderworkerset.sigs.k8s.io/name`` — the LeaderWorkerSet;
* ``rollouts-pod-template-hash`` — an Argo Rollout's ReplicaSet ``<rollout>-<hash>``, where
  ``kube_replicaset_owner`` (which names the Rollout itself) is not collected.

KubeRay is not among them: a RayCluster's pods are its own (``kube_pod_owner``), and the RayService
or RayJob above it labels the RayCluster, not the pods. Where nothing says, the reaper follows the
ownerReferences through the Kubernetes API before it acts (reaper.cluster).
"""

from __future__ import annotations

from collections.abc import Iterable

from analyzer.sources.aggregates import PodRecord
from analyzer.sources.dcgm import KSERVE_LABEL, LWS_LABEL, NOTEBOOK_LABEL, ROLLOUT_HASH_LABEL
from common.model import WorkloadRef

# (label, kind of the workload its pods belong to, controller kind): the label's value is its name.
_NAMED_BY_LABEL = (
    (KSERVE_LABEL, "Deployment", "InferenceService"),
    (NOTEBOOK_LABEL, "StatefulSet", "Notebook"),
    (LWS_LABEL, "StatefulSet", "LeaderWorkerSet"),
)
# How each controller is stopped, as gpu-reaper stops it (reaper.actuators).
STOPS = {
    "InferenceService": 'set its serving.kserve.io/stop annotation to "true"',
    "Notebook": "set its kubeflow-resource-stopped annotation",
    "LeaderWorkerSet": "scale it to zero",
    "Rollout": "scale it to zero",
}


def owner_above(ref: WorkloadRef, pods: Iterable[PodRecord]) -> WorkloadRef | None:
    """The controller the pods' labels name above ``ref``; None where they name none, or disagree."""
    found: set[tuple[str, str]] = set()
    for pod in pods:
        labels = dict(pod.labels)
        owner = _named(ref.kind, pod, labels)
        if owner is None:
            return None  # a pod without the label: nothing says all of them are the controller's
        found.add(owner)
    if len(found) != 1:
        return None
    ((kind, name),) = found
    return WorkloadRef(kind=kind, name=name, namespace=ref.namespace)


def _named(kind: str, pod: PodRecord, labels: dict[str, str]) -> tuple[str, str] | None:
    for label, holder, controller in _NAMED_BY_LABEL:
        value = labels.get(label)
        if value and kind == holder:
            return controller, value
    template_hash = labels.get(ROLLOUT_HASH_LABEL)
    rs = pod.owner_name or ""
    if template_hash and pod.owner_kind == "ReplicaSet" and rs.endswith(f"-{template_hash}"):
        # Argo Rollouts names a ReplicaSet <rollout>-<hash>; with kube_replicaset_owner the workload
        # already is the Rollout, and nothing is above it.
        return None if kind == "Rollout" else ("Rollout", rs.removesuffix(f"-{template_hash}"))
    return None
