"""``wake: keda-http``: an idle model server is handed to the KEDA HTTP add-on, so a request wakes it.

Against the emulator with the real client, through the command line: the add-on's CRDs served in
their new (InterceptorRoute + ScaledObject) or old (HTTPScaledObject) API, or not at all; a KEDA
ScaledObject already on the workload paused and unpaused; an HPA refused; restore removes exactly
what the reaper created. Every object written is checked against the published CRDs' fields and types.
"""

from __future__ import annotations

import io
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from cli.reaper import main
from common.model import FindingKind, TimeWindow
from harness.chart import NAMESPACE, only, render
from harness.crd_schemas import ADDON_SCHEMAS
from harness.findings import finding, report
from harness.kube_emulator import EmulatedCluster
from harness.rbac import Grant, access_of, grants, is_discovery
from reaper import keda_http, wake
from reaper.messages import preview
from reaper.plan_report import run_section
from reaper.policy import RunMode, parse_policy
from reaper.runner import RunReport, RunSettings, run
from simulation import controllers
from simulation.in_memory_cluster import manifest

LONG_AGO = datetime.now(UTC) - timedelta(days=30)
POLICY = """\
safety: {consecutiveRuns: 1}
rules:
  - name: wake-idle
    match: {findings: [idle_endpoint], kinds: [Deployment, StatefulSet]}
    action: scale_to_zero
    wake: keda-http
"""
NEW = (("http.keda.sh/v1beta1", "InterceptorRoute", "interceptorroutes"),)
OLD = (("http.keda.sh/v1alpha1", "HTTPScaledObject", "httpscaledobjects"),)
KEDA = (("keda.sh/v1alpha1", "ScaledObject", "scaledobjects"),)


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    return code, out.getvalue().strip().splitlines()[-1]


def _kube(cluster: EmulatedCluster) -> list[str]:
    return ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", "gpu-reaper"]


def _run(cluster: EmulatedCluster, tmp_path: Path, *flags: str, name: str = "llm") -> tuple[int, str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    window = TimeWindow.ending(datetime.now(UTC), timedelta(hours=6))
    found = finding(FindingKind.IDLE_ENDPOINT, name=name, namespace="serving", window=window)
    findings = tmp_path / "findings.json"
    findings.write_text(report(found, window=window).to_json(), encoding="utf-8")
    return _cli("run", "--findings", str(findings), "--policy", str(policy), *flags, *_kube(cluster))


def _service(name: str, selector: dict[str, str], *ports: dict[str, Any], headless: bool = False) -> Any:
    spec: dict[str, Any] = {"selector": selector, "ports": list(ports)}
    if headless:
        spec["clusterIP"] = "None"
    return manifest("Service", name, "serving", spec=spec)


def _seed(cluster: EmulatedCluster, *apis: tuple[str, str, str], extra: tuple[Any, ...] = ()) -> None:
    for api_version, kind, plural in apis:
        cluster.install_crd(api_version, kind, plural, scale=False)
    cluster.declare("Service")
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("serving", "gpu-reaper")),
            controllers.deployment("serving", "llm", LONG_AGO, replicas=3),
            _service("llm", {"app": "llm"}, {"name": "http", "port": 8000, "targetPort": 8000}),
            *extra,
        ]
    )


def _created(cluster: EmulatedCluster, kind: str) -> list[dict[str, Any]]:
    return [o for o in cluster.objects(kind) if o["metadata"].get("namespace") == "serving"]


def _valid(obj: dict[str, Any]) -> None:
    body = {k: v for k, v in obj.items() if k != "status"}
    body["metadata"] = {k: obj["metadata"][k] for k in ("name", "namespace", "labels", "annotations")}
    jsonschema.validate(body, ADDON_SCHEMAS[obj["kind"]])


def test_new_api_hands_over_then_restore_removes_exactly_what_it_made(
    cluster: EmulatedCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Someone else's route in the same namespace: restore must leave it.
    theirs = manifest(
        "InterceptorRoute",
        "other",
        "serving",
        spec={
            "target": {"service": "other", "port": 80},
            "scalingMetric": {"concurrency": {"targetValue": 5}},
        },
    )
    _seed(cluster, *NEW, *KEDA, extra=(theirs,))
    code, line = _run(cluster, tmp_path, "--apply")
    assert code == 0 and line.endswith("planned=1 applied=1 skipped=0 failed=0"), line

    assert cluster.obj("Deployment", "serving", "llm")["spec"]["replicas"] == 0
    (route,) = [o for o in _created(cluster, "InterceptorRoute") if o["metadata"]["name"] == "llm"]
    (scaled,) = _created(cluster, "ScaledObject")
    for obj in (route, scaled):
        _valid(obj)
        assert wake.wakes(obj, "Deployment", "llm")
    assert route["spec"]["target"] == {"service": "llm", "port": 8000}
    assert route["spec"]["rules"] == [
        {"hosts": ["llm.serving", "llm.serving.svc", "llm.serving.svc.cluster.local"]}
    ]
    assert scaled["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"}
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (0, 3)
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger == {
        "type": "external-push",
        "metadata": {"scalerAddress": wake.DEFAULT_SCALER_ADDRESS, "interceptorRoute": "llm"},
    }

    # The next run sees its own hand-over: nothing left to do, and no second set of objects.
    code, line = _run(cluster, tmp_path, "--apply")
    assert code == 0 and "applied=0" in line, line

    # Woken by a request (KEDA scaled it up): the next run leaves it to the add-on.
    woken = {"spec": {"replicas": 2}, "status": controllers.replicated_status(2)}
    cluster.call(lambda: cluster.server.controller_patch("Deployment", "serving", "llm", woken))
    with caplog.at_level(logging.INFO):
        code, line = _run(cluster, tmp_path, "--apply")
    assert code == 0 and line.endswith("planned=0 applied=0 skipped=1 failed=0"), line
    assert any("(already_done): handed to the KEDA HTTP add-on" in r.getMessage() for r in caplog.records)
    # Restored: the objects go, the count KEDA set stays.
    code, line = _cli("restore", "serving/llm", *_kube(cluster))
    assert code == 0 and "restored=1" in line, line
    assert [o["metadata"]["name"] for o in _created(cluster, "InterceptorRoute")] == ["other"]
    assert _created(cluster, "ScaledObject") == []
    assert cluster.obj("Deployment", "serving", "llm")["spec"]["replicas"] == 2


def test_restore_at_zero_sets_the_recorded_replicas_again(cluster: EmulatedCluster, tmp_path: Path) -> None:
    _seed(cluster, *NEW, *KEDA)
    assert _run(cluster, tmp_path, "--apply")[0] == 0
    code, line = _cli("restore", "--all", *_kube(cluster))
    assert code == 0 and line.endswith("restored=1 unchanged=0 failed=0"), line
    assert cluster.obj("Deployment", "serving", "llm")["spec"]["replicas"] == 3
    assert _created(cluster, "InterceptorRoute") == [] and _created(cluster, "ScaledObject") == []


def test_old_api_writes_one_httpscaledobject(cluster: EmulatedCluster, tmp_path: Path) -> None:
    _seed(cluster, *OLD, *KEDA)
    code, line = _run(cluster, tmp_path, "--apply")
    assert code == 0 and "applied=1" in line, line
    (httpso,) = _created(cluster, "HTTPScaledObject")
    _valid(httpso)
    assert httpso["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "llm",
        "service": "llm",
        "port": 8000,
    }
    assert httpso["spec"]["replicas"] == {"min": 0, "max": 3}
    assert _created(cluster, "ScaledObject") == []  # the add-on's operator writes that one
    assert _cli("restore", "serving/llm", *_kube(cluster))[0] == 0
    assert _created(cluster, "HTTPScaledObject") == []
    assert cluster.obj("Deployment", "serving", "llm")["spec"]["replicas"] == 3


def test_without_the_addon_the_run_says_so_and_writes_nothing(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    _seed(cluster)
    code, line = _run(cluster, tmp_path, "--apply")
    assert code == 2 and "error=bad_input" in line, line
    assert cluster.obj("Deployment", "serving", "llm")["spec"]["replicas"] == 3
    assert not [r for r in cluster.mutations() if "/namespaces/serving/" in r[1]]


def test_dry_run_writes_nothing(cluster: EmulatedCluster, tmp_path: Path) -> None:
    _seed(cluster, *NEW, *KEDA)
    code, line = _run(cluster, tmp_path, "--dry-run")
    assert code == 0 and "planned=1" in line, line
    assert not [r for r in cluster.mutations() if "/namespaces/serving/" in r[1]]
    assert _created(cluster, "InterceptorRoute") == [] and _created(cluster, "ScaledObject") == []


def test_an_existing_scaledobject_is_paused_and_unpaused_on_restore(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    keda_so = manifest(
        "ScaledObject",
        "llm-queue",
        "serving",
        spec={
            "scaleTargetRef": {"name": "llm"},
            "minReplicaCount": 1,
            "maxReplicaCount": 4,
            "triggers": [{"type": "prometheus", "metadata": {"query": "sum(queue)", "threshold": "5"}}],
        },
    )
    keda_hpa = manifest(
        "HorizontalPodAutoscaler",
        "keda-hpa-llm-queue",
        "serving",
        spec={
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
            "maxReplicas": 4,
        },
        owner=keda_so,
    )
    _seed(cluster, *NEW, *KEDA, extra=(keda_so, keda_hpa))
    code, line = _run(cluster, tmp_path, "--apply")
    assert code == 0 and "applied=1" in line, line
    annotations = cluster.obj("ScaledObject", "serving", "llm-queue")["metadata"]["annotations"]
    assert annotations[wake.KEDA_PAUSED_REPLICAS] == "0" and wake.PAUSED_BY_REAPER in annotations
    assert cluster.obj("Deployment", "serving", "llm")["spec"]["replicas"] == 0
    assert _created(cluster, "InterceptorRoute") == []  # KEDA allows one ScaledObject per workload

    assert _cli("restore", "serving/llm", *_kube(cluster))[0] == 0
    so = cluster.obj("ScaledObject", "serving", "llm-queue")
    assert not (so["metadata"].get("annotations") or {})
    assert so["spec"]["minReplicaCount"] == 1  # the owner's object, otherwise as it was
    assert cluster.obj("Deployment", "serving", "llm")["spec"]["replicas"] == 3


def test_an_hpa_is_refused_with_its_reason(cluster: EmulatedCluster, tmp_path: Path) -> None:
    hpa = manifest(
        "HorizontalPodAutoscaler",
        "llm",
        "serving",
        spec={
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
            "maxReplicas": 4,
        },
    )
    _seed(cluster, *NEW, *KEDA, extra=(hpa,))
    code, line = _run(cluster, tmp_path, "--apply")
    assert code == 0 and "applied=0" in line and "skipped=1" in line, line
    assert cluster.obj("Deployment", "serving", "llm")["spec"]["replicas"] == 3
    assert _created(cluster, "ScaledObject") == []


@pytest.mark.parametrize(
    ("services", "why"),
    [
        ((), "no Service selects"),
        (
            (
                _service("a", {"app": "llm"}, {"name": "http", "port": 80}),
                _service("b", {"app": "llm"}, {"name": "http", "port": 81}),
            ),
            "several Services",
        ),
        (
            (_service("a", {"app": "llm"}, {"name": "grpc-x", "port": 80}, {"name": "http", "port": 81}),),
            "several",
        ),
    ],
)
def test_serving_port_refuses_what_it_cannot_route(services: tuple[Any, ...], why: str) -> None:
    workload = controllers.deployment("serving", "llm", LONG_AGO)
    decided = wake.serving_port(workload, services)
    assert isinstance(decided, wake.Refuse) and why in decided.reason


def test_serving_port_prefers_the_routed_service_over_the_headless_one() -> None:
    workload = controllers.deployment("serving", "llm", LONG_AGO)
    services = (
        _service("llm-headless", {"app": "llm"}, {"name": "http", "port": 80}, headless=True),
        _service("llm", {"app": "llm"}, {"name": "metrics", "port": 9090}, {"name": "http", "port": 8080}),
        _service("other", {"app": "other"}, {"name": "http", "port": 80}),
    )
    assert wake.serving_port(workload, services) == wake.Served("llm", 8080)


def _granted(values: dict[str, Any]) -> set[Grant]:
    manifests = render(values)
    cronjob = only(manifests, "CronJob")
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    account = (cronjob["metadata"].get("namespace", NAMESPACE), pod["serviceAccountName"])
    return grants((m.doc for m in manifests), account)


def test_the_chart_grants_a_wake_with_rbac_wake_keda_http_and_refuses_it_without(
    cluster: EmulatedCluster, tmp_path: Path
) -> None:
    keda_so = manifest(
        "ScaledObject",
        "batch",
        "serving",
        spec={
            "scaleTargetRef": {"name": "batch"},
            "triggers": [{"type": "cpu", "metadata": {"value": "50"}}],
        },
    )
    other = controllers.deployment("serving", "batch", LONG_AGO, replicas=2)
    _seed(cluster, *NEW, *KEDA, extra=(keda_so, other))
    for name in ("llm", "batch"):  # a hand-over, and a pause
        assert _run(cluster, tmp_path, "--apply", name=name)[0] == 0
    assert _cli("restore", "--all", *_kube(cluster))[0] == 0  # the chart's namespace: NAMESPACE
    used = {access_of(m, u) for m, u in cluster.request_urls() if not is_discovery(u)}
    assert {"interceptorroutes", "scaledobjects", "services"} <= {a.resource for a in used}
    assert {a.verb for a in used if a.group in ("http.keda.sh", "keda.sh")} >= {"create", "delete", "patch"}

    with_wake = _granted({"rbac": {"wakeKedaHttp": True}})
    assert [str(a) for a in used if not any(g.allows(a) for g in with_wake)] == []
    default = _granted({})
    refused = {(a.verb, a.group, a.resource) for a in used if not any(g.allows(a) for g in default)}
    assert refused >= {("list", "", "services"), ("create", "http.keda.sh", "interceptorroutes")}
    assert {g for g in refused if g[1] not in ("", "http.keda.sh", "keda.sh")} == set()


def _dry_run(cluster: EmulatedCluster) -> tuple[RunReport, RunSettings]:
    at = datetime.now(UTC)
    window = TimeWindow.ending(at, timedelta(hours=6))
    found = report(
        finding(FindingKind.IDLE_ENDPOINT, name="llm", namespace="serving", window=window), window=window
    )
    policy = parse_policy(POLICY + 'slack: {channel: "#gpu-waste"}\n', "policy.yaml")
    settings = RunSettings(policy=policy, mode=RunMode.DRY_RUN, namespace="gpu-reaper", end=at)
    return run(settings, lambda w, t: found, lambda: cluster.client()), settings


def test_the_plan_and_slack_say_what_is_handed_over_and_that_a_request_wakes_it(
    cluster: EmulatedCluster,
) -> None:
    _seed(cluster, *NEW, *KEDA)
    done, settings = _dry_run(cluster)
    (result,) = done.results
    assert result.wake == wake.Handed(("InterceptorRoute llm", "ScaledObject llm"), "llm:8000")
    said = "InterceptorRoute llm + ScaledObject llm → Service llm:8000; the first request"
    text = preview(done.messages)
    assert "*Wake on request*" in text and said in text and "cold start" in text
    html = str(run_section(done, settings))
    assert 'class="sub wake"' in html and "InterceptorRoute llm + ScaledObject llm → Service llm:8000" in html


def test_a_paused_scaledobject_is_said_to_wake_on_no_request(cluster: EmulatedCluster) -> None:
    keda_so = manifest(
        "ScaledObject",
        "llm-queue",
        "serving",
        spec={"scaleTargetRef": {"name": "llm"}, "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]},
    )
    _seed(cluster, *NEW, *KEDA, extra=(keda_so,))
    done, _ = _dry_run(cluster)
    (result,) = done.results
    assert result.wake == wake.Handed(("ScaledObject llm-queue",), paused=True)
    text = preview(done.messages)
    assert "ScaledObject llm-queue paused at 0 replicas" in text and "no request wakes it" in text


def _env(values: dict[str, Any]) -> dict[str, str]:
    cronjob = only(render(values), "CronJob")
    (container,) = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_charts_scaler_address_reaches_the_scaledobjects_the_reaper_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert keda_http.SCALER_ADDRESS_ENV not in _env({})
    address = "keda-http-scaler.autoscaling:9090"
    env = _env({"reaper": {"kedaHttpScalerAddress": address}})
    monkeypatch.setenv(keda_http.SCALER_ADDRESS_ENV, env[keda_http.SCALER_ADDRESS_ENV])
    workload = controllers.deployment("serving", "llm", LONG_AGO, replicas=3)
    made = wake.hand_over(
        workload,
        "Deployment",
        wake.Served("llm", 8000),
        3,
        wake.AddonApi.INTERCEPTOR_ROUTE,
        keda_http.settings_from_env(),
    )
    (trigger,) = made.objects[1]["spec"]["triggers"]
    assert trigger["metadata"]["scalerAddress"] == address
