"""What tenants write cannot end a run or steer it onto someone else's workload (issue 43).

``gpu-reaper run`` runs for real against the emulated API server, seeded the way a hostile tenant
would seed it: annotation values no parser expects, a forged ownerReference into another namespace,
a findings file naming a workload that holds no GPU. Each run must end with its summary line,
handle everyone else's workloads, and skip the one at fault with its reason.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cli.reaper import main
from common.model import FindingKind
from common.timeutil import parse_time
from harness.findings import NOW, finding, report
from harness.hostile_values import HOSTILE_TIMES, fuzzed_times
from harness.kube_emulator import EmulatedCluster
from reaper import names
from reaper.cluster import build_snapshot, workload_from_object
from reaper.planner import Candidate, Planning, SkipReason, decide
from reaper.policy import parse_policy
from simulation import controllers
from simulation.in_memory_cluster import manifest

LONG_AGO = NOW - timedelta(days=30)
POLICY = """\
safety: {consecutiveRuns: 1, maxActionsPerRun: 500}
grace: {afterCreation: 1h, afterRestore: 24h}
rules:
  - name: idle
    match: {findings: [idle_endpoint]}
    action: scale_to_zero
"""
GRACE_AFTER_CREATION = timedelta(hours=1)
GRACE_AFTER_RESTORE = timedelta(hours=24)

# The hostile texts, and one readable value among them (2026-01-01 in unix seconds).
HOSTILE = [*HOSTILE_TIMES, "1767225600"]
KEYS = (names.EXCLUDE_UNTIL, names.RESTORED_AT, names.RESTARTED_AT)


def _fuzzed(seed: int, count: int) -> list[str]:
    return fuzzed_times(seed, count, longest=25)


@dataclass(frozen=True)
class Victim:
    name: str
    key: str
    value: str

    def manifest(self) -> dict[str, Any]:
        obj = controllers.deployment("serving", self.name, LONG_AGO, replicas=2)
        if self.key == names.RESTARTED_AT:
            obj["spec"]["template"]["metadata"]["annotations"] = {self.key: self.value}
        else:
            obj["metadata"]["annotations"] = {self.key: self.value}
        return obj

    def eligible(self) -> bool:
        """Whether the annotation, read as its owner meant it, leaves the workload to be stopped."""
        try:
            at = parse_time(self.value)
        except ValueError:
            return False  # an owner's unreadable time holds the workload back, never frees it
        if self.key == names.EXCLUDE_UNTIL:
            return at <= NOW
        if self.key == names.RESTORED_AT:
            return NOW - at >= GRACE_AFTER_RESTORE
        return NOW - at >= GRACE_AFTER_CREATION


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), stdout=out), out.getvalue()


def run_args(cluster: EmulatedCluster, tmp_path: Path, findings: Path, *extra: str) -> list[str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    return [
        "run",
        "--findings",
        str(findings),
        "--policy",
        str(policy),
        "--end",
        "2026-01-05T00:00:00Z",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--reaper-namespace",
        "gpu-reaper",
        "--apply",
        *extra,
    ]


def idle_findings(tmp_path: Path, *refs: tuple[str, str]) -> Path:
    path = tmp_path / "findings.json"
    found = [finding(FindingKind.IDLE_ENDPOINT, namespace=ns, name=name) for ns, name in refs]
    path.write_text(report(*found).to_json(), encoding="utf-8")
    return path


def skips(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    """The run's skip lines, by the workload key they name: ``(reason): detail``."""
    out = {}
    for record in caplog.records:
        message = record.getMessage()
        if message.startswith("skip: "):
            key, _, rest = message[len("skip: ") :].partition(" ")
            out[key] = rest
    return out


def test_hostile_annotation_values_skip_their_own_workload_and_nothing_else(
    cluster: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    values = HOSTILE + _fuzzed(43, 12)
    victims = [Victim(f"victim-{i}-{k}", key, v) for i, v in enumerate(values) for k, key in enumerate(KEYS)]
    plain = ["plain-a", "plain-b"]
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            # A whole namespace opted out with a time no parser reads: all of it is held back.
            manifest("Namespace", "team-x", annotations={names.EXCLUDE_UNTIL: "1e20"}),
            controllers.deployment("team-x", "theirs", LONG_AGO, replicas=2),
            *(controllers.deployment("serving", n, LONG_AGO, replicas=2) for n in plain),
            *(v.manifest() for v in victims),
        ]
    )
    refs = [("serving", n) for n in plain] + [("serving", v.name) for v in victims] + [("team-x", "theirs")]
    with caplog.at_level(logging.INFO):
        code, out = cli(*run_args(cluster, tmp_path, idle_findings(tmp_path, *refs)))

    eligible = [v for v in victims if v.eligible()]
    held = [v for v in victims if not v.eligible()]
    assert code == 0, out
    assert out.strip().splitlines()[-1] == (
        f"gpu-reaper: mode=apply findings={len(refs)} planned={len(plain) + len(eligible)} "
        f"applied={len(plain) + len(eligible)} skipped={len(held) + 1} failed=0"
    )
    for name in plain:
        assert cluster.obj("Deployment", "serving", name)["spec"]["replicas"] == 0
    skipped = skips(caplog)
    for v in held:
        assert cluster.obj("Deployment", "serving", v.name)["spec"]["replicas"] == 2, v
        line = skipped[f"serving/Deployment/{v.name}"]
        reason = {
            names.EXCLUDE_UNTIL: "(excluded_by_annotation)",
            names.RESTORED_AT: "(restore_grace)",
            names.RESTARTED_AT: "(creation_grace)",
        }[v.key]
        assert line.startswith(reason), (v, line)
    for v in eligible:
        assert cluster.obj("Deployment", "serving", v.name)["spec"]["replicas"] == 0, v
    assert skipped["team-x/Deployment/theirs"].startswith("(excluded_by_annotation)")
    assert cluster.obj("Deployment", "team-x", "theirs")["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    ("where", "value"),
    [
        pytest.param(("window", "start"), "0001-01-01T00:00:00+01:00", id="window-start-before-year-1"),
        pytest.param(("generated_at",), "9999-12-31T23:59:59-01:00", id="generated-after-year-9999"),
        pytest.param(("findings", 0, "window", "start"), "0001-01-01T00:00:00+01:00", id="finding-window"),
    ],
)
def test_a_findings_file_with_an_out_of_range_time_is_bad_input(
    cluster: EmulatedCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    where: tuple[Any, ...],
    value: str,
) -> None:
    doc = json.loads(report(finding(FindingKind.IDLE_ENDPOINT, name="ranker")).to_json())
    parent = doc
    for step in where[:-1]:
        parent = parent[step]
    parent[where[-1]] = value
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, out = cli(*run_args(cluster, tmp_path, path))
    assert code == 2
    error = capsys.readouterr().err
    assert f"gpu-reaper: error: {path}: " in error and value in error
    assert "Traceback" not in error
    assert out == "gpu-reaper: mode=apply error=bad_input\n"
    assert cluster.requests() == []


def test_a_lease_renewed_at_the_end_of_time_does_not_end_the_run(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    far = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = manifest(
        "Lease",
        names.LEASE_NAME,
        "gpu-reaper",
        spec={"holderIdentity": "someone", "renewTime": far, "leaseDurationSeconds": 600},
    )
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            lease,
            controllers.deployment("serving", "ranker", LONG_AGO, replicas=2),
        ]
    )
    code, out = cli(*run_args(cluster, tmp_path, idle_findings(tmp_path, ("serving", "ranker"))))
    assert code == 0, out
    assert out.strip().splitlines()[-1].startswith("gpu-reaper: mode=apply findings=1 planned=1 applied=1")


def test_a_forged_owner_in_another_namespace_is_never_followed(
    cluster: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    coredns = controllers.deployment("kube-system", "coredns", LONG_AGO, replicas=2)
    # Another team's namespace, opted out as a whole.
    theirs = controllers.deployment("research", "model", LONG_AGO, replicas=3)
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper", "kube-system")),
            manifest("Namespace", "research", annotations={names.EXCLUDE: "true"}),
            coredns,
            theirs,
            # A tenant in serving names both as its controller, by uid.
            controllers.deployment("serving", "forged", LONG_AGO, owner=coredns),
            controllers.deployment("serving", "forged-too", LONG_AGO, owner=theirs),
            controllers.deployment("serving", "honest", LONG_AGO),
        ]
    )
    findings = idle_findings(
        tmp_path, ("serving", "forged"), ("serving", "forged-too"), ("serving", "honest")
    )
    with caplog.at_level(logging.INFO):
        code, out = cli(*run_args(cluster, tmp_path, findings))
    assert code == 0, out
    assert out.strip().splitlines()[-1] == (
        "gpu-reaper: mode=apply findings=3 planned=1 applied=1 skipped=2 failed=0"
    )
    assert cluster.obj("Deployment", "kube-system", "coredns")["spec"]["replicas"] == 2
    assert cluster.obj("Deployment", "research", "model")["spec"]["replicas"] == 3
    assert cluster.obj("Deployment", "serving", "honest")["spec"]["replicas"] == 0
    skipped = skips(caplog)
    for name, owner in (("forged", "coredns"), ("forged-too", "model")):
        assert cluster.obj("Deployment", "serving", name)["spec"]["replicas"] == 1
        line = skipped[f"serving/Deployment/{name}"]
        assert line.startswith("(controller_managed)"), line
        assert f"Deployment {owner}, which is not in namespace serving" in line
    written = {path for method, path in cluster.mutations() if method != "POST"}
    assert not [p for p in written if "/kube-system/" in p or "/research/" in p]


@pytest.mark.parametrize(
    ("root_namespace", "reason"),
    [
        pytest.param("kube-system", SkipReason.PROTECTED_NAMESPACE, id="protected"),
        pytest.param("research", SkipReason.EXCLUDED_BY_POLICY, id="policy-exclusion"),
        pytest.param("opted-out", SkipReason.EXCLUDED_BY_ANNOTATION, id="namespace-opt-out"),
    ],
)
def test_every_protection_reads_the_namespace_of_the_object_written(
    root_namespace: str, reason: SkipReason
) -> None:
    """Should a root in another namespace ever reach the rules, each one still holds it back."""
    root = controllers.deployment(root_namespace, "root", LONG_AGO)
    snapshot = build_snapshot(
        deployments=[controllers.deployment("serving", "child", LONG_AGO), root],
        namespaces=[
            manifest("Namespace", "serving"),
            manifest("Namespace", root_namespace, annotations={names.EXCLUDE: "true"})
            if root_namespace == "opted-out"
            else manifest("Namespace", root_namespace),
        ],
    )
    policy = parse_policy(POLICY + "exclude: {namespaces: [research]}\n", "policy.yaml")
    candidate = Candidate.of(finding(FindingKind.IDLE_ENDPOINT, name="child"), snapshot)
    forged = replace(
        candidate,
        root=workload_from_object("Deployment", root),
        root_namespace=snapshot.namespaces[root_namespace],
    )
    _, hold = decide(forged, Planning(snapshot, policy, NOW, actions_left=10, cordons_left=0))
    assert hold is not None and hold.reason is reason, hold
    assert root_namespace in hold.detail


def _cpu_only(namespace: str, name: str) -> dict[str, Any]:
    obj = controllers.deployment(namespace, name, LONG_AGO, replicas=2)
    obj["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "4", "memory": "8Gi"}}
    return obj


def test_a_finding_about_a_workload_that_requests_no_gpu_is_not_acted_on(
    cluster: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A findings file is trusted input, but what it names must still hold GPUs to be stopped."""
    zero = controllers.deployment("serving", "zero-gpus", LONG_AGO, replicas=2)
    zero["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "0"}}
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            _cpu_only("serving", "web"),
            zero,
            controllers.deployment("serving", "ranker", LONG_AGO, replicas=2),
            # A GPU under a MIG profile counts as one.
            _mig("serving", "mig-served"),
        ]
    )
    refs = [("serving", n) for n in ("web", "zero-gpus", "ranker", "mig-served")]
    with caplog.at_level(logging.INFO):
        code, out = cli(*run_args(cluster, tmp_path, idle_findings(tmp_path, *refs)))
    assert code == 0, out
    assert out.strip().splitlines()[-1] == (
        "gpu-reaper: mode=apply findings=4 planned=2 applied=2 skipped=2 failed=0"
    )
    skipped = skips(caplog)
    for name in ("web", "zero-gpus"):
        assert cluster.obj("Deployment", "serving", name)["spec"]["replicas"] == 2
        assert skipped[f"serving/Deployment/{name}"].startswith("(no_gpu_requested)")
    assert (
        "Deployment serving/web requests a GPU (nvidia.com/gpu, nvidia.com/mig-*"
        in skipped["serving/Deployment/web"]
    )
    assert cluster.obj("Deployment", "serving", "ranker")["spec"]["replicas"] == 0
    assert cluster.obj("Deployment", "serving", "mig-served")["spec"]["replicas"] == 0


def _mig(namespace: str, name: str) -> dict[str, Any]:
    obj = controllers.deployment(namespace, name, LONG_AGO, replicas=2)
    container = obj["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"requests": {"nvidia.com/mig-1g.10gb": "1"}, "limits": {"cpu": "1"}}
    return obj


@pytest.mark.parametrize("observed", ["²", "9" * 5000, "١٢"])
def test_a_status_number_no_int_reads_is_read_as_caught_up_not_a_crash(observed: str) -> None:
    """Argo Rollouts writes observedGeneration as a string: one whose digits int() refuses."""
    rollout = manifest(
        "Rollout", "canary", "serving", spec={"replicas": 1}, status={"observedGeneration": observed}
    )
    rollout["metadata"]["generation"] = 3
    parsed = workload_from_object("Rollout", rollout).rollout
    assert parsed is not None and parsed.observed_generation in (3, 12)
