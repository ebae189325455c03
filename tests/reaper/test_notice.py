"""Notice first, then act: a rule's ``notice:`` through real runs against the Kubernetes emulator.

Each run is a fresh executor and client reading the state ConfigMap (what a restarted reaper, or
another replica that takes the Lease, reads); Slack is a local server answering like Slack's API.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from common.errors import BadInputError
from common.model import FindingKind, TimeWindow
from common.timeutil import rfc3339
from harness.findings import finding, report
from harness.gpu_workloads import gpu_spec
from harness.kube_emulator import EmulatedCluster
from reaper import names
from reaper.outcomes import Outcome
from reaper.planner import SkipReason
from reaper.policy import Policy, RunMode
from reaper.runner import RunReport, RunSettings, run
from reaper.slack import SlackCredentials, SlackNotifier
from reaper.state import ReaperState
from simulation import controllers
from simulation.manifests import manifest

T0 = datetime(2026, 1, 5, 12, tzinfo=UTC)
LONG_AGO = T0 - timedelta(days=30)
NOTICE = timedelta(hours=2)
POLICY = {
    "window": "6h",
    "safety": {"consecutiveRuns": 1},
    "slack": {"channel": "#gpu-waste"},
    "rules": [
        {
            "name": "idle-endpoints",
            "match": {"findings": ["idle_endpoint"]},
            "action": "scale_to_zero",
            "notice": "2h",
        }
    ],
}


def seed(cluster: EmulatedCluster, *extra: dict[str, Any]) -> None:
    cluster.seed(
        [
            manifest("Namespace", "serving"),
            manifest("Namespace", "gpu-reaper"),
            manifest("Deployment", "api", "serving", created=LONG_AGO, spec=gpu_spec(2)),
            *extra,
        ]
    )


def reaper_run(
    cluster: EmulatedCluster,
    at: datetime,
    *,
    idle: bool = True,
    mode: RunMode = RunMode.APPLY,
    slack: HTTPServer | None = None,
    policy: dict[str, Any] = POLICY,
    identity: str | None = None,
    annotate: bool = False,
    of: tuple[str, str] = ("Deployment", "api"),
) -> RunReport:
    window = TimeWindow.ending(at, timedelta(hours=6))
    kind, name = of
    found = (
        report(
            finding(FindingKind.IDLE_ENDPOINT, name=name, workload_kind=kind, window=window), window=window
        )
        if idle
        else report(window=window)
    )
    notifier = (
        SlackNotifier(SlackCredentials(token="xoxb-test"), api_url=slack.url_for("/api/")) if slack else None
    )
    settings = RunSettings(
        policy=Policy.model_validate(policy),
        mode=mode,
        namespace="gpu-reaper",
        end=at,
        identity=identity,
        notice_annotations=annotate,
    )
    return run(settings, lambda w, t: found, lambda: cluster.client(), notifier, sleep=lambda s: None)


def replicas(cluster: EmulatedCluster) -> int:
    return int(cluster.obj("Deployment", "serving", "api")["spec"]["replicas"])


def state(cluster: EmulatedCluster) -> ReaperState:
    data = cluster.obj("ConfigMap", "gpu-reaper", names.STATE_CONFIGMAP)["data"]
    return ReaperState.from_json(data[names.STATE_KEY])


def notices(cluster: EmulatedCluster) -> list[dict[str, Any]]:
    return [e for e in cluster.objects("Event") if e["reason"] == "GpuReaperNotice"]


def reasons(result: RunReport) -> list[SkipReason]:
    assert result.plan is not None
    return [s.reason for s in result.plan.skips]


KEY = "serving/Deployment/api"


def slack_ok(request: Request) -> Response:
    return Response(json.dumps({"ok": True, "channel": "C1", "ts": "1.1"}), content_type="application/json")


def posted(httpserver: HTTPServer) -> list[str]:
    return [req.get_data(as_text=True) for req, _ in httpserver.log if req.path == "/api/chat.postMessage"]


def test_a_notice_is_given_then_waits_then_the_first_run_after_it_acts_once(
    cluster: EmulatedCluster, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/api/chat.postMessage", method="POST").respond_with_handler(slack_ok)
    seed(cluster)

    first = reaper_run(cluster, T0, slack=httpserver)
    assert first.exit_code == 0 and reasons(first) == [SkipReason.NOTICED]
    assert replicas(cluster) == 2  # told, not acted on
    notice = state(cluster).notices[KEY]
    assert (notice.noticed_at, notice.act_after) == (T0, T0 + NOTICE)
    assert (notice.kind, notice.namespace, notice.name) == ("Deployment", "serving", "api")
    (event,) = notices(cluster)
    assert event["involvedObject"]["name"] == "api" and event["involvedObject"]["kind"] == "Deployment"
    snooze = (
        f"kubectl annotate --overwrite deployment api -n serving {names.EXCLUDE_UNTIL}=2026-01-12T12:00:00Z"
    )
    assert snooze in event["message"] and rfc3339(T0 + NOTICE) in event["message"]
    assert f"{names.EXCLUDE}=true" in event["message"]
    (message,) = posted(httpserver)
    assert "Notice" in message and snooze in message and "#gpu-waste" in message

    # Inside the period: nothing new is given, nothing is done, and the notice keeps its time.
    inside = reaper_run(cluster, T0 + timedelta(hours=1), slack=httpserver)
    assert reasons(inside) == [SkipReason.NOTICE_PENDING] and replicas(cluster) == 2
    assert state(cluster).notices[KEY].noticed_at == T0 and len(notices(cluster)) == 1
    assert len(posted(httpserver)) == 1  # a standing notice is not posted again

    # The first run after the period acts; the notice is used up.
    after = reaper_run(cluster, T0 + NOTICE + timedelta(minutes=5))
    assert after.count(Outcome.APPLIED) == 1 and replicas(cluster) == 0
    assert state(cluster).notices == {}

    # Once acted on, no run acts again nor gives a new notice.
    again = reaper_run(cluster, T0 + NOTICE + timedelta(hours=1))
    assert reasons(again) == [SkipReason.ALREADY_DONE] and state(cluster).notices == {}
    assert len(notices(cluster)) == 1


def test_busy_again_drops_the_notice_and_a_later_one_starts_a_new_period(cluster: EmulatedCluster) -> None:
    seed(cluster)
    reaper_run(cluster, T0)
    busy = reaper_run(cluster, T0 + timedelta(hours=1), idle=False)
    assert busy.exit_code == 0 and state(cluster).notices == {}
    later = T0 + timedelta(hours=3)  # past the first notice's period
    again = reaper_run(cluster, later)
    assert reasons(again) == [SkipReason.NOTICED] and replicas(cluster) == 2
    assert state(cluster).notices[KEY].act_after == later + NOTICE


def test_a_redeploy_drops_the_notice(cluster: EmulatedCluster) -> None:
    seed(cluster)
    reaper_run(cluster, T0)
    client = cluster.client()
    template = gpu_spec(2)["template"]
    template["spec"]["containers"][0]["image"] = "registry.example/api:v2"
    client.patch("Deployment", "serving", "api", {"spec": {"template": template}})
    client.close()
    later = T0 + NOTICE + timedelta(minutes=5)
    result = reaper_run(cluster, later)
    assert reasons(result) == [SkipReason.NOTICED] and replicas(cluster) == 2
    assert result.plan is not None and "redeployed" in result.plan.skips[0].detail
    assert state(cluster).notices[KEY].noticed_at == later


def test_scaling_alone_keeps_the_notice(cluster: EmulatedCluster) -> None:
    seed(cluster)
    reaper_run(cluster, T0)
    client = cluster.client()
    client.patch("Deployment", "serving", "api", {"spec": {"replicas": 3}})
    client.close()
    result = reaper_run(cluster, T0 + NOTICE + timedelta(minutes=5))
    assert result.count(Outcome.APPLIED) == 1 and replicas(cluster) == 0


def test_a_snooze_drops_the_notice_and_the_run_after_it_gives_a_new_one(cluster: EmulatedCluster) -> None:
    seed(cluster)
    reaper_run(cluster, T0)
    until = T0 + timedelta(hours=5)
    client = cluster.client()
    client.patch(
        "Deployment", "serving", "api", {"metadata": {"annotations": {names.EXCLUDE_UNTIL: rfc3339(until)}}}
    )
    client.close()
    snoozed = reaper_run(cluster, T0 + NOTICE + timedelta(minutes=5))
    assert reasons(snoozed) == [SkipReason.EXCLUDED_BY_ANNOTATION] and replicas(cluster) == 2
    assert state(cluster).notices == {}
    woke = reaper_run(cluster, until + timedelta(minutes=5))
    assert reasons(woke) == [SkipReason.NOTICED] and replicas(cluster) == 2  # a new period, not an action


def test_a_clock_stepped_back_never_acts_early(cluster: EmulatedCluster) -> None:
    seed(cluster)
    reaper_run(cluster, T0)
    back = reaper_run(cluster, T0 - timedelta(hours=3))
    assert reasons(back) == [SkipReason.NOTICE_PENDING]
    assert back.plan is not None and "reads before the notice" in back.plan.skips[0].detail
    assert state(cluster).notices[KEY].noticed_at == T0  # the notice keeps its own time
    almost = reaper_run(cluster, T0 + NOTICE - timedelta(seconds=1))
    assert reasons(almost) == [SkipReason.NOTICE_PENDING] and replicas(cluster) == 2


def test_two_overlapping_runs_act_once(cluster: EmulatedCluster) -> None:
    seed(cluster)
    reaper_run(cluster, T0)
    at = T0 + NOTICE + timedelta(minutes=5)
    results: list[RunReport] = []
    start = threading.Barrier(2)

    def one(identity: str) -> None:
        start.wait()
        results.append(reaper_run(cluster, at, identity=identity))

    threads = [threading.Thread(target=one, args=(f"run-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    scales = [p for m, p in cluster.mutations() if m == "PATCH" and p.endswith("/deployments/api/scale")]
    assert len(scales) == 1 and replicas(cluster) == 0
    assert sorted(r.count(Outcome.APPLIED) for r in results) == [0, 1]


def test_a_dry_run_previews_notices_and_posts_nothing(
    cluster: EmulatedCluster, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/api/chat.postMessage", method="POST").respond_with_handler(slack_ok)
    seed(cluster)
    preview = reaper_run(cluster, T0, mode=RunMode.DRY_RUN, slack=httpserver, annotate=True)
    assert reasons(preview) == [SkipReason.NOTICED]
    assert preview.plan is not None and rfc3339(T0 + NOTICE) in preview.plan.skips[0].detail
    assert cluster.mutations() == []  # no Event, no state, no annotation
    (message,) = posted(httpserver)
    assert "Would give notice" in message and "dry-run: none given" in message

    # A notice given for real is what a dry-run reads: when it would turn into an action.
    reaper_run(cluster, T0)
    before = len(cluster.mutations())
    waiting = reaper_run(cluster, T0 + timedelta(hours=1), mode=RunMode.DRY_RUN)
    assert reasons(waiting) == [SkipReason.NOTICE_PENDING]
    assert (
        waiting.plan is not None and f"may act after {rfc3339(T0 + NOTICE)}" in waiting.plan.skips[0].detail
    )
    due = reaper_run(cluster, T0 + NOTICE + timedelta(minutes=5), mode=RunMode.DRY_RUN)
    assert due.count(Outcome.DRY_RUN) == 1 and replicas(cluster) == 2
    assert len(cluster.mutations()) == before


def marks(cluster: EmulatedCluster, kind: str = "Deployment", name: str = "api") -> dict[str, str]:
    annotations = cluster.obj(kind, "serving", name)["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in (names.NOTICED_AT, names.ACT_AFTER)}


def test_a_deployment_is_annotated_only_where_allowed_and_never_patched_otherwise(
    cluster: EmulatedCluster,
) -> None:
    seed(cluster)
    reaper_run(cluster, T0)
    assert marks(cluster) == {} and len(notices(cluster)) == 1  # the Event and the state alone
    patched = [p for m, p in cluster.mutations() if m == "PATCH" and p.endswith("/deployments/api")]
    assert patched == []  # scaled through /scale only: no patch of the object was even tried


def test_the_notice_annotations_say_when_and_come_off_once_used_up(cluster: EmulatedCluster) -> None:
    seed(cluster)
    reaper_run(cluster, T0, annotate=True)
    said = {names.NOTICED_AT: rfc3339(T0), names.ACT_AFTER: rfc3339(T0 + NOTICE)}
    assert marks(cluster) == said
    reaper_run(cluster, T0 + timedelta(hours=1), annotate=True)  # waiting: they stay as they are
    assert marks(cluster) == said
    acted = reaper_run(cluster, T0 + NOTICE + timedelta(minutes=5), annotate=True)
    assert acted.count(Outcome.APPLIED) == 1 and replicas(cluster) == 0
    assert marks(cluster) == {}


def test_a_dropped_notice_takes_its_annotations_off(cluster: EmulatedCluster) -> None:
    seed(cluster)
    reaper_run(cluster, T0, annotate=True)
    assert marks(cluster)
    reaper_run(cluster, T0 + timedelta(hours=1), idle=False, annotate=True)  # busy again
    assert marks(cluster) == {} and state(cluster).notices == {}


def test_a_kind_the_reaper_patches_anyway_is_annotated_without_being_allowed_more(
    cluster: EmulatedCluster,
) -> None:
    cluster.declare("Rollout")
    seed(cluster, *controllers.argo_rollout("serving", "canary", LONG_AGO))
    rule = {**POLICY["rules"][0], "match": {"findings": ["idle_endpoint"], "kinds": ["Rollout"]}}
    policy = {**POLICY, "rules": [rule]}
    reaper_run(cluster, T0, of=("Rollout", "canary"), policy=policy)
    assert marks(cluster, "Rollout", "canary") == {
        names.NOTICED_AT: rfc3339(T0),
        names.ACT_AFTER: rfc3339(T0 + NOTICE),
    }
    reaper_run(cluster, T0 + NOTICE + timedelta(minutes=5), of=("Rollout", "canary"), policy=policy)
    rollout = cluster.obj("Rollout", "serving", "canary")
    assert rollout["spec"]["replicas"] == 0 and marks(cluster, "Rollout", "canary") == {}


def test_a_notice_shorter_than_the_run_interval_is_refused_before_anything_is_read(
    cluster: EmulatedCluster,
) -> None:
    rule = {"name": "idle-endpoints", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"}
    short = {**POLICY, "rules": [{**rule, "notice": "30m"}]}
    settings = RunSettings(
        policy=Policy.model_validate(short),
        mode=RunMode.APPLY,
        namespace="gpu-reaper",
        end=T0,
        run_interval=timedelta(hours=1),
    )
    with pytest.raises(
        BadInputError, match="rule idle-endpoints: notice 30m is shorter than the run interval 1h"
    ):
        run(settings, lambda w, t: pytest.fail("analysed"), lambda: pytest.fail("cluster read"))
