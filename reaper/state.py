"""Confirmation state: how many consecutive runs saw each candidate for a destructive action.

It lives in a ConfigMap the reaper owns (the CronJob pod is ephemeral, so never in local files).
Pure data and arithmetic; the executor is what reads and writes the ConfigMap.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.model import AwareDatetime
from common.timeutil import rfc3339

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
