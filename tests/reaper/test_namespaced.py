"""A reaper scoped to namespaces reads the cluster in them alone (issue 43).

A team allowed to manage only its own namespaces installs the reaper with Roles there (the chart's
``rbac.namespaces``, passed on as ``--namespace`` for each): every list is then per namespace, the
Namespace objects are read one by one, and nodes and namespaces it may not read (403) lose only
what they carry (cordons; the namespace opt-out and Slack channel), said in the log, never the run.
"""

from __future__ import annotations

import io
import logging
from datetime import timedelta
from pathlib import Path

import pytest

from cli.reaper import main
from common.model import FindingKind
from harness.findings import NOW, finding, report
from harness.kube_emulator import EmulatedCluster, Fault
from harness.rbac import access_of
from reaper import names
from reaper.kinds import WORKLOAD_KINDS
from simulation import controllers
from simulation.in_memory_cluster import manifest

LONG_AGO = NOW - timedelta(days=30)
SCOPE = ("serving", "research")
POLICY = """\
safety: {consecutiveRuns: 1, maxCordonShare: 1.0}
rules:
  - name: idle
    match: {findings: [idle_endpoint]}
    action: scale_to_zero
  - name: idle-nodes
    match: {findings: [low_utilization], kinds: [Node]}
    action: cordon
"""


def _seed(cluster: EmulatedCluster) -> None:
    cluster.declare(*(k.name for k in WORKLOAD_KINDS), "ScaledObject", "Namespace")
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in (*SCOPE, "elsewhere", "gpu-reaper")),
            controllers.deployment("serving", "ranker", LONG_AGO, replicas=2),
            controllers.deployment("research", "trainer", LONG_AGO, replicas=1),
            controllers.deployment("elsewhere", "theirs", LONG_AGO, replicas=1),
            manifest(
                "Node", "gpu-a", created=LONG_AGO, spec={}, status={"capacity": {"nvidia.com/gpu": "8"}}
            ),
        ]
    )


def _run(cluster: EmulatedCluster, tmp_path: Path, *extra: str) -> str:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    findings = tmp_path / "findings.json"
    found = [
        finding(FindingKind.IDLE_ENDPOINT, namespace="serving", name="ranker"),
        finding(FindingKind.IDLE_ENDPOINT, namespace="research", name="trainer"),
        finding(FindingKind.IDLE_ENDPOINT, namespace="elsewhere", name="theirs"),
        finding(FindingKind.LOW_UTILIZATION, name="gpu-a", workload_kind="Node"),
    ]
    findings.write_text(report(*found).to_json(), encoding="utf-8")
    out = io.StringIO()
    argv = ["run", "--findings", str(findings), "--policy", str(policy), "--end", "2026-01-05T00:00:00Z"]
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    scope = [arg for ns in SCOPE for arg in ("--namespace", ns)]
    code = main([*argv, *kube, *scope, "--apply", *extra], stdout=out)
    assert code == 0, out.getvalue()
    return out.getvalue().strip().splitlines()[-1]


def test_a_scoped_run_reads_each_namespace_of_its_scope_and_nothing_cluster_wide_but_nodes(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    _seed(cluster)
    line = _run(cluster, tmp_path)
    # The finding of another namespace is set aside; the node is not the scope's to cordon.
    assert line == "gpu-reaper: mode=apply findings=2 planned=2 applied=2 skipped=0 failed=0"
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 0
    assert cluster.obj("Deployment", "research", "trainer")["spec"]["replicas"] == 0
    assert cluster.obj("Deployment", "elsewhere", "theirs")["spec"]["replicas"] == 1
    accesses = []
    for method, url in cluster.request_urls():
        try:
            accesses.append(access_of(method, url))
        except ValueError:
            continue  # discovery
    outside = sorted(
        str(a) for a in accesses if a.namespace not in (*SCOPE, "gpu-reaper") and a.resource != "nodes"
    )
    assert outside == []
    assert {a.name for a in accesses if a.resource == "namespaces"} == set(SCOPE)  # read one by one
    listed = {(a.resource, a.namespace) for a in accesses if a.verb == "list" and a.resource == "deployments"}
    assert listed == {("deployments", ns) for ns in SCOPE}


def test_a_scoped_run_honours_the_opt_out_of_a_namespace_it_reads_by_name(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    _seed(cluster)
    cluster.seed([manifest("Namespace", "research", annotations={names.EXCLUDE: "true"})])
    line = _run(cluster, tmp_path)
    assert line == "gpu-reaper: mode=apply findings=2 planned=1 applied=1 skipped=1 failed=0"
    assert cluster.obj("Deployment", "research", "trainer")["spec"]["replicas"] == 1


def test_nodes_and_namespaces_the_reaper_may_not_read_cost_only_what_they_carry(
    cluster: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _seed(cluster)
    # The research namespace opts out; the reaper cannot see it, and says what that costs.
    cluster.seed([manifest("Namespace", "research", annotations={names.EXCLUDE: "true"})])
    cluster.fail(Fault("GET", "Node", status=403, times=10))
    cluster.fail(Fault("GET", "Namespace", status=403, times=10))
    with caplog.at_level(logging.WARNING):
        line = _run(cluster, tmp_path)
    assert line == "gpu-reaper: mode=apply findings=2 planned=2 applied=2 skipped=0 failed=0"
    warnings = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "not allowed to list nodes" in warnings and "no node is cordoned" in warnings
    assert "not allowed to read namespaces" in warnings
    assert f"{names.EXCLUDE} and {names.SLACK_CHANNEL} annotations are not honoured" in warnings


def test_restore_all_in_a_scope_reads_each_namespace_by_name(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    _seed(cluster)
    _run(cluster, tmp_path)
    seen = len(cluster.request_urls())
    out = io.StringIO()
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    scope = [arg for ns in SCOPE for arg in ("--namespace", ns)]
    assert main(["restore", "--all", *scope, *kube], stdout=out) == 0, out.getvalue()
    assert out.getvalue().strip().splitlines()[-1].endswith("restored=2 unchanged=0 failed=0")
    urls = cluster.request_urls()[seen:]
    accesses = [access_of(m, u) for m, u in urls if "/namespaces/" in u or "nodes" in u]
    assert all(a.namespace in (*SCOPE, "gpu-reaper") for a in accesses), accesses
