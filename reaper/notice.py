"""Notice first, then act: the one decision behind a rule's ``notice:``.

A rule with ``notice: 2h`` does not act on the first run that would: it gives the owners a notice
(Slack, an Event on the object, and where the reaper may write them, annotations) and acts only on
the first run after the period on which the finding still holds. Given the object the action would
write, the notice standing for it (the state ConfigMap's) and the run's clock, :func:`decide` says
which of three things happens:

* **post**: no notice stands, or the one standing is about another object (recreated: a new uid),
  another spec (redeployed), another rule or action: a new notice, its period starting now;
* **wait**: the notice stands and its period is not over on this run's clock, or this clock reads
  earlier than the notice was given (stepped back): never act early;
* **act**: the period is over: the action goes ahead, and the notice is used up.

The fourth outcome needs no decision: a notice is kept only while each run finds the workload still
waiting on it (reaper.planner's row 11c). A workload that turned busy again (no finding), was
snoozed or opted out (``gpu-reaper/exclude-until``, ``gpu-reaper/exclude``: row 5), or is held back
by any earlier row loses its notice, and a later notice starts a new period.

Pure: no clock (``now`` comes in), no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from common.durations import format_setting
from common.timeutil import rfc3339
from reaper.cluster import Node, Workload
from reaper.state import Notice

# How long the snooze command a notice suggests silences the workload: long enough to matter,
# short enough that a forgotten workload comes back to its owners' attention.
SNOOZE = timedelta(days=7)


class Step(StrEnum):
    POST = "post"
    WAIT = "wait"
    ACT = "act"


@dataclass(frozen=True)
class Decision:
    step: Step
    notice: Notice  # the notice that stands after this run, unless the finding is acted on
    detail: str  # why, in a sentence the plan, the log and Slack show


def decide(
    *,
    rule: str,
    action: str,
    written: Workload | Node,
    period: timedelta,
    stored: Notice | None,
    now: datetime,
    channel: str | None = None,
) -> Decision:
    """What this run does about a finding whose rule acts only after ``period`` of notice."""
    kind, namespace = ("Node", "") if isinstance(written, Node) else (written.kind, written.namespace)
    spec = written.spec_digest if isinstance(written, Workload) else ""
    dropped = _why_not_the_same(stored, rule, action, kind, namespace, written.name, written.uid, spec)
    if stored is None or dropped is not None:
        fresh = Notice(
            rule=rule,
            action=action,
            kind=kind,
            namespace=namespace,
            name=written.name,
            uid=written.uid,
            spec=spec,
            noticed_at=now,
            act_after=now + period,
            channel=channel,
        )
        before = f" (the notice of {rfc3339(stored.noticed_at)} no longer holds: {dropped})" if stored else ""
        return Decision(
            Step.POST,
            fresh,
            f"notice given now{before}; may act after {rfc3339(fresh.act_after)} "
            f"(notice: {format_setting(period)}) if the finding still holds",
        )
    # A policy that lengthened the period since counts too: never earlier than either says.
    due = max(stored.act_after, stored.noticed_at + period)
    if now < stored.noticed_at:
        return Decision(
            Step.WAIT,
            stored,
            f"this run's clock ({rfc3339(now)}) reads before the notice was given "
            f"({rfc3339(stored.noticed_at)}): nothing is done before {rfc3339(due)}",
        )
    if now < due:
        return Decision(
            Step.WAIT,
            stored,
            f"notice given {rfc3339(stored.noticed_at)}; may act after {rfc3339(due)} "
            "if the finding still holds",
        )
    return Decision(
        Step.ACT,
        stored,
        f"notice given {rfc3339(stored.noticed_at)}, its period ended {rfc3339(due)}",
    )


def _why_not_the_same(
    stored: Notice | None, rule: str, action: str, kind: str, namespace: str, name: str, uid: str, spec: str
) -> str | None:
    """Why the standing notice is not about what this run would act on (None: it is)."""
    if stored is None:
        return None
    if (stored.kind, stored.namespace, stored.name) != (kind, namespace, name):
        return f"the action now writes {kind} {namespace}/{name}"
    if stored.uid and uid and stored.uid != uid:
        return "the object was deleted and created again"
    if stored.spec != spec:
        return "the workload was redeployed (its spec changed)"
    if stored.rule != rule or stored.action != action:
        return f"rule {rule} ({action}) now decides, not rule {stored.rule} ({stored.action})"
    return None


def snooze_until(notice: Notice) -> datetime:
    """The time the notice's snooze command names: a week after the notice (to the second)."""
    return (notice.noticed_at + SNOOZE).replace(microsecond=0)


def shorter_than_runs(rules: tuple[tuple[str, timedelta | None], ...], interval: timedelta) -> str | None:
    """Why a ``notice:`` cannot be honoured by runs every ``interval`` (None: every one can).

    A notice shorter than the time between runs is over before the next run comes: the run after
    the notice acts at once, at a time the notice never named, and no run sees the owners' answer
    in between but that one.
    """
    for name, notice in rules:
        if notice is not None and notice < interval:
            return (
                f"rule {name}: notice {format_setting(notice)} is shorter than the run interval "
                f"{format_setting(interval)}: the next run would act as soon as it comes; make the "
                f"notice at least {format_setting(interval)}"
            )
    return None
