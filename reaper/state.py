"""The reaper's state: confirmation streaks, notices, and the record of what it stopped.

Both live in a ConfigMap the reaper owns (the CronJob pod is ephemeral, so never in local files),
under two keys: how many consecutive runs saw each candidate for a destructive action, and the
notices given to owners before acting (``confirmations.json``), and every object a run stopped and
no restore has brought back yet (``stopped.json``).
Pure data and arithmetic; the executor is what reads and writes the ConfigMap.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.model import AwareDatetime
from common.timeutil import rfc3339

log = logging.getLogger(__name__)

STATE_VERSION = 1


class Confirmation(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    action: str
    count: int = Field(ge=1)
    since: AwareDatetime  # start of the first window of the streak
    last_seen: AwareDatetime  # the run that last confirmed it
    # Time the streak's windows actually judged, and where the last of them ended: what a rule's
    # ``for:`` counts. Runs whose windows leave gaps between them judged less than ``now - since``.
    # None in state written before they were kept (windows then had to cover the time between runs,
    # so the streak is taken as judged from ``since`` to ``last_seen``).
    observed_seconds: float | None = Field(default=None, ge=0)
    observed_until: AwareDatetime | None = None

    @property
    def observed(self) -> timedelta:
        return timedelta(seconds=self.observed_seconds or 0.0)


class Notice(BaseModel):
    """A notice given to a workload's owners before a rule with ``notice:`` acts (reaper.notice).

    Kept with the streaks, so a restarted reaper, or another replica that takes the Lease, reads
    the same notice: it never gives a second one for the same period, nor acts before ``act_after``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str
    action: str
    # The object the action writes (the root controller, or the node): where the Event and the
    # annotations go, and what ``gpu-reaper status`` names.
    kind: str
    namespace: str
    name: str
    uid: str = ""  # a new object of the same name is not the one noticed
    spec: str = ""  # digest of its spec, replicas aside, when noticed: another one is a redeploy
    noticed_at: AwareDatetime
    act_after: AwareDatetime
    channel: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class ReaperState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = STATE_VERSION
    updated_at: AwareDatetime | None = None
    entries: Mapping[str, Confirmation] = Field(default_factory=dict)
    # The notices standing, by the finding's key (as the streaks): dropped by the first run that
    # does not find the workload still waiting on its notice (busy again, redeployed, snoozed).
    notices: Mapping[str, Notice] = Field(default_factory=dict)

    def streak(self, key: str, action: str, now: datetime, max_gap: timedelta) -> Confirmation | None:
        """The live streak for ``key``: same action, last confirmed no longer than ``max_gap`` ago."""
        entry = self.entries.get(key)
        if entry is None or entry.action != action:
            return None
        if now - entry.last_seen > max_gap or entry.last_seen > now:
            return None  # a gap (the reaper did not run, or the clock went back): start again
        return entry

    def to_json(self) -> str:
        doc = {
            "version": self.version,
            "updated_at": rfc3339(self.updated_at) if self.updated_at else None,
            "entries": {
                key: {
                    "action": e.action,
                    "count": e.count,
                    "since": rfc3339(e.since),
                    "last_seen": rfc3339(e.last_seen),
                    **(
                        {"observed_seconds": e.observed_seconds, "observed_until": rfc3339(e.observed_until)}
                        if e.observed_seconds is not None and e.observed_until is not None
                        else {}
                    ),
                }
                for key, e in sorted(self.entries.items())
            },
        }
        if self.notices:  # absent when none stand: state without notices reads as before
            doc["notices"] = {key: _notice_json(n) for key, n in sorted(self.notices.items())}
        return json.dumps(doc, indent=None, separators=(",", ":"))

    def without_notices(self, keys: Iterable[str]) -> ReaperState:
        gone = set(keys)
        if not gone & set(self.notices):
            return self
        kept = {k: n for k, n in self.notices.items() if k not in gone}
        return self.model_copy(update={"notices": kept})

    @classmethod
    def from_json(cls, text: str | None) -> ReaperState:
        """Parse the ConfigMap value; unreadable state restarts every streak rather than failing a run."""
        if not text:
            return cls()
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
                return cls()
            return cls.model_validate(doc)
        except (ValueError, ValidationError):
            # Losing streaks and notices only delays actions (a lost notice is given again, and its
            # period starts again): the safe direction. A corrupt ConfigMap must not block runs.
            return cls()


def _notice_json(n: Notice) -> dict[str, object]:
    doc: dict[str, object] = {
        "rule": n.rule,
        "action": n.action,
        "kind": n.kind,
        "namespace": n.namespace,
        "name": n.name,
        "uid": n.uid,
        "spec": n.spec,
        "noticed_at": rfc3339(n.noticed_at),
        "act_after": rfc3339(n.act_after),
    }
    if n.channel is not None:
        doc["channel"] = n.channel
    return doc


STOP_RECORD_VERSION = 2
_READABLE_STOP_RECORDS = (1, STOP_RECORD_VERSION)  # version 1 had no counts and no restores


class StoppedObject(BaseModel):
    """One object a run stopped, as its API spells it: enough for ``restore --all`` to find it again,
    whatever its kind (a custom kind scaled through ``/scale`` carries no mark the reaper can list).

    For the kinds scaled through ``/scale`` with no write to the object itself (Deployment,
    StatefulSet, ReplicaSet), this entry is the reaper's mark: the object's uid (a new object of the
    same name is not the one stopped), the replicas to restore and why it was stopped.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    api_version: str
    kind: str  # ``kind`` as the object spells it
    namespace: str
    name: str
    stopped_at: AwareDatetime
    uid: str = ""
    original_replicas: int | None = Field(default=None, ge=0)
    reason: str = ""

    def names_object(self, uid: str) -> bool:
        """Whether this entry is about the object of that uid (an entry without one is about any)."""
        return not self.uid or self.uid == uid

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def key(self) -> str:
        # By group, not version: a CRD that moves to a new version still names the same object.
        return stop_key(self.group, self.kind, self.namespace, self.name)


def stop_key(group: str, kind: str, namespace: str, name: str) -> str:
    return f"{kind}.{group or 'core'} {namespace}/{name}"


class StopRecord(BaseModel):
    """What the reaper stopped and has not restored yet, and when it last restored what (ConfigMap
    key ``stopped.json``): a restore starts the grace after restore, which the planner reads here
    for the objects the reaper does not annotate."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = STOP_RECORD_VERSION
    objects: Mapping[str, StoppedObject] = Field(default_factory=dict)
    restored: Mapping[str, AwareDatetime] = Field(default_factory=dict)  # by the same keys

    def with_object(self, stopped: StoppedObject) -> StopRecord:
        restored = {k: v for k, v in self.restored.items() if k != stopped.key}
        return StopRecord(objects={**self.objects, stopped.key: stopped}, restored=restored)

    def without(self, keys: Iterable[str], restored_at: datetime | None = None) -> StopRecord:
        """The record without ``keys``; with ``restored_at``, noted as restored then."""
        gone = set(keys)
        restored = dict(self.restored)
        if restored_at is not None:
            restored.update((k, restored_at) for k in gone)
        return StopRecord(objects={k: v for k, v in self.objects.items() if k not in gone}, restored=restored)

    def restored_before(self, cutoff: datetime) -> list[str]:
        """The restores older than ``cutoff``: their grace is over, and they need not be kept."""
        return [k for k, at in self.restored.items() if at < cutoff]

    def forgetting_restores(self, keys: Iterable[str]) -> StopRecord:
        gone = set(keys)
        return StopRecord(
            objects=self.objects, restored={k: v for k, v in self.restored.items() if k not in gone}
        )

    def to_json(self) -> str:
        doc = {
            "version": self.version,
            "objects": {key: _stopped_json(o) for key, o in sorted(self.objects.items())},
            "restored": {key: rfc3339(at) for key, at in sorted(self.restored.items())},
        }
        return json.dumps(doc, indent=None, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> StopRecord:
        """Parse the ConfigMap value. Unreadable, it is empty: ``restore --all`` then still finds
        every object that carries the reaper's annotations (all but custom kinds scaled via ``/scale``)."""
        if not text:
            return cls()
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("version") not in _READABLE_STOP_RECORDS:
                raise ValueError(f"version {doc.get('version') if isinstance(doc, dict) else None!r}")
            parsed = cls.model_validate({**doc, "version": STOP_RECORD_VERSION})
            # Keys as this version makes them.
            return cls(objects={o.key: o for o in parsed.objects.values()}, restored=parsed.restored)
        except (ValueError, ValidationError) as e:
            log.warning("the record of stopped objects is unreadable (%s): restore finds marked ones only", e)
            return cls()


def _stopped_json(o: StoppedObject) -> dict[str, object]:
    doc: dict[str, object] = {
        "api_version": o.api_version,
        "kind": o.kind,
        "namespace": o.namespace,
        "name": o.name,
        "stopped_at": rfc3339(o.stopped_at),
    }
    if o.uid:
        doc["uid"] = o.uid
    if o.original_replicas is not None:
        doc["original_replicas"] = o.original_replicas
    if o.reason:
        doc["reason"] = o.reason
    return doc
