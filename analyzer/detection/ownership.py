"""Pod → controller, from kube-state-metrics' owner series.

``kube_pod_owner`` names a pod's direct owner; for a ReplicaSet, ``kube_replicaset_owner`` names
its Deployment; for a Job, ``kube_job_owner`` names what created it (a CronJob, a JobSet, any
controller), so the short Jobs of one schedule or sweep are judged as one workload; Jobs without
an owner whose pods carry ``app.kubernetes.io/name`` (``kube_pod_labels``, where allowed) are
grouped under that label as a ``JobGroup``. Other Jobs, StatefulSets, DaemonSets and custom
controllers are reported as themselves; pods without an owner as ``Pod``. The reaper scales what
this returns, so an unresolvable owner never guesses its way to a Deployment unless the
ReplicaSet's name carries a pod-template hash.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from analyzer.sources.aggregates import PodId, PodRecord
from common.model import WorkloadRef

NO_OWNER = "<none>"
# Ownerless Jobs sharing an app.kubernetes.io/name label: one workload, named by the label.
JOB_GROUP = "JobGroup"
# Deployment controllers name ReplicaSets <deployment>-<pod-template-hash>; the hash uses this alphabet.
_TEMPLATE_HASH = re.compile(r"^(?P<deployment>.+)-[bcdfghjklmnpqrstvwxz2456789]{6,10}$")


def _named(kind: str | None, name: str | None) -> bool:
    return bool(kind) and kind != NO_OWNER and bool(name) and name != NO_OWNER


def resolve(
    pod: PodRecord,
    replicasets: Mapping[PodId, tuple[str, str]],
    jobs: Mapping[PodId, tuple[str, str]] | None = None,
) -> WorkloadRef:
    """The workload a pod belongs to (``Pod`` for a bare pod)."""
    kind, name = _owner(pod, replicasets, jobs)
    return WorkloadRef(kind=kind, name=name, namespace=pod.namespace)


def _owner(
    pod: PodRecord,
    replicasets: Mapping[PodId, tuple[str, str]],
    jobs: Mapping[PodId, tuple[str, str]] | None,
) -> tuple[str, str]:
    """The (kind, name) of the workload a pod belongs to, in its namespace."""
    kind, name = pod.owner_kind, pod.owner_name
    if not _named(kind, name):
        return "Pod", pod.name
    assert kind is not None and name is not None  # for mypy: _named checked both
    if kind == "Job":
        above = (jobs or {}).get((pod.namespace, name))
        if above is not None and _named(*above):
            return above
        if pod.group:
            return JOB_GROUP, pod.group
    if kind == "ReplicaSet":
        owner = replicasets.get((pod.namespace, name))
        if owner is not None:
            return owner if _named(*owner) else ("ReplicaSet", name)
        if not replicasets:
            # kube_replicaset_owner is not collected at all: the name is the only clue left.
            match = _TEMPLATE_HASH.match(name)
            if match:
                return "Deployment", match["deployment"]
        return "ReplicaSet", name
    return kind, name


def resolve_all(
    pods: Mapping[PodId, PodRecord],
    replicasets: Mapping[PodId, tuple[str, str]],
    jobs: Mapping[PodId, tuple[str, str]] | None = None,
) -> dict[PodId, WorkloadRef]:
    # Pods of one workload share one reference (built and validated once, not once per pod).
    refs: dict[tuple[str, str, str], WorkloadRef] = {}
    out = {}
    for pid, pod in pods.items():
        kind, name = _owner(pod, replicasets, jobs)
        key = (kind, name, pod.namespace)
        ref = refs.get(key)
        if ref is None:
            ref = refs[key] = WorkloadRef(kind=kind, name=name, namespace=pod.namespace)
        out[pid] = ref
    return out
