"""The executor: the only code that changes the cluster.

Every mutation — patches, Events, the state ConfigMap, the Lease — goes through ``Executor._write``,
the single dry-run branch: in dry-run it logs ``DRY-RUN: would …`` and makes no request at all.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from common.errors import BadInputError
from common.timeutil import parse_time, rfc3339
from reaper import names
from reaper.actuators import (
    ACTUATORS,
    CORDON,
    SCALE_SUBRESOURCE,
    Change,
    KueueDeactivate,
    ScaleSubresource,
    actuator_of,
    write_line,
)
from reaper.cluster import with_scale_replicas, workload_from_object
from reaper.discovery import ScaleDiscovery
from reaper.errors import (
    ConflictError,
    ForbiddenError,
    KubeError,
    KubeUnavailableError,
    LeaseHeldError,
    NotFoundError,
    TooManyRequestsError,
)
from reaper.kinds import KINDS
from reaper.kube_api import KubeApi
from reaper.planner import Plan, PlannedAction, opt_out
from reaper.policy import Action, RunMode
from reaper.state import ReaperState, StoppedObject, StopRecord, stop_key

log = logging.getLogger(__name__)

T = TypeVar("T")
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


class Outcome(StrEnum):
    APPLIED = "applied"
    DRY_RUN = "dry_run"
    SKIPPED = "skipped"  # the object changed since planning so that the action no longer applies
    FAILED = "failed"


@dataclass(frozen=True)
class ActionResult:
    action: PlannedAction
    outcome: Outcome
    detail: str = ""
    # What --apply writes (dry-run) or wrote, by object and field: "Deployment a/b: replicas 2 → 0".
    # Made from the very change the write sends; empty for a notice and where no write was formed.
    write: str = ""


@dataclass(frozen=True)
class RestoreResult:
    target: str
    outcome: Outcome
    detail: str = ""


def _micro_time(value: datetime) -> str:
    # Lease times are MicroTime: RFC 3339 with microseconds.
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _meta(obj: Mapping[str, Any], key: str) -> str:
    return str((obj.get("metadata") or {}).get(key) or "")


def _marked(kind: str, obj: Mapping[str, Any]) -> bool:
    """The reaper stopped this object (its actuator's mark is on it)."""
    actuator = actuator_of(kind)
    return actuator is not None and actuator.marker in _annotations(obj)


class _Changed(Exception):
    """The object changed since planning so that the action no longer applies."""


class _Refused(Exception):
    """The reaper cannot act on this object here (nothing was changed): a failure, not an API outage."""


def _record_key(kind: str, namespace: str, name: str) -> str:
    info = KINDS[kind]
    return stop_key(info.group, info.api_kind, namespace, name)


class Executor:
    def __init__(
        self,
        kube: KubeApi,
        *,
        mode: RunMode,
        namespace: str,
        clock: Clock = utc_now,
        wall_clock: Clock = utc_now,
        sleep: Callable[[float], None] = time.sleep,
        identity: str | None = None,
        lease_duration: timedelta = timedelta(minutes=10),
        conflict_attempts: int = 4,
        max_consecutive_failures: int = 3,
        cluster: str | None = None,
    ) -> None:
        self.kube = kube
        self.mode = mode
        self.namespace = namespace
        self.clock = clock  # the run's "now" (may be --end for a replay): annotation timestamps
        self.wall_clock = wall_clock  # real time: the Lease is about live concurrency
        self.sleep = sleep
        # The pod name (HOSTNAME) says which Job holds the Lease; the suffix keeps manual runs apart.
        self.identity = identity or f"{os.environ.get('HOSTNAME', 'gpu-reaper')}-{uuid.uuid4().hex[:8]}"
        self.lease_duration = lease_duration
        self.conflict_attempts = conflict_attempts
        self.max_consecutive_failures = max_consecutive_failures
        # Named in every Event: where many clusters share names, an Event read away from its
        # cluster (an event exporter, a central log) still says which one it is about.
        self.cluster = cluster
        self._discovery = ScaleDiscovery(kube)
        self._stopped_now: set[str] = set()  # record keys of what this executor stopped

    # --- the single write point ------------------------------------------------------------------

    def _write(self, what: str, call: Callable[[], T]) -> T | None:
        if not self.mode.writes:
            log.info("DRY-RUN: would %s", what)
            return None
        log.info("%s", what[0].upper() + what[1:])
        return call()

    @property
    def _done(self) -> Outcome:
        """The outcome of an action that went through :meth:`_write`."""
        return Outcome.APPLIED if self.mode.writes else Outcome.DRY_RUN

    # --- a run -------------------------------------------------------------------------------------

    def execute(self, plan: Plan) -> list[ActionResult]:
        results: list[ActionResult] = []
        failures_in_a_row = 0
        for action in plan.actions:
            if action.action is Action.NOTIFY:
                results.append(ActionResult(action, self._done))
                continue
            if failures_in_a_row >= self.max_consecutive_failures:
                # The API server is failing: stop changing things rather than hammering it.
                results.append(
                    ActionResult(
                        action, Outcome.FAILED, f"not attempted after {failures_in_a_row} failures in a row"
                    )
                )
                continue
            result, api_failed = self._execute_one(action)
            failures_in_a_row = failures_in_a_row + 1 if api_failed else 0
            results.append(result)
        return results

    def _execute_one(self, action: PlannedAction) -> tuple[ActionResult, bool]:
        """The action's result, and whether it failed because the API server did."""
        try:
            if action.action is Action.SCALE_TO_ZERO:
                return self._stop(action), False
            return self._cordon(action), False
        except _Changed as e:
            log.info("skipped %s: %s", action.key, e)
            return ActionResult(action, Outcome.SKIPPED, str(e)), False
        except _Refused as e:
            log.error("failed %s: %s", action.key, e)
            return ActionResult(action, Outcome.FAILED, str(e)), False
        except KubeUnavailableError as e:
            # No answer: the patch may or may not have landed. Either way the object is restorable,
            # because the annotations travel in the same patch as the change.
            log.error("failed %s: %s; the change may have been applied", action.key, e)
            return ActionResult(action, Outcome.FAILED, f"{e} (the change may have been applied)"), True
        except KubeError as e:
            log.error("failed %s: %s", action.key, e)
            return ActionResult(action, Outcome.FAILED, str(e)), True

    def _reader(
        self, kind: str, namespace: str | None, name: str, first: dict[str, Any] | None = None
    ) -> Callable[[], dict[str, Any]]:
        """Reads the object: ``first`` (a copy already in hand) the first time, the API server after."""
        pending = [] if first is None else [first]

        def read() -> dict[str, Any]:
            return pending.pop() if pending else self.kube.get(kind, namespace, name)

        return read

    @staticmethod
    def _planned_copy(action: PlannedAction, spec: dict[str, Any]) -> dict[str, Any] | None:
        """The object as the plan saw it: good for a first try, a 409 says when it is stale."""
        if not action.resource_version:
            return None
        return {"metadata": {"resourceVersion": action.resource_version}, "spec": spec}

    def _still_wanted(self, obj: Mapping[str, Any], what: str) -> None:
        """Raise :class:`_Changed` if the owner opted out since planning (seen on a re-read after a 409)."""
        reason = opt_out(_annotations(obj), self.clock(), what)
        if reason:
            raise _Changed(f"{reason} since planning")

    def _with_conflict_retry(
        self, read: Callable[[], dict[str, Any]], attempt: Callable[[dict[str, Any]], T]
    ) -> T:
        """Run ``attempt`` on the object; on 409 (or 429) re-read it and try again with the fresh version."""
        obj = read()
        for n in range(1, self.conflict_attempts + 1):
            try:
                return attempt(obj)
            except (ConflictError, TooManyRequestsError) as e:
                if n == self.conflict_attempts:
                    raise
                log.info("%s on attempt %d; re-reading", type(e).__name__, n)
                self.sleep(min(0.05 * 2**n, 1.0))
                obj = read()
        raise AssertionError("unreachable")  # pragma: no cover

    def _stop(self, action: PlannedAction) -> ActionResult:
        """The root's native stop (scale to zero, stop annotation, suspend), with the reaper's annotations.

        A custom kind with a scale subresource is marked first, then scaled through ``/scale``: the
        marks are conditional on the version read, so a run that dies in between leaves an object that
        ``restore`` understands; the scale write is conditional on the version the marks produced, so
        a change by anyone in between is a 409, a re-read and a fresh try.
        """
        ref = action.written
        actuator = actuator_of(ref.kind)
        if actuator is None:
            raise _Changed(f"{ref.kind} has no native stop gpu-reaper can use")  # pragma: no cover
        if isinstance(actuator, KueueDeactivate):
            return self._stop_through_kueue(action, actuator)
        through_scale = isinstance(actuator, ScaleSubresource)
        now = rfc3339(self.clock())
        holder = f" (GPUs held by {action.target.kind} {action.target.namespace}/{action.target.name})"
        via = holder if action.root is not None or through_scale else ""
        where = f"{ref.kind} {ref.namespace}/{ref.name}{via}"

        def attempt(obj: dict[str, Any]) -> tuple[dict[str, Any] | None, Change]:
            self._still_wanted(obj, ref.kind.lower())
            live = workload_from_object(ref.kind, obj)
            done = actuator.stopped(live)
            if done:
                raise _Changed(done)
            change = actuator.stop(live, now)
            marks = {
                "resourceVersion": _meta(obj, "resourceVersion"),
                "annotations": {**change.annotations, names.REAPED_AT: now, names.REASON: action.reason},
            }
            if through_scale:
                what = f"scale {where} through its scale subresource {change.description}"

                def write() -> dict[str, Any]:
                    self._remember(ref.kind, ref.namespace, ref.name)
                    marked = self.kube.patch(ref.kind, ref.namespace, ref.name, {"metadata": marks})
                    scale = {
                        "metadata": {"resourceVersion": _meta(marked, "resourceVersion")},
                        "spec": change.spec,
                    }
                    self.kube.patch_scale(ref.kind, ref.namespace, ref.name, scale)
                    return marked

            else:
                what = f"{actuator.log_verb} {where} {change.description}"
                body = {"metadata": marks, **({"spec": dict(change.spec)} if change.spec else {})}

                def write() -> dict[str, Any]:
                    self._remember(ref.kind, ref.namespace, ref.name)
                    return self.kube.patch(ref.kind, ref.namespace, ref.name, body)

            return self._write(f"{what} ({action.reason})", write), change

        if through_scale:
            read = self._read_with_scale(ref.kind, ref.namespace, ref.name)
        else:
            planned = self._planned_copy(
                action, {"replicas": action.replicas} if action.replicas is not None else {}
            )
            read = self._reader(ref.kind, ref.namespace, ref.name, planned)
        patched, change = self._with_conflict_retry(read, attempt)
        written = write_line(ref.kind, ref.namespace, ref.name, change)
        if patched is None:
            return ActionResult(action, Outcome.DRY_RUN, write=written)
        # A custom kind scaled through /scale is found again through the object holding the GPUs.
        again = action.target if through_scale else ref
        self._event(
            patched,
            ref.kind,
            actuator.done,
            f"gpu-reaper: {actuator.verb}, {change.description}{via}: {action.reason}. "
            f"Restore: gpu-reaper restore {again.namespace}/{again.name}",
        )
        return ActionResult(action, Outcome.APPLIED, change.description, write=written)

    def _read_with_scale(self, kind: str, namespace: str, name: str) -> Callable[[], dict[str, Any]]:
        """Reads the object and its ``/scale`` (which carries the object's resourceVersion)."""

        def read() -> dict[str, Any]:
            obj = self.kube.get(kind, namespace, name)
            return with_scale_replicas(obj, self.kube.get_scale(kind, namespace, name))

        return read

    def _stop_through_kueue(self, action: PlannedAction, actuator: KueueDeactivate) -> ActionResult:
        """A Kueue-managed Job: marked, then its Workload deactivated; Kueue then evicts it and
        suspends the Job. Suspending the Job directly would be undone: Kueue unsuspends a Job whose
        Workload is still admitted. Both writes are conditional on the versions read; the marks go
        first, so a run that dies in between leaves a Job that ``restore`` understands.
        """
        ref = action.written
        now = rfc3339(self.clock())
        where = f"{ref.kind} {ref.namespace}/{ref.name}"

        def attempt(job: dict[str, Any]) -> tuple[dict[str, Any] | None, Change, str]:
            self._still_wanted(job, "job")
            live = workload_from_object(ref.kind, job)
            done = actuator.stopped(live)
            if done:
                raise _Changed(done)
            workload = self._kueue_workload(ref.namespace, ref.name, job)
            wl_name = _meta(workload, "name")
            if (workload.get("spec") or {}).get("active") is False:
                raise _Changed(f"its Kueue Workload {wl_name} is already inactive")
            change = actuator.stop(live, now)
            marks = {names.REAPED_AT: now, names.REASON: action.reason}

            def write() -> dict[str, Any]:
                self._remember(ref.kind, ref.namespace, ref.name)
                job_marks = {"resourceVersion": _meta(job, "resourceVersion"), "annotations": marks}
                marked = self.kube.patch(ref.kind, ref.namespace, ref.name, {"metadata": job_marks})
                body = {
                    "metadata": {"resourceVersion": _meta(workload, "resourceVersion"), "annotations": marks},
                    "spec": dict(change.spec),
                }
                self.kube.patch("KueueWorkload", ref.namespace, wl_name, body)
                return marked

            what = f"{actuator.log_verb} {where} {change.description}: Workload {wl_name} ({action.reason})"
            return self._write(what, write), change, wl_name

        patched, change, wl_name = self._with_conflict_retry(
            self._reader(ref.kind, ref.namespace, ref.name), attempt
        )
        written = write_line("Workload", ref.namespace, wl_name, change)
        if patched is None:
            return ActionResult(action, Outcome.DRY_RUN, write=written)
        detail = f"{change.description}: Workload {wl_name}"
        self._event(
            patched,
            ref.kind,
            actuator.done,
            f"gpu-reaper: {actuator.verb}, {detail}: {action.reason}. "
            f"Restore: gpu-reaper restore {ref.namespace}/{ref.name}",
        )
        return ActionResult(action, Outcome.APPLIED, detail, write=written)

    def _kueue_workload(self, namespace: str, name: str, job: Mapping[str, Any]) -> dict[str, Any]:
        """The Kueue Workload of a Job, found by its ownerReference to the Job's uid (as Kueue finds
        it), never by guessing its name. Listed from etcd, not the cache: it is about to be written."""
        try:
            listed = self.kube.list_objects("KueueWorkload", namespace)
        except NotFoundError as e:
            raise _Refused(
                f"Job {namespace}/{name} is labelled {names.KUEUE_QUEUE_LABEL} but this cluster does not "
                f"serve Kueue's Workload API ({KINDS['KueueWorkload'].api_version}): gpu-reaper stops such "
                "a Job only through its Workload (suspending it directly would fight Kueue); nothing changed"
            ) from e
        uid = _meta(job, "uid")
        owned = [
            w
            for w in listed
            if any(
                r.get("kind") == "Job" and r.get("uid") == uid
                for r in (w.get("metadata") or {}).get("ownerReferences") or ()
            )
        ]
        if len(owned) != 1:
            raise _Refused(
                f"{len(owned)} Kueue Workloads are owned by Job {namespace}/{name} where Kueue keeps "
                "exactly one (is Kueue running?); nothing changed"
            )
        return owned[0]

    def _cordon(self, action: PlannedAction) -> ActionResult:
        name = action.target.name
        now = rfc3339(self.clock())

        def attempt(obj: dict[str, Any]) -> dict[str, Any] | None:
            self._still_wanted(obj, "node")
            if (obj.get("spec") or {}).get("unschedulable"):
                raise _Changed("already cordoned")
            body = {
                "metadata": {
                    "resourceVersion": _meta(obj, "resourceVersion"),
                    "annotations": {names.CORDONED_AT: now, names.REASON: action.reason},
                },
                "spec": dict(CORDON.spec),
            }
            return self._write(
                f"cordon node {name} ({action.reason})", lambda: self.kube.patch("Node", None, name, body)
            )

        planned = self._planned_copy(action, {"unschedulable": False})
        patched = self._with_conflict_retry(self._reader("Node", None, name, planned), attempt)
        written = f"Node {name}: {CORDON.description} ({CORDON.fields()})"
        if patched is None:
            return ActionResult(action, Outcome.DRY_RUN, write=written)
        self._event(
            patched,
            "Node",
            "Cordoned",
            f"gpu-reaper cordoned the node: {action.reason}. Undo: gpu-reaper restore --all",
        )
        return ActionResult(action, Outcome.APPLIED, write=written)

    # --- Events ------------------------------------------------------------------------------------

    def _event(self, obj: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        """Record a Kubernetes Event on a touched object; a failure here never fails the action."""
        name = _meta(obj, "name")
        namespace = _meta(obj, "namespace") or "default"  # cluster-scoped objects' events live in default
        now = rfc3339(self.wall_clock())
        api_version = KINDS[kind].api_version if kind in KINDS else "v1"
        if self.cluster is not None:
            message = f"[{self.cluster}] {message}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": api_version,
                "kind": kind,
                "name": name,
                "namespace": _meta(obj, "namespace"),
                "uid": _meta(obj, "uid"),
                "resourceVersion": _meta(obj, "resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Normal",
            "source": {"component": names.COMPONENT},
            "reportingComponent": names.COMPONENT,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._write(
                f"record Event {reason} on {kind} {name}", lambda: self.kube.create("Event", namespace, body)
            )
        except KubeError as e:
            log.warning("could not record an Event on %s %s: %s", kind, name, e)

    # --- confirmation state ------------------------------------------------------------------------

    def save_state(self, state: ReaperState) -> None:
        """Persist confirmation streaks in the reaper's own ConfigMap (dry-run leaves them untouched)."""
        data = {names.STATE_KEY: state.to_json()}

        def write() -> None:
            try:
                # A merge patch of its own key only: the record of stopped objects stays as it is.
                self.kube.patch("ConfigMap", self.namespace, names.STATE_CONFIGMAP, {"data": data})
            except NotFoundError:
                self.kube.create("ConfigMap", self.namespace, self._state_configmap(data))

        self._write(
            f"save {len(state.entries)} confirmation streaks to ConfigMap "
            f"{self.namespace}/{names.STATE_CONFIGMAP}",
            write,
        )

    # --- the record of stopped objects ------------------------------------------------------------

    def _read_record(self) -> tuple[StopRecord, dict[str, Any] | None]:
        cm = self.kube.get_optional("ConfigMap", self.namespace, names.STATE_CONFIGMAP)
        return StopRecord.from_json(((cm or {}).get("data") or {}).get(names.STOPPED_KEY)), cm

    def _update_record(self, change: Callable[[StopRecord], StopRecord]) -> None:
        """Read, change and write back the record: conditional on the version read, created if absent."""
        for n in range(1, self.conflict_attempts + 1):
            record, cm = self._read_record()
            updated = change(record)
            if updated == record:
                return
            data = {names.STOPPED_KEY: updated.to_json()}
            try:
                if cm is None:
                    self.kube.create("ConfigMap", self.namespace, self._state_configmap(data))
                else:
                    version = {"resourceVersion": _meta(cm, "resourceVersion")}
                    body = {"metadata": version, "data": data}
                    self.kube.patch("ConfigMap", self.namespace, names.STATE_CONFIGMAP, body)
                return
            except ConflictError:
                if n == self.conflict_attempts:
                    raise

    def _remember(self, kind: str, namespace: str, name: str) -> None:
        """Record an object before stopping it (inside the write): whatever its kind, even one that
        carries no mark ``restore --all`` could list, it is found again. A stop that then fails
        leaves an entry that restore drops, finding the object unmarked."""
        info = KINDS[kind]
        entry = StoppedObject(
            api_version=info.api_version,
            kind=info.api_kind,
            namespace=namespace,
            name=name,
            stopped_at=self.clock(),
        )
        self._stopped_now.add(entry.key)
        try:
            self._update_record(lambda r: r if entry.key in r.objects else r.with_object(entry))
        except KubeError as e:
            if kind not in ACTUATORS:
                raise  # a kind restore --all cannot find by its mark: unrecorded, it could not come back
            # restore --all also finds this object by the mark the stop writes: a warning, not a failure.
            log.warning("could not record %s %s/%s among the stopped objects: %s", kind, namespace, name, e)

    def prune_record(self) -> None:
        """Drop from the record what is no longer stopped (restored by hand, deleted, its kind gone), so
        the record holds what is still stopped and not every stop ever made. One read per entry,
        in apply runs only; a failure leaves the entries for the next run."""
        try:
            record, _ = self._read_record()
            # What this run stopped is stopped: only older entries are read again.
            older = [entry for key, entry in record.objects.items() if key not in self._stopped_now]
            self._drop_from_record([e.key for e in older if not self._still_stopped(e)], "no longer stopped")
        except KubeError as e:
            log.warning("could not prune the record of stopped objects: %s", e)

    def _still_stopped(self, entry: StoppedObject) -> bool:
        kind = self._recorded_kind(entry)
        if kind is None:
            return False
        obj = self.kube.get_optional(kind, entry.namespace, entry.name)
        return obj is not None and _marked(kind, obj)

    def _recorded(self, namespace: str | None) -> list[StoppedObject]:
        """The record's objects (in ``namespace``); none, with a warning, where it may not be read."""
        try:
            record, _ = self._read_record()
        except ForbiddenError as e:
            log.warning(
                "cannot read ConfigMap %s/%s (%s): restoring only what carries gpu-reaper's annotations",
                self.namespace,
                names.STATE_CONFIGMAP,
                e,
            )
            return []
        return [o for o in record.objects.values() if namespace is None or o.namespace == namespace]

    def _forget(self, keys: Collection[str]) -> None:
        """Drop restored objects from the record; a failure only leaves entries restore skips later."""
        try:
            record, _ = self._read_record()
            self._drop_from_record([k for k in keys if k in record.objects], "restored")
        except KubeError as e:
            log.warning("could not update the record of stopped objects: %s", e)

    def _drop_from_record(self, keys: list[str], why: str) -> None:
        if keys:
            self._write(
                f"drop {len(keys)} {why} objects from ConfigMap {self.namespace}/{names.STATE_CONFIGMAP}",
                lambda: self._update_record(lambda r: r.without(keys)),
            )

    def _recorded_kind(self, entry: StoppedObject) -> str | None:
        """The reaper's name for a recorded object's kind, when it can still stop (and restore) it."""
        known = next((k for k in KINDS.values() if k.group == entry.group and k.api_kind == entry.kind), None)
        if known is not None and actuator_of(known.name) is not None:
            return known.name
        # A custom kind stopped through /scale: a new process learns it again from discovery.
        info = self._discovery.scalable(entry.api_version, entry.kind)
        return info.name if info is not None else None

    def _state_configmap(self, data: Mapping[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": names.STATE_CONFIGMAP,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": names.COMPONENT},
            },
            "data": dict(data),
        }

    # --- the Lease ---------------------------------------------------------------------------------

    @contextmanager
    def lease(self, wait: float = 0.0) -> Iterator[None]:
        """Hold the coordination Lease for the block; raises LeaseHeldError if another run keeps it."""
        deadline = time.monotonic() + wait
        while True:
            try:
                self._acquire()
                break
            except LeaseHeldError:
                if time.monotonic() >= deadline:
                    raise
                self.sleep(min(2.0, max(0.1, deadline - time.monotonic())))
        try:
            yield
        finally:
            try:
                self._release()
            except KubeError as e:
                # It expires on its own after leaseDurationSeconds; the next run is only delayed.
                log.warning("could not release the lease: %s", e)

    def _lease_spec(self, now: datetime, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration.total_seconds()),
            "acquireTime": _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }

    def _acquire(self) -> None:
        now = self.wall_clock()
        current = self.kube.get_optional("Lease", self.namespace, names.LEASE_NAME)
        what = f"acquire Lease {self.namespace}/{names.LEASE_NAME} as {self.identity}"
        if current is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": names.LEASE_NAME,
                    "namespace": self.namespace,
                    "labels": {"app.kubernetes.io/managed-by": names.COMPONENT},
                },
                "spec": self._lease_spec(now, 0),
            }
            try:
                self._write(what, lambda: self.kube.create("Lease", self.namespace, body))
            except ConflictError as e:
                raise LeaseHeldError("another run", "it is released or expires") from e
            return
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        expires = self._lease_expiry(spec)
        if holder and holder != self.identity and expires is not None and expires > now:
            raise LeaseHeldError(holder, rfc3339(expires))
        if holder and holder != self.identity:
            log.warning("taking over the expired lease of %s (expired %s)", holder, rfc3339(expires or now))
        body = {
            "metadata": {"resourceVersion": _meta(current, "resourceVersion")},
            "spec": self._lease_spec(now, int(spec.get("leaseTransitions") or 0) + 1),
        }
        try:
            self._write(what, lambda: self.kube.patch("Lease", self.namespace, names.LEASE_NAME, body))
        except ConflictError as e:
            # Someone else took it between our read and our write: their run goes on, ours does not.
            raise LeaseHeldError("another run", "it is released or expires") from e

    @staticmethod
    def _lease_expiry(spec: Mapping[str, Any]) -> datetime | None:
        renew = spec.get("renewTime") or spec.get("acquireTime")
        if not renew:
            return None
        try:
            return parse_time(str(renew)) + timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0))
        except ValueError:
            return None  # unreadable: treat as expired rather than wedge every future run

    def _release(self) -> None:
        def release() -> None:
            # Read inside the write gate: in dry-run the lease was never taken, there is nothing to read.
            current = self.kube.get_optional("Lease", self.namespace, names.LEASE_NAME)
            if current is None or (current.get("spec") or {}).get("holderIdentity") != self.identity:
                return  # not ours any more (it expired and was taken over): leave it alone
            body = {
                "metadata": {"resourceVersion": _meta(current, "resourceVersion")},
                "spec": {"holderIdentity": None, "renewTime": None, "acquireTime": None},
            }
            self.kube.patch("Lease", self.namespace, names.LEASE_NAME, body)

        self._write(f"release Lease {self.namespace}/{names.LEASE_NAME}", release)

    # --- restore -----------------------------------------------------------------------------------

    def objects_named(self, namespace: str, name: str) -> list[tuple[str, dict[str, Any]]]:
        """Every object of a kind the reaper stops called NAMESPACE/NAME: what ``restore`` may act on."""
        found: list[tuple[str, dict[str, Any]]] = []
        for kind in ACTUATORS:
            try:
                obj = self.kube.get_optional(kind, namespace, name)
            except (NotFoundError, ForbiddenError):
                obj = None  # a custom kind that is not installed, or not granted (rbac.controllers)
            if obj is not None:
                found.append((kind, obj))
        return found

    def restore_workload(self, namespace: str, name: str) -> RestoreResult:
        """Undo the reaper's stop on NAMESPACE/NAME, of whichever kind it stopped; a no-op when unmarked."""
        kind, root, obj = self._what_to_restore(namespace, name)
        result = self._restore(kind, namespace, root, obj)
        if result.outcome is not Outcome.FAILED:
            self._forget([_record_key(kind, namespace, root)])
        return result

    def _what_to_restore(self, namespace: str, name: str) -> tuple[str, str, dict[str, Any]]:
        """The kind, name and object that ``restore NAMESPACE/NAME`` acts on."""
        found = self.objects_named(namespace, name)
        for kind, obj in found:
            if _marked(kind, obj):
                return kind, name, obj
        for kind, obj in found:
            # NAME may be the child that held the GPUs: what was stopped is its root controller.
            root = self._stopped_root(namespace, kind, obj)
            if root is not None:
                kind, obj = root
                return kind, _meta(obj, "name"), obj
        if found:
            kind, obj = found[0]
            return kind, name, obj
        raise BadInputError(
            f"no Deployment or StatefulSet {namespace}/{name}, nor any other kind gpu-reaper stops"
        )

    def _stopped_root(
        self, namespace: str, kind: str, obj: Mapping[str, Any], hops: int = 6
    ) -> tuple[str, dict[str, Any]] | None:
        """The controller above ``obj`` that carries the reaper's mark, following ownerReferences."""
        owner = workload_from_object(kind, obj).owner
        for _ in range(hops):
            if owner is None:
                return None
            owner_kind = owner.kind
            if actuator_of(owner_kind) is None:
                # Only the kinds it stops are readable one by one (the chart's RBAC); a custom kind
                # is one of them when discovery says it serves /scale.
                info = self._discovery.scalable(owner.api_version, owner.api_kind)
                if info is None:
                    return None
                owner_kind = info.name
            try:
                parent = self.kube.get_optional(owner_kind, namespace, owner.name)
            except (NotFoundError, ForbiddenError):
                return None
            if parent is None:
                return None
            if _marked(owner_kind, parent):
                return owner_kind, parent
            owner = workload_from_object(owner_kind, parent).owner
        return None

    def _undo(
        self,
        target: str,
        read: Callable[[], dict[str, Any]],
        attempt: Callable[[dict[str, Any]], tuple[Outcome, str]],
    ) -> RestoreResult:
        try:
            outcome, detail = self._with_conflict_retry(read, attempt)
        except (KubeError, _Refused) as e:
            log.error("failed to restore %s: %s", target, e)
            return RestoreResult(target, Outcome.FAILED, str(e))
        return RestoreResult(target, outcome, detail)

    def _restore(
        self, kind: str, namespace: str, name: str, obj: dict[str, Any] | None = None
    ) -> RestoreResult:
        target = f"{kind} {namespace}/{name}"
        actuator = actuator_of(kind)
        if actuator is None:
            return RestoreResult(target, Outcome.SKIPPED, "gpu-reaper stops no object of this kind")
        if isinstance(actuator, ScaleSubresource):
            return self._restore_through_scale(kind, namespace, name)
        if isinstance(actuator, KueueDeactivate):
            return self._restore_through_kueue(actuator, namespace, name, obj)
        now = rfc3339(self.clock())

        def attempt(current: dict[str, Any]) -> tuple[Outcome, str]:
            if not _marked(kind, current):
                return Outcome.SKIPPED, f"nothing to restore (no {actuator.marker})"
            change = actuator.restore(workload_from_object(kind, current))
            if not isinstance(change, Change):
                return Outcome.FAILED, change
            body = {
                "metadata": {
                    "resourceVersion": _meta(current, "resourceVersion"),
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
            patched = self._write(
                f"restore {target}: {change.description}",
                lambda: self.kube.patch(kind, namespace, name, body),
            )
            if patched is not None:
                self._event(patched, kind, "Restored", f"gpu-reaper restored {change.description}")
            return self._done, change.description

        return self._undo(target, self._reader(kind, namespace, name, obj), attempt)

    def _restore_through_scale(self, kind: str, namespace: str, name: str) -> RestoreResult:
        """The recorded count back through ``/scale``, then the marks removed (a retry finds them)."""
        target = f"{kind} {namespace}/{name}"
        now = rfc3339(self.clock())

        def attempt(current: dict[str, Any]) -> tuple[Outcome, str]:
            if not _marked(kind, current):
                return Outcome.SKIPPED, f"nothing to restore (no {SCALE_SUBRESOURCE.marker})"
            change = SCALE_SUBRESOURCE.restore(workload_from_object(kind, current))
            if not isinstance(change, Change):
                return Outcome.FAILED, change
            version = _meta(current, "resourceVersion")

            def write() -> dict[str, Any]:
                scale = {"metadata": {"resourceVersion": version}, "spec": dict(change.spec)}
                scaled = self.kube.patch_scale(kind, namespace, name, scale)
                marks = {
                    "metadata": {
                        "resourceVersion": _meta(scaled, "resourceVersion"),
                        "annotations": {
                            names.ORIGINAL_REPLICAS: None,
                            names.REAPED_AT: None,
                            names.REASON: None,
                            names.RESTORED_AT: now,
                        },
                    }
                }
                return self.kube.patch(kind, namespace, name, marks)

            patched = self._write(
                f"restore {target} through its scale subresource: {change.description}", write
            )
            if patched is not None:
                self._event(patched, kind, "Restored", f"gpu-reaper restored {change.description}")
            return self._done, change.description

        return self._undo(target, self._read_with_scale(kind, namespace, name), attempt)

    def _restore_through_kueue(
        self, actuator: KueueDeactivate, namespace: str, name: str, obj: dict[str, Any] | None
    ) -> RestoreResult:
        """The Job's Workload reactivated (Kueue queues it and, once admitted, unsuspends the Job),
        then the Job's marks removed: a run that dies in between leaves the Job marked, and a retry
        finds it."""
        target = f"Job {namespace}/{name}"
        now = rfc3339(self.clock())

        def attempt(job: dict[str, Any]) -> tuple[Outcome, str]:
            if not _marked("Job", job):
                return Outcome.SKIPPED, f"nothing to restore (no {actuator.marker})"
            workload = self._kueue_workload(namespace, name, job)
            wl_name = _meta(workload, "name")
            unmarked = {names.REAPED_AT: None, names.REASON: None}
            deactivated = (workload.get("spec") or {}).get("active") is False
            if not deactivated or names.REAPED_AT not in _annotations(workload):
                # The stop never reached the Workload (or Kueue or an admin deactivated it): it is not
                # the reaper's to reactivate; only the Job's marks go.
                detail = f"Workload {wl_name} was not deactivated by gpu-reaper; left as it is"
                marks = {"metadata": {"annotations": {**unmarked, names.RESTORED_AT: now}}}
                self._write(
                    f"clear the marks of {target}: {detail}",
                    lambda: self.kube.patch("Job", namespace, name, marks),
                )
                return self._done, detail
            change = actuator.restore(workload_from_object("Job", job))
            if not isinstance(change, Change):
                return Outcome.FAILED, change  # pragma: no cover (reactivation always applies)

            def write() -> dict[str, Any]:
                version = _meta(workload, "resourceVersion")
                body = {
                    "metadata": {"resourceVersion": version, "annotations": unmarked},
                    "spec": dict(change.spec),
                }
                self.kube.patch("KueueWorkload", namespace, wl_name, body)
                # Not conditional: Kueue unsuspending the Job meanwhile must not make this a conflict.
                marks = {"metadata": {"annotations": {**unmarked, names.RESTORED_AT: now}}}
                return self.kube.patch("Job", namespace, name, marks)

            detail = f"{change.description}: Workload {wl_name}"
            patched = self._write(f"restore {target}: {detail}", write)
            if patched is not None:
                self._event(patched, "Job", "Restored", f"gpu-reaper {detail}")
            return self._done, detail

        return self._undo(target, self._reader("Job", namespace, name, obj), attempt)

    def restore_all(self, namespace: str | None = None) -> list[RestoreResult]:
        """Restore everything the reaper stopped (in one namespace, or everywhere plus its cordons):
        every object carrying its mark, and every object in its record of stops, whatever the kind."""
        results: list[RestoreResult] = []
        settled: dict[str, RestoreResult | None] = {}  # by record key; None: nothing left to restore
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
                if _marked(kind, obj):
                    ns, name = _meta(obj, "namespace"), _meta(obj, "name")
                    results.append(self._restore(kind, ns, name, obj))
                    settled[_record_key(kind, ns, name)] = results[-1]
        for entry in self._recorded(namespace):
            if entry.key not in settled:
                try:
                    settled[entry.key] = self._restore_recorded(entry)
                except KubeError as e:  # one object's failure, not the whole restore's
                    target = f"{entry.kind} {entry.namespace}/{entry.name}"
                    log.error("failed to restore %s: %s", target, e)
                    settled[entry.key] = RestoreResult(target, Outcome.FAILED, str(e))
                results += [r for r in (settled[entry.key],) if r is not None]
        self._forget([k for k, r in settled.items() if r is None or r.outcome is not Outcome.FAILED])
        if namespace is None:
            for node in self.kube.list_objects("Node"):
                if names.CORDONED_AT in _annotations(node):
                    results.append(self.uncordon(_meta(node, "name"), node))
        return results

    def _restore_recorded(self, entry: StoppedObject) -> RestoreResult | None:
        """Restore one recorded object; None when there is nothing to restore (gone, not installed any
        more, or brought back some other way): the record then just forgets it."""
        kind = self._recorded_kind(entry)
        if kind is None:
            return None
        try:
            obj = self.kube.get_optional(kind, entry.namespace, entry.name)
        except ForbiddenError as e:
            target = f"{entry.kind} {entry.namespace}/{entry.name}"
            log.error("failed to restore %s: %s", target, e)
            return RestoreResult(target, Outcome.FAILED, str(e))
        if obj is None or not _marked(kind, obj):
            return None
        return self._restore(kind, entry.namespace, entry.name, obj)

    def uncordon(self, name: str, obj: dict[str, Any] | None = None) -> RestoreResult:
        """Uncordon a node the reaper cordoned; a node without the reaper's mark is left alone."""
        target = f"Node {name}"
        now = rfc3339(self.clock())

        def attempt(current: dict[str, Any]) -> tuple[Outcome, str]:
            if names.CORDONED_AT not in _annotations(current):
                return Outcome.SKIPPED, "not cordoned by gpu-reaper; left alone"
            body = {
                "metadata": {
                    "resourceVersion": _meta(current, "resourceVersion"),
                    # restored-at gives the node the same grace a restored workload gets.
                    "annotations": {names.CORDONED_AT: None, names.REASON: None, names.RESTORED_AT: now},
                },
                "spec": {"unschedulable": None},
            }
            patched = self._write(f"uncordon node {name}", lambda: self.kube.patch("Node", None, name, body))
            if patched is not None:
                self._event(patched, "Node", "Uncordoned", "gpu-reaper uncordoned the node")
            return self._done, "uncordoned"

        return self._undo(target, self._reader("Node", None, name, obj), attempt)
