"""Slack messages (Block Kit) for a run: one per owner channel. Pure formatting; reaper/slack.py sends them.

A message says what was found, what was done (or would be done in dry-run), the GPU-hours and
money reclaimed, and how to opt out and how to restore. Where the run acts on a named cluster, the
headline starts with it (``[prod-eu-1] GPU reaper: …``) and the opt-out and restore commands say
which cluster's context they need: clusters built from one GitOps repository share their names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.model import Finding, WorkloadRef
from common.timeutil import rfc3339
from reaper import names
from reaper.actuators import ACTUATORS
from reaper.executor import ActionResult, Outcome
from reaper.planner import Plan, PlannedAction, Skip, summarize
from reaper.policy import Action, Policy, RunMode

_MAX_TEXT = 2900  # Slack's section text limit is 3000 characters


@dataclass(frozen=True)
class Message:
    channel: str | None  # None: the webhook's own channel
    text: str  # notification fallback
    blocks: tuple[Mapping[str, Any], ...]


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _target(ref: WorkloadRef, root: WorkloadRef | None = None) -> str:
    """The object acted on; under a controller, the root first and the child holding the GPUs after it."""
    if ref.kind == "Node":
        return f"`node/{escape(ref.name)}`"
    if root is not None:
        return (
            f"`{escape(root.namespace)}/{escape(root.name)}` ({escape(root.kind)}; GPUs held by "
            f"{escape(ref.kind)} {escape(ref.namespace)}/{escape(ref.name)})"
        )
    return f"`{escape(ref.namespace)}/{escape(ref.name)}` ({escape(ref.kind)})"


def _money(hours: float, cost: float | None, currency: str) -> str:
    text = f"{hours:,.0f} GPU-hours/day"
    return text + (f" (≈ {cost:,.0f} {currency}/day)" if cost is not None else "")


# The native stop's verb per actuator: (done, would, failed).
_STOP_VERBS = {
    "scale to zero": ("Scaled to zero", "Would scale to zero", ":x: Failed to scale to zero"),
    "stop": ("Stopped", "Would stop", ":x: Failed to stop"),
    "suspend": ("Suspended", "Would suspend", ":x: Failed to suspend"),
}


def _verb(a: PlannedAction, outcome: Outcome) -> str:
    if a.action is not Action.SCALE_TO_ZERO or outcome is Outcome.SKIPPED:
        return _VERB[(a.action, outcome)]
    actuator = ACTUATORS.get(a.written.kind)
    done, would, failed = _STOP_VERBS[actuator.verb if actuator else "scale to zero"]
    return {Outcome.APPLIED: done, Outcome.DRY_RUN: would, Outcome.FAILED: failed}[outcome]


_VERB = {
    (Action.SCALE_TO_ZERO, Outcome.SKIPPED): "Left alone (changed since planning)",
    (Action.CORDON, Outcome.APPLIED): "Cordoned",
    (Action.CORDON, Outcome.DRY_RUN): "Would cordon",
    (Action.CORDON, Outcome.FAILED): ":x: Failed to cordon",
    (Action.CORDON, Outcome.SKIPPED): "Left alone (changed since planning)",
}


def _action_line(result: ActionResult, currency: str) -> str:
    a = result.action
    if a.action is Action.NOTIFY:
        line = f"*Heads-up* {_target(a.target, a.root)}: {escape(a.reason)}"
        if a.finding.recommendation:
            line += f"\n_{escape(a.finding.recommendation)}_"
        return line
    verb = _verb(a, result.outcome)
    line = f"*{verb}* {_target(a.target, a.root)}: {escape(a.reason)}"
    if a.action is Action.SCALE_TO_ZERO and a.replicas:
        line += f" · {a.replicas} → 0 replicas"
    line += f" · {_money(a.gpu_hours_per_day, a.cost_per_day, currency)}"
    if a.action is Action.CORDON:
        line += " once the node is removed"  # a cordoned node still costs until it is gone
    if result.outcome in (Outcome.FAILED, Outcome.SKIPPED) and result.detail:
        line += f"\n_{escape(result.detail)}_"
    for flag in a.flags:
        line += f"\n:warning: {escape(flag)}"
    return line


def _skip_line(skip: Skip) -> str:
    wanted = f" ({skip.action.value})" if skip.action else ""
    line = f"• {_target(skip.target, skip.root)}{wanted}: {escape(skip.detail)}"
    for flag in skip.flags:
        if flag not in skip.detail:
            line += f" :warning: {escape(flag)}"
    return line


def _sections(lines: Sequence[str]) -> list[dict[str, Any]]:
    """Pack lines into as few section blocks as Slack's text limit allows."""
    blocks: list[dict[str, Any]] = []
    chunk = ""
    for line in lines:
        line = line[:_MAX_TEXT]
        if chunk and len(chunk) + 1 + len(line) > _MAX_TEXT:
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": chunk}})
            chunk = ""
        chunk = f"{chunk}\n{line}" if chunk else line
    if chunk:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": chunk}})
    return blocks


def _opt_out_command(ref: WorkloadRef) -> str:
    """How the owner of ``ref`` opts it out: on the object the reaper reads, else on its namespace."""
    if ref.kind == "Node":
        return f"`kubectl annotate node {ref.name} {names.EXCLUDE}=true`"
    if ref.kind in ACTUATORS:
        return f"`kubectl annotate {ref.kind.lower()} {ref.name} -n {ref.namespace} {names.EXCLUDE}=true`"
    # Jobs and Pods are not read one by one from the cluster: their opt-out goes on the namespace.
    return f"`kubectl annotate namespace {ref.namespace} {names.EXCLUDE}=true` (for {ref.kind} {ref.name})"


def _how_to(
    refs: Iterable[WorkloadRef], restorable: Iterable[WorkloadRef], cluster: str | None = None
) -> str:
    """One opt-out line per workload in the message, and (after apply) one restore line per stop."""
    seen: dict[str, WorkloadRef] = {}
    for ref in refs:
        seen.setdefault(ref.key(), ref)
    # The commands act on whichever cluster the kube context reaches: say which one they are for.
    where = f" in cluster `{escape(cluster)}`" if cluster is not None else ""
    lines = [
        f"Opt out{where} (`{names.EXCLUDE_UNTIL}=<RFC 3339 time>` for a while; on the namespace for all "
        "its workloads):"
    ]
    lines += [f"• {escape(_opt_out_command(ref))}" for ref in seen.values()]
    stopped = {r.key(): r for r in restorable if r.kind != "Node"}
    lines += [f"Restore{where}: `gpu-reaper restore {r.namespace}/{r.name}`" for r in stopped.values()]
    if any(r.kind == "Node" for r in restorable):
        lines.append(f"Restore{where}: `gpu-reaper restore --all` uncordons the nodes it cordoned")
    return "\n".join(lines)


def message_cluster(cluster: str | None, findings: Iterable[Finding]) -> str | None:
    """The cluster a run's messages name: the configured one, else the one cluster its findings name."""
    if cluster is not None:
        return cluster
    named = {f.cluster for f in findings if f.cluster is not None}
    return named.pop() if len(named) == 1 else None


@dataclass(frozen=True)
class _Totals:
    """What a set of results frees: stops free GPUs now, a cordon only once the node is removed."""

    freed_hours: float
    freed_cost: float | None
    cordoned_hours: float
    cordoned_cost: float | None
    targets: int

    @classmethod
    def of(cls, results: Iterable[ActionResult]) -> _Totals:
        done = [
            r.action
            for r in results
            if r.action.action.destructive and r.outcome in (Outcome.APPLIED, Outcome.DRY_RUN)
        ]
        stops = [a for a in done if a.action is not Action.CORDON]
        cordons = [a for a in done if a.action is Action.CORDON]
        return cls(*summarize(stops), *summarize(cordons), targets=len(done))

    def describe(self, dry_run: bool, currency: str) -> str:
        parts = []
        if self.freed_hours or not self.cordoned_hours:
            freed = _money(self.freed_hours, self.freed_cost, currency)
            parts.append(("Reclaimable " if dry_run else "Reclaimed ") + freed)
        if self.cordoned_hours:
            cordoned = _money(self.cordoned_hours, self.cordoned_cost, currency)
            parts.append(
                f"{'cordons would hold' if dry_run else 'cordoned nodes hold'} {cordoned}, saved only "
                "once the node is drained and removed"
            )
        text = "; ".join(parts)
        return text[0].upper() + text[1:]


def build_messages(
    plan: Plan,
    results: Sequence[ActionResult],
    policy: Policy,
    *,
    mode: RunMode,
    single: bool = False,
    cluster: str | None = None,
) -> list[Message]:
    """One message per channel (``single``: one message with everything, for an incoming webhook).

    ``cluster``: the cluster the run acts on, named in every message (default: the one cluster the
    plan's findings name, if they name one)."""
    cluster = message_cluster(cluster, plan.findings)
    owner_skips = [s for s in plan.skips if s.reason.tells_owner]
    by_channel: dict[str | None, tuple[list[ActionResult], list[Skip]]] = {}
    for r in results:
        channel = None if single else r.action.channel
        by_channel.setdefault(channel, ([], []))[0].append(r)
    for s in owner_skips:
        channel = None if single else s.channel
        by_channel.setdefault(channel, ([], []))[1].append(s)
    if not single:
        by_channel.pop(None, None)  # nowhere to send: no default channel, no route, no annotation
    if not by_channel and policy.slack.notify_when_idle and (single or policy.slack.channel):
        by_channel[None if single else policy.slack.channel] = ([], [])
    fleet = _Totals.of(results) if len(by_channel) > 1 else None
    return [
        _message(channel, items, skips, plan, policy, mode, fleet, cluster)
        for channel, (items, skips) in sorted(by_channel.items(), key=lambda kv: kv[0] or "")
    ]


def _message(
    channel: str | None,
    results: list[ActionResult],
    skips: list[Skip],
    plan: Plan,
    policy: Policy,
    mode: RunMode,
    fleet: _Totals | None = None,
    cluster: str | None = None,
) -> Message:
    limit = policy.slack.max_items_per_message
    currency = policy.currency
    changed = [r for r in results if r.action.action.destructive]
    notices = [r for r in results if not r.action.action.destructive]
    totals = _Totals.of(results)
    dry_run = not mode.writes
    if dry_run:
        what = (
            f"would reclaim {totals.targets} of {len(changed)} targets" if changed else "nothing to reclaim"
        )
        title = f"GPU reaper (dry-run): {what}"
    else:
        what = f"reclaimed {totals.targets} of {len(changed)} targets" if changed else "nothing reclaimed"
        title = f"GPU reaper: {what}"
    if cluster is not None:
        title = f"[{cluster}] {title}"
    reclaimed = totals.describe(dry_run, currency)
    summary = (
        f"*Window* {rfc3339(plan.window.start)} → {rfc3339(plan.window.end)}"
        f" · *Findings* {len(plan.findings)}"
        f" · *Mode* {mode.value}\n{reclaimed}"
    )
    if fleet is not None:
        # Each channel sees its own part; the whole fleet's figure says how big the run was.
        summary += f"\n*Fleet-wide* ({fleet.targets} targets): {fleet.describe(dry_run, currency)}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": summary}},
    ]
    shown_results = [*changed, *notices][:limit]
    lines = [_action_line(r, currency) for r in shown_results]
    shown = len(lines)
    shown_skips: list[Skip] = []
    if lines:
        blocks.append({"type": "divider"})
        blocks.extend(_sections(lines))
    if skips and shown < limit:
        shown_skips = skips[: limit - shown]
        shown += len(shown_skips)
        blocks.append({"type": "divider"})
        blocks.extend(_sections(["*Held back*", *(_skip_line(s) for s in shown_skips)]))
    hidden = len(results) + len(skips) - shown
    if hidden > 0:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"…and {hidden} more in the run's log"}],
            }
        )
    refs = [r.action.written for r in shown_results] + [s.root or s.target for s in shown_skips]
    restorable = [
        r.action.written
        for r in shown_results
        if r.outcome is Outcome.APPLIED and r.action.action.destructive
    ]
    if refs:
        for chunk in _sections(_how_to(refs, restorable, cluster).splitlines()):
            blocks.append({"type": "context", "elements": [chunk["text"]]})
    # The header is plain text; the notification's fallback text is read as mrkdwn.
    return Message(channel=channel, text=f"{escape(title)}. {reclaimed}.", blocks=tuple(blocks[:50]))


def preview(messages: Sequence[Message]) -> str:
    """A terminal rendering of the messages (``gpu-reaper demo``)."""
    out = []
    for m in messages:
        out.append(f"── Slack message to {m.channel or '(webhook channel)'} " + "─" * 20)
        for block in m.blocks:
            kind = block["type"]
            if kind == "header":
                out.append(block["text"]["text"].upper())
            elif kind == "section":
                out.append(block["text"]["text"])
            elif kind == "divider":
                out.append("-" * 40)
            elif kind == "context":
                out.extend(e["text"] for e in block["elements"])
    return "\n".join(out)
