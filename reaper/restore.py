"""Restore: undo the reaper's stops and cordons, through one path for ``restore NAME`` and ``--all``.

Every workload restore goes through :meth:`Restorer._restore_each`: the objects to bring back come
in (one found by name, or every marked object and every entry of the record of stops), each is
restored once by its kind's actuator, and the record then forgets what is settled. Each write is
conditional on the version read and sent through the write gate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from common.errors import BadInputError
from common.timeutil import rfc3339
from reaper import names
from reaper.actuators import (
    ACTUATORS,
    KUEUE_SUSPENDABLE,
    RECORDED_SCALE,
    SCALE_SUBRESOURCE,
    Change,
    KueueDeactivate,
    RecordedScale,
    ScaleSubresource,
    actuator_of,
    kueue_or,
)
from reaper.adapter_errors import ForbiddenError, KubeError, NotFoundError
from reaper.clock import Clock
from reaper.cluster import workload_from_object
from reaper.conflict_retry import ConflictRetry, Read, read_with_scale, reader
from reaper.discovery import ScaleDiscovery
from reaper.events import Events
from reaper.kinds import KINDS
from reaper.kube_api import KubeApi
from reaper.kueue import kueue_workload
from reaper.marks import annotations_of, marked, meta, record_key, stopped_by_reaper
from reaper.outcomes import Outcome, Refused, RestoreResult
from reaper.state import StoppedObject, StopRecord
from reaper.state_store import StateStore
from reaper.write_gate import WriteGate

if TYPE_CHECKING:  # reaper.keda_http builds on the stop, as the executor wires them
    from reaper.keda_http import Waker

log = logging.getLogger(__name__)

Found = tuple[str, dict[str, Any]]  # the reaper's name for an object's kind, and the object


@dataclass(frozen=True)
class _Stopped:
    """An object restore may bring back, however it was found."""

    key: str  # its key in the record of stops
    namespace: str
    name: str
    target: str  # how a failure names it before the object is read
    # Its kind and live object, read when its turn comes; None when there is nothing to restore.
    find: Callable[[], Found | None]


def _in_hand(kind: str, namespace: str, name: str, obj: dict[str, Any]) -> _Stopped:
    return _Stopped(
        record_key(kind, namespace, name), namespace, name, f"{kind} {namespace}/{name}", lambda: (kind, obj)
    )


class Restorer:
    def __init__(
        self,
        kube: KubeApi,
        gate: WriteGate,
        *,
        events: Events,
        store: StateStore,
        retry: ConflictRetry,
        discovery: ScaleDiscovery,
        clock: Clock,  # the run's "now": the restored-at annotation
        waker: Waker | None = None,  # undoes ``wake: keda-http`` hand-overs (reaper.keda_http)
    ) -> None:
        self.waker = waker
        self.kube = kube
        self.gate = gate
        self.events = events
        self.store = store
        self.retry = retry
        self.discovery = discovery
        self.clock = clock
        self._record = StopRecord()  # read afresh by each restore: what is stopped, and how

    def _stopped(self, kind: str, obj: Mapping[str, Any]) -> bool:
        return stopped_by_reaper(kind, obj, self._record)

    def _entry(self, kind: str, obj: Mapping[str, Any]) -> StoppedObject | None:
        """The record's entry for this object (its uid), where the entry holds the count to restore."""
        entry = self._record.objects.get(record_key(kind, meta(obj, "namespace"), meta(obj, "name")))
        if entry is None or entry.original_replicas is None or not entry.names_object(meta(obj, "uid")):
            return None
        return entry

    # --- what to restore ---------------------------------------------------------------------------

    def objects_named(self, namespace: str, name: str) -> list[Found]:
        """Every object of a kind the reaper stops called NAMESPACE/NAME: what ``restore`` may act on."""
        found: list[Found] = []
        for kind in ACTUATORS:
            try:
                obj = self.kube.get_optional(kind, namespace, name)
            except (NotFoundError, ForbiddenError):
                obj = None  # a custom kind that is not installed, or not granted (rbac.controllers)
            if obj is not None:
                found.append((kind, obj))
        return found

    def workload(self, namespace: str, name: str) -> RestoreResult:
        """Undo the reaper's stop on NAMESPACE/NAME, of whichever kind it stopped; a no-op when unmarked."""
        self._record = self.store.record()
        kind, root, obj = self._what_to_restore(namespace, name)
        (result,) = self._restore_each([_in_hand(kind, namespace, root, obj)])
        return result

    def all(self, namespace: str | None = None) -> list[RestoreResult]:
        """Restore everything the reaper stopped (in one namespace, or everywhere plus its cordons):
        every object carrying its mark, and every object in its record of stops, whatever the kind."""
        self._record = self.store.record()
        results = self._restore_each(self._everything_stopped(namespace))
        if namespace is None:
            try:
                nodes = self.kube.list_objects("Node")
            except ForbiddenError as e:
                log.warning("not allowed to list nodes (%s): no cordon is undone", e)
                nodes = []
            for node in nodes:
                if names.CORDONED_AT in annotations_of(node):
                    results.append(self.uncordon(meta(node, "name"), node))
        return results

    def _what_to_restore(self, namespace: str, name: str) -> tuple[str, str, dict[str, Any]]:
        """The kind, name and object that ``restore NAMESPACE/NAME`` acts on."""
        found = self.objects_named(namespace, name)
        for kind, obj in found:
            if self._stopped(kind, obj):
                return kind, name, obj
        for kind, obj in found:
            # NAME may be the child that held the GPUs: what was stopped is its root controller.
            root = self._stopped_root(namespace, kind, obj)
            if root is not None:
                kind, obj = root
                return kind, meta(obj, "name"), obj
        if found:
            kind, obj = found[0]
            return kind, name, obj
        raise BadInputError(
            f"no Deployment or StatefulSet {namespace}/{name}, nor any other kind gpu-reaper stops"
        )

    def _stopped_root(self, namespace: str, kind: str, obj: Mapping[str, Any], hops: int = 6) -> Found | None:
        """The controller above ``obj`` that carries the reaper's mark, following ownerReferences."""
        owner = workload_from_object(kind, obj).owner
        for _ in range(hops):
            if owner is None:
                return None
            owner_kind = owner.kind
            if actuator_of(owner_kind) is None:
                # Only the kinds it stops are readable one by one (the chart's RBAC); a custom kind
                # is one of them when discovery says it serves /scale.
                info = self.discovery.scalable(owner.api_version, owner.api_kind)
                if info is None:
                    return None
                owner_kind = info.name
            try:
                parent = self.kube.get_optional(owner_kind, namespace, owner.name)
            except (NotFoundError, ForbiddenError):
                return None
            if parent is None or (owner.uid and meta(parent, "uid") != owner.uid):
                return None  # not the object the reference names (never followed across namespaces)
            if self._stopped(owner_kind, parent):
                return owner_kind, parent
            owner = workload_from_object(owner_kind, parent).owner
        return None

    def _everything_stopped(self, namespace: str | None) -> Iterator[_Stopped]:
        """What ``restore --all`` brings back: every object carrying the reaper's mark, kind by kind,
        then every object in the record of stops. Lazy, so each kind is listed just before its
        objects are restored and the record is read after them."""
        for kind in ACTUATORS:
            try:
                listed = (
                    self.kube.list_optional(kind, namespace)
                    if KINDS[kind].custom
                    else self.kube.list_objects(kind, namespace)
                )
            except ForbiddenError:
                if not KINDS[kind].custom:
                    raise
                continue  # not granted (rbac.controllers): the reaper cannot have stopped any
            for obj in listed:
                if self._stopped(kind, obj):
                    yield _in_hand(kind, meta(obj, "namespace"), meta(obj, "name"), obj)
        recorded = [o for o in self._record.objects.values() if namespace is None or o.namespace == namespace]
        for entry in recorded:
            target = f"{entry.kind} {entry.namespace}/{entry.name}"
            yield _Stopped(entry.key, entry.namespace, entry.name, target, partial(self._live, entry))
        # Handed to the KEDA HTTP add-on and woken since: no longer stopped, yet its objects are the reaper's.
        for kind, ns, name in self.waker.handed_over(namespace) if self.waker is not None else ():
            found = partial(self._handed_over, kind, ns, name)
            yield _Stopped(record_key(kind, ns, name), ns, name, f"{kind} {ns}/{name}", found)

    def _handed_over(self, kind: str, namespace: str, name: str) -> Found | None:
        obj = self.kube.get_optional(kind, namespace, name)
        return (kind, obj) if obj is not None else None

    def _live(self, entry: StoppedObject) -> Found | None:
        """A recorded object as it is now; None when there is nothing to restore (gone, its kind not
        installed any more, or brought back some other way): the record then just forgets it."""
        kind = self.store.kind_of(entry)
        if kind is None:
            return None
        obj = self.kube.get_optional(kind, entry.namespace, entry.name)
        if obj is None or not self._stopped(kind, obj):
            return None
        return kind, obj

    # --- the one restore path ----------------------------------------------------------------------

    def _restore_each(self, stopped: Iterable[_Stopped]) -> list[RestoreResult]:
        """Restore each object once, then drop from the record what is settled (restored, or nothing
        left to restore); a failed one stays recorded for the next try."""
        results: list[RestoreResult] = []
        settled: dict[str, RestoreResult | None] = {}  # by record key; None: nothing left to restore
        for one in stopped:
            if one.key in settled:
                continue  # marked and recorded: restored once
            try:
                found = one.find()
                settled[one.key] = (
                    None if found is None else self._restore(found[0], one.namespace, one.name, found[1])
                )
            except KubeError as e:  # one object's failure, not the whole restore's
                log.error("failed to restore %s: %s", one.target, e)
                settled[one.key] = RestoreResult(one.target, Outcome.FAILED, str(e))
            results += [r for r in (settled[one.key],) if r is not None]
        self.store.forget(
            [k for k, r in settled.items() if r is None or r.outcome is not Outcome.FAILED],
            restored=[k for k, r in settled.items() if r is not None and r.outcome is Outcome.APPLIED],
        )
        return results

    def _restore(
        self, kind: str, namespace: str, name: str, obj: dict[str, Any] | None = None
    ) -> RestoreResult:
        target = f"{kind} {namespace}/{name}"
        actuator = actuator_of(kind)
        if actuator is None:
            return RestoreResult(target, Outcome.SKIPPED, "gpu-reaper stops no object of this kind")
        if isinstance(actuator, RecordedScale):
            return self._restore_recorded(kind, namespace, name, obj)
        if isinstance(actuator, ScaleSubresource):
            return self._restore_through_scale(kind, namespace, name)
        if kind in KUEUE_SUSPENDABLE:  # Kueue may manage it: then it was stopped through its Workload
            obj = obj if obj is not None else self.kube.get_optional(kind, namespace, name)
            actuator = kueue_or(kind, ((obj or {}).get("metadata") or {}).get("labels") or {}) or actuator
        if isinstance(actuator, KueueDeactivate):
            return self._restore_through_kueue(actuator, namespace, name, obj, kind)
        now = rfc3339(self.clock())

        def attempt(current: dict[str, Any]) -> tuple[Outcome, str]:
            if not marked(kind, current):
                return Outcome.SKIPPED, f"nothing to restore (no {actuator.marker})"
            change = actuator.restore(workload_from_object(kind, current))
            if not isinstance(change, Change):
                return Outcome.FAILED, change
            body = {
                "metadata": {
                    "resourceVersion": meta(current, "resourceVersion"),
                    "annotations": {
                        **change.annotations,
                        names.ORIGINAL_REPLICAS: None,
                        names.REAPED_AT: None,
                        names.REASON: None,
                        names.RESTORED_AT: now,
                    },
                },
                **({"spec": dict(change.spec)} if change.spec else {}),
            }
            patched = self.gate.send(
                f"restore {target}: {change.description}",
                lambda: self.kube.patch(kind, namespace, name, body),
            )
            if patched is not None:
                self.events.record(patched, kind, "Restored", f"gpu-reaper restored {change.description}")
            return self.gate.done, change.description

        return self._undo(target, reader(self.kube, kind, namespace, name, obj), attempt)

    def _undo(
        self, target: str, read: Read, attempt: Callable[[dict[str, Any]], tuple[Outcome, str]]
    ) -> RestoreResult:
        try:
            outcome, detail = self.retry.run(read, attempt)
        except (KubeError, Refused) as e:
            log.error("failed to restore %s: %s", target, e)
            return RestoreResult(target, Outcome.FAILED, str(e))
        return RestoreResult(target, outcome, detail)

    def _restore_recorded(
        self, kind: str, namespace: str, name: str, obj: dict[str, Any] | None
    ) -> RestoreResult:
        """A Deployment, StatefulSet or ReplicaSet: the recorded count back through ``/scale``,
        conditional on the version read; the record then forgets it (reaper.state_store).

        One stopped by an earlier release carries its count in annotations: restored from them, which
        are then removed where the reaper may still patch the object. Where it may not (the chart
        grants only ``/scale`` now), they stay, and mean nothing once the object runs again.
        """
        target = f"{kind} {namespace}/{name}"

        def attempt(current: dict[str, Any]) -> tuple[Outcome, str]:
            if not self._stopped(kind, current):
                return Outcome.SKIPPED, "nothing to restore (not stopped by gpu-reaper)"
            live = workload_from_object(kind, current)
            entry = self._entry(kind, current)
            if entry is not None and live.replicas:
                # Scaled back up by someone, or the stop's scale never landed: the record forgets it.
                return Outcome.SKIPPED, f"already at {live.replicas} replicas; nothing to restore"
            change: Change | str = (
                RECORDED_SCALE.restore_to(live, entry.original_replicas)
                if entry is not None and entry.original_replicas is not None
                else RECORDED_SCALE.restore(live)
            )
            if not isinstance(change, Change):
                return Outcome.FAILED, change
            legacy = RECORDED_SCALE.marker in live.annotations

            def write() -> dict[str, Any]:
                version = {"resourceVersion": meta(current, "resourceVersion")}
                body = {"metadata": version, "spec": change.spec}
                scaled = self.kube.patch_scale(kind, namespace, name, body)
                if legacy:
                    self._clear_old_marks(kind, namespace, name)
                return scaled

            what = f"restore {target} through its scale subresource: {change.description}"
            patched = self.gate.send(what, write)
            if patched is not None:
                self.events.record(patched, kind, "Restored", f"gpu-reaper restored {change.description}")
            return self.gate.done, change.description

        restored = self._undo(target, reader(self.kube, kind, namespace, name, obj), attempt)
        if self.waker is None:
            return restored
        try:  # then the KEDA HTTP add-on's objects it was handed to go, or its ScaledObject is unpaused
            return self.waker.undo(kind, namespace, name, meta(obj, "uid") if obj else "", restored)
        except (KubeError, Refused) as e:
            log.error("failed to undo the wake of %s: %s", target, e)
            return RestoreResult(target, Outcome.FAILED, f"{restored.detail}; the wake's objects stay: {e}")

    def _clear_old_marks(self, kind: str, namespace: str, name: str) -> None:
        """Remove the annotations an earlier release left, where the reaper may still patch the object."""
        marks = {names.ORIGINAL_REPLICAS: None, names.REAPED_AT: None, names.REASON: None}
        try:
            self.kube.patch(kind, namespace, name, {"metadata": {"annotations": marks}})
        except KubeError as e:
            log.warning(
                "%s %s/%s keeps the annotations an earlier gpu-reaper left (%s): %s; they are ignored "
                "now that it runs again",
                kind,
                namespace,
                name,
                ", ".join(marks),
                e,
            )

    def _restore_through_scale(self, kind: str, namespace: str, name: str) -> RestoreResult:
        """The recorded count back through ``/scale``, then the marks removed (a retry finds them)."""
        target = f"{kind} {namespace}/{name}"
        now = rfc3339(self.clock())

        def attempt(current: dict[str, Any]) -> tuple[Outcome, str]:
            if not marked(kind, current):
                return Outcome.SKIPPED, f"nothing to restore (no {SCALE_SUBRESOURCE.marker})"
            change = SCALE_SUBRESOURCE.restore(workload_from_object(kind, current))
            if not isinstance(change, Change):
                return Outcome.FAILED, change
            version = meta(current, "resourceVersion")

            def write() -> dict[str, Any]:
                scale = {"metadata": {"resourceVersion": version}, "spec": dict(change.spec)}
                scaled = self.kube.patch_scale(kind, namespace, name, scale)
                marks = {
                    "metadata": {
                        "resourceVersion": meta(scaled, "resourceVersion"),
                        "annotations": {
                            names.ORIGINAL_REPLICAS: None,
                            names.REAPED_AT: None,
                            names.REASON: None,
                            names.RESTORED_AT: now,
                        },
                    }
                }
                return self.kube.patch(kind, namespace, name, marks)

            patched = self.gate.send(
                f"restore {target} through its scale subresource: {change.description}", write
            )
            if patched is not None:
                self.events.record(patched, kind, "Restored", f"gpu-reaper restored {change.description}")
            return self.gate.done, change.description

        return self._undo(target, read_with_scale(self.kube, kind, namespace, name), attempt)

    def _restore_through_kueue(
        self,
        actuator: KueueDeactivate,
        namespace: str,
        name: str,
        obj: dict[str, Any] | None,
        kind: str = "Job",
    ) -> RestoreResult:
        """The Workload of a Job, JobSet or RayCluster reactivated (Kueue queues it and, once
        admitted, unsuspends the object), then the object's marks removed: a run that dies in between
        leaves it marked, and a retry finds it."""
        target = f"{kind} {namespace}/{name}"
        now = rfc3339(self.clock())

        def attempt(job: dict[str, Any]) -> tuple[Outcome, str]:
            if not marked(kind, job):
                return Outcome.SKIPPED, f"nothing to restore (no {actuator.marker})"
            workload = kueue_workload(self.kube, namespace, name, job, kind)
            wl_name = meta(workload, "name")
            unmarked = {names.REAPED_AT: None, names.REASON: None}
            deactivated = (workload.get("spec") or {}).get("active") is False
            if not deactivated or names.REAPED_AT not in annotations_of(workload):
                # The stop never reached the Workload (or Kueue or an admin deactivated it): it is not
                # the reaper's to reactivate; only the Job's marks go.
                detail = f"Workload {wl_name} was not deactivated by gpu-reaper; left as it is"
                marks = {"metadata": {"annotations": {**unmarked, names.RESTORED_AT: now}}}
                self.gate.send(
                    f"clear the marks of {target}: {detail}",
                    lambda: self.kube.patch(kind, namespace, name, marks),
                )
                return self.gate.done, detail
            change = actuator.restore(workload_from_object(kind, job))
            if not isinstance(change, Change):
                return Outcome.FAILED, change  # pragma: no cover (reactivation always applies)

            def write() -> dict[str, Any]:
                version = meta(workload, "resourceVersion")
                body = {
                    "metadata": {"resourceVersion": version, "annotations": unmarked},
                    "spec": dict(change.spec),
                }
                self.kube.patch("KueueWorkload", namespace, wl_name, body)
                # Not conditional: Kueue unsuspending the Job meanwhile must not make this a conflict.
                marks = {"metadata": {"annotations": {**unmarked, names.RESTORED_AT: now}}}
                return self.kube.patch(kind, namespace, name, marks)

            detail = f"{change.description}: Workload {wl_name}"
            patched = self.gate.send(f"restore {target}: {detail}", write)
            if patched is not None:
                self.events.record(patched, kind, "Restored", f"gpu-reaper {detail}")
            return self.gate.done, detail

        return self._undo(target, reader(self.kube, kind, namespace, name, obj), attempt)

    # --- cordons -----------------------------------------------------------------------------------

    def uncordon(self, name: str, obj: dict[str, Any] | None = None) -> RestoreResult:
        """Uncordon a node the reaper cordoned; a node without the reaper's mark is left alone."""
        target = f"Node {name}"
        now = rfc3339(self.clock())

        def attempt(current: dict[str, Any]) -> tuple[Outcome, str]:
            if names.CORDONED_AT not in annotations_of(current):
                return Outcome.SKIPPED, "not cordoned by gpu-reaper; left alone"
            body = {
                "metadata": {
                    "resourceVersion": meta(current, "resourceVersion"),
                    # restored-at gives the node the same grace a restored workload gets.
                    "annotations": {names.CORDONED_AT: None, names.REASON: None, names.RESTORED_AT: now},
                },
                "spec": {"unschedulable": None},
            }
            patched = self.gate.send(
                f"uncordon node {name}", lambda: self.kube.patch("Node", None, name, body)
            )
            if patched is not None:
                self.events.record(patched, "Node", "Uncordoned", "gpu-reaper uncordoned the node")
            return self.gate.done, "uncordoned"

        return self._undo(target, reader(self.kube, "Node", None, name, obj), attempt)
