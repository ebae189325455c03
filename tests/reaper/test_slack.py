"""Slack: Block Kit formatting (pure) and delivery through slack-sdk to a local stand-in for slack.com."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from common.errors import BadInputError
from common.model import FindingKind
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from reaper.adapter_errors import SlackError
from reaper.cluster import read_snapshot
from reaper.executor import Executor
from reaper.messages import Message, build_messages, preview
from reaper.outcomes import ActionResult, Outcome
from reaper.planner import Plan, plan
from reaper.policy import Policy, RunMode
from reaper.runner import EXIT_OK, RunSettings, run
from reaper.slack import SlackCredentials, SlackNotifier, load_credentials
from simulation.in_memory_cluster import InMemoryCluster, manifest

TOKEN = "xoxb-0000-secret-token"
LONG_AGO = NOW - timedelta(days=30)
POLICY: dict[str, Any] = {
    "pricePerGpuHour": 2.0,
    "safety": {"consecutiveRuns": 1, "maxCordonShare": 1.0},
    "slack": {"channel": "#gpu-waste", "routes": [{"namespaces": ["research"], "channel": "#research"}]},
    "rules": [
        {"name": "idle", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"},
        {"name": "tell", "match": {"findings": ["low_utilization"]}, "action": "notify"},
    ],
}


def cluster() -> InMemoryCluster:
    objects = [manifest("Namespace", n) for n in ("serving", "research", "team-b", "gpu-reaper")]
    objects[2]["metadata"]["annotations"] = {"gpu-reaper/slack-channel": "#team-b"}
    for ns, name in (("serving", "ranker"), ("research", "notebook"), ("team-b", "mig")):
        objects.append(manifest("Deployment", name, ns, created=LONG_AGO, spec=gpu_spec(2)))
    return InMemoryCluster(objects)


FINDINGS = report(
    finding(FindingKind.IDLE_ENDPOINT, name="ranker", gpus=2),
    finding(FindingKind.LOW_UTILIZATION, name="notebook", namespace="research"),
    finding(FindingKind.IDLE_ENDPOINT, name="mig", namespace="team-b"),
)


def executed(the_plan: Plan, memory: InMemoryCluster, mode: RunMode) -> list[ActionResult]:
    """The plan through the real executor: the results carry the writes it formed (and, in apply, sent)."""
    return Executor(memory, mode=mode, namespace="gpu-reaper", clock=lambda: NOW).execute(the_plan)


def messages_for(apply: bool, policy: dict[str, Any] | None = None, single: bool = False) -> list[Message]:
    p = Policy.model_validate(policy or POLICY)
    memory = cluster()
    the_plan = plan(FINDINGS, read_snapshot(memory, "gpu-reaper"), p, NOW)
    mode = RunMode.APPLY if apply else RunMode.DRY_RUN
    return build_messages(the_plan, executed(the_plan, memory, mode), p, mode=mode, single=single)


def text_of(message: Message) -> str:
    return preview([message])


def test_one_message_per_owner_channel() -> None:
    by_channel = {m.channel: text_of(m) for m in messages_for(apply=True)}
    assert set(by_channel) == {"#gpu-waste", "#research", "#team-b"}
    assert "*Scaled to zero* `serving/ranker` (Deployment)" in by_channel["#gpu-waste"]
    assert (
        "48 GPU-hours/day (≈ 96 USD/day)\nWrote `Deployment serving/ranker: replicas 2 → 0`"
        in by_channel["#gpu-waste"]
    )
    assert "*Heads-up* `research/notebook` (Deployment)" in by_channel["#research"]
    assert "`team-b/mig`" in by_channel["#team-b"]  # the namespace annotation routes it


def test_message_says_what_was_done_and_how_to_opt_out_and_restore() -> None:
    (m,) = [m for m in messages_for(apply=True) if m.channel == "#gpu-waste"]
    header = m.blocks[0]
    assert (
        header["type"] == "header"
        and header["text"]["text"] == "GPU reaper: reclaimed GPUs from 1 of 1 workload"
    )
    text = text_of(m)
    assert "Reclaimed 48 GPU-hours/day (≈ 96 USD/day)" in text
    assert "kubectl annotate deployment ranker -n serving gpu-reaper/exclude=true" in text
    assert "Restore: `gpu-reaper restore serving/ranker`" in text
    assert m.text.startswith("GPU reaper: reclaimed GPUs from 1 of 1 workload")


def test_dry_run_message_says_would_and_offers_no_restore() -> None:
    (m,) = [m for m in messages_for(apply=False) if m.channel == "#gpu-waste"]
    text = text_of(m)
    assert "*Would scale to zero* `serving/ranker`" in text
    assert "Writes `Deployment serving/ranker: replicas 2 → 0`" in text
    assert "Reclaimable 48 GPU-hours/day" in text
    assert "Restore:" not in text


def test_each_workload_in_a_message_gets_one_opt_out_line_and_never_the_whole_namespace() -> None:
    findings = report(
        finding(FindingKind.IDLE_ENDPOINT, name="ranker", gpus=2),
        finding(FindingKind.LOW_UTILIZATION, name="mig", namespace="team-b"),
        finding(FindingKind.LOW_UTILIZATION, name="trainer", namespace="team-b", workload_kind="Pod"),
        finding(FindingKind.LOW_UTILIZATION, name="shell", namespace="team-b", workload_kind="Pod"),
        finding(FindingKind.LOW_UTILIZATION, name="nightly", namespace="team-b", workload_kind="CronJob"),
        finding(FindingKind.LOW_UTILIZATION, name="train", namespace="team-b", workload_kind="JobSet"),
    )
    p = Policy.model_validate({**POLICY, "slack": {"channel": "#gpu-waste"}})
    the_plan = plan(findings, read_snapshot(cluster(), "gpu-reaper"), p, NOW)
    results = [ActionResult(a, Outcome.APPLIED) for a in the_plan.actions]
    (m,) = [m for m in build_messages(the_plan, results, p, mode=RunMode.APPLY) if m.channel == "#team-b"]
    text = text_of(m)
    opt_outs = [line for line in text.splitlines() if line.startswith("• ")]
    assert len(opt_outs) == 5  # once per workload
    assert "• `kubectl annotate deployment mig -n team-b gpu-reaper/exclude=true`" in opt_outs
    # The reaper reads a JobSet: its own annotation opts it out.
    assert "• `kubectl annotate jobset train -n team-b gpu-reaper/exclude=true`" in opt_outs
    # A bare Pod or a CronJob is never read, never stopped: the policy silences it, not the namespace.
    for name in ("trainer", "shell", "nightly"):
        assert any(f"`team-b/{name}` to the policy's `exclude.workloads`" in line for line in opt_outs), name
    assert "annotate namespace" not in text
    assert "ranker" not in text  # another channel's workload


def test_every_channel_sees_the_fleet_wide_total_and_cordons_are_not_counted_as_saved() -> None:
    policy = {
        **POLICY,
        "rules": [
            {
                "name": "nodes",
                "match": {"findings": ["low_utilization"], "kinds": ["Node"]},
                "action": "cordon",
            },
            *POLICY["rules"],
        ],
    }
    objects = [*cluster().list_objects("Namespace"), *cluster().list_objects("Deployment")]
    node = manifest("Node", "gpu-a", created=LONG_AGO)
    node["status"] = {"allocatable": {"nvidia.com/gpu": "4"}}
    findings = report(
        finding(FindingKind.IDLE_ENDPOINT, name="ranker", gpus=2),
        finding(FindingKind.IDLE_ENDPOINT, name="mig", namespace="team-b"),
        finding(FindingKind.LOW_UTILIZATION, name="gpu-a", workload_kind="Node", gpus=4),
    )
    p = Policy.model_validate(policy)
    the_plan = plan(findings, read_snapshot(InMemoryCluster([*objects, node]), "gpu-reaper"), p, NOW)
    results = [ActionResult(a, Outcome.APPLIED) for a in the_plan.actions]
    by_channel = {m.channel: text_of(m) for m in build_messages(the_plan, results, p, mode=RunMode.APPLY)}
    assert set(by_channel) == {"#gpu-waste", "#team-b"}
    fleet = (
        "*Fleet-wide* (3 targets): Reclaimed 72 GPU-hours/day (≈ 144 USD/day); cordoned nodes hold "
        "96 GPU-hours/day (≈ 192 USD/day), saved only once the node is drained and removed"
    )
    assert all(fleet in text for text in by_channel.values())
    assert "Reclaimed 24 GPU-hours/day (≈ 48 USD/day)\n" in by_channel["#team-b"]
    assert "*Cordoned* `node/gpu-a`" in by_channel["#gpu-waste"]
    assert "96 GPU-hours/day (≈ 192 USD/day) once the node is removed" in by_channel["#gpu-waste"]


def test_a_lone_cordon_is_not_counted_as_reclaimed_in_the_headline() -> None:
    """A cordon saves nothing until the node is drained and removed: the headline says "cordon"."""
    node = manifest("Node", "gpu-a", created=LONG_AGO)
    node["status"] = {"allocatable": {"nvidia.com/gpu": "4"}}
    policy = {
        **POLICY,
        "slack": {"channel": "#gpu-waste"},
        "rules": [{"name": "nodes", "match": {"findings": ["low_utilization"]}, "action": "cordon"}],
    }
    p = Policy.model_validate(policy)
    memory = InMemoryCluster([*cluster().list_objects("Namespace"), node])
    found = report(finding(FindingKind.LOW_UTILIZATION, name="gpu-a", workload_kind="Node", gpus=4))
    the_plan = plan(found, read_snapshot(memory, "gpu-reaper"), p, NOW)
    for mode, headline in (
        (RunMode.DRY_RUN, "GPU reaper (dry-run): would cordon 1 of 1 node"),
        (RunMode.APPLY, "GPU reaper: cordoned 1 of 1 node"),
    ):
        (m,) = build_messages(the_plan, executed(the_plan, memory, mode), p, mode=mode)
        assert m.blocks[0]["text"]["text"] == headline
        assert "reclaim" not in m.text.split(".")[0].lower()
        assert "saved only once the node is drained and removed" in text_of(m)
    # Next to a stop, each is counted as what it is.
    both = report(*FINDINGS.findings, *found.findings)
    mixed = {**policy, "rules": [*policy["rules"], *POLICY["rules"]]}
    p = Policy.model_validate(mixed)
    memory = InMemoryCluster(
        [*cluster().list_objects("Namespace"), *cluster().list_objects("Deployment"), node]
    )
    the_plan = plan(both, read_snapshot(memory, "gpu-reaper"), p, NOW)
    results = executed(the_plan, memory, RunMode.DRY_RUN)
    (m,) = build_messages(the_plan, results, p, mode=RunMode.DRY_RUN, single=True)
    assert m.blocks[0]["text"]["text"] == (
        "GPU reaper (dry-run): would reclaim GPUs from 2 of 2 workloads; would cordon 1 of 1 node"
    )


def test_the_findings_line_names_unknown_findings_as_such() -> None:
    p = Policy.model_validate(POLICY)
    found = report(
        *FINDINGS.findings,
        finding(FindingKind.UNKNOWN, name="fresh", evidence={"reason": "too_young", "judged_hours": 1.0}),
    )
    memory = cluster()
    the_plan = plan(found, read_snapshot(memory, "gpu-reaper"), p, NOW)
    (skip,) = the_plan.skips
    assert skip.reason.value == "unknown" and skip.detail == "too young: 1.0 h judged; never acted on"
    messages = build_messages(the_plan, executed(the_plan, memory, RunMode.DRY_RUN), p, mode=RunMode.DRY_RUN)
    assert all(
        "*Findings* 4 (1 unknown: too little data to judge, never acted on)" in text_of(m) for m in messages
    )


def test_webhook_gets_one_message_with_everything() -> None:
    (m,) = messages_for(apply=True, single=True)
    assert m.channel is None
    text = text_of(m)
    assert "serving/ranker" in text and "research/notebook" in text and "team-b/mig" in text


def test_long_runs_are_truncated_within_slack_limits() -> None:
    policy = {**POLICY, "slack": {"channel": "#gpu-waste", "maxItemsPerMessage": 5}}
    findings = report(*(finding(FindingKind.LOW_UTILIZATION, name=f"w{i:02d}") for i in range(30)))
    p = Policy.model_validate(policy)
    objects = [
        manifest("Deployment", f"w{i:02d}", "serving", created=LONG_AGO, spec=gpu_spec(1)) for i in range(30)
    ]
    the_plan = plan(findings, read_snapshot(InMemoryCluster(objects), "gpu-reaper"), p, NOW)
    (m,) = build_messages(
        the_plan, [ActionResult(a, Outcome.APPLIED) for a in the_plan.actions], p, mode=RunMode.APPLY
    )
    assert len(m.blocks) <= 50
    assert all(len(b.get("text", {}).get("text", "")) <= 3000 for b in m.blocks)
    assert "…and 25 more in the run's log" in text_of(m)


def test_mrkdwn_is_escaped() -> None:
    from reaper.messages import escape

    assert escape("<!channel> & co") == "&lt;!channel&gt; &amp; co"


# --- delivery -------------------------------------------------------------------------------------------


def slack_ok(request: Request) -> Response:
    return Response(json.dumps({"ok": True, "channel": "C1", "ts": "1.1"}), content_type="application/json")


def posted(httpserver: HTTPServer) -> list[dict[str, Any]]:
    return [json.loads(req.get_data()) for req, _ in httpserver.log if req.path == "/api/chat.postMessage"]


def test_bot_token_posts_each_channel_with_blocks(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/chat.postMessage", method="POST").respond_with_handler(slack_ok)
    notifier = SlackNotifier(SlackCredentials(token=TOKEN), api_url=httpserver.url_for("/api/"))
    for m in messages_for(apply=True):
        notifier.send(m)
    bodies = posted(httpserver)
    assert sorted(b["channel"] for b in bodies) == ["#gpu-waste", "#research", "#team-b"]
    assert all(b["blocks"][0]["type"] == "header" and b["text"] for b in bodies)
    auth = {req.headers["Authorization"] for req, _ in httpserver.log}
    assert auth == {f"Bearer {TOKEN}"}


def test_rate_limits_are_retried(httpserver: HTTPServer) -> None:
    httpserver.expect_ordered_request("/api/chat.postMessage").respond_with_response(
        Response(json.dumps({"ok": False, "error": "ratelimited"}), status=429, headers={"Retry-After": "0"})
    )
    httpserver.expect_ordered_request("/api/chat.postMessage").respond_with_handler(slack_ok)
    notifier = SlackNotifier(SlackCredentials(token=TOKEN), api_url=httpserver.url_for("/api/"))
    notifier.send(messages_for(apply=True)[0])
    assert len(posted(httpserver)) == 2


def test_slack_errors_become_slack_error_without_the_token(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/api/chat.postMessage").respond_with_json(
        {"ok": False, "error": "channel_not_found"}
    )
    notifier = SlackNotifier(SlackCredentials(token=TOKEN), api_url=httpserver.url_for("/api/"))
    with pytest.raises(SlackError, match="channel_not_found") as caught:
        notifier.send(messages_for(apply=True)[0])
    assert TOKEN not in str(caught.value)


def test_webhook_posts_one_message(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/hooks/T000/B000/XXX", method="POST").respond_with_data("ok")
    notifier = SlackNotifier(SlackCredentials(webhook_url=httpserver.url_for("/hooks/T000/B000/XXX")))
    assert notifier.webhook_mode
    (m,) = messages_for(apply=True, single=True)
    notifier.send(m)
    ((req, _),) = httpserver.log
    assert json.loads(req.get_data())["blocks"][0]["type"] == "header"


def test_webhook_failure_hides_the_url(httpserver: HTTPServer) -> None:
    url = httpserver.url_for("/hooks/T000/B000/SECRET")
    httpserver.expect_request("/hooks/T000/B000/SECRET").respond_with_data("invalid_token", status=403)
    with pytest.raises(SlackError, match="answered 403") as caught:
        SlackNotifier(SlackCredentials(webhook_url=url)).send(messages_for(apply=True, single=True)[0])
    assert "SECRET" not in str(caught.value)


def test_a_slack_outage_never_aborts_reaping(
    httpserver: HTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    httpserver.expect_request("/api/chat.postMessage").respond_with_data("down", status=500)
    notifier = SlackNotifier(SlackCredentials(token=TOKEN), api_url=httpserver.url_for("/api/"))
    memory = cluster()
    settings = RunSettings(
        policy=Policy.model_validate(POLICY), mode=RunMode.APPLY, namespace="gpu-reaper", end=NOW
    )
    with caplog.at_level(logging.DEBUG):
        result = run(settings, lambda w, t: FINDINGS, lambda: memory, notifier, sleep=lambda s: None)
    assert result.exit_code == EXIT_OK
    assert result.count(Outcome.APPLIED) == 2 and result.slack_failures == 3 and result.slack_sent == 0
    # The stops were made; the notice's message never went out, and it is not counted as applied.
    assert result.count(Outcome.NOT_SENT) == 1
    assert result.metrics().slack_failures == 3
    assert memory.get("Deployment", "serving", "ranker")["spec"]["replicas"] == 0
    assert TOKEN not in caplog.text


# --- many clusters --------------------------------------------------------------------------------------


def test_messages_name_the_cluster_in_the_headline_and_where_the_commands_apply() -> None:
    p = Policy.model_validate(POLICY)
    the_plan = plan(FINDINGS, read_snapshot(cluster(), "gpu-reaper"), p, NOW)
    results = [ActionResult(a, Outcome.APPLIED) for a in the_plan.actions]
    (m,) = [
        m
        for m in build_messages(the_plan, results, p, mode=RunMode.APPLY, cluster="prod-eu-1")
        if m.channel == "#gpu-waste"
    ]
    assert m.blocks[0]["text"]["text"] == "[prod-eu-1] GPU reaper: reclaimed GPUs from 1 of 1 workload"
    assert m.text.startswith("[prod-eu-1] GPU reaper: reclaimed GPUs from 1 of 1 workload.")
    text = text_of(m)
    assert "Opt out in cluster `prod-eu-1` (" in text
    assert "Restore in cluster `prod-eu-1`: `gpu-reaper restore serving/ranker`" in text
    # Without a cluster, nothing changes.
    (plain,) = [m for m in messages_for(apply=True) if m.channel == "#gpu-waste"]
    assert plain.blocks[0]["text"]["text"] == "GPU reaper: reclaimed GPUs from 1 of 1 workload"
    assert "in cluster" not in text_of(plain)


def test_the_one_cluster_the_findings_name_is_named_when_none_is_configured() -> None:
    p = Policy.model_validate(POLICY)
    found = report(
        *(f.model_copy(update={"cluster": "prod-eu-1"}) for f in FINDINGS.findings), window=FINDINGS.window
    )
    the_plan = plan(found, read_snapshot(cluster(), "gpu-reaper"), p, NOW)
    results = [ActionResult(a, Outcome.DRY_RUN) for a in the_plan.actions]
    messages = build_messages(the_plan, results, p, mode=RunMode.DRY_RUN)
    assert messages and all(
        m.blocks[0]["text"]["text"].startswith("[prod-eu-1] GPU reaper (dry-run)") for m in messages
    )


def test_slack_hears_only_about_the_reapers_own_cluster(httpserver: HTTPServer) -> None:
    """Cluster b's idle team-b/mig shares its name with a's busy one: a's reaper posts nothing about it."""
    httpserver.expect_request("/api/chat.postMessage", method="POST").respond_with_handler(slack_ok)
    notifier = SlackNotifier(SlackCredentials(token=TOKEN), api_url=httpserver.url_for("/api/"))
    memory = cluster()
    found = report(
        finding(FindingKind.IDLE_ENDPOINT, name="ranker", gpus=2).model_copy(update={"cluster": "a"}),
        finding(FindingKind.IDLE_ENDPOINT, name="mig", namespace="team-b").model_copy(
            update={"cluster": "b"}
        ),
    )
    settings = RunSettings(
        policy=Policy.model_validate(POLICY), mode=RunMode.APPLY, namespace="gpu-reaper", end=NOW, cluster="a"
    )
    result = run(settings, lambda w, t: found, lambda: memory, notifier, sleep=lambda s: None)
    assert result.exit_code == EXIT_OK and result.slack_sent == 1 and result.other_clusters == 1
    (body,) = posted(httpserver)
    assert body["channel"] == "#gpu-waste"
    assert body["blocks"][0]["text"]["text"] == "[a] GPU reaper: reclaimed GPUs from 1 of 1 workload"
    assert body["text"].startswith("[a] GPU reaper: reclaimed GPUs from 1 of 1 workload.")
    assert "Restore in cluster `a`: `gpu-reaper restore serving/ranker`" in json.dumps(body["blocks"])
    assert "mig" not in json.dumps(body)
    assert memory.get("Deployment", "team-b", "mig")["spec"]["replicas"] == 2


# --- credentials ----------------------------------------------------------------------------------------


def test_credentials_from_env_or_files_never_shown(tmp_path: Path) -> None:
    assert load_credentials({}) is None
    creds = load_credentials({"SLACK_BOT_TOKEN": TOKEN})
    assert creds is not None and creds.token == TOKEN and TOKEN not in repr(creds)
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n", encoding="utf-8")
    from_file = load_credentials({"GPU_REAPER_SLACK_TOKEN_FILE": str(secret)})
    assert from_file is not None and from_file.token == TOKEN
    hook = load_credentials({"GPU_REAPER_SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/X"})
    assert hook is not None and hook.webhook_mode and "hooks" not in repr(hook)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"GPU_REAPER_SLACK_TOKEN": "hunter2"}, "does not look like a bot token", id="not-a-token"
        ),
        pytest.param(
            {"GPU_REAPER_SLACK_TOKEN_FILE": "/nonexistent/token"},
            "cannot read the Slack token file",
            id="missing-file",
        ),
    ],
)
def test_bad_slack_credentials_are_bad_input(env: dict[str, str], message: str) -> None:
    with pytest.raises(BadInputError, match=message) as caught:
        load_credentials(env)
    assert "hunter2" not in str(caught.value)


# --- where a namespace's owners say to post (a tenant's annotation) ----------------------------------


@pytest.mark.parametrize(
    ("annotated", "allowed", "posted_to"),
    [
        pytest.param("#team-b", None, "#team-b", id="a-channel-name"),
        pytest.param("C0123456789", None, "C0123456789", id="a-channel-id"),
        pytest.param("U0123456789", None, "#gpu-waste", id="a-user-id-is-refused"),
        pytest.param("W0123456789", None, "#gpu-waste", id="an-enterprise-user-id-is-refused"),
        pytest.param("D0123456789", None, "#gpu-waste", id="a-direct-message-is-refused"),
        pytest.param("@alice", None, "#gpu-waste", id="a-mention-is-refused"),
        pytest.param("#Team-B", None, "#gpu-waste", id="not-a-channel-name"),
        pytest.param("#team-b", ["#team-*"], "#team-b", id="on-the-allow-list"),
        pytest.param("#finance", ["#team-*", "C0123456789"], "#gpu-waste", id="off-the-allow-list"),
        pytest.param("C0123456789", ["#team-*", "C0123456789"], "C0123456789", id="an-allowed-id"),
    ],
)
def test_a_namespaces_channel_is_posted_to_only_when_the_policy_would_accept_it(
    httpserver: HTTPServer,
    caplog: pytest.LogCaptureFixture,
    annotated: str,
    allowed: list[str] | None,
    posted_to: str,
) -> None:
    httpserver.expect_request("/api/chat.postMessage", method="POST").respond_with_handler(slack_ok)
    memory = InMemoryCluster(
        [
            manifest("Namespace", "team-b", annotations={"gpu-reaper/slack-channel": annotated}),
            manifest("Namespace", "gpu-reaper"),
            manifest("Deployment", "mig", "team-b", created=LONG_AGO, spec=gpu_spec(2)),
        ]
    )
    slack = {"channel": "#gpu-waste", **({"allowedChannels": allowed} if allowed is not None else {})}
    settings = RunSettings(
        policy=Policy.model_validate({**POLICY, "slack": slack}),
        mode=RunMode.APPLY,
        namespace="gpu-reaper",
        end=NOW,
    )
    notifier = SlackNotifier(SlackCredentials(token=TOKEN), api_url=httpserver.url_for("/api/"))
    findings = report(finding(FindingKind.IDLE_ENDPOINT, name="mig", namespace="team-b"))
    with caplog.at_level(logging.WARNING):
        result = run(settings, lambda w, t: findings, lambda: memory, notifier, sleep=lambda s: None)
    assert result.exit_code == EXIT_OK and result.slack_sent == 1
    assert [b["channel"] for b in posted(httpserver)] == [posted_to]
    refused = [r.getMessage() for r in caplog.records if "gpu-reaper/slack-channel" in r.getMessage()]
    if posted_to == annotated:
        assert refused == []
    else:
        (line,) = refused
        assert f"namespace team-b: {annotated!r}" in line and "#gpu-waste" not in line


def test_every_mrkdwn_text_is_sent_verbatim() -> None:
    """Slack links no channel name, mention or URL of its own accord in what a run writes."""

    def texts(node: Any) -> list[dict[str, Any]]:
        if isinstance(node, dict):
            own = [node] if node.get("type") == "mrkdwn" else []
            return own + [t for v in node.values() for t in texts(v)]
        if isinstance(node, list | tuple):
            return [t for v in node for t in texts(v)]
        return []

    found = [t for m in messages_for(apply=True) for t in texts(list(m.blocks))]
    assert found and all(t.get("verbatim") is True for t in found)
