"""Emulated controllers for the Kubernetes emulator: each reconciles its children from its root.

Like the real ones, they undo any write to a child that disagrees with the root (the reason the
reaper writes only roots), and they honour the native stop the reaper sets on the root:

- Kubeflow Notebook: StatefulSet at 0 replicas while ``kubeflow-resource-stopped`` is set, else 1;
- KServe InferenceService: the predictor Deployment at 0 while ``serving.kserve.io/stop`` is "true";
- LeaderWorkerSet, Argo Rollout: the leader StatefulSet / ReplicaSet follow ``spec.replicas``;
- JobSet: its Jobs follow ``spec.suspend``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kmock

from harness.kube_emulator import RESOURCES, ApiServer
from reaper import names
from reaper.kinds import kind_of

Controller = Callable[[ApiServer], None]


def _children(server: ApiServer, kind: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(child, root) for every stored ``kind`` object whose controller is a stored object."""
    resource = kmock.resource(RESOURCES[kind])
    out = []
    for (r, ns, _), obj in list(server.objects.items()):
        if r != resource or obj.deleted:
            continue
        child = obj.raw
        for ref in child["metadata"].get("ownerReferences") or ():
            owner_kind = kind_of(ref["apiVersion"], ref["kind"])
            if ref.get("controller") and owner_kind in RESOURCES:  # no emulated controller for others
                root = server.raw(owner_kind, ns, ref["name"])
                if root is not None and root["metadata"].get("uid") == ref.get("uid"):
                    out.append((child, root))
    return out


def _replicas_from(root_kind: str, child_kind: str, wanted: Callable[[dict[str, Any]], int]) -> Controller:
    def reconcile(server: ApiServer) -> None:
        for child, root in _children(server, child_kind):
            if kind_of(root["apiVersion"], root["kind"]) != root_kind:
                continue
            replicas = wanted(root)
            if child.get("spec", {}).get("replicas") != replicas:
                meta = child["metadata"]
                server.controller_patch(
                    child_kind, meta["namespace"], meta["name"], {"spec": {"replicas": replicas}}
                )

    return reconcile


def _annotated(key: str, truthy: Callable[[str], bool]) -> Callable[[dict[str, Any]], int]:
    def wanted(root: dict[str, Any]) -> int:
        value = (root["metadata"].get("annotations") or {}).get(key)
        return 0 if value is not None and truthy(value) else 1

    return wanted


def _jobset(server: ApiServer) -> None:
    for child, root in _children(server, "Job"):
        if root["kind"] != "JobSet":
            continue
        suspend = bool(root.get("spec", {}).get("suspend"))
        if bool(child.get("spec", {}).get("suspend")) != suspend:
            meta = child["metadata"]
            server.controller_patch("Job", meta["namespace"], meta["name"], {"spec": {"suspend": suspend}})


CONTROLLERS: tuple[Controller, ...] = (
    _replicas_from("Notebook", "StatefulSet", _annotated(names.KUBEFLOW_STOPPED, lambda v: True)),
    _replicas_from("InferenceService", "Deployment", _annotated(names.KSERVE_STOP, lambda v: v == "true")),
    _replicas_from("LeaderWorkerSet", "StatefulSet", lambda root: int(root["spec"]["replicas"])),
    _replicas_from("Rollout", "ReplicaSet", lambda root: int(root["spec"]["replicas"])),
    _jobset,
)
