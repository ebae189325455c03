"""A Kueue-managed object's Workload: what the reaper deactivates to stop it, reactivates to restore it.

Kueue makes one Workload per Job, JobSet or RayCluster it manages (jobframework's
``GetWorkloadNameForOwnerWithGVK``: ``<kind>-<name>-<hash>``, cut to fit), owned by that object
through a controller ownerReference. The reaper finds it by that reference, never by its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reaper import names
from reaper.adapter_errors import NotFoundError
from reaper.kinds import KINDS, kind_of
from reaper.kube_api import KubeApi
from reaper.marks import meta
from reaper.outcomes import Refused


def kueue_workload(
    kube: KubeApi, namespace: str, name: str, obj: Mapping[str, Any], kind: str = "Job"
) -> dict[str, Any]:
    """The Kueue Workload of a Job, JobSet or RayCluster, found by its ownerReference to the
    object's uid and kind (as Kueue finds it). Listed from etcd, not the cache: it is about to be
    written."""
    what = f"{kind} {namespace}/{name}"
    try:
        listed = kube.list_objects("KueueWorkload", namespace)
    except NotFoundError as e:
        raise Refused(
            f"{what} is labelled {names.KUEUE_QUEUE_LABEL} but this cluster does not serve Kueue's "
            f"Workload API ({KINDS['KueueWorkload'].api_version}): gpu-reaper stops such a "
            f"{kind} only through its Workload (suspending it directly would fight Kueue); nothing changed"
        ) from e
    uid = meta(obj, "uid")
    owned = [
        w
        for w in listed
        if any(
            isinstance(r, Mapping)
            and kind_of(str(r.get("apiVersion") or ""), str(r.get("kind") or "")) == kind
            and r.get("uid") == uid
            for r in (w.get("metadata") or {}).get("ownerReferences") or ()
        )
    ]
    if len(owned) != 1:
        raise Refused(
            f"{len(owned)} Kueue Workloads are owned by {what} where Kueue keeps exactly one "
            "(is Kueue running?); nothing changed"
        )
    return owned[0]
