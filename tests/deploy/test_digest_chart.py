"""The chart's weekly digest: a CronJob of its own, off by default, with the reaper's image, policy,
Slack Secret and Prometheus settings, and an account that may list namespaces and nothing else.

The rendered command line is parsed by ``gpu-reaper``'s own parser, and the digest run against the
emulated API server makes only requests the rendered RBAC grants its account.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from helm_python.errors import HelmRenderError

from cli.reaper import _build_parser as reaper_parser
from cli.reaper import main
from harness.chart import NAMESPACE, Manifest, render, values_file
from harness.kube_fixtures import _emulator_loop, emulated_cluster
from harness.rbac import access_of, grants, is_discovery
from simulation.in_memory_cluster import manifest

__all__ = ["_emulator_loop"]

ENABLED: dict[str, Any] = {
    "digest": {"enabled": True},
    "reaper": {
        "slack": {"existingSecret": "gpu-reaper-slack", "tokenKey": "bot-token"},
        "prometheusAuth": {"existingSecret": "prometheus-reader", "tokenKey": "token", "caKey": "ca.crt"},
        "prometheusTenant": "ml-platform",
    },
}


def _cronjobs(manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
    return {
        m.doc["metadata"]["labels"]["app.kubernetes.io/component"]: m.doc
        for m in manifests
        if m.kind == "CronJob"
    }


def _pod(cronjob: dict[str, Any]) -> dict[str, Any]:
    return dict(cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"])


def test_the_digest_is_off_by_default_and_renders_nothing() -> None:
    assert list(_cronjobs(render())) == ["gpu-reaper"]
    assert not [m for m in render() if m.template.endswith("digest-cronjob.yaml")]


@pytest.mark.parametrize("version", ["1.28", kubernetes_validate.latest_version()])
def test_enabled_it_renders_valid_objects_on_its_weekly_schedule(version: str) -> None:
    manifests = [m for m in render(ENABLED) if m.template.endswith("digest-cronjob.yaml")]
    assert sorted(m.kind for m in manifests) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CronJob",
        "ServiceAccount",
    ]
    for m in manifests:
        kubernetes_validate.validate(m.doc, version, strict=True)
    cronjob = _cronjobs(manifests)["gpu-reaper-digest"]
    assert cronjob["spec"]["schedule"] == "0 9 * * 1"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0  # a retry would post twice


def test_it_runs_gpu_reaper_digest_with_the_reapers_image_policy_secrets_and_prometheus() -> None:
    jobs = _cronjobs(render(ENABLED))
    reaper, digest = _pod(jobs["gpu-reaper"]), _pod(jobs["gpu-reaper-digest"])
    (rc,), (dc,) = reaper["containers"], digest["containers"]
    assert dc["image"] == rc["image"]
    assert (
        dc["securityContext"] == rc["securityContext"]
        and digest["securityContext"] == reaper["securityContext"]
    )
    parsed = reaper_parser().parse_args(dc["args"][1:])
    assert parsed.command == "digest" and not parsed.dry_run
    assert parsed.policy == Path("/etc/gpu-reaper/policy.yaml")
    run = reaper_parser().parse_args(rc["args"][1:])
    for option in ("prometheus_url", "prometheus_tenant", "prometheus_token_file", "prometheus_ca_file"):
        assert getattr(parsed, option) == getattr(run, option), option
    assert {v["name"]: v for v in digest["volumes"]} == {v["name"]: v for v in reaper["volumes"]}
    slack_env = [e for e in rc["env"] if e["name"].startswith("GPU_REAPER_SLACK")]
    assert slack_env and all(e in dc["env"] for e in slack_env)
    assert digest["serviceAccountName"] != reaper["serviceAccountName"]


def test_all_enabled_values_with_the_digest_render_and_parse() -> None:
    values = values_file("all-enabled-values.yaml")
    values["digest"] = {
        "enabled": True,
        "schedule": "30 8 * * 1",
        "timeZone": "Europe/Paris",
        "window": "14d",
    }
    digest = _pod(_cronjobs(render(values))["gpu-reaper-digest"])
    parsed = reaper_parser().parse_args(digest["containers"][0]["args"][1:])
    assert parsed.window.days == 14 and parsed.cluster == "prod-eu-1"


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"digest": {"enabled": True}, "reaper": {"enabled": False}}, "digest.enabled needs reaper.enabled"),
        ({"digest": {"enabled": True}}, "needs reaper.slack.existingSecret"),
    ],
)
def test_settings_that_cannot_work_are_refused(values: dict[str, Any], error: str) -> None:
    with pytest.raises(HelmRenderError, match=error):
        render(values)


def test_without_slack_a_dry_run_digest_prints_to_its_log() -> None:
    digest = _pod(_cronjobs(render({"digest": {"enabled": True, "dryRun": True}}))["gpu-reaper-digest"])
    assert "--dry-run" in digest["containers"][0]["args"]
    assert "volumes" in digest and [v["name"] for v in digest["volumes"]] == ["policy", "tmp"]


def test_the_digest_needs_only_what_its_role_grants(
    _emulator_loop: asyncio.AbstractEventLoop, tmp_path: Path
) -> None:
    manifests = render(ENABLED)
    account = _pod(_cronjobs(manifests)["gpu-reaper-digest"])["serviceAccountName"]
    granted = grants((m.doc for m in manifests), (NAMESPACE, account))
    assert {(g.resource, g.verb) for g in granted} == {("namespaces", "list")}
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        'slack: {channel: "#gpu"}\nrules: [{name: t, match: {findings: [idle_endpoint]}, action: notify}]\n',
        encoding="utf-8",
    )
    with emulated_cluster(_emulator_loop, tmp_path) as cluster:
        cluster.seed([manifest("Namespace", n) for n in ("team-a", NAMESPACE)])
        out = io.StringIO()
        # Prometheus is not there: the digest stops (exit 3) after reading what it needs of the cluster.
        argv = ["digest", "--prometheus-url", "http://127.0.0.1:9", "--policy", str(policy), "--dry-run"]
        code = main([*argv, "--kubeconfig", str(cluster.kubeconfig), "--prometheus-retries", "0"], stdout=out)
        assert code == 3, out.getvalue()
        requests = [access_of(m, u) for m, u in cluster.request_urls() if not is_discovery(u)]
    assert requests and all(any(g.allows(a) for g in granted) for a in requests), requests
