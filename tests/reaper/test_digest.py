"""``gpu-reaper digest``: each owner route gets its namespaces' week, with the analyzer's chargeback figures.

End to end over the standard fleet in a real Prometheus, the namespaces' annotations from the
emulated API server, and slack-sdk posting to a local stand-in for slack.com. The pure routing on
hand-made weeks, where a case is easier to state than to simulate.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from cli.analyzer import main as analyzer_main
from cli.reaper import main
from common.model import FindingKind, TimeWindow, WorkloadRef
from harness.kube_emulator import EmulatedCluster
from harness.servers import PrometheusServer
from reaper.cluster import Namespace
from reaper.digest_message import IdleWorkload, NamespaceWeek, Week, digest_message, routes
from reaper.messages import preview
from reaper.policy import Policy
from simulation.in_memory_cluster import manifest

TOKEN = "xoxb-0000-digest-token"
END = "2026-01-05T00:00:00Z"  # the standard fleet's end
POLICY = """\
pricePerGpuHour: 2.0
slack:
  channel: "#gpu-costs"
  routes: [{namespaces: [research], channel: "#research"}]
  allowedChannels: ["#team-*"]
rules:
  - {name: tell, match: {findings: [idle_endpoint]}, action: notify}
"""
# Where each namespace's week goes under POLICY and these annotations; ml-platform names a channel
# the policy refuses, so its week goes nowhere.
ANNOTATED = {"team-b": "#team-b", "ml-platform": "#finance"}
EXPECTED = {"#gpu-costs": {"serving", "team-a"}, "#research": {"research"}, "#team-b": {"team-b"}}


@pytest.fixture
def seeded(cluster: EmulatedCluster) -> EmulatedCluster:
    objects = []
    for name in ("serving", "research", "team-a", "team-b", "ml-platform", "gpu-reaper"):
        ns = manifest("Namespace", name)
        if name in ANNOTATED:
            ns["metadata"]["annotations"] = {"gpu-reaper/slack-channel": ANNOTATED[name]}
        objects.append(ns)
    cluster.seed(objects)
    return cluster


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bill(prometheus_standard: PrometheusServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``gpu-analyzer chargeback --format json`` over the same fleet, window and prices."""
    work = tmp_path_factory.mktemp("digest-bill")
    (work / "policy.yaml").write_text(POLICY, encoding="utf-8")
    out = work / "bill.json"
    code = analyzer_main(
        [
            "chargeback",
            *("--prometheus-url", prometheus_standard.url, "--window", "20h", "--end", END),
            *("--policy", str(work / "policy.yaml"), "--format", "json", "--output", str(out)),
        ]
    )
    assert code == 0
    return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def digest_cli(url: str, cluster: EmulatedCluster, policy: Path, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    argv = [
        "digest",
        *("--prometheus-url", url, "--policy", str(policy), "--window", "20h", "--end", END),
        *("--kubeconfig", str(cluster.kubeconfig), *extra),
    ]
    return main(argv, stdout=out), out.getvalue()


def posted(httpserver: HTTPServer) -> list[dict[str, Any]]:
    return [json.loads(req.get_data()) for req, _ in httpserver.log if req.path == "/api/chat.postMessage"]


def _text(body: dict[str, Any]) -> str:
    parts = []
    for b in body["blocks"]:
        if b["type"] in ("header", "section"):
            parts.append(b["text"]["text"])
        elif b["type"] == "context":
            parts.extend(e["text"] for e in b["elements"])
    return "\n".join(parts)


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match is not None, (pattern, text)
    return float(match[1].replace(",", ""))


class _RateLimitedOnce:
    """slack.com answering the first post with 429 and Retry-After, then accepting every post."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: Request) -> Response:
        self.calls += 1
        if self.calls == 1:
            body = json.dumps({"ok": False, "error": "ratelimited"})
            return Response(body, status=429, headers={"Retry-After": "1"}, content_type="application/json")
        refused = json.loads(request.get_data())["channel"] == REFUSED_BY_SLACK[0]
        answer = (
            {"ok": False, "error": "not_in_channel"}
            if refused
            else {"ok": True, "channel": "C1", "ts": "1.1"}
        )
        return Response(json.dumps(answer), content_type="application/json")


REFUSED_BY_SLACK: list[str] = [""]  # the channel slack.com refuses in a test ("" none)


@pytest.fixture
def slack(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[HTTPServer]:
    monkeypatch.setenv("GPU_REAPER_SLACK_TOKEN", TOKEN)
    httpserver.expect_request("/api/chat.postMessage", method="POST").respond_with_handler(_RateLimitedOnce())
    REFUSED_BY_SLACK[0] = ""
    yield httpserver


def _with_api_url(policy: Path, httpserver: HTTPServer) -> Path:
    text = policy.read_text(encoding="utf-8").replace(
        "slack:\n", f'slack:\n  apiUrl: "{httpserver.url_for("/api/")}"\n'
    )
    policy.write_text(text, encoding="utf-8")
    return policy


def test_each_route_gets_its_namespaces_week_with_the_chargebacks_figures(
    prometheus_standard: PrometheusServer,
    seeded: EmulatedCluster,
    policy_file: Path,
    slack: HTTPServer,
    bill: dict[str, Any],
) -> None:
    code, out = digest_cli(prometheus_standard.url, seeded, _with_api_url(policy_file, slack))
    assert code == 0, out
    bodies = posted(slack)
    # Four posts: the first was answered 429 and sent again after its Retry-After, as the run's are.
    assert len(bodies) == 4
    by_channel = {b["channel"]: _text(b) for b in bodies}
    assert set(by_channel) == set(EXPECTED)
    groups = {g["group"]: g for g in bill["groups"]}
    for channel, namespaces in EXPECTED.items():
        text = by_channel[channel]
        held = sum(groups[n]["held_gpu_hours"] for n in namespaces)
        used = sum(groups[n]["used_gpu_hours"] for n in namespaces)
        idle_cost = sum(groups[n]["idle_cost"] for n in namespaces)
        # Shown rounded to a whole GPU-hour (a tenth under ten): the same figures as the analyzer's.
        assert _number(r"\*Held\* ([\d,.]+) GPU-hours", text) == pytest.approx(held, abs=0.51), channel
        assert _number(r"\*used\* ([\d,.]+)", text) == pytest.approx(used, abs=0.51), channel
        assert _number(r"idle ≈ ([\d,.]+) USD", text) == pytest.approx(idle_cost, abs=0.51), channel
        assert held > 0
    # The idlest workloads, by the analyzer's name for them.
    assert "`serving/legacy-ranker` (Deployment): idle" in by_channel["#gpu-costs"]
    assert "`team-b/mig-idle`" in by_channel["#team-b"]
    # ml-platform named a channel the policy refuses: its week is posted nowhere, and the reason said.
    assert all("ml-platform" not in t for t in by_channel.values())
    assert "skipped  ml-platform: its channel '#finance' is refused: not in slack.allowedChannels" in out
    assert out.strip().splitlines()[-1] == "gpu-reaper: digest routes=3 posted=3 skipped=1 failed=0"


def test_a_channel_slack_refuses_is_counted_failed_and_nothing_goes_elsewhere(
    prometheus_standard: PrometheusServer, seeded: EmulatedCluster, policy_file: Path, slack: HTTPServer
) -> None:
    REFUSED_BY_SLACK[0] = "#team-b"
    code, out = digest_cli(prometheus_standard.url, seeded, _with_api_url(policy_file, slack))
    assert code == 1
    sent = [b["channel"] for b in posted(slack)]
    assert sorted(set(sent)) == ["#gpu-costs", "#research", "#team-b"]
    assert sum("team-b/" in _text(b) for b in posted(slack) if b["channel"] != "#team-b") == 0
    assert out.strip().splitlines()[-1] == "gpu-reaper: digest routes=3 posted=2 skipped=1 failed=1"


def test_dry_run_prints_the_messages_and_posts_nothing(
    prometheus_standard: PrometheusServer,
    seeded: EmulatedCluster,
    policy_file: Path,
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GPU_REAPER_SLACK_TOKEN", raising=False)
    code, out = digest_cli(
        prometheus_standard.url, seeded, _with_api_url(policy_file, httpserver), "--dry-run"
    )
    assert code == 0
    assert "── Slack message to #research" in out and "── Slack message to #team-b" in out
    assert httpserver.log == []
    assert out.strip().splitlines()[-1] == "gpu-reaper: digest routes=3 would_post=3 skipped=1 failed=0"


def test_no_gpu_series_is_a_clear_line_exit_3_and_no_digest(
    seeded: EmulatedCluster,
    policy_file: Path,
    slack: HTTPServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with PrometheusServer(tmp_path / "empty") as empty:
        code, out = digest_cli(empty.url, seeded, _with_api_url(policy_file, slack))
    assert code == 3
    assert posted(slack) == []
    assert out.strip() == "gpu-reaper: digest error=data_unavailable"
    assert "no GPU" in capsys.readouterr().err


def test_posting_without_slack_credentials_is_bad_input_before_any_query(
    seeded: EmulatedCluster,
    policy_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("GPU_REAPER_SLACK_TOKEN", "SLACK_BOT_TOKEN", "GPU_REAPER_SLACK_WEBHOOK_URL"):
        monkeypatch.delenv(name, raising=False)
    code, out = digest_cli("http://127.0.0.1:9", seeded, policy_file)  # nothing listens there
    assert code == 2
    assert "Slack is not configured" in capsys.readouterr().err
    assert out.strip() == "gpu-reaper: digest error=bad_input"


def test_a_configured_cluster_is_refused_rather_than_billed_with_other_clusters(
    seeded: EmulatedCluster, policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = digest_cli("http://127.0.0.1:9", seeded, policy_file, "--cluster", "prod-eu-1", "--dry-run")
    assert code == 2
    assert "cannot yet keep to cluster prod-eu-1" in capsys.readouterr().err


# --- routing, pure ---------------------------------------------------------------------------------

NOW = datetime(2026, 1, 5, tzinfo=UTC)


def _week(*namespaces: NamespaceWeek) -> Week:
    return Week(
        window=TimeWindow.ending(NOW, timedelta(days=7)),
        currency="EUR",
        namespaces=namespaces,
        fleet_gpu_hours=1000.0,
        unallocated_gpu_hours=100.0,
        unallocated_cost=200.0,
    )


def _ns(name: str, held: float, idle: float = 0.0, top: tuple[IdleWorkload, ...] = ()) -> NamespaceWeek:
    return NamespaceWeek(name, held, held - idle, idle, 0.0, 2 * held, 2 * idle, top)


def _policy(**slack: Any) -> Policy:
    rule = {"name": "tell", "match": {"findings": ["idle_endpoint"]}, "action": "notify"}
    return Policy.model_validate({"slack": slack, "rules": [rule]})


def test_a_namespace_that_held_nothing_gets_no_digest_of_zeros() -> None:
    found, skipped = routes(_week(_ns("a", 0.0), _ns("b", 10.0)), {}, _policy(channel="#costs"))
    assert [(r.channel, [w.namespace for w in r.namespaces]) for r in found] == [("#costs", ["b"])]
    assert skipped == []


def test_no_channel_at_all_is_a_skip_with_its_reason() -> None:
    found, skipped = routes(_week(_ns("a", 5.0)), {}, _policy())
    assert found == [] and skipped[0].reason.startswith("no channel")


def test_a_direct_message_or_user_in_an_annotation_is_refused_even_without_allowed_channels() -> None:
    ns = Namespace("a", annotations={"gpu-reaper/slack-channel": "@ceo"})
    found, skipped = routes(_week(_ns("a", 5.0)), {"a": ns}, _policy(channel="#costs"))
    assert found == [] and skipped[0].namespace == "a"


def test_a_webhook_gets_one_message_but_still_never_a_refused_namespaces_week() -> None:
    refused = Namespace("b", annotations={"gpu-reaper/slack-channel": "#elsewhere"})
    week = _week(_ns("a", 5.0), _ns("b", 5.0))
    found, skipped = routes(week, {"b": refused}, _policy(allowedChannels=["#team-*"]), single=True)
    assert [(r.channel, [w.namespace for w in r.namespaces]) for r in found] == [(None, ["a"])]
    assert [s.namespace for s in skipped] == ["b"]


def test_the_message_sums_its_namespaces_and_names_the_idlest_workloads_by_idle_cost() -> None:
    def idle(name: str, hours: float, cost: float | None, kind: FindingKind | None = None) -> IdleWorkload:
        return IdleWorkload(
            WorkloadRef(kind="Deployment", name=name, namespace="a"), hours, cost, 2 * hours, kind
        )

    top = (
        idle("cheap", 50.0, 10.0),
        idle("dear", 20.0, 80.0, FindingKind.IDLE_ENDPOINT),
        idle("none", 0.0, 0.0),
    )
    week = _week(_ns("a", 200.0, idle=70.0, top=top), _ns("b", 4.0))
    (route,) = routes(week, {}, _policy(channel="#costs"))[0]
    text = preview([digest_message(route, week, cluster="prod")])
    assert text.splitlines()[1].startswith(
        "[PROD] GPU WEEK FOR 2 NAMESPACES: 204 GPU-HOURS HELD, 66 % USED, IDLE ≈ 140 EUR"
    )
    lines = text.splitlines()
    dear, cheap = (
        lines.index(next(x for x in lines if "`a/dear`" in x)),
        lines.index(next(x for x in lines if "`a/cheap`" in x)),
    )
    assert dear < cheap  # by idle cost
    assert "the analyzer finds it idle endpoint" in lines[dear]
    assert "`a/none`" not in text  # no idle hours: not among the idlest
    assert "*b*: held 4.0 GPU-hours (≈ 8 EUR)" in text
