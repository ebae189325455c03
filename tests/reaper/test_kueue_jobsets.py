"""JobSets and RayClusters that Kueue manages are stopped through their Workload, as Jobs are.

Kueue makes one Workload per JobSet or RayCluster carrying its ``kueue.x-k8s.io/queue-name`` label,
named ``<kind>-<name>-<hash>`` and owned by it; it owns their ``spec.suspend`` and would undo a
suspend while the Workload stays admitted. The emulated Kueue (harness.controllers) suspends the
object while its Workload is inactive and unsuspends it once admitted again.
"""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from cli.reaper import main
from common.model import FindingKind
from common.timeutil import rfc3339
from harness.controllers import CONTROLLERS
from harness.findings import NOW, finding, report
from harness.kube_emulator import EmulatedCluster
from reaper import names
from simulation import controllers as objects
from simulation.in_memory_cluster import manifest

NS = "research"
LONG_AGO = NOW - timedelta(days=3)
QUEUE = {names.KUEUE_QUEUE_LABEL: "team-queue"}


def _admitted_workload(root: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The Workload Kueue made for ``root``: owned by it, admitted."""
    admitted = [{"type": t, "status": "True", "reason": t} for t in ("QuotaReserved", "Admitted")]
    return manifest(
        "KueueWorkload",
        f"{prefix}-{root['metadata']['name']}-3f2a1",
        NS,
        labels={"kueue.x-k8s.io/job-uid": root["metadata"]["uid"]},
        created=LONG_AGO,
        spec={"active": True, "queueName": "team-queue", "podSets": [{"name": "main", "count": 1}]},
        status={"admission": {"clusterQueue": "cluster-queue"}, "conditions": admitted},
        owner=root,
    )


def _jobset() -> tuple[list[dict[str, Any]], str, str]:
    root, job = objects.job_set(NS, "train", LONG_AGO)
    root["metadata"]["labels"] = dict(QUEUE)
    return [root, job, _admitted_workload(root, "jobset")], "Job", "train-workers-0"


def _raycluster() -> tuple[list[dict[str, Any]], str, str]:
    (root,) = objects.ray_cluster(NS, "ray", LONG_AGO)
    root["metadata"]["labels"] = dict(QUEUE)
    root["spec"]["suspend"] = False
    return [root, _admitted_workload(root, "raycluster")], "RayCluster", "ray"


@pytest.fixture(params=[("JobSet", _jobset), ("RayCluster", _raycluster)], ids=["JobSet", "RayCluster"])
def managed(
    request: pytest.FixtureRequest, cluster: EmulatedCluster
) -> tuple[EmulatedCluster, str, str, str]:
    kind, build = request.param
    cluster.declare(kind, "KueueWorkload")
    cluster.call(lambda: cluster.server.controllers.extend(CONTROLLERS))
    cluster.seed([manifest("Namespace", n) for n in (NS, "gpu-reaper")])
    seeded, held_kind, held_name = build()
    cluster.seed(seeded)
    return cluster, kind, held_kind, held_name


def _cli(cluster: EmulatedCluster, *argv: str) -> str:
    out = io.StringIO()
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    assert main([*argv, *kube], stdout=out) == 0, out.getvalue()
    return out.getvalue().strip().splitlines()[-1]


def _workload(cluster: EmulatedCluster) -> dict[str, Any]:
    (workload,) = cluster.objects("KueueWorkload")
    return workload


def test_a_kueue_managed_root_is_stopped_through_its_workload_and_restored(
    managed: tuple[EmulatedCluster, str, str, str], tmp_path: Path
) -> None:
    cluster, kind, held_kind, held_name = managed
    root_name = cluster.objects(kind)[0]["metadata"]["name"]
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "safety: {consecutiveRuns: 1}\nrules:\n  - name: idle\n"
        f"    match: {{findings: [idle_endpoint], kinds: [{held_kind}]}}\n    action: scale_to_zero\n",
        encoding="utf-8",
    )
    findings = tmp_path / "findings.json"
    found = finding(FindingKind.IDLE_ENDPOINT, name=held_name, namespace=NS, workload_kind=held_kind)
    findings.write_text(report(found).to_json(), encoding="utf-8")
    run = ["run", "--findings", str(findings), "--policy", str(policy), "--end", rfc3339(NOW), "--apply"]
    workload = _workload(cluster)["metadata"]["name"]
    seen = len(cluster.requests())

    assert _cli(cluster, *run).endswith("planned=1 applied=1 skipped=0 failed=0")
    own = ("/leases", "/configmaps", "/events")
    writes = [p for m, p in cluster.requests()[seen:] if m == "PATCH" and not any(o in p for o in own)]
    plural = {"JobSet": "jobsets", "RayCluster": "rayclusters"}[kind]
    # The marks on the root, then its Workload deactivated: the root's spec.suspend is Kueue's to write.
    assert [p.rsplit("/", 2)[-2:] for p in writes] == [
        [plural, root_name],
        ["workloads", workload],
    ]
    assert _workload(cluster)["spec"]["active"] is False
    root = cluster.obj(kind, NS, root_name)
    assert root["spec"]["suspend"] is True  # by Kueue, answering the deactivation
    assert root["metadata"]["annotations"][names.REAPED_AT] == rfc3339(NOW)
    (event,) = cluster.objects("Event")
    assert f"Workload {workload}" in event["message"]

    assert _cli(cluster, "restore", "--all").endswith("restored=1 unchanged=0 failed=0")
    assert _workload(cluster)["spec"]["active"] is True
    root = cluster.obj(kind, NS, root_name)
    assert root["spec"]["suspend"] is False  # Kueue admitted it again
    assert names.REAPED_AT not in root["metadata"]["annotations"]
    assert names.RESTORED_AT in root["metadata"]["annotations"]
