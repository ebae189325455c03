"""``gpu-reaper status``: where each workload stands with the reaper, from its state and the objects.

One record per object: **noticed** (a notice stands: the time the reaper may act, and the command
that snoozes it), **stopped** (in the record of stops: the command that restores it), **snoozed**
(a future ``gpu-reaper/exclude-until``), **opted-out** (``gpu-reaper/exclude: "true"``) and
**restored** (restored within the grace after restore). Where several hold, the one the owner most
needs to act on is shown: stopped, then snoozed or opted out (a snoozed notice is dropped by the next
run), then noticed, then restored. :func:`statuses` is pure; :func:`read_status` reads the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from common.timeutil import parse_time, rfc3339
from reaper import names
from reaper.cluster import ClusterSnapshot, read_snapshot
from reaper.kube_api import KubeApi
from reaper.messages import notice_commands
from reaper.state import ReaperState, StopRecord

# Which state is shown when several hold for one object (lower first).
_PRECEDENCE = {"stopped": 0, "snoozed": 1, "opted-out": 1, "noticed": 2, "restored": 3}


@dataclass(frozen=True)
class Status:
    """One object and where it stands."""

    kind: str
    namespace: str
    name: str
    state: str  # noticed | stopped | snoozed | opted-out | restored
    since: datetime | None = None  # noticed, stopped, restored at
    until: datetime | None = None  # noticed: may act after; snoozed: excluded until
    rule: str = ""
    command: str = ""  # what the owner runs next: snooze a notice, restore a stop

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.kind, self.name)

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state,
            "since": rfc3339(self.since) if self.since else None,
            "until": rfc3339(self.until) if self.until else None,
            "rule": self.rule or None,
            "command": self.command or None,
        }


def _restore_command(namespace: str, name: str, kind: str) -> str:
    return "gpu-reaper restore --node " + name if kind == "Node" else f"gpu-reaper restore {namespace}/{name}"


def _from_key(key: str) -> tuple[str, str, str]:
    """(namespace, kind, name) of a record key (``Kind.group ns/name``)."""
    kind_group, _, where = key.partition(" ")
    namespace, _, name = where.rpartition("/")
    return namespace, kind_group.split(".", 1)[0], name


def _exclusion(annotations: Mapping[str, str], now: datetime) -> tuple[str, datetime | None] | None:
    """The owners' exclusion as the planner reads it (reaper.planner.opt_out), or None."""
    if annotations.get(names.EXCLUDE, "").strip().lower() in names.TRUE_VALUES:
        return "opted-out", None
    until = annotations.get(names.EXCLUDE_UNTIL)
    if until is None:
        return None
    try:
        when = parse_time(until)
    except ValueError:
        return "opted-out", None  # unreadable: the reaper treats it as excluded
    return ("snoozed", when) if when > now else None


def statuses(
    state: ReaperState, record: StopRecord, snapshot: ClusterSnapshot, now: datetime
) -> list[Status]:
    """Every object the reaper has noticed, stopped, or restored, and every one its owners excluded."""
    found: list[Status] = []
    for notice in state.notices.values():
        snooze, _ = notice_commands(notice)
        found.append(
            Status(
                notice.kind,
                notice.namespace,
                notice.name,
                "noticed",
                since=notice.noticed_at,
                until=notice.act_after,
                rule=notice.rule,
                command=snooze,
            )
        )
    for entry in record.objects.values():
        found.append(
            Status(
                entry.kind,
                entry.namespace,
                entry.name,
                "stopped",
                since=entry.stopped_at,
                command=_restore_command(entry.namespace, entry.name, entry.kind),
            )
        )
    for key, at in record.restored.items():
        namespace, kind, name = _from_key(key)
        found.append(Status(kind, namespace, name, "restored", since=at))
    objects: Iterable[tuple[str, str, str, Mapping[str, str]]] = [
        *((w.kind, w.namespace, w.name, w.annotations) for w in snapshot.workloads.values()),
        *(("Node", "", n.name, n.annotations) for n in snapshot.nodes.values()),
    ]
    for kind, namespace, name, marks in objects:
        excluded = _exclusion(marks, now)
        if excluded is not None:
            found.append(Status(kind, namespace, name, excluded[0], until=excluded[1]))
    best: dict[tuple[str, str, str], Status] = {}
    for s in found:
        held = best.get(s.key)
        if held is None or _PRECEDENCE[s.state] < _PRECEDENCE[held.state]:
            best[s.key] = s
    return sorted(best.values(), key=lambda s: s.key)


def read_status(reader: KubeApi, reaper_namespace: str, now: datetime) -> list[Status]:
    """The statuses from the state ConfigMap and the objects (reads only)."""
    snapshot = read_snapshot(reader, reaper_namespace)
    cm = reader.get_optional("ConfigMap", reaper_namespace, names.STATE_CONFIGMAP)
    record = StopRecord.from_json(((cm or {}).get("data") or {}).get(names.STOPPED_KEY))
    return statuses(snapshot.state, record, snapshot, now)


def status_table(rows: list[Status]) -> str:
    """kubectl's layout: upper-case headers, columns three spaces apart, ``<none>`` for nothing."""
    header = ("NAMESPACE", "KIND", "NAME", "STATE", "SINCE", "UNTIL", "RULE", "NEXT")
    if not rows:
        return "No workload is noticed, stopped, snoozed or restored."
    cells = [header] + [
        (
            s.namespace or "<none>",
            s.kind,
            s.name,
            s.state,
            rfc3339(s.since) if s.since else "<none>",
            rfc3339(s.until) if s.until else "<none>",
            s.rule or "<none>",
            s.command or "<none>",
        )
        for s in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header) - 1)]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "   " + row[-1]
        for row in cells
    )


def status_json(rows: list[Status], now: datetime) -> str:
    return json.dumps({"as_of": rfc3339(now), "items": [s.to_json() for s in rows]}, indent=2)
