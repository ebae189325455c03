"""The alert rules load in Prometheus, pass their promtool unit tests, and tell a person what to do.

Every alert carries a severity, a summary and a description, has a section in docs/runbooks.md,
and is unit-tested both firing and staying quiet (alerts/tests/*.test.yaml).

Where one query view holds many clusters, every rule keeps them apart: no aggregation or join drops
the `cluster` label (checked on every expression), and in a real Prometheus scraping two faulty
clusters, a healthy one and a fleet without the label, each alert fires once per faulty cluster,
naming it, with the value the fleet gives alone, and never for the healthy cluster.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol

import promql_parser
import pytest
import requests
import yaml
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from common import metric_names as m
from exporter import fields
from harness.binaries import require_binary
from harness.live import HEALTHY_POD, LiveFleet, exposition_line
from harness.rules import (
    ALERTS_DIR,
    CLUSTER_LABEL,
    RULE_FILES,
    UNIT_TEST_FILES,
    AlertRule,
    Rule,
    load_every_rule,
    load_rules,
    rules_without_for,
    unit_test_cases,
)
from harness.servers import PrometheusServer, free_port
from reaper.metrics import RunMetrics, registry_for

RULES = load_rules()
RUNBOOKS = ALERTS_DIR.parent / "docs" / "runbooks.md"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_binary("promtool"), *args], capture_output=True, text=True, check=False, cwd=ALERTS_DIR
    )


def test_every_rule_file_passes_promtool_check_rules() -> None:
    result = _promtool("check", "rules", *(p.name for p in RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", UNIT_TEST_FILES, ids=lambda p: p.stem)
def test_promtool_unit_tests_pass(path: Path) -> None:
    result = _promtool("test", "rules", str(path.relative_to(ALERTS_DIR)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_file_has_a_unit_test_file() -> None:
    tested = {p.name.removesuffix(".test.yaml") for p in UNIT_TEST_FILES}
    assert tested == {p.name.removesuffix(".rules.yaml") for p in RULE_FILES}


def test_alert_names_are_unique() -> None:
    names = [r.alert for r in RULES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.alert)
def test_alert_expression_parses(rule: AlertRule) -> None:
    promql_parser.parse(rule.expr)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.alert)
def test_alert_says_how_bad_what_and_why(rule: AlertRule) -> None:
    assert rule.raw["labels"]["severity"] in ("critical", "warning", "info")
    annotations = rule.raw["annotations"]
    assert annotations["summary"].strip()
    assert len(annotations["description"]) > len(annotations["summary"])


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.alert)
def test_alert_has_a_runbook_section(rule: AlertRule) -> None:
    headings = re.findall(r"^#+\s+(\S+)\s*$", RUNBOOKS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert rule.alert in headings, f"docs/runbooks.md has no '## {rule.alert}' section"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.alert)
def test_alert_is_unit_tested_firing_and_quiet(rule: AlertRule) -> None:
    cases = [c for c in unit_test_cases() if c["alertname"] == rule.alert]
    assert any(c.get("exp_alerts") for c in cases), f"no promtool case where {rule.alert} fires"
    assert any(not c.get("exp_alerts") for c in cases), f"no promtool case where {rule.alert} stays quiet"


# --- many clusters in one query view --------------------------------------------------------------
#
# Thanos Query, Mimir and VictoriaMetrics hold many clusters told apart by an external label
# (`cluster`); one GitOps repository gives every cluster the same node, namespace and pod names. An
# aggregation or a join that drops the label adds two clusters' GPUs together and raises an alert
# that does not say where.

# Rules that must aggregate across clusters, by name, each with why: none does today. A rule listed
# here is exempt from the check below, and fails it once it no longer needs the exemption.
CROSS_CLUSTER_EXCEPTIONS: dict[str, str] = {}

EVERY_RULE = load_every_rule()
CLUSTER_PREFIX = "{{ with $labels.cluster }}[{{ . }}] {{ end }}"
IN_CLUSTER = "{{ with $labels.cluster }} in cluster {{ . }}{{ end }}"


def cross_cluster_clauses(expr: str) -> list[str]:
    """The clauses of ``expr`` that add series of different clusters together or join them across
    clusters: an aggregation without ``by``, or whose ``by`` lacks the cluster label (whose
    ``without`` names it); a join whose ``on`` lacks it (whose ``ignoring`` names it)."""
    found: list[str] = []

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.AggregateExpr):
            agg = node.modifier
            if agg is None:
                found.append(f"{node.op}(…) without by (…)")
            elif (agg.type == promql_parser.AggModifierType.By) != (CLUSTER_LABEL in agg.labels):
                found.append(f"{node.op} {agg}")
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            on = node.modifier.matching
            if on is not None and (on.type == promql_parser.LabelModifierType.Include) != (
                CLUSTER_LABEL in on.labels
            ):
                found.append(f"{node.op} {on}")

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("sum(x)", ["sum(…) without by (…)"]),
        ("topk(3, x)", ["topk(…) without by (…)"]),
        ("max by (namespace, pod) (x)", ["max by (namespace, pod)"]),
        ("avg without (cluster) (x)", ["avg without (cluster)"]),
        ("x and on (UUID) y", ["and on (UUID)"]),
        ("x unless ignoring (cluster, le) y", ["unless ignoring (cluster, le)"]),
        ("x / on () group_left y", ["/ on ()"]),
        ("time() - max by (cluster, job) (x) > 3 * 3600", []),
        ('count_values by (cluster, gpu) ("xid", x) unless on (cluster, UUID) y', []),
        ("max without (instance) (x) or y / ignoring (le) z", []),
        ("x > 0 and y", []),
    ],
)
def test_the_cluster_check_finds_clauses_that_mix_clusters(expr: str, expected: list[str]) -> None:
    assert cross_cluster_clauses(expr) == expected


@pytest.mark.parametrize("rule", EVERY_RULE, ids=lambda r: r.name)
def test_rule_keeps_clusters_apart(rule: Rule) -> None:
    """Every aggregation keeps the cluster label and every join matches on it, in the alert rules
    and the analyzer's recording rules alike. Series without it leave it empty: nothing changes for
    a Prometheus holding one cluster."""
    found = cross_cluster_clauses(rule.expr)
    if rule.name in CROSS_CLUSTER_EXCEPTIONS:
        assert found, f"{rule.name} ({rule.file}) keeps clusters apart: drop its exemption"
    else:
        assert not found, f"{rule.name} ({rule.file}) mixes clusters at: {'; '.join(found)}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.alert)
def test_alert_text_names_its_cluster(rule: AlertRule) -> None:
    annotations = rule.raw["annotations"]
    assert annotations["summary"].startswith(CLUSTER_PREFIX)
    assert IN_CLUSTER in annotations["description"]


class _Fleet(Protocol):
    def exposition(self) -> str: ...


class HealthyFleet:
    """The live fleet's nodes, namespaces, pods and GPUs (tests/harness/live.py), all healthy: busy
    GPUs, no XID, cool and unthrottled, an exporter that collects, a reaper that succeeds. Two of its
    pods' GPUs and node-b are served in DCGM 4.7's naming (dcgm-exporter 4.9: a 0-1 utilization ratio,
    bytes, ``hostname``): a rule that read a ratio of 0.6 as 0.6 % would find them idle."""

    MODEL = "NVIDIA H100 80GB HBM3"
    PODS = (
        ("serving", "legacy-ranker-0", "GPU-1"),
        ("research", "notebook-0", "GPU-2"),
        ("research", "tokenizer-0", "GPU-3"),
        ("research", "audio-0", "GPU-4"),
        ("serving", HEALTHY_POD, "GPU-5"),
    )

    def __init__(self) -> None:
        self.scrapes = 0

    def exposition(self) -> str:
        n, now = self.scrapes, time.time()
        self.scrapes += 1
        out: list[str] = []
        add = out.append
        for i, (namespace, pod, uuid) in enumerate(self.PODS):
            current = i >= 3  # these GPUs' exporter serves DCGM 4.7's naming
            node = {m.HOSTNAME if current else m.HOSTNAME_LEGACY: "node-a"}
            gpu = {"UUID": uuid, "gpu": str(i), "modelName": self.MODEL} | node
            owner = {"namespace": namespace, "pod": pod, "container": "main"}
            if current:
                add(exposition_line(m.GPU_UTIL_RATIO, gpu | owner, 0.6))
                add(exposition_line(m.FB_USED_BYTES, gpu | owner, 30000 * 2**20))
                add(exposition_line(m.GPU_TEMP_CELSIUS, gpu, 55))
            else:
                add(exposition_line(m.GPU_UTIL, gpu | owner, 60))
                add(exposition_line(m.FB_USED, gpu | owner, 30000))
                add(exposition_line(m.GPU_TEMP, gpu, 55))
            add(exposition_line(fields.GPU_UP, gpu, 1))
            add(exposition_line("kube_pod_start_time", {"namespace": namespace, "pod": pod}, now - 7 * 3600))
            add(exposition_line("container_cpu_cfs_periods_total", owner, 10 * n))
            add(exposition_line("container_cpu_cfs_throttled_periods_total", owner, 0))
            if pod == "tokenizer-0":  # its sub-second samples: all between 50 % and 75 %
                samples = fields.UTILIZATION_SAMPLES
                for le in ("5.0", "10.0", "25.0", "50.0", "75.0", "90.0", "95.0", "+Inf"):
                    add(
                        exposition_line(
                            f"{samples}_bucket", gpu | owner | {"le": le}, 0 if float(le) <= 50 else 360 * n
                        )
                    )
                add(exposition_line(f"{samples}_count", gpu | owner, 360 * n))
                add(exposition_line(f"{samples}_sum", gpu | owner, 360 * 60 * n))
        add(
            exposition_line(
                fields.GPU_UP, {"UUID": "GPU-8", "gpu": "7", "Hostname": "node-a", "modelName": self.MODEL}, 1
            )
        )
        for uuid, gpu_index in (("GPU-6", "0"), ("GPU-7", "1")):
            labels = {"UUID": uuid, "gpu": gpu_index, "hostname": "node-b", "modelName": self.MODEL}
            add(exposition_line(m.GPU_TEMP_CELSIUS, labels, 60))
            add(exposition_line(m.CLOCKS_EVENT_REASONS, labels, 0))
            add(exposition_line(m.XID_ERROR, labels, 0))
            # Here gpu-exporter serves node-b as well: a join on the GPU alone would let this
            # cluster's gpu_up hide the other clusters' dcgm-exporter XIDs.
            add(exposition_line(fields.GPU_UP, labels, 1))
        add(exposition_line(fields.LAST_COLLECT, {}, now))
        add(
            exposition_line(
                fields.NVML_ERRORS, {"call": "nvmlDeviceGetUtilizationRates", "code": "UNKNOWN"}, 0
            )
        )
        add(exposition_line(fields.KUBELET_ERRORS, {}, 0))
        for family in registry_for(RunMetrics(success_timestamp=now - 600)).collect():
            for sample in family.samples:
                add(exposition_line(sample.name, sample.labels, sample.value))
        job = {"namespace": "gpu-reaper", "job_name": "gpu-reaper-29471230"}
        add(exposition_line("kube_job_status_failed", job, 0))
        add(exposition_line("kube_job_status_start_time", job, now - 600))
        cronjob = {"namespace": "gpu-reaper", "cronjob": "gpu-reaper"}
        add(exposition_line("kube_cronjob_status_last_successful_time", cronjob, now - 600))
        return "".join(out)


FAULTY_CLUSTERS = ("east", "west")
HEALTHY_CLUSTER = "north"
# Alerts whose value is a time or a counter's increase: it moves with the moment each cluster's
# targets were scraped, so their values are compared loosely (a sum over two clusters would double).
TIMED_VALUES = frozenset(
    {"GpuExporterStale", "GpuExporterErrors", "GpuReaperNotSucceeding", "GpuReaperNoRecentReport"}
)
AlertKey = tuple[tuple[str, str], ...]  # an alert's labels but the cluster


def _scrape_job(name: str, port: int, cluster: str | None, job: str, instance: str) -> dict[str, Any]:
    """One target, scraped as every cluster's Prometheus scrapes its own: the same job and instance
    everywhere, ``cluster`` added as a Thanos, Mimir or VictoriaMetrics view adds its external label
    (``None``: no cluster label, as one cluster's own Prometheus sees its series)."""
    target: dict[str, Any] = {"targets": [f"127.0.0.1:{port}"]}
    if cluster is not None:
        target["labels"] = {CLUSTER_LABEL: cluster}
    return {
        "job_name": name,
        "honor_labels": True,
        "static_configs": [target],
        "relabel_configs": [
            {"target_label": "job", "replacement": job},
            {"target_label": "instance", "replacement": instance},
        ],
    }


def _prometheus_config(rules: Path, fleets: dict[str | None, int]) -> str:
    """Every rule of ``rules`` evaluated each second over the fleets served on ``fleets``' ports,
    each faulty one with an exporter that cannot be reached, by cluster."""
    jobs = []
    for cluster, port in fleets.items():
        name = cluster or "alone"
        jobs.append(_scrape_job(f"fleet-{name}", port, cluster, "gpu-exporter", "node-a:9400"))
        if cluster != HEALTHY_CLUSTER:  # nothing listens there: this exporter is down
            jobs.append(
                _scrape_job(f"down-{name}", free_port(), cluster, "gpu-exporter-unreachable", "node-c:9400")
            )
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(rules / "*.yaml")],
        "scrape_configs": jobs,
    }
    return yaml.safe_dump(config)


@pytest.fixture
def clusters_and_one(tmp_path: Path) -> Iterator[tuple[PrometheusServer, PrometheusServer]]:
    """Two Prometheus servers whose alerts fire as soon as their expression holds: one reading the
    live fleet as clusters east and west and its healthy twin as north, as a Thanos, Mimir or
    VictoriaMetrics view of three clusters would; the other one more copy of the live fleet alone,
    without a cluster label, as one cluster's own Prometheus does."""
    rules = rules_without_for(tmp_path)
    with ExitStack() as stack:

        def serve(fleet: _Fleet) -> int:
            def metrics(_request: Request) -> Response:
                return Response(fleet.exposition(), content_type="text/plain; version=0.0.4")

            server = stack.enter_context(HTTPServer(host="127.0.0.1", port=0))
            server.expect_request("/metrics").respond_with_handler(metrics)
            return int(server.port)

        clusters: dict[str | None, int] = {cluster: serve(LiveFleet()) for cluster in FAULTY_CLUSTERS}
        clusters[HEALTHY_CLUSTER] = serve(HealthyFleet())
        alone: dict[str | None, int] = {None: serve(LiveFleet())}
        many = stack.enter_context(
            PrometheusServer(tmp_path / "clusters", config=_prometheus_config(rules, clusters))
        )
        one = stack.enter_context(
            PrometheusServer(tmp_path / "alone", config=_prometheus_config(rules, alone))
        )
        yield many, one


Firing = dict[str | None, dict[AlertKey, dict[str, Any]]]


def _firing_by_cluster(url: str) -> Firing:
    """The firing alerts, by their cluster label (None: none), then by their other labels."""
    answer = requests.get(f"{url}/api/v1/alerts", timeout=10)
    answer.raise_for_status()
    out: Firing = {}
    for alert in answer.json()["data"]["alerts"]:
        if alert["state"] != "firing":
            continue
        labels = dict(alert["labels"])
        cluster = labels.pop(CLUSTER_LABEL, None)
        key = tuple(sorted(labels.items()))
        assert key not in out.setdefault(cluster, {}), f"{key} fires twice in cluster {cluster}"
        out[cluster][key] = alert
    return out


@pytest.mark.prometheus
@pytest.mark.slow
def test_alerts_fire_once_per_cluster_and_never_for_the_healthy_one(
    clusters_and_one: tuple[PrometheusServer, PrometheusServer],
) -> None:
    many, one = clusters_and_one
    names = {r.alert for r in RULES}

    def read() -> tuple[Firing, Firing]:
        return _firing_by_cluster(many.url), _firing_by_cluster(one.url)

    def settled(firing: Firing, single: Firing) -> bool:
        alone = set(single.get(None, {}))
        every = {dict(key)["alertname"] for key in alone} >= names
        return every and all(set(firing.get(cluster, {})) == alone for cluster in FAULTY_CLUSTERS)

    deadline = time.monotonic() + 180  # polled: only a failing run waits this long
    firing, single = read()
    while time.monotonic() < deadline and not settled(firing, single):
        time.sleep(0.5)
        firing, single = read()
    # A few more evaluations, in which the healthy cluster had every chance to fire too.
    time.sleep(3)
    firing, single = read()

    assert set(single) == {None}
    alone = single[None]  # what one cluster's own Prometheus raises
    assert {dict(key)["alertname"] for key in alone} == names
    assert set(firing) == set(FAULTY_CLUSTERS), f"alerts for {sorted(map(str, firing))}"
    for cluster in FAULTY_CLUSTERS:
        mine = firing[cluster]
        assert mine.keys() == alone.keys(), f"cluster {cluster} fires for other things than one cluster alone"
        for key, theirs in alone.items():
            alert, name = mine[key], dict(key)["alertname"]
            # One cluster's value, never two clusters' sum.
            if name in TIMED_VALUES:
                assert float(alert["value"]) == pytest.approx(float(theirs["value"]), rel=0.5), key
            else:
                assert float(alert["value"]) == float(theirs["value"]), key
            summary, description = alert["annotations"]["summary"], alert["annotations"]["description"]
            assert summary.startswith(f"[{cluster}] "), summary
            assert f" in cluster {cluster}" in description, description
            if name not in TIMED_VALUES:
                assert summary == f"[{cluster}] {theirs['annotations']['summary']}"
    for alert in alone.values():
        text = alert["annotations"]["summary"] + alert["annotations"]["description"]
        assert not alert["annotations"]["summary"].startswith("["), text
        assert " in cluster" not in text and "{{" not in text, text
    idle = {
        cluster: sorted(
            a["annotations"]["summary"]
            for a in alerts.values()
            if a["labels"]["alertname"] == "GpuIdleHeldByWorkload"
        )
        for cluster, alerts in firing.items()
    }
    assert idle == {
        "east": ["[east] serving/legacy-ranker-0 holds 1 idle GPU(s)"],
        "west": ["[west] serving/legacy-ranker-0 holds 1 idle GPU(s)"],
    }
