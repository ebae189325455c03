"""A planned action carried out: a workload's native stop with the reaper's marks, or a node's cordon.

Each write is conditional on the version read (a 409 re-reads and re-checks: the owner's opt-out,
and that it still requests a GPU) and sent through the write gate; an applied one records an Event
on the object. Deployments, StatefulSets and ReplicaSets are only ever written through ``/scale``,
their marks kept in the reaper's ConfigMap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.timeutil import rfc3339
from reaper import names
from reaper.actuators import (
    CORDON,
    KUEUE_DEACTIVATE,
    Actuator,
    Change,
    KueueDeactivate,
    RecordedScale,
    ScaleSubresource,
    actuator_of,
    write_line,
)
from reaper.clock import Clock
from reaper.cluster import Workload, gpu_resources, workload_from_object
from reaper.conflict_retry import ConflictRetry, read_with_scale, reader
from reaper.events import Events
from reaper.kube_api import KubeApi
from reaper.kueue import kueue_workload
from reaper.marks import annotations_of, meta
from reaper.outcomes import ActionResult, Changed, Outcome, Refused
from reaper.planner import PlannedAction, opt_out
from reaper.state_store import StateStore
from reaper.write_gate import WriteGate


def _planned_copy(action: PlannedAction, spec: dict[str, Any]) -> dict[str, Any] | None:
    """The object as the plan saw it: good for a first try, a 409 says when it is stale."""
    if not action.resource_version:
        return None
    ref = action.written
    metadata = {"name": ref.name, "resourceVersion": action.resource_version, "uid": action.uid}
    if ref.namespace:
        metadata["namespace"] = ref.namespace
    return {"metadata": metadata, "spec": spec}


class Stopper:
    def __init__(
        self,
        kube: KubeApi,
        gate: WriteGate,
        *,
        events: Events,
        store: StateStore,
        retry: ConflictRetry,
        clock: Clock,  # the run's "now" (may be --end for a replay): annotation timestamps
    ) -> None:
        self.kube = kube
        self.gate = gate
        self.events = events
        self.store = store
        self.retry = retry
        self.clock = clock

    def _still_wanted(self, obj: Mapping[str, Any], what: str) -> None:
        """Raise :class:`Changed` if the owner opted out since planning (seen on a re-read after a 409)."""
        reason = opt_out(annotations_of(obj), self.clock(), what)
        if reason:
            raise Changed(f"{reason} since planning")

    def _still_a_gpu_workload(self, obj: Mapping[str, Any], action: PlannedAction) -> None:
        """Raise :class:`Changed` unless the object read (or, failing that, the one holding the GPUs)
        still requests a GPU. The plan checked the version it saw; a re-read after a 409 is checked
        again here, since the write then goes out on that version."""
        if gpu_resources(obj.get("spec") or {}):
            return
        target = action.target
        if action.root is not None:
            held = self.kube.get_optional(target.kind, target.namespace, target.name)
            if held is not None and gpu_resources(held.get("spec") or {}):
                return
        raise Changed(f"{action.written.kind} {action.written.key()} requests no GPU any more since planning")

    def stop(self, action: PlannedAction) -> ActionResult:
        """The root's native stop (scale to zero, stop annotation, suspend), with the reaper's annotations.

        A custom kind with a scale subresource is marked first, then scaled through ``/scale``: the
        marks are conditional on the version read, so a run that dies in between leaves an object that
        ``restore`` understands; the scale write is conditional on the version the marks produced, so
        a change by anyone in between is a 409, a re-read and a fresh try.
        """
        ref = action.written
        if ref.namespace != action.target.namespace:
            # The planner never plans it (owners are followed within a namespace): a last guard.
            raise Refused(
                f"{ref.kind} {ref.namespace}/{ref.name} is not in the namespace of "
                f"{action.target.kind} {action.target.namespace}/{action.target.name}; nothing changed"
            )
        # A JobSet or RayCluster that Kueue manages (as the plan saw it) is stopped through its Workload.
        actuator = KUEUE_DEACTIVATE if action.kueue else actuator_of(ref.kind)
        if actuator is None:
            raise Changed(f"{ref.kind} has no native stop gpu-reaper can use")  # pragma: no cover
        if isinstance(actuator, KueueDeactivate):
            return self._stop_through_kueue(action, actuator)
        if isinstance(actuator, RecordedScale):
            return self._stop_recorded(action, actuator)
        through_scale = isinstance(actuator, ScaleSubresource)
        now = rfc3339(self.clock())
        holder = f" (GPUs held by {action.target.kind} {action.target.namespace}/{action.target.name})"
        via = holder if action.root is not None or through_scale else ""
        where = f"{ref.kind} {ref.namespace}/{ref.name}{via}"

        def attempt(obj: dict[str, Any]) -> tuple[dict[str, Any] | None, Change]:
            _, change = self._checked_stop(obj, planned, action, actuator, now)
            marks = {
                "resourceVersion": meta(obj, "resourceVersion"),
                "annotations": {**change.annotations, names.REAPED_AT: now, names.REASON: action.reason},
            }
            if through_scale:
                what = f"scale {where} through its scale subresource {change.description}"

                def write() -> dict[str, Any]:
                    self.store.remember(ref.kind, ref.namespace, ref.name)
                    marked = self.kube.patch(ref.kind, ref.namespace, ref.name, {"metadata": marks})
                    scale = {
                        "metadata": {"resourceVersion": meta(marked, "resourceVersion")},
                        "spec": change.spec,
                    }
                    self.kube.patch_scale(ref.kind, ref.namespace, ref.name, scale)
                    return marked

            else:
                what = f"{actuator.log_verb} {where} {change.description}"
                body = {"metadata": marks, **({"spec": dict(change.spec)} if change.spec else {})}

                def write() -> dict[str, Any]:
                    self.store.remember(ref.kind, ref.namespace, ref.name)
                    return self.kube.patch(ref.kind, ref.namespace, ref.name, body)

            return self.gate.send(f"{what} ({action.reason})", write), change

        planned = None
        if through_scale:
            read = read_with_scale(self.kube, ref.kind, ref.namespace, ref.name)
        else:
            planned = _planned_copy(
                action, {"replicas": action.replicas} if action.replicas is not None else {}
            )
            read = reader(self.kube, ref.kind, ref.namespace, ref.name, planned)
        patched, change = self.retry.run(read, attempt)
        written = write_line(ref.kind, ref.namespace, ref.name, change)
        if patched is None:
            return ActionResult(action, Outcome.DRY_RUN, write=written)
        # A custom kind scaled through /scale is found again through the object holding the GPUs.
        again = action.target if through_scale else ref
        self.events.record(
            patched,
            ref.kind,
            actuator.done,
            f"gpu-reaper: {actuator.verb}, {change.description}{via}: {action.reason}. "
            f"Restore: gpu-reaper restore {again.namespace}/{again.name}",
        )
        return ActionResult(action, Outcome.APPLIED, change.description, write=written)

    def _checked_stop(
        self,
        obj: dict[str, Any],
        planned: dict[str, Any] | None,
        action: PlannedAction,
        actuator: Actuator,
        now: str,
    ) -> tuple[Workload, Change]:
        """What every stop checks on the object it read before writing (the owner's opt-out; that it
        still requests a GPU, unless it is the plan's own copy; that it is not stopped already), and
        the change its actuator would make."""
        kind = action.written.kind
        self._still_wanted(obj, kind.lower())
        if obj is not planned:
            self._still_a_gpu_workload(obj, action)
        live = workload_from_object(kind, obj)
        done = actuator.stopped(live)
        if done:
            raise Changed(done)
        return live, actuator.stop(live, now)

    def _stop_recorded(self, action: PlannedAction, actuator: RecordedScale) -> ActionResult:
        """A Deployment, StatefulSet or ReplicaSet: recorded in the reaper's ConfigMap (the count to
        restore, the reason), then scaled to 0 through ``/scale`` alone, conditional on the version
        read. Nothing is written to the object itself: the record is the mark, written first, so a
        run that dies in between leaves an entry ``restore`` understands (and drops, finding the
        object still running)."""
        ref = action.written
        now = rfc3339(self.clock())
        holder = f" (GPUs held by {action.target.kind} {action.target.namespace}/{action.target.name})"
        where = f"{ref.kind} {ref.namespace}/{ref.name}{holder if action.root is not None else ''}"
        planned = _planned_copy(action, {"replicas": action.replicas} if action.replicas is not None else {})

        def attempt(obj: dict[str, Any]) -> tuple[dict[str, Any] | None, Change]:
            live, change = self._checked_stop(obj, planned, action, actuator, now)

            def write() -> dict[str, Any]:
                self.store.remember(
                    ref.kind,
                    ref.namespace,
                    ref.name,
                    uid=meta(obj, "uid"),
                    original_replicas=live.replicas if live.replicas is not None else 1,
                    reason=action.reason,
                )
                scale = {"metadata": {"resourceVersion": meta(obj, "resourceVersion")}, "spec": change.spec}
                # The Scale names the object (name, namespace, uid, its new resourceVersion): the Event's.
                return self.kube.patch_scale(ref.kind, ref.namespace, ref.name, scale)

            what = f"scale {where} through its scale subresource {change.description} ({action.reason})"
            return self.gate.send(what, write), change

        read = reader(self.kube, ref.kind, ref.namespace, ref.name, planned)
        scaled, change = self.retry.run(read, attempt)
        written = write_line(ref.kind, ref.namespace, ref.name, change)
        if scaled is None:
            return ActionResult(action, Outcome.DRY_RUN, write=written)
        self.events.record(
            scaled,
            ref.kind,
            actuator.done,
            f"gpu-reaper: {actuator.verb}, {change.description}: {action.reason}. "
            f"Restore: gpu-reaper restore {ref.namespace}/{ref.name}",
        )
        return ActionResult(action, Outcome.APPLIED, change.description, write=written)

    def _stop_through_kueue(self, action: PlannedAction, actuator: KueueDeactivate) -> ActionResult:
        """A Kueue-managed Job, JobSet or RayCluster: marked, then its Workload deactivated; Kueue
        then evicts it and suspends the object. Suspending it directly would be undone: Kueue
        unsuspends what its still admitted Workload runs. Both writes are conditional on the versions
        read; the marks go first, so a run that dies in between leaves an object ``restore`` understands.
        """
        ref = action.written
        now = rfc3339(self.clock())
        where = f"{ref.kind} {ref.namespace}/{ref.name}"

        def attempt(job: dict[str, Any]) -> tuple[dict[str, Any] | None, Change, str]:
            self._still_wanted(job, ref.kind.lower())
            self._still_a_gpu_workload(job, action)
            live = workload_from_object(ref.kind, job)
            done = actuator.stopped(live)
            if done:
                raise Changed(done)
            workload = kueue_workload(self.kube, ref.namespace, ref.name, job, ref.kind)
            wl_name = meta(workload, "name")
            if (workload.get("spec") or {}).get("active") is False:
                raise Changed(f"its Kueue Workload {wl_name} is already inactive")
            change = actuator.stop(live, now)
            marks = {names.REAPED_AT: now, names.REASON: action.reason}

            def write() -> dict[str, Any]:
                self.store.remember(ref.kind, ref.namespace, ref.name)
                job_marks = {"resourceVersion": meta(job, "resourceVersion"), "annotations": marks}
                marked = self.kube.patch(ref.kind, ref.namespace, ref.name, {"metadata": job_marks})
                body = {
                    "metadata": {"resourceVersion": meta(workload, "resourceVersion"), "annotations": marks},
                    "spec": dict(change.spec),
                }
                self.kube.patch("KueueWorkload", ref.namespace, wl_name, body)
                return marked

            what = f"{actuator.log_verb} {where} {change.description}: Workload {wl_name} ({action.reason})"
            return self.gate.send(what, write), change, wl_name

        patched, change, wl_name = self.retry.run(
            reader(self.kube, ref.kind, ref.namespace, ref.name), attempt
        )
        written = write_line("Workload", ref.namespace, wl_name, change)
        if patched is None:
            return ActionResult(action, Outcome.DRY_RUN, write=written)
        detail = f"{change.description}: Workload {wl_name}"
        self.events.record(
            patched,
            ref.kind,
            actuator.done,
            f"gpu-reaper: {actuator.verb}, {detail}: {action.reason}. "
            f"Restore: gpu-reaper restore {ref.namespace}/{ref.name}",
        )
        return ActionResult(action, Outcome.APPLIED, detail, write=written)

    def cordon(self, action: PlannedAction) -> ActionResult:
        name = action.target.name
        now = rfc3339(self.clock())

        def attempt(obj: dict[str, Any]) -> dict[str, Any] | None:
            self._still_wanted(obj, "node")
            if (obj.get("spec") or {}).get("unschedulable"):
                raise Changed("already cordoned")
            body = {
                "metadata": {
                    "resourceVersion": meta(obj, "resourceVersion"),
                    "annotations": {names.CORDONED_AT: now, names.REASON: action.reason},
                },
                "spec": dict(CORDON.spec),
            }
            return self.gate.send(
                f"cordon node {name} ({action.reason})", lambda: self.kube.patch("Node", None, name, body)
            )

        planned = _planned_copy(action, {"unschedulable": False})
        patched = self.retry.run(reader(self.kube, "Node", None, name, planned), attempt)
        written = f"Node {name}: {CORDON.description} ({CORDON.fields()})"
        if patched is None:
            return ActionResult(action, Outcome.DRY_RUN, write=written)
        self.events.record(
            patched,
            "Node",
            "Cordoned",
            f"gpu-reaper cordoned the node: {action.reason}. Undo: gpu-reaper restore --all",
        )
        return ActionResult(action, Outcome.APPLIED, write=written)
