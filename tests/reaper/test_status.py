"""``gpu-reaper status`` against the Kubernetes emulator, after real runs and a restore."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

from cli.reaper import main
from common.model import FindingKind, TimeWindow
from harness.findings import finding, report
from harness.gpu_workloads import gpu_spec
from harness.kube_emulator import EmulatedCluster
from reaper import names
from reaper.policy import Policy, RunMode
from reaper.runner import RunSettings, run
from simulation.manifests import manifest

LONG_AGO = datetime(2025, 12, 1, tzinfo=UTC)
POLICY = {
    "window": "6h",
    "safety": {"consecutiveRuns": 1},
    "rules": [
        {
            "name": "noticed",
            "match": {"findings": ["idle_endpoint"], "namespaces": ["team-a"]},
            "action": "scale_to_zero",
            "notice": "2h",
        },
        {"name": "at-once", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"},
    ],
}


def cli(*argv: str) -> str:
    out = io.StringIO()
    assert main(list(argv), stdout=out) == 0, out.getvalue()
    return out.getvalue()


def test_status_lists_what_is_noticed_stopped_snoozed_and_restored(cluster: EmulatedCluster) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    until = now + timedelta(days=1)
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("team-a", "team-b", "gpu-reaper")),
            manifest("Deployment", "waits", "team-a", created=LONG_AGO, spec=gpu_spec(1)),
            manifest("Deployment", "gone", "team-b", created=LONG_AGO, spec=gpu_spec(2)),
            manifest("Deployment", "back", "team-b", created=LONG_AGO, spec=gpu_spec(1)),
            manifest(
                "Deployment",
                "resting",
                "team-b",
                created=LONG_AGO,
                spec=gpu_spec(1),
                annotations={names.EXCLUDE_UNTIL: until.isoformat().replace("+00:00", "Z")},
            ),
        ]
    )
    window = TimeWindow.ending(now, timedelta(hours=6))
    found = report(
        *(
            finding(FindingKind.IDLE_ENDPOINT, name=n, namespace=ns, window=window)
            for ns, n in (("team-a", "waits"), ("team-b", "gone"), ("team-b", "back"))
        ),
        window=window,
    )
    settings = RunSettings(
        policy=Policy.model_validate(POLICY), mode=RunMode.APPLY, namespace="gpu-reaper", end=now
    )
    assert run(settings, lambda w, t: found, lambda: cluster.client(), sleep=lambda s: None).exit_code == 0
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]
    cli("restore", "team-b/back", *kube)

    table = cli("status", *kube).splitlines()
    assert table[0].split() == ["NAMESPACE", "KIND", "NAME", "STATE", "SINCE", "UNTIL", "RULE", "NEXT"]
    rows = {(r.split()[0], r.split()[2]): r for r in table[1:]}
    assert set(rows) == {("team-a", "waits"), ("team-b", "gone"), ("team-b", "back"), ("team-b", "resting")}
    assert rows[("team-b", "gone")].split()[3] == "stopped"
    assert rows[("team-b", "gone")].endswith("gpu-reaper restore team-b/gone")
    assert "snoozed" in rows[("team-b", "resting")].split()

    doc = json.loads(cli("status", "-o", "json", *kube))
    by_name = {i["name"]: i for i in doc["items"]}
    waits = by_name["waits"]
    assert waits["state"] == "noticed" and waits["rule"] == "noticed"
    assert waits["until"] == (now + timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    assert waits["command"].startswith(
        "kubectl annotate --overwrite deployment waits -n team-a gpu-reaper/exclude-until="
    )
    assert (
        by_name["gone"]["state"] == "stopped"
        and by_name["gone"]["command"] == "gpu-reaper restore team-b/gone"
    )
    assert by_name["back"]["state"] == "restored" and by_name["back"]["since"] is not None
    assert by_name["resting"]["state"] == "snoozed"
    assert by_name["resting"]["until"] == until.isoformat().replace("+00:00", "Z")
    assert len(doc["items"]) == 4  # one record per workload
