"""The weekly digest's messages: where each namespace's week goes, and what its owners read. Pure.

A namespace's week (its held, used, idle and unknown GPU-hours and what they cost, from the
analyzer's chargeback by namespace) goes where the reaper's own messages about it go: the
namespace's ``gpu-reaper/slack-channel`` when the policy accepts it, else the policy's routes, else
its default channel (``reaper.planner.route_channel``). Unlike a run's messages, the digest never
sends a namespace's week elsewhere when its owners named a channel the policy refuses: it is their
figures, for the channel they chose or for none, and the digest says why it skipped them.

One message per channel, with every namespace routed there; a webhook (one channel) gets one
message with every namespace. A namespace that held no GPU in the week is left out: a digest of
zeros tells nobody anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.model import FindingKind, TimeWindow, WorkloadRef
from common.timeutil import rfc3339
from reaper.cluster import Namespace
from reaper.messages import Message, escape, mrkdwn_text, text_sections
from reaper.planner import refused_channels, route_channel
from reaper.policy import Policy

TOP_IDLE = 5  # idle workloads named per message


@dataclass(frozen=True)
class IdleWorkload:
    """A workload that made up part of its namespace's idle cost over the week."""

    workload: WorkloadRef
    idle_gpu_hours: float
    idle_cost: float | None
    held_gpu_hours: float
    finding_kind: FindingKind | None = None


@dataclass(frozen=True)
class NamespaceWeek:
    """One namespace's GPU-hours over the week: ``used``, ``idle`` and ``unknown`` are parts of ``held``."""

    namespace: str
    held_gpu_hours: float
    used_gpu_hours: float
    idle_gpu_hours: float
    unknown_gpu_hours: float
    cost: float | None
    idle_cost: float | None
    top_idle: tuple[IdleWorkload, ...] = ()


@dataclass(frozen=True)
class Week:
    """The chargeback the digest reads: every namespace that held GPUs, and the fleet's totals."""

    window: TimeWindow
    currency: str
    namespaces: tuple[NamespaceWeek, ...]
    fleet_gpu_hours: float
    unallocated_gpu_hours: float
    unallocated_cost: float | None = None
    partial_reason: str | None = None  # the TSDB held less than the week: what it was computed over


@dataclass(frozen=True)
class Route:
    """One channel's digest: the namespaces routed there (None: the webhook's own channel)."""

    channel: str | None
    namespaces: tuple[NamespaceWeek, ...]


@dataclass(frozen=True)
class Skipped:
    """A namespace whose week is not posted, and why."""

    namespace: str
    reason: str


def routes(
    week: Week, namespaces: Mapping[str, Namespace], policy: Policy, *, single: bool = False
) -> tuple[list[Route], list[Skipped]]:
    """Each channel's namespaces (sorted by channel), and the namespaces that go nowhere, with why.

    ``namespaces``: the cluster's Namespace objects by name, for their annotations; one the digest
    could not read is routed by the policy alone. ``single``: everything to the webhook's channel."""
    by_channel: dict[str | None, list[NamespaceWeek]] = {}
    skipped: list[Skipped] = []
    for ns_week in week.namespaces:
        if ns_week.held_gpu_hours <= 0:
            continue
        ns = namespaces.get(ns_week.namespace)
        refused = refused_channels([ns], policy) if ns is not None else []
        if refused:
            (_, value, why) = refused[0]
            skipped.append(Skipped(ns_week.namespace, f"its channel {value!r} is refused: {why}"))
            continue
        channel = None if single else route_channel(ns, ns_week.namespace, None, policy)
        if channel is None and not single:
            skipped.append(
                Skipped(ns_week.namespace, "no channel: no annotation, no route and no slack.channel")
            )
            continue
        by_channel.setdefault(channel, []).append(ns_week)
    out = [Route(c, tuple(ws)) for c, ws in sorted(by_channel.items(), key=lambda kv: kv[0] or "")]
    return out, skipped


def _hours(value: float) -> str:
    return f"{value:,.1f}" if value < 10 else f"{value:,.0f}"


def _cost(cost: float | None, currency: str) -> str:
    return f" (≈ {cost:,.0f} {currency})" if cost is not None else ""


def _sum(values: Iterable[float | None]) -> float | None:
    """A total of costs; None when none had a price (a missing price is not a cost of zero)."""
    priced = [v for v in values if v is not None]
    return sum(priced) if priced else None


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f} %" if whole > 0 else "–"


def _namespace_line(w: NamespaceWeek, currency: str) -> str:
    line = (
        f"*{escape(w.namespace)}*: held {_hours(w.held_gpu_hours)} GPU-hours{_cost(w.cost, currency)}"
        f" · used {_hours(w.used_gpu_hours)} ({_share(w.used_gpu_hours, w.held_gpu_hours)})"
        f" · idle {_hours(w.idle_gpu_hours)}{_cost(w.idle_cost, currency)}"
    )
    if w.unknown_gpu_hours > 0:
        line += f" · no data {_hours(w.unknown_gpu_hours)}"
    return line


def _idle_line(item: IdleWorkload, currency: str) -> str:
    ref = item.workload
    line = (
        f"• `{escape(ref.namespace)}/{escape(ref.name)}` ({escape(ref.kind)}): "
        f"idle {_hours(item.idle_gpu_hours)} of {_hours(item.held_gpu_hours)} GPU-hours held"
        f"{_cost(item.idle_cost, currency)}"
    )
    if item.finding_kind is not None:
        line += f" · the analyzer finds it {item.finding_kind.value.replace('_', ' ')}"
    return line


def _top_idle(namespaces: Sequence[NamespaceWeek]) -> list[IdleWorkload]:
    items = [i for w in namespaces for i in w.top_idle if i.idle_gpu_hours > 0]
    return sorted(items, key=lambda i: (-(i.idle_cost or 0.0), -i.idle_gpu_hours, i.workload.key()))[
        :TOP_IDLE
    ]


def digest_message(route: Route, week: Week, cluster: str | None = None) -> Message:
    """One channel's week: its namespaces' totals, each namespace, and its idlest workloads."""
    currency = week.currency
    ws = route.namespaces
    held = sum(w.held_gpu_hours for w in ws)
    used = sum(w.used_gpu_hours for w in ws)
    idle = sum(w.idle_gpu_hours for w in ws)
    unknown = sum(w.unknown_gpu_hours for w in ws)
    idle_cost = _sum(w.idle_cost for w in ws)
    who = escape(ws[0].namespace) if len(ws) == 1 else f"{len(ws)} namespaces"
    title = f"GPU week for {who}: {_hours(held)} GPU-hours held, {_share(used, held)} used"
    if idle_cost is not None:
        title += f", idle ≈ {idle_cost:,.0f} {currency}"
    if cluster is not None:
        title = f"[{cluster}] {title}"
    summary = (
        f"*Week* {rfc3339(week.window.start)} → {rfc3339(week.window.end)}\n"
        f"*Held* {_hours(held)} GPU-hours{_cost(_sum(w.cost for w in ws), currency)}"
        f" · *used* {_hours(used)} · *idle* {_hours(idle)}{_cost(idle_cost, currency)}"
    )
    if unknown > 0:
        summary += f" · *no data* {_hours(unknown)} (held without samples: neither idle nor used)"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": mrkdwn_text(summary)},
    ]
    if week.partial_reason:
        blocks.append(
            {
                "type": "context",
                "elements": [mrkdwn_text(f":warning: Partial: {escape(week.partial_reason)}")],
            }
        )
    if len(ws) > 1:
        blocks.append({"type": "divider"})
        blocks.extend(text_sections([_namespace_line(w, currency) for w in ws]))
    top = _top_idle(ws)
    if top:
        blocks.append({"type": "divider"})
        blocks.extend(text_sections(["*Idlest workloads*", *(_idle_line(i, currency) for i in top)]))
    fleet = (
        f"Fleet: {_hours(week.fleet_gpu_hours)} GPU-hours, {_hours(week.unallocated_gpu_hours)} of them "
        f"requested by nobody{_cost(week.unallocated_cost, currency)}. Idle: held while the GPU stayed at "
        "or below the idle threshold; used: held time weighted by the GPU's activity."
    )
    blocks.append({"type": "context", "elements": [mrkdwn_text(fleet)]})
    return Message(channel=route.channel, text=escape(title), blocks=tuple(blocks[:50]))
