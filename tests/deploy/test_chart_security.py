"""What the chart opens, and to whom: the exporter's privileges and Pod Security level, /metrics'
NetworkPolicy, the reaper's secrets, its node rights, and a reaper scoped to some namespaces.

Pod Security levels are judged by the controls of the Kubernetes Pod Security Standards (baseline,
then restricted) applied to the rendered pod templates, and compared with the table docs/security.md
gives operators. Secrets are followed from the rendered CronJob to the reaper's own readers: the
Secret laid out as the kubelet mounts it, the environment the container gets, the arguments it is
passed. The scoped reaper runs for real against the emulated API server, every request it makes
checked against the Roles the chart renders.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml
from helm_python.errors import HelmRenderError

from cli import prometheus_options
from cli.exporter import from_args as exporter_args
from cli.reaper import _build_parser as reaper_parser
from cli.reaper import main
from common.model import FindingKind
from common.timeutil import rfc3339
from harness.chart import CHART_DIR, NAMESPACE, RELEASE, Manifest, only, render, values_file
from harness.findings import NOW, finding, report
from harness.kube_emulator import EmulatedCluster
from harness.kube_fixtures import _emulator_loop, emulated_cluster
from harness.rbac import Access, Grant, access_of, grants, is_discovery
from reaper import load_credentials
from reaper.kinds import WORKLOAD_KINDS
from reaper.policy import Action, parse_policy
from simulation import controllers
from simulation.in_memory_cluster import manifest

__all__ = ["_emulator_loop"]

DOCS = CHART_DIR.parents[2] / "docs"


def _pod(manifests: list[Manifest], kind: str) -> dict[str, Any]:
    spec = only(manifests, kind)["spec"]
    template = spec["jobTemplate"]["spec"]["template"] if kind == "CronJob" else spec["template"]
    return dict(template["spec"])


def _container(pod: Mapping[str, Any]) -> dict[str, Any]:
    (container,) = pod["containers"]
    return dict(container)


def _notes(values: Mapping[str, Any]) -> str:
    with helm_python.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(dict(values), name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


# --- Pod Security Standards ------------------------------------------------------------------------

# The capabilities a baseline pod may add, and the volume types a restricted pod may use.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for key in ("initContainers", "containers", "ephemeralContainers") for c in pod.get(key) or ()]


def _baseline_violations(pod: Mapping[str, Any]) -> list[str]:
    out = []
    pod_security = pod.get("securityContext") or {}
    out += [f"{k}: true" for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)]
    out += [f"hostPath volume {v['name']}" for v in pod.get("volumes") or () if "hostPath" in v]
    contexts = [pod_security] + [c.get("securityContext") or {} for c in _containers(pod)]
    if any((s.get("windowsOptions") or {}).get("hostProcess") for s in contexts):
        out.append("hostProcess")
    if any((s.get("seccompProfile") or {}).get("type") == "Unconfined" for s in contexts):
        out.append("seccomp Unconfined")
    if any((s.get("appArmorProfile") or {}).get("type") == "Unconfined" for s in contexts):
        out.append("AppArmor Unconfined")
    for s in contexts:
        se = s.get("seLinuxOptions") or {}
        if (
            se.get("user")
            or se.get("role")
            or se.get("type")
            not in (None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
        ):
            out.append(f"SELinux options {se}")
    out += [f"sysctl {s['name']}" for s in pod_security.get("sysctls") or () if s["name"] not in SAFE_SYSCTLS]
    for c in _containers(pod):
        security = c.get("securityContext") or {}
        if security.get("privileged"):
            out.append(f"{c['name']}: privileged")
        added = set((security.get("capabilities") or {}).get("add") or ()) - BASELINE_CAPABILITIES
        out += [f"{c['name']}: adds {cap}" for cap in sorted(added)]
        out += [f"{c['name']}: hostPort {p['hostPort']}" for p in c.get("ports") or () if p.get("hostPort")]
        if security.get("procMount", "Default") != "Default":
            out.append(f"{c['name']}: procMount {security['procMount']}")
    return out


def _restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    out = _baseline_violations(pod)
    pod_security = pod.get("securityContext") or {}
    out += [
        f"volume {v['name']} of type {kind}"
        for v in pod.get("volumes") or ()
        for kind in v
        if kind != "name" and kind not in RESTRICTED_VOLUMES
    ]
    for c in _containers(pod):
        security = c.get("securityContext") or {}
        if security.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation not false")
        non_root = security.get("runAsNonRoot", pod_security.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{c['name']}: runAsNonRoot not true")
        if security.get("runAsUser", pod_security.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        seccomp = (security.get("seccompProfile") or pod_security.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccompProfile {seccomp}")
        capabilities = security.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or ()):
            out.append(f"{c['name']}: does not drop ALL capabilities")
        out += [
            f"{c['name']}: adds {cap}" for cap in capabilities.get("add") or () if cap != "NET_BIND_SERVICE"
        ]
    if pod_security.get("runAsUser") == 0:
        out.append("pod runAsUser 0")
    return out


def pod_security_level(pod: Mapping[str, Any]) -> str:
    """The most restrictive Pod Security Standard the pod meets."""
    if not _restricted_violations(pod):
        return "restricted"
    return "baseline" if not _baseline_violations(pod) else "privileged"


def test_the_pod_security_checks_refuse_what_the_standards_refuse() -> None:
    """The checks above, on pods that each break one control."""
    ok = {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "c",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }
    assert pod_security_level(ok) == "restricted"
    container = ok["containers"][0]  # type: ignore[index]
    for breach, level in (
        ({"hostPID": True}, "privileged"),
        ({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}, "privileged"),
        (
            {
                "containers": [
                    {
                        **container,
                        "securityContext": {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}},
                    }
                ]
            },
            "privileged",
        ),
        ({"securityContext": {"runAsUser": 0}}, "baseline"),
        ({"volumes": [{"name": "n", "nfs": {"server": "x", "path": "/"}}]}, "baseline"),
        ({"containers": [{"name": "c"}]}, "baseline"),
    ):
        assert pod_security_level({**ok, **breach}) == level, breach


def _documented_levels() -> list[tuple[str, dict[str, Any], str]]:
    """docs/security.md's table: (part, the values as --set pairs, the level it says it needs)."""
    text = (DOCS / "security.md").read_text(encoding="utf-8")
    section = text.split("## Pod Security", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[2].startswith("`"):
            continue
        values: dict[str, Any] = {}
        for pair in re.findall(r"`([\w.]+)=([^`]+)`", cells[1]):
            *path, leaf = pair[0].split(".")
            node = values
            for key in path:
                node = node.setdefault(key, {})
            node[leaf] = yaml.safe_load(pair[1])
        rows.append((cells[0], values, cells[2].strip("`")))
    return rows


def test_docs_give_every_exporter_mode_a_level() -> None:
    rows = _documented_levels()
    assert {part for part, _, _ in rows} == {"gpu-exporter", "gpu-reaper"}
    assert len(rows) >= 6


@pytest.mark.parametrize(("part", "values", "level"), _documented_levels())
def test_each_part_needs_the_pod_security_level_the_docs_say(
    part: str, values: dict[str, Any], level: str
) -> None:
    pod = _pod(render(values), "DaemonSet" if part == "gpu-exporter" else "CronJob")
    assert pod_security_level(pod) == level, _restricted_violations(pod)


# --- the exporter ----------------------------------------------------------------------------------


def test_the_exporter_is_root_only_to_open_the_kubelet_socket_and_then_holds_nothing_else() -> None:
    """The one case it runs as user 0: no capability, no host PID namespace, every mount read-only."""
    manifests = render()
    pod = _pod(manifests, "DaemonSet")
    container = _container(pod)
    assert pod["securityContext"]["runAsUser"] == 0 and "runAsNonRoot" not in pod["securityContext"]
    assert "hostPID" not in pod and "hostNetwork" not in pod
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert [v["hostPath"]["path"] for v in pod["volumes"]] == ["/var/lib/kubelet/pod-resources"]
    assert all(m["readOnly"] for m in container["volumeMounts"])
    assert "user 0" in _notes({}) and "exporter.podResourcesGroup" in _notes({})


def test_given_the_sockets_group_the_exporter_runs_as_a_non_root_user_of_its_own() -> None:
    pod = _pod(render({"exporter": {"podResourcesGroup": 2500}}), "DaemonSet")
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True and security["supplementalGroups"] == [2500]
    # Not the image's 65532 (distroless' nonroot) nor 65534 (nobody), which many workloads run as.
    assert security["runAsUser"] not in (0, 65532, 65534) and security["runAsGroup"] != 0
    assert "user 0" not in _notes({"exporter": {"podResourcesGroup": 2500}})


def test_shared_gpu_attribution_runs_non_root_and_mounts_only_the_pod_log_names() -> None:
    manifests = render({"exporter": {"podResourcesGroup": 2500, "sharedGpuAttribution": {"enabled": True}}})
    pod = _pod(manifests, "DaemonSet")
    container = _container(pod)
    assert pod["hostPID"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v} == {
        "/var/lib/kubelet/pod-resources",
        "/var/log/pods",
    }
    assert all(m["readOnly"] for m in container["volumeMounts"])
    config = exporter_args(container["args"][1:], env={"NODE_NAME": "gpu-node-1"})
    assert config.pod_log_dir == Path("/var/log/pods")


def test_shared_gpu_attribution_is_refused_as_root() -> None:
    """Root with the host's PIDs could signal every root process on the node."""
    with pytest.raises(HelmRenderError, match=r"sharedGpuAttribution needs exporter\.podResourcesGroup"):
        render({"exporter": {"sharedGpuAttribution": {"enabled": True}}})


def test_without_pod_attribution_the_exporter_mounts_nothing_of_the_host() -> None:
    """--no-kubernetes: no socket, no host path, a non-root user; what a baseline namespace admits."""
    values = {"exporter": {"podAttribution": False}}
    pod = _pod(render(values), "DaemonSet")
    container = _container(pod)
    assert "volumes" not in pod and "volumeMounts" not in container
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert "--no-kubernetes" in container["args"] and "--kubelet-socket" not in container["args"]
    assert exporter_args(container["args"][1:], env={"NODE_NAME": "n"}).kubelet_socket is None
    assert "--no-kubernetes" in _notes(values)


def test_the_exporter_may_live_in_a_namespace_of_its_own() -> None:
    manifests = render(values_file("all-enabled-values.yaml"))
    exporter = [
        m
        for m in manifests
        if m.doc["metadata"]["labels"].get("app.kubernetes.io/component") == "gpu-exporter"
    ]
    assert {m.kind for m in exporter} >= {
        "DaemonSet",
        "ServiceAccount",
        "Service",
        "ServiceMonitor",
        "NetworkPolicy",
    }
    assert {m.doc["metadata"]["namespace"] for m in exporter} == {"gpu-exporter"}
    monitor = only(manifests, "ServiceMonitor")["spec"]
    assert monitor["namespaceSelector"] == {"matchNames": ["gpu-exporter"]}
    reaper = [
        m for m in manifests if m.doc["metadata"]["labels"].get("app.kubernetes.io/component") == "gpu-reaper"
    ]
    assert {m.doc["metadata"].get("namespace", NAMESPACE) for m in reaper} == {NAMESPACE}


# --- /metrics' NetworkPolicy -----------------------------------------------------------------------


def _selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector of matchLabels (all the chart writes); an empty one selects everything."""
    assert set(selector or {}) <= {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in ((selector or {}).get("matchLabels") or {}).items())


def _may_scrape(policy: Mapping[str, Any], namespace: str, labels: Mapping[str, str], port: str) -> bool:
    """Whether a pod (its namespace, its labels) may reach ``port`` of the pods the policy selects."""
    namespace_labels = {"kubernetes.io/metadata.name": namespace}
    for rule in policy["spec"].get("ingress") or ():
        if not any(p.get("port") == port for p in rule.get("ports") or [{"port": port}]):
            continue
        peers = rule.get("from")
        if peers is None:
            return True
        for peer in peers:
            in_namespace = (
                _selects(peer["namespaceSelector"], namespace_labels)
                if "namespaceSelector" in peer
                else namespace == policy["metadata"]["namespace"]
            )
            if in_namespace and _selects(peer.get("podSelector"), labels):
                return True
    return False


PROMETHEUS = {
    "app.kubernetes.io/name": "prometheus",
    "operator.prometheus.io/name": "kube-prometheus-stack-prometheus",
}


def _exporter_policy(manifests: list[Manifest]) -> dict[str, Any]:
    (policy,) = [m.doc for m in manifests if m.kind == "NetworkPolicy" and m.name.endswith("gpu-exporter")]
    return policy


def test_metrics_answer_only_the_prometheus_the_chart_is_told_about_by_default() -> None:
    manifests = render()
    policy = _exporter_policy(manifests)
    assert _selects(policy["spec"]["podSelector"], _pod_labels(manifests))
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and policy["spec"]["egress"] == []
    assert _may_scrape(policy, "monitoring", PROMETHEUS, "metrics")
    assert not _may_scrape(policy, "monitoring", {"app.kubernetes.io/name": "grafana"}, "metrics")
    assert not _may_scrape(policy, "team-a", PROMETHEUS, "metrics")
    assert not _may_scrape(policy, "gpu-reaper", {}, "metrics")
    assert not [m for m in manifests if m.kind == "NetworkPolicy" and m.name.endswith("gpu-reaper")]


def _pod_labels(manifests: list[Manifest]) -> dict[str, str]:
    return dict(only(manifests, "DaemonSet")["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize(
    ("exporter", "scraper", "allowed"),
    [
        pytest.param(
            {"prometheus": {"namespace": "observability"}}, ("observability", PROMETHEUS), True, id="moved"
        ),
        # Helm merges a map given as {} into the default: null is what removes it.
        pytest.param(
            {"prometheus": {"podLabels": None}}, ("monitoring", {"app": "anything"}), True, id="any-pod-there"
        ),
        pytest.param({"prometheus": {"namespace": "", "podLabels": None}}, ("team-a", {}), True, id="opened"),
        pytest.param(
            {
                "extraScrapers": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agents"}}}
                ]
            },
            ("agents", {}),
            True,
            id="extra-peer",
        ),
        pytest.param(
            {"prometheus": {"namespace": "observability"}}, ("monitoring", PROMETHEUS), False, id="old-place"
        ),
    ],
)
def test_the_scrapers_are_values(
    exporter: dict[str, Any], scraper: tuple[str, dict[str, str]], allowed: bool
) -> None:
    policy = _exporter_policy(render({"networkPolicy": {"exporter": exporter}}))
    assert _may_scrape(policy, *scraper, "metrics") is allowed


def test_switched_off_no_policy_is_shipped_and_the_notes_say_metrics_are_open() -> None:
    values = {"networkPolicy": {"exporter": {"enabled": False}}}
    assert not [m for m in render(values) if m.kind == "NetworkPolicy"]
    assert "WARNING: no NetworkPolicy" in _notes(values)


@pytest.mark.parametrize("old", ["enabled", "scrapers", "reaperEgress"])
def test_the_old_network_policy_keys_are_refused_by_name(old: str) -> None:
    with pytest.raises(HelmRenderError, match=rf"networkPolicy\.{old} is gone"):
        render({"networkPolicy": {old: True}})


# --- the reaper's secrets --------------------------------------------------------------------------

SECRETS = {
    "thanos": {"user": "reader", "password": "s3cret-password\n", "ca.crt": "-----BEGIN CERTIFICATE-----\n"},
    "bearer": {"token": "s3cret-token\n"},
    "slack": {
        "bot-token": "xoxb-s3cret\n",
        "webhook-url": "https://hooks.slack.example/s3cret\n",
        "unused": "x",
    },
}


def _as_the_kubelet_mounts_it(manifests: list[Manifest], root: Path) -> tuple[list[str], dict[str, str]]:
    """The reaper container's arguments and environment, with its Secret volumes laid out under
    ``root`` as the kubelet would (only the items named) and every path rewritten to point there."""
    pod = _pod(manifests, "CronJob")
    container = _container(pod)
    volumes = {v["name"]: v for v in pod["volumes"]}
    moves = {}
    for mount in container["volumeMounts"]:
        secret = volumes[mount["name"]].get("secret")
        if secret is None:
            continue
        assert mount["readOnly"] is True
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True)
        for item in secret["items"]:
            (target / item["path"]).write_text(SECRETS[secret["secretName"]][item["key"]], encoding="utf-8")
        moves[mount["mountPath"]] = str(target)

    def moved(text: str) -> str:
        for old, new in moves.items():
            text = text.replace(old, new)
        return text

    env = {}
    for e in container["env"]:
        if "value" in e:
            env[e["name"]] = moved(e["value"])
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = SECRETS[ref["name"]][ref["key"]]
    return [moved(a) for a in container["args"]], env


def test_basic_auth_reaches_the_reaper_as_a_file_it_reads(tmp_path: Path) -> None:
    auth = {"existingSecret": "thanos", "usernameKey": "user", "passwordKey": "password", "caKey": "ca.crt"}
    args, env = _as_the_kubelet_mounts_it(render({"reaper": {"prometheusAuth": auth}}), tmp_path)
    parsed = reaper_parser().parse_args(args[1:])
    prometheus_options.from_environment(parsed, env)
    config = prometheus_options.prometheus_config(parsed, env)
    assert config.basic_auth == ("reader", "s3cret-password")
    assert not any("s3cret" in value for value in [*args, *env.values()])


def test_a_bearer_token_reaches_the_reaper_as_a_file_it_reads(tmp_path: Path) -> None:
    auth = {"existingSecret": "bearer", "tokenKey": "token"}
    args, env = _as_the_kubelet_mounts_it(render({"reaper": {"prometheusAuth": auth}}), tmp_path)
    parsed = reaper_parser().parse_args(args[1:])
    prometheus_options.from_environment(parsed, env)
    assert prometheus_options.prometheus_config(parsed, env).bearer_token == "s3cret-token"
    assert not any("s3cret" in value for value in [*args, *env.values()])


def test_a_token_and_basic_auth_together_are_refused() -> None:
    auth = {"existingSecret": "thanos", "tokenKey": "token", "usernameKey": "user", "passwordKey": "password"}
    with pytest.raises(HelmRenderError, match=r"tokenKey \(a bearer token\) or usernameKey and passwordKey"):
        render({"reaper": {"prometheusAuth": auth}})


def test_the_slack_token_reaches_the_reaper_as_a_file_it_reads(tmp_path: Path) -> None:
    slack = {"existingSecret": "slack", "tokenKey": "bot-token", "webhookUrlKey": "webhook-url"}
    args, env = _as_the_kubelet_mounts_it(render({"reaper": {"slack": slack}}), tmp_path)
    credentials = load_credentials(env)
    assert credentials is not None
    assert (
        credentials.token == "xoxb-s3cret" and credentials.webhook_url == "https://hooks.slack.example/s3cret"
    )
    assert not any("s3cret" in value for value in [*args, *env.values()])
    assert not (tmp_path / "var/run/secrets/gpu-reaper/slack/unused").exists()


# --- nodes -----------------------------------------------------------------------------------------


def _reaper_grants(manifests: list[Manifest]) -> set[Grant]:
    pod = _pod(manifests, "CronJob")
    return grants((m.doc for m in manifests), (NAMESPACE, pod["serviceAccountName"]))


def _allowed(granted: set[Grant], access: Access) -> bool:
    return any(g.allows(access) for g in granted)


def test_the_default_policy_never_cordons_so_nodes_are_only_read() -> None:
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    policy = parse_policy(yaml.safe_dump(defaults["reaper"]["policy"]), "values.yaml reaper.policy")
    assert all(rule.action is not Action.CORDON for rule in policy.rules)
    granted = _reaper_grants(render())
    assert not _allowed(granted, Access("patch", "", "nodes", None, "gpu-a"))
    assert _allowed(granted, Access("list", "", "nodes", None, None))


CORDON_RULE = {
    "name": "drain-idle-nodes",
    "match": {"findings": ["low_utilization"], "kinds": ["Node"]},
    "action": "cordon",
}


def _with_cordon_rule(**values: Any) -> dict[str, Any]:
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    policy = {**defaults["reaper"]["policy"], "rules": [*defaults["reaper"]["policy"]["rules"], CORDON_RULE]}
    return {**values, "reaper": {**values.get("reaper", {}), "policy": policy}}


def test_an_applying_policy_that_cordons_needs_cordon_nodes() -> None:
    with pytest.raises(
        HelmRenderError, match=r"rule drain-idle-nodes cordons nodes, but rbac\.cordonNodes is false"
    ):
        render(_with_cordon_rule(reaper={"apply": True}))
    granted = _reaper_grants(render(_with_cordon_rule(reaper={"apply": True}, rbac={"cordonNodes": True})))
    assert _allowed(granted, Access("patch", "", "nodes", None, "gpu-a"))


def test_a_dry_run_that_would_cordon_is_warned() -> None:
    assert "WARNING: policy rule drain-idle-nodes cordons nodes" in _notes(_with_cordon_rule())
    assert "WARNING: policy rule" not in _notes(_with_cordon_rule(rbac={"cordonNodes": True}))


# --- a reaper scoped to namespaces -----------------------------------------------------------------

SCOPED = {"rbac": {"namespaces": ["team-a", "team-b"]}}


def test_scoped_the_reaper_gets_roles_in_its_namespaces_and_no_cluster_role_for_workloads() -> None:
    manifests = render(SCOPED)
    roles = {
        (m.kind, m.doc["metadata"].get("namespace")) for m in manifests if m.kind in ("Role", "ClusterRole")
    }
    assert roles == {("Role", "team-a"), ("Role", "team-b"), ("Role", NAMESPACE), ("ClusterRole", None)}
    granted = _reaper_grants(manifests)
    cluster_wide = {(g.group, g.resource, g.verb) for g in granted if g.namespace is None}
    assert cluster_wide == {("", "nodes", "list"), ("", "nodes", "get")}
    assert _allowed(granted, Access("list", "apps", "deployments", "team-a", None))
    assert _allowed(granted, Access("patch", "apps", "deployments/scale", "team-b", "x"))
    assert not _allowed(granted, Access("list", "apps", "deployments", "team-c", None))
    assert not _allowed(granted, Access("list", "apps", "deployments", None, None))
    # Each namespace's own annotations, and no other namespace's.
    assert _allowed(granted, Access("get", "", "namespaces", "team-a", "team-a"))
    assert not _allowed(granted, Access("get", "", "namespaces", "team-a", "team-b"))
    assert not _allowed(granted, Access("list", "", "namespaces", None, None))
    args = _container(_pod(manifests, "CronJob"))["args"]
    assert reaper_parser().parse_args(args[1:]).namespaces == ["team-a", "team-b"]
    assert "team-a, team-b (rbac.namespaces)" in _notes(SCOPED)


def test_scoped_without_node_and_namespace_reads_nothing_is_cluster_wide() -> None:
    manifests = render({"rbac": {**SCOPED["rbac"], "readNodes": False, "readNamespaces": False}})
    assert not [m for m in manifests if m.kind in ("ClusterRole", "ClusterRoleBinding")]
    granted = _reaper_grants(manifests)
    assert not _allowed(granted, Access("get", "", "namespaces", "team-a", "team-a"))


@pytest.mark.parametrize(
    ("rbac", "error"),
    [
        pytest.param(
            {"namespaces": ["Team_A"]}, r'rbac\.namespaces: "Team_A" is not a namespace name', id="bad-name"
        ),
        pytest.param(
            {"namespaces": ["team-a"], "cordonNodes": True},
            r"rbac\.cordonNodes with rbac\.namespaces",
            id="cordon",
        ),
    ],
)
def test_scoped_settings_that_cannot_work_are_refused(rbac: dict[str, Any], error: str) -> None:
    with pytest.raises(HelmRenderError, match=error):
        render({"rbac": rbac})


SCOPED_POLICY = """\
safety: {consecutiveRuns: 1}
rules:
  - name: idle
    match: {findings: [idle_endpoint]}
    action: scale_to_zero
"""


@pytest.fixture(scope="module")
def scoped_requests(
    _emulator_loop: asyncio.AbstractEventLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Access]]:
    """Every request of a scoped reaper's dry run, applied run and restore, in a cluster where
    another namespace holds an idle GPU too."""
    tmp_path = tmp_path_factory.mktemp("scoped")
    with emulated_cluster(_emulator_loop, tmp_path) as cluster:
        yield _scoped_run(cluster, tmp_path)


def _scoped_run(cluster: EmulatedCluster, tmp_path: Path) -> list[Access]:
    cluster.declare(*(k.name for k in WORKLOAD_KINDS), "ScaledObject", "KueueWorkload")
    long_ago = NOW - timedelta(days=30)
    cluster.seed(
        [
            *(manifest("Namespace", n) for n in ("team-a", "team-b", "team-c", NAMESPACE)),
            *(controllers.deployment(ns, "ranker", long_ago, replicas=2) for ns in ("team-a", "team-c")),
        ]
    )
    findings = tmp_path / "findings.json"
    idle = [finding(FindingKind.IDLE_ENDPOINT, name="ranker", namespace=ns) for ns in ("team-a", "team-c")]
    findings.write_text(report(*idle).to_json(), encoding="utf-8")
    policy = tmp_path / "policy.yaml"
    policy.write_text(SCOPED_POLICY, encoding="utf-8")
    args = _container(_pod(render(SCOPED), "CronJob"))["args"]
    scope = [f for i, a in enumerate(args) if a == "--namespace" for f in ("--namespace", args[i + 1])]
    assert scope == ["--namespace", "team-a", "--namespace", "team-b"]
    kube = ["--kubeconfig", str(cluster.kubeconfig), "--reaper-namespace", NAMESPACE]
    run = ["run", "--findings", str(findings), "--policy", str(policy), "--end", rfc3339(NOW)]
    for argv in ([*run, "--dry-run"], [*run, "--apply"], ["restore", "--all"]):
        out = io.StringIO()
        assert main([*argv, *scope, *kube], stdout=out) == 0, out.getvalue()
    assert cluster.obj("Deployment", "team-c", "ranker")["spec"]["replicas"] == 2  # out of scope: untouched
    return [access_of(method, url) for method, url in cluster.request_urls() if not is_discovery(url)]


def test_a_scoped_reaper_needs_only_what_its_roles_grant(scoped_requests: list[Access]) -> None:
    granted = _reaper_grants(render(SCOPED))
    denied = sorted({str(a) for a in scoped_requests if not _allowed(granted, a)})
    assert denied == []
    elsewhere = {a.namespace for a in scoped_requests if a.namespace not in (None, NAMESPACE)}
    assert elsewhere == {"team-a", "team-b"}
