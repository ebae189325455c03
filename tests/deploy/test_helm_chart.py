"""The Helm chart renders valid Kubernetes objects that do what the project promises.

Rendering uses Helm's own engine in-process (helm-python-sdk); every object is validated against
the Kubernetes 1.28 schema and the newest one kubernetes-validate bundles (strict: unknown fields
fail), and the Prometheus Operator objects against their CRD fields (tests/deploy/crd_schemas.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from helm_python.errors import HelmRenderError

from cli.exporter import from_args as exporter_args
from cli.reaper import _build_parser as reaper_parser
from exporter.counters_file import parse_collectors
from exporter.fields import DCGM_FIELDS
from harness.binaries import require_binary
from harness.chart import CHART_DIR, NAMESPACE, Manifest, lint, only, render, values_file
from harness.crd_schemas import SCHEMAS
from harness.grafana import dashboard_files
from harness.rules import ALERTS_DIR, RULE_FILES
from reaper.policy import parse_policy

RECORDING_RULES = ALERTS_DIR / "gpu-analyzer.recording.yaml"
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
VALUE_SETS = {"default-values": {}, "all-enabled": values_file("all-enabled-values.yaml")}
KUBE_VERSIONS = ("1.28", kubernetes_validate.latest_version())
RENDERED = {name: render(values) for name, values in VALUE_SETS.items()}
TEMPLATES = sorted(p.name for p in (CHART_DIR / "templates").glob("*.yaml"))


# Kinds the chart renders only on request, that need a newer Kubernetes than 1.28 (their values say so).
MIN_KUBE_VERSION = {"ValidatingAdmissionPolicy": "1.30", "ValidatingAdmissionPolicyBinding": "1.30"}


def _cases() -> list[Any]:
    return [
        pytest.param(m, version, VALUE_SETS[name], id=f"{name}/k8s-{version}/{m.id}")
        for name, manifests in RENDERED.items()
        for m in manifests
        for version in KUBE_VERSIONS
        if _version(version) >= _version(MIN_KUBE_VERSION.get(m.kind, "1.28"))
    ]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _namespace_of(manifest: Manifest, values: dict[str, Any]) -> str:
    """Where an object belongs: the exporter's in exporter.namespace, dashboards in theirs, the rest
    in the release's namespace."""
    component = manifest.doc["metadata"]["labels"].get("app.kubernetes.io/component")
    if component == "gpu-exporter":
        return str(values.get("exporter", {}).get("namespace") or NAMESPACE)
    if "-dashboard-" in manifest.name:
        return str(values.get("dashboards", {}).get("namespace") or NAMESPACE)
    return NAMESPACE


def _container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod_spec["containers"]
    return container


def _reaper(manifests: list[Manifest]) -> dict[str, Any]:
    return _container(only(manifests, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"])


def _exporter(manifests: list[Manifest]) -> dict[str, Any]:
    return _container(only(manifests, "DaemonSet")["spec"]["template"]["spec"])


@pytest.mark.parametrize(("manifest", "version", "values"), _cases())
def test_rendered_object_is_valid_for_kubernetes(
    manifest: Manifest, version: str, values: dict[str, Any]
) -> None:
    if manifest.kind in SCHEMAS:
        jsonschema.validate(manifest.doc, SCHEMAS[manifest.kind])
    else:
        kubernetes_validate.validate(manifest.doc, version, strict=True)
    if manifest.kind not in CLUSTER_SCOPED:
        assert manifest.doc["metadata"]["namespace"] == _namespace_of(manifest, values)
    else:
        assert "namespace" not in manifest.doc["metadata"]


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
@pytest.mark.parametrize("version", ["v1.28.0", f"v{kubernetes_validate.latest_version()}.0"])
def test_helm_lint_passes_strict(values: dict[str, Any], version: str) -> None:
    report = lint(values, version)
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert problems == []


def test_all_enabled_values_exercise_every_template() -> None:
    used = {m.template.removeprefix("templates/") for m in RENDERED["all-enabled"]}
    # The digest's is a second CronJob: tests/deploy/test_digest_chart.py renders it with these values.
    assert used | {"digest-cronjob.yaml"} == set(TEMPLATES)


def test_default_install_is_a_dry_run_that_creates_no_monitoring_objects() -> None:
    manifests = RENDERED["default-values"]
    assert "--dry-run" in _reaper(manifests)["args"]
    assert "--apply" not in _reaper(manifests)["args"]
    kinds = {m.kind for m in manifests}
    assert kinds.isdisjoint({"ServiceMonitor", "PodMonitor", "PrometheusRule"})
    assert not [m for m in manifests if m.kind == "ConfigMap" and "dashboard" in m.name]
    # The one policy on by default closes the exporter's /metrics (tests/deploy/test_chart_security.py).
    assert [m.name for m in manifests if m.kind == "NetworkPolicy"] == ["kgr-kube-gpu-reaper-gpu-exporter"]


def test_exporter_runs_as_the_architecture_specifies() -> None:
    exporter = _exporter(RENDERED["default-values"])
    pod = only(RENDERED["default-values"], "DaemonSet")["spec"]["template"]["spec"]
    assert exporter["args"] == [
        "gpu-exporter",
        "--listen",
        ":9400",
        "--interval",
        "5s",
        "--kubelet-socket",
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        "--log-format",
        "json",
        "--metric-names",
        "legacy",
    ]
    node_name = next(e for e in exporter["env"] if e["name"] == "NODE_NAME")
    assert node_name["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["automountServiceAccountToken"] is False
    assert "hostPID" not in pod and "hostNetwork" not in pod
    # Liveness is the loop, readiness is NVML; a not-ready exporter is still scraped (gpu_up 0).
    assert exporter["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert exporter["readinessProbe"]["httpGet"]["path"] == "/readyz"
    service = only(RENDERED["default-values"], "Service")
    assert service["spec"]["publishNotReadyAddresses"] is True
    # Reading every GPU must not take one away from workloads.
    assert "nvidia.com/gpu" not in json.dumps(exporter["resources"])


def test_exporter_web_config_mounts_the_secret_and_probes_over_https() -> None:
    manifests = render({"exporter": {"webConfig": {"secretName": "gpu-exporter-web", "tls": True}}})
    exporter = _exporter(manifests)
    pod = only(manifests, "DaemonSet")["spec"]["template"]["spec"]
    args = exporter["args"]
    assert args[args.index("--web.config.file") + 1] == "/etc/gpu-exporter/web/web.yml"
    exporter_args(args[1:])  # the exporter's own parser accepts what the chart passes
    assert {"name": "web-config", "secret": {"secretName": "gpu-exporter-web"}} in pod["volumes"]
    assert {"name": "web-config", "mountPath": "/etc/gpu-exporter/web", "readOnly": True} in exporter[
        "volumeMounts"
    ]
    assert exporter["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert exporter["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_exporter_mounts_only_the_pod_resources_directory_read_only() -> None:
    exporter = _exporter(RENDERED["default-values"])
    pod = only(RENDERED["default-values"], "DaemonSet")["spec"]["template"]["spec"]
    assert pod["volumes"] == [
        {"name": "pod-resources", "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}}
    ]
    assert exporter["volumeMounts"] == [
        {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
    ]


@pytest.mark.parametrize("component", ["DaemonSet", "CronJob"])
def test_containers_hold_no_capability_and_cannot_escalate(component: str) -> None:
    manifests = RENDERED["default-values"]
    container = _exporter(manifests) if component == "DaemonSet" else _reaper(manifests)
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert not security.get("privileged", False)


def test_reaper_runs_as_a_non_root_user() -> None:
    pod = only(RENDERED["default-values"], "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0


@pytest.mark.parametrize("values", VALUE_SETS.keys())
def test_exporter_command_line_is_accepted_by_gpu_exporter(values: str) -> None:
    args = _exporter(RENDERED[values])["args"]
    assert args[0] == "gpu-exporter"
    config = exporter_args(args[1:], env={"NODE_NAME": "gpu-node-1"})
    assert config.listen_port == 9400
    assert config.hostname == "gpu-node-1"


def test_reaper_cronjob_never_overlaps_and_skips_late_runs() -> None:
    cronjob = only(RENDERED["default-values"], "CronJob")["spec"]
    assert cronjob["concurrencyPolicy"] == "Forbid"
    assert cronjob["startingDeadlineSeconds"] > 0
    # A run must end before another could take over its Lease (600 s).
    assert cronjob["jobTemplate"]["spec"]["activeDeadlineSeconds"] < 600
    assert cronjob["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("values", VALUE_SETS.keys())
def test_reaper_command_line_is_accepted_by_gpu_reaper(values: str) -> None:
    args = _reaper(RENDERED[values])["args"]
    assert args[0] == "gpu-reaper"
    assert args[args.index("run") + 1] == "--prometheus-url"
    parsed = reaper_parser().parse_args(args[1:])
    assert parsed.policy == Path("/etc/gpu-reaper/policy.yaml")
    assert parsed.apply is (values == "all-enabled")
    assert getattr(parsed, "_deprecated", []) == []  # no flag spelling the CLI warns about


def test_cluster_name_becomes_the_reapers_cluster() -> None:
    """Empty by default (a Prometheus holding this cluster alone); set, it is `--cluster`."""
    assert "--cluster" not in _reaper(RENDERED["default-values"])["args"]
    args = _reaper(render({"clusterName": "prod-eu-1"}))["args"]
    assert args[args.index("--cluster") + 1] == "prod-eu-1"
    parsed = reaper_parser().parse_args(args[1:])
    assert parsed.command == "run" and parsed.cluster == "prod-eu-1"
    all_enabled = _reaper(RENDERED["all-enabled"])["args"]
    assert all_enabled[all_enabled.index("--cluster") + 1] == "prod-eu-1"


@pytest.mark.parametrize(
    ("schedule", "interval"),
    [
        pytest.param("0 * * * *", None, id="hourly"),
        pytest.param("@hourly", None, id="at-hourly"),
        pytest.param("*/30 * * * *", timedelta(minutes=30), id="every-30-minutes"),
        pytest.param("0 */6 * * *", timedelta(hours=6), id="every-6-hours"),
        pytest.param("15 3 * * *", timedelta(days=1), id="daily"),
    ],
)
def test_a_schedule_other_than_hourly_is_passed_as_the_run_interval(
    schedule: str, interval: timedelta | None
) -> None:
    """A dry-run replays the runs apply would have made: at the schedule's interval, not at 1 h."""
    args = _reaper(render({"reaper": {"schedule": schedule}}))["args"]
    assert ("--run-interval" in args) is (interval is not None)
    assert reaper_parser().parse_args(args[1:]).run_interval == (interval or timedelta(hours=1))


def test_a_schedule_without_an_even_interval_needs_run_interval() -> None:
    with pytest.raises(HelmRenderError, match=r"reaper\.schedule .*0 9-17 .*set reaper\.runInterval"):
        render({"reaper": {"schedule": "0 9-17 * * 1-5"}})
    args = _reaper(render({"reaper": {"schedule": "0 9-17 * * 1-5", "runInterval": "2h"}}))["args"]
    assert reaper_parser().parse_args(args[1:]).run_interval == timedelta(hours=2)
    # Set, it wins over what a simple schedule says.
    args = _reaper(render({"reaper": {"schedule": "*/30 * * * *", "runInterval": "1h"}}))["args"]
    assert "--run-interval" not in args


def test_an_apply_install_needs_no_interval_whatever_its_schedule() -> None:
    """Only a dry run replays runs at an interval: an apply install on a working-hours schedule renders."""
    args = _reaper(render({"reaper": {"schedule": "0 9-17 * * 1-5", "apply": True}}))["args"]
    assert "--apply" in args and "--run-interval" not in args


@pytest.mark.parametrize("values", VALUE_SETS.keys())
def test_policy_comes_from_a_configmap_mounted_where_the_args_point(values: str) -> None:
    manifests = RENDERED[values]
    reaper = _reaper(manifests)
    pod = only(manifests, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "policy"]
    (mount,) = [m for m in reaper["volumeMounts"] if m["name"] == "policy"]
    assert mount == {"name": "policy", "mountPath": "/etc/gpu-reaper", "readOnly": True}
    (configmap,) = [m for m in manifests if m.kind == "ConfigMap" and m.name == volume["configMap"]["name"]]
    policy = parse_policy(configmap.doc["data"]["policy.yaml"], "policy.yaml")
    assert policy.mode == ("apply" if values == "all-enabled" else "dry-run")


def test_prometheus_credentials_are_files_from_the_secret_never_arguments_or_environment() -> None:
    manifests = render(
        {
            "reaper": {
                "prometheusAuth": {
                    "existingSecret": "thanos",
                    "caKey": "ca.crt",
                    "usernameKey": "user",
                    "passwordKey": "password",
                }
            }
        }
    )
    reaper = _reaper(manifests)
    args = reaper["args"]
    assert "--prometheus-token-file" not in args
    assert args[args.index("--prometheus-ca-file") + 1] == "/var/run/secrets/gpu-reaper/prometheus/ca.crt"
    assert (
        args[args.index("--prometheus-password-file") + 1]
        == "/var/run/secrets/gpu-reaper/prometheus/password"
    )
    env = {e["name"]: e.get("valueFrom") for e in reaper["env"]}
    # The user name is no secret; the password never travels in the environment.
    assert env["GPU_PROMETHEUS_USER"] == {"secretKeyRef": {"name": "thanos", "key": "user"}}
    assert "GPU_PROMETHEUS_PASSWORD" not in env
    pod = only(manifests, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "prometheus-auth"]
    assert volume["secret"]["secretName"] == "thanos"
    # Only the keys the reaper reads are mounted (the user name comes from the environment).
    assert {i["key"] for i in volume["secret"]["items"]} == {"ca.crt", "password"}
    assert getattr(reaper_parser().parse_args(args[1:]), "_deprecated", []) == []
    # A bearer token instead: a file too (the reaper takes one kind of credentials, not both).
    args = _reaper(render({"reaper": {"prometheusAuth": {"existingSecret": "thanos", "tokenKey": "token"}}}))[
        "args"
    ]
    assert args[args.index("--prometheus-token-file") + 1] == "/var/run/secrets/gpu-reaper/prometheus/token"


def test_slack_credentials_are_files_from_the_named_secret() -> None:
    reaper = _reaper(RENDERED["all-enabled"])
    env = {e["name"]: e for e in reaper["env"]}
    assert env["GPU_REAPER_SLACK_TOKEN_FILE"]["value"] == "/var/run/secrets/gpu-reaper/slack/bot-token"
    assert (
        env["GPU_REAPER_SLACK_WEBHOOK_URL_FILE"]["value"] == "/var/run/secrets/gpu-reaper/slack/webhook-url"
    )
    assert not [e for e in reaper["env"] if "secretKeyRef" in e.get("valueFrom", {}) and "SLACK" in e["name"]]
    pod = only(RENDERED["all-enabled"], "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "slack"]
    assert volume["secret"] == {
        "secretName": "gpu-reaper-slack",
        "items": [{"key": "bot-token", "path": "bot-token"}, {"key": "webhook-url", "path": "webhook-url"}],
    }
    assert {"name": "slack", "mountPath": "/var/run/secrets/gpu-reaper/slack", "readOnly": True} in reaper[
        "volumeMounts"
    ]
    assert not any(
        "SLACK" in name for name in (e["name"] for e in _reaper(RENDERED["default-values"])["env"])
    )
    assert not [m for m in RENDERED["all-enabled"] if m.kind == "Secret"], "the chart never holds a secret"


# The reaper's RBAC is checked against the requests it really makes, not a list kept by hand:
# tests/reaper/test_reaper_rbac.py runs it against the emulated API server and derives what it needs.


def _rule_files() -> list[dict[str, Any]]:
    return [g for p in RULE_FILES for g in yaml.safe_load(p.read_text(encoding="utf-8"))["groups"]]


def test_prometheus_rule_is_built_from_the_alerts_directory(tmp_path: Path) -> None:
    spec = only(RENDERED["all-enabled"], "PrometheusRule")["spec"]
    source = {r["alert"]: r for g in _rule_files() for r in g["rules"]}
    rendered = {r["alert"]: r for g in spec["groups"] for r in g["rules"] if "alert" in r}
    assert rendered.keys() == source.keys()
    for alert, rule in rendered.items():
        assert rule["expr"] == source[alert]["expr"]
        assert rule["labels"] == {**source[alert]["labels"], "team": "ml-platform"}
        assert rule["annotations"]["runbook_url"].endswith(f"docs/runbooks.md#{alert.lower()}")
    path = tmp_path / "rendered.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": spec["groups"]}), encoding="utf-8")
    result = subprocess.run(
        [require_binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_analyzer_recording_rules_are_opt_in_and_as_shipped() -> None:
    source = yaml.safe_load(RECORDING_RULES.read_text(encoding="utf-8"))["groups"]
    by_default = render({"prometheusRule": {"enabled": True}})
    assert not [
        r for g in only(by_default, "PrometheusRule")["spec"]["groups"] for r in g["rules"] if "record" in r
    ]
    spec = only(RENDERED["all-enabled"], "PrometheusRule")["spec"]
    recording = [g for g in spec["groups"] if any("record" in r for r in g["rules"])]
    # Verbatim: no alert labels (they would become labels of every rollup series), no runbooks.
    assert recording == source


def test_prometheus_rule_groups_can_be_left_out() -> None:
    manifests = render({"prometheusRule": {"enabled": True, "disabledGroups": ["gpu-reaper"]}})
    groups = [g["name"] for g in only(manifests, "PrometheusRule")["spec"]["groups"]]
    assert sorted(groups) == ["gpu-exporter", "gpu-health", "gpu-waste"]
    rule = only(manifests, "PrometheusRule")["spec"]["groups"][0]["rules"][0]
    assert "runbook_url" not in rule["annotations"]


def test_dashboards_ship_as_configmaps_for_the_grafana_sidecar() -> None:
    configmaps = [m for m in RENDERED["all-enabled"] if m.kind == "ConfigMap" and "-dashboard-" in m.name]
    assert len(configmaps) == len(dashboard_files())
    shipped = {}
    for m in configmaps:
        assert m.doc["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert m.doc["metadata"]["namespace"] == "grafana"
        ((key, text),) = m.doc["data"].items()
        shipped[key] = json.loads(text)
    for path in dashboard_files():
        assert shipped[f"kube-gpu-reaper-{path.stem}.json"] == json.loads(path.read_text(encoding="utf-8"))


def test_network_policies_let_prometheus_scrape_and_the_reaper_call_out_only() -> None:
    policies = {m.name: m.doc["spec"] for m in RENDERED["all-enabled"] if m.kind == "NetworkPolicy"}
    exporter = next(p for name, p in policies.items() if name.endswith("gpu-exporter"))
    reaper = next(p for name, p in policies.items() if name.endswith("gpu-reaper"))
    assert exporter["egress"] == [] and exporter["ingress"][0]["ports"] == [
        {"port": "metrics", "protocol": "TCP"}
    ]
    assert reaper["ingress"] == []
    ports = {p["port"] for rule in reaper["egress"] for p in rule["ports"]}
    assert {53, 443, 9090} <= ports


def test_scrape_objects_keep_the_exporters_pod_labels() -> None:
    manifests = RENDERED["all-enabled"]
    service_monitor = only(manifests, "ServiceMonitor")["spec"]["endpoints"][0]
    pod_monitor = only(manifests, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    assert service_monitor["honorLabels"] is True and pod_monitor["honorLabels"] is True
    # The job label must match the exporter alerts' `job=~".*(gpu-exporter|dcgm-exporter).*"`.
    assert "gpu-exporter" in only(manifests, "Service")["metadata"]["name"]


def test_shared_gpu_attribution_adds_host_pids_and_the_pod_log_directory_read_only() -> None:
    manifests = RENDERED["all-enabled"]
    pod = only(manifests, "DaemonSet")["spec"]["template"]["spec"]
    exporter = _exporter(manifests)
    assert pod["hostPID"] is True
    assert {"name": "pod-logs", "mountPath": "/var/log/pods", "readOnly": True} in exporter["volumeMounts"]
    assert exporter["args"][exporter["args"].index("--pod-log-dir") + 1] == "/var/log/pods"
    assert all(m["readOnly"] for m in exporter["volumeMounts"])


def test_mig_monitor_is_the_one_opt_in_privilege_and_comes_with_its_environment() -> None:
    """Without it the exporter holds no capability (GPM needs none). With it, the NVIDIA runtime mounts
    the MIG monitor capability, which it grants only to a container holding SYS_ADMIN: both or neither."""
    default = _exporter(RENDERED["default-values"])
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in {e["name"] for e in default["env"]}
    mig = _exporter(render({"exporter": {"migMonitor": {"enabled": True}}}))
    assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in mig["env"]
    security = mig["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert security["allowPrivilegeEscalation"] is True  # what SYS_ADMIN means; the API refuses false
    assert security["readOnlyRootFilesystem"] is True and not security.get("privileged", False)


_A100_SPLIT = (
    "Update the two blocks of docs/install.md's A100 split (its dcgm-exporter counters block and its "
    "exporter.collectors values block) to match exporter/fields.py, the DCGM families the exporter "
    "knows; then run `pytest tests/deploy/test_helm_chart.py -k a100_split`"
)


def _install_md_blocks() -> list[str]:
    text = (CHART_DIR.parents[2] / "docs" / "install.md").read_text(encoding="utf-8")
    fences = re.findall(r"^( *)```\w*\n(.*?)^\1```", text, flags=re.DOTALL | re.MULTILINE)
    return [textwrap.dedent(block) for _, block in fences]


def test_the_documented_a100_split_serves_every_dcgm_family_once() -> None:
    """docs/install.md: dcgm-exporter serves DCGM_FI_PROF_* from its profiling module, gpu-exporter the
    rest through exporter.collectors. The chart mounts that file where -f reads it, and the two files
    together cover every DCGM family the exporter knows, none twice."""
    blocks = _install_md_blocks()
    values_blocks = [b for b in blocks if b.startswith("exporter:\n  collectors:")]
    dcgm_blocks = [b for b in blocks if b.startswith("DCGM_FI_PROF_")]
    assert (len(values_blocks), len(dcgm_blocks)) == (1, 1), (
        "docs/install.md must hold one dcgm-exporter counters block (lines starting DCGM_FI_PROF_) and "
        f"one `exporter:\\n  collectors:` values block: {_A100_SPLIT}"
    )
    (values_block,), (dcgm_block,) = values_blocks, dcgm_blocks
    values = yaml.safe_load(values_block)
    manifests = render(values)
    exporter = _exporter(manifests)
    args = exporter["args"]
    path = args[args.index("--collectors") + 1]
    config = exporter_args(args[1:])
    assert config.collectors == Path(path)
    mount = next(m for m in exporter["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    assert mount["readOnly"] is True
    config_map = next(m for m in manifests if m.kind == "ConfigMap" and m.name.endswith("-collectors"))
    ours = parse_collectors(config_map.doc["data"][Path(path).name], "exporter.collectors")
    theirs = parse_collectors(dcgm_block, "dcgm-exporter counters")
    assert ours.skipped == () and theirs.skipped == ()
    dcgm_served = {name for name in ours.served if name.startswith("DCGM_")}
    twice = sorted(dcgm_served & theirs.served)
    assert not twice, f"served by both exporters: {twice}. {_A100_SPLIT}"
    covered = dcgm_served | {n for n in theirs.served if n.startswith("DCGM_")}
    assert covered == DCGM_FIELDS, (
        f"families the exporter knows that neither block serves: {sorted(DCGM_FIELDS - covered)}; "
        f"served but unknown to it: {sorted(covered - DCGM_FIELDS)}. {_A100_SPLIT}"
    )
    pod = only(manifests, "DaemonSet")["spec"]["template"]["metadata"]
    assert "checksum/collectors" in pod["annotations"]  # a new file rolls the pods
