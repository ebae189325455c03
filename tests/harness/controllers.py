"""Emulated controllers for the Kubernetes emulator: each reconciles its children from its root.

Like the real ones, they undo any write to a child that disagrees with the root (the reason the
reaper writes only roots), and they honour the native stop the reaper sets on the root:

- Kubeflow Notebook: StatefulSet at 0 replicas while ``kubeflow-resource-stopped`` is set, else 1;
- KServe InferenceService: the predictor Deployment at 0 while ``serving.kserve.io/stop`` is "true";
- LeaderWorkerSet, Argo Rollout: the leader StatefulSet / ReplicaSet follow ``spec.replicas``;
- JobSet: its Jobs follow ``spec.suspend``;
- Kueue: a Job, JobSet or RayCluster follows its Workload's admission, whoever wrote its ``spec.suspend``.
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


def _kueue_conditions(active: bool, before: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A Workload's conditions once Kueue has reconciled it, as pkg/controller/core/workload_controller.go
    sets them: deactivated, it is evicted (reason InactiveWorkload); active, it is admitted (quota is
    always there here), and requeued with reason Reactivated when it was evicted by deactivation."""

    def cond(kind: str, status: bool, reason: str, message: str = "") -> dict[str, Any]:
        return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message}

    if not active:
        deactivated = "The workload is deactivated"
        return [
            cond("QuotaReserved", False, "Pending", deactivated),
            cond("Admitted", False, "NoReservation"),
            cond("Evicted", True, "InactiveWorkload", deactivated),
            cond("Requeued", False, "InactiveWorkload", deactivated),
        ]
    admitted = [cond("QuotaReserved", True, "QuotaReserved"), cond("Admitted", True, "Admitted")]
    evicted = before.get("Evicted", {})
    if evicted.get("status") == "True" and evicted.get("reason") == "InactiveWorkload":
        return [*admitted, cond("Requeued", True, "Reactivated", "The workload was reactivated")]
    return admitted + [c for t, c in before.items() if t == "Requeued"]


def _kueue(server: ApiServer) -> None:
    """Kueue's workload and job reconcilers, reduced to admission: a Job runs while its Workload is
    admitted and is suspended while it is not. So a Job someone else suspends while its Workload is
    admitted is unsuspended again (the job reconciler's "job admitted, unsuspending"), and a Workload
    set ``spec.active: false`` is evicted and its Job suspended until it is set active again."""
    for workload, job in _children(server, "KueueWorkload"):
        kind = kind_of(job["apiVersion"], job["kind"])
        if kind not in ("Job", "JobSet", "RayCluster"):
            continue
        active = (workload.get("spec") or {}).get("active") is not False
        before = {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or ()}
        after = _kueue_conditions(active, before)
        seen = {(c["type"], c["status"], c["reason"]) for c in before.values()}
        meta = workload["metadata"]
        if seen != {(c["type"], c["status"], c["reason"]) for c in after}:
            status = {"conditions": after}
            server.controller_patch("KueueWorkload", meta["namespace"], meta["name"], {"status": status})
        if bool((job.get("spec") or {}).get("suspend")) == active:
            server.controller_patch(
                kind, meta["namespace"], job["metadata"]["name"], {"spec": {"suspend": not active}}
            )


CONTROLLERS: tuple[Controller, ...] = (
    _replicas_from("Notebook", "StatefulSet", _annotated(names.KUBEFLOW_STOPPED, lambda v: True)),
    _replicas_from("InferenceService", "Deployment", _annotated(names.KSERVE_STOP, lambda v: v == "true")),
    _replicas_from("LeaderWorkerSet", "StatefulSet", lambda root: int(root["spec"]["replicas"])),
    _replicas_from("Rollout", "ReplicaSet", lambda root: int(root["spec"]["replicas"])),
    _jobset,
    _kueue,
)
