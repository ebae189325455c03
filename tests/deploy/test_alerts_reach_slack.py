"""End to end: the rules of alerts/ fire in a real Prometheus and reach Slack through Alertmanager.

Prometheus scrapes a live /metrics page (tests/deploy/live.py) every second and evaluates a copy of
the rule files in which only the `for:` durations are removed — every expression is the one in
alerts/. Alertmanager, started with a temporary config, posts to a local stand-in for Slack's
incoming webhook.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from harness.live import HEALTHY_POD, AlertmanagerServer, LiveFleet
from harness.rules import RULE_FILES, load_rules
from harness.servers import PrometheusServer, free_port

pytestmark = [pytest.mark.prometheus, pytest.mark.alertmanager, pytest.mark.slow]

SLACK_PATH = "/services/T000/B000/XXXX"
CHANNEL = "#gpu-alerts"
ALERTMANAGER_CONFIG = """
route:
  receiver: slack
  group_by: [alertname]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: slack
    slack_configs:
      - api_url: {url}
        channel: "{channel}"
        title: '{{{{ .CommonLabels.alertname }}}} ({{{{ .CommonLabels.severity }}}})'
        text: '{{{{ range .Alerts }}}}{{{{ .Annotations.summary }}}}{{{{ "\\n" }}}}{{{{ end }}}}'
"""


def _rules_without_for(workdir: Path) -> Path:
    """A copy of each rule file whose alerts fire as soon as their expression holds."""
    out = workdir / "rules"
    out.mkdir()
    for path in RULE_FILES:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in doc["groups"]:
            for rule in group["rules"]:
                rule.pop("for", None)
        (out / path.name).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return out


def _prometheus_config(rules: Path, fleet_port: int, alertmanager_port: int) -> str:
    return yaml.safe_dump(
        {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "rule_files": [str(rules / "*.yaml")],
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
            },
            "scrape_configs": [
                {
                    "job_name": "gpu-exporter",
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{fleet_port}"]}],
                },
                # Nothing listens there: this exporter is down.
                {
                    "job_name": "gpu-exporter-unreachable",
                    "static_configs": [{"targets": [f"127.0.0.1:{free_port()}"]}],
                },
            ],
        }
    )


@pytest.fixture
def live_fleet() -> Iterator[HTTPServer]:
    fleet = LiveFleet()

    def metrics(_request: Request) -> Response:
        return Response(fleet.exposition(), content_type="text/plain; version=0.0.4")

    with HTTPServer(host="127.0.0.1", port=0) as server:
        server.expect_request("/metrics").respond_with_handler(metrics)
        yield server


def _slack_messages(slack: HTTPServer) -> list[dict[str, Any]]:
    return [json.loads(request.get_data()) for request, _ in slack.log if request.path == SLACK_PATH]


def _titles(messages: list[dict[str, Any]]) -> set[str]:
    return {a["title"].split(" ")[0] for m in messages for a in m.get("attachments", [])}


def test_every_alert_fires_into_alertmanager_and_reaches_slack(
    httpserver: HTTPServer, live_fleet: HTTPServer, tmp_path: Path
) -> None:
    httpserver.expect_request(SLACK_PATH, method="POST").respond_with_data("ok")
    expected = {r.alert for r in load_rules()}
    am_config = ALERTMANAGER_CONFIG.format(url=httpserver.url_for(SLACK_PATH), channel=CHANNEL)

    with AlertmanagerServer(tmp_path / "alertmanager", am_config) as alertmanager:
        config = _prometheus_config(_rules_without_for(tmp_path), live_fleet.port, alertmanager.port)
        with PrometheusServer(tmp_path / "prometheus", config=config):
            deadline = time.monotonic() + 180  # polled: only a failing run waits this long
            while time.monotonic() < deadline and not expected <= _titles(_slack_messages(httpserver)):
                time.sleep(0.5)

    messages = _slack_messages(httpserver)
    assert _titles(messages) >= expected, f"never reached Slack: {sorted(expected - _titles(messages))}"
    assert all(m["channel"] == CHANNEL for m in messages)
    texts = "\n".join(a["text"] for m in messages for a in m["attachments"])
    # Summaries are rendered with the alert's labels and values, not left as templates.
    assert "serving/legacy-ranker-0 holds 1 idle GPU(s)" in texts
    assert "Critical XID 79 on GPU 7 of node-a" in texts
    assert "Critical XID 48 on GPU 0 of node-b" in texts
    assert "{{" not in texts
    assert HEALTHY_POD not in texts, "a healthy serving pod was alerted on"
