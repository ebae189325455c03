"""A cluster built from a simulated fleet: the Kubernetes objects its workloads and nodes would be.

``fleet_objects`` returns plain manifests (Namespaces, Deployments, StatefulSets, the custom controllers
above them, RayClusters, Nodes) that seed
the in-memory cluster of ``gpu-reaper demo`` and the Kubernetes emulator in tests, so both see the
same cluster as the analyzer sees in the metrics.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from reaper import names, selectors
from reaper.adapter_errors import ConflictError, NotFoundError
from reaper.kinds import KINDS, object_kind
from simulation import controllers
from simulation.fleet import Fleet
from simulation.fleet.scenario import Controller, WorkloadKind, WorkloadSpec
from simulation.manifests import manifest

_SCALABLE = {WorkloadKind.DEPLOYMENT: "Deployment", WorkloadKind.STATEFULSET: "StatefulSet"}
_SCALE_KINDS = frozenset({"Deployment", "StatefulSet", "ReplicaSet"})  # apps/v1 kinds serving /scale


def _scale_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 Scale an API server answers for an object: its identity and replicas."""
    meta = obj.get("metadata") or {}
    kept = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {k: meta[k] for k in kept if k in meta},
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
        "status": {"replicas": (obj.get("status") or {}).get("replicas", 0)},
    }


def fleet_objects(
    fleet: Fleet,
    *,
    workload_annotations: Mapping[str, Mapping[str, str]] | None = None,
    namespace_annotations: Mapping[str, Mapping[str, str]] | None = None,
    reaper_namespace: str = names.DEFAULT_REAPER_NAMESPACE,
) -> list[dict[str, Any]]:
    """Manifests for the fleet's namespaces, Deployments, StatefulSets and GPU nodes.

    ``workload_annotations`` adds annotations by ``namespace/name`` (e.g. an opt-out) on top of the
    scenario's own; ``namespace_annotations`` likewise by namespace name.
    """
    sc = fleet.scenario
    extra = workload_annotations or {}
    ns_extra = namespace_annotations or {}
    first_start: dict[tuple[str, str], float] = {}
    for pod in fleet.pods:
        key = (pod.namespace, pod.workload.name)
        first_start[key] = min(first_start.get(key, pod.start), pod.start)

    objects: list[dict[str, Any]] = []
    namespaces = sorted({w.namespace for w in sc.workloads} | {"default", "kube-system", reaper_namespace})
    for ns in namespaces:
        objects.append(
            manifest("Namespace", ns, annotations=ns_extra.get(ns), created=sc.start - timedelta(days=90))
        )
    for w in sc.workloads:
        key = (w.namespace, w.name)
        created = datetime.fromtimestamp(first_start.get(key, sc.start.timestamp()), tz=UTC)
        annotations = {**w.annotations, **extra.get(f"{w.namespace}/{w.name}", {})}
        owned = _controlled(w, created)
        if owned:
            *_, holder = owned
            if annotations:
                holder["metadata"].setdefault("annotations", {}).update(annotations)
            objects.extend(owned)
            continue
        kind = _SCALABLE.get(w.kind)
        if kind is None:
            continue  # Jobs and bare Pods: the reaper only ever notifies about them
        labels = {**w.labels, "app.kubernetes.io/name": w.labels.get("app", w.name)}
        selector = {"matchLabels": {"app.kubernetes.io/name": labels["app.kubernetes.io/name"]}}
        # Pods that ask for the GPUs the fleet gives them: the reaper stops nothing that asks for none.
        template = controllers.pod_template(w.name, w.gpus_per_pod, labels, resource=_gpu_resource(sc, w))
        spec: dict[str, Any] = {"replicas": w.replicas, "selector": selector, "template": template}
        if kind == "StatefulSet":
            spec["serviceName"] = w.name
        # The status its controller reports once the rollout is done, a minute after creation.
        progressed = created + timedelta(minutes=1) if kind == "Deployment" else None
        objects.append(
            manifest(
                kind,
                w.name,
                w.namespace,
                labels=labels,
                annotations=annotations,
                created=created,
                spec=spec,
                status=controllers.replicated_status(w.replicas, progressed=progressed),
            )
        )
    for node in sc.nodes:
        resource = f"nvidia.com/mig-{node.mig_profile}" if node.mig_profile else "nvidia.com/gpu"
        capacity = {resource: str(node.slots), "cpu": "64", "memory": "512Gi"}
        objects.append(
            manifest(
                "Node",
                node.name,
                labels={
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": node.model.replace(" ", "-"),
                    "kubernetes.io/hostname": node.name,
                },
                created=sc.start - timedelta(days=30),
                spec={},
                status={"capacity": capacity, "allocatable": capacity},
            )
        )
    return objects


def _gpu_resource(scenario: Any, w: WorkloadSpec) -> str:
    """The resource a workload's pods ask for: a MIG profile's on a MIG node it is pinned to."""
    node = next((n for n in scenario.nodes if n.name == w.node), None)
    return f"nvidia.com/mig-{node.mig_profile}" if node is not None and node.mig_profile else controllers.GPU


def _controlled(w: WorkloadSpec, created: datetime) -> list[dict[str, Any]]:
    """The root and its children for a workload under a custom controller (the holder last); else []."""
    root = w.controller_root or w.name
    match w.kind, w.controller:
        case WorkloadKind.RAYCLUSTER, _:
            return controllers.ray_cluster(
                w.namespace, w.name, created, workers=w.replicas, gpus=w.gpus_per_pod
            )
        case _, Controller.NOTEBOOK:
            return controllers.notebook(w.namespace, root, created, gpus=w.gpus_per_pod)
        case _, Controller.INFERENCE_SERVICE:
            return controllers.inference_service(w.namespace, root, created, gpus=w.gpus_per_pod)
        case _, Controller.LEADER_WORKER_SET:
            return controllers.leader_worker_set(w.namespace, root, created, replicas=w.replicas)
    return []


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: mappings merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


class InMemoryCluster:
    """A tiny API server in memory with merge patches and resourceVersion checks: the demo's cluster.

    Implements ``reaper.kube_api.KubeApi``, like ``reaper.kube.KubeClient`` (reads, conditional patches,
    creates).
    """

    def __init__(self, objects: Iterable[Mapping[str, Any]] = (), *, served: Iterable[str] = ()) -> None:
        """``served``: custom kinds (the reaper's names, e.g. ``InterceptorRoute``) whose API discovery
        answers, as it does on a cluster with their CRDs installed; others answer none (404)."""
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._version = 1
        self._served: dict[str, list[dict[str, Any]]] = {}
        for kind in served:
            info = KINDS[kind]
            resource = {"name": info.plural, "kind": info.api_kind, "namespaced": info.namespaced}
            self._served.setdefault(f"{info.group}/{info.version}", []).append(resource)
        for obj in objects:
            self._put(copy.deepcopy(dict(obj)))

    @staticmethod
    def _key(kind: str, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (kind, namespace or "", name)

    def _put(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self._version)
        self._objects[self._key(object_kind(obj), meta.get("namespace"), meta["name"])] = obj
        return copy.deepcopy(obj)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self._objects.get(self._key(kind, namespace, name))
        if obj is None:
            raise NotFoundError(f"{kind} {namespace or ''}/{name} not found")
        return copy.deepcopy(obj)

    def get_optional(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.get(kind, namespace, name)
        except NotFoundError:
            return None

    def list_objects(
        self, kind: str, namespace: str | None = None, *, selector: str = "", cached: bool = False
    ) -> list[dict[str, Any]]:
        # Always current: memory has no cache to lag behind, so ``cached`` changes nothing.
        wanted = selectors.parse(selector)
        return [
            copy.deepcopy(o)
            for (k, ns, _), o in sorted(self._objects.items())
            if k == kind
            and (namespace is None or ns == namespace)
            and selectors.matches(wanted, (o.get("metadata") or {}).get("labels") or {})
        ]

    def patch(self, kind: str, namespace: str | None, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        key = self._key(kind, namespace, name)
        current = self._objects.get(key)
        if current is None:
            raise NotFoundError(f"{kind} {namespace or ''}/{name} not found")
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise ConflictError(f"{kind} {name}: the object has been modified", status=409)
        return self._put(_merge_patch(current, body))

    def create(self, kind: str, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(dict(body))
        info = KINDS.get(kind)
        obj.setdefault("apiVersion", info.api_version if info else "v1")
        obj.setdefault("kind", info.api_kind if info else kind)
        meta = obj.setdefault("metadata", {})
        if namespace:
            meta.setdefault("namespace", namespace)
        if self._key(kind, meta.get("namespace"), meta["name"]) in self._objects:
            raise ConflictError(f"{kind} {meta['name']} already exists", status=409)
        return self._put(obj)

    def delete(self, kind: str, namespace: str | None, name: str, *, uid: str = "") -> None:
        key = self._key(kind, namespace, name)
        current = self._objects.get(key)
        if current is None:
            raise NotFoundError(f"{kind} {namespace or ''}/{name} not found")
        if uid and (current.get("metadata") or {}).get("uid") != uid:
            raise ConflictError(f"{kind} {name}: the uid precondition failed", status=409)
        del self._objects[key]

    def list_optional(
        self, kind: str, namespace: str | None = None, *, selector: str = "", cached: bool = False
    ) -> list[dict[str, Any]]:
        # Every kind exists here; one with no objects lists empty.
        return self.list_objects(kind, namespace, selector=selector, cached=cached)

    def api_resources(self, group_version: str) -> list[dict[str, Any]] | None:
        # The kinds declared served, none with a scale subresource.
        resources = self._served.get(group_version)
        return copy.deepcopy(resources) if resources is not None else None

    def get_scale(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        """``/scale`` of the built-in kinds that serve it, as the API server does (none of custom kinds)."""
        if kind not in _SCALE_KINDS:
            raise NotFoundError(f"{kind} {namespace or ''}/{name}/scale not found")
        return _scale_of(self.get(kind, namespace, name))

    def patch_scale(
        self, kind: str, namespace: str | None, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A merge patch of ``spec.replicas`` through ``/scale``, conditional on the object's version."""
        if kind not in _SCALE_KINDS:
            raise NotFoundError(f"{kind} {namespace or ''}/{name}/scale not found")
        version = (body.get("metadata") or {}).get("resourceVersion")
        replicas = (body.get("spec") or {}).get("replicas")
        patch: dict[str, Any] = {"spec": {"replicas": replicas}}
        if version:
            patch["metadata"] = {"resourceVersion": version}
        return _scale_of(self.patch(kind, namespace, name, patch))

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """For assertions: the stored objects of a kind, uncounted."""
        return [copy.deepcopy(o) for (k, _, _), o in sorted(self._objects.items()) if k == kind]
