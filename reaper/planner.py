"""Findings + cluster snapshot + policy + now → a plan: actions with reasons, and every skip with its reason.

Pure: no I/O, no clock (``now`` comes in), no Kubernetes objects (plain snapshot data). ``RULES`` is
the table of small named checks that docs/reaper.md's "Safety rules" table documents, row by row. Where
several rows would hold a finding back, the earliest names its skip reason.

Each check is pure too: it reads the finding and the objects it names (:class:`Candidate`), what earlier
rows decided about it (:class:`Decided`) and the run so far (:class:`Planning`), and returns its verdict
or None: a :class:`Hold` (skip it, and why), or what it decided: :class:`Matched` (the policy rule, its
action and channel), :class:`NotifyInstead` (the action to take becomes a notification),
:class:`Flagged` (flags shown with it, maybe a hold), :class:`Streak` (the confirmation streak to record,
maybe a hold). No check changes anything. The loop alone applies verdicts: :func:`decide` builds what is
decided about one finding from the verdicts that count, and :func:`plan` records the streaks into the
next state, notes the targets planned and spends the per-run caps.

Independent rows read nothing another row decides, only the finding, its objects, the policy and the
run: 1 (too little data), 2 (protected namespace), 3 (first matching rule), 4 (policy exclusion),
5 (owner opt-out), 7a, 7b, 7c (rollout, creation and restore grace) and 10 (one action per target).
They may run in any order. The others are ordered: each names in ``after`` the rows whose verdicts it
reads, which run before it:

* 6a–6f (live object, controller managed, native stop, GPU node, something left to do, a GPU
  requested) read the action the matched rule asks for (3);
* 8 (autoscaled), 9 (GitOps), 11a (confirmed), 12a and 12b (the caps) read the action to take: the
  rule's (3), or the notification 6c makes of it;
* 11b (held long enough) also reads when 11a's confirmation streak began, and the rule's ``for:``;
* 11c (notice first) reads the rule's ``notice:`` and the action to take (reaper.notice decides).

Across findings, 10 and 12 read what the loop has planned so far (the targets, the caps left); findings
go through the rules biggest waste first, so the caps keep the actions that reclaim the most.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypeAlias

from common.model import (
    Finding,
    FindingsReport,
    TimeWindow,
    UnknownEvidence,
    UtilizationEvidence,
    WorkloadRef,
)
from common.timeutil import format_duration, parse_time, rfc3339
from reaper import names, notice
from reaper.actuators import KUEUE_DEACTIVATE, actuator_for, notify_only, verbs
from reaper.cluster import ClusterSnapshot, Namespace, Node, OwnerRef, Workload
from reaper.demand import PRODUCT_LABEL, Offer, PendingDemand, Selection, select, why_not
from reaper.policy import Action, Policy, Rule, glob_match
from reaper.state import Confirmation, Notice, ReaperState
from reaper.wake import check_scalers

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
    NO_GPU_REQUESTED = "no_gpu_requested"
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
    NO_DEMAND = "no_demand"  # a ``when: demand`` rule, and no unmet GPU demand its action would meet
    NOTICED = "noticed"  # a rule with notice: told the owners now; acts after the period
    NOTICE_PENDING = "notice_pending"  # told on an earlier run; the period is not over yet

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
        SkipReason.NOTICED,
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
    uid: str = ""  # the uid of the object written, as the plan saw it
    flags: tuple[str, ...] = ()  # e.g. GitOps ownership that would undo the action
    confirmations: int = 1
    gpu_hours_per_day: float = 0.0
    cost_per_day: float | None = None
    root: WorkloadRef | None = None  # the controller above the target that is stopped instead of it
    pending_gpus: int | None = None  # ``when: demand``: the pending GPUs it helps free room for
    demand: str = ""  # ``when: demand``: the pending pods or Kueue Workloads it serves (reaper.demand)
    kueue: bool = False  # the written object is Kueue's: stopped through its Workload (reaper.kueue)
    wake: str | None = None  # the rule's ``wake`` (reaper.wake): stopped by a hand-over that wakes it

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
    """Owner channel: the namespace's annotation (a channel the policy accepts from tenants: see
    :func:`refused_channels`), then the rule's channel, then routes, then the default."""
    if namespace is not None:
        annotated = namespace.annotations.get(names.SLACK_CHANNEL, "").strip()
        channel = policy.slack.owner_channel(annotated)[0] if annotated else None
        if channel is not None:
            return channel
    if rule is not None and rule.channel:
        return rule.channel
    if ns_name:
        for route in policy.slack.routes:
            if glob_match(ns_name, route.namespaces):
                return route.channel
    return policy.slack.channel


def refused_channels(namespaces: Iterable[Namespace], policy: Policy) -> list[tuple[str, str, str]]:
    """The namespaces whose ``gpu-reaper/slack-channel`` is not posted to: (namespace, value, why).

    Anyone who may annotate a namespace writes it: a user id or a direct message would let them
    have the reaper message anyone, and the policy may allow only some channels."""
    out = []
    for ns in namespaces:
        annotated = ns.annotations.get(names.SLACK_CHANNEL, "").strip()
        problem = policy.slack.owner_channel(annotated)[1] if annotated else None
        if problem is not None:
            out.append((ns.name, annotated, problem))
    return out


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
    if not m.recommends(finding):
        return False
    return not (
        finding.confidence < m.min_confidence
        or finding.wasted_gpu_hours < m.min_wasted_gpu_hours
        or finding.gpu_count < m.min_gpus
    )


# --- what the rules read, and what they answer ----------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One finding and the snapshot's objects it names: the facts every rule reads. Nothing changes it."""

    finding: Finding
    node: Node | None
    workload: Workload | None  # the object the finding names, when the snapshot lists its kind
    namespace: Namespace | None
    root: Workload | None = None  # the top listed controller of ``workload`` (itself when none)
    unlisted_owner: OwnerRef | None = None  # a controller above that the reaper does not list
    # The root's namespace where it is not the finding's: never, as owners are followed only within
    # a namespace (ClusterSnapshot.controllers), but every protection reads it should that change.
    root_namespace: Namespace | None = None

    @classmethod
    def of(cls, finding: Finding, snapshot: ClusterSnapshot) -> Candidate:
        ref = finding.workload
        is_node = ref.kind == "Node"
        workload = None if is_node else snapshot.workload(ref)
        root, unlisted = workload, None
        if workload is not None:
            chain, unlisted = snapshot.controllers(workload)
            root = chain[-1] if chain else workload
        elsewhere = root is not None and root.namespace != ref.namespace
        return cls(
            finding=finding,
            node=snapshot.nodes.get(ref.name) if is_node else None,
            workload=workload,
            namespace=None if is_node else snapshot.namespaces.get(ref.namespace),
            root=root,
            unlisted_owner=unlisted,
            root_namespace=snapshot.namespaces.get(root.namespace) if root and elsewhere else None,
        )

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
    def objects(self) -> tuple[Workload, ...]:
        """The target and, when different, the root that controls it."""
        if self.workload is None:
            return ()
        if self.root is None or self.root is self.workload:
            return (self.workload,)
        return (self.workload, self.root)

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace the action would touch: the finding's, and the root's should it differ."""
        if self.is_node:
            return ()
        root = self.root.namespace if self.root is not None else self.ref.namespace
        return (self.ref.namespace,) if root == self.ref.namespace else (self.ref.namespace, root)

    @property
    def root_ref(self) -> WorkloadRef | None:
        """The root, when it is not the target itself."""
        return self.root.ref if self.root is not None and self.root is not self.workload else None


@dataclass(frozen=True)
class Decided:
    """What the verdicts of earlier rows decided about one finding: the loop builds it, rules only read it."""

    rule: Rule | None = None  # 3: the policy rule that matched
    channel: str | None = None  # 3: where the owner hears about it
    action: Action | None = None  # 3: the rule's action; 6c: notify, where the root has no safe native stop
    note: str = ""  # 6c: why the action became a notification
    flags: tuple[str, ...] = ()  # 9: e.g. GitOps ownership that would undo the action
    streak: Confirmation | None = None  # 11a: the confirmation streak, as the next run will read it
    notice: Notice | None = None  # 11c: the notice standing, kept while the finding is held back

    @property
    def asks_to_stop(self) -> bool:
        """The matched rule asks for a destructive action (what row 6 checks, before 6c may change it)."""
        return self.rule is not None and self.rule.action.destructive

    @property
    def destructive(self) -> bool:
        """The action to take (after 6c) is destructive."""
        return self.action is not None and self.action.destructive


UNDECIDED = Decided()  # before any verdict


@dataclass(frozen=True)
class Planning:
    """What the rules see of the run: its inputs, and what the loop has planned so far. Rules only read it."""

    snapshot: ClusterSnapshot
    policy: Policy
    now: datetime
    actions_left: int  # destructive actions still allowed this run (12a)
    cordons_left: int  # cordons still allowed this run (12b)
    targets: AbstractSet[str] = frozenset()  # what actions are planned for so far, by _target_key (10)


# The verdicts. A rule returns one of these, or None when it has nothing to say about the finding.


@dataclass(frozen=True)
class Hold:
    """The finding goes no further: it is skipped, for this reason."""

    reason: SkipReason
    detail: str


@dataclass(frozen=True)
class Matched:
    """3: the policy rule that decides (its action is the one to take, unless 6c says otherwise)."""

    rule: Rule
    channel: str | None


@dataclass(frozen=True)
class NotifyInstead:
    """6c: the root has no safe native stop, so the owner is told instead; ``note`` says why."""

    note: str


@dataclass(frozen=True)
class Flagged:
    """9: something that may undo the action, shown with it; a hold too, where the policy says so."""

    flags: tuple[str, ...]
    hold: Hold | None = None


@dataclass(frozen=True)
class Streak:
    """11a: the confirmation streak to record for the next run; a hold too, while it is too short."""

    confirmation: Confirmation
    hold: Hold | None = None


@dataclass(frozen=True)
class Noticed:
    """11c: the rule's notice, to keep while the finding is held back; a hold too, while it stands."""

    notice: Notice
    hold: Hold | None = None


Verdict: TypeAlias = Hold | Matched | NotifyInstead | Flagged | Streak | Noticed
RuleCheck = Callable[[Candidate, Decided, Planning], Verdict | None]


def hold_of(verdict: Verdict) -> Hold | None:
    """The hold a verdict carries, if any."""
    if isinstance(verdict, Hold):
        return verdict
    if isinstance(verdict, Flagged | Streak | Noticed):
        return verdict.hold
    return None


def apply_verdict(decided: Decided, verdict: Verdict) -> Decided:
    """What is decided about a finding once this verdict counts (the loop's one way to decide)."""
    d = decided
    match verdict:
        # replace(): each verdict sets its own fields and keeps every other row's.
        case Matched(rule=rule, channel=channel):
            return replace(d, rule=rule, channel=channel, action=rule.action)
        case NotifyInstead(note=note):
            return replace(d, action=Action.NOTIFY, note=note)
        case Flagged(flags=flags):
            return replace(d, flags=flags)
        case Streak(confirmation=confirmation):
            return replace(d, streak=confirmation)
        case Noticed(notice=standing):
            return replace(d, notice=standing)
    return decided


# --- the rules, in the order of the table in docs/reaper.md ("Safety rules") ------------------------
#
# Each reads the candidate, what earlier rows decided (only those named in its RULES entry's
# ``after``) and the run, and returns its verdict; none changes anything.


def too_little_data(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Never act on too little data."""
    if not c.finding.kind.actionable:
        evidence = c.finding.evidence
        why = evidence.why if isinstance(evidence, UnknownEvidence) else "too little data"
        return Hold(SkipReason.UNKNOWN, f"{why}; never acted on")
    return None


def protected_namespace(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Namespaces that are never touched, whatever the rules say: the finding's, and the written object's."""
    for ns in c.namespaces:
        if ns in p.policy.protected_namespaces:
            return Hold(SkipReason.PROTECTED_NAMESPACE, f"namespace {ns} is never touched")
    return None


def first_matching_rule(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """The first rule that matches decides: the action, and the owner's channel."""
    rule = next((r for r in p.policy.rules if _matches(r, c.finding, c.labels)), None)
    if rule is None:
        return Hold(SkipReason.NO_RULE, "no policy rule matches this finding")
    return Matched(rule=rule, channel=route_channel(c.namespace, c.ref.namespace, rule, p.policy))


def policy_exclusion(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """The policy's global exclusions, on the finding's object and on the root that would be written."""
    ex, ref = p.policy.exclude, c.ref
    hit: str | None
    if c.is_node:
        hit = glob_match(ref.name, ex.nodes)
        if hit:
            return Hold(SkipReason.EXCLUDED_BY_POLICY, f"node matches exclude.nodes {hit!r}")
    else:
        for ns in c.namespaces:
            hit = glob_match(ns, ex.namespaces)
            if hit:
                return Hold(
                    SkipReason.EXCLUDED_BY_POLICY, f"namespace {ns} matches exclude.namespaces {hit!r}"
                )
        named = [(ref.namespace, ref.name), *((w.namespace, w.name) for w in c.objects[1:])]
        for ns, name in named:
            hit = glob_match(f"{ns}/{name}", ex.workloads)
            if hit:
                return Hold(
                    SkipReason.EXCLUDED_BY_POLICY, f"workload {ns}/{name} matches exclude.workloads {hit!r}"
                )
    selector = ex.label_selector
    labelled = [c.labels] if c.is_node else [w.labels for w in c.objects]
    if selector is not None and any(labels is not None and selector.matches(labels) for labels in labelled):
        return Hold(
            SkipReason.EXCLUDED_BY_POLICY,
            f"labels match exclude.labelSelector ({selector.describe()})",
        )
    return None


def owner_opt_out(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """The owner's opt-out annotations, on the object, its root or their namespaces."""
    what = "node" if c.is_node else c.ref.kind.lower()
    root_ns = c.root_namespace
    opted_out = (
        opt_out(c.annotations, p.now, what)
        or (opt_out(c.root.annotations, p.now, c.root.describe()) if c.root_ref and c.root else None)
        or (opt_out(c.namespace.annotations, p.now, f"namespace {c.ref.namespace}") if c.namespace else None)
        or (opt_out(root_ns.annotations, p.now, f"namespace {root_ns.name}") if root_ns else None)
    )
    return Hold(SkipReason.EXCLUDED_BY_ANNOTATION, opted_out) if opted_out else None


def live_object(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """A destructive action needs the live object."""
    if d.asks_to_stop and c.obj is None:
        return Hold(SkipReason.NOT_FOUND, f"{c.ref.kind} {c.ref.name} is not in the cluster snapshot")
    return None


def controller_managed(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """A child is never written to: its root controller is stopped, or nothing is."""
    if not d.asks_to_stop or c.workload is None:
        return None
    holder = c.workload.describe()
    owner_ref = c.unlisted_owner
    if owner_ref is not None and owner_ref.kind in p.snapshot.listed_kinds:
        # A kind the reaper lists, yet not found here: its reference points out of the namespace
        # (Kubernetes follows none that way) or at nothing. Whoever wrote it is not trusted with a stop.
        return Hold(
            SkipReason.CONTROLLER_MANAGED,
            f"{holder} names as its controller {owner_ref.kind} {owner_ref.name}, which is not in "
            f"namespace {c.ref.namespace} (an owner in another namespace is never followed); left alone",
        )
    if owner_ref is not None:
        owner = owner_ref.describe(c.ref.namespace)
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


def native_stop(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """A root without a safe native stop (RayService, Knative Service…) is reported, not stopped."""
    if not d.asks_to_stop or c.workload is None:
        return None
    root = c.root or c.workload
    if actuator_for(root) is None:
        return NotifyInstead(note=notify_only(root) or "")
    return None


def gpu_node(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """A node is cordoned only if it has GPUs to reclaim."""
    if d.asks_to_stop and c.node is not None and c.node.gpus == 0:
        return Hold(SkipReason.NOT_A_GPU_NODE, "the node advertises no GPUs")
    return None


def requests_a_gpu(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """A workload is stopped only if it (or its root) asks for a GPU in its pod template: a finding
    (a findings file, say) naming one that holds none is not trusted. The write is conditional on
    the version this was read from, so it holds for the object written."""
    if not d.asks_to_stop or c.workload is None:
        return None
    if any(w.gpu_resources for w in c.objects):
        return None
    which = " nor ".join(w.describe() for w in c.objects)
    resources = ", ".join(r + ("*" if r.endswith("-") else "") for r in names.GPU_RESOURCE_PREFIXES)
    return Hold(
        SkipReason.NO_GPU_REQUESTED,
        f"{'neither ' if len(c.objects) > 1 else ''}{which} requests a GPU ({resources}) in its pod "
        "template; a finding about it is not acted on",
    )


def something_left_to_do(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Nothing to do on what is already stopped, at zero or cordoned."""
    if not d.asks_to_stop:
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


def rollout_in_progress(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """A rollout in progress: new pods are still loading their models."""
    for w in c.objects:
        if w.rollout is not None and w.rollout.in_progress:
            return Hold(
                SkipReason.ROLLOUT_IN_PROGRESS, f"{w.describe()} is rolling out: {w.rollout.describe()}"
            )
    return None


def creation_grace(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Grace after creation, a ``rollout restart`` or the last rollout progress (model loading)."""
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
        for w in c.objects:
            unreadable = w.unreadable_restart
            if unreadable is not None:
                # Whoever wrote it meant a restart: its grace cannot be counted, so it is not spent.
                return Hold(
                    SkipReason.CREATION_GRACE,
                    f"{w.describe()} has an unreadable {names.RESTARTED_AT}={unreadable!r} on its pod "
                    "template; its grace after creation cannot be judged",
                )
    known = [(when, what) for what, when in starts if when is not None]
    if not known:
        return None
    latest, what = max(known, key=lambda t: t[0])
    if p.now - latest < grace:
        return Hold(
            SkipReason.CREATION_GRACE,
            f"{what} {_ago(p.now, latest)}; grace after creation is {_fmt(grace)}",
        )
    return None


def _ago(now: datetime, then: datetime) -> str:
    """``3h ago``; a time after ``now`` (a clock ahead, or a value someone typed) said as it is."""
    return f"{_fmt(now - then)} ago" if then <= now else f"at {rfc3339(then)}, after now"


def restore_grace(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Grace after a restore: it resets the idle clock. The reaper's record says when it restored
    the target or its root; a node, and what earlier releases restored, carry ``restored-at``."""
    recorded = [t for w in c.objects if (t := p.snapshot.restored_at(w)) is not None]
    restored = c.annotations.get(names.RESTORED_AT)
    if restored is None and not recorded:
        return None
    restored_at: datetime | None = max(recorded) if recorded else None
    if restored is not None:
        try:
            annotated = parse_time(restored)
        except ValueError:
            restored_at = None  # an unreadable restore time holds it back, whatever the record says
        else:
            restored_at = max(annotated, restored_at) if restored_at is not None else annotated
    grace = p.policy.grace.after_restore
    if restored_at is None or p.now - restored_at < grace:
        ago = (
            f"restored {_ago(p.now, restored_at)}"
            if restored_at
            else f"unreadable {names.RESTORED_AT}={restored!r}"
        )
        return Hold(SkipReason.RESTORE_GRACE, f"{ago}; grace after restore is {_fmt(grace)}")
    return None


def autoscaled(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Never scale behind an autoscaler's back: it would fight us, or silently stay disabled."""
    if d.action is not Action.SCALE_TO_ZERO:
        return None
    scalers = p.snapshot.autoscalers_for(c.ref) + (
        p.snapshot.autoscalers_for(c.root_ref) if c.root_ref is not None else ()
    )
    # reaper.wake: the reaper's own hand-over is done; a wake rule pauses one KEDA ScaledObject.
    found = check_scalers(scalers, d.rule.wake if d.rule is not None else None)
    if found is not None:
        return Hold(SkipReason.ALREADY_DONE if found.done else SkipReason.AUTOSCALED, found.detail)
    return None


def gitops_managed(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """GitOps would undo a scale-down on its next sync: flag it, or skip it if the policy says so."""
    if d.action is not Action.SCALE_TO_ZERO or c.workload is None:
        return None
    owner = next((o for w in reversed(c.objects) if (o := _gitops_owner(w.labels, w.annotations))), None)
    if owner is None:
        return None
    flag = f"managed by {owner}: its next sync may undo this"
    skip = p.policy.safety.gitops == "skip"
    return Flagged(flags=(flag,), hold=Hold(SkipReason.GITOPS_MANAGED, flag) if skip else None)


def one_action_per_target(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """One action per target per run (two findings under one root are one action)."""
    if _target_key(c) in p.targets:
        return Hold(SkipReason.DUPLICATE, "another finding already planned an action here")
    return None


def confirmed(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Confirmed on N consecutive runs (the streak is recorded either way)."""
    action = d.action
    if action is None or not action.destructive:
        return None
    safety = p.policy.safety
    streak = p.snapshot.state.streak(c.ref.key(), action.value, p.now, safety.confirmation_max_gap)
    count = (streak.count + 1) if streak else 1
    window = c.finding.window
    since = min(streak.since, window.start) if streak else window.start
    observed, until = _observed(c.finding, streak)
    confirmation = Confirmation(
        action=action.value,
        count=count,
        since=since,
        last_seen=p.now,
        observed_seconds=observed.total_seconds(),
        observed_until=until,
    )
    required = safety.consecutive_runs
    if count < required:
        return Streak(
            confirmation,
            Hold(
                SkipReason.AWAITING_CONFIRMATION,
                f"seen on {count} of {required} consecutive runs; would {_verb(c, action)} "
                f"after {required - count} more",
            ),
        )
    return Streak(confirmation)


def _verb(c: Candidate, action: Action) -> str:
    """The action's one name for this object (``scale to zero``, ``stop``, ``suspend``, ``cordon``)."""
    obj = c.root or c.workload
    return verbs(action, obj.kind if obj is not None else c.ref.kind)[0]


def _observed(finding: Finding, streak: Confirmation | None) -> tuple[timedelta, datetime]:
    """The time the streak's runs judged, this run's finding included, and where it ends: each run
    adds only the part of its judged span after the last one's, so windows shorter than the time
    between runs count what they saw, never the gaps between them."""
    window = finding.window
    judged_from = getattr(finding.evidence, "judged_from", None)
    start = max(window.start, judged_from) if judged_from is not None else window.start
    if streak is None:
        return window.end - start, window.end
    before, until = streak.observed, streak.observed_until
    if streak.observed_seconds is None or until is None:
        # Recorded before judged time was kept, when windows had to cover the runs' interval.
        before, until = streak.last_seen - streak.since, streak.last_seen
    new = max(timedelta(0), window.end - max(start, until))
    return before + new, max(window.end, until)


def held_long_enough(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Held for the rule's ``for:`` duration, counted across runs over the time their windows
    judged (11a's streak), never over the gaps between them."""
    if d.rule is None or not d.destructive or d.streak is None:
        return None
    held = d.streak.observed
    if held < d.rule.match.for_:
        return Hold(
            SkipReason.NOT_HELD_LONG_ENOUGH,
            f"held for {_fmt(held)}; {describe_rule(d.rule)}",
        )
    return None


def noticed(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """A rule with ``notice:`` tells the owners first and acts once the notice has stood (reaper.notice)."""
    written = c.node if c.is_node else (c.root or c.workload)
    if d.rule is None or d.rule.notice is None or not d.destructive or d.action is None or written is None:
        return None
    decision = notice.decide(
        rule=d.rule.name,
        action=d.action.value,
        written=written,
        period=d.rule.notice,
        stored=p.snapshot.state.notices.get(c.ref.key()),
        now=p.now,
        channel=d.channel,
    )
    if decision.step is notice.Step.ACT:
        return Noticed(decision.notice)
    reason = SkipReason.NOTICED if decision.step is notice.Step.POST else SkipReason.NOTICE_PENDING
    return Noticed(decision.notice, Hold(reason, decision.detail))


def action_cap(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Blast radius: at most maxActionsPerRun destructive actions."""
    if d.destructive and p.actions_left <= 0:
        return Hold(
            SkipReason.ACTION_CAP,
            f"safety.maxActionsPerRun ({p.policy.safety.max_actions_per_run}) reached this run",
        )
    return None


def cordon_cap(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
    """Blast radius: at most maxCordonShare of the GPU nodes cordoned."""
    if d.action is Action.CORDON and p.cordons_left <= 0:
        return Hold(
            SkipReason.CORDON_CAP,
            f"safety.maxCordonShare ({p.policy.safety.max_cordon_share:.0%} of "
            f"{p.snapshot.gpu_node_count} GPU nodes) reached this run",
        )
    return None


@dataclass(frozen=True)
class SafetyRule:
    """A check of the table: its row (its precedence), the check, and the checks whose verdicts it reads."""

    row: str  # "6b": row 6 of the table in docs/reaper.md, its second check
    check: RuleCheck
    after: tuple[RuleCheck, ...] = ()  # the earlier checks whose verdicts it reads; () when independent
    rank: tuple[int, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        number = self.row.rstrip(string.ascii_lowercase)
        object.__setattr__(self, "rank", (int(number), self.row[len(number) :]))


# The documented table, in order: where several rows would hold a finding back, the earliest one gives
# the skip reason. See the module docstring for which rows are independent and which read earlier ones.
RULES: tuple[SafetyRule, ...] = (
    SafetyRule("1", too_little_data),
    SafetyRule("2", protected_namespace),
    SafetyRule("3", first_matching_rule),
    SafetyRule("4", policy_exclusion),
    SafetyRule("5", owner_opt_out),
    SafetyRule("6a", live_object, after=(first_matching_rule,)),
    SafetyRule("6b", controller_managed, after=(first_matching_rule,)),
    SafetyRule("6c", native_stop, after=(first_matching_rule,)),
    SafetyRule("6d", gpu_node, after=(first_matching_rule,)),
    SafetyRule("6e", something_left_to_do, after=(first_matching_rule,)),
    SafetyRule("6f", requests_a_gpu, after=(first_matching_rule,)),
    SafetyRule("7a", rollout_in_progress),
    SafetyRule("7b", creation_grace),
    SafetyRule("7c", restore_grace),
    SafetyRule("8", autoscaled, after=(first_matching_rule, native_stop)),
    SafetyRule("9", gitops_managed, after=(first_matching_rule, native_stop)),
    SafetyRule("10", one_action_per_target),
    SafetyRule("11a", confirmed, after=(first_matching_rule, native_stop)),
    SafetyRule("11b", held_long_enough, after=(first_matching_rule, native_stop, confirmed)),
    SafetyRule("11c", noticed, after=(first_matching_rule, native_stop)),
    SafetyRule("12a", action_cap, after=(first_matching_rule, native_stop)),
    SafetyRule("12b", cordon_cap, after=(first_matching_rule, native_stop)),
)


# --- the planner -------------------------------------------------------------------------------------


def plan(report: FindingsReport, snapshot: ClusterSnapshot, policy: Policy, now: datetime) -> Plan:
    """The plan for one run. ``now`` must be an aware datetime; nothing here reads a clock.

    The one place the run's state changes: it records each finding's confirmation streak for the next
    run, notes the targets planned and spends the per-run caps, from the verdicts :func:`decide` counts.
    """
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
    targets: set[str] = set()  # the rules see it read-only, through Planning.targets
    planning = Planning(
        snapshot=snapshot,
        policy=policy,
        now=now,
        actions_left=policy.safety.max_actions_per_run,
        # Rounded down: on a small cluster a 10 % share allows no cordon at all, by design.
        cordons_left=math.floor(policy.safety.max_cordon_share * snapshot.gpu_node_count + 1e-9),
        targets=targets,
    )
    next_entries: dict[str, Confirmation] = {}
    next_notices: dict[str, Notice] = {}  # kept while held back; used up by the action
    acting: dict[str, Notice] = {}  # the notices of actions, kept should a lack of demand hold them
    actions: list[PlannedAction] = []
    skips: list[Skip] = []
    # Biggest waste first, so the per-run caps keep the actions that reclaim the most.
    ordered = sorted(report.findings, key=lambda f: (-f.wasted_gpu_hours, -f.gpu_count, f.workload.key()))
    for finding in ordered:
        candidate = Candidate.of(finding, snapshot)
        decided, hold = decide(candidate, planning)
        if decided.streak is not None:  # recorded whether or not the streak is long enough yet
            next_entries[candidate.ref.key()] = decided.streak
        if decided.notice is not None and hold is not None:
            next_notices[candidate.ref.key()] = decided.notice
        if hold is not None:
            skips.append(_skip(candidate, decided, hold, policy))
            continue
        action = _action(candidate, decided, policy)
        actions.append(action)
        targets.add(_target_key(candidate))
        if decided.notice is not None:
            acting[candidate.ref.key()] = decided.notice
        if action.action.destructive and not _on_demand(action, policy):  # those spend the cap below
            cordon = 1 if action.action is Action.CORDON else 0
            planning = replace(
                planning,
                actions_left=planning.actions_left - 1,
                cordons_left=planning.cordons_left - cordon,
            )
    actions, held = _meet_demand(actions, snapshot, policy, planning.actions_left)
    skips += held
    next_notices.update((s.target.key(), acting[s.target.key()]) for s in held if s.target.key() in acting)
    return Plan(
        now=now,
        window=report.window,
        findings=report.findings,
        actions=tuple(actions),
        skips=tuple(skips),
        next_state=ReaperState(updated_at=now, entries=next_entries, notices=next_notices),
    )


def _on_demand(action: PlannedAction, policy: Policy) -> bool:
    return action.action is Action.SCALE_TO_ZERO and any(
        r.name == action.rule and r.when == "demand" for r in policy.rules
    )


def _meet_demand(
    actions: list[PlannedAction], snapshot: ClusterSnapshot, policy: Policy, cap_left: int
) -> tuple[list[PlannedAction], list[Skip]]:
    """``when: demand``: of those rules' actions, only the ones that meet unmet GPU demand, most
    wasteful first and no more (reaper.demand decides); the others are held back, and say why. Only
    these spend the action cap, after every other action has."""
    offers = {a.key: _offer(a, snapshot) for a in actions if _on_demand(a, policy)}
    if not offers:
        return actions, []
    found = snapshot.demand or PendingDemand(unreadable="the run did not read it")
    chosen = select(list(offers.values()), found.wants) if found.unreadable is None else Selection()
    kept: list[PlannedAction] = []
    held: list[Skip] = []
    for a in actions:
        if a.key not in offers or (a.key in chosen.served and cap_left > 0):
            if a.key in offers:
                cap_left -= 1
                a = replace(a, pending_gpus=chosen.pending_gpus(a.key), demand=chosen.serves(a.key))
            kept.append(a)
            continue
        hold = (
            Hold(
                SkipReason.ACTION_CAP,
                f"safety.maxActionsPerRun ({policy.safety.max_actions_per_run}) reached this run",
            )
            if a.key in chosen.served
            else Hold(SkipReason.NO_DEMAND, why_not(offers[a.key], found, chosen))
        )
        tells = hold.reason.tells_owner
        held.append(
            Skip(
                target=a.target,
                reason=hold.reason,
                detail=hold.detail,
                finding=a.finding,
                action=a.action,
                rule=a.rule,
                channel=a.channel if tells else None,
                flags=a.flags if tells else (),
                gpu_hours_per_day=a.gpu_hours_per_day,
                cost_per_day=a.cost_per_day,
                root=a.root,
            )
        )
    return kept, held


def _offer(a: PlannedAction, snapshot: ClusterSnapshot) -> Offer:
    """What an action would free, for reaper.demand: the GPUs the target holds, on its nodes."""
    held = snapshot.workload(a.target)
    root = snapshot.workload(a.root) if a.root is not None else None
    resources = (held.gpu_resources if held is not None else frozenset()) or (
        root.gpu_resources if root is not None else frozenset()
    )
    nodes = tuple(
        (n, node.labels.get(PRODUCT_LABEL) if (node := snapshot.nodes.get(n)) is not None else None)
        for n in a.finding.nodes
    )
    return Offer(a.key, a.finding.wasted_gpu_hours, a.finding.gpu_count, resources, nodes)


def decide(c: Candidate, p: Planning) -> tuple[Decided, Hold | None]:
    """What ``RULES`` decide about one finding, and the hold that skips it, if any.

    The hold of the earliest row counts, with the verdicts of the rows before it; later rows' verdicts
    do not (their streak is not recorded, their flags not shown). Run in the table's order, that is the
    first hold, and no row after it runs. Run in any order that keeps each row after the ones it reads
    (``after``), the outcome is the same.
    """
    decided = UNDECIDED
    counted: list[tuple[SafetyRule, Verdict]] = []
    held: Hold | None = None
    held_rank = (0, "")
    for rule in RULES:
        if held is not None and rule.rank > held_rank:
            continue  # an earlier row holds the finding back already: this one's verdict cannot count
        verdict = rule.check(c, decided, p)
        if verdict is None:
            continue
        counted.append((rule, verdict))
        decided = apply_verdict(decided, verdict)
        hold = hold_of(verdict)
        if hold is not None and (held is None or rule.rank < held_rank):
            held, held_rank = hold, rule.rank
    if held is None:
        return decided, None
    if any(rule.rank > held_rank for rule, _ in counted):
        # Out of the table's order, a later row had its say before an earlier one held the finding back.
        decided = UNDECIDED
        for rule, verdict in sorted(counted, key=lambda rv: rv[0].rank):
            if rule.rank <= held_rank:
                decided = apply_verdict(decided, verdict)
    return decided, held


def _target_key(c: Candidate) -> str:
    return (c.root_ref or c.ref).key()


def _money(gpus: float, policy: Policy) -> tuple[float, float | None]:
    per_day = gpus * HOURS_PER_DAY
    price = policy.price
    return per_day, (per_day * price if price is not None else None)


def _skip(c: Candidate, d: Decided, hold: Hold, policy: Policy) -> Skip:
    per_day, cost = _money(c.finding.gpu_equivalents, policy)
    # Only the skips the owner hears about are routed, with the flags they need to see.
    tells = hold.reason.tells_owner
    return Skip(
        target=c.ref,
        reason=hold.reason,
        detail=hold.detail,
        finding=c.finding,
        action=d.rule.action if d.rule else None,
        rule=d.rule.name if d.rule else None,
        channel=d.channel if tells else None,
        flags=d.flags if tells else (),
        gpu_hours_per_day=per_day,
        cost_per_day=cost,
        root=c.root_ref,
    )


def _action(c: Candidate, d: Decided, policy: Policy) -> PlannedAction:
    rule, action = d.rule, d.action
    assert rule is not None and action is not None  # first_matching_rule holds what no rule matches
    destructive = action.destructive
    gpus = c.finding.gpu_count or (c.node.gpus if c.node is not None else 0)
    # A MIG slice frees its share of a GPU per hour, not a whole GPU.
    per_day, cost = _money(c.finding.gpu_equivalents if c.finding.gpu_count else gpus, policy)
    written = c.node if c.is_node else c.root
    reason = f"{describe_finding(c.finding)} ({describe_rule(rule)})"
    return PlannedAction(
        action=action,
        target=c.ref,
        finding=c.finding,
        rule=rule.name,
        reason=f"{reason}; {d.note}" if d.note else reason,
        channel=d.channel,
        gpu_count=gpus,
        replicas=written.replicas if isinstance(written, Workload) else None,
        resource_version=written.resource_version if written is not None else "",
        uid=written.uid if written is not None else "",
        flags=d.flags,
        confirmations=d.streak.count if d.streak is not None else 1,
        gpu_hours_per_day=per_day if destructive else 0.0,
        cost_per_day=cost if destructive else None,
        root=c.root_ref,
        wake=rule.wake if action is Action.SCALE_TO_ZERO else None,
        kueue=isinstance(written, Workload) and actuator_for(written) is KUEUE_DEACTIVATE,
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
