"""A read-only snapshot of the cluster objects the planner needs, parsed from plain Kubernetes JSON.

Pure: the adapter (reaper/kube.py) lists the objects, the demo keeps them in memory; both are read
through :func:`read_snapshot`, so the planner sees the same shape either way.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from common.model import WorkloadRef
from common.timeutil import parse_time
from reaper import names, selectors, wake
from reaper.adapter_errors import ForbiddenError, KubeError, NotFoundError
from reaper.demand import PendingDemand, pending_pods, queued_workloads
from reaper.discovery import ScaleDiscovery
from reaper.kinds import KINDS, WORKLOAD_KINDS, KindInfo, kind_of
from reaper.kube_api import KubeApi
from reaper.policy.schema import DEFAULT_GPU_NODE_SELECTOR, LabelSelector
from reaper.state import ReaperState, StopRecord, stop_key

log = logging.getLogger(__name__)

_EMPTY: Mapping[str, str] = MappingProxyType({})
# Kinds with spec.replicas and a rollout status.
REPLICATED_KINDS = frozenset({"Deployment", "StatefulSet", "ReplicaSet", "LeaderWorkerSet", "Rollout"})


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """An ownerReference with ``controller: true``: the object that reconciles this one."""

    kind: str  # the reaper's name for the kind (reaper.kinds)
    name: str
    uid: str = ""
    api_version: str = ""  # as the reference spells them: discovery asks that group-version
    api_kind: str = ""

    def describe(self, namespace: str) -> str:
        return f"{self.kind} {namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Rollout:
    """A controller's report on rolling out the current spec (Deployment, StatefulSet, Argo Rollout…)."""

    generation: int
    observed_generation: int
    desired: int
    updated: int
    available: int

    @property
    def in_progress(self) -> bool:
        if self.observed_generation < self.generation:
            return True  # the controller has not even seen the latest spec yet
        return self.desired > 0 and (self.updated < self.desired or self.available < self.desired)

    def describe(self) -> str:
        if self.observed_generation < self.generation:
            return f"generation {self.generation} not yet observed by its controller"
        return f"{self.updated} of {self.desired} replicas updated, {self.available} available"


@dataclass(frozen=True, slots=True)
class Workload:
    """Any object that holds GPUs or controls what does: a Deployment, a Notebook, a RayCluster…"""

    kind: str  # the reaper's name for the kind (reaper.kinds)
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    created: datetime | None = None
    replicas: int | None = None  # spec.replicas where the kind has it
    suspended: bool = False  # spec.suspend
    owner: OwnerRef | None = None  # the controller, when one owns it
    template_annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # The GPU resources its pod templates request (nvidia.com/gpu, nvidia.com/mig-…), wherever the
    # kind keeps them: empty when it asks for none, and then a finding about it is not trusted.
    gpu_resources: frozenset[str] = frozenset()
    rollout: Rollout | None = None  # None until a controller reports (status.observedGeneration)
    last_progress: datetime | None = None  # the Progressing condition's lastUpdateTime
    # A digest of the spec, replicas aside: another one means a redeploy (a new image, a rollout
    # restart, any edit), which drops a standing notice (reaper.notice). Scaling alone is not one.
    spec_digest: str = ""

    @property
    def ref(self) -> WorkloadRef:
        return WorkloadRef(kind=self.kind, name=self.name, namespace=self.namespace)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def restarted_at(self) -> datetime | None:
        """``kubectl rollout restart`` stamps the pod template with this annotation."""
        return _time(self.template_annotations.get(names.RESTARTED_AT))

    @property
    def unreadable_restart(self) -> str | None:
        """The pod template's ``restartedAt`` when it is there but no time can be read from it."""
        value = self.template_annotations.get(names.RESTARTED_AT)
        return value if value is not None and self.restarted_at is None else None

    @property
    def grace_start(self) -> datetime | None:
        """The latest of creation, the last ``rollout restart`` and the last rollout progress."""
        times = [t for t in (self.created, self.restarted_at, self.last_progress) if t is not None]
        return max(times) if times else None


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
    ours: bool = False  # created by gpu-reaper for ``wake: keda-http`` (reaper.wake)
    owner_kind: str = ""  # its controller's kind: KEDA's HPA is owned by its ScaledObject
    owner: str = ""

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

    by_uid: Mapping[str, Workload] = field(default_factory=dict)
    # The workload kinds whose list answered: an owner of one of these that is not in the snapshot
    # is not in the namespace (or nowhere), rather than unreadable.
    listed_kinds: frozenset[str] = frozenset()
    # When the reaper last restored what, by the record's keys (reaper.state.stop_key).
    restores: Mapping[str, datetime] = field(default_factory=dict)
    # The unmet GPU demand, read only where a rule acts ``when: demand``; None: not read.
    demand: PendingDemand | None = None

    def restored_at(self, w: Workload) -> datetime | None:
        """When the reaper last restored ``w``, as its record of stops says (None: not recently)."""
        info = KINDS.get(w.kind)
        if info is None:
            return None
        return self.restores.get(stop_key(info.group, info.api_kind, w.namespace, w.name))

    def workload(self, ref: WorkloadRef) -> Workload | None:
        return self.workloads.get(ref.key())

    def controllers(self, workload: Workload) -> tuple[tuple[Workload, ...], OwnerRef | None]:
        """The listed controllers above ``workload``, nearest first, and the first one that is not listed.

        The chain follows ownerReferences with ``controller: true`` by uid, within the object's own
        namespace: Kubernetes never follows an owner across namespaces, so a reference whose uid is
        another namespace's object (forged by whoever can edit the child) names no owner here. An
        owner that is not in the snapshot (a kind the reaper does not list, or not installed, or
        absent from the namespace) ends the chain as a bare reference: the reaper knows who controls
        the object, not how to stop it. The one hop through an object the reaper does not read: a
        LeaderWorkerSet's worker StatefulSets are owned by their group's leader Pod, and carry the
        LeaderWorkerSet's name in a label.
        """
        chain: list[Workload] = []
        seen = {workload.uid}
        current = workload
        while current.owner is not None:
            owner = self._owner(current)
            if owner is None and current.owner.kind == "Pod":
                lws = current.labels.get(names.LWS_NAME_LABEL)
                owner = (
                    self.workload(WorkloadRef(kind="LeaderWorkerSet", name=lws, namespace=current.namespace))
                    if lws
                    else None
                )
            if owner is None or owner.uid in seen:
                return tuple(chain), current.owner
            chain.append(owner)
            seen.add(owner.uid)
            current = owner
        return tuple(chain), None

    def _owner(self, child: Workload) -> Workload | None:
        """The object ``child``'s controller reference names: same uid, kind, name and namespace."""
        ref = child.owner
        if ref is None or not ref.uid:
            return None
        owner = self.by_uid.get(ref.uid)
        named = (child.namespace, ref.kind, ref.name)
        if owner is None or (owner.namespace, owner.kind, owner.name) != named:
            return None
        return owner

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


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_time(text)
    except ValueError:
        return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _controller(meta: Mapping[str, Any]) -> OwnerRef | None:
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            kind = kind_of(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""))
            return OwnerRef(
                kind=kind,
                name=str(ref.get("name") or ""),
                uid=str(ref.get("uid") or ""),
                api_version=str(ref.get("apiVersion") or ""),
                api_kind=str(ref.get("kind") or ""),
            )
    return None


def _rollout(
    kind: str, meta: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any]
) -> Rollout | None:
    # Only controllers that report observedGeneration say whether they have caught up (a
    # LeaderWorkerSet does not); their replica counts are omitted from status when zero.
    if "observedGeneration" not in status or not isinstance(spec.get("replicas", 1), int):
        return None
    desired = _int(spec.get("replicas"), 1)
    generation = _int(meta.get("generation"), 1)
    observed = status.get("observedGeneration")
    if isinstance(observed, str):
        # Argo Rollouts writes it as a string; older releases wrote a hash, which says nothing here.
        try:
            observed = int(observed) if observed.isdigit() else generation
        except ValueError:  # "²" is a digit int() refuses; 5,000 digits are more than it reads
            observed = generation
    return Rollout(
        generation=generation,
        observed_generation=_int(observed),
        desired=desired,
        # A ReplicaSet has one template: all its replicas are "updated".
        updated=_int(status.get("updatedReplicas")) if kind != "ReplicaSet" else desired,
        available=_int(status.get("availableReplicas")),
    )


def _last_progress(status: Mapping[str, Any]) -> datetime | None:
    conditions = status.get("conditions")
    for c in conditions if isinstance(conditions, list) else ():
        if isinstance(c, Mapping) and c.get("type") == "Progressing":
            return _time(c.get("lastUpdateTime")) or _time(c.get("lastTransitionTime"))
    return None


def _scalable(kind: str) -> bool:
    info = KINDS.get(kind)
    return info is not None and info.scale


def workload_from_object(kind: str, obj: Mapping[str, Any]) -> Workload:
    meta = _meta(obj)
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    replicas = spec.get("replicas")
    template = _mapping(_mapping(spec.get("template")).get("metadata"))
    return Workload(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        labels=_strings(meta.get("labels")),
        annotations=_strings(meta.get("annotations")),
        created=_created(meta),
        # The API server defaults an absent spec.replicas to 1 for the kinds that have it.
        replicas=_int(replicas, 1) if kind in REPLICATED_KINDS or _scalable(kind) else None,
        suspended=spec.get("suspend") is True,
        owner=_controller(meta),
        template_annotations=_strings(template.get("annotations")),
        gpu_resources=gpu_resources(spec),
        rollout=_rollout(kind, meta, spec, status) if kind in REPLICATED_KINDS else None,
        last_progress=_last_progress(status),
        spec_digest=spec_digest(spec),
    )


def spec_digest(spec: Mapping[str, Any]) -> str:
    """A short digest of a spec without its replica count (which autoscalers and owners change
    without redeploying): equal digests, the same pod templates and settings."""
    rest = {k: v for k, v in spec.items() if k != "replicas"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_RESOURCE_LISTS = ("limits", "requests")


def gpu_resources(spec: Mapping[str, Any], depth: int = 12) -> frozenset[str]:
    """The GPU resources requested anywhere in an object's spec, with a quantity above zero.

    A kind with one pod template (``spec.template``: Deployment, StatefulSet, Job, Notebook…) asks
    through its containers, init containers and pod-level resources. Other kinds keep their pod specs
    elsewhere (a RayCluster's ``workerGroupSpecs[].template``, a JobSet's
    ``replicatedJobs[].template.spec.template``, a KServe predictor's ``model.resources``): there any
    ``resources`` with ``limits`` or ``requests`` naming a GPU resource counts, at whatever depth
    (bounded: a spec is never that deep).
    """
    pod = _mapping(_mapping(spec.get("template")).get("spec"))
    if pod:  # the common case (Deployment, StatefulSet, Job, Notebook…): one pod template
        return _pod_gpus(pod)
    found: set[str] = set()
    stack: list[tuple[Any, int]] = [(spec, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, Mapping):
            resources = node.get("resources")
            if isinstance(resources, Mapping):
                for key in _RESOURCE_LISTS:
                    found.update(_gpus_in(resources.get(key)))
            if level < depth:
                stack.extend((v, level + 1) for v in node.values() if isinstance(v, Mapping | list))
        elif isinstance(node, list) and level < depth:
            stack.extend((v, level + 1) for v in node if isinstance(v, Mapping | list))
    return frozenset(found)


def _pod_gpus(pod: Mapping[str, Any]) -> frozenset[str]:
    """The GPU resources a pod spec asks for: its containers', init containers' and its own."""
    found: set[str] = set()
    for key in ("containers", "initContainers"):
        containers = pod.get(key)
        for c in containers if isinstance(containers, list) else ():
            resources = _mapping(c).get("resources") if isinstance(c, Mapping) else None
            if isinstance(resources, Mapping):
                for which in _RESOURCE_LISTS:
                    found.update(_gpus_in(resources.get(which)))
    own = pod.get("resources")  # pod-level resources (Kubernetes 1.32 onwards)
    if isinstance(own, Mapping):
        for which in _RESOURCE_LISTS:
            found.update(_gpus_in(own.get(which)))
    return frozenset(found)


def _gpus_in(quantities: Any) -> Iterable[str]:
    if not isinstance(quantities, Mapping):
        return ()
    return (
        str(name)
        for name, quantity in quantities.items()
        if str(name).startswith(names.GPU_RESOURCE_PREFIXES) and str(quantity).strip() not in _NONE
    )


# Quantities that ask for nothing (the API server keeps GPU quantities whole: no "0.0", no "0m").
_NONE = frozenset({"", "0", "0.0", "None", "null"})


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
    owner = _controller(meta)
    return Autoscaler(
        kind=kind,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        # KEDA defaults the target kind to Deployment; HPAs always name it.
        target_kind=str(target.get("kind") or "Deployment"),
        target_name=str(target["name"]),
        ours=wake.ours(obj),
        owner_kind=owner.api_kind if owner is not None else "",
        owner=owner.name if owner is not None else "",
    )


def build_snapshot(
    *,
    deployments: Iterable[Mapping[str, Any]] = (),
    statefulsets: Iterable[Mapping[str, Any]] = (),
    workloads: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
    nodes: Iterable[Mapping[str, Any]] = (),
    namespaces: Iterable[Mapping[str, Any]] = (),
    hpas: Iterable[Mapping[str, Any]] = (),
    scaled_objects: Iterable[Mapping[str, Any]] = (),
    state: ReaperState | None = None,
    record: StopRecord | None = None,
) -> ClusterSnapshot:
    """The snapshot from plain objects; ``workloads`` lists objects by kind (reaper.kinds names)."""
    by_key: dict[str, Workload] = {}
    listed = {"Deployment": deployments, "StatefulSet": statefulsets, **(workloads or {})}
    for kind, objs in listed.items():
        for obj in objs:
            w = workload_from_object(kind, obj)
            by_key[workload_key(kind, w.namespace, w.name)] = w
    scalers: dict[str, list[Autoscaler]] = {}
    for kind, objs in (("HorizontalPodAutoscaler", hpas), ("ScaledObject", scaled_objects)):
        for obj in objs:
            a = autoscaler_from_object(kind, obj)
            if a is not None:
                scalers.setdefault(workload_key(a.target_kind, a.namespace, a.target_name), []).append(a)
    node_objs = (node_from_object(o) for o in nodes)
    ns_objs = (namespace_from_object(o) for o in namespaces)
    return ClusterSnapshot(
        workloads=by_key,
        by_uid={w.uid: w for w in by_key.values() if w.uid},
        nodes={n.name: n for n in node_objs},
        namespaces={n.name: n for n in ns_objs},
        autoscalers={k: tuple(v) for k, v in scalers.items()},
        state=state or ReaperState(),
        listed_kinds=frozenset(listed),
        restores=dict(record.restored) if record is not None else {},
    )


Scope = tuple[str | None, ...]  # the namespaces to list in; (None,): cluster-wide


def _list_workloads(reader: KubeApi, kind: KindInfo, scope: Scope) -> list[dict[str, Any]] | None:
    """Every object of a workload kind in the scope; None where the reaper may not list them."""
    # From the watch cache: every write to a workload is conditional on the resourceVersion the plan
    # saw, so a stale copy costs a 409 and a quorum re-read, never a write on stale data.
    if not kind.custom:
        return [o for ns in scope for o in reader.list_objects(kind.name, ns, cached=True)]
    try:
        return [o for ns in scope for o in reader.list_optional(kind.name, ns, cached=True)]
    except ForbiddenError:
        # Not granted (the chart's rbac.controllers): the kind's children then have an owner the
        # reaper cannot see, and are skipped as controller_managed, never scaled behind its back.
        log.warning("not allowed to list %s: the workloads they control are left alone", kind.plural)
        return None


def list_gpu_nodes(reader: KubeApi, selector: LabelSelector | None) -> list[dict[str, Any]]:
    """The nodes with GPUs: by label where the cluster labels them, else every node, kept by capacity.

    A cluster without the labels (no GPU feature discovery) answers the selector with nothing; its
    nodes are then told apart by the GPUs they report. Nodes are written only by a conditional
    cordon, so the watch cache serves both lists. Nodes the reaper may not list (an install scoped
    to namespaces) are none: no node is cordoned, and nothing else needs them.
    """
    try:
        if selector is not None:
            labelled = reader.list_objects("Node", selector=selectors.query(selector), cached=True)
            if labelled:
                return labelled
            log.info(
                "no node matches %s: listing every node and keeping those with GPUs", selector.describe()
            )
        return [n for n in reader.list_objects("Node", cached=True) if _gpu_capacity(n) > 0]
    except ForbiddenError as e:
        log.warning("not allowed to list nodes (%s): no node is cordoned this run", e)
        return []


def read_namespaces(reader: KubeApi, scope: Collection[str]) -> list[dict[str, Any]]:
    """The Namespace objects: all of them, or (scoped) each of the scope's, read one by one.

    What their annotations say (the opt-out ``gpu-reaper/exclude``, the owners' Slack channel) is
    lost where the reaper may not read them: said once, and the run goes on without them.
    """
    try:
        if not scope:
            return reader.list_objects("Namespace")
        return [ns for name in scope if (ns := reader.get_optional("Namespace", None, name)) is not None]
    except ForbiddenError as e:
        log.warning(
            "not allowed to read namespaces (%s): their %s and %s annotations are not honoured this run",
            e,
            names.EXCLUDE,
            names.SLACK_CHANNEL,
        )
        return []


# The chart value that lets the reaper list pods and Kueue Workloads (deploy/helm values.yaml).
READ_PENDING_PODS_VALUE = "rbac.readPendingPods"


def read_demand(reader: KubeApi, scope: Scope, extra: Sequence[str] = ()) -> PendingDemand:
    """The pods pending unschedulable for GPUs and the Kueue Workloads waiting for admission.

    Pods from the watch cache, in pages: nothing is written on the strength of a pending pod, and
    a lagging cache only delays a stop. Pods the reaper may not list leave the demand unknown (no
    ``when: demand`` action this run); Kueue not installed (404) is no Kueue demand, and said so.
    """
    try:
        pods = [o for ns in scope for o in reader.list_objects("Pod", ns, cached=True)]
    except ForbiddenError as e:
        # Said once, at the start of the run: the chart grants this only when asked to.
        log.warning(
            "a when: demand rule needs to list pods, and this reaper may not (%s): grant it with the "
            "chart value %s=true; no when: demand rule acts this run",
            e,
            READ_PENDING_PODS_VALUE,
        )
        return PendingDemand(unreadable=f"pods not listed: not allowed ({READ_PENDING_PODS_VALUE})")
    except KubeError as e:
        log.warning("cannot list pods (%s): no when: demand rule acts this run", e)
        return PendingDemand(unreadable=f"pods not listed: {e}")
    wants = pending_pods(pods, extra)
    try:
        workloads = [o for ns in scope for o in reader.list_objects("KueueWorkload", ns, cached=True)]
    except NotFoundError:
        return PendingDemand(tuple(wants), kueue="Kueue not installed: no Kueue demand")
    except ForbiddenError as e:
        log.warning(
            "cannot list Kueue Workloads (%s): their demand is not counted; grant it with the chart "
            "value %s=true",
            e,
            READ_PENDING_PODS_VALUE,
        )
        return PendingDemand(
            tuple(wants), kueue="Kueue Workloads not listed (not allowed): their demand not counted"
        )
    except KubeError as e:
        log.warning("cannot list Kueue Workloads (%s): their demand is not counted", e)
        return PendingDemand(
            tuple(wants), kueue=f"Kueue Workloads not listed ({e}): their demand not counted"
        )
    queued = queued_workloads(workloads, extra)
    waiting = len({w.source.split(" (", 1)[0] for w in queued})
    note = f"{waiting} Kueue Workload{'s' if waiting != 1 else ''} waiting for GPUs" if waiting else ""
    return PendingDemand((*wants, *queued), kueue=note or "no Kueue Workload waiting for GPUs")


def read_snapshot(
    reader: KubeApi,
    reaper_namespace: str,
    gpu_node_selector: LabelSelector | None = DEFAULT_GPU_NODE_SELECTOR,
    namespaces: Collection[str] = (),
    demand_resources: Sequence[str] | None = None,
) -> ClusterSnapshot:
    """One list per kind (custom kinds only where their API is served) and the confirmation state.

    ``demand_resources``: where a rule acts ``when: demand``, the extra resource names counted as
    GPU demand (the policy's ``demand.resources``); the demand is then read too (:func:`read_demand`).

    Scoped to ``namespaces`` (none: the whole cluster), every namespaced kind is listed in each of
    them rather than cluster-wide, which a reaper granted Roles in those namespaces only may do.
    Namespaces and autoscalers are read consistently (no cache): they are never written, and an
    opt-out or a new autoscaler must not be missed because a cache lagged.
    """
    state_cm = reader.get_optional("ConfigMap", reaper_namespace, names.STATE_CONFIGMAP)
    data = (state_cm or {}).get("data") or {}
    scope: Scope = tuple(namespaces) or (None,)
    listed: dict[str, list[dict[str, Any]]] = {}
    for kind in WORKLOAD_KINDS:
        objs = _list_workloads(reader, kind, scope)
        if objs is not None:
            listed[kind.name] = objs
    listed.update(scalable_owners(reader, listed))
    snapshot = build_snapshot(
        workloads=listed,
        nodes=list_gpu_nodes(reader, gpu_node_selector),
        namespaces=read_namespaces(reader, namespaces),
        hpas=[o for ns in scope for o in reader.list_objects("HorizontalPodAutoscaler", ns)],
        scaled_objects=[o for ns in scope for o in reader.list_optional("ScaledObject", ns)],
        state=ReaperState.from_json(data.get(names.STATE_KEY)),
        record=StopRecord.from_json(data.get(names.STOPPED_KEY)),
    )
    if demand_resources is None:
        return snapshot
    return replace(snapshot, demand=read_demand(reader, scope, demand_resources))


def with_scale_replicas(obj: Mapping[str, Any], scale: Mapping[str, Any]) -> dict[str, Any]:
    """The object with ``spec.replicas`` as its ``/scale`` reports it (the CRD may keep it elsewhere)."""
    replicas = _mapping(scale.get("spec")).get("replicas")
    return {**obj, "spec": {**_mapping(obj.get("spec")), "replicas": _int(replicas)}}


def scalable_owners(
    reader: KubeApi, listed: Mapping[str, list[dict[str, Any]]], hops: int = 4
) -> dict[str, list[dict[str, Any]]]:
    """The unlisted custom controllers above listed objects that serve ``/scale``, by kind.

    Only owners actually met in ownerReferences are looked up (discovery once per group-version,
    then the object and its scale). One the reaper may not read stays unlisted: its children are
    then skipped as controller_managed, and nothing is written.
    """
    discovery = ScaleDiscovery(reader)
    found: dict[str, list[dict[str, Any]]] = {}
    uids = {str(_meta(o).get("uid") or "") for objs in listed.values() for o in objs}
    frontier = [o for objs in listed.values() for o in objs]
    for _ in range(hops):
        met: dict[tuple[str, str, str, str], None] = {}
        for obj in frontier:
            owner = _controller(_meta(obj))
            if owner is None or owner.uid in uids or (owner.kind in KINDS and not _scalable(owner.kind)):
                continue
            met[(owner.api_version, owner.api_kind, str(_meta(obj).get("namespace") or ""), owner.name)] = (
                None
            )
        frontier = []
        for api_version, api_kind, namespace, name in met:
            info = discovery.scalable(api_version, api_kind)
            if info is None:
                continue
            try:
                obj = reader.get(info.name, namespace, name)
                scale = reader.get_scale(info.name, namespace, name)
            except ForbiddenError:
                log.warning(
                    "not allowed to read %s/scale %s/%s (the chart's rbac.scaleSubresources): "
                    "the workloads it controls are left alone",
                    info.plural,
                    namespace,
                    name,
                )
                continue
            except NotFoundError:
                continue
            obj = with_scale_replicas(obj, scale)
            uids.add(str(_meta(obj).get("uid") or ""))
            found.setdefault(info.name, []).append(obj)
            frontier.append(obj)
        if not frontier:
            break
    return found
