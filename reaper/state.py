"""The reaper's state: confirmation streaks, and the record of what it stopped.

Both live in a ConfigMap the reaper owns (the CronJob pod is ephemeral, so never in local files),
under two keys: how many consecutive runs saw each candidate for a destructive action
(``confirmations.json``), and every object a run stopped and no restore has brought back yet
(``stopped.json``).
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
    since: AwareDatetime  # start of the first window of the streak: how long the finding has held
    last_seen: AwareDatetime  # the run that last confirmed it


class ReaperState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = STATE_VERSION
    updated_at: AwareDatetime | None = None
    entries: Mapping[str, Confirmation] = Field(default_factory=dict)

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
                }
                for key, e in sorted(self.entries.items())
            },
        }
        return json.dumps(doc, indent=None, separators=(",", ":"))

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
            # Losing streaks only delays actions (safe direction); a corrupt ConfigMap must not block runs.
            return cls()


STOP_RECORD_VERSION = 1


class StoppedObject(BaseModel):
    """One object a run stopped, as its API spells it: enough for ``restore --all`` to find it again,
    whatever its kind (a custom kind scaled through ``/scale`` carries no mark the reaper can list)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    api_version: str
    kind: str  # ``kind`` as the object spells it
    namespace: str
    name: str
    stopped_at: AwareDatetime

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
    """What the reaper stopped and has not restored yet (ConfigMap key ``stopped.json``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = STOP_RECORD_VERSION
    objects: Mapping[str, StoppedObject] = Field(default_factory=dict)

    def with_object(self, stopped: StoppedObject) -> StopRecord:
        return StopRecord(objects={**self.objects, stopped.key: stopped})

    def without(self, keys: Iterable[str]) -> StopRecord:
        gone = set(keys)
        return StopRecord(objects={k: v for k, v in self.objects.items() if k not in gone})

    def to_json(self) -> str:
        doc = {
            "version": self.version,
            "objects": {
                key: {
                    "api_version": o.api_version,
                    "kind": o.kind,
                    "namespace": o.namespace,
                    "name": o.name,
                    "stopped_at": rfc3339(o.stopped_at),
                }
                for key, o in sorted(self.objects.items())
            },
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
            if not isinstance(doc, dict) or doc.get("version") != STOP_RECORD_VERSION:
                raise ValueError(f"version {doc.get('version') if isinstance(doc, dict) else None!r}")
            parsed = cls.model_validate(doc)
            return cls(objects={o.key: o for o in parsed.objects.values()})  # keys as this version makes them
        except (ValueError, ValidationError) as e:
            log.warning("the record of stopped objects is unreadable (%s): restore finds marked ones only", e)
            return cls()
