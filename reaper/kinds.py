"""The Kubernetes kinds the reaper reads, by the name it uses for each, with their API coordinates.

Custom kinds are listed only where their API is served (a 404 means "not installed"). Knative's
``Service`` shares its kind with the core Service, so it goes by ``KnativeService`` here; objects and
ownerReferences are matched on API group and kind together (:func:`kind_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KindInfo:
    name: str  # the reaper's name for the kind (unique)
    api_kind: str  # ``kind`` as objects and ownerReferences spell it
    group: str  # "" for the core API
    version: str
    plural: str
    custom: bool = False  # a CRD: listed only when served
    namespaced: bool = True
    scale: bool = False  # a custom kind found by discovery to serve ``<plural>/scale`` (reaper.discovery)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path_prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


def _crd(name: str, group: str, version: str, plural: str, api_kind: str | None = None) -> KindInfo:
    return KindInfo(name, api_kind or name, group, version, plural, custom=True)


# Workloads that can hold GPUs, and the controllers that own them.
WORKLOAD_KINDS: tuple[KindInfo, ...] = (
    KindInfo("Deployment", "Deployment", "apps", "v1", "deployments"),
    KindInfo("StatefulSet", "StatefulSet", "apps", "v1", "statefulsets"),
    KindInfo("ReplicaSet", "ReplicaSet", "apps", "v1", "replicasets"),
    KindInfo("Job", "Job", "batch", "v1", "jobs"),
    _crd("Notebook", "kubeflow.org", "v1", "notebooks"),
    _crd("InferenceService", "serving.kserve.io", "v1beta1", "inferenceservices"),
    _crd("RayCluster", "ray.io", "v1", "rayclusters"),
    _crd("RayService", "ray.io", "v1", "rayservices"),
    _crd("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
    _crd("Rollout", "argoproj.io", "v1alpha1", "rollouts"),
    _crd("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets"),
    _crd("KnativeService", "serving.knative.dev", "v1", "services", api_kind="Service"),
    _crd("KnativeConfiguration", "serving.knative.dev", "v1", "configurations", api_kind="Configuration"),
    _crd("KnativeRevision", "serving.knative.dev", "v1", "revisions", api_kind="Revision"),
)
# Everything else the reaper reads or writes.
OTHER_KINDS: tuple[KindInfo, ...] = (
    KindInfo(
        "HorizontalPodAutoscaler", "HorizontalPodAutoscaler", "autoscaling", "v2", "horizontalpodautoscalers"
    ),
    _crd("ScaledObject", "keda.sh", "v1alpha1", "scaledobjects"),
    # The KEDA HTTP add-on's objects ``wake: keda-http`` writes (reaper.wake), and the Services read.
    _crd("InterceptorRoute", "http.keda.sh", "v1beta1", "interceptorroutes"),
    _crd("HTTPScaledObject", "http.keda.sh", "v1alpha1", "httpscaledobjects"),
    KindInfo("Service", "Service", "", "v1", "services"),
    # Kueue's unit of admission, one per Kueue-managed Job: the reaper stops such a Job through it.
    _crd("KueueWorkload", "kueue.x-k8s.io", "v1beta1", "workloads", api_kind="Workload"),
    # Read only for ``when: demand`` rules: the pods pending for GPUs (reaper.demand).
    KindInfo("Pod", "Pod", "", "v1", "pods"),
    KindInfo("Node", "Node", "", "v1", "nodes", namespaced=False),
    KindInfo("Namespace", "Namespace", "", "v1", "namespaces", namespaced=False),
    KindInfo("ConfigMap", "ConfigMap", "", "v1", "configmaps"),
    KindInfo("Event", "Event", "", "v1", "events"),
    KindInfo("Lease", "Lease", "coordination.k8s.io", "v1", "leases"),
)
KINDS: Mapping[str, KindInfo] = {k.name: k for k in (*WORKLOAD_KINDS, *OTHER_KINDS)}
_BY_GROUP_KIND = {(k.group, k.api_kind): k for k in KINDS.values()}
_KINDS: dict[str, KindInfo] = KINDS  # type: ignore[assignment]


def register_scalable(info: KindInfo) -> KindInfo:
    """Add a custom kind that discovery found serving ``/scale``; returns the registered entry.

    Process-wide on purpose: what discovery says about a kind holds for the whole process, and the
    adapter, the planner and the executor all find kinds by name here. A kind whose name another
    group already uses is registered as ``Kind.group``.
    """
    known = _BY_GROUP_KIND.get((info.group, info.api_kind))
    if known is not None:
        return known
    name = info.api_kind if info.api_kind not in _KINDS else f"{info.api_kind}.{info.group}"
    entry = KindInfo(name, info.api_kind, info.group, info.version, info.plural, True, info.namespaced, True)
    _KINDS[name] = entry
    _BY_GROUP_KIND[(entry.group, entry.api_kind)] = entry
    return entry


def kind_of(api_version: str, kind: str) -> str:
    """The reaper's name for an object's or ownerReference's kind; an unknown kind keeps its own name."""
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    info = _BY_GROUP_KIND.get((group, kind))
    return info.name if info is not None else kind


def object_kind(obj: Mapping[str, Any]) -> str:
    return kind_of(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
