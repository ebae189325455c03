"""End to end: the simulated fleet in a real Prometheus → ``gpu-reaper run --apply`` against the Kubernetes
emulator seeded from the same fleet, Slack on a local server → ``gpu-reaper restore --all``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from cli.reaper import main
from harness.kube_emulator import EmulatedCluster
from harness.servers import PrometheusServer
from reaper import names
from simulation.fleet import Fleet
from simulation.in_memory_cluster import fleet_objects

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

TOKEN = "xoxb-e2e-token"
POLICY = """\
window: 6h
pricePerGpuHour: 3
safety: {consecutiveRuns: 2, maxCordonShare: 0.25}
slack:
  channel: "#gpu-waste"
  apiUrl: "%(slack)s"
  routes:
    - {namespaces: [serving], channel: "#serving-oncall"}
    - {namespaces: [research], channel: "#ml-research"}
rules:
  - name: idle-endpoints
    match: {findings: [idle_endpoint], minConfidence: 0.9}
    action: scale_to_zero
  - name: idle-nodes
    match: {findings: [low_utilization], kinds: [Node]}
    action: cordon
  - name: tell-owners
    match: {findings: [low_utilization, dataloader_starvation]}
    action: notify
"""
IDLE = [("Deployment", "serving", "legacy-ranker", 2), ("StatefulSet", "serving", "embeddings", 1)]
EXCLUDED = ("Deployment", "team-b", "mig-idle", 1)
BUSY = [
    ("Deployment", "serving", "chat-api", 2),
    ("Deployment", "team-b", "mig-serving", 2),
    ("Deployment", "team-a", "fresh-api", 1),
]


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), stdout=out), out.getvalue()


def test_fleet_in_prometheus_is_reaped_notified_and_restored(
    standard_fleet: Fleet,
    prometheus_standard: PrometheusServer,
    cluster: EmulatedCluster,
    httpserver: HTTPServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster.seed(
        fleet_objects(
            standard_fleet,
            workload_annotations={"team-b/mig-idle": {names.EXCLUDE: "true"}},
            namespace_annotations={"team-a": {names.SLACK_CHANNEL: "#team-a"}},
        )
    )
    posts: list[dict[str, Any]] = []

    def slack(request: Request) -> Response:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        posts.append(json.loads(request.get_data()))
        return Response(
            json.dumps({"ok": True, "channel": "C1", "ts": "1.1"}), content_type="application/json"
        )

    httpserver.expect_request("/api/chat.postMessage", method="POST").respond_with_handler(slack)
    monkeypatch.setenv("GPU_REAPER_SLACK_TOKEN", TOKEN)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY % {"slack": httpserver.url_for("/api/")}, encoding="utf-8")
    run = [
        "run",
        "--prometheus-url",
        prometheus_standard.url,
        "--policy",
        str(policy),
        "--apply",
        "--end",
        "2026-01-05T00:00:00Z",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--reaper-namespace",
        "gpu-reaper",
    ]

    # First run: every destructive candidate is confirmed once and waits; owners hear about it.
    code, out = cli(*run)
    assert code == 0, out
    assert "applied=6 " in out  # the six notifications; nothing scaled yet
    assert all(cluster.obj(k, ns, n)["spec"]["replicas"] == r for k, ns, n, r in IDLE)
    posts.clear()

    # Second run, an hour later in the CronJob's life: confirmed twice, so it acts.
    code, out = cli(*run)
    assert code == 0, out
    assert out.strip().splitlines()[-1] == (
        "gpu-reaper: mode=apply gpus=36 findings=15 planned=9 applied=9 skipped=6 failed=0"
    )
    stopped = json.loads(
        cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)["data"][names.STOPPED_KEY]
    )["objects"]
    for kind, ns, name, replicas in IDLE:
        obj = cluster.obj(kind, ns, name)
        assert obj["spec"]["replicas"] == 0
        # Written through /scale alone: the marks are the reaper's record, not the object's annotations.
        entry = stopped[f"{kind}.apps {ns}/{name}"]
        assert entry["original_replicas"] == replicas
        assert entry["stopped_at"] == "2026-01-05T00:00:00Z"
        assert entry["reason"].startswith("idle endpoint")
    kind, ns, name, replicas = EXCLUDED
    assert cluster.obj(kind, ns, name)["spec"]["replicas"] == replicas
    for kind, ns, name, replicas in BUSY:
        assert cluster.obj(kind, ns, name)["spec"]["replicas"] == replicas
        assert names.ORIGINAL_REPLICAS not in (
            cluster.obj(kind, ns, name)["metadata"].get("annotations") or {}
        )
    spare = cluster.obj("Node", None, "gpu-spare")
    assert spare["spec"]["unschedulable"] is True and names.CORDONED_AT in spare["metadata"]["annotations"]
    assert all(
        not n["spec"].get("unschedulable")
        for n in cluster.objects("Node")
        if n["metadata"]["name"] != "gpu-spare"
    )

    channels = sorted(p["channel"] for p in posts)
    assert channels == ["#gpu-waste", "#ml-research", "#serving-oncall", "#team-a"]  # one message per channel
    serving = next(p for p in posts if p["channel"] == "#serving-oncall")
    text = json.dumps(serving["blocks"])
    assert "Scaled to zero" in text and "legacy-ranker" in text and "embeddings" in text
    assert "gpu-reaper restore serving/" in text

    # Undo everything.
    code, out = cli(
        "restore", "--all", "--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"
    )
    assert code == 0, out
    assert out.splitlines()[-1] == "gpu-reaper: restore mode=apply restored=3 unchanged=0 failed=0"
    for kind, ns, name, replicas in IDLE:
        obj = cluster.obj(kind, ns, name)
        assert obj["spec"]["replicas"] == replicas
        assert names.ORIGINAL_REPLICAS not in (obj["metadata"].get("annotations") or {})
    record = json.loads(
        cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)["data"][names.STOPPED_KEY]
    )
    assert record["objects"] == {}
    assert {f"{k}.apps {ns}/{n}" for k, ns, n, _ in IDLE} <= set(record["restored"])  # grace after restore
    assert "unschedulable" not in cluster.obj("Node", None, "gpu-spare")["spec"]
