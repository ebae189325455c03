"""A root of a custom kind the reaper has no actuator for, but whose CRD declares a scale subresource.

The API server's discovery document (``GET /apis/<group>/<version>``) says which kinds serve
``<plural>/scale``; the reaper asks it only for owners it meets in ownerReferences. Such a root is
scaled to zero through ``/scale``, its original count recorded in the reaper's annotations on the
object; ``restore`` (by the name of the object holding the GPUs) writes it back through ``/scale``,
and so does ``restore --all``, from the record of stopped objects in the reaper's ConfigMap.
Against the emulator with the real client, an emulated controller keeping the child at the root's
replicas.
"""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cli.reaper import main
from common.model import FindingKind
from common.timeutil import rfc3339
from harness.chart import NAMESPACE, Manifest, only, render
from harness.controllers import _replicas_from
from harness.findings import NOW, finding, report
from harness.kube_emulator import EmulatedCluster, Fault
from harness.rbac import Access, Grant, access_of, grants
from reaper import names
from reaper.kinds import WORKLOAD_KINDS
from simulation import controllers as objects
from simulation.in_memory_cluster import manifest

NS = "research"
CREATED = NOW - timedelta(days=30)
API_VERSION = "serving.example.com/v1"
ROOT = f"/apis/{API_VERSION}/namespaces/{NS}/modelservers/llm"
CHILD = f"/apis/apps/v1/namespaces/{NS}/deployments/llm-predictor"
POLICY = """\
safety: {consecutiveRuns: 1}
rules:
  - name: idle
    match: {findings: [idle_endpoint], kinds: [Deployment]}
    action: scale_to_zero
"""


def _model_server(replicas: int = 3) -> list[dict[str, Any]]:
    """A ModelServer and the Deployment its controller made for it, as a real controller would."""
    root = {
        "apiVersion": API_VERSION,
        "kind": "ModelServer",
        "metadata": {
            "name": "llm",
            "namespace": NS,
            "uid": "modelserver-llm",
            "resourceVersion": "10",
            "creationTimestamp": rfc3339(CREATED),
        },
        "spec": {"replicas": replicas, "model": "llama"},
        "status": {"replicas": replicas},
    }
    child = objects.deployment(NS, "llm-predictor", CREATED, replicas=replicas, owner=root)
    return [root, child]


@pytest.fixture
def served(cluster: EmulatedCluster) -> EmulatedCluster:
    """The ModelServer CRD installed with its scale subresource, and its controller running."""
    cluster.declare(*(k.name for k in WORKLOAD_KINDS))
    cluster.install_crd(API_VERSION, "ModelServer", "modelservers", scale=True)
    follow = _replicas_from("ModelServer", "Deployment", lambda root: int(root["spec"]["replicas"]))
    cluster.call(lambda: cluster.server.controllers.append(follow))
    cluster.seed([manifest("Namespace", n) for n in (NS, "gpu-reaper")])
    return cluster


def _cli(cluster: EmulatedCluster, *argv: str) -> str:
    out = io.StringIO()
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    assert main([*argv, *kube], stdout=out) == 0, out.getvalue()
    return out.getvalue().strip().splitlines()[-1]


def _run(cluster: EmulatedCluster, tmp_path: Path, *mode: str) -> str:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    findings = tmp_path / "findings.json"
    found = finding(FindingKind.IDLE_ENDPOINT, name="llm-predictor", namespace=NS, workload_kind="Deployment")
    findings.write_text(report(found).to_json(), encoding="utf-8")
    run = ["run", "--findings", str(findings), "--policy", str(policy), "--end", rfc3339(NOW)]
    return _cli(cluster, *run, *mode)


def _writes(cluster: EmulatedCluster, since: int) -> list[str]:
    """Every change since ``since`` but the reaper's own bookkeeping (Lease, state, Events)."""
    own = ("/leases", "/configmaps", "/events")
    return [f"{m} {p}" for m, p in cluster.requests()[since:] if m != "GET" and not any(o in p for o in own)]


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def _skips(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("skip:")]


def test_a_root_with_a_scale_subresource_is_scaled_through_it_and_restored(
    served: EmulatedCluster, tmp_path: Path
) -> None:
    cluster = served
    cluster.seed(_model_server(replicas=3))

    seen = len(cluster.requests())
    assert _run(cluster, tmp_path, "--dry-run").endswith("planned=1 applied=0 skipped=0 failed=0")
    assert cluster.mutations() == []
    # Discovery once, for the one owner met; nothing cluster-wide about the custom kind.
    asked = [p for m, p in cluster.requests()[seen:] if p.startswith("/apis/serving.example.com")]
    assert asked.count(f"/apis/{API_VERSION}") == 1
    assert f"/apis/{API_VERSION}/modelservers" not in asked

    seen = len(cluster.requests())
    assert _run(cluster, tmp_path, "--apply").endswith("planned=1 applied=1 skipped=0 failed=0")
    # The marks on the root, then 0 replicas through its scale subresource; never the child.
    assert _writes(cluster, seen) == [f"PATCH {ROOT}", f"PATCH {ROOT}/scale"]
    root = cluster.obj("ModelServer", NS, "llm")
    assert root["spec"]["replicas"] == 0
    assert _annotations(root)[names.ORIGINAL_REPLICAS] == "3"
    assert _annotations(root)[names.REAPED_AT] == rfc3339(NOW)
    assert "rule idle" in _annotations(root)[names.REASON]
    assert cluster.obj("Deployment", NS, "llm-predictor")["spec"]["replicas"] == 0  # its controller
    (event,) = cluster.objects("Event")
    assert event["involvedObject"]["kind"] == "ModelServer"
    assert event["involvedObject"]["apiVersion"] == API_VERSION
    assert f"restore {NS}/llm-predictor" in event["message"]

    seen = len(cluster.requests())
    assert _run(cluster, tmp_path, "--apply").endswith("planned=0 applied=0 skipped=1 failed=0")
    assert _writes(cluster, seen) == []

    seen = len(cluster.requests())
    assert _cli(cluster, "restore", f"{NS}/llm-predictor").endswith("restored=1 unchanged=0 failed=0")
    assert _writes(cluster, seen) == [f"PATCH {ROOT}/scale", f"PATCH {ROOT}"]
    restored = cluster.obj("ModelServer", NS, "llm")
    assert restored["spec"]["replicas"] == 3
    assert names.ORIGINAL_REPLICAS not in _annotations(restored)
    assert names.REAPED_AT not in _annotations(restored) and names.RESTORED_AT in _annotations(restored)
    assert cluster.obj("Deployment", NS, "llm-predictor")["spec"]["replicas"] == 3


def test_a_conflict_on_the_scale_write_is_retried_on_a_fresh_read(
    served: EmulatedCluster, tmp_path: Path
) -> None:
    cluster = served
    cluster.seed(_model_server(replicas=2))
    cluster.fail(Fault("PATCH", "ModelServer", name="llm", status=409, subresource="scale"))
    assert _run(cluster, tmp_path, "--apply").endswith("applied=1 skipped=0 failed=0")
    touched = [f"{m} {p}" for m, p in cluster.requests() if p.startswith(ROOT)]
    read = [f"GET {ROOT}", f"GET {ROOT}/scale"]
    write = [f"PATCH {ROOT}", f"PATCH {ROOT}/scale"]
    assert touched[-8:] == [*read, *write, *read, *write]
    root = cluster.obj("ModelServer", NS, "llm")
    assert root["spec"]["replicas"] == 0 and _annotations(root)[names.ORIGINAL_REPLICAS] == "2"


def test_without_the_crd_its_children_are_left_to_their_owner(
    cluster: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The group is not served (404 on discovery): the owner is known only by its reference."""
    cluster.declare(*(k.name for k in WORKLOAD_KINDS))
    cluster.seed([manifest("Namespace", n) for n in (NS, "gpu-reaper")])
    _, child = _model_server()
    cluster.seed([child])
    seen = len(cluster.requests())
    with caplog.at_level("INFO"):
        line = _run(cluster, tmp_path, "--apply")
    assert line.endswith("planned=0 applied=0 skipped=1 failed=0")
    assert _writes(cluster, seen) == []
    assert (f"GET /apis/{API_VERSION}") in [f"{m} {p}" for m, p in cluster.requests()[seen:]]
    assert any("(controller_managed)" in s and f"ModelServer {NS}/llm" in s for s in _skips(caplog))


def test_a_crd_without_a_scale_subresource_is_not_scaled(
    cluster: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.declare(*(k.name for k in WORKLOAD_KINDS))
    cluster.install_crd(API_VERSION, "ModelServer", "modelservers", scale=False)
    cluster.seed([*(manifest("Namespace", n) for n in (NS, "gpu-reaper")), *_model_server()])
    seen = len(cluster.requests())
    with caplog.at_level("INFO"):
        line = _run(cluster, tmp_path, "--apply")
    assert line.endswith("planned=0 applied=0 skipped=1 failed=0")
    assert _writes(cluster, seen) == []
    assert not any(p.endswith("/scale") for _, p in cluster.requests())
    assert any("(controller_managed)" in s for s in _skips(caplog))


def test_without_the_grant_on_its_scale_nothing_is_written(
    served: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The chart's scale grant left out for this kind: the API server answers 403."""
    cluster = served
    cluster.seed(_model_server())
    cluster.fail(Fault("GET", "ModelServer", status=403, times=10, subresource="scale"))
    seen = len(cluster.requests())
    with caplog.at_level("INFO"):
        line = _run(cluster, tmp_path, "--apply")
    assert line.endswith("planned=0 applied=0 skipped=1 failed=0")
    assert _writes(cluster, seen) == []
    messages = [r.getMessage() for r in caplog.records]
    assert any("not allowed to read modelservers/scale" in m and "scaleSubresources" in m for m in messages)
    assert any("(controller_managed)" in s and f"ModelServer {NS}/llm" in s for s in _skips(caplog))
    assert cluster.obj("ModelServer", NS, "llm")["spec"]["replicas"] == 3


def _granted(manifests: list[Manifest]) -> set[Grant]:
    cronjob = only(manifests, "CronJob")
    account = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"]
    return grants((m.doc for m in manifests), (NAMESPACE, account))


def test_the_charts_scale_grant_is_exactly_what_the_reaper_uses(
    served: EmulatedCluster, tmp_path: Path
) -> None:
    """rbac.scaleSubresources grants every request the reaper makes for the kind, and nothing more."""
    cluster = served
    cluster.seed(_model_server())
    cluster.fail(Fault("PATCH", "ModelServer", name="llm", status=409, subresource="scale"))
    _run(cluster, tmp_path, "--dry-run")
    _run(cluster, tmp_path, "--apply")
    _run(cluster, tmp_path, "--apply")
    _cli(cluster, "restore", f"{NS}/llm-predictor")
    used: set[Access] = set()
    for method, url in cluster.request_urls():
        if url.split("?")[0] == f"/apis/{API_VERSION}":
            continue  # discovery: every authenticated user may read it (system:discovery)
        used.add(access_of(method, url))
    mine = {a for a in used if a.group == "serving.example.com"}
    assert {(a.verb, a.resource) for a in mine} == {
        ("get", "modelservers"),
        ("patch", "modelservers"),
        ("get", "modelservers/scale"),
        ("patch", "modelservers/scale"),
    }

    values = {"rbac": {"scaleSubresources": [{"group": "serving.example.com", "resource": "modelservers"}]}}
    granted = _granted(render(values))
    assert sorted(str(a) for a in used if not any(g.allows(a) for g in granted)) == []
    for_kind = {g for g in granted if g.group == "serving.example.com"}
    unused = [str(g) for g in for_kind if not any(g.allows(a) for a in mine)]
    assert for_kind and unused == []

    by_default = _granted(render({}))
    assert not any(g.allows(a) for a in mine for g in by_default)


def _record(cluster: EmulatedCluster) -> dict[str, Any]:
    """The record of stopped objects in the reaper's ConfigMap, by key."""
    state = cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)
    return dict(json.loads(state["data"][names.STOPPED_KEY])["objects"])


def test_restore_all_brings_back_a_root_scaled_through_its_scale_subresource(
    served: EmulatedCluster, tmp_path: Path
) -> None:
    """Scaled through /scale, the root carries no mark restore --all could list: the record finds it."""
    cluster = served
    cluster.seed(_model_server(replicas=3))
    assert _run(cluster, tmp_path, "--apply").endswith("applied=1 skipped=0 failed=0")
    assert [(o["kind"], o["name"]) for o in _record(cluster).values()] == [("ModelServer", "llm")]

    seen = len(cluster.requests())
    assert _cli(cluster, "restore", "--all").endswith("restored=1 unchanged=0 failed=0")
    assert _writes(cluster, seen) == [f"PATCH {ROOT}/scale", f"PATCH {ROOT}"]
    assert cluster.obj("ModelServer", NS, "llm")["spec"]["replicas"] == 3
    assert cluster.obj("Deployment", NS, "llm-predictor")["spec"]["replicas"] == 3
    assert _record(cluster) == {}  # restored: forgotten
    assert _cli(cluster, "restore", "--all").endswith("restored=0 unchanged=0 failed=0")


def test_restore_all_learns_a_recorded_kind_from_discovery(served: EmulatedCluster) -> None:
    """A restore in a new process, of a kind it has never met: discovery says it serves /scale."""
    cluster = served
    api_version, plural = "training.example.com/v1", "trainingservers"
    cluster.install_crd(api_version, "TrainingServer", plural, scale=True)
    stopped = {names.ORIGINAL_REPLICAS: "2", names.REAPED_AT: rfc3339(NOW), names.REASON: "idle"}
    server = {
        "apiVersion": api_version,
        "kind": "TrainingServer",
        "metadata": {"name": "tune", "namespace": NS, "resourceVersion": "5", "annotations": stopped},
        "spec": {"replicas": 0},
    }

    def entry(name: str) -> dict[str, str]:
        return {
            "api_version": api_version,
            "kind": "TrainingServer",
            "namespace": NS,
            "name": name,
            "stopped_at": rfc3339(NOW),
        }

    objects = {f"TrainingServer.training.example.com {NS}/{n}": entry(n) for n in ("tune", "deleted-since")}
    record = {"version": 1, "objects": objects}
    state = manifest("ConfigMap", names.STATE_CONFIGMAP, "gpu-reaper")
    state["data"] = {names.STOPPED_KEY: json.dumps(record)}
    cluster.seed([server, state])

    assert _cli(cluster, "restore", "--all").endswith("restored=1 unchanged=0 failed=0")
    assert cluster.obj("TrainingServer", NS, "tune")["spec"]["replicas"] == 2
    assert f"/apis/{api_version}" in [p for _, p in cluster.requests()]
    assert _record(cluster) == {}  # the one restored, and the one that is gone
