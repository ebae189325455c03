"""An object's metadata as the reaper reads it, and whether the reaper's stop mark is on it.

The mark is an annotation on the kinds the reaper stops by a write to the object itself; for the
kinds it scales through ``/scale`` alone (Deployment, StatefulSet, ReplicaSet) it is the object's
entry in the record of stops, kept in the reaper's ConfigMap (reaper.state).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reaper.actuators import RecordedScale, actuator_of
from reaper.cluster import workload_from_object
from reaper.kinds import KINDS
from reaper.state import StopRecord, stop_key


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def meta(obj: Mapping[str, Any], key: str) -> str:
    return str((obj.get("metadata") or {}).get(key) or "")


def record_key(kind: str, namespace: str, name: str) -> str:
    """An object's key in the record of stops, from the reaper's name for its kind."""
    info = KINDS[kind]
    return stop_key(info.group, info.api_kind, namespace, name)


def marked(kind: str, obj: Mapping[str, Any]) -> bool:
    """The reaper's annotation is on this object (its actuator's mark)."""
    actuator = actuator_of(kind)
    return actuator is not None and actuator.marker in annotations_of(obj)


def stopped_by_reaper(kind: str, obj: Mapping[str, Any], record: StopRecord) -> bool:
    """The reaper stopped this object and nothing has restored it: its entry in the record (with the
    object's uid) for the kinds scaled through ``/scale``, an earlier release's annotation on one
    still at 0 replicas, or the annotation of any other kind."""
    actuator = actuator_of(kind)
    if isinstance(actuator, RecordedScale):
        entry = record.objects.get(record_key(kind, meta(obj, "namespace"), meta(obj, "name")))
        if entry is not None and entry.original_replicas is not None and entry.names_object(meta(obj, "uid")):
            return True
        return actuator.legacy_marked(workload_from_object(kind, obj))
    return marked(kind, obj)
