"""What a planned action or a restore came to, and the two ways one ends before any write."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from reaper.planner import PlannedAction
from reaper.wake import Handed


class Outcome(StrEnum):
    APPLIED = "applied"
    DRY_RUN = "dry_run"
    SKIPPED = "skipped"  # the object changed since planning so that the action no longer applies
    FAILED = "failed"
    NOT_SENT = "not_sent"  # a notice whose message did not go out (no Slack configured, or it failed)


@dataclass(frozen=True)
class ActionResult:
    action: PlannedAction
    outcome: Outcome
    detail: str = ""
    # What --apply writes (dry-run) or wrote, by object and field: "Deployment a/b: replicas 2 → 0".
    # Made from the very change the write sends; empty for a notice and where no write was formed.
    write: str = ""
    # ``wake: keda-http``: what was (or would be) handed to the KEDA HTTP add-on (reaper.wake).
    wake: Handed | None = None


@dataclass(frozen=True)
class RestoreResult:
    target: str
    outcome: Outcome
    detail: str = ""


class Changed(Exception):
    """The object changed since planning so that the action no longer applies."""


class Refused(Exception):
    """The reaper cannot act on this object here (nothing was changed): a failure, not an API outage."""
