"""Findings + cluster snapshot + policy + now → a plan: actions with reasons, and every skip with its reason.

Pure: no I/O, no clock (``now`` comes in), no Kubernetes objects (plain snapshot data). The order of
the checks below is the documented order of the safety rules (docs/reaper.md, "Safety rules").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from common.model import Finding, FindingsReport, TimeWindow, WorkloadRef
from common.timeutil import format_duration, parse_time, rfc3339
from reaper import names
from reaper.cluster import ClusterSnapshot, Namespace, Node, Workload
from reaper.policy import SCALABLE_KINDS, Action, Policy, Rule, glob_match
from reaper.state import Confirmation, ReaperState

HOURS_PER_DAY = 24.0


class SkipReason(StrEnum):
    """Why a finding led to no action. Stable identifiers: they appear in logs, metrics and tests."""

    INSUFFICIENT_DATA = "insufficient_data"
    PROTECTED_NAMESPACE = "protected_namespace"
    NO_RULE = "no_rule"
    EXCLUDED_BY_POLICY = "excluded_by_policy"
    EXCLUDED_BY_ANNOTATION = "excluded_by_annotation"
    NOT_FOUND = "not_found"
    ALREADY_DONE = "already_done"
    NOT_A_GPU_NODE = "not_a_gpu_node"
    CREATION_GRACE = "creation_grace"
    RESTORE_GRACE = "restore_grace"
    AUTOSCALED = "autoscaled"
    GITOPS_MANAGED = "gitops_managed"
    DUPLICATE = "duplicate"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    NOT_HELD_LONG_ENOUGH = "not_held_long_enough"
    ACTION_CAP = "action_cap"
    CORDON_CAP = "cordon_cap"

    @property
    def tells_owner(self) -> bool:
        """Skips the owner should hear about: something will happen soon, or they must act themselves."""
        return self in _OWNER_SKIPS


_OWNER_SKIPS = frozenset(
    {
        SkipReason.AUTOSCALED,
        SkipReason.GITOPS_MANAGED,
        SkipReason.AWAITING_CONFIRMATION,
        SkipReason.NOT_HELD_LONG_ENOUGH,
        SkipReason.ACTION_CAP,
        SkipReason.CORDON_CAP,
    }
)


@dataclass(frozen=True)
class PlannedAction:
    action: Action
    target: WorkloadRef
    finding: Finding
    rule: str
    reason: str
    channel: str | None = None
    gpu_count: int = 0
    replicas: int | None = None  # current replicas: what scale_to_zero records as the original
    resource_version: str = ""  # the version the plan was made from (optimistic concurrency)
    flags: tuple[str, ...] = ()  # e.g. GitOps ownership that would undo the action
    confirmations: int = 1
    gpu_hours_per_day: float = 0.0
    cost_per_day: float | None = None

    @property
    def key(self) -> str:
        return self.target.key()


@dataclass(frozen=True)
class Skip:
    target: WorkloadRef
    reason: SkipReason
    detail: str
    finding: Finding | None = None
    action: Action | None = None  # what the matching rule asked for, when one matched
    rule: str | None = None
    channel: str | None = None
    flags: tuple[str, ...] = ()
    gpu_hours_per_day: float = 0.0
    cost_per_day: float | None = None


@dataclass(frozen=True)
class Plan:
    now: datetime
    window: TimeWindow
    findings: tuple[Finding, ...]
    actions: tuple[PlannedAction, ...] = ()
    skips: tuple[Skip, ...] = ()
    next_state: ReaperState = field(default_factory=ReaperState)
    blocked: str | None = None  # why nothing at all may be done (stale data)


# --- helpers ------------------------------------------------------------------------------------------


def _fmt(delta: timedelta) -> str:
    return format_duration(delta) if delta >= timedelta(seconds=1) else "0s"


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in names.TRUE_VALUES


def describe_finding(finding: Finding) -> str:
    """One short line: what was seen, on how many GPUs, for how long, with the utilization numbers."""
    what = finding.kind.value.replace("_", " ")
    gpus = finding.gpu_count
    text = f"{what} on {gpus} GPU{'s' if gpus != 1 else ''} for {_fmt(finding.window.duration)}"
    mean = finding.evidence.get("mean_util_percent")
    peak = finding.evidence.get("max_util_percent")
    if isinstance(mean, int | float) and isinstance(peak, int | float):
        text += f" (mean {mean:.1f} %, max {peak:.1f} % utilization)"
    return text


def opt_out(annotations: Mapping[str, str], now: datetime, what: str) -> str | None:
    """Why the owner's annotations exclude this object right now, or None (the executor re-checks it)."""
    if _truthy(annotations.get(names.EXCLUDE)):
        return f"{what} is annotated {names.EXCLUDE}=true"
    until = annotations.get(names.EXCLUDE_UNTIL)
    if until is None:
        return None
    try:
        deadline = parse_time(until)
    except ValueError:
        # The owner meant to opt out; a typo in the date must not turn that into a scale-down.
        return f"{what} has an unreadable {names.EXCLUDE_UNTIL}={until!r}; treated as excluded"
    if deadline > now:
        return f"{what} is annotated {names.EXCLUDE_UNTIL}={rfc3339(deadline)}"
    return None


def _gitops_owner(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    if names.ARGO_CD_TRACKING_ANNOTATION in annotations:
        app = annotations[names.ARGO_CD_TRACKING_ANNOTATION].split(":", 1)[0]
        return f"Argo CD application {app}"
    if names.ARGO_CD_INSTANCE_LABEL in labels:
        return f"Argo CD application {labels[names.ARGO_CD_INSTANCE_LABEL]}"
    if names.FLUX_KUSTOMIZE_LABEL in labels:
        ns = labels.get("kustomize.toolkit.fluxcd.io/namespace", "")
        return f"Flux Kustomization {ns + '/' if ns else ''}{labels[names.FLUX_KUSTOMIZE_LABEL]}"
    if names.FLUX_HELM_LABEL in labels:
        ns = labels.get("helm.toolkit.fluxcd.io/namespace", "")
        return f"Flux HelmRelease {ns + '/' if ns else ''}{labels[names.FLUX_HELM_LABEL]}"
    return None


def route_channel(namespace: Namespace | None, ns_name: str, rule: Rule | None, policy: Policy) -> str | None:
    """Owner channel: the namespace's annotation, then the rule's channel, then routes, then the default."""
    if namespace is not None:
        annotated = namespace.annotations.get(names.SLACK_CHANNEL, "").strip()
        if annotated:
            return annotated
    if rule is not None and rule.channel:
        return rule.channel
    if ns_name:
        for route in policy.slack.routes:
            if glob_match(ns_name, route.namespaces):
                return route.channel
    return policy.slack.channel


def _matches(rule: Rule, finding: Finding, labels: Mapping[str, str] | None) -> bool:
    m = rule.match
    ref = finding.workload
    kinds = rule.kinds
    if finding.kind not in m.finding_kinds:
        return False
    if kinds is not None and ref.kind not in kinds:
        return False
    if ref.kind != "Node" and not glob_match(ref.namespace, m.namespaces):
        return False
    if m.label_selector is not None and (labels is None or not m.label_selector.matches(labels)):
        return False
    return not (
        finding.confidence < m.min_confidence
        or finding.wasted_gpu_hours < m.min_wasted_gpu_hours
        or finding.gpu_count < m.min_gpus
    )


# --- the planner -------------------------------------------------------------------------------------


@dataclass
class _Budget:
    actions_left: int
    cordons_left: int


def plan(report: FindingsReport, snapshot: ClusterSnapshot, policy: Policy, now: datetime) -> Plan:
    """The plan for one run. ``now`` must be an aware datetime; nothing here reads a clock."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    age = now - report.window.end
    if age > policy.safety.max_data_age:
        return Plan(
            now=now,
            window=report.window,
            findings=report.findings,
            next_state=snapshot.state,
            blocked=(
                f"findings end at {rfc3339(report.window.end)}, {_fmt(age)} before now: older than "
                f"safety.maxDataAge ({_fmt(policy.safety.max_data_age)}); nothing is done on stale data"
            ),
        )
    planner = _Planner(snapshot, policy, now)
    # Biggest waste first, so the per-run caps keep the actions that reclaim the most.
    ordered = sorted(report.findings, key=lambda f: (-f.wasted_gpu_hours, -f.gpu_count, f.workload.key()))
    for finding in ordered:
        planner.consider(finding)
    return Plan(
        now=now,
        window=report.window,
        findings=report.findings,
        actions=tuple(planner.actions),
        skips=tuple(planner.skips),
        next_state=ReaperState(updated_at=now, entries=planner.next_entries),
    )


class _Planner:
    def __init__(self, snapshot: ClusterSnapshot, policy: Policy, now: datetime) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.now = now
        safety = policy.safety
        self.budget = _Budget(
            actions_left=safety.max_actions_per_run,
            # Rounded down: on a small cluster a 10 % share allows no cordon at all, by design.
            cordons_left=math.floor(safety.max_cordon_share * snapshot.gpu_node_count + 1e-9),
        )
        self.actions: list[PlannedAction] = []
        self.skips: list[Skip] = []
        self.next_entries: dict[str, Confirmation] = {}
        self.targets: set[str] = set()

    def _money(self, gpus: int) -> tuple[float, float | None]:
        per_day = gpus * HOURS_PER_DAY
        price = self.policy.price
        return per_day, (per_day * price if price is not None else None)

    def skip(
        self,
        finding: Finding,
        reason: SkipReason,
        detail: str,
        rule: Rule | None = None,
        channel: str | None = None,
        flags: tuple[str, ...] = (),
    ) -> None:
        per_day, cost = self._money(finding.gpu_count)
        self.skips.append(
            Skip(
                target=finding.workload,
                reason=reason,
                detail=detail,
                finding=finding,
                action=rule.action if rule else None,
                rule=rule.name if rule else None,
                channel=channel,
                flags=flags,
                gpu_hours_per_day=per_day,
                cost_per_day=cost,
            )
        )

    def consider(self, finding: Finding) -> None:
        policy, snap, now = self.policy, self.snapshot, self.now
        ref = finding.workload
        is_node = ref.kind == "Node"

        # 1. Never act on too little data.
        if not finding.kind.actionable:
            self.skip(
                finding, SkipReason.INSUFFICIENT_DATA, "too little data to judge (coverage below threshold)"
            )
            return
        # 2. Namespaces that are never touched, whatever the rules say.
        if not is_node and ref.namespace in policy.protected_namespaces:
            self.skip(finding, SkipReason.PROTECTED_NAMESPACE, f"namespace {ref.namespace} is never touched")
            return

        node: Node | None = snap.nodes.get(ref.name) if is_node else None
        workload: Workload | None = snap.workload(ref) if ref.kind in SCALABLE_KINDS else None
        namespace = None if is_node else snap.namespaces.get(ref.namespace)
        obj = node if is_node else workload
        labels = obj.labels if obj is not None else None
        annotations = obj.annotations if obj is not None else {}

        # 3. The first rule that matches decides.
        rule = next((r for r in policy.rules if _matches(r, finding, labels)), None)
        if rule is None:
            self.skip(finding, SkipReason.NO_RULE, "no policy rule matches this finding")
            return
        channel = route_channel(namespace, ref.namespace, rule, policy)

        # 4. The policy's global exclusions.
        excluded = self._policy_exclusion(ref, labels)
        if excluded:
            self.skip(finding, SkipReason.EXCLUDED_BY_POLICY, excluded, rule)
            return
        # 5. The owner's opt-out annotations, on the object or on its namespace.
        what = "node" if is_node else ref.kind.lower()
        opted_out = opt_out(annotations, now, what) or (
            opt_out(namespace.annotations, now, f"namespace {ref.namespace}") if namespace else None
        )
        if opted_out:
            self.skip(finding, SkipReason.EXCLUDED_BY_ANNOTATION, opted_out, rule)
            return

        destructive = rule.action.destructive
        # 6. A destructive action needs the live object, and something left to do.
        if destructive and obj is None:
            self.skip(
                finding, SkipReason.NOT_FOUND, f"{ref.kind} {ref.name} is not in the cluster snapshot", rule
            )
            return
        if node is not None and destructive and node.gpus == 0:
            self.skip(finding, SkipReason.NOT_A_GPU_NODE, "the node advertises no GPUs", rule)
            return
        if destructive and (
            (workload is not None and workload.replicas == 0) or (node is not None and node.unschedulable)
        ):
            done = "already cordoned" if is_node else "already at 0 replicas"
            self.skip(finding, SkipReason.ALREADY_DONE, done, rule)
            return

        # 7. Grace after creation (model loading, new nodes) and after a restore (resets the idle clock).
        created = obj.created if obj is not None else None
        if created is not None and now - created < policy.grace.after_creation:
            self.skip(
                finding,
                SkipReason.CREATION_GRACE,
                f"created {_fmt(now - created)} ago; "
                f"grace after creation is {_fmt(policy.grace.after_creation)}",
                rule,
            )
            return
        restored = annotations.get(names.RESTORED_AT)
        if restored is not None:
            try:
                restored_at: datetime | None = parse_time(restored)
            except ValueError:
                restored_at = None
            if restored_at is None or now - restored_at < policy.grace.after_restore:
                ago = f"restored {_fmt(now - restored_at)} ago" if restored_at else "restore time unreadable"
                self.skip(
                    finding,
                    SkipReason.RESTORE_GRACE,
                    f"{ago}; grace after restore is {_fmt(policy.grace.after_restore)}",
                    rule,
                )
                return

        flags: tuple[str, ...] = ()
        if rule.action is Action.SCALE_TO_ZERO:
            # 8. Never scale behind an autoscaler's back: it would fight us, or silently stay disabled.
            scalers = snap.autoscalers_for(ref)
            if scalers:
                self.skip(
                    finding,
                    SkipReason.AUTOSCALED,
                    f"scaled by {', '.join(a.describe() for a in scalers)}; lower its minimum replicas "
                    "(KEDA: minReplicaCount 0) instead",
                    rule,
                    channel,
                )
                return
            # 9. GitOps would undo a scale-down on its next sync: flag it, or skip it if the policy says so.
            owner = _gitops_owner(workload.labels, workload.annotations) if workload else None
            if owner:
                flags = (f"managed by {owner}: its next sync may undo this",)
                if policy.safety.gitops == "skip":
                    self.skip(finding, SkipReason.GITOPS_MANAGED, flags[0], rule, channel, flags)
                    return

        # 10. One action per target per run.
        if ref.key() in self.targets:
            self.skip(finding, SkipReason.DUPLICATE, "another finding already planned an action here", rule)
            return

        confirmations = 1
        if destructive:
            # 11. Confirmed on N consecutive runs, and held for the rule's `for:` duration.
            required = policy.safety.consecutive_runs
            streak = snap.state.streak(ref.key(), rule.action.value, now, policy.safety.confirmation_max_gap)
            confirmations = (streak.count + 1) if streak else 1
            since = min(streak.since, finding.window.start) if streak else finding.window.start
            self.next_entries[ref.key()] = Confirmation(
                action=rule.action.value, count=confirmations, since=since, last_seen=now
            )
            if confirmations < required:
                self.skip(
                    finding,
                    SkipReason.AWAITING_CONFIRMATION,
                    f"seen on {confirmations} of {required} consecutive runs; would {rule.action.value} "
                    f"after {required - confirmations} more",
                    rule,
                    channel,
                    flags,
                )
                return
            held = now - since
            if held < rule.match.for_:
                self.skip(
                    finding,
                    SkipReason.NOT_HELD_LONG_ENOUGH,
                    f"held for {_fmt(held)}; rule {rule.name} wants {_fmt(rule.match.for_)}",
                    rule,
                    channel,
                    flags,
                )
                return
            # 12. Blast radius: per-run caps.
            if self.budget.actions_left <= 0:
                self.skip(
                    finding,
                    SkipReason.ACTION_CAP,
                    f"safety.maxActionsPerRun ({policy.safety.max_actions_per_run}) reached this run",
                    rule,
                    channel,
                    flags,
                )
                return
            if rule.action is Action.CORDON and self.budget.cordons_left <= 0:
                self.skip(
                    finding,
                    SkipReason.CORDON_CAP,
                    f"safety.maxCordonShare ({policy.safety.max_cordon_share:.0%} of "
                    f"{snap.gpu_node_count} GPU nodes) reached this run",
                    rule,
                    channel,
                    flags,
                )
                return
            self.budget.actions_left -= 1
            if rule.action is Action.CORDON:
                self.budget.cordons_left -= 1

        gpus = finding.gpu_count or (node.gpus if node is not None else 0)
        per_day, cost = self._money(gpus)
        self.targets.add(ref.key())
        self.actions.append(
            PlannedAction(
                action=rule.action,
                target=ref,
                finding=finding,
                rule=rule.name,
                reason=f"{describe_finding(finding)} (rule {rule.name})",
                channel=channel,
                gpu_count=gpus,
                replicas=workload.replicas if workload is not None else None,
                resource_version=obj.resource_version if obj is not None else "",
                flags=flags,
                confirmations=confirmations,
                gpu_hours_per_day=per_day if destructive else 0.0,
                cost_per_day=cost if destructive else None,
            )
        )

    def _policy_exclusion(self, ref: WorkloadRef, labels: Mapping[str, str] | None) -> str | None:
        ex = self.policy.exclude
        if ref.kind == "Node":
            hit = glob_match(ref.name, ex.nodes)
            if hit:
                return f"node matches exclude.nodes {hit!r}"
        else:
            hit = glob_match(ref.namespace, ex.namespaces)
            if hit:
                return f"namespace matches exclude.namespaces {hit!r}"
            hit = glob_match(f"{ref.namespace}/{ref.name}", ex.workloads)
            if hit:
                return f"workload matches exclude.workloads {hit!r}"
        if ex.label_selector is not None and labels is not None and ex.label_selector.matches(labels):
            return f"labels match exclude.labelSelector ({ex.label_selector.describe()})"
        return None


def summarize(items: Iterable[PlannedAction | Skip]) -> tuple[float, float | None]:
    """Total GPU-hours per day and cost per day of some plan items."""
    hours, cost, priced = 0.0, 0.0, False
    for item in items:
        hours += item.gpu_hours_per_day
        if item.cost_per_day is not None:
            cost += item.cost_per_day
            priced = True
    return hours, (cost if priced else None)
