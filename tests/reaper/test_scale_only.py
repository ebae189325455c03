"""Deployments, StatefulSets and ReplicaSets are written through ``/scale`` alone (issue 43).

A ``patch`` on those kinds would let whoever holds the reaper's token rewrite a pod template (an
image, a service account, a hostPath). So the reaper scales them through their scale subresource
and keeps its marks (the count to restore, the reason, the time of a restore) in its own ConfigMap;
``restore`` brings them back the same way. What an earlier release stopped, with its marks in
annotations, is still restored from them. Against the emulator with the real client, through the
command line.
"""

from __future__ import annotations

import io
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cli.reaper import main
from common.model import FindingKind, TimeWindow
from harness.findings import NOW, finding, report
from harness.kube_emulator import EmulatedCluster, Fault
from reaper import names
from simulation import controllers
from simulation.in_memory_cluster import manifest

LONG_AGO = NOW - timedelta(days=30)
POLICY = """\
safety: {consecutiveRuns: 1}
grace: {afterRestore: 24h}
rules:
  - name: idle
    match: {findings: [idle_endpoint], kinds: [Deployment, StatefulSet, ReplicaSet]}
    action: scale_to_zero
"""
APPS = "/apis/apps/v1/namespaces/serving/"
KINDS = (("Deployment", "ranker", 3), ("StatefulSet", "embeddings", 2), ("ReplicaSet", "bare", 1))


def _gpu_workload(kind: str, name: str, replicas: int, **meta: Any) -> dict[str, Any]:
    obj = controllers.deployment("serving", name, LONG_AGO, replicas=replicas)
    return manifest(
        kind,
        name,
        "serving",
        created=LONG_AGO,
        spec={"replicas": replicas, "template": obj["spec"]["template"]},
        status=controllers.replicated_status(replicas),
        **meta,
    )


def _cli(*argv: str) -> str:
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    assert code == 0, out.getvalue()
    return out.getvalue().strip().splitlines()[-1]


def _kube(cluster: EmulatedCluster) -> list[str]:
    return ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]


def _run(cluster: EmulatedCluster, tmp_path: Path, *names_: tuple[str, str]) -> str:
    """An applying run now (restore counts its grace from the real time too), on fresh findings."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    window = TimeWindow.ending(datetime.now(UTC), timedelta(hours=6))
    found = [finding(FindingKind.IDLE_ENDPOINT, name=n, workload_kind=k, window=window) for k, n in names_]
    findings = tmp_path / "findings.json"
    findings.write_text(report(*found, window=window).to_json(), encoding="utf-8")
    return _cli("run", "--findings", str(findings), "--policy", str(policy), "--apply", *_kube(cluster))


def _writes_to_apps(cluster: EmulatedCluster, since: int = 0) -> list[str]:
    return [f"{m} {p}" for m, p in cluster.requests()[since:] if m != "GET" and p.startswith(APPS)]


def _record(cluster: EmulatedCluster) -> dict[str, Any]:
    state = cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)
    return json.loads(state["data"][names.STOPPED_KEY])  # type: ignore[no-any-return]


def test_stops_and_restores_go_through_scale_and_the_marks_live_in_the_configmap(
    cluster: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            *(_gpu_workload(kind, name, replicas) for kind, name, replicas in KINDS),
        ]
    )
    idle = [(kind, name) for kind, name, _ in KINDS]
    assert _run(cluster, tmp_path, *idle).endswith("planned=3 applied=3 skipped=0 failed=0")

    plural = {"Deployment": "deployments", "StatefulSet": "statefulsets", "ReplicaSet": "replicasets"}
    scale_writes = sorted(f"PATCH {APPS}{plural[k]}/{n}/scale" for k, n, _ in KINDS)
    assert sorted(_writes_to_apps(cluster)) == scale_writes
    record = _record(cluster)
    assert record["version"] == 2
    for kind, name, replicas in KINDS:
        obj = cluster.obj(kind, "serving", name)
        assert obj["spec"]["replicas"] == 0
        assert not (obj["metadata"].get("annotations") or {}), "nothing is written on the object"
        entry = record["objects"][f"{kind}.apps serving/{name}"]
        assert entry["original_replicas"] == replicas and entry["uid"] == obj["metadata"]["uid"]
        assert entry["reason"].startswith("idle endpoint on 1 GPU")
    events = {e["involvedObject"]["name"]: e["reason"] for e in cluster.objects("Event")}
    assert events == {name: "ScaledToZero" for _, name, _ in KINDS}

    seen = len(cluster.requests())
    assert _cli("restore", "--all", *_kube(cluster)).endswith("restored=3 unchanged=0 failed=0")
    assert sorted(_writes_to_apps(cluster, seen)) == scale_writes
    for kind, name, replicas in KINDS:
        obj = cluster.obj(kind, "serving", name)
        assert obj["spec"]["replicas"] == replicas
        assert not (obj["metadata"].get("annotations") or {})
    record = _record(cluster)
    assert record["objects"] == {}
    assert sorted(record["restored"]) == sorted(f"{k}.apps serving/{n}" for k, n, _ in KINDS)

    # The next run, within the grace after restore, leaves them alone: the record says when.
    with caplog.at_level(logging.INFO):
        assert _run(cluster, tmp_path, *idle).endswith("planned=0 applied=0 skipped=3 failed=0")
    held = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skip: ")]
    assert len(held) == 3 and all("(restore_grace): restored " in m for m in held), held
    assert all(cluster.obj(k, "serving", n)["spec"]["replicas"] == r for k, n, r in KINDS)


def test_restore_by_name_and_again_is_a_no_op(cluster: EmulatedCluster, tmp_path: Path) -> None:
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            _gpu_workload("Deployment", "ranker", 3),
        ]
    )
    _run(cluster, tmp_path, ("Deployment", "ranker"))
    assert _cli("restore", "serving/ranker", *_kube(cluster)).endswith("restored=1 unchanged=0 failed=0")
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 3
    seen = len(cluster.requests())
    assert _cli("restore", "serving/ranker", *_kube(cluster)).endswith("restored=0 unchanged=1 failed=0")
    assert _writes_to_apps(cluster, seen) == []


def test_a_recorded_stop_is_not_restored_onto_a_new_object_of_the_same_name(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            _gpu_workload("Deployment", "ranker", 3),
        ]
    )
    _run(cluster, tmp_path, ("Deployment", "ranker"))
    # Deleted and created again at 0 replicas by its owner: another object, with another uid.
    again = _gpu_workload("Deployment", "ranker", 0)
    again["metadata"]["uid"] = "a-new-uid"
    cluster.seed([again])
    seen = len(cluster.requests())
    assert _cli("restore", "--all", *_kube(cluster)).endswith("restored=0 unchanged=0 failed=0")
    assert _writes_to_apps(cluster, seen) == []
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 0
    assert _record(cluster)["objects"] == {}


OLD_MARKS = {
    names.ORIGINAL_REPLICAS: "3",
    names.REAPED_AT: "2026-01-01T00:00:00Z",
    names.REASON: "idle endpoint",
}


@pytest.mark.parametrize("may_patch", [True, False], ids=["patch-granted", "scale-only"])
def test_what_an_earlier_release_stopped_is_restored_from_its_annotations(
    cluster: EmulatedCluster, may_patch: bool, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            _gpu_workload("Deployment", "ranker", 0, annotations=OLD_MARKS),
        ]
    )
    if not may_patch:
        cluster.fail(Fault("PATCH", "Deployment", name="ranker", status=403, times=5))
    with caplog.at_level(logging.WARNING):
        assert _cli("restore", "--all", *_kube(cluster)).endswith("restored=1 unchanged=0 failed=0")
    obj = cluster.obj("Deployment", "serving", "ranker")
    assert obj["spec"]["replicas"] == 3
    left = obj["metadata"].get("annotations") or {}
    if may_patch:
        assert left == {}
    else:
        assert left == OLD_MARKS
        assert any(
            "keeps the annotations an earlier gpu-reaper left" in r.getMessage() for r in caplog.records
        )
    # Running again, the leftover annotations mean nothing: there is nothing to restore.
    seen = len(cluster.requests())
    assert _cli("restore", "--all", *_kube(cluster)).endswith("restored=0 unchanged=0 failed=0")
    assert _writes_to_apps(cluster, seen) == []
