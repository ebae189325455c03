"""A read-only snapshot of the cluster objects the planner needs, parsed from plain Kubernetes JSON.

Pure: the adapter (reaper/kube.py) lists the objects, the demo keeps them in memory; both are read
through :func:`read_snapshot`, so the planner sees the same shape either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from common.model import WorkloadRef
from common.timeutil import parse_time
from reaper import names
from reaper.kube_api import KubeApi
from reaper.state import ReaperState

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Workload:
    """A Deployment or StatefulSet."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    created: datetime | None = None
    replicas: int | None = None

    @property
    def ref(self) -> WorkloadRef:
        return WorkloadRef(kind=self.kind, name=self.name, namespace=self.namespace)


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    created: datetime | None = None
    unschedulable: bool = False
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Autoscaler:
    """An HPA or a KEDA ScaledObject and the workload it scales."""

    kind: str
    namespace: str
    name: str
    target_kind: str
    target_name: str

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def workload_key(kind: str, namespace: str, name: str) -> str:
    return WorkloadRef(kind=kind, name=name, namespace=namespace).key()


@dataclass(frozen=True)
class ClusterSnapshot:
    workloads: Mapping[str, Workload] = field(default_factory=dict)  # by WorkloadRef.key()
    nodes: Mapping[str, Node] = field(default_factory=dict)
    namespaces: Mapping[str, Namespace] = field(default_factory=dict)
    autoscalers: Mapping[str, tuple[Autoscaler, ...]] = field(default_factory=dict)  # by target key
    state: ReaperState = field(default_factory=ReaperState)

    def workload(self, ref: WorkloadRef) -> Workload | None:
        return self.workloads.get(ref.key())

    def autoscalers_for(self, ref: WorkloadRef) -> tuple[Autoscaler, ...]:
        return self.autoscalers.get(ref.key(), ())

    @property
    def gpu_node_count(self) -> int:
        return sum(1 for n in self.nodes.values() if n.gpus > 0)


# --- parsing plain Kubernetes JSON -----------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") or {}
    return meta if isinstance(meta, Mapping) else {}


def _strings(value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping) or not value:
        return _EMPTY
    return MappingProxyType({str(k): str(v) for k, v in value.items()})


def _created(meta: Mapping[str, Any]) -> datetime | None:
    text = meta.get("creationTimestamp")
    if not isinstance(text, str):
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def workload_from_object(kind: str, obj: Mapping[str, Any]) -> Workload:
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    replicas = spec.get("replicas") if isinstance(spec, Mapping) else None
    return Workload(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        labels=_strings(meta.get("labels")),
        annotations=_strings(meta.get("annotations")),
        created=_created(meta),
        # The API server defaults an absent spec.replicas to 1.
        replicas=int(replicas) if isinstance(replicas, int) else 1,
    )


def _gpu_capacity(obj: Mapping[str, Any]) -> int:
    status = obj.get("status") or {}
    capacity = status.get("capacity") or status.get("allocatable") or {}
    total = 0
    for key, value in capacity.items() if isinstance(capacity, Mapping) else ():
        if str(key).startswith(names.GPU_RESOURCE_PREFIXES):
            try:
                total += int(str(value))
            except ValueError:
                continue
    return total


def node_from_object(obj: Mapping[str, Any]) -> Node:
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    return Node(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        labels=_strings(meta.get("labels")),
        annotations=_strings(meta.get("annotations")),
        created=_created(meta),
        unschedulable=bool(spec.get("unschedulable", False)) if isinstance(spec, Mapping) else False,
        gpus=_gpu_capacity(obj),
    )


def namespace_from_object(obj: Mapping[str, Any]) -> Namespace:
    meta = _meta(obj)
    return Namespace(
        name=str(meta.get("name") or ""),
        labels=_strings(meta.get("labels")),
        annotations=_strings(meta.get("annotations")),
    )


def autoscaler_from_object(kind: str, obj: Mapping[str, Any]) -> Autoscaler | None:
    """An HPA (``HorizontalPodAutoscaler``) or KEDA ``ScaledObject``; None when it names no target."""
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    target = spec.get("scaleTargetRef") if isinstance(spec, Mapping) else None
    if not isinstance(target, Mapping) or not target.get("name"):
        return None
    return Autoscaler(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        # KEDA defaults the target kind to Deployment; HPAs always name it.
        target_kind=str(target.get("kind") or "Deployment"),
        target_name=str(target["name"]),
    )


def build_snapshot(
    *,
    deployments: Iterable[Mapping[str, Any]] = (),
    statefulsets: Iterable[Mapping[str, Any]] = (),
    nodes: Iterable[Mapping[str, Any]] = (),
    namespaces: Iterable[Mapping[str, Any]] = (),
    hpas: Iterable[Mapping[str, Any]] = (),
    scaled_objects: Iterable[Mapping[str, Any]] = (),
    state: ReaperState | None = None,
) -> ClusterSnapshot:
    workloads: dict[str, Workload] = {}
    for kind, objs in (("Deployment", deployments), ("StatefulSet", statefulsets)):
        for obj in objs:
            w = workload_from_object(kind, obj)
            workloads[workload_key(kind, w.namespace, w.name)] = w
    scalers: dict[str, list[Autoscaler]] = {}
    for kind, objs in (("HorizontalPodAutoscaler", hpas), ("ScaledObject", scaled_objects)):
        for obj in objs:
            a = autoscaler_from_object(kind, obj)
            if a is not None:
                scalers.setdefault(workload_key(a.target_kind, a.namespace, a.target_name), []).append(a)
    node_objs = (node_from_object(o) for o in nodes)
    ns_objs = (namespace_from_object(o) for o in namespaces)
    return ClusterSnapshot(
        workloads=workloads,
        nodes={n.name: n for n in node_objs},
        namespaces={n.name: n for n in ns_objs},
        autoscalers={k: tuple(v) for k, v in scalers.items()},
        state=state or ReaperState(),
    )


def read_snapshot(reader: KubeApi, reaper_namespace: str) -> ClusterSnapshot:
    """One list per kind (KEDA's ScaledObjects only where the CRD exists) and the confirmation state."""
    state_cm = reader.get_optional("ConfigMap", reaper_namespace, names.STATE_CONFIGMAP)
    state_text = ((state_cm or {}).get("data") or {}).get(names.STATE_KEY)
    return build_snapshot(
        deployments=reader.list_objects("Deployment"),
        statefulsets=reader.list_objects("StatefulSet"),
        nodes=reader.list_objects("Node"),
        namespaces=reader.list_objects("Namespace"),
        hpas=reader.list_objects("HorizontalPodAutoscaler"),
        scaled_objects=reader.list_optional("ScaledObject"),
        state=ReaperState.from_json(state_text),
    )
