"""Reclaiming through the owner: each root kind's native stop, against the emulator with the real client.

The cluster holds objects as their controllers create them (simulation.controllers) and emulated
controllers that reconcile children from roots (harness.controllers). For every kind: a dry run
writes nothing; ``--apply`` writes the native stop on the root only (never a child); a second
``--apply`` writes nothing; ``restore`` brings the root back and its controller the child. A
Deployment, StatefulSet or ReplicaSet is written through ``/scale`` alone, its marks kept in the
reaper's ConfigMap rather than on it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cli.reaper import main
from common.model import FindingKind
from common.timeutil import parse_time, rfc3339
from harness.controllers import CONTROLLERS
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from harness.kube_emulator import EmulatedCluster, Fault
from reaper import names
from reaper.kinds import KINDS, WORKLOAD_KINDS
from simulation import controllers as objects
from simulation.in_memory_cluster import manifest

NS = "research"
CREATED = NOW - timedelta(days=30)
POLICY = """\
safety: {consecutiveRuns: 1}
rules:
  - name: idle
    match: {findings: [idle_endpoint], kinds: [Deployment, StatefulSet, ReplicaSet, Rollout, RayCluster, Job]}
    action: scale_to_zero
"""


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("spec") or {}


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


@dataclass(frozen=True)
class Case:
    objects: Callable[[], list[dict[str, Any]]]
    holder: tuple[str, str]  # the finding's workload: the object holding the GPUs
    root: tuple[str, str]  # what the reaper writes
    stopped: Callable[[dict[str, Any]], bool]  # the root, after --apply
    child_replicas: tuple[str, str] | None = None  # a child whose controller scales it with the root
    recorded: bool = False  # written through /scale alone, the marks in the reaper's ConfigMap


def _scaled_to_zero(obj: dict[str, Any]) -> bool:
    return _spec(obj).get("replicas") == 0 and _annotations(obj).get(names.ORIGINAL_REPLICAS) is not None


def _scaled_through_scale(obj: dict[str, Any]) -> bool:
    return _spec(obj).get("replicas") == 0 and not _annotations(obj)


def _suspended(obj: dict[str, Any]) -> bool:
    return _spec(obj).get("suspend") is True


def _notebook_stopped(obj: dict[str, Any]) -> bool:
    stopped = _annotations(obj).get(names.KUBEFLOW_STOPPED)
    return stopped is not None and parse_time(stopped) == NOW  # RFC 3339, the run's time


def _kserve_stopped(obj: dict[str, Any]) -> bool:
    return _annotations(obj).get(names.KSERVE_STOP) == "true"


CASES = {
    "deployment": Case(
        lambda: [objects.deployment(NS, "api", CREATED, replicas=2)],
        ("Deployment", "api"),
        ("Deployment", "api"),
        _scaled_through_scale,
        recorded=True,
    ),
    "statefulset": Case(
        lambda: [
            manifest(
                "StatefulSet",
                "db",
                NS,
                created=CREATED,
                spec=gpu_spec(1, serviceName="db"),
                status=objects.replicated_status(1),
            )
        ],
        ("StatefulSet", "db"),
        ("StatefulSet", "db"),
        _scaled_through_scale,
        recorded=True,
    ),
    "ownerless-replicaset": Case(
        lambda: [
            manifest(
                "ReplicaSet",
                "bare",
                NS,
                created=CREATED,
                spec=gpu_spec(2),
                status=objects.replicated_status(2),
            )
        ],
        ("ReplicaSet", "bare"),
        ("ReplicaSet", "bare"),
        _scaled_through_scale,
        recorded=True,
    ),
    "notebook": Case(
        lambda: objects.notebook(NS, "alice", CREATED),
        ("StatefulSet", "alice"),
        ("Notebook", "alice"),
        _notebook_stopped,
        child_replicas=("StatefulSet", "alice"),
    ),
    "inferenceservice-raw": Case(
        lambda: objects.inference_service(NS, "llm", CREATED),
        ("Deployment", "llm-predictor"),
        ("InferenceService", "llm"),
        _kserve_stopped,
        child_replicas=("Deployment", "llm-predictor"),
    ),
    "inferenceservice-serverless": Case(
        lambda: objects.inference_service_serverless(NS, "llm", CREATED),
        ("Deployment", "llm-predictor-00001-deployment"),
        ("InferenceService", "llm"),
        _kserve_stopped,
    ),
    "raycluster": Case(
        lambda: objects.ray_cluster(NS, "ray", CREATED),
        ("RayCluster", "ray"),
        ("RayCluster", "ray"),
        _suspended,
    ),
    "leaderworkerset": Case(
        lambda: objects.leader_worker_set(NS, "vllm", CREATED, replicas=2),
        ("StatefulSet", "vllm"),
        ("LeaderWorkerSet", "vllm"),
        _scaled_to_zero,
        child_replicas=("StatefulSet", "vllm"),
    ),
    "argo-rollout": Case(
        lambda: objects.argo_rollout(NS, "canary", CREATED),
        ("Rollout", "canary"),
        ("Rollout", "canary"),
        _scaled_to_zero,
    ),
    "jobset": Case(
        lambda: objects.job_set(NS, "train", CREATED),
        ("Job", "train-workers-0"),
        ("JobSet", "train"),
        _suspended,
    ),
    "kueue-job": Case(
        lambda: objects.kueue_job(NS, "sweep", CREATED),
        ("Job", "sweep"),
        ("Job", "sweep"),
        _suspended,
    ),
}


@pytest.fixture
def installed(cluster: EmulatedCluster) -> EmulatedCluster:
    """Every custom kind served (Kueue too), the emulated controllers running, and the reaper's namespaces."""
    cluster.declare(*(k.name for k in WORKLOAD_KINDS), "KueueWorkload")
    cluster.call(lambda: cluster.server.controllers.extend(CONTROLLERS))
    cluster.seed([manifest("Namespace", n) for n in (NS, "gpu-reaper")])
    return cluster


def _findings(tmp_path: Path, *holders: tuple[str, str]) -> Path:
    path = tmp_path / "findings.json"
    found = [finding(FindingKind.IDLE_ENDPOINT, name=n, namespace=NS, workload_kind=k) for k, n in holders]
    path.write_text(report(*found).to_json(), encoding="utf-8")
    return path


def _cli(cluster: EmulatedCluster, *argv: str) -> str:
    out = io.StringIO()
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    code = main([*argv, *kube], stdout=out)
    assert code == 0, out.getvalue()
    return out.getvalue().strip().splitlines()[-1]


def _run(cluster: EmulatedCluster, tmp_path: Path, findings: Path, *mode: str) -> str:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    run = ["run", "--findings", str(findings), "--policy", str(policy), "--end", rfc3339(NOW)]
    return _cli(cluster, *run, *mode)


def _writes_to(cluster: EmulatedCluster, since: int) -> list[str]:
    """Paths of the requests since ``since`` that changed a workload or controller object."""
    kinds = {k.plural for k in WORKLOAD_KINDS}
    out = []
    for method, path in cluster.requests()[since:]:
        parts = path.strip("/").removesuffix("/scale").split("/")
        if method != "GET" and len(parts) >= 2 and parts[-2] in kinds:
            out.append(f"{method} {path}")
    return out


def _record(cluster: EmulatedCluster) -> dict[str, Any]:
    state = cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)
    return json.loads(state["data"][names.STOPPED_KEY])  # type: ignore[no-any-return]


def _record_key(kind: str, name: str) -> str:
    return f"{KINDS[kind].api_kind}.{KINDS[kind].group or 'core'} {NS}/{name}"


def _path(kind: str, name: str) -> str:
    info = KINDS[kind]
    return f"{info.path_prefix}/namespaces/{NS}/{info.plural}/{name}"


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_native_stop_goes_on_the_root_and_restore_undoes_it(
    installed: EmulatedCluster, tmp_path: Path, case: Case
) -> None:
    cluster = installed
    cluster.seed(case.objects())
    findings = _findings(tmp_path, case.holder)
    root_kind, root_name = case.root
    before = cluster.obj(root_kind, NS, root_name)

    assert _run(cluster, tmp_path, findings, "--dry-run").endswith("planned=1 applied=0 skipped=0 failed=0")
    assert cluster.mutations() == []

    seen = len(cluster.requests())
    assert _run(cluster, tmp_path, findings, "--apply").endswith("planned=1 applied=1 skipped=0 failed=0")
    written = f"PATCH {_path(root_kind, root_name)}" + ("/scale" if case.recorded else "")
    assert _writes_to(cluster, seen) == [written]
    root = cluster.obj(root_kind, NS, root_name)
    assert case.stopped(root)
    if case.recorded:
        entry = _record(cluster)["objects"][_record_key(root_kind, root_name)]
        assert entry["stopped_at"] == rfc3339(NOW) and "rule idle" in entry["reason"]
        assert entry["original_replicas"] == _spec(before)["replicas"]
    else:
        assert _annotations(root)[names.REAPED_AT] == rfc3339(NOW)
        assert "rule idle" in _annotations(root)[names.REASON]
    (event,) = cluster.objects("Event")
    assert event["involvedObject"]["kind"] == before["kind"] and event["involvedObject"]["name"] == root_name
    assert event["involvedObject"]["apiVersion"] == before["apiVersion"]
    if case.holder != case.root:
        assert f"{case.holder[0]} {NS}/{case.holder[1]}" in event["message"]  # the child holding the GPUs
    if case.child_replicas is not None:
        assert cluster.obj(*case.child_replicas[:1], NS, case.child_replicas[1])["spec"]["replicas"] == 0

    seen = len(cluster.requests())
    line = _run(cluster, tmp_path, findings, "--apply")
    assert line.endswith("planned=0 applied=0 skipped=1 failed=0")
    assert _writes_to(cluster, seen) == []

    assert _cli(cluster, "restore", f"{NS}/{root_name}").endswith("restored=1 unchanged=0 failed=0")
    restored = cluster.obj(root_kind, NS, root_name)
    assert not case.stopped(restored)
    if case.recorded:
        assert not _annotations(restored)
        assert _record_key(root_kind, root_name) in _record(cluster)["restored"]
    else:
        assert names.REAPED_AT not in _annotations(restored) and names.RESTORED_AT in _annotations(restored)
    assert _spec(restored).get("replicas") == _spec(before).get("replicas")
    assert _spec(restored).get("suspend") in (None, False)
    if case.child_replicas is not None:
        child = cluster.obj(case.child_replicas[0], NS, case.child_replicas[1])
        assert child["spec"]["replicas"] > 0


@pytest.mark.parametrize("case", [CASES["notebook"], CASES["raycluster"]], ids=["notebook", "raycluster"])
def test_a_conflict_on_the_root_is_retried_on_the_fresh_version(
    installed: EmulatedCluster, tmp_path: Path, case: Case
) -> None:
    cluster = installed
    cluster.seed(case.objects())
    root_kind, root_name = case.root
    cluster.fail(Fault("PATCH", root_kind, name=root_name, status=409))
    line = _run(cluster, tmp_path, _findings(tmp_path, case.holder), "--apply")
    assert line.endswith("applied=1 skipped=0 failed=0")
    path = _path(root_kind, root_name)
    # The first try uses the version the plan was made from; the 409 makes it re-read.
    assert [m for m, p in cluster.requests() if p == path] == ["PATCH", "GET", "PATCH"]
    assert case.stopped(cluster.obj(root_kind, NS, root_name))


def test_a_controller_reverts_a_write_to_its_child(installed: EmulatedCluster) -> None:
    """Why the reaper never scales a child: the notebook controller puts the replicas straight back."""
    cluster = installed
    cluster.seed(objects.notebook(NS, "alice", CREATED))
    cluster.client().patch("StatefulSet", NS, "alice", {"spec": {"replicas": 0}})
    assert cluster.obj("StatefulSet", NS, "alice")["spec"]["replicas"] == 1
    assert [v["spec"]["replicas"] for v in cluster.history("StatefulSet", NS, "alice")][-2:] == [0, 1]


@pytest.mark.parametrize(
    ("build", "holder", "says"),
    [
        pytest.param(
            lambda: objects.ray_service(NS, "serve", CREATED),
            ("RayCluster", None),
            "RayService has no safe native stop",
            id="rayservice",
        ),
        pytest.param(
            lambda: objects.knative_service(NS, "fn", CREATED, min_scale=1),
            ("Deployment", "fn-00001-deployment"),
            "autoscaling.knative.dev/min-scale=1",
            id="knative-min-scale",
        ),
        pytest.param(
            lambda: objects.knative_service(NS, "fn", CREATED),
            ("Deployment", "fn-00001-deployment"),
            "requests keep arriving",
            id="knative-busy",
        ),
    ],
)
def test_roots_without_a_safe_stop_are_reported_and_never_written(
    installed: EmulatedCluster,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    build: Callable[[], list[dict[str, Any]]],
    holder: Any,
    says: str,
) -> None:
    cluster = installed
    seeded = build()
    cluster.seed(seeded)
    kind, name = holder
    if name is None:
        name = next(o["metadata"]["name"] for o in seeded if o["kind"] == kind)
    findings = _findings(tmp_path, (kind, name))
    seen = len(cluster.requests())
    with caplog.at_level("INFO"):
        line = _run(cluster, tmp_path, findings, "--apply")
    # A notification, not sent: these runs have no Slack, and say so.
    assert line.endswith("planned=1 applied=0 skipped=0 failed=0 not_sent=1")
    assert _writes_to(cluster, seen) == []
    assert cluster.objects("Event") == []
    plan = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("plan:"))
    assert plan.startswith("plan: notify ") and says in plan


def test_a_child_of_a_controller_without_an_actuator_is_never_touched(
    installed: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = installed
    cluster.seed(objects.owned_by_unknown_controller(NS, "fraud", CREATED))
    findings = _findings(tmp_path, ("Deployment", "fraud-default-0-model"))
    seen = len(cluster.requests())
    with caplog.at_level("INFO"):
        line = _run(cluster, tmp_path, findings, "--apply")
    assert line.endswith("planned=0 applied=0 skipped=1 failed=0")
    assert _writes_to(cluster, seen) == []
    skip = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("skip:"))
    assert "(controller_managed)" in skip and f"SeldonDeployment {NS}/fraud" in skip


def test_without_the_crd_a_notebooks_statefulset_is_left_to_its_owner(
    cluster: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kubeflow's API not served (404 on the list): the StatefulSet's owner is known only by reference."""
    cluster.seed([manifest("Namespace", n) for n in (NS, "gpu-reaper")])
    _, statefulset = objects.notebook(NS, "alice", CREATED)
    cluster.seed([statefulset])  # its ownerReference still names the Notebook
    findings = _findings(tmp_path, ("StatefulSet", "alice"))
    with caplog.at_level("INFO"):
        line = _run(cluster, tmp_path, findings, "--apply")
    assert "skipped=1 failed=0" in line
    assert cluster.obj("StatefulSet", NS, "alice")["spec"]["replicas"] == 1
    assert any("controller_managed" in r.getMessage() for r in caplog.records)


def _restarted_deployment(updated: int) -> list[dict[str, Any]]:
    """Created 30 days ago, ``kubectl rollout restart`` 10 minutes ago; ``updated`` of 2 replicas rolled."""
    restarted = NOW - timedelta(minutes=10)
    d = objects.deployment(NS, "api", CREATED, replicas=2)
    d["metadata"]["generation"] = 2
    d["spec"]["template"]["metadata"]["annotations"] = {names.RESTARTED_AT: rfc3339(restarted)}
    d["status"] |= {"observedGeneration": 2, "updatedReplicas": updated, "availableReplicas": 2}
    for c in d["status"]["conditions"]:
        if c["type"] == "Progressing":
            c["lastUpdateTime"] = rfc3339(restarted + timedelta(minutes=2 if updated == 2 else 0))
            c["reason"] = "NewReplicaSetAvailable" if updated == 2 else "ReplicaSetUpdated"
    return [d]


@pytest.mark.parametrize(
    ("updated", "reason"),
    [
        pytest.param(1, "rollout_in_progress", id="new-replicaset-still-progressing"),
        pytest.param(2, "creation_grace", id="rolled-out-ten-minutes-ago"),
    ],
)
def test_a_deployment_rolled_out_ten_minutes_ago_is_not_scaled(
    installed: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture, updated: int, reason: str
) -> None:
    cluster = installed
    cluster.seed(_restarted_deployment(updated))
    seen = len(cluster.requests())
    with caplog.at_level("INFO"):
        line = _run(cluster, tmp_path, _findings(tmp_path, ("Deployment", "api")), "--apply")
    assert line.endswith("planned=0 applied=0 skipped=1 failed=0")
    assert _writes_to(cluster, seen) == []
    assert any(f"({reason})" in r.getMessage() for r in caplog.records)


def test_a_controller_the_reaper_may_not_read_leaves_its_children_alone(
    installed: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The chart's rbac.controllers.kubeflowNotebooks off: listing Notebooks answers 403."""
    cluster = installed
    cluster.seed(objects.notebook(NS, "alice", CREATED))
    cluster.fail(Fault("GET", "Notebook", status=403, times=10))
    seen = len(cluster.requests())
    with caplog.at_level("INFO"):
        line = _run(cluster, tmp_path, _findings(tmp_path, ("StatefulSet", "alice")), "--apply")
    assert line.endswith("planned=0 applied=0 skipped=1 failed=0")
    assert _writes_to(cluster, seen) == []
    messages = [r.getMessage() for r in caplog.records]
    assert any("not allowed to list notebooks" in m for m in messages)
    assert any("(controller_managed)" in m and f"Notebook {NS}/alice" in m for m in messages)


def test_restore_by_the_childs_name_restores_its_root(installed: EmulatedCluster, tmp_path: Path) -> None:
    """``restore serving/llm-predictor``: the name in the Slack message's "GPUs held by" works too."""
    cluster = installed
    cluster.seed(objects.inference_service(NS, "llm", CREATED))
    findings = _findings(tmp_path, ("Deployment", "llm-predictor"))
    assert _run(cluster, tmp_path, findings, "--apply").endswith("applied=1 skipped=0 failed=0")
    seen = len(cluster.requests())
    assert _cli(cluster, "restore", f"{NS}/llm-predictor").endswith("restored=1 unchanged=0 failed=0")
    assert _writes_to(cluster, seen) == [f"PATCH {_path('InferenceService', 'llm')}"]
    assert names.KSERVE_STOP not in _annotations(cluster.obj("InferenceService", NS, "llm"))
    assert cluster.obj("Deployment", NS, "llm-predictor")["spec"]["replicas"] == 1
