"""Pod → controller, from kube-state-metrics' owner series.

``kube_pod_owner`` names a pod's direct owner; for a ReplicaSet, ``kube_replicaset_owner`` names
its Deployment. Jobs, StatefulSets, DaemonSets and custom controllers are reported as themselves;
pods without an owner as ``Pod``. The reaper scales what this returns, so an unresolvable owner
never guesses its way to a Deployment unless the ReplicaSet's name carries a pod-template hash.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from analyzer.sources.aggregates import PodId, PodRecord
from common.model import WorkloadRef

NO_OWNER = "<none>"
# Deployment controllers name ReplicaSets <deployment>-<pod-template-hash>; the hash uses this alphabet.
_TEMPLATE_HASH = re.compile(r"^(?P<deployment>.+)-[bcdfghjklmnpqrstvwxz2456789]{6,10}$")


def resolve(pod: PodRecord, replicasets: Mapping[PodId, tuple[str, str]]) -> WorkloadRef:
    """The workload a pod belongs to (``Pod`` for a bare pod)."""
    kind, name = pod.owner_kind, pod.owner_name
    if not kind or kind == NO_OWNER or not name or name == NO_OWNER:
        return WorkloadRef(kind="Pod", name=pod.name, namespace=pod.namespace)
    if kind == "ReplicaSet":
        owner = replicasets.get((pod.namespace, name))
        if owner is not None:
            owner_kind, owner_name = owner
            if owner_kind and owner_kind != NO_OWNER and owner_name and owner_name != NO_OWNER:
                return WorkloadRef(kind=owner_kind, name=owner_name, namespace=pod.namespace)
            return WorkloadRef(kind="ReplicaSet", name=name, namespace=pod.namespace)
        if not replicasets:
            # kube_replicaset_owner is not collected at all: the name is the only clue left.
            match = _TEMPLATE_HASH.match(name)
            if match:
                return WorkloadRef(kind="Deployment", name=match["deployment"], namespace=pod.namespace)
        return WorkloadRef(kind="ReplicaSet", name=name, namespace=pod.namespace)
    return WorkloadRef(kind=kind, name=name, namespace=pod.namespace)


def resolve_all(
    pods: Mapping[PodId, PodRecord], replicasets: Mapping[PodId, tuple[str, str]]
) -> dict[PodId, WorkloadRef]:
    return {pid: resolve(pod, replicasets) for pid, pod in pods.items()}
