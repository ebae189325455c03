"""The weekly digest (``gpu-reaper digest``): each owner route gets its namespaces' GPU week.

namespaces (for their Slack annotations) → the week's chargeback → routes → messages → Slack (or,
in a dry-run, the terminal). Every outside dependency comes in as an argument, as in a run. The
digest writes nothing to the cluster and takes no lease: two digests at once post twice, no worse.

Exit codes: 0 every message went out (or, dry-run, was printed); 1 a message did not go out (the
others still did); 2 bad input; 3 no GPU series, or the cluster unreadable. No message is sent
until every figure is in: a digest stops whole, never with some routes told and others not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from common.errors import DataUnavailableError
from common.model import TimeWindow
from reaper import names
from reaper.adapter_errors import ForbiddenError, KubeError, SlackError
from reaper.cluster import Namespace, namespace_from_object
from reaper.digest_message import Skipped, Week, digest_message, routes
from reaper.kube_api import KubeApi
from reaper.messages import Message
from reaper.policy import Policy
from reaper.runner import EXIT_ACTION_FAILED, EXIT_OK, Notifier

log = logging.getLogger(__name__)

WeekSource = Callable[[TimeWindow], Week]


@dataclass
class DigestReport:
    window: TimeWindow
    messages: list[Message] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    posted: int = 0
    failed: int = 0
    dry_run: bool = True

    @property
    def exit_code(self) -> int:
        return EXIT_ACTION_FAILED if self.failed else EXIT_OK

    def summary_line(self) -> str:
        sent = "would_post" if self.dry_run else "posted"
        shown = len(self.messages) if self.dry_run else self.posted
        return (
            f"gpu-reaper: digest routes={len(self.messages)} {sent}={shown} "
            f"skipped={len(self.skipped)} failed={self.failed}"
        )


def read_namespaces(kube: KubeApi) -> dict[str, Namespace]:
    """Every Namespace, for its ``gpu-reaper/slack-channel``. One the digest may not list leaves the
    annotations unread (said once): each week then goes by the policy's routes alone."""
    try:
        objs = kube.list_objects("Namespace")
    except ForbiddenError as e:
        log.warning(
            "not allowed to list namespaces (%s): their %s annotations are not honoured this digest",
            e,
            names.SLACK_CHANNEL,
        )
        return {}
    except KubeError as e:
        raise DataUnavailableError(f"cannot read the cluster's namespaces: {e}") from e
    return {ns.name: ns for ns in map(namespace_from_object, objs)}


def run_digest(
    policy: Policy,
    window: TimeWindow,
    week_source: WeekSource,
    kube: KubeApi,
    notifier: Notifier | None,
    *,
    dry_run: bool,
    cluster: str | None = None,
) -> DigestReport:
    """Build the week's messages and post them (``dry_run``: build them only).

    ``notifier`` None with ``dry_run`` False is the caller's to refuse (nothing to post with)."""
    namespaces = read_namespaces(kube)
    week = week_source(window)
    report = DigestReport(window=week.window, dry_run=dry_run)
    if week.partial_reason:
        log.warning("partial week: %s", week.partial_reason)
    single = notifier is not None and notifier.webhook_mode
    the_routes, report.skipped = routes(week, namespaces, policy, single=single)
    for s in report.skipped:
        log.warning("namespace %s: its week is not posted: %s", s.namespace, s.reason)
    if not the_routes:
        held = sum(w.held_gpu_hours for w in week.namespaces)
        log.warning(
            "no digest to post: %s",
            "no namespace held a GPU in the window"
            if held <= 0
            else "no namespace that held GPUs has a channel the digest may post to",
        )
    report.messages = [digest_message(r, week, cluster) for r in the_routes]
    if dry_run or notifier is None:
        return report
    for message in report.messages:
        try:
            notifier.send(message)
            report.posted += 1
        except SlackError as e:
            # Never to another channel: the figures are this route's owners'. Counted, and the rest go on.
            report.failed += 1
            log.error("slack: the digest for %s was not posted: %s", message.channel or "the webhook", e)
    return report
