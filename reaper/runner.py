"""One reaper run: findings → lease → snapshot → plan → execute → notify → metrics → summary line.

Every outside dependency (findings, cluster, Slack, clocks) comes in as an argument, so the CLI,
the demo and the tests drive the same sequence.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol

from common.errors import BadInputError, DataUnavailableError
from common.model import FindingsReport, TimeWindow
from common.thresholds import Thresholds
from common.timeutil import format_duration, rfc3339
from reaper import names
from reaper.adapter_errors import KubeError, LeaseHeldError, SlackError
from reaper.clock import utc_now
from reaper.cluster import read_snapshot
from reaper.clusters import split_by_cluster
from reaper.demand import PendingDemand
from reaper.executor import Executor
from reaper.history import FindingsSource, Replay, replay
from reaper.kube_api import KubeApi
from reaper.messages import Message, build_messages
from reaper.metrics import RunMetrics
from reaper.notice import shorter_than_runs
from reaper.outcomes import ActionResult, Outcome
from reaper.planner import Plan, plan, refused_channels
from reaper.policy import Action, Policy, RunMode

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ACTION_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_DATA_UNAVAILABLE = 3

__all__ = ["FindingsSource", "RunReport", "RunSettings", "run"]


class Notifier(Protocol):
    webhook_mode: bool

    def send(self, message: Message) -> None: ...


@dataclass(frozen=True)
class RunSettings:
    """Everything a run needs to know, validated once (CLI flags + env + policy)."""

    policy: Policy
    mode: RunMode
    namespace: str
    end: datetime | None = None  # analyse and plan as of this time (replays, tests); default: now
    lease_wait: timedelta = timedelta(0)
    identity: str | None = None
    # How often the CronJob runs. A dry-run replays the earlier runs at this interval to count its
    # confirmations (reaper.history); None where the source cannot analyse earlier windows (a file).
    run_interval: timedelta | None = None
    # The cluster this reaper acts on, where findings of several clusters come through one query view:
    # other clusters' findings are set aside (reaper.clusters). None: findings must name no cluster.
    cluster: str | None = None
    # The namespaces the run acts in (``--namespace``): the cluster is then read in each of them
    # rather than cluster-wide, as a reaper granted Roles there only must. Empty: every namespace.
    namespaces: tuple[str, ...] = ()
    # Put a notice's annotations on Deployments, StatefulSets and ReplicaSets too, which the reaper
    # otherwise writes through /scale alone (``--notice-annotations``; reaper.notice_marks).
    notice_annotations: bool = False


@dataclass
class RunReport:
    mode: RunMode
    exit_code: int = EXIT_OK
    found: FindingsReport | None = None  # what the metrics source said, even when nothing was planned
    plan: Plan | None = None
    results: list[ActionResult] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    slack_sent: int = 0
    slack_failures: int = 0
    duration_seconds: float = 0.0
    finished_at: float = 0.0  # unix seconds
    error: str | None = None
    # Why the run did nothing, as one word for the summary line (metrics_unavailable, ...).
    failure: str | None = None
    lease_held: bool = False
    replay: Replay | None = None  # the earlier runs a dry-run replayed for its confirmations
    cluster: str | None = None  # the cluster the run acts on, when one is configured
    # Findings set aside as another cluster's (or of no cluster, next to findings naming one); None
    # when no cluster is configured (then every finding is the run's, or the run is refused).
    other_clusters: int | None = None
    # The unmet GPU demand read for ``when: demand`` rules (reaper.demand); None where none has one.
    demand: PendingDemand | None = None

    @property
    def findings(self) -> int:
        return len(self.found.findings) if self.found else 0

    @property
    def planned(self) -> int:
        return len(self.plan.actions) if self.plan else 0

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    @property
    def skipped(self) -> int:
        return (len(self.plan.skips) if self.plan else 0) + self.count(Outcome.SKIPPED)

    def summary_line(self) -> str:
        """One line on stdout. A run that stopped says why, and shows no counts it never reached:
        "findings=0" after an unreachable Prometheus would read as a clean bill of health."""
        parts = [f"mode={self.mode.value}"]
        if self.failure is not None:
            parts.append(f"error={self.failure}")
        if self.found is not None:
            if self.found.gpus_judged is not None:  # how many GPUs the findings rest on
                parts.append(f"gpus={self.found.gpus_judged}")
            parts.append(f"findings={self.findings}")
            if self.other_clusters is not None:
                parts.append(f"other_clusters={self.other_clusters}")
        if self.failure is None:  # a stopped run acted on nothing: no plan counts to show
            parts.append(
                f"planned={self.planned} applied={self.count(Outcome.APPLIED)} skipped={self.skipped} "
                f"failed={self.count(Outcome.FAILED)}"
            )
            unsent = self.count(Outcome.NOT_SENT)
            if unsent:
                parts.append(f"not_sent={unsent}")
            if self.demand is not None:  # what when: demand rules acted against
                pending = self.demand.gpus if self.demand.unreadable is None else "unknown"
                parts.append(f"pending_gpus={pending}")
        return "gpu-reaper: " + " ".join(parts)

    def metrics(self) -> RunMetrics:
        actions: Counter[tuple[str, str]] = Counter()
        for r in self.results:
            actions[(r.action.action.value, r.outcome.value)] += 1
        if self.plan is not None:
            for s in self.plan.skips:
                actions[(s.action.value if s.action else "none", Outcome.SKIPPED.value)] += 1
        findings = Counter(f.kind.value for f in self.found.findings) if self.found else Counter[str]()
        reclaimed = sum(
            r.action.gpu_hours_per_day
            for r in self.results
            if r.outcome is Outcome.APPLIED and r.action.action.destructive
        )
        ok = self.exit_code == EXIT_OK and not self.lease_held
        return RunMetrics(
            actions=dict(actions),
            findings=dict(findings),
            reclaimed_gpu_hours=reclaimed,
            duration_seconds=self.duration_seconds,
            slack_failures=self.slack_failures,
            success_timestamp=self.finished_at if ok else None,
        )


def run(
    settings: RunSettings,
    findings: FindingsSource,
    cluster: Callable[[], KubeApi],
    notifier: Notifier | None = None,
    clock: Callable[[], datetime] = utc_now,
    wall_clock: Callable[[], datetime] = utc_now,
    sleep: Callable[[float], None] = time.sleep,
) -> RunReport:
    """One run. Raises ``BadInputError`` (before any call to the cluster) when the findings name
    clusters and no cluster is configured (``reaper.clusters``); every other problem is in the report."""
    started = time.monotonic()
    report = RunReport(mode=settings.mode, cluster=settings.cluster)
    try:
        _run(report, settings, findings, cluster, notifier, clock, wall_clock, sleep)
    finally:
        report.duration_seconds = time.monotonic() - started
        report.finished_at = wall_clock().timestamp()
    return report


def _run(
    report: RunReport,
    settings: RunSettings,
    findings: FindingsSource,
    cluster_factory: Callable[[], KubeApi],
    notifier: Notifier | None,
    clock: Callable[[], datetime],
    wall_clock: Callable[[], datetime],
    sleep: Callable[[float], None],
) -> None:
    policy = settings.policy
    if settings.run_interval is not None:
        # Before anything is read: a notice the runs cannot honour is a policy error (exit 2).
        too_short = shorter_than_runs(tuple((r.name, r.notice) for r in policy.rules), settings.run_interval)
        if too_short is not None:
            raise BadInputError(f"{too_short} (--run-interval)")
    now = settings.end or clock()
    window = TimeWindow.ending(now, policy.window)
    log.info("run as of %s (mode %s)", rfc3339(now), settings.mode.value)
    try:
        findings_report = findings(window, policy.thresholds)
    except DataUnavailableError as e:
        # Silence or garbage from the metrics source never means "all idle": do nothing.
        log.error("metrics unavailable, nothing will be done: %s", e)
        report.exit_code, report.error, report.failure = EXIT_DATA_UNAVAILABLE, str(e), "metrics_unavailable"
        return
    # The findings' own window: a findings file's is not the one asked for.
    log.info(
        "findings of %s → %s, %s",
        rfc3339(findings_report.window.start),
        rfc3339(findings_report.window.end),
        findings_report.source or "unnamed source",
    )
    for m in findings_report.missing_sources:  # once, for this run's window (replays are quiet)
        log.warning("%s", m.sentence())
    split = split_by_cluster(findings_report, settings.cluster)
    split.check()  # findings of clusters and no cluster configured: refused before any API call
    report.found = split.own
    age = now - findings_report.window.end
    if age > policy.safety.max_data_age:
        # Said before the cluster is asked anything: stale data is the reason, whatever the cluster.
        report.exit_code, report.failure = EXIT_DATA_UNAVAILABLE, "stale_findings"
        report.error = (
            f"the findings end at {rfc3339(findings_report.window.end)}, {format_duration(age)} before "
            f"{rfc3339(now)}: older than safety.maxDataAge ({format_duration(policy.safety.max_data_age)})"
        )
        log.error("stale findings, nothing will be done: %s", report.error)
        return
    if settings.cluster is None:
        log.info("%d findings", len(split.own.findings))
    else:
        report.other_clusters = split.others
        log.info(
            "%d findings of cluster %s; %d set aside%s",
            len(split.own.findings),
            settings.cluster,
            split.others,
            f" ({split.describe_others()})" if split.others else "",
        )
        if split.none_own:
            log.warning(
                "no finding is of cluster %s, all are of others (%s): is the cluster name right?",
                settings.cluster,
                split.describe_others(),
            )
    findings_report = split.own

    cluster = cluster_factory()
    executor = Executor(
        cluster,
        mode=settings.mode,
        namespace=settings.namespace,
        clock=lambda: now,
        wall_clock=wall_clock,
        sleep=sleep,
        identity=settings.identity,
        cluster=settings.cluster,
        notice_annotations=settings.notice_annotations,
    )
    try:
        with executor.lease(wait=settings.lease_wait.total_seconds()):
            try:
                on_demand = any(r.when == "demand" for r in policy.rules)
                snapshot = read_snapshot(
                    cluster,
                    settings.namespace,
                    policy.gpu_node_selector,
                    settings.namespaces,
                    demand_resources=policy.demand.resources if on_demand else None,
                )
            except KubeError as e:
                log.error("cannot read the cluster, nothing will be done: %s", e)
                report.exit_code, report.error = EXIT_DATA_UNAVAILABLE, str(e)
                report.failure = "cluster_unavailable"
                return
            report.demand = snapshot.demand
            if snapshot.demand is not None:
                log.info("GPU demand: %s", snapshot.demand.describe())
            for ns, value, why in refused_channels(snapshot.namespaces.values(), policy):
                log.warning(
                    "namespace %s: %r in %s is not posted to (%s); its owners hear on the policy's "
                    "channels instead",
                    ns,
                    value,
                    names.SLACK_CHANNEL,
                    why,
                )
            if not settings.mode.writes and settings.run_interval is not None:
                # Dry-run writes no state: the streaks come from the runs apply would have made.
                own = _own_findings(findings, settings.cluster)
                report.replay = replay(own, snapshot, policy, now, settings.run_interval)
                # The notices standing are the ones given for real: a replayed run gave none.
                standing = {"notices": snapshot.state.notices}
                snapshot = replace(snapshot, state=report.replay.state.model_copy(update=standing))
                log.info(
                    "confirmations from %d replayed runs every %s",
                    len(report.replay.times),
                    format_duration(settings.run_interval),
                )
            the_plan = plan(findings_report, snapshot, policy, now)
            report.plan = the_plan
            if the_plan.blocked:
                log.error("nothing will be done: %s", the_plan.blocked)
                report.exit_code, report.error = EXIT_DATA_UNAVAILABLE, the_plan.blocked
                report.failure = "plan_blocked"
                return
            _log_plan(the_plan)
            report.results = executor.execute(the_plan)
            next_state = executor.give_notices(the_plan, snapshot.state.notices)
            try:
                executor.save_state(next_state)
            except KubeError as e:
                # Streaks restart next run: actions are delayed, never hastened. A warning, not a failure.
                log.warning("could not save confirmation state: %s", e)
            if executor.mode.writes:
                executor.prune_record(policy.grace.after_restore)
    except LeaseHeldError as e:
        log.warning("%s; this run does nothing", e)
        report.lease_held, report.error, report.failure = True, str(e), "lease_held"
        return
    except KubeError as e:
        log.error("cannot use the coordination lease, nothing will be done: %s", e)
        report.exit_code, report.error = EXIT_DATA_UNAVAILABLE, str(e)
        report.failure = "cluster_unavailable"
        return

    report.messages = build_messages(
        the_plan,
        report.results,
        policy,
        mode=settings.mode,
        single=notifier is not None and notifier.webhook_mode,
        cluster=settings.cluster,
    )
    unsent = _notify(report, notifier) if notifier is not None else _no_slack(report)
    report.results = _unsent(report.results, unsent)
    if report.count(Outcome.FAILED):
        report.exit_code = EXIT_ACTION_FAILED


def _own_findings(findings: FindingsSource, cluster: str | None) -> FindingsSource:
    """``findings`` with only the reaper's cluster's findings left in (a replayed run refuses nothing:
    findings it cannot place are set aside, so they confirm nothing and can only delay an action)."""

    def own(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        return split_by_cluster(findings(window, thresholds), cluster).own

    return own


def _log_plan(p: Plan) -> None:
    for a in p.actions:
        flags = f" [{'; '.join(a.flags)}]" if a.flags else ""
        via = f" (GPUs held by {a.target.key()})" if a.root else ""
        serves = f" [pending_gpus={a.pending_gpus}: {a.demand}]" if a.pending_gpus is not None else ""
        log.info("plan: %s %s%s: %s%s%s", a.action.value, a.written.key(), via, a.reason, flags, serves)
    for s in p.skips:
        via = f" (GPUs held by {s.target.key()})" if s.root else ""
        log.info("skip: %s%s (%s): %s", (s.root or s.target).key(), via, s.reason.value, s.detail)


# Every channel's messages: a webhook's one message carries every notice.
_ALL_CHANNELS = "*"


def _notify(report: RunReport, notifier: Notifier) -> set[str | None]:
    """Send the messages; the channels whose message did not go out."""
    failed: set[str | None] = set()
    for message in report.messages:
        try:
            notifier.send(message)
            report.slack_sent += 1
        except SlackError as e:
            # Telling people is secondary to doing the right thing: count it, keep going.
            report.slack_failures += 1
            log.error("slack: %s", e)
            failed.add(_ALL_CHANNELS if notifier.webhook_mode else message.channel)
    return failed


def _no_slack(report: RunReport) -> set[str | None]:
    """Without Slack, an applying run's notices reach nobody: said once, and counted as not sent
    (a dry-run's are previews either way)."""
    notices = sum(
        1 for r in report.results if r.action.action is Action.NOTIFY and r.outcome is Outcome.APPLIED
    )
    if not notices:
        return set()
    log.warning(
        "Slack is not configured (no GPU_REAPER_SLACK_TOKEN or GPU_REAPER_SLACK_WEBHOOK_URL, or their "
        "_FILE forms): %d notice%s not sent; the owners hear nothing of them",
        notices,
        "s were" if notices != 1 else " was",
    )
    return {_ALL_CHANNELS}


def _unsent(results: list[ActionResult], channels: set[str | None]) -> list[ActionResult]:
    """``results`` with the applied notices routed to ``channels`` counted as not sent."""
    if not channels:
        return results
    return [
        replace(r, outcome=Outcome.NOT_SENT, detail="its Slack message was not sent")
        if r.action.action is Action.NOTIFY
        and r.outcome is Outcome.APPLIED
        and (_ALL_CHANNELS in channels or r.action.channel in channels)
        else r
        for r in results
    ]
