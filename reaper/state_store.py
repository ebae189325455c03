"""The reaper's own ConfigMap: confirmation streaks, and the record of stopped objects (``stopped.json``).

Writes go through the write gate; the record is read, changed and written back conditionally on
the version read, so two writers never lose each other's entries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from reaper import names
from reaper.actuators import ACTUATORS, actuator_of
from reaper.adapter_errors import ConflictError, ForbiddenError, KubeError, NotFoundError
from reaper.clock import Clock
from reaper.discovery import ScaleDiscovery
from reaper.kinds import KINDS
from reaper.kube_api import KubeApi
from reaper.marks import marked, meta
from reaper.state import ReaperState, StoppedObject, StopRecord, stop_key
from reaper.write_gate import WriteGate

log = logging.getLogger(__name__)


def record_key(kind: str, namespace: str, name: str) -> str:
    """An object's key in the record of stops, from the reaper's name for its kind."""
    info = KINDS[kind]
    return stop_key(info.group, info.api_kind, namespace, name)


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

    def remember(self, kind: str, namespace: str, name: str) -> None:
        """Record an object before stopping it (called inside the stop's write, past the gate): whatever
        its kind, even one that carries no mark ``restore --all`` could list, it is found again. A stop
        that then fails leaves an entry that restore drops, finding the object unmarked."""
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
            self._update(lambda r: r if entry.key in r.objects else r.with_object(entry))
        except KubeError as e:
            if kind not in ACTUATORS:
                raise  # a kind restore --all cannot find by its mark: unrecorded, it could not come back
            # restore --all also finds this object by the mark the stop writes: a warning, not a failure.
            log.warning("could not record %s %s/%s among the stopped objects: %s", kind, namespace, name, e)

    def prune(self) -> None:
        """Drop from the record what is no longer stopped (restored by hand, deleted, its kind gone), so
        the record holds what is still stopped and not every stop ever made. One read per entry,
        in apply runs only; a failure leaves the entries for the next run."""
        try:
            record, _ = self._read()
            # What this run stopped is stopped: only older entries are read again.
            older = [entry for key, entry in record.objects.items() if key not in self._stopped_now]
            self._drop([e.key for e in older if not self._still_stopped(e)], "no longer stopped")
        except KubeError as e:
            log.warning("could not prune the record of stopped objects: %s", e)

    def recorded(self, namespace: str | None) -> list[StoppedObject]:
        """The record's objects (in ``namespace``); none, with a warning, where it may not be read."""
        try:
            record, _ = self._read()
        except ForbiddenError as e:
            log.warning(
                "cannot read ConfigMap %s/%s (%s): restoring only what carries gpu-reaper's annotations",
                self.namespace,
                names.STATE_CONFIGMAP,
                e,
            )
            return []
        return [o for o in record.objects.values() if namespace is None or o.namespace == namespace]

    def forget(self, keys: Collection[str]) -> None:
        """Drop restored objects from the record; a failure only leaves entries restore skips later."""
        if not keys:
            return  # nothing settled: the record is not even read
        try:
            record, _ = self._read()
            self._drop([k for k in keys if k in record.objects], "restored")
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

    def _still_stopped(self, entry: StoppedObject) -> bool:
        kind = self.kind_of(entry)
        if kind is None:
            return False
        obj = self.kube.get_optional(kind, entry.namespace, entry.name)
        return obj is not None and marked(kind, obj)

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
