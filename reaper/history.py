"""Confirmation streaks for a dry-run, rebuilt from history instead of read from the state ConfigMap.

An apply run counts a finding's consecutive runs in a ConfigMap it writes; a dry-run writes nothing,
so it would hold every destructive action back as ``awaiting_confirmation`` forever. The runs an
apply CronJob would have made are replayed instead: the metrics of the earlier windows are still in
Prometheus, so each earlier run is analysed and planned by the same code, as of its own time, and the
streaks it would have saved carry over to the next. The last replayed state is what this run's plan
reads, exactly as it would read the ConfigMap.

Replays look back only as far as a decision can depend on: ``consecutiveRuns - 1`` runs, or enough
runs for the oldest window to start before ``now - for`` (the longest ``for:`` of a destructive rule),
whichever is more. A streak longer than that decides the same way as one that is exactly that long.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from common.errors import BadInputError, DataUnavailableError
from common.model import FindingsReport, TimeWindow
from common.thresholds import Thresholds
from reaper.cluster import ClusterSnapshot
from reaper.planner import plan
from reaper.policy import Policy
from reaper.state import ReaperState

log = logging.getLogger(__name__)

# A bound on the analyses one dry-run makes (a 30-day ``for:`` on a 5-minute schedule would be 8,640).
MAX_REPLAYS = 72

FindingsSource = Callable[[TimeWindow, Thresholds], FindingsReport]


@dataclass(frozen=True)
class Replay:
    """What the replayed runs showed: their times (oldest first) and the streaks they leave."""

    times: tuple[datetime, ...]
    unavailable: tuple[datetime, ...]  # runs whose metrics could not be read: they confirmed nothing
    state: ReaperState


def replays_needed(policy: Policy, interval: timedelta) -> int:
    """How many earlier runs can change this run's decisions (see the module's docstring)."""
    longest_for = max((r.match.for_ for r in policy.rules if r.action.destructive), default=timedelta(0))
    by_count = policy.safety.consecutive_runs - 1
    by_duration = math.ceil(max(longest_for - policy.window, timedelta(0)) / interval)
    return min(max(by_count, by_duration), MAX_REPLAYS)


def replay(
    findings: FindingsSource,
    snapshot: ClusterSnapshot,
    policy: Policy,
    now: datetime,
    interval: timedelta,
) -> Replay:
    """The streaks an apply CronJob running every ``interval`` would have saved before ``now``.

    Each earlier run is planned against the cluster as it is now (the past cluster is not
    recorded), as of its own time: grace periods and ``exclude-until`` are judged then. A run whose
    metrics are unavailable confirms nothing, as an apply run that stopped on them would not.
    """
    count = replays_needed(policy, interval)
    times = tuple(now - interval * k for k in range(count, 0, -1))
    state = ReaperState()
    unavailable: list[datetime] = []
    for at in times:
        window = TimeWindow.ending(at, policy.window)
        try:
            found = findings(window, policy.thresholds)
        except DataUnavailableError as e:
            log.info("replaying the run at %s: metrics unavailable (%s); it confirms nothing", at, e)
            unavailable.append(at)
            continue
        except BadInputError as e:
            # This run's own window was analysed with the same inputs: what an earlier one refuses
            # is of its time (a namespace or cluster that held no GPU yet). It found nothing then.
            log.info("replaying the run at %s: %s; it found nothing", at, e)
            found = FindingsReport(window=window, generated_at=at)
        state = plan(found, replace(snapshot, state=state), policy, at).next_state
    return Replay(times=times, unavailable=tuple(unavailable), state=state)
