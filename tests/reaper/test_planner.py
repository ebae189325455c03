"""The planner, table-style: one case per safety rule and per rule combination that matters.

No Kubernetes here: findings, a snapshot parsed from plain manifests, a policy and a fixed ``now``.
"""

from __future__ import annotations

import copy
import fnmatch
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from common.model import Finding, FindingKind, FindingsReport, TimeWindow
from common.timeutil import rfc3339
from harness.findings import NOW, WINDOW, finding, report
from harness.gpu_workloads import gpu_spec
from reaper import names, planner
from reaper.cluster import ClusterSnapshot, build_snapshot
from reaper.kinds import WORKLOAD_KINDS, object_kind
from reaper.planner import (
    RULES,
    UNDECIDED,
    Candidate,
    Decided,
    Plan,
    Planning,
    RuleCheck,
    SafetyRule,
    SkipReason,
    Verdict,
    apply_verdict,
    plan,
    route_channel,
)
from reaper.policy import Action, Policy
from reaper.state import Confirmation, ReaperState
from simulation import controllers
from simulation.in_memory_cluster import manifest

IDLE = FindingKind.IDLE_ENDPOINT
LOW = FindingKind.LOW_UTILIZATION
STARVED = FindingKind.DATALOADER_STARVATION
UNKNOWN = FindingKind.UNKNOWN
LONG_AGO = NOW - timedelta(days=30)

BASE_POLICY: dict[str, Any] = {
    "safety": {"consecutiveRuns": 1, "maxActionsPerRun": 10, "maxCordonShare": 1.0},
    "grace": {"afterCreation": "1h", "afterRestore": "24h"},
    "pricePerGpuHour": 2.0,
    "rules": [
        {"name": "idle", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"},
        {"name": "nodes", "match": {"findings": ["low_utilization"], "kinds": ["Node"]}, "action": "cordon"},
        {
            "name": "tell",
            "match": {"findings": ["low_utilization", "dataloader_starvation"]},
            "action": "notify",
        },
    ],
}


def deployment(
    name: str = "api", namespace: str = "serving", replicas: int = 2, **meta: Any
) -> dict[str, Any]:
    return manifest(
        meta.pop("kind", "Deployment"),
        name,
        namespace,
        labels=meta.pop("labels", {"app": name}),
        annotations=meta.pop("annotations", None),
        created=meta.pop("created", LONG_AGO),
        spec=gpu_spec(replicas) if meta.pop("gpus", True) else {"replicas": replicas},
    )


def node(name: str, gpus: int = 4, unschedulable: bool = False, **meta: Any) -> dict[str, Any]:
    cap = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "16"}
    return manifest(
        "Node",
        name,
        annotations=meta.pop("annotations", None),
        created=meta.pop("created", LONG_AGO),
        spec={"unschedulable": True} if unschedulable else {},
        status={"capacity": cap},
    )


def namespace(name: str, **annotations: str) -> dict[str, Any]:
    return manifest(
        "Namespace", name, annotations={k.replace("_", "/", 1): v for k, v in annotations.items()}
    )


def hpa(target: str, namespace: str = "serving", kind: str = "HorizontalPodAutoscaler") -> dict[str, Any]:
    return manifest(
        kind,
        f"{target}-scaler",
        namespace,
        spec={"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}},
    )


BASE_OBJECTS = (
    namespace("serving"),
    namespace("team-a"),
    namespace("kube-system"),
    namespace("gpu-reaper"),
    deployment("api"),
    deployment("api", namespace="team-a"),
    deployment("web", namespace="team-a", replicas=1),
    node("gpu-a"),
    node("gpu-b"),
)


def streak(
    count: int, since: Any = None, last_seen: Any = None, action: str = "scale_to_zero"
) -> Confirmation:
    return Confirmation(
        action=action,
        count=count,
        since=since or WINDOW.start - timedelta(hours=1),
        last_seen=last_seen or NOW - timedelta(hours=1),
    )


@dataclass(frozen=True)
class Case:
    id: str
    findings: tuple[Finding, ...]
    actions: tuple[str, ...] = ()  # "scale_to_zero serving/Deployment/api"
    skips: Mapping[str, SkipReason] = field(default_factory=dict)  # workload key → reason
    objects: tuple[dict[str, Any], ...] = BASE_OBJECTS
    extra: tuple[dict[str, Any], ...] = ()
    policy: Mapping[str, Any] = field(default_factory=dict)
    state: Mapping[str, Confirmation] = field(default_factory=dict)


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in override.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def make_policy(**override: Any) -> Policy:
    return Policy.model_validate(_merge(BASE_POLICY, override))


def make_snapshot(
    objects: tuple[dict[str, Any], ...], state: Mapping[str, Confirmation] | None = None
) -> ClusterSnapshot:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        by_kind.setdefault(object_kind(o), []).append(o)
    return build_snapshot(
        workloads={k.name: by_kind.get(k.name, []) for k in WORKLOAD_KINDS},
        nodes=by_kind.get("Node", []),
        namespaces=by_kind.get("Namespace", []),
        hpas=by_kind.get("HorizontalPodAutoscaler", []),
        scaled_objects=by_kind.get("ScaledObject", []),
        state=ReaperState(entries=dict(state or {})),
    )


def run_case(case: Case) -> Plan:
    return plan(
        report(*case.findings),
        make_snapshot(case.objects + case.extra, case.state),
        make_policy(**case.policy),
        NOW,
    )


API = "serving/Deployment/api"
SCALE_API = f"scale_to_zero {API}"
ago = lambda **kw: rfc3339(NOW - timedelta(**kw))  # noqa: E731 - a table helper
later = lambda **kw: rfc3339(NOW + timedelta(**kw))  # noqa: E731

HELD_12H = {
    "rules": [
        {"name": "r", "match": {"findings": ["idle_endpoint"], "for": "12h"}, "action": "scale_to_zero"}
    ]
}

CASES = [
    Case("idle-endpoint-is-scaled-to-zero", (finding(IDLE),), actions=(SCALE_API,)),
    Case("unknown-finding-is-never-acted-on", (finding(UNKNOWN),), skips={API: SkipReason.UNKNOWN}),
    Case(
        "kube-system-is-never-touched",
        (finding(IDLE, namespace="kube-system"),),
        extra=(deployment("api", namespace="kube-system"),),
        skips={"kube-system/Deployment/api": SkipReason.PROTECTED_NAMESPACE},
    ),
    Case(
        "reaper-own-namespace-is-never-touched",
        (finding(IDLE, namespace="gpu-reaper"),),
        extra=(deployment("api", namespace="gpu-reaper"),),
        skips={"gpu-reaper/Deployment/api": SkipReason.PROTECTED_NAMESPACE},
    ),
    Case(
        "renamed-reaper-namespace-is-protected-too",
        (finding(IDLE, namespace="ops"),),
        extra=(deployment("api", namespace="ops"),),
        policy={"reaperNamespace": "ops"},
        skips={"ops/Deployment/api": SkipReason.PROTECTED_NAMESPACE},
    ),
    Case(
        "finding-no-rule-matches-is-skipped",
        (finding(STARVED),),
        policy={"rules": [BASE_POLICY["rules"][0]]},
        skips={API: SkipReason.NO_RULE},
    ),
    Case(
        "first-matching-rule-wins",
        (finding(IDLE),),
        policy={
            "rules": [
                {"name": "first", "match": {"findings": ["idle_endpoint"]}, "action": "notify"},
                *BASE_POLICY["rules"],
            ]
        },
        actions=(f"notify {API}",),
    ),
    Case(
        "rule-namespace-glob-must-match",
        (finding(IDLE), finding(IDLE, namespace="team-a")),
        policy={
            "rules": [
                {
                    "name": "r",
                    "match": {"findings": ["idle_endpoint"], "namespaces": ["team-*"]},
                    "action": "scale_to_zero",
                }
            ]
        },
        actions=("scale_to_zero team-a/Deployment/api",),
        skips={API: SkipReason.NO_RULE},
    ),
    Case(
        "rule-label-selector-must-match",
        (finding(IDLE), finding(IDLE, name="web", namespace="team-a")),
        policy={
            "rules": [
                {
                    "name": "r",
                    "match": {
                        "findings": ["idle_endpoint"],
                        "labelSelector": {"matchLabels": {"app": "web"}},
                    },
                    "action": "scale_to_zero",
                }
            ]
        },
        actions=("scale_to_zero team-a/Deployment/web",),
        skips={API: SkipReason.NO_RULE},
    ),
    Case(
        "rule-thresholds-confidence-gpus-waste",
        (
            finding(IDLE, confidence=0.5),
            finding(IDLE, namespace="team-a", gpus=1),
            finding(IDLE, name="web", namespace="team-a", gpus=2, wasted=0.5),
        ),
        policy={
            "rules": [
                {
                    "name": "r",
                    "match": {
                        "findings": ["idle_endpoint"],
                        "minConfidence": 0.9,
                        "minGpus": 2,
                        "minWastedGpuHours": 1,
                    },
                    "action": "scale_to_zero",
                }
            ]
        },
        skips={
            API: SkipReason.NO_RULE,
            "team-a/Deployment/api": SkipReason.NO_RULE,
            "team-a/Deployment/web": SkipReason.NO_RULE,
        },
    ),
    Case(
        "job-is-never-scaled-only-notified",
        (finding(LOW, name="train", workload_kind="Job"),),
        actions=("notify serving/Job/train",),
    ),
    Case(
        "policy-excludes-namespace-glob",
        (finding(IDLE),),
        policy={"exclude": {"namespaces": ["serv*"]}},
        skips={API: SkipReason.EXCLUDED_BY_POLICY},
    ),
    Case(
        "policy-excludes-workload-glob",
        (finding(IDLE), finding(IDLE, namespace="team-a")),
        policy={"exclude": {"workloads": ["serving/a*"]}},
        actions=("scale_to_zero team-a/Deployment/api",),
        skips={API: SkipReason.EXCLUDED_BY_POLICY},
    ),
    Case(
        "policy-excludes-by-label-selector",
        (finding(IDLE), finding(IDLE, name="web", namespace="team-a")),
        policy={
            "exclude": {
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}
            }
        },
        actions=(SCALE_API,),
        skips={"team-a/Deployment/web": SkipReason.EXCLUDED_BY_POLICY},
    ),
    Case(
        "policy-excludes-node-glob",
        (finding(LOW, name="gpu-a", workload_kind="Node"),),
        policy={"exclude": {"nodes": ["gpu-?"]}},
        skips={"/Node/gpu-a": SkipReason.EXCLUDED_BY_POLICY},
    ),
    Case(
        "workload-annotated-exclude-is-skipped",
        (finding(IDLE),),
        objects=(deployment(annotations={names.EXCLUDE: "true"}),),
        skips={API: SkipReason.EXCLUDED_BY_ANNOTATION},
    ),
    Case(
        "namespace-annotated-exclude-covers-its-workloads",
        (finding(IDLE),),
        objects=(deployment(), namespace("serving", **{"gpu-reaper_exclude": "true"})),
        skips={API: SkipReason.EXCLUDED_BY_ANNOTATION},
    ),
    Case(
        "notify-also-respects-opt-out",
        (finding(LOW, name="train", workload_kind="Job"),),
        objects=(namespace("serving", **{"gpu-reaper_exclude": "yes"}),),
        skips={"serving/Job/train": SkipReason.EXCLUDED_BY_ANNOTATION},
    ),
    Case(
        "exclude-until-in-the-future-skips",
        (finding(IDLE),),
        objects=(deployment(annotations={names.EXCLUDE_UNTIL: later(days=1)}),),
        skips={API: SkipReason.EXCLUDED_BY_ANNOTATION},
    ),
    Case(
        "exclude-until-expired-acts-again",
        (finding(IDLE),),
        objects=(deployment(annotations={names.EXCLUDE_UNTIL: ago(minutes=1)}),),
        actions=(SCALE_API,),
    ),
    Case(
        "exclude-until-unreadable-is-treated-as-excluded",
        (finding(IDLE),),
        objects=(deployment(annotations={names.EXCLUDE_UNTIL: "next friday"}),),
        skips={API: SkipReason.EXCLUDED_BY_ANNOTATION},
    ),
    Case(
        "exclude-false-does-not-exclude",
        (finding(IDLE),),
        objects=(deployment(annotations={names.EXCLUDE: "false"}),),
        actions=(SCALE_API,),
    ),
    Case(
        "workload-gone-from-cluster-is-skipped",
        (finding(IDLE),),
        objects=(),
        skips={API: SkipReason.NOT_FOUND},
    ),
    Case(
        "already-at-zero-is-skipped",
        (finding(IDLE),),
        objects=(deployment(replicas=0),),
        skips={API: SkipReason.ALREADY_DONE},
    ),
    Case(
        "already-cordoned-node-is-skipped",
        (finding(LOW, name="gpu-a", workload_kind="Node"),),
        objects=(node("gpu-a", unschedulable=True),),
        skips={"/Node/gpu-a": SkipReason.ALREADY_DONE},
    ),
    Case(
        "node-without-gpus-is-never-cordoned",
        (finding(LOW, name="cpu-1", workload_kind="Node"),),
        objects=(node("cpu-1", gpus=0), node("gpu-a")),
        skips={"/Node/cpu-1": SkipReason.NOT_A_GPU_NODE},
    ),
    Case(
        "a-workload-that-requests-no-gpu-is-never-stopped",
        (finding(IDLE), finding(LOW)),
        objects=(namespace("serving"), deployment(gpus=False)),
        # Told about, never stopped: a finding naming it (a findings file is trusted input) is wrong.
        actions=("notify serving/Deployment/api",),
        skips={API: SkipReason.NO_GPU_REQUESTED},
    ),
    Case(
        "grace-after-creation-covers-model-loading",
        (finding(IDLE),),
        objects=(deployment(created=NOW - timedelta(minutes=30)),),
        skips={API: SkipReason.CREATION_GRACE},
    ),
    Case(
        "grace-after-creation-over-acts",
        (finding(IDLE),),
        objects=(deployment(created=NOW - timedelta(hours=2)),),
        actions=(SCALE_API,),
    ),
    Case(
        "grace-after-restore-resets-the-idle-clock",
        (finding(IDLE),),
        objects=(deployment(annotations={names.RESTORED_AT: ago(hours=3)}),),
        skips={API: SkipReason.RESTORE_GRACE},
    ),
    Case(
        "grace-after-restore-over-acts-again",
        (finding(IDLE),),
        objects=(deployment(annotations={names.RESTORED_AT: ago(hours=25)}),),
        actions=(SCALE_API,),
    ),
    Case(
        "grace-after-restore-applies-to-notify-too",
        (finding(LOW),),
        objects=(deployment(annotations={names.RESTORED_AT: ago(hours=1)}),),
        skips={API: SkipReason.RESTORE_GRACE},
    ),
    Case(
        "uncordoned-node-gets-restore-grace-too",
        (finding(LOW, name="gpu-a", workload_kind="Node"),),
        objects=(node("gpu-a", annotations={names.RESTORED_AT: ago(hours=2)}), node("gpu-b")),
        skips={"/Node/gpu-a": SkipReason.RESTORE_GRACE},
    ),
    Case(
        "hpa-managed-workload-is-not-scaled",
        (finding(IDLE),),
        extra=(hpa("api"),),
        skips={API: SkipReason.AUTOSCALED},
    ),
    Case(
        "keda-managed-workload-is-not-scaled",
        (finding(IDLE),),
        extra=(hpa("api", kind="ScaledObject"),),
        skips={API: SkipReason.AUTOSCALED},
    ),
    Case(
        "hpa-in-another-namespace-does-not-count",
        (finding(IDLE),),
        extra=(hpa("api", namespace="team-a"),),
        actions=(SCALE_API,),
        skips={},
    ),
    Case(
        "hpa-managed-workload-can-still-be-notified",
        (finding(LOW),),
        extra=(hpa("api"),),
        actions=(f"notify {API}",),
    ),
    Case(
        "gitops-skip-policy-skips-argo-managed",
        (finding(IDLE),),
        objects=(
            deployment(annotations={names.ARGO_CD_TRACKING_ANNOTATION: "shop:apps/Deployment:serving/api"}),
        ),
        policy={"safety": {"gitops": "skip"}},
        skips={API: SkipReason.GITOPS_MANAGED},
    ),
    Case(
        "dedupe-one-action-per-target",
        (finding(IDLE, wasted=6.0), finding(LOW, wasted=3.0)),
        actions=(SCALE_API,),
        skips={API: SkipReason.DUPLICATE},
    ),
    Case(
        "first-run-awaits-confirmation",
        (finding(IDLE),),
        policy={"safety": {"consecutiveRuns": 2}},
        skips={API: SkipReason.AWAITING_CONFIRMATION},
    ),
    Case(
        "second-consecutive-run-acts",
        (finding(IDLE),),
        policy={"safety": {"consecutiveRuns": 2}},
        state={API: streak(1)},
        actions=(SCALE_API,),
    ),
    Case(
        "a-gap-between-runs-restarts-the-count",
        (finding(IDLE),),
        policy={"safety": {"consecutiveRuns": 2, "confirmationMaxGap": "3h"}},
        state={API: streak(1, last_seen=NOW - timedelta(hours=5))},
        skips={API: SkipReason.AWAITING_CONFIRMATION},
    ),
    Case(
        "a-streak-for-another-action-does-not-count",
        (finding(IDLE),),
        policy={"safety": {"consecutiveRuns": 2}},
        state={API: streak(1, action="cordon")},
        skips={API: SkipReason.AWAITING_CONFIRMATION},
    ),
    Case(
        "notify-needs-no-confirmation",
        (finding(LOW),),
        policy={"safety": {"consecutiveRuns": 3}},
        actions=(f"notify {API}",),
    ),
    Case(
        "rule-for-duration-not-yet-held",
        (finding(IDLE),),
        policy=HELD_12H,
        skips={API: SkipReason.NOT_HELD_LONG_ENOUGH},
    ),
    Case(
        "rule-for-duration-held-across-runs",
        (finding(IDLE),),
        policy=HELD_12H,
        state={API: streak(6, since=NOW - timedelta(hours=13))},
        actions=(SCALE_API,),
    ),
    Case(
        "max-actions-per-run-keeps-the-biggest-waste",
        (finding(IDLE, wasted=1.0), finding(IDLE, namespace="team-a", wasted=9.0)),
        policy={"safety": {"maxActionsPerRun": 1}},
        actions=("scale_to_zero team-a/Deployment/api",),
        skips={API: SkipReason.ACTION_CAP},
    ),
    Case(
        "max-actions-zero-means-report-only",
        (finding(IDLE), finding(LOW, name="web", namespace="team-a")),
        policy={"safety": {"maxActionsPerRun": 0}},
        actions=("notify team-a/Deployment/web",),
        skips={API: SkipReason.ACTION_CAP},
    ),
    Case(
        "cordon-share-caps-nodes-per-run",
        tuple(finding(LOW, name=f"gpu-{i}", workload_kind="Node", wasted=10.0 - i) for i in range(3)),
        objects=tuple(node(f"gpu-{i}") for i in range(10)),
        policy={"safety": {"maxCordonShare": 0.2}},
        actions=("cordon /Node/gpu-0", "cordon /Node/gpu-1"),
        skips={"/Node/gpu-2": SkipReason.CORDON_CAP},
    ),
    Case(
        "cordon-share-rounds-down-on-small-clusters",
        (finding(LOW, name="gpu-a", workload_kind="Node"),),
        policy={"safety": {"maxCordonShare": 0.4}},
        skips={"/Node/gpu-a": SkipReason.CORDON_CAP},
    ),
    Case(
        "non-gpu-nodes-do-not-raise-the-cordon-share",
        (finding(LOW, name="gpu-a", workload_kind="Node"),),
        objects=(node("gpu-a"), *(node(f"cpu-{i}", gpus=0) for i in range(8))),
        policy={"safety": {"maxCordonShare": 0.5}},
        skips={"/Node/gpu-a": SkipReason.CORDON_CAP},
    ),
    Case("no-findings-no-plan", ()),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_safety_rules(case: Case) -> None:
    p = run_case(case)
    assert p.blocked is None
    assert sorted(f"{a.action.value} {a.key}" for a in p.actions) == sorted(case.actions)
    assert {s.target.key(): s.reason for s in p.skips} == dict(case.skips)


def test_stale_findings_block_every_action() -> None:
    old = TimeWindow.ending(NOW - timedelta(hours=2), timedelta(hours=6))
    p = plan(report(finding(IDLE, window=old), window=old), make_snapshot(BASE_OBJECTS), make_policy(), NOW)
    assert p.blocked is not None and "stale" in p.blocked
    assert p.actions == () and p.skips == ()


def test_argo_and_flux_managed_workloads_are_flagged() -> None:
    objects = (
        deployment(annotations={names.ARGO_CD_TRACKING_ANNOTATION: "shop:apps/Deployment:serving/api"}),
        deployment("api", namespace="team-a", labels={names.FLUX_KUSTOMIZE_LABEL: "apps"}),
    )
    p = plan(
        report(finding(IDLE), finding(IDLE, namespace="team-a")), make_snapshot(objects), make_policy(), NOW
    )
    flags = {a.key: a.flags for a in p.actions}
    assert "Argo CD application shop" in flags[API][0]
    assert "Flux Kustomization apps" in flags["team-a/Deployment/api"][0]
    assert all("undo" in f[0] for f in flags.values())


def test_planned_action_carries_what_the_executor_needs() -> None:
    p = run_case(Case("x", (finding(IDLE, gpus=2),)))
    (a,) = p.actions
    assert a.action is Action.SCALE_TO_ZERO
    assert a.replicas == 2 and a.resource_version == "1"
    assert a.gpu_count == 2 and a.gpu_hours_per_day == 48.0 and a.cost_per_day == 96.0
    assert a.reason == "idle endpoint on 2 GPUs (mean 0.2 %, max 0.9 % utilization) (rule idle)"
    assert a.rule == "idle"


def test_reasons_give_the_rules_hold_time_not_the_window() -> None:
    """A 6h window, a rule that wants 12h: the reason says what the rule held it for."""
    held = Case(
        "x", (finding(IDLE),), policy=HELD_12H, state={API: streak(6, since=NOW - timedelta(hours=13))}
    )
    (a,) = run_case(held).actions
    assert a.reason == "idle endpoint on 1 GPU (mean 0.2 %, max 0.9 % utilization) (rule r, for: 12h)"
    assert "6h" not in a.reason
    (skip,) = run_case(Case("y", (finding(IDLE),), policy=HELD_12H)).skips
    assert skip.detail == "held for 6h; rule r, for: 12h"
    awaiting = Case("z", (finding(IDLE),), policy={"safety": {"consecutiveRuns": 2}})
    (skip,) = run_case(awaiting).skips
    assert skip.detail == "seen on 1 of 2 consecutive runs; would scale to zero after 1 more"


def test_mig_slices_reclaim_their_share_of_a_gpu_per_day() -> None:
    """Two 1g.10gb slices of 7-slice GPUs are 2/7 of a GPU: 24 × 2/7 GPU-hours a day, not 48."""
    evidence = {"mean_util_percent": 0.2, "max_util_percent": 0.9, "gpu_equivalents": 0.2857}
    p = run_case(Case("x", (finding(IDLE, gpus=2, evidence=evidence),)))
    (a,) = p.actions
    assert a.gpu_count == 2
    assert a.gpu_hours_per_day == pytest.approx(24 * 0.2857)
    assert a.cost_per_day == pytest.approx(24 * 0.2857 * 2.0)


def test_next_state_counts_streaks_of_eligible_candidates_only() -> None:
    objects = (*BASE_OBJECTS, deployment("web", namespace="serving", annotations={names.EXCLUDE: "true"}))
    state = {API: streak(1), "serving/Deployment/gone": streak(3)}
    p = plan(
        report(finding(IDLE), finding(IDLE, name="web"), finding(LOW, namespace="team-a")),
        make_snapshot(objects, state),
        make_policy(safety={"consecutiveRuns": 3}),
        NOW,
    )
    entries = p.next_state.entries
    assert set(entries) == {API}  # excluded and notify-only targets are not counted; vanished ones drop
    assert entries[API].count == 2 and entries[API].last_seen == NOW
    assert entries[API].since == WINDOW.start - timedelta(hours=1)
    assert {s.reason for s in p.skips} == {
        SkipReason.AWAITING_CONFIRMATION,
        SkipReason.EXCLUDED_BY_ANNOTATION,
    }


def test_plan_needs_an_aware_now() -> None:
    with pytest.raises(ValueError, match="timezone"):
        plan(report(), make_snapshot(()), make_policy(), NOW.replace(tzinfo=None))


ROUTE_POLICY = {
    "slack": {
        "channel": "#gpu-waste",
        "routes": [
            {"namespaces": ["team-*"], "channel": "#teams"},
            {"namespaces": ["team-a"], "channel": "#never"},
        ],
    }
}


@pytest.mark.parametrize(
    ("ns_annotation", "rule_channel", "ns", "expected"),
    [
        pytest.param("#owners", "#rule", "team-a", "#owners", id="namespace-annotation-wins"),
        pytest.param(None, "#rule", "team-a", "#rule", id="rule-channel-next"),
        pytest.param(None, None, "team-a", "#teams", id="first-matching-route"),
        pytest.param(None, None, "serving", "#gpu-waste", id="default-channel-last"),
        pytest.param(None, None, "", "#gpu-waste", id="nodes-go-to-the-default"),
    ],
)
def test_slack_routing(ns_annotation: str | None, rule_channel: str | None, ns: str, expected: str) -> None:
    policy = make_policy(**ROUTE_POLICY)
    rule = policy.rules[0].model_copy(update={"channel": rule_channel})
    snap = make_snapshot(
        (namespace(ns or "x", **({"gpu-reaper_slack-channel": ns_annotation} if ns_annotation else {})),)
    )
    assert route_channel(snap.namespaces.get(ns), ns, rule, policy) == expected


def test_skips_for_owners_carry_their_channel() -> None:
    p = plan(
        report(finding(IDLE)),
        make_snapshot((*BASE_OBJECTS, hpa("api"))),
        make_policy(slack={"channel": "#gpu-waste"}),
        NOW,
    )
    (skip,) = p.skips
    assert skip.reason.tells_owner and skip.channel == "#gpu-waste"
    assert "HorizontalPodAutoscaler serving/api-scaler" in skip.detail


# --- ownership: the root controller is what is stopped, or nothing is ---------------------------------

OWNED_RULES = {
    "rules": [
        {
            "name": "idle",
            "match": {
                "findings": ["idle_endpoint"],
                "kinds": ["Deployment", "StatefulSet", "RayCluster", "Job"],
            },
            "action": "scale_to_zero",
        }
    ]
}
ALICE = "research/StatefulSet/alice"


def owned(kind: str, name: str) -> Finding:
    return finding(IDLE, name=name, namespace="research", workload_kind=kind)


def notebook(**annotations: str) -> tuple[dict[str, Any], ...]:
    root, sts = controllers.notebook("research", "alice", LONG_AGO)
    if annotations:
        root["metadata"]["annotations"] = annotations
    return (root, sts)


def restarted(minutes: int, updated: int) -> dict[str, Any]:
    """Created 30 days ago, ``kubectl rollout restart`` ``minutes`` ago, ``updated`` of 2 replicas rolled."""
    d = controllers.deployment("research", "api", LONG_AGO, replicas=2)
    d["metadata"]["generation"] = 2
    d["spec"]["template"]["metadata"]["annotations"] = {names.RESTARTED_AT: ago(minutes=minutes)}
    d["status"] |= {"observedGeneration": 2, "updatedReplicas": updated}
    return d


@dataclass(frozen=True)
class OwnerCase:
    id: str
    findings: tuple[Finding, ...]
    objects: tuple[dict[str, Any], ...]
    actions: tuple[str, ...] = ()  # "ACTION TARGET -> WRITTEN"
    skips: Mapping[str, SkipReason] = field(default_factory=dict)
    says: str = ""  # in the reason of the action or the detail of the skip


OWNER_CASES = [
    OwnerCase(
        "a-notebooks-statefulset-stops-the-notebook",
        (owned("StatefulSet", "alice"),),
        notebook(),
        actions=(f"scale_to_zero {ALICE} -> research/Notebook/alice",),
    ),
    OwnerCase(
        "a-stopped-notebook-is-already-done",
        (owned("StatefulSet", "alice"),),
        notebook(**{names.KUBEFLOW_STOPPED: ago(hours=1)}),
        skips={ALICE: SkipReason.ALREADY_DONE},
        says=f"Notebook research/alice already annotated {names.KUBEFLOW_STOPPED}",
    ),
    OwnerCase(
        "an-opt-out-on-the-root-covers-its-children",
        (owned("StatefulSet", "alice"),),
        notebook(**{names.EXCLUDE: "true"}),
        skips={ALICE: SkipReason.EXCLUDED_BY_ANNOTATION},
        says="Notebook research/alice is annotated gpu-reaper/exclude=true",
    ),
    OwnerCase(
        "an-owner-without-an-actuator-is-controller-managed",
        (owned("Deployment", "fraud-default-0-model"),),
        tuple(controllers.owned_by_unknown_controller("research", "fraud", LONG_AGO)),
        skips={"research/Deployment/fraud-default-0-model": SkipReason.CONTROLLER_MANAGED},
        says="controlled by SeldonDeployment research/fraud",
    ),
    OwnerCase(
        "a-rayservice-is-only-reported",
        (owned("RayCluster", controllers.ray_service("research", "serve", LONG_AGO)[1]["metadata"]["name"]),),
        tuple(controllers.ray_service("research", "serve", LONG_AGO)),
        actions=("notify research/RayCluster/serve-raycluster-* -> research/RayService/serve",),
        says="RayService has no safe native stop",
    ),
    OwnerCase(
        "a-knative-service-says-what-keeps-it-up",
        (owned("Deployment", "fn-00001-deployment"),),
        tuple(controllers.knative_service("research", "fn", LONG_AGO, min_scale=1)),
        actions=("notify research/Deployment/fn-00001-deployment -> research/KnativeService/fn",),
        says="autoscaling.knative.dev/min-scale=1",
    ),
    OwnerCase(
        # Knative's HPA autoscaling class scales the revision's Deployment with an HPA: it is reported
        # all the same (row 8 reads the action to take, the notification row 6 made of the stop).
        "a-knative-deployment-under-an-hpa-is-reported-not-autoscaled",
        (owned("Deployment", "fn-00001-deployment"),),
        (
            *controllers.knative_service("research", "fn", LONG_AGO, min_scale=1),
            hpa("fn-00001-deployment", namespace="research"),
        ),
        actions=("notify research/Deployment/fn-00001-deployment -> research/KnativeService/fn",),
    ),
    OwnerCase(
        "a-job-without-kueue-is-only-reported",
        (owned("Job", "plain"),),
        (manifest("Job", "plain", "research", created=LONG_AGO, spec=gpu_spec(1, suspend=False)),),
        actions=("notify research/Job/plain -> research/Job/plain",),
        says="Kueue does not manage",
    ),
    OwnerCase(
        "a-kueue-job-is-suspended",
        (owned("Job", "sweep"),),
        tuple(controllers.kueue_job("research", "sweep", LONG_AGO)),
        actions=("scale_to_zero research/Job/sweep -> research/Job/sweep",),
    ),
    OwnerCase(
        "a-rollout-in-progress-is-skipped",
        (owned("Deployment", "api"),),
        (restarted(minutes=10, updated=1),),
        skips={"research/Deployment/api": SkipReason.ROLLOUT_IN_PROGRESS},
        says="1 of 2 replicas updated",
    ),
    OwnerCase(
        "restarted-ten-minutes-ago-is-in-grace",
        (owned("Deployment", "api"),),
        (restarted(minutes=10, updated=2),),
        skips={"research/Deployment/api": SkipReason.CREATION_GRACE},
        says=f"restarted ({names.RESTARTED_AT}) 10m ago",
    ),
    OwnerCase(
        "restarted-two-hours-ago-is-fair-game",
        (owned("Deployment", "api"),),
        (restarted(minutes=120, updated=2),),
        actions=("scale_to_zero research/Deployment/api -> research/Deployment/api",),
    ),
    OwnerCase(
        "a-leader-and-a-worker-statefulset-are-one-action-on-the-leaderworkerset",
        (owned("StatefulSet", "vllm"), owned("StatefulSet", "vllm-0")),
        tuple(controllers.leader_worker_set("research", "vllm", LONG_AGO)),
        actions=("scale_to_zero research/StatefulSet/vllm -> research/LeaderWorkerSet/vllm",),
        skips={"research/StatefulSet/vllm-0": SkipReason.DUPLICATE},
    ),
]


@pytest.mark.parametrize("case", OWNER_CASES, ids=[c.id for c in OWNER_CASES])
def test_ownership_rules(case: OwnerCase) -> None:
    objects = (namespace("research"), *case.objects)
    p = plan(report(*case.findings), make_snapshot(objects), make_policy(**OWNED_RULES), NOW)
    got = sorted(f"{a.action.value} {a.key} -> {a.written.key()}" for a in p.actions)
    assert [fnmatch.fnmatchcase(g, w) for g, w in zip(got, sorted(case.actions), strict=True)] == [
        True
    ] * len(got)
    assert {s.target.key(): s.reason for s in p.skips} == dict(case.skips)
    if case.says:
        texts = [a.reason for a in p.actions] + [s.detail for s in p.skips]
        assert any(case.says in t for t in texts), texts


# --- rules that are only rules: pure checks, whatever order they run in -------------------------------

INDEPENDENT_ROWS = {"1", "2", "3", "4", "5", "7a", "7b", "7c", "10"}  # as the module docstring says

VARIANTS: tuple[Mapping[str, Any], ...] = (
    {},
    {"safety": {"consecutiveRuns": 2}},
    {"safety": {"maxActionsPerRun": 1}},
    {"safety": {"gitops": "skip", "consecutiveRuns": 3}},
    {"safety": {"maxCordonShare": 0.3, "maxActionsPerRun": 2}},
    {
        "rules": [
            {
                "name": "held",
                "match": {"findings": ["idle_endpoint", "low_utilization"], "for": "12h"},
                "action": "scale_to_zero",
            },
            {
                "name": "nodes",
                "match": {"findings": ["low_utilization"], "kinds": ["Node"]},
                "action": "cordon",
            },
        ]
    },
    {
        "rules": [
            {
                "name": "noticed",
                "match": {"findings": ["idle_endpoint", "low_utilization"]},
                "action": "scale_to_zero",
                "notice": "2h",
            },
            {
                "name": "nodes",
                "match": {"findings": ["low_utilization"], "kinds": ["Node"]},
                "action": "cordon",
                "notice": "1h",
            },
        ]
    },
)

# Findings several rows hold back at once, so that the precedence of their reasons is exercised.
CROWDED = (
    finding(UNKNOWN, namespace="kube-system"),  # 1 and 2
    finding(IDLE, name="web", namespace="team-a"),  # 4 (exclude.workloads) and 5, then 7c and 8
    finding(IDLE, namespace="team-a", wasted=5.0),  # 8, 9 and 11a
    finding(LOW, name="cpu-1", workload_kind="Node"),  # 6d and 6e
    finding(LOW, name="gpu-a", workload_kind="Node", wasted=9.0),
    finding(LOW, name="gpu-b", workload_kind="Node", wasted=8.0),  # 7c, before 11a and 12b
    finding(IDLE, wasted=7.0),
    finding(LOW, wasted=0.5),  # serving/api again: 10 once the idle finding acts
    finding(IDLE, name="gone", wasted=1.0),  # 6a
)
CROWDED_OBJECTS = (
    namespace("serving"),
    namespace("team-a"),
    namespace("kube-system"),
    deployment("api", annotations={names.RESTORED_AT: ago(hours=30)}),
    deployment(
        "api",
        namespace="team-a",
        annotations={names.ARGO_CD_TRACKING_ANNOTATION: "shop:apps/Deployment:team-a/api"},
    ),
    deployment(
        "web",
        namespace="team-a",
        annotations={names.EXCLUDE_UNTIL: later(hours=1), names.RESTORED_AT: ago(hours=2)},
    ),
    hpa("api", namespace="team-a"),
    hpa("web", namespace="team-a"),
    node("gpu-a"),
    node("gpu-b", annotations={names.RESTORED_AT: ago(hours=1)}),
    node("cpu-1", gpus=0, unschedulable=True),
)
CROWDED_POLICIES: tuple[Mapping[str, Any], ...] = (
    {},
    {"exclude": {"workloads": ["team-a/web"]}},
    {"safety": {"maxCordonShare": 0.5, "consecutiveRuns": 2}},
)


def _rich_inputs() -> list[tuple[str, FindingsReport, ClusterSnapshot, Policy]]:
    """Every table case, under every variant of the policy, and some crowded runs."""
    out = []
    for case in CASES:
        snapshot = make_snapshot(case.objects + case.extra, case.state)
        for i, variant in enumerate(VARIANTS):
            policy = make_policy(**_merge(case.policy, variant))
            out.append((f"{case.id}/{i}", report(*case.findings), snapshot, policy))
    for owner_case in OWNER_CASES:
        snapshot = make_snapshot((namespace("research"), *owner_case.objects))
        for i, variant in enumerate(VARIANTS):
            policy = make_policy(**_merge(OWNED_RULES, variant))
            out.append((f"{owner_case.id}/{i}", report(*owner_case.findings), snapshot, policy))
    states: tuple[Mapping[str, Confirmation], ...] = (
        {},
        {API: streak(1), "/Node/gpu-a": streak(1, action="cordon")},
    )
    for s, state in enumerate(states):
        snapshot = make_snapshot(CROWDED_OBJECTS, state)
        for i, override in enumerate(CROWDED_POLICIES):
            for j, variant in enumerate(VARIANTS):
                policy = make_policy(**_merge(override, variant))
                out.append((f"crowded/{s}/{i}/{j}", report(*CROWDED), snapshot, policy))
    return out


RICH = _rich_inputs()


def _plans() -> list[Plan]:
    return [plan(r, snapshot, policy, NOW) for _, r, snapshot, policy in RICH]


def _shuffled(rng: random.Random) -> tuple[SafetyRule, ...]:
    """RULES in a random order that keeps each rule after the rules whose verdicts it reads."""
    left = list(RULES)
    out: list[SafetyRule] = []
    while left:
        placed = {r.check for r in out}
        pick = rng.choice([r for r in left if set(r.after) <= placed])
        out.append(pick)
        left.remove(pick)
    return tuple(out)


# The independent rows last and backwards, after every row that reads an earlier verdict.
MATCH_FIRST = next(r for r in RULES if r.check is planner.first_matching_rule)
BACKWARDS = (
    MATCH_FIRST,
    *(r for r in RULES if r.after),
    *reversed([r for r in RULES if not r.after and r is not MATCH_FIRST]),
)


def test_rules_are_the_documented_table_in_order() -> None:
    rows = [r.row for r in RULES]
    assert len(set(rows)) == len(rows)
    assert [r.rank for r in RULES] == sorted(r.rank for r in RULES)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "reaper.md").read_text(encoding="utf-8")
    table = doc.split("## Safety rules", 1)[1].split("\n## ", 1)[0]
    documented = {int(n) for n in re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)}
    assert {r.rank[0] for r in RULES} == documented == set(range(1, 13))
    for i, rule in enumerate(RULES):
        earlier = {r.check for r in RULES[:i]}
        assert set(rule.after) <= earlier, f"{rule.row} reads a later row"
    assert {r.row for r in RULES if not r.after} == INDEPENDENT_ROWS


@pytest.mark.parametrize("order", ["backwards", *(f"seed-{seed}" for seed in range(10))])
def test_reordering_the_rules_changes_no_plan(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any order that keeps each rule after those it reads gives the same actions, skips and state."""
    rules = BACKWARDS if order == "backwards" else _shuffled(random.Random(order))
    assert rules != RULES and sorted(r.row for r in rules) == sorted(r.row for r in RULES)
    expected = _plans()
    monkeypatch.setattr(planner, "RULES", rules)
    for (case_id, *_), want, got in zip(RICH, expected, _plans(), strict=True):
        assert got == want, case_id


def test_the_earliest_row_names_the_reason_whatever_ran_first(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = make_snapshot(CROWDED_OBJECTS)
    policy = make_policy(exclude={"workloads": ["team-a/web"]}, safety={"consecutiveRuns": 2})
    expected = plan(report(*CROWDED), snapshot, policy, NOW)
    monkeypatch.setattr(planner, "RULES", BACKWARDS)
    got = plan(report(*CROWDED), snapshot, policy, NOW)
    assert got == expected
    reasons = {s.target.key(): s.reason for s in got.skips}
    assert reasons["kube-system/Deployment/api"] is SkipReason.UNKNOWN  # not protected_namespace
    assert reasons["team-a/Deployment/web"] is SkipReason.EXCLUDED_BY_POLICY  # not the opt-out, nor grace
    assert reasons["/Node/cpu-1"] is SkipReason.NOT_A_GPU_NODE  # not already_done
    assert reasons["team-a/Deployment/api"] is SkipReason.AUTOSCALED  # not gitops nor awaiting_confirmation
    assert reasons["/Node/gpu-b"] is SkipReason.RESTORE_GRACE  # 7c comes before 11a: no streak recorded
    assert reasons["/Node/gpu-a"] is SkipReason.AWAITING_CONFIRMATION
    # Only the streaks of findings that got as far as row 11a are recorded.
    assert set(got.next_state.entries) == {API, "/Node/gpu-a"}


def _purity_checked(rule: SafetyRule, gave: set[str]) -> SafetyRule:
    def check(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
        # The snapshot and the policy are compared once the plans are made (their repr is long).
        before = copy.copy(c), copy.copy(d), copy.copy(p), frozenset(p.targets)
        first = rule.check(c, d, p)
        assert rule.check(c, d, p) == first, f"{rule.row}: another verdict the second time"
        assert (c, d, p, frozenset(p.targets)) == before, f"{rule.row} changed what it read"
        if first is not None:
            gave.add(rule.row)
        return first

    return replace(rule, check=check)


@pytest.mark.parametrize("order", ["table", "backwards"])
def test_every_rule_is_pure(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Called twice on the same candidate, a rule gives the same verdict and changes nothing it reads."""
    expected = _plans()
    gave: set[str] = set()
    rules = RULES if order == "table" else BACKWARDS
    monkeypatch.setattr(planner, "RULES", tuple(_purity_checked(r, gave) for r in rules))
    inputs = [repr((snapshot, policy)) for _, _, snapshot, policy in RICH]
    assert _plans() == expected
    assert [repr((snapshot, policy)) for _, _, snapshot, policy in RICH] == inputs
    assert gave == {r.row for r in RULES}  # the data gets a verdict out of every rule


def test_each_rule_reads_only_the_verdicts_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given only the verdicts of the rules in its ``after``, a rule says what it says given them all."""
    seen: dict[int, tuple[Candidate, dict[RuleCheck, Verdict]]] = {}

    def named_only(rule: SafetyRule) -> SafetyRule:
        def check(c: Candidate, d: Decided, p: Planning) -> Verdict | None:
            verdicts = seen.setdefault(id(c), (c, {}))[1]
            own = UNDECIDED
            for earlier in RULES:
                if earlier.check in rule.after and earlier.check in verdicts:
                    own = apply_verdict(own, verdicts[earlier.check])
            verdict = rule.check(c, d, p)
            assert rule.check(c, own, p) == verdict, f"{rule.row} reads a verdict it does not name"
            if verdict is not None:
                verdicts[rule.check] = verdict
            return verdict

        return replace(rule, check=check)

    expected = _plans()
    monkeypatch.setattr(planner, "RULES", tuple(named_only(r) for r in RULES))
    assert _plans() == expected


def test_for_counts_only_the_time_the_runs_windows_judged() -> None:
    """Hourly runs of a 1h window, two of them missed (within confirmationMaxGap): 3h judged of the
    5h since the streak began. A `for: 4h` rule waits; the gaps are never counted as held."""
    policy = make_policy(
        window="1h",
        safety={"consecutiveRuns": 1, "confirmationMaxGap": "3h"},
        rules=[
            {"name": "r", "match": {"findings": ["idle_endpoint"], "for": "4h"}, "action": "scale_to_zero"}
        ],
    )
    state = ReaperState()
    decided = []
    for hours_ago in (4, 3, 0):  # runs at -4h, -3h and now; -2h and -1h missed
        at = NOW - timedelta(hours=hours_ago)
        found = report(finding(IDLE, window=TimeWindow.ending(at, timedelta(hours=1))))
        p = plan(found, replace(make_snapshot(BASE_OBJECTS), state=state), policy, at)
        state = p.next_state
        decided.append([s.detail for s in p.skips] or [a.key for a in p.actions])
    assert decided[-1] == ["held for 3h; rule r, for: 4h"]  # not the 5h since the first window began
    assert state.entries[API].observed == timedelta(hours=3)
    # A window covering the time between runs counts it all, as before.
    covered = make_policy(window="6h", safety={"consecutiveRuns": 1}, rules=policy.model_dump()["rules"])
    first = plan(report(finding(IDLE)), make_snapshot(BASE_OBJECTS), covered, NOW - timedelta(hours=1))
    p = plan(
        report(finding(IDLE)), replace(make_snapshot(BASE_OBJECTS), state=first.next_state), covered, NOW
    )
    assert [a.key for a in p.actions] == [API]  # 6h, then one more hour: 7h judged


def test_streaks_recorded_before_judged_time_was_kept_count_from_their_start() -> None:
    old = {API: streak(6, since=NOW - timedelta(hours=13), last_seen=NOW - timedelta(hours=1))}
    p = run_case(Case("x", (finding(IDLE),), policy=HELD_12H, state=old))
    assert [a.key for a in p.actions] == [API]
    assert p.next_state.entries[API].observed == timedelta(hours=13)
