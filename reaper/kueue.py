"""A Kueue-managed Job's Workload: what the reaper deactivates to stop the Job, reactivates to restore it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reaper import names
from reaper.adapter_errors import NotFoundError
from reaper.kinds import KINDS
from reaper.kube_api import KubeApi
from reaper.marks import meta
from reaper.outcomes import Refused


def kueue_workload(kube: KubeApi, namespace: str, name: str, job: Mapping[str, Any]) -> dict[str, Any]:
    """The Kueue Workload of a Job, found by its ownerReference to the Job's uid (as Kueue finds
    it), never by guessing its name. Listed from etcd, not the cache: it is about to be written."""
    try:
        listed = kube.list_objects("KueueWorkload", namespace)
    except NotFoundError as e:
        raise Refused(
            f"Job {namespace}/{name} is labelled {names.KUEUE_QUEUE_LABEL} but this cluster does not "
            f"serve Kueue's Workload API ({KINDS['KueueWorkload'].api_version}): gpu-reaper stops such "
            "a Job only through its Workload (suspending it directly would fight Kueue); nothing changed"
        ) from e
    uid = meta(job, "uid")
    owned = [
        w
        for w in listed
        if any(
            r.get("kind") == "Job" and r.get("uid") == uid
            for r in (w.get("metadata") or {}).get("ownerReferences") or ()
        )
    ]
    if len(owned) != 1:
        raise Refused(
            f"{len(owned)} Kueue Workloads are owned by Job {namespace}/{name} where Kueue keeps "
            "exactly one (is Kueue running?); nothing changed"
        )
    return owned[0]
