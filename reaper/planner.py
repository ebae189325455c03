"""Findings + cluster snapshot + policy + now → a plan: actions with reasons, and every skip with its reason.

Pure: no I/O, no clock (``now`` comes in), no Kubernetes objects (plain snapshot data). ``RULES`` is
the ordered list of small named checks that docs/reaper.md's "Safety rules" table documents: each
finding goes through them in order, and the first that holds it back names its skip reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from common.model import (
    Finding,
    FindingsReport,
    TimeWindow,
    UnknownEvidence,
    UtilizationEvidence,
    WorkloadRef,
)
from common.timeutil import format_duration, parse_time, rfc3339
from reaper import names
from reaper.actuators import actuator_for, notify_only, verbs
from reaper.cluster import ClusterSnapshot, Namespace, Node, OwnerRef, Workload
from reaper.policy import Action, Policy, Rule, glob_match
from reaper.state import Confirmation, ReaperState

HOURS_PER_DAY = 24.0


class SkipReason(StrEnum):
    """Why a finding led to no action. Stable identifiers: they appear in logs, metrics and tests."""

    UNKNOWN = "unknown"  # an ``unknown`` finding: too little data to judge (the finding kind's name)
    PROTECTED_NAMESPACE = "protected_namespace"
    NO_RULE = "no_rule"
    EXCLUDED_BY_POLICY = "excluded_by_policy"
    EXCLUDED_BY_ANNOTATION = "excluded_by_annotation"
    NOT_FOUND = "not_found"
    ALREADY_DONE = "already_done"
    NOT_A_GPU_NODE = "not_a_gpu_node"
    CONTROLLER_MANAGED = "controller_managed"
    ROLLOUT_IN_PROGRESS = "rollout_in_progress"
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
        SkipReason.CONTROLLER_MANAGED,
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
    target: WorkloadRef  # what the finding names: the object holding the GPUs
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
    root: WorkloadRef | None = None  # the controller above the target that is stopped instead of it

    @property
    def key(self) -> str:
        return self.target.key()

    @property
    def written(self) -> WorkloadRef:
        """The object the action writes to: the root controller, or the target when nothing controls it."""
        return self.root or self.target


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
    root: WorkloadRef | None = None  # the controller above the target, when one controls it


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
    """One short line: what was seen, on how many GPUs, with the utilization numbers.

    No duration: how long it must hold is the rule's ``for:`` (:func:`describe_rule`), counted
    across runs, not the one window this finding covers."""
    what = finding.kind.value.replace("_", " ")
    gpus = finding.gpu_count
    text = f"{what} on {gpus} GPU{'s' if gpus != 1 else ''}" if gpus else f"{what} (no GPU attributed)"
    utilization = _utilization(finding)
    if utilization is not None:
        text += f" (mean {utilization[0]:.1f} %, max {utilization[1]:.1f} % utilization)"
    return text


def describe_rule(rule: Rule) -> str:
    """``rule idle-endpoints, for: 12h``: the rule that decided, and how long it wants the finding held."""
    held = f", for: {_fmt(rule.match.for_)}" if rule.match.for_ else ""
    return f"rule {rule.name}{held}"


def _utilization(finding: Finding) -> tuple[float, float] | None:
    """Mean and peak utilization (percent) from the finding's evidence: the one place it is read."""
    evidence = finding.evidence
    if not isinstance(evidence, UtilizationEvidence):
        return None
    if evidence.mean_util_percent is None or evidence.max_util_percent is None:
        return None
    return evidence.mean_util_percent, evidence.max_util_percent


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


# --- the rules, in the order of the table in docs/reaper.md ("Safety rules") ------------------------


@dataclass
class Candidate:
    """One finding on its way through the rules, with what the rules have learned about it so far."""

    finding: Finding
    node: Node | None
    workload: Workload | None  # the object the finding names, when the snapshot lists its kind
    namespace: Namespace | None
    root: Workload | None = None  # the top listed controller of ``workload`` (itself when none)
    unlisted_owner: OwnerRef | None = None  # a controller above that the reaper does not list
    rule: Rule | None = None  # set by the first matching rule
    action: Action | None = None  # the rule's action, or notify where the root has no native stop
    note: str = ""  # why the action became a notification
    channel: str | None = None
    flags: tuple[str, ...] = ()  # e.g. GitOps ownership that would undo the action
    confirmations: int = 1
    since: datetime | None = None  # when the confirmation streak began

    @property
    def ref(self) -> WorkloadRef:
        return self.finding.workload

    @property
    def is_node(self) -> bool:
        return self.ref.kind == "Node"

    @property
    def obj(self) -> Node | Workload | None:
        return self.node if self.is_node else self.workload

    @property
    def labels(self) -> Mapping[str, str] | None:
        obj = self.obj
        return obj.labels if obj is not None else None

    @property
    def annotations(self) -> Mapping[str, str]:
        obj = self.obj
        return obj.annotations if obj is not None else {}

    @property
    def destructive(self) -> bool:
        return self.action is not None and self.action.destructive

    @property
    def objects(self) -> tuple[Workload, ...]:
        """The target and, when different, the root that controls it."""
        if self.workload is None:
            return ()
        if self.root is None or self.root is self.workload:
            return (self.workload,)
        return (self.workload, self.root)

    @property
    def root_ref(self) -> WorkloadRef | None:
        """The root, when it is not the target itself."""
        return self.root.ref if self.root is not None and self.root is not self.workload else None


@dataclass(frozen=True)
class Hold:
    """A rule's verdict that the finding goes no further."""

    reason: SkipReason
    detail: str


@dataclass
class _Budget:
    actions_left: int
    cordons_left: int


@dataclass
class Planning:
    """What the rules see of the run: inputs, plus what earlier findings used up or recorded."""

    snapshot: ClusterSnapshot
    policy: Policy
    now: datetime
    budget: _Budget
    targets: set[str] = field(default_factory=set)  # planned this run
    next_entries: dict[str, Confirmation] = field(default_factory=dict)


RuleCheck = Callable[[Candidate, Planning], Hold | None]


def too_little_data(c: Candidate, p: Planning) -> Hold | None:
    """1. Never act on too little data."""
    if not c.finding.kind.actionable:
        evidence = c.finding.evidence
        why = evidence.why if isinstance(evidence, UnknownEvidence) else "too little data"
        return Hold(SkipReason.UNKNOWN, f"{why}; never acted on")
    return None


def protected_namespace(c: Candidate, p: Planning) -> Hold | None:
    """2. Namespaces that are never touched, whatever the rules say."""
    if not c.is_node and c.ref.namespace in p.policy.protected_namespaces:
        return Hold(SkipReason.PROTECTED_NAMESPACE, f"namespace {c.ref.namespace} is never touched")
    return None


def first_matching_rule(c: Candidate, p: Planning) -> Hold | None:
    """3. The first rule that matches decides."""
    c.rule = next((r for r in p.policy.rules if _matches(r, c.finding, c.labels)), None)
    if c.rule is None:
        return Hold(SkipReason.NO_RULE, "no policy rule matches this finding")
    c.action = c.rule.action
    c.channel = route_channel(c.namespace, c.ref.namespace, c.rule, p.policy)
    return None


def policy_exclusion(c: Candidate, p: Planning) -> Hold | None:
    """4. The policy's global exclusions."""
    ex, ref, labels = p.policy.exclude, c.ref, c.labels
    hit: str | None
    if c.is_node:
        hit = glob_match(ref.name, ex.nodes)
        if hit:
            return Hold(SkipReason.EXCLUDED_BY_POLICY, f"node matches exclude.nodes {hit!r}")
    else:
        hit = glob_match(ref.namespace, ex.namespaces)
        if hit:
            return Hold(SkipReason.EXCLUDED_BY_POLICY, f"namespace matches exclude.namespaces {hit!r}")
        hit = glob_match(f"{ref.namespace}/{ref.name}", ex.workloads)
        if hit:
            return Hold(SkipReason.EXCLUDED_BY_POLICY, f"workload matches exclude.workloads {hit!r}")
    if ex.label_selector is not None and labels is not None and ex.label_selector.matches(labels):
        return Hold(
            SkipReason.EXCLUDED_BY_POLICY,
            f"labels match exclude.labelSelector ({ex.label_selector.describe()})",
        )
    return None


def owner_opt_out(c: Candidate, p: Planning) -> Hold | None:
    """5. The owner's opt-out annotations, on the object or on its namespace."""
    what = "node" if c.is_node else c.ref.kind.lower()
    opted_out = (
        opt_out(c.annotations, p.now, what)
        or (opt_out(c.root.annotations, p.now, c.root.describe()) if c.root_ref and c.root else None)
        or (opt_out(c.namespace.annotations, p.now, f"namespace {c.ref.namespace}") if c.namespace else None)
    )
    return Hold(SkipReason.EXCLUDED_BY_ANNOTATION, opted_out) if opted_out else None


def live_object(c: Candidate, p: Planning) -> Hold | None:
    """6a. A destructive action needs the live object."""
    if c.destructive and c.obj is None:
        return Hold(SkipReason.NOT_FOUND, f"{c.ref.kind} {c.ref.name} is not in the cluster snapshot")
    return None


def controller_managed(c: Candidate, p: Planning) -> Hold | None:
    """6b. A child is never written to: its root controller is stopped, or nothing is."""
    if not c.destructive or c.workload is None:
        return None
    holder = c.workload.describe()
    if c.unlisted_owner is not None:
        owner = c.unlisted_owner.describe(c.ref.namespace)
        return Hold(
            SkipReason.CONTROLLER_MANAGED,
            f"{holder} is controlled by {owner}, which gpu-reaper has no native stop for; "
            "its controller would undo a scale-down: stop it there",
        )
    root = c.root or c.workload
    if actuator_for(root) is None and notify_only(root) is None:
        via = f" (through {holder})" if root is not c.workload else ""
        return Hold(
            SkipReason.CONTROLLER_MANAGED,
            f"{root.describe()}{via} has no native stop gpu-reaper can use; stop it with its own controller",
        )
    return None


def native_stop(c: Candidate, p: Planning) -> Hold | None:
    """6c. A root without a safe native stop (RayService, Knative Service…) is reported, not stopped."""
    if not c.destructive or c.workload is None:
        return None
    root = c.root or c.workload
    if actuator_for(root) is None:
        c.note = notify_only(root) or ""
        c.action = Action.NOTIFY
    return None


def gpu_node(c: Candidate, p: Planning) -> Hold | None:
    """6d. A node is cordoned only if it has GPUs to reclaim."""
    if c.destructive and c.node is not None and c.node.gpus == 0:
        return Hold(SkipReason.NOT_A_GPU_NODE, "the node advertises no GPUs")
    return None


def something_left_to_do(c: Candidate, p: Planning) -> Hold | None:
    """6e. Nothing to do on what is already stopped, at zero or cordoned."""
    if not c.destructive:
        return None
    root = c.root or c.workload
    actuator = actuator_for(root) if root is not None else None
    if root is not None and actuator is not None:
        done = actuator.stopped(root)
        if done:
            return Hold(SkipReason.ALREADY_DONE, done if root is c.workload else f"{root.describe()} {done}")
    if c.node is not None and c.node.unschedulable:
        return Hold(SkipReason.ALREADY_DONE, "already cordoned")
    return None


def rollout_in_progress(c: Candidate, p: Planning) -> Hold | None:
    """7a. A rollout in progress: new pods are still loading their models."""
    for w in c.objects:
        if w.rollout is not None and w.rollout.in_progress:
            return Hold(
                SkipReason.ROLLOUT_IN_PROGRESS, f"{w.describe()} is rolling out: {w.rollout.describe()}"
            )
    return None


def creation_grace(c: Candidate, p: Planning) -> Hold | None:
    """7b. Grace after creation, a ``rollout restart`` or the last rollout progress (model loading)."""
    grace = p.policy.grace.after_creation
    if c.node is not None:
        starts = [("created", c.node.created)]
    else:
        starts = [
            (what, when)
            for w in c.objects
            for what, when in (
                ("created", w.created),
                (f"restarted ({names.RESTARTED_AT})", w.restarted_at),
                ("last rolled out", w.last_progress),
            )
        ]
    known = [(when, what) for what, when in starts if when is not None]
    if not known:
        return None
    latest, what = max(known, key=lambda t: t[0])
    if p.now - latest < grace:
        return Hold(
            SkipReason.CREATION_GRACE,
            f"{what} {_fmt(p.now - latest)} ago; grace after creation is {_fmt(grace)}",
        )
    return None


def restore_grace(c: Candidate, p: Planning) -> Hold | None:
    """7c. Grace after a restore: it resets the idle clock."""
    restored = c.annotations.get(names.RESTORED_AT)
    if restored is None:
        return None
    try:
        restored_at: datetime | None = parse_time(restored)
    except ValueError:
        restored_at = None
    grace = p.policy.grace.after_restore
    if restored_at is None or p.now - restored_at < grace:
        ago = f"restored {_fmt(p.now - restored_at)} ago" if restored_at else "restore time unreadable"
        return Hold(SkipReason.RESTORE_GRACE, f"{ago}; grace after restore is {_fmt(grace)}")
    return None


def autoscaled(c: Candidate, p: Planning) -> Hold | None:
    """8. Never scale behind an autoscaler's back: it would fight us, or silently stay disabled."""
    if c.action is not Action.SCALE_TO_ZERO:
        return None
    scalers = p.snapshot.autoscalers_for(c.ref) + (
        p.snapshot.autoscalers_for(c.root_ref) if c.root_ref is not None else ()
    )
    if scalers:
        return Hold(
            SkipReason.AUTOSCALED,
            f"scaled by {', '.join(a.describe() for a in scalers)}; lower its minimum replicas "
            "(KEDA: minReplicaCount 0) instead",
        )
    return None


def gitops_managed(c: Candidate, p: Planning) -> Hold | None:
    """9. GitOps would undo a scale-down on its next sync: flag it, or skip it if the policy says so."""
    if c.action is not Action.SCALE_TO_ZERO or c.workload is None:
        return None
    owner = next((o for w in reversed(c.objects) if (o := _gitops_owner(w.labels, w.annotations))), None)
    if owner is None:
        return None
    c.flags = (f"managed by {owner}: its next sync may undo this",)
    if p.policy.safety.gitops == "skip":
        return Hold(SkipReason.GITOPS_MANAGED, c.flags[0])
    return None


def one_action_per_target(c: Candidate, p: Planning) -> Hold | None:
    """10. One action per target per run (two findings under one root are one action)."""
    if _target_key(c) in p.targets:
        return Hold(SkipReason.DUPLICATE, "another finding already planned an action here")
    return None


def confirmed(c: Candidate, p: Planning) -> Hold | None:
    """11a. Confirmed on N consecutive runs (the streak is recorded either way)."""
    if c.action is None or not c.destructive:
        return None
    action = c.action.value
    safety = p.policy.safety
    streak = p.snapshot.state.streak(c.ref.key(), action, p.now, safety.confirmation_max_gap)
    c.confirmations = (streak.count + 1) if streak else 1
    c.since = min(streak.since, c.finding.window.start) if streak else c.finding.window.start
    p.next_entries[c.ref.key()] = Confirmation(
        action=action, count=c.confirmations, since=c.since, last_seen=p.now
    )
    required = safety.consecutive_runs
    if c.confirmations < required:
        return Hold(
            SkipReason.AWAITING_CONFIRMATION,
            f"seen on {c.confirmations} of {required} consecutive runs; would {_verb(c)} "
            f"after {required - c.confirmations} more",
        )
    return None


def _verb(c: Candidate) -> str:
    """The action's one name for this object (``scale to zero``, ``stop``, ``suspend``, ``cordon``)."""
    assert c.action is not None
    obj = c.root or c.workload
    return verbs(c.action, obj.kind if obj is not None else c.ref.kind)[0]


def held_long_enough(c: Candidate, p: Planning) -> Hold | None:
    """11b. Held for the rule's ``for:`` duration, counted across runs."""
    if c.rule is None or not c.destructive or c.since is None:
        return None
    held = p.now - c.since
    if held < c.rule.match.for_:
        return Hold(
            SkipReason.NOT_HELD_LONG_ENOUGH,
            f"held for {_fmt(held)}; {describe_rule(c.rule)}",
        )
    return None


def action_cap(c: Candidate, p: Planning) -> Hold | None:
    """12a. Blast radius: at most maxActionsPerRun destructive actions."""
    if c.destructive and p.budget.actions_left <= 0:
        return Hold(
            SkipReason.ACTION_CAP,
            f"safety.maxActionsPerRun ({p.policy.safety.max_actions_per_run}) reached this run",
        )
    return None


def cordon_cap(c: Candidate, p: Planning) -> Hold | None:
    """12b. Blast radius: at most maxCordonShare of the GPU nodes cordoned."""
    if c.action is Action.CORDON and p.budget.cordons_left <= 0:
        return Hold(
            SkipReason.CORDON_CAP,
            f"safety.maxCordonShare ({p.policy.safety.max_cordon_share:.0%} of "
            f"{p.snapshot.gpu_node_count} GPU nodes) reached this run",
        )
    return None


# The documented table, in order: the first rule that holds a finding back decides its skip reason.
RULES: tuple[RuleCheck, ...] = (
    too_little_data,
    protected_namespace,
    first_matching_rule,
    policy_exclusion,
    owner_opt_out,
    live_object,
    controller_managed,
    native_stop,
    gpu_node,
    something_left_to_do,
    rollout_in_progress,
    creation_grace,
    restore_grace,
    autoscaled,
    gitops_managed,
    one_action_per_target,
    confirmed,
    held_long_enough,
    action_cap,
    cordon_cap,
)


# --- the planner -------------------------------------------------------------------------------------


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
    planning = Planning(
        snapshot=snapshot,
        policy=policy,
        now=now,
        budget=_Budget(
            actions_left=policy.safety.max_actions_per_run,
            # Rounded down: on a small cluster a 10 % share allows no cordon at all, by design.
            cordons_left=math.floor(policy.safety.max_cordon_share * snapshot.gpu_node_count + 1e-9),
        ),
    )
    actions: list[PlannedAction] = []
    skips: list[Skip] = []
    # Biggest waste first, so the per-run caps keep the actions that reclaim the most.
    ordered = sorted(report.findings, key=lambda f: (-f.wasted_gpu_hours, -f.gpu_count, f.workload.key()))
    for finding in ordered:
        candidate = _candidate(finding, snapshot)
        hold = next((h for check in RULES if (h := check(candidate, planning)) is not None), None)
        if hold is not None:
            skips.append(_skip(candidate, hold, policy))
        else:
            actions.append(_action(candidate, planning))
    return Plan(
        now=now,
        window=report.window,
        findings=report.findings,
        actions=tuple(actions),
        skips=tuple(skips),
        next_state=ReaperState(updated_at=now, entries=planning.next_entries),
    )


def _candidate(finding: Finding, snapshot: ClusterSnapshot) -> Candidate:
    ref = finding.workload
    is_node = ref.kind == "Node"
    workload = None if is_node else snapshot.workload(ref)
    root, unlisted = workload, None
    if workload is not None:
        chain, unlisted = snapshot.controllers(workload)
        root = chain[-1] if chain else workload
    return Candidate(
        finding=finding,
        node=snapshot.nodes.get(ref.name) if is_node else None,
        workload=workload,
        namespace=None if is_node else snapshot.namespaces.get(ref.namespace),
        root=root,
        unlisted_owner=unlisted,
    )


def _target_key(c: Candidate) -> str:
    return (c.root_ref or c.ref).key()


def _money(gpus: float, policy: Policy) -> tuple[float, float | None]:
    per_day = gpus * HOURS_PER_DAY
    price = policy.price
    return per_day, (per_day * price if price is not None else None)


def _skip(c: Candidate, hold: Hold, policy: Policy) -> Skip:
    per_day, cost = _money(c.finding.gpu_equivalents, policy)
    # Only the skips the owner hears about are routed, with the flags they need to see.
    tells = hold.reason.tells_owner
    return Skip(
        target=c.ref,
        reason=hold.reason,
        detail=hold.detail,
        finding=c.finding,
        action=c.rule.action if c.rule else None,
        rule=c.rule.name if c.rule else None,
        channel=c.channel if tells else None,
        flags=c.flags if tells else (),
        gpu_hours_per_day=per_day,
        cost_per_day=cost,
        root=c.root_ref,
    )


def _action(c: Candidate, p: Planning) -> PlannedAction:
    rule, action = c.rule, c.action
    assert rule is not None and action is not None  # first_matching_rule holds what no rule matches
    destructive = action.destructive
    if destructive:
        p.budget.actions_left -= 1
        if action is Action.CORDON:
            p.budget.cordons_left -= 1
    gpus = c.finding.gpu_count or (c.node.gpus if c.node is not None else 0)
    # A MIG slice frees its share of a GPU per hour, not a whole GPU.
    per_day, cost = _money(c.finding.gpu_equivalents if c.finding.gpu_count else gpus, p.policy)
    p.targets.add(_target_key(c))
    written = c.node if c.is_node else c.root
    reason = f"{describe_finding(c.finding)} ({describe_rule(rule)})"
    return PlannedAction(
        action=action,
        target=c.ref,
        finding=c.finding,
        rule=rule.name,
        reason=f"{reason}; {c.note}" if c.note else reason,
        channel=c.channel,
        gpu_count=gpus,
        replicas=written.replicas if isinstance(written, Workload) else None,
        resource_version=written.resource_version if written is not None else "",
        flags=c.flags,
        confirmations=c.confirmations,
        gpu_hours_per_day=per_day if destructive else 0.0,
        cost_per_day=cost if destructive else None,
        root=c.root_ref,
    )


def summarize(items: Iterable[PlannedAction | Skip]) -> tuple[float, float | None]:
    """Total GPU-hours per day and cost per day of some plan items."""
    hours, cost, priced = 0.0, 0.0, False
    for item in items:
        hours += item.gpu_hours_per_day
        if item.cost_per_day is not None:
            cost += item.cost_per_day
            priced = True
    return hours, (cost if priced else None)
