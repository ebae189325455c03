"""``when: demand``: a rule acts only while pending GPU work would use what it frees.

The real kubernetes client against the emulator (harness.kube_emulator): pods Pending as the
scheduler leaves them (``PodScheduled`` False, reason ``Unschedulable``), Kueue Workloads waiting for
admission, GPU nodes labelled with their product, idle Deployments holding GPUs on them. A run in
apply mode must stop the most wasteful of them that meet the demand, on one node for a pod asking
several GPUs, and no more; without demand it stops nothing and says why.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest

from common.errors import PolicyError
from common.model import Finding, FindingKind
from harness.findings import NOW, finding, report
from harness.kube_emulator import EmulatedCluster, Fault
from reaper import names
from reaper.demand import NO_DEMAND
from reaper.messages import preview
from reaper.outcomes import Outcome
from reaper.plan_report import PlanView, render_plan_section
from reaper.planner import SkipReason
from reaper.policy import Policy, RunMode, explain, parse_policy
from reaper.runner import RunReport, RunSettings, run
from simulation import controllers
from simulation.in_memory_cluster import manifest

NS = "ml"
LONG_AGO = NOW - timedelta(days=3)
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
MIG = "nvidia.com/mig-1g.10gb"
POLICY = """\
safety: {consecutiveRuns: 1}
slack: {channel: "#gpu-reclaim"}
rules:
  - name: when-wanted
    match: {findings: [idle_endpoint]}
    action: scale_to_zero
    when: demand
"""


def _node(name: str, product: str, gpus: int = 8, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product}
    return manifest("Node", name, labels=labels, created=LONG_AGO, status={"capacity": {resource: str(gpus)}})


def _idle(name: str, node: str, *, gpus: int = 1, wasted: float, resource: str = "nvidia.com/gpu") -> tuple:
    """An idle Deployment holding ``gpus`` of ``resource`` on ``node``, and its finding."""
    obj = controllers.deployment(NS, name, LONG_AGO, gpus=gpus)
    obj["spec"]["template"] = controllers.pod_template(name, gpus, {"app": name}, resource=resource)
    found = finding(FindingKind.IDLE_ENDPOINT, name=name, namespace=NS, gpus=gpus, wasted=wasted)
    return obj, found.model_copy(update={"nodes": (node,)})


def _pending(
    name: str,
    gpus: int = 1,
    *,
    resource: str = "nvidia.com/gpu",
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    scheduled: Mapping[str, str] | None = None,
    node: str | None = None,
) -> dict[str, Any]:
    """A pod as the scheduler leaves one it cannot place (or, with ``scheduled``, that condition)."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "registry.example/x:1", "resources": {"limits": {resource: str(gpus)}}}
        ]
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    if node:
        spec["nodeName"] = node
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"} | dict(scheduled or {})
    status = {"phase": "Pending", "conditions": [condition]}
    return manifest("Pod", name, NS, created=NOW - timedelta(minutes=5), spec=spec, status=status)


@pytest.fixture
def ml(cluster: EmulatedCluster) -> EmulatedCluster:
    cluster.declare("Pod")
    cluster.seed([manifest("Namespace", n) for n in (NS, "gpu-reaper")])
    return cluster


def _policy() -> Policy:
    return parse_policy(POLICY, "policy.yaml")


def _run(cluster: EmulatedCluster, findings: list[Finding], mode: RunMode = RunMode.APPLY) -> RunReport:
    settings = RunSettings(policy=_policy(), mode=mode, namespace="gpu-reaper", end=NOW)
    done = run(settings, lambda window, thresholds: report(*findings), cluster.client)
    assert done.error is None, done.error
    return done


def _seed(cluster: EmulatedCluster, *objects: Any) -> list[Finding]:
    found = []
    for o in objects:
        if isinstance(o, tuple):
            cluster.seed([o[0]])
            found.append(o[1])
        else:
            cluster.seed([o])
    return found


def _stopped(cluster: EmulatedCluster) -> set[str]:
    return {d["metadata"]["name"] for d in cluster.objects("Deployment") if d["spec"]["replicas"] == 0}


def _skips(done: RunReport) -> dict[str, tuple[SkipReason, str]]:
    assert done.plan is not None
    return {s.target.name: (s.reason, s.detail) for s in done.plan.skips}


def test_without_pending_pods_nothing_is_stopped_and_the_plan_says_why(ml: EmulatedCluster) -> None:
    found = _seed(ml, _node("gpu-a", H100), _idle("idle", "gpu-a", wasted=20.0))
    ml.seed([_pending("running", scheduled={"status": "True", "reason": ""}, node="gpu-a")])
    done = _run(ml, found)
    reason, detail = _skips(done)["idle"]
    assert reason is SkipReason.NO_DEMAND
    # No Kueue CRD: the Workload list answers 404, which is "no Kueue demand", said so.
    assert (
        detail
        == f"{NO_DEMAND}: no pod is pending unschedulable for a GPU; Kueue not installed: no Kueue demand"
    )
    assert done.summary_line().endswith("planned=0 applied=0 skipped=1 failed=0 pending_gpus=0")
    assert _stopped(ml) == set()


def test_one_pending_gpu_stops_only_the_most_wasteful_candidate(ml: EmulatedCluster) -> None:
    found = _seed(
        ml,
        _node("gpu-a", H100),
        _idle("small", "gpu-a", wasted=5.0),
        _idle("big", "gpu-a", wasted=20.0),
        _idle("mid", "gpu-a", wasted=10.0),
        _pending("waiting"),
    )
    done = _run(ml, found)
    assert _stopped(ml) == {"big"}
    (result,) = done.results
    assert result.outcome is Outcome.APPLIED and result.action.pending_gpus == 1
    assert result.action.demand == "Pod ml/waiting (1 × nvidia.com/gpu)"
    skips = _skips(done)
    assert {n: r for n, (r, _) in skips.items()} == {
        "small": SkipReason.NO_DEMAND,
        "mid": SkipReason.NO_DEMAND,
    }
    assert (
        skips["mid"][1]
        == f"{NO_DEMAND}: the pending demand it could serve is met by more wasteful candidates"
    )
    assert done.summary_line().endswith("planned=1 applied=1 skipped=2 failed=0 pending_gpus=1")


def test_a_pod_asking_four_gpus_is_met_on_one_node_not_by_singles_spread_over_nodes(
    ml: EmulatedCluster,
) -> None:
    singles = [_idle(f"single-{n}", f"gpu-{n}", wasted=30.0) for n in "bcde"]
    found = _seed(
        ml,
        *(_node(f"gpu-{n}", H100) for n in "abcde"),
        *singles,
        _idle("pair-1", "gpu-a", gpus=2, wasted=8.0),
        _idle("pair-2", "gpu-a", gpus=2, wasted=7.0),
        _idle("pair-3", "gpu-a", gpus=2, wasted=6.0),
        _pending("trainer", gpus=4),
    )
    done = _run(ml, found)
    assert _stopped(ml) == {"pair-1", "pair-2"}
    assert {r.action.target.name: r.action.pending_gpus for r in done.results} == {"pair-1": 4, "pair-2": 4}
    assert all("on one node" in r.action.demand for r in done.results)
    assert _skips(done)["single-b"][0] is SkipReason.NO_DEMAND


def test_a_pod_that_selects_a100s_is_not_served_by_an_idle_h100(ml: EmulatedCluster) -> None:
    found = _seed(
        ml,
        _node("h100-node", H100),
        _node("a100-node", A100),
        _idle("on-h100", "h100-node", wasted=50.0),
        _idle("on-a100", "a100-node", wasted=10.0),
        _pending("wants-a100", node_selector={"nvidia.com/gpu.product": A100}),
    )
    done = _run(ml, found)
    assert _stopped(ml) == {"on-a100"}
    reason, detail = _skips(done)["on-h100"]
    assert reason is SkipReason.NO_DEMAND
    assert f"h100-node ({H100})" in detail and f"nvidia.com/gpu.product={A100}" in detail

    # The same through required node affinity: an H100 now meets a pod that accepts it.
    ml.seed(
        [
            _pending(
                "any-hopper",
                affinity={
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "nvidia.com/gpu.product", "operator": "In", "values": [H100]}
                            ]
                        }
                    ]
                },
            )
        ]
    )
    done = _run(ml, found)
    assert _stopped(ml) == {"on-a100", "on-h100"}


def test_a_pending_mig_slice_is_met_by_an_idle_slice_of_that_profile_not_a_whole_gpu(
    ml: EmulatedCluster,
) -> None:
    found = _seed(
        ml,
        _node("mig-node", A100, gpus=7, resource=MIG),
        _node("gpu-node", A100),
        _idle("whole", "gpu-node", wasted=40.0),
        _idle("slice", "mig-node", wasted=2.0, resource=MIG),
        _pending("wants-slice", resource=MIG),
    )
    done = _run(ml, found)
    assert _stopped(ml) == {"slice"}
    (result,) = done.results
    assert result.action.demand == f"Pod ml/wants-slice (1 × {MIG})"


def _kueue_workload(
    name: str, *, count: int, gpus: int, conditions: list[tuple[str, str]], active: bool = True
) -> dict[str, Any]:
    template = controllers.pod_template(name, gpus)
    return manifest(
        "KueueWorkload",
        f"job-{name}-1a2b3",
        NS,
        created=NOW - timedelta(minutes=10),
        spec={
            "active": active,
            "queueName": "team",
            "podSets": [{"name": "workers", "count": count, "template": template}],
        },
        status={"conditions": [{"type": t, "status": s, "reason": "Pending"} for t, s in conditions]},
    )


def test_a_kueue_workload_waiting_for_quota_is_demand_for_each_of_its_pods(ml: EmulatedCluster) -> None:
    ml.declare("KueueWorkload")
    found = _seed(
        ml,
        _node("gpu-a", H100),
        _idle("a", "gpu-a", wasted=9.0),
        _idle("b", "gpu-a", wasted=8.0),
        _idle("c", "gpu-a", wasted=7.0),
        _kueue_workload("queued", count=2, gpus=1, conditions=[("QuotaReserved", "False")]),
        # Admitted, finished or deactivated (as the reaper deactivates what it stops): nobody waits.
        _kueue_workload(
            "admitted", count=4, gpus=1, conditions=[("QuotaReserved", "True"), ("Admitted", "True")]
        ),
        _kueue_workload("done", count=4, gpus=1, conditions=[("Finished", "True")]),
        _kueue_workload("stopped", count=4, gpus=1, conditions=[], active=False),
    )
    done = _run(ml, found)
    assert _stopped(ml) == {"a", "b"}
    assert {r.action.demand for r in done.results} == {
        "Kueue Workload ml/job-queued-1a2b3 (podSet workers, pod 1 of 2) (1 × nvidia.com/gpu)",
        "Kueue Workload ml/job-queued-1a2b3 (podSet workers, pod 2 of 2) (1 × nvidia.com/gpu)",
    }
    assert done.demand is not None and done.demand.kueue == "1 Kueue Workload waiting for GPUs"


def test_pods_pending_for_other_reasons_are_not_demand(ml: EmulatedCluster) -> None:
    found = _seed(
        ml,
        _node("gpu-a", H100),
        _idle("idle", "gpu-a", wasted=20.0),
        # Scheduled, pulling its image: Pending, but it has its GPU.
        _pending("pulling", scheduled={"status": "True", "reason": ""}, node="gpu-a"),
        # Held by a scheduling gate (Kueue's pod integration): counted through its Workload, if any.
        _pending("gated", scheduled={"reason": "SchedulingGated"}),
        # Unschedulable, but for no GPU.
        manifest(
            "Pod",
            "cpu-only",
            NS,
            spec={"containers": [{"name": "m", "image": "x"}]},
            status={
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
        ),
    )
    done = _run(ml, found)
    assert _stopped(ml) == set()
    assert done.demand is not None and done.demand.wants == ()


def test_pods_the_reaper_may_not_list_leave_demand_unknown_and_nothing_stopped(
    ml: EmulatedCluster, caplog: pytest.LogCaptureFixture
) -> None:
    found = _seed(ml, _node("gpu-a", H100), _idle("idle", "gpu-a", wasted=20.0), _pending("waiting"))
    ml.fail(Fault("GET", "Pod", status=403))
    with caplog.at_level(logging.WARNING):
        done = _run(ml, found)
    assert _stopped(ml) == set()
    reason, detail = _skips(done)["idle"]
    assert reason is SkipReason.NO_DEMAND and detail.startswith(
        f"{NO_DEMAND} that the run could read: pods not listed"
    )
    assert done.summary_line().endswith("pending_gpus=unknown")
    # Said once, naming the chart value that grants it (a chart install without it gets a 403).
    said = [r.getMessage() for r in caplog.records if "rbac.readPendingPods=true" in r.getMessage()]
    assert len(said) == 1 and "may not" in said[0], said


def test_a_dry_run_shows_what_would_be_stopped_and_for_which_demand(ml: EmulatedCluster) -> None:
    found = _seed(
        ml,
        _node("gpu-a", H100),
        _idle("big", "gpu-a", wasted=20.0),
        _idle("small", "gpu-a", wasted=5.0),
        _pending("waiting"),
    )
    done = _run(ml, found, RunMode.DRY_RUN)
    assert _stopped(ml) == set() and ml.mutations() == []
    (result,) = done.results
    assert result.outcome is Outcome.DRY_RUN and result.action.target.name == "big"
    assert (result.action.pending_gpus, result.action.demand) == (1, "Pod ml/waiting (1 × nvidia.com/gpu)")
    assert done.summary_line().endswith("planned=1 applied=0 skipped=1 failed=0 pending_gpus=1")
    assert names.REAPED_AT not in (ml.obj("Deployment", NS, "big")["metadata"].get("annotations") or {})
    # The Slack preview and the HTML plan say the same.
    slack = preview(done.messages)
    assert "For pending GPU work (`pending_gpus=1`): Pod ml/waiting (1 × nvidia.com/gpu)" in slack
    view = PlanView(mode=RunMode.DRY_RUN, policy=_policy(), plan=done.plan, results=done.results)
    html = render_plan_section(view)
    assert "for pending GPU work (pending_gpus=1: Pod ml/waiting (1 × nvidia.com/gpu))" in html
    assert "no_demand</code></td>" in html and "met by more wasteful candidates" in html


def test_policy_check_explains_when_demand_and_refuses_a_malformed_resource_name() -> None:
    policy = parse_policy(POLICY + "demand: {resources: [example.com/accel]}\n", "policy.yaml")
    said = explain(policy)
    assert "when: demand: acts only while pods wait unschedulable" in said
    assert "amd.com/gpu, example.com/accel)" in said
    with pytest.raises(
        PolicyError, match=r"policy.yaml: line 8: demand.resources\[0\]: .*not an extended resource name"
    ):
        parse_policy(POLICY + "demand: {resources: [not a resource]}\n", "policy.yaml")
