"""The executor and restore against kmock's Kubernetes emulator over HTTP, with the real client."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from common.errors import BadInputError
from common.model import FindingKind, FindingsReport
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from harness.kube_emulator import EmulatedCluster, Fault
from reaper import names
from reaper.cluster import read_snapshot
from reaper.executor import Executor
from reaper.outcomes import Outcome
from reaper.planner import plan
from reaper.policy import Policy, RunMode
from reaper.runner import EXIT_ACTION_FAILED, EXIT_OK, RunReport, RunSettings, run
from simulation.in_memory_cluster import manifest

LONG_AGO = NOW - timedelta(days=30)
POLICY: dict[str, Any] = {
    "safety": {"consecutiveRuns": 1, "maxCordonShare": 1.0},
    "rules": [
        {"name": "idle", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"},
        {"name": "nodes", "match": {"findings": ["low_utilization"], "kinds": ["Node"]}, "action": "cordon"},
    ],
}


def deployment(
    name: str, replicas: int = 3, namespace: str = "serving", **annotations: str
) -> dict[str, Any]:
    return manifest(
        "Deployment",
        name,
        namespace,
        labels={"app": name},
        annotations=annotations or None,
        created=LONG_AGO,
        spec=gpu_spec(replicas),
    )


def gpu_node(name: str, **annotations: str) -> dict[str, Any]:
    return manifest(
        "Node",
        name,
        annotations=annotations or None,
        created=LONG_AGO,
        spec={},
        status={"capacity": {"nvidia.com/gpu": "8"}},
    )


def seed(cluster: EmulatedCluster, *objects: dict[str, Any]) -> None:
    namespaces = [manifest("Namespace", n) for n in ("serving", "kube-system", "gpu-reaper", "default")]
    cluster.seed([*namespaces, *objects])


def reaper_run(
    cluster: EmulatedCluster,
    findings: FindingsReport,
    *,
    apply: bool = True,
    policy: dict[str, Any] | None = None,
    timeout: float = 30.0,
    identity: str | None = None,
) -> RunReport:
    settings = RunSettings(
        policy=Policy.model_validate(policy or POLICY),
        mode=RunMode.APPLY if apply else RunMode.DRY_RUN,
        namespace="gpu-reaper",
        end=NOW,
        identity=identity,
    )
    return run(
        settings,
        lambda window, thresholds: findings,
        lambda: cluster.client(timeout=timeout),
        sleep=lambda s: None,
    )


def idle(*names_: str) -> FindingsReport:
    return report(
        *(finding(FindingKind.IDLE_ENDPOINT, name=n, wasted=10.0 - i) for i, n in enumerate(names_))
    )


def patches(cluster: EmulatedCluster, kind_path: str = "/deployments/") -> list[str]:
    return [path for method, path in cluster.requests() if method == "PATCH" and kind_path in path]


def recorded_stops(cluster: EmulatedCluster) -> dict[str, Any]:
    data = cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)["data"]
    return json.loads(data[names.STOPPED_KEY])  # type: ignore[no-any-return]


def test_scale_to_zero_is_one_scale_patch_recorded_first_in_the_configmap(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("ranker", replicas=3))
    result = reaper_run(cluster, idle("ranker"))
    assert result.exit_code == EXIT_OK
    assert result.summary_line() == (
        "gpu-reaper: mode=apply findings=1 planned=1 applied=1 skipped=0 failed=0"
    )
    assert patches(cluster) == ["/apis/apps/v1/namespaces/serving/deployments/ranker/scale"]
    obj = cluster.obj("Deployment", "serving", "ranker")
    assert obj["spec"]["replicas"] == 0
    assert not obj["metadata"].get("annotations"), "nothing but the scale is written on the object"
    entry = recorded_stops(cluster)["objects"]["Deployment.apps serving/ranker"]
    assert entry["original_replicas"] == 3 and entry["uid"] == obj["metadata"]["uid"]
    assert entry["stopped_at"] == "2026-01-05T00:00:00Z"
    assert entry["reason"].startswith("idle endpoint on 1 GPU (mean")
    # The record of what to restore is written before the object ever reaches 0 replicas.
    writes = [p for m, p in cluster.requests() if m in ("PATCH", "POST") and "/events" not in p]
    record = next(i for i, p in enumerate(writes) if "/namespaces/gpu-reaper/configmaps" in p)
    assert record < writes.index("/apis/apps/v1/namespaces/serving/deployments/ranker/scale")
    (event,) = cluster.objects("Event")
    assert event["reason"] == "ScaledToZero" and event["involvedObject"]["name"] == "ranker"
    assert "gpu-reaper restore serving/ranker" in event["message"]


def test_restore_brings_back_the_replicas_and_is_idempotent(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("ranker", replicas=3))
    reaper_run(cluster, idle("ranker"))
    executor = Executor(
        cluster.client(), mode=RunMode.APPLY, namespace="gpu-reaper", clock=lambda: NOW + timedelta(hours=1)
    )

    first = executor.restore_workload("serving", "ranker")
    assert first.outcome is Outcome.APPLIED and first.detail == "3 replicas"
    obj = cluster.obj("Deployment", "serving", "ranker")
    assert obj["spec"]["replicas"] == 3
    assert not obj["metadata"].get("annotations")
    record = recorded_stops(cluster)
    assert record["objects"] == {}
    assert record["restored"] == {"Deployment.apps serving/ranker": "2026-01-05T01:00:00Z"}  # grace begins

    before = len(patches(cluster))
    again = executor.restore_workload("serving", "ranker")
    assert again.outcome is Outcome.SKIPPED and "nothing to restore" in again.detail
    assert len(patches(cluster)) == before
    assert {e["reason"] for e in cluster.objects("Event")} == {"ScaledToZero", "Restored"}


def test_restore_keeps_replicas_someone_already_brought_back(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("ranker", replicas=2))
    reaper_run(cluster, idle("ranker"))
    cluster.client().patch("Deployment", "serving", "ranker", {"spec": {"replicas": 5}})
    seen = len(patches(cluster))
    result = Executor(cluster.client(), mode=RunMode.APPLY, namespace="gpu-reaper").restore_workload(
        "serving", "ranker"
    )
    assert result.outcome is Outcome.SKIPPED and result.detail == "already at 5 replicas; nothing to restore"
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 5
    assert len(patches(cluster)) == seen  # nothing to scale: the record alone forgets it
    assert recorded_stops(cluster)["objects"] == {}


def test_dry_run_makes_no_mutating_request(
    cluster: EmulatedCluster, caplog: pytest.LogCaptureFixture
) -> None:
    seed(cluster, deployment("ranker"), gpu_node("gpu-a"))
    findings = report(
        finding(FindingKind.IDLE_ENDPOINT, name="ranker"),
        finding(FindingKind.LOW_UTILIZATION, name="gpu-a", workload_kind="Node"),
    )
    with caplog.at_level(logging.INFO, logger="reaper"):
        result = reaper_run(cluster, findings, apply=False)
    assert result.exit_code == EXIT_OK
    assert {r.outcome for r in result.results} == {Outcome.DRY_RUN}
    assert cluster.mutations() == []
    assert all(method == "GET" for method, _ in cluster.requests())
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 3
    dry = [r.getMessage() for r in caplog.records if r.getMessage().startswith("DRY-RUN: would")]
    assert any(
        "scale Deployment serving/ranker through its scale subresource from 3 to 0 replicas" in m for m in dry
    )
    assert any("cordon node gpu-a" in m for m in dry)
    assert any("save 2 confirmation streaks" in m for m in dry)
    assert result.summary_line().startswith("gpu-reaper: mode=dry-run findings=2 planned=2 applied=0")


def test_conflict_is_retried_on_the_fresh_version(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("ranker", replicas=3))
    findings = idle("ranker")

    def scaled_up_meanwhile() -> None:
        # Someone changes the object between our snapshot and our patch.
        cluster.client().patch("Deployment", "serving", "ranker", {"spec": {"replicas": 4}})

    client = cluster.client()
    real_list = client.list_objects

    def list_then_race(kind: str, namespace: str | None = None, **options: Any) -> Any:
        items = real_list(kind, namespace, **options)
        if kind == "Deployment":  # the snapshot has read it: the change lands before our patch
            scaled_up_meanwhile()
        return items

    client.list_objects = list_then_race  # type: ignore[method-assign]
    settings = RunSettings(
        policy=Policy.model_validate(POLICY), mode=RunMode.APPLY, namespace="gpu-reaper", end=NOW
    )
    result = run(settings, lambda w, t: findings, lambda: client, sleep=lambda s: None)

    assert result.exit_code == EXIT_OK
    ranker = "/apis/apps/v1/namespaces/serving/deployments/ranker"
    ours = [(m, p.removeprefix(ranker)) for m, p in cluster.requests() if p.startswith(ranker)]
    # Theirs, our 409 on the scale, the re-read, the retry.
    assert ours == [("PATCH", ""), ("PATCH", "/scale"), ("GET", ""), ("PATCH", "/scale")]
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 0
    entry = recorded_stops(cluster)["objects"]["Deployment.apps serving/ranker"]
    assert entry["original_replicas"] == 4  # the fresh count, not the stale 3


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        pytest.param({"spec": {"replicas": 0}}, "already at 0 replicas", id="scaled-down-by-someone-else"),
        pytest.param(
            {"metadata": {"annotations": {names.EXCLUDE: "true"}}},
            "annotated gpu-reaper/exclude=true",
            id="owner-opted-out",
        ),
        pytest.param(
            {"metadata": {"annotations": {names.EXCLUDE_UNTIL: "2026-02-01T00:00:00Z"}}},
            "annotated gpu-reaper/exclude-until=2026-02-01T00:00:00Z",
            id="owner-opted-out-for-a-month",
        ),
        pytest.param(
            {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "web:1"}]}}}},
            "requests no GPU any more since planning",
            id="its-pods-no-longer-ask-for-a-gpu",
        ),
    ],
)
def test_conflict_rechecks_the_object_before_retrying(
    cluster: EmulatedCluster, change: dict[str, Any], detail: str
) -> None:
    seed(cluster, deployment("ranker", replicas=3))
    client = cluster.client()
    snap = read_snapshot(client, "gpu-reaper")
    client.patch("Deployment", "serving", "ranker", change)
    the_plan = plan(idle("ranker"), snap, Policy.model_validate(POLICY), NOW)
    executor = Executor(
        client, mode=RunMode.APPLY, namespace="gpu-reaper", clock=lambda: NOW, sleep=lambda s: None
    )
    (result,) = executor.execute(the_plan)
    assert result.outcome is Outcome.SKIPPED and detail in result.detail
    assert names.ORIGINAL_REPLICAS not in (
        cluster.obj("Deployment", "serving", "ranker")["metadata"].get("annotations") or {}
    )


def test_throttling_is_retried(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("a"))
    cluster.fail(Fault("PATCH", "Deployment", name="a", status=429, subresource="scale"))
    result = reaper_run(cluster, idle("a"))
    assert result.exit_code == EXIT_OK and result.count(Outcome.APPLIED) == 1
    assert len(patches(cluster)) == 2


def test_server_error_mid_run_fails_that_action_and_leaves_everything_restorable(
    cluster: EmulatedCluster,
) -> None:
    seed(cluster, deployment("a"), deployment("b"), deployment("c"))
    cluster.fail(Fault("PATCH", "Deployment", name="b", status=500, subresource="scale"))
    result = reaper_run(cluster, idle("a", "b", "c"))

    assert result.exit_code == EXIT_ACTION_FAILED
    outcomes = {r.action.target.name: r.outcome for r in result.results}
    assert outcomes == {"a": Outcome.APPLIED, "b": Outcome.FAILED, "c": Outcome.APPLIED}
    assert "failed=1" in result.summary_line()
    assert cluster.obj("Deployment", "serving", "b")["spec"]["replicas"] == 3  # untouched

    restored = Executor(cluster.client(), mode=RunMode.APPLY, namespace="gpu-reaper").restore_all()
    assert sorted(r.target for r in restored if r.outcome is Outcome.APPLIED) == [
        "Deployment serving/a",
        "Deployment serving/c",
    ]
    assert all(cluster.obj("Deployment", "serving", n)["spec"]["replicas"] == 3 for n in "abc")


def test_timeout_mid_run_fails_the_run_but_the_object_stays_restorable(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("a"), deployment("b"))
    # Applied, but answered too late; the other calls have 2 s, plenty even on a busy machine.
    cluster.fail(Fault("PATCH", "Deployment", name="a", delay=5.0, subresource="scale"))
    result = reaper_run(cluster, idle("a", "b"), timeout=2.0)

    assert result.exit_code == EXIT_ACTION_FAILED
    failed = next(r for r in result.results if r.action.target.name == "a")
    assert failed.outcome is Outcome.FAILED and "may have been applied" in failed.detail
    assert cluster.obj("Deployment", "serving", "a")["spec"]["replicas"] == 0
    assert recorded_stops(cluster)["objects"]["Deployment.apps serving/a"]["original_replicas"] == 3

    restored = Executor(cluster.client(), mode=RunMode.APPLY, namespace="gpu-reaper").restore_all()
    assert {r.outcome for r in restored} == {Outcome.APPLIED}
    assert cluster.obj("Deployment", "serving", "a")["spec"]["replicas"] == 3
    assert cluster.obj("Deployment", "serving", "b")["spec"]["replicas"] == 3


def test_repeated_api_failures_stop_the_run(cluster: EmulatedCluster) -> None:
    names_ = [f"d{i}" for i in range(5)]
    seed(cluster, *(deployment(n) for n in names_))
    cluster.fail(Fault("PATCH", "Deployment", status=503, times=10, subresource="scale"))
    result = reaper_run(cluster, idle(*names_))
    assert result.exit_code == EXIT_ACTION_FAILED
    assert len(patches(cluster)) == 3
    assert [r.detail for r in result.results[3:]] == ["not attempted after 3 failures in a row"] * 2


def test_event_failure_does_not_fail_the_action(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("a"))
    cluster.fail(Fault("POST", "Event", status=403))
    result = reaper_run(cluster, idle("a"))
    assert result.exit_code == EXIT_OK
    assert cluster.obj("Deployment", "serving", "a")["spec"]["replicas"] == 0


def test_two_concurrent_runs_never_double_act(cluster: EmulatedCluster) -> None:
    seed(cluster, *(deployment(n) for n in "abc"))
    # Keep the first run busy (holding the Lease) for seconds: the second must meet it even when
    # a busy machine starts its thread late.
    cluster.fail(Fault("PATCH", "Deployment", delay=1.0, times=100, subresource="scale"))
    results: list[RunReport] = []
    barrier = threading.Barrier(2)

    def one(identity: str) -> None:
        barrier.wait()
        results.append(reaper_run(cluster, idle(*"abc"), identity=identity))

    threads = [threading.Thread(target=one, args=(f"run-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert sorted(r.lease_held for r in results) == [False, True]
    winner = next(r for r in results if not r.lease_held)
    loser = next(r for r in results if r.lease_held)
    assert winner.count(Outcome.APPLIED) == 3 and loser.results == [] and loser.exit_code == EXIT_OK
    assert sorted(patches(cluster)) == sorted(
        f"/apis/apps/v1/namespaces/serving/deployments/{n}/scale" for n in "abc"
    )
    assert "holds the lease" in (loser.error or "")
    assert loser.summary_line() == "gpu-reaper: mode=apply error=lease_held findings=3"


def test_a_second_run_after_the_first_finds_nothing_left_to_do(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("a"))
    assert reaper_run(cluster, idle("a")).count(Outcome.APPLIED) == 1
    second = reaper_run(cluster, idle("a"))
    assert second.count(Outcome.APPLIED) == 0
    assert [s.reason.value for s in second.plan.skips] == ["already_done"]  # type: ignore[union-attr]
    assert len(patches(cluster)) == 1


def lease(holder: str, renewed_ago: timedelta, duration: int = 600) -> dict[str, Any]:
    # Leases are about live concurrency: they use the wall clock, not the run's --end.
    when = datetime.now(UTC) - renewed_ago
    return manifest(
        "Lease",
        names.LEASE_NAME,
        "gpu-reaper",
        spec={
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "renewTime": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        },
    )


def test_a_live_lease_keeps_a_second_run_out(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("a"), lease("other-run", timedelta(seconds=10)))
    result = reaper_run(cluster, idle("a"))
    assert result.lease_held and result.exit_code == EXIT_OK and result.plan is None
    assert cluster.mutations() == []
    assert result.metrics().success_timestamp is None  # staleness alerts see the run did nothing


def test_a_stale_lease_expires_and_is_taken_over(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("a"), lease("crashed-run", timedelta(hours=1)))
    result = reaper_run(cluster, idle("a"), identity="fresh-run")
    assert not result.lease_held and result.count(Outcome.APPLIED) == 1
    spec = cluster.obj("Lease", "gpu-reaper", names.LEASE_NAME)["spec"]
    assert "holderIdentity" not in spec  # released at the end of the run
    assert spec["leaseTransitions"] == 1


def test_cordon_marks_the_node_and_restore_uncordons_only_marked_nodes(cluster: EmulatedCluster) -> None:
    someone_elses = gpu_node("gpu-b")
    someone_elses["spec"] = {"unschedulable": True}
    seed(cluster, gpu_node("gpu-a"), someone_elses, gpu_node("gpu-c"))
    result = reaper_run(
        cluster, report(finding(FindingKind.LOW_UTILIZATION, name="gpu-a", workload_kind="Node"))
    )
    assert result.count(Outcome.APPLIED) == 1
    node = cluster.obj("Node", None, "gpu-a")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][names.CORDONED_AT] == "2026-01-05T00:00:00Z"
    assert any(
        e["involvedObject"]["kind"] == "Node" and e["metadata"]["namespace"] == "default"
        for e in cluster.objects("Event")
    )

    restored = Executor(cluster.client(), mode=RunMode.APPLY, namespace="gpu-reaper").restore_all()
    assert [r.target for r in restored] == ["Node gpu-a"]
    uncordoned = cluster.obj("Node", None, "gpu-a")
    assert "unschedulable" not in uncordoned["spec"]
    assert set(uncordoned["metadata"]["annotations"]) == {names.RESTORED_AT}  # our mark gone, grace begins
    assert cluster.obj("Node", None, "gpu-b")["spec"]["unschedulable"] is True  # never ours, never touched
    unmarked = Executor(cluster.client(), mode=RunMode.APPLY, namespace="gpu-reaper").uncordon("gpu-b")
    assert unmarked.outcome is Outcome.SKIPPED


def test_restore_all_in_one_namespace_leaves_others_and_nodes(cluster: EmulatedCluster) -> None:
    reaped = {names.ORIGINAL_REPLICAS: "2"}
    seed(
        cluster,
        manifest("Namespace", "team-a"),
        deployment("a", replicas=0, **reaped),
        deployment("b", replicas=0, namespace="team-a", **reaped),
        gpu_node("gpu-a", **{names.CORDONED_AT: "2026-01-05T00:00:00Z"}),
    )
    restored = Executor(cluster.client(), mode=RunMode.APPLY, namespace="gpu-reaper").restore_all("team-a")
    assert [r.target for r in restored] == ["Deployment team-a/b"]
    assert cluster.obj("Deployment", "serving", "a")["spec"]["replicas"] == 0


def test_confirmation_state_lives_in_a_configmap_across_runs(cluster: EmulatedCluster) -> None:
    seed(cluster, deployment("a"))
    policy = {**POLICY, "safety": {"consecutiveRuns": 2}}
    first = reaper_run(cluster, idle("a"), policy=policy)
    assert first.count(Outcome.APPLIED) == 0
    assert [s.reason.value for s in first.plan.skips] == ["awaiting_confirmation"]  # type: ignore[union-attr]
    cm = cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)
    assert '"serving/Deployment/a"' in cm["data"][names.STATE_KEY]

    second = reaper_run(cluster, idle("a"), policy=policy)
    assert second.count(Outcome.APPLIED) == 1
    assert cluster.obj("Deployment", "serving", "a")["spec"]["replicas"] == 0


def test_unknown_workload_to_restore_is_bad_input(cluster: EmulatedCluster) -> None:
    seed(cluster)
    with pytest.raises(BadInputError, match="no Deployment or StatefulSet serving/ghost"):
        Executor(cluster.client(), mode=RunMode.APPLY, namespace="gpu-reaper").restore_workload(
            "serving", "ghost"
        )


def test_every_stop_is_recorded_beside_the_confirmations_until_it_is_restored(
    cluster: EmulatedCluster,
) -> None:
    seed(cluster, deployment("a"), deployment("b"))
    assert reaper_run(cluster, idle("a", "b")).count(Outcome.APPLIED) == 2

    def recorded() -> list[str]:
        data = cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)["data"]
        assert '"serving/Deployment/a"' in data[names.STATE_KEY]  # the streaks kept beside it
        return sorted(json.loads(data[names.STOPPED_KEY])["objects"])

    assert recorded() == ["Deployment.apps serving/a", "Deployment.apps serving/b"]
    executor = Executor(cluster.client(), mode=RunMode.APPLY, namespace="gpu-reaper")
    assert executor.restore_workload("serving", "a").outcome is Outcome.APPLIED
    assert recorded() == ["Deployment.apps serving/b"]
    assert [r.target for r in executor.restore_all()] == ["Deployment serving/b"]
    assert recorded() == []


def test_apply_runs_drop_from_the_record_what_is_no_longer_stopped(cluster: EmulatedCluster) -> None:
    """Objects restored by hand (or deleted) leave the record at the next apply run, so it holds what
    is still stopped rather than growing with every stop ever made; a dry run writes nothing."""
    seed(cluster, deployment("a"), deployment("b"))
    assert reaper_run(cluster, idle("a", "b")).count(Outcome.APPLIED) == 2

    def recorded() -> list[str]:
        data = cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)["data"]
        return sorted(json.loads(data[names.STOPPED_KEY])["objects"])

    marks = {names.REAPED_AT: None, names.REASON: None, names.ORIGINAL_REPLICAS: None}
    by_hand = {"metadata": {"annotations": marks}, "spec": {"replicas": 1}}
    cluster.client().patch("Deployment", "serving", "a", by_hand)
    reaper_run(cluster, idle(), apply=False)
    assert recorded() == ["Deployment.apps serving/a", "Deployment.apps serving/b"]
    reaper_run(cluster, idle())
    assert recorded() == ["Deployment.apps serving/b"]
