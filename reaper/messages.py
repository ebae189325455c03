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

from common.model import Finding, FindingKind, LowUtilizationEvidence, StalledJobEvidence, WorkloadRef
from common.timeutil import rfc3339
from reaper import names
from reaper.actuators import verbs
from reaper.kinds import KINDS, WORKLOAD_KINDS
from reaper.notice import snooze_until
from reaper.outcomes import ActionResult, Outcome
from reaper.planner import Plan, PlannedAction, Skip, SkipReason, summarize
from reaper.policy import Action, Policy, RunMode
from reaper.state import Notice
from reaper.wording import outcome_verb

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


def _verb(a: PlannedAction, outcome: Outcome) -> str:
    """The action's name, as the terminal plan and the HTML report say it, capitalised."""
    verb = outcome_verb(a, outcome)
    return (":x: " if outcome is Outcome.FAILED else "") + verb[0].upper() + verb[1:]


def _action_line(result: ActionResult, currency: str) -> str:
    a = result.action
    verb = _verb(a, result.outcome)
    line = f"*{verb}* {_target(a.target, a.root)}: {escape(a.reason)}"
    if a.action is Action.NOTIFY:
        if a.finding.recommendation:
            line += f"\n_{escape(a.finding.recommendation)}_"
        evidence = a.finding.evidence
        sized = evidence.right_size if isinstance(evidence, LowUtilizationEvidence) else None
        if sized is not None:
            line += f"\n{escape(sized.line(currency))}"
        if isinstance(evidence, StalledJobEvidence) and evidence.hung:
            line += "\n:rotating_light: *Hung*: every GPU waits in a collective; the job will never finish."
        return line
    line += f" · {_money(a.gpu_hours_per_day, a.cost_per_day, currency)}"
    if a.pending_gpus is not None:  # ``when: demand``: the pending work it makes room for
        line += f"\n:hourglass: For pending GPU work (`pending_gpus={a.pending_gpus}`): {escape(a.demand)}"
    if result.wake is not None:  # ``wake: keda-http``: what the first request does now
        line += f"\n:alarm_clock: *Wake on request*: {escape(result.wake.sentence())}"
    elif a.wake is not None and result.outcome is not Outcome.FAILED:
        line += f"\n:alarm_clock: *Wake on request* (`wake: {escape(a.wake)}`)"
    if a.action is Action.CORDON:
        line += " once the node is removed"  # a cordoned node still costs until it is gone
    if result.write and result.outcome in (Outcome.APPLIED, Outcome.DRY_RUN):
        # The very change the write sends (or, in a dry-run, would send).
        line += f"\n{'Writes' if result.outcome is Outcome.DRY_RUN else 'Wrote'} `{escape(result.write)}`"
    if result.outcome in (Outcome.FAILED, Outcome.SKIPPED) and result.detail:
        line += f"\n_{escape(result.detail)}_"
    for flag in a.flags:
        line += f"\n:warning: {escape(flag)}"
    return line


def _skip_line(skip: Skip) -> str:
    wanted = f" (rule wants: {verbs(skip.action, (skip.root or skip.target).kind)[0]})" if skip.action else ""
    line = f"• {_target(skip.target, skip.root)}{wanted}: {escape(skip.detail)}"
    for flag in skip.flags:
        if flag not in skip.detail:
            line += f" :warning: {escape(flag)}"
    return line


def text_sections(lines: Sequence[str]) -> list[dict[str, Any]]:
    """Pack lines into as few section blocks as Slack's text limit allows."""
    blocks: list[dict[str, Any]] = []
    chunk = ""
    for line in lines:
        line = line[:_MAX_TEXT]
        if chunk and len(chunk) + 1 + len(line) > _MAX_TEXT:
            blocks.append({"type": "section", "text": mrkdwn_text(chunk)})
            chunk = ""
        chunk = f"{chunk}\n{line}" if chunk else line
    if chunk:
        blocks.append({"type": "section", "text": mrkdwn_text(chunk)})
    return blocks


def mrkdwn_text(text: str) -> dict[str, Any]:
    """A mrkdwn text object Slack takes as written: no channel name, mention or URL linked of its
    own accord (workload names and reasons come from tenants' objects; ``escape`` covers the rest)."""
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _opt_out_command(ref: WorkloadRef) -> str:
    """How the owner of ``ref`` opts it out: on the object itself, where the reaper reads it.

    Never the whole namespace for one workload: that would silence every other workload in it.
    """
    if ref.kind == "Node":
        return f"`kubectl annotate node {ref.name} {names.EXCLUDE}=true`"
    info = KINDS.get(ref.kind)
    if info is not None and (info in WORKLOAD_KINDS or info.scale):
        # kubectl's name for the kind; the resource's full name where two groups share a kind.
        kind = info.api_kind.lower() if info.api_kind == info.name else f"{info.plural}.{info.group}"
        return f"`kubectl annotate {kind} {ref.name} -n {ref.namespace} {names.EXCLUDE}=true`"
    # Not read from the cluster (a bare Pod, a CronJob): never stopped, so it only ever gets
    # heads-ups, and the policy is where they are silenced.
    return (
        f"{ref.kind} `{ref.namespace}/{ref.name}` is never stopped, only mentioned: to silence it, add "
        f"`{ref.namespace}/{ref.name}` to the policy's `exclude.workloads`"
    )


def _kubectl_object(kind: str, namespace: str, name: str) -> str:
    """How kubectl names an object the reaper acts on: ``node NAME``, ``TYPE NAME -n NS``."""
    if kind == "Node":
        return f"node {name}"
    info = KINDS.get(kind)
    if info is None:
        return f"{kind.lower()} {name} -n {namespace}"
    # kubectl's name for the kind; the resource's full name where two groups share a kind.
    what = info.api_kind.lower() if info.api_kind == info.name else f"{info.plural}.{info.group}"
    return f"{what} {name} -n {namespace}"


def notice_commands(notice: Notice) -> tuple[str, str]:
    """The one command that snoozes a notice (``exclude-until`` a week on; the run after it ends gives
    a new notice if the workload is still idle), and the one that opts the workload out for good."""
    target = _kubectl_object(notice.kind, notice.namespace, notice.name)
    until = rfc3339(snooze_until(notice))
    return (
        f"kubectl annotate --overwrite {target} {names.EXCLUDE_UNTIL}={until}",
        f"kubectl annotate --overwrite {target} {names.EXCLUDE}=true",
    )


def notice_event(notice: Notice, skip: Skip) -> str:
    """The Event a notice records on the object: what would happen, when, and the two commands."""
    snooze, opt_out = notice_commands(notice)
    what = verbs(Action(notice.action), notice.kind)[0]
    seen = skip.finding.kind.value.replace("_", " ") if skip.finding is not None else "idle"
    return (
        f"gpu-reaper notice: would {what} after {rfc3339(notice.act_after)} (rule {notice.rule}) if "
        f"still {seen}. Snooze: {snooze}. Opt out: {opt_out}"
    )


def _notice_line(skip: Skip, notice: Notice, dry_run: bool) -> str:
    snooze, opt_out = notice_commands(notice)
    what = verbs(Action(notice.action), notice.kind)[0]
    given = "Would give notice" if dry_run else "Notice"
    return (
        f"*{given}* {_target(skip.target, skip.root)}: would {what} after {rfc3339(notice.act_after)} "
        f"if still idle (rule {escape(notice.rule)})\n"
        f"Snooze: `{escape(snooze)}`\nOpt out: `{escape(opt_out)}`"
    )


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
    lines += [f"• {escape(_opt_out_command(ref))}" for ref in seen.values()]  # once per workload
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
    stops: tuple[int, int]  # (done or would be done, planned)
    cordons: tuple[int, int]

    @property
    def targets(self) -> int:
        return self.stops[0] + self.cordons[0]

    @classmethod
    def of(cls, results: Iterable[ActionResult]) -> _Totals:
        planned = [r for r in results if r.action.action.destructive]
        done = [r.action for r in planned if r.outcome in (Outcome.APPLIED, Outcome.DRY_RUN)]
        stops = [a for a in done if a.action is not Action.CORDON]
        cordons = [a for a in done if a.action is Action.CORDON]
        cordons_planned = sum(r.action.action is Action.CORDON for r in planned)
        return cls(
            *summarize(stops),
            *summarize(cordons),
            stops=(len(stops), len(planned) - cordons_planned),
            cordons=(len(cordons), cordons_planned),
        )

    def headline(self, dry_run: bool) -> str:
        """Stops reclaim GPUs; a cordon reclaims nothing until the node is drained and removed."""
        parts = []
        done, planned = self.stops
        if planned:
            workloads = "workload" if planned == 1 else "workloads"
            parts.append(
                f"{'would reclaim' if dry_run else 'reclaimed'} GPUs from {done} of {planned} {workloads}"
            )
        done, planned = self.cordons
        if planned:
            nodes = "node" if planned == 1 else "nodes"
            parts.append(f"{'would cordon' if dry_run else 'cordoned'} {done} of {planned} {nodes}")
        if not parts:
            return "nothing to reclaim" if dry_run else "nothing reclaimed"
        return "; ".join(parts)

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
    title = f"GPU reaper{' (dry-run)' if dry_run else ''}: {totals.headline(dry_run)}"
    if cluster is not None:
        title = f"[{cluster}] {title}"
    reclaimed = totals.describe(dry_run, currency)
    summary = (
        f"*Window* {rfc3339(plan.window.start)} → {rfc3339(plan.window.end)}"
        f" · *Findings* {len(plan.findings)}{_unknowns(plan.findings)}"
        f" · *Mode* {mode.value}\n{reclaimed}"
    )
    if fleet is not None:
        # Each channel sees its own part; the whole fleet's figure says how big the run was.
        summary += f"\n*Fleet-wide* ({fleet.targets} targets): {fleet.describe(dry_run, currency)}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": mrkdwn_text(summary)},
    ]
    shown_results = [*changed, *notices][:limit]
    lines = [_action_line(r, currency) for r in shown_results]
    shown = len(lines)
    shown_skips: list[Skip] = []
    if lines:
        blocks.append({"type": "divider"})
        blocks.extend(text_sections(lines))
    total = len(results) + len(skips)
    given = [s for s in skips if s.reason is SkipReason.NOTICED and s.target.key() in plan.next_state.notices]
    skips = [s for s in skips if s not in given]
    if given and shown < limit:
        # Notices first among what is held back: they name the time and the commands to answer them.
        shown_notices = given[: limit - shown]
        shown += len(shown_notices)
        heading = "*Notices* (dry-run: none given)" if dry_run else "*Notices*"
        standing = plan.next_state.notices
        notice_lines = [_notice_line(s, standing[s.target.key()], dry_run) for s in shown_notices]
        blocks.append({"type": "divider"})
        blocks.extend(text_sections([heading, *notice_lines]))
        skips = [*skips, *given[len(shown_notices) :]]
    if skips and shown < limit:
        shown_skips = skips[: limit - shown]
        shown += len(shown_skips)
        blocks.append({"type": "divider"})
        blocks.extend(text_sections(["*Held back*", *(_skip_line(s) for s in shown_skips)]))
    hidden = total - shown
    if hidden > 0:
        blocks.append(
            {
                "type": "context",
                "elements": [mrkdwn_text(f"…and {hidden} more in the run's log")],
            }
        )
    refs = [r.action.written for r in shown_results] + [s.root or s.target for s in shown_skips]
    restorable = [
        r.action.written
        for r in shown_results
        if r.outcome is Outcome.APPLIED and r.action.action.destructive
    ]
    if refs:
        for chunk in text_sections(_how_to(refs, restorable, cluster).splitlines()):
            blocks.append({"type": "context", "elements": [chunk["text"]]})
    # The header is plain text; the notification's fallback text is read as mrkdwn.
    return Message(channel=channel, text=f"{escape(title)}. {reclaimed}.", blocks=tuple(blocks[:50]))


def _unknowns(findings: Sequence[Finding]) -> str:
    """How many findings are ``unknown`` (too little data: never acted on), by the same name everywhere."""
    unknown = sum(f.kind is FindingKind.UNKNOWN for f in findings)
    return f" ({unknown} unknown: too little data to judge, never acted on)" if unknown else ""


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
