"""The reaper's own ConfigMap: confirmation streaks, and the record of stopped objects (``stopped.json``).

The record is also the reaper's mark on what it scales through ``/scale`` alone (Deployments,
StatefulSets, ReplicaSets): the count to restore and the reason live there, not on the object, and
so does the time of each restore (the grace after restore). Writes go through the write gate; the
record is read, changed and written back conditionally on the version read, so two writers never
lose each other's entries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from datetime import timedelta
from typing import Any

from reaper import names
from reaper.actuators import ACTUATORS, RecordedScale, actuator_of
from reaper.adapter_errors import ConflictError, ForbiddenError, KubeError, NotFoundError
from reaper.clock import Clock
from reaper.discovery import ScaleDiscovery
from reaper.kinds import KINDS
from reaper.kube_api import KubeApi
from reaper.marks import meta, record_key, stopped_by_reaper
from reaper.state import ReaperState, StoppedObject, StopRecord
from reaper.write_gate import WriteGate

__all__ = ["StateStore", "record_key"]

log = logging.getLogger(__name__)


class StateStore:
    def __init__(
        self,
        kube: KubeApi,
        gate: WriteGate,
        *,
        namespace: str,
        clock: Clock,
        discovery: ScaleDiscovery,
        conflict_attempts: int,
    ) -> None:
        self.kube = kube
        self.gate = gate
        self.namespace = namespace
        self.clock = clock
        self.discovery = discovery
        self.conflict_attempts = conflict_attempts
        self._stopped_now: set[str] = set()  # record keys of what this run stopped

    # --- confirmation streaks ----------------------------------------------------------------------

    def save_state(self, state: ReaperState) -> None:
        """Persist confirmation streaks in the reaper's own ConfigMap (dry-run leaves them untouched)."""
        data = {names.STATE_KEY: state.to_json()}

        def write() -> None:
            try:
                # A merge patch of its own key only: the record of stopped objects stays as it is.
                self.kube.patch("ConfigMap", self.namespace, names.STATE_CONFIGMAP, {"data": data})
            except NotFoundError:
                self.kube.create("ConfigMap", self.namespace, self._configmap(data))

        self.gate.send(
            f"save {len(state.entries)} confirmation streaks to ConfigMap "
            f"{self.namespace}/{names.STATE_CONFIGMAP}",
            write,
        )

    # --- the record of stopped objects -------------------------------------------------------------

    def remember(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        uid: str = "",
        original_replicas: int | None = None,
        reason: str = "",
    ) -> None:
        """Record an object before stopping it (called inside the stop's write, past the gate): whatever
        its kind, even one that carries no mark ``restore --all`` could list, it is found again. A stop
        that then fails leaves an entry that restore drops, finding the object unmarked.

        With ``original_replicas`` the entry is the stop's mark (a kind scaled through ``/scale``
        alone): it must be written before the scale, so a failure to write it fails the stop.
        """
        info = KINDS[kind]
        entry = StoppedObject(
            api_version=info.api_version,
            kind=info.api_kind,
            namespace=namespace,
            name=name,
            stopped_at=self.clock(),
            uid=uid,
            original_replicas=original_replicas,
            reason=reason,
        )
        self._stopped_now.add(entry.key)
        try:
            # A retry after a conflict records the fresh count; the same entry is not written twice.
            self._update(lambda r: r if r.objects.get(entry.key) == entry else r.with_object(entry))
        except KubeError as e:
            if kind not in ACTUATORS or original_replicas is not None:
                raise  # no mark on the object: unrecorded, it could not come back
            # restore --all also finds this object by the mark the stop writes: a warning, not a failure.
            log.warning("could not record %s %s/%s among the stopped objects: %s", kind, namespace, name, e)

    def prune(self, keep_restores: timedelta) -> None:
        """Drop from the record what is no longer stopped (restored by hand, deleted, its kind gone), so
        the record holds what is still stopped and not every stop ever made, and the restores older
        than ``keep_restores`` (the grace after restore). One read per entry, in apply runs only; a
        failure leaves the entries for the next run."""
        try:
            record, _ = self._read()
            # What this run stopped is stopped: only older entries are read again.
            older = [entry for key, entry in record.objects.items() if key not in self._stopped_now]
            self._drop([e.key for e in older if not self._still_stopped(e, record)], "no longer stopped")
            done = record.restored_before(self.clock() - keep_restores)
            if done:
                self.gate.send(
                    f"drop {len(done)} restores older than the grace after restore from ConfigMap "
                    f"{self.namespace}/{names.STATE_CONFIGMAP}",
                    lambda: self._update(lambda r: r.forgetting_restores(done)),
                )
        except KubeError as e:
            log.warning("could not prune the record of stopped objects: %s", e)

    def record(self) -> StopRecord:
        """The record as it is now; empty, with a warning, where it may not be read."""
        try:
            record, _ = self._read()
        except ForbiddenError as e:
            log.warning(
                "cannot read ConfigMap %s/%s (%s): restoring only what carries gpu-reaper's annotations",
                self.namespace,
                names.STATE_CONFIGMAP,
                e,
            )
            return StopRecord()
        return record

    def forget(self, keys: Collection[str], restored: Collection[str] = ()) -> None:
        """Drop settled objects from the record, noting those ``restored`` now (the grace after
        restore counts from then); a failure only leaves entries restore skips later."""
        if not keys and not restored:
            return  # nothing settled: the record is not even read
        try:
            record, _ = self._read()
            self._drop([k for k in keys if k in record.objects and k not in restored], "settled")
            now = self.clock()
            if restored:
                self.gate.send(
                    f"note {len(restored)} restores in ConfigMap {self.namespace}/{names.STATE_CONFIGMAP}",
                    lambda: self._update(lambda r: r.without(restored, restored_at=now)),
                )
        except KubeError as e:
            log.warning("could not update the record of stopped objects: %s", e)

    def kind_of(self, entry: StoppedObject) -> str | None:
        """The reaper's name for a recorded object's kind, when it can still stop (and restore) it."""
        known = next((k for k in KINDS.values() if k.group == entry.group and k.api_kind == entry.kind), None)
        if known is not None and actuator_of(known.name) is not None:
            return known.name
        # A custom kind stopped through /scale: a new process learns it again from discovery.
        info = self.discovery.scalable(entry.api_version, entry.kind)
        return info.name if info is not None else None

    def _still_stopped(self, entry: StoppedObject, record: StopRecord) -> bool:
        kind = self.kind_of(entry)
        if kind is None:
            return False
        obj = self.kube.get_optional(kind, entry.namespace, entry.name)
        if obj is None or not stopped_by_reaper(kind, obj, record):
            return False
        # Scaled back up by someone else: that settled the stop (the record is its only mark).
        return not isinstance(actuator_of(kind), RecordedScale) or not (obj.get("spec") or {}).get("replicas")

    def _read(self) -> tuple[StopRecord, dict[str, Any] | None]:
        cm = self.kube.get_optional("ConfigMap", self.namespace, names.STATE_CONFIGMAP)
        return StopRecord.from_json(((cm or {}).get("data") or {}).get(names.STOPPED_KEY)), cm

    def _update(self, change: Callable[[StopRecord], StopRecord]) -> None:
        """Read, change and write back the record: conditional on the version read, created if absent.
        Called only from inside a write the gate let through."""
        for n in range(1, self.conflict_attempts + 1):
            record, cm = self._read()
            updated = change(record)
            if updated == record:
                return
            data = {names.STOPPED_KEY: updated.to_json()}
            try:
                if cm is None:
                    self.kube.create("ConfigMap", self.namespace, self._configmap(data))
                else:
                    version = {"resourceVersion": meta(cm, "resourceVersion")}
                    body = {"metadata": version, "data": data}
                    self.kube.patch("ConfigMap", self.namespace, names.STATE_CONFIGMAP, body)
                return
            except ConflictError:
                if n == self.conflict_attempts:
                    raise

    def _drop(self, keys: list[str], why: str) -> None:
        if keys:
            self.gate.send(
                f"drop {len(keys)} {why} objects from ConfigMap {self.namespace}/{names.STATE_CONFIGMAP}",
                lambda: self._update(lambda r: r.without(keys)),
            )

    def _configmap(self, data: Mapping[str, str]) -> dict[str, Any]:
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
