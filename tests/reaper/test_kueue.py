"""Kueue-managed Jobs (the ``kueue.x-k8s.io/queue-name`` label) against the emulator with Kueue's admission.

Kueue owns such a Job's ``spec.suspend``: its job reconciler unsuspends a Job whose Workload is
admitted, so suspending the Job directly is undone. The reaper stops it through its Workload
(``spec.active: false``), which Kueue answers by evicting the Workload (condition ``Evicted``,
reason ``InactiveWorkload``) and suspending the Job itself; restore reactivates the Workload and
Kueue admits it again. The emulated Kueue is in harness.controllers.
"""

from __future__ import annotations

import io
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cli.reaper import main
from common.model import FindingKind
from common.timeutil import rfc3339
from harness.controllers import CONTROLLERS
from harness.findings import NOW, finding, report
from harness.kube_emulator import EmulatedCluster, Fault
from reaper import names
from simulation import controllers as objects
from simulation.in_memory_cluster import manifest

NS = "research"
JOB = f"/apis/batch/v1/namespaces/{NS}/jobs/sweep"
POLICY = """\
safety: {consecutiveRuns: 1}
rules:
  - name: idle
    match: {findings: [idle_endpoint], kinds: [Job]}
    action: scale_to_zero
"""


@pytest.fixture
def sweep(cluster: EmulatedCluster) -> EmulatedCluster:
    """A Job labelled for Kueue, the emulated controllers running; Kueue itself not installed."""
    cluster.call(lambda: cluster.server.controllers.extend(CONTROLLERS))
    cluster.seed([manifest("Namespace", n) for n in (NS, "gpu-reaper")])
    job, _ = objects.kueue_job(NS, "sweep", NOW - timedelta(days=3))
    cluster.seed([job])
    return cluster


@pytest.fixture
def kueue(sweep: EmulatedCluster) -> EmulatedCluster:
    """Kueue installed (its Workloads served) and the Job's Workload admitted."""
    sweep.declare("KueueWorkload")
    _, workload = objects.kueue_job(NS, "sweep", NOW - timedelta(days=3))
    sweep.seed([workload])
    return sweep


def _workload(cluster: EmulatedCluster) -> dict[str, Any]:
    (workload,) = cluster.objects("KueueWorkload")
    return workload


def _suspended(cluster: EmulatedCluster) -> bool:
    return bool(cluster.obj("Job", NS, "sweep")["spec"].get("suspend"))


def _condition(workload: dict[str, Any], kind: str) -> tuple[str, str]:
    (c,) = [c for c in workload["status"]["conditions"] if c["type"] == kind]
    return c["status"], c["reason"]


def _cli(cluster: EmulatedCluster, *argv: str, code: int = 0) -> str:
    out = io.StringIO()
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    assert main([*argv, *kube], stdout=out) == code, out.getvalue()
    return out.getvalue().strip().splitlines()[-1]


def _run(cluster: EmulatedCluster, tmp_path: Path, *mode: str, code: int = 0) -> str:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    findings = tmp_path / "findings.json"
    found = finding(FindingKind.IDLE_ENDPOINT, name="sweep", namespace=NS, workload_kind="Job")
    findings.write_text(report(found).to_json(), encoding="utf-8")
    run = ["run", "--findings", str(findings), "--policy", str(policy), "--end", rfc3339(NOW)]
    return _cli(cluster, *run, *mode, code=code)


def _writes(cluster: EmulatedCluster, since: int) -> list[str]:
    own = ("/leases", "/configmaps", "/events")
    return [f"{m} {p}" for m, p in cluster.requests()[since:] if m != "GET" and not any(o in p for o in own)]


def test_kueue_undoes_a_direct_suspend_but_a_deactivated_workload_holds(kueue: EmulatedCluster) -> None:
    """Why the reaper does not write the Job's spec.suspend: Kueue re-admits the Job at once."""
    cluster = kueue
    client = cluster.client()
    client.patch("Job", NS, "sweep", {"spec": {"suspend": True}})
    assert not _suspended(cluster)
    assert [v["spec"]["suspend"] for v in cluster.history("Job", NS, "sweep")][-2:] == [True, False]

    name = _workload(cluster)["metadata"]["name"]
    client.patch("KueueWorkload", NS, name, {"spec": {"active": False}})
    assert _suspended(cluster)
    assert _condition(_workload(cluster), "Evicted") == ("True", "InactiveWorkload")
    client.patch("Job", NS, "sweep", {"metadata": {"labels": {"touched": "yes"}}})  # Kueue reconciles again
    assert _suspended(cluster)


def test_a_kueue_job_is_stopped_through_its_workload_and_restore_all_reactivates_it(
    kueue: EmulatedCluster, tmp_path: Path
) -> None:
    cluster = kueue
    workload = (
        f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{NS}/workloads/{_workload(cluster)['metadata']['name']}"
    )
    seen = len(cluster.requests())
    assert _run(cluster, tmp_path, "--dry-run").endswith("planned=1 applied=0 skipped=0 failed=0")
    assert cluster.mutations() == []

    assert _run(cluster, tmp_path, "--apply").endswith("planned=1 applied=1 skipped=0 failed=0")
    # The marks on the Job, then the Workload deactivated; the Job's spec.suspend is Kueue's to write.
    assert _writes(cluster, seen) == [f"PATCH {JOB}", f"PATCH {workload}"]
    stopped = _workload(cluster)
    assert stopped["spec"]["active"] is False
    assert _condition(stopped, "Evicted") == ("True", "InactiveWorkload")
    assert _suspended(cluster)
    job = cluster.obj("Job", NS, "sweep")
    assert job["metadata"]["annotations"][names.REAPED_AT] == rfc3339(NOW)
    (event,) = cluster.objects("Event")
    assert "Kueue Workload" in event["message"] and f"restore {NS}/sweep" in event["message"]

    seen = len(cluster.requests())
    assert _run(cluster, tmp_path, "--apply").endswith("planned=0 applied=0 skipped=1 failed=0")
    assert _writes(cluster, seen) == [] and _suspended(cluster)  # Kueue keeps it suspended

    assert _cli(cluster, "restore", "--all").endswith("restored=1 unchanged=0 failed=0")
    restored = _workload(cluster)
    assert restored["spec"]["active"] is True
    assert _condition(restored, "Requeued") == ("True", "Reactivated")
    assert _condition(restored, "Admitted") == ("True", "Admitted")
    assert not _suspended(cluster)  # Kueue admitted it again and unsuspended the Job
    annotations = cluster.obj("Job", NS, "sweep")["metadata"]["annotations"]
    assert names.REAPED_AT not in annotations and names.RESTORED_AT in annotations


def test_without_kueue_a_kueue_labelled_job_is_left_alone_and_the_run_says_why(
    sweep: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No Kueue CRD (the Workload list answers 404): the reaper cannot stop the Job safely."""
    cluster = sweep
    seen = len(cluster.requests())
    with caplog.at_level(logging.ERROR):
        line = _run(cluster, tmp_path, "--apply", code=1)
    assert line.endswith("planned=1 applied=0 skipped=0 failed=1")
    assert _writes(cluster, seen) == []
    assert not _suspended(cluster) and names.REAPED_AT not in (
        cluster.obj("Job", NS, "sweep")["metadata"].get("annotations") or {}
    )
    said = [r.getMessage() for r in caplog.records]
    assert any(
        "does not serve Kueue's Workload API (kueue.x-k8s.io/v1beta1)" in m and "nothing changed" in m
        for m in said
    )


def test_restore_leaves_alone_a_workload_the_reaper_never_deactivated(
    kueue: EmulatedCluster, tmp_path: Path
) -> None:
    """A stop whose Workload write failed leaves the Job marked; when Kueue or an admin deactivates
    the Workload later, restore must not reactivate it: only the Job's marks go."""
    cluster = kueue
    name = _workload(cluster)["metadata"]["name"]
    cluster.fail(Fault("PATCH", "KueueWorkload", status=500))
    _run(cluster, tmp_path, "--apply", code=1)
    assert names.REAPED_AT in cluster.obj("Job", NS, "sweep")["metadata"]["annotations"]
    assert _workload(cluster)["spec"]["active"] is True

    cluster.client().patch("KueueWorkload", NS, name, {"spec": {"active": False}})  # not the reaper
    assert _cli(cluster, "restore", "--all").endswith("failed=0")
    assert _workload(cluster)["spec"]["active"] is False
    assert names.REAPED_AT not in cluster.obj("Job", NS, "sweep")["metadata"]["annotations"]
