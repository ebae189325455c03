"""``stalled_job``: GPUs that read busy while they wait on one rank.

In data-parallel training (DDP, FSDP, DeepSpeed) every step ends in a collective. A rank that falls
behind (a synchronous checkpoint, a slow input pipeline or node, a dead process) leaves the others
spinning in the NCCL kernel: a kernel is resident the whole time, so NVML's utilization reads
100 %, while the board draws little more than an idle GPU holding a context. A rank that died
leaves them spinning until NCCL's watchdog ends the job (``TORCH_NCCL_ASYNC_ERROR_HANDLING``,
10 minutes by default in PyTorch and often raised), or forever. A single-GPU server that
spin-polls with nothing to do shows the same signature.

Rule, over each holder's judged span, from raw samples (read only for the candidates, see
``candidate``, whose waits the TSDB counted near a threshold first, see ``worth_reading``): a
sample *waits* when utilization is at least ``stalled_busy_percent`` while board power is at most
``stalled_power_ratio`` of the board's limit — the exporter's enforced (or set) limit where it
serves one, else the model's datasheet limit (``power_limits``). The GPUs' samples are put on
one clock first: each node's exporter is scraped at its own offset within the interval (and with
a few milliseconds of jitter), so raw samples of different nodes never share a timestamp. Time
is cut into buckets of the job's step, with the edges in the middle of the widest gap between the
samples' phases (a scrape's jitter never carries it across an edge); a GPU's state in a bucket is
its last sample's, and a GPU without a sample there (or without power near it) is unknown. A
moment (bucket) of the job waits when at least half of its GPUs wait; one where the unknown could
tip it either way is not judged and, like a gap, ends an episode. Its runs are the episodes. The
job is reported when its GPUs waited at least ``stalled_min_share`` of their judged time, or when
the last episode reaches the end of the span (its last bucket or the one before) and has lasted
``stalled_hung_after`` (hung: critical). Never judged:
GPUs without power readings or without a known limit, MIG instances and shares of time-sliced GPUs
(power is the whole board's), and a GPU whose clock-event reasons say it was power-capped or
throttled in a tenth of its busy samples (its low power is the cap's, not a wait).

The odd one out is the GPU the others waited on (the one not waiting) in most episodes: on the same
GPU in four of five episodes or more, the pattern is ``one_rank`` (synchronous checkpointing, rank
0 writing); otherwise ``varying_ranks`` (a straggler, an input problem).

Wasted GPU-hours: the waiting time of all its GPUs (each waiting sample counts one interval).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from math import ceil
from typing import Any

from analyzer.detection.power_limits import datasheet_limit
from analyzer.detection.verdict import (
    base_evidence,
    change_in_owner,
    judged_numbers,
    rounded,
    time_sliced,
    workload_finding,
)
from analyzer.detection.views import DeviceView, WorkloadView
from analyzer.sources import waits
from analyzer.sources.aggregates import DeviceKey, GpuReadings, Points
from analyzer.sources.waits import WaitCounts, WaitRule
from common.model import Finding, FindingKind, TimeWindow
from common.thresholds import Thresholds
from common.timeutil import format_duration

# A GPU capped or throttled in at least this share of its busy samples is not judged.
MAX_CAPPED_SHARE = 0.1
# The same GPU the laggard in this share of the episodes or more: the waits are on one rank.
ONE_RANK_SHARE = 0.8
# The TSDB's first look pairs each utilization sample with its board's power at the step of a
# subquery (the newest within the lookback), the rule with the nearest sample: the counts may
# differ by a sample here and there. A job within this factor of a threshold is read and judged.
FIRST_LOOK_MARGIN = 0.8


def candidate(w: WorkloadView, t: Thresholds) -> bool:
    """Whether the workload's raw readings are worth reading: judged and covered, whole GPUs, busy
    on average (a waiting job reads busy; a quiet one is left to the other detectors)."""
    if time_sliced(w) or any(d.info.mig_profile for d in w.devices):
        return False
    found = judged_numbers(w, t)
    if found is None:
        return False
    _, n = found
    return n.mean >= t.low_utilization_percent and n.q_high >= t.stalled_busy_percent


def wait_rule(workloads: Iterable[WorkloadView], t: Thresholds) -> WaitRule:
    """The rule's waits for the TSDB to count, with the datasheet limit of every GPU it knows."""
    sheet = {
        d.key.uuid: watts
        for w in workloads
        for d in w.devices
        if (watts := datasheet_limit(d.info.model)) is not None
    }
    return WaitRule(t.stalled_busy_percent, t.stalled_power_ratio, sheet)


def first_look(w: WorkloadView, t: Thresholds) -> list[tuple[DeviceKey, TimeWindow]]:
    """What the TSDB counts waits over for a candidate: each GPU's judged span, and its last
    ``stalled_hung_after`` (a hung job's wait runs to the end)."""
    hung = t.stalled_hung_after
    out = []
    for d in w.devices:
        out.append((d.key, d.span))
        out.append((d.key, TimeWindow(start=max(d.span.start, d.span.end - hung), end=d.span.end)))
    return out


def worth_reading(
    w: WorkloadView, counts: Mapping[tuple[DeviceKey, TimeWindow], WaitCounts], t: Thresholds
) -> bool:
    """Whether the TSDB's counts leave the candidate possibly stalled: its GPUs waited near
    ``stalled_min_share`` of their time, or near half of the last ``stalled_hung_after`` (a hung
    job's every moment has half of its GPUs or more waiting). Only then are its raw samples read."""

    def share(windows: list[tuple[DeviceKey, TimeWindow, float]]) -> float:
        got = [(counts.get((key, span), WaitCounts(0.0, 0.0)), weight) for key, span, weight in windows]
        total = sum(c.samples * weight for c, weight in got)
        return sum(c.waiting * weight for c, weight in got) / total if total > 0 else 0.0

    looks = first_look(w, t)
    weights = [d.interval_s or 1.0 for d in w.devices]
    whole = [(key, span, weights[i // 2]) for i, (key, span) in enumerate(looks) if i % 2 == 0]
    tail = [(key, span, weights[i // 2]) for i, (key, span) in enumerate(looks) if i % 2 == 1]
    if share(whole) >= FIRST_LOOK_MARGIN * t.stalled_min_share:
        return True
    return len(w.devices) > 1 and share(tail) >= FIRST_LOOK_MARGIN * 0.5


@dataclass(frozen=True)
class _Gpu:
    """One holder's samples on the job's clock: which wait, and the power they drew."""

    device: DeviceView
    interval_s: float
    # Each utilization sample in time order: True waits, False does not, None unknown (no power
    # reading near it).
    states: tuple[tuple[float, bool | None], ...]
    waiting: int  # its waiting samples
    samples: int
    watts_waiting: float
    watts_working: float | None
    limit_w: float
    limit_from: str
    power_metric: str


def _within(points: Points, start: float, end: float) -> Points:
    return tuple(p for p in points if start < p[0] <= end)


def _nearest(points: Points, times: list[float], at: float, reach: float) -> float | None:
    """The value of ``points`` nearest to ``at`` within ``reach`` seconds (None: none there)."""
    i = bisect_left(times, at)
    best: tuple[float, float] | None = None
    for j in (i - 1, i):
        if 0 <= j < len(points) and abs(points[j][0] - at) <= reach:
            gap = abs(points[j][0] - at)
            if best is None or gap < best[0]:
                best = (gap, points[j][1])
    return None if best is None else best[1]


def _gpu(d: DeviceView, r: GpuReadings, t: Thresholds) -> _Gpu | str:
    """The holder's waits, or why it cannot be judged."""
    start, end = d.span.start.timestamp(), d.span.end.timestamp()
    util, power = _within(r.util, start, end), _within(r.power, start, end)
    if not power:
        return "no power readings"
    limits = [v for _, v in _within(r.limit, start, end) if v > 0]
    if limits:
        limit, limit_from = sorted(limits)[len(limits) // 2], "exporter"
    else:
        sheet = datasheet_limit(d.info.model)
        if sheet is None:
            return (
                f"no power limit (none served, and {d.info.model or 'an unnamed model'} is not in the table)"
            )
        limit, limit_from = sheet, "datasheet"
    interval = d.interval_s or (util[-1][0] - util[0][0]) / max(1, len(util) - 1) if len(util) > 1 else 60.0
    reach = interval / 2
    power_t = [p[0] for p in power]
    events = _within(r.clock_events, start, end)
    events_t = [p[0] for p in events]
    states: list[tuple[float, bool | None]] = []
    busy = capped = 0
    watts_waiting: list[float] = []
    watts_working: list[float] = []
    for at, percent in util:
        if percent < t.stalled_busy_percent:
            states.append((at, False))
            continue
        busy += 1
        reasons = _nearest(events, events_t, at, reach) if events else None
        if reasons is not None and waits.capped(reasons):
            capped += 1
            states.append((at, False))
            continue
        watts = _nearest(power, power_t, at, reach)
        if watts is None:
            states.append((at, None))
            continue
        states.append((at, watts <= t.stalled_power_ratio * limit))
        (watts_waiting if states[-1][1] else watts_working).append(watts)
    if busy and capped >= MAX_CAPPED_SHARE * busy:
        return "power-capped or throttled (clock-event reasons)"
    return _Gpu(
        device=d,
        interval_s=interval,
        states=tuple(states),
        waiting=len(watts_waiting),
        samples=len(util),
        watts_waiting=sum(watts_waiting) / len(watts_waiting) if watts_waiting else 0.0,
        watts_working=sum(watts_working) / len(watts_working) if watts_working else None,
        limit_w=limit,
        limit_from=limit_from,
        power_metric=r.power_metric,
    )


@dataclass(frozen=True)
class _Episode:
    first: int  # the buckets of its first and last waiting moments
    last: int
    laggard: str | None  # the device the others waited on (None: every GPU waited)


def _origin(gpus: list[_Gpu], step: float) -> float:
    """Where the buckets' edges lie (seconds into the step): in the middle of the widest gap
    between the samples' phases, so each node's scrapes, jitter and all, fall well inside one."""
    phases = sorted({at % step for g in gpus for at, _ in g.states})
    if not phases:
        return 0.0
    gaps = [(b - a, a) for a, b in pairwise(phases)]
    gaps.append((phases[0] + step - phases[-1], phases[-1]))
    width, after = max(gaps)
    return (after + width / 2) % step


def _bucket(at: float, origin: float, step: float) -> int:
    """The bucket holding ``at``: bucket k is (origin + (k - 1) × step, origin + k × step]."""
    return ceil((at - origin) / step)


def _episodes(gpus: list[_Gpu], step: float, origin: float) -> list[_Episode]:
    """Runs of consecutive buckets in which at least half of the job's GPUs wait."""
    by_gpu: list[dict[int, bool | None]] = []
    for g in gpus:
        last: dict[int, bool | None] = {}
        for at, state in g.states:  # in time order: the last sample of a bucket stays
            last[_bucket(at, origin, step)] = state
        by_gpu.append(last)
    needed = (len(gpus) + 1) // 2
    runs: list[list[int]] = []
    previous: int | None = None  # the last bucket that waited
    for k in sorted({k for states in by_gpu for k in states}):
        seen = [states.get(k) for states in by_gpu]
        if sum(s is True for s in seen) < needed:
            continue  # not waiting, or unknown: either way it ends a run
        if previous is not None and k == previous + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
        previous = k
    out = []
    for run in runs:
        lo, hi = run[0], run[-1]
        # The laggard: the GPU waiting least in the episode (the one the others wait on).
        counts = {
            g.device.key.device_id: sum(states.get(k) is True for k in run)
            for g, states in zip(gpus, by_gpu, strict=True)
        }
        least = min(counts.values())
        lagging = [dev for dev, c in counts.items() if c == least]
        laggard = lagging[0] if len(gpus) > 1 and len(lagging) == 1 and least < len(run) else None
        out.append(_Episode(lo, hi, laggard))
    return out


def stalled_job(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """A job whose GPUs wait on one rank, or a server spin-polling.

    Rule: the module's (a sample waits at ``stalled_busy_percent`` or more and at most
    ``stalled_power_ratio`` of the board's limit; reported from ``stalled_min_share`` of the GPU
    time, or hung after ``stalled_hung_after`` of one wait to the end).
    Evidence: ``pattern``, ``hung``, ``severity``, ``waiting_share``, ``waiting_gpu_hours``,
    ``episodes``, ``episode_mean_minutes``, ``episode_max_minutes``, ``last_episode_minutes``,
    ``odd_one_out`` (with its pod and share of episodes), ``gpu_waiting_shares``,
    ``power_waiting_watts``, ``power_working_watts``, ``power_limit_watts``, ``power_limit_from``,
    ``power_metric``, ``signals``, plus the utilization numbers.
    Wasted GPU-hours: the waiting time of all its GPUs.
    """
    del now
    if not candidate(w, t) or any(d.readings is None for d in w.devices):
        return None
    found = judged_numbers(w, t)
    if found is None:
        return None
    judged, n = found
    gpus: list[_Gpu] = []
    for d in w.devices:
        assert d.readings is not None  # checked above
        g = _gpu(d, d.readings, t)
        if isinstance(g, str):
            return None  # one GPU unjudged: the job's waits cannot be told (docs/detectors.md)
        gpus.append(g)
    interval = max(g.interval_s for g in gpus)  # the job's step: its slowest GPU's interval
    origin = _origin(gpus, interval)
    episodes = _episodes(gpus, interval, origin)
    span_s = sum(g.samples * g.interval_s for g in gpus)
    waiting_s = sum(g.waiting * g.interval_s for g in gpus)
    share = waiting_s / span_s if span_s > 0 else 0.0
    end = _bucket(max(d.span.end.timestamp() for d in w.devices), origin, interval)
    last = episodes[-1] if episodes else None
    last_s = (last.last - last.first + 1) * interval if last is not None else 0.0
    hung = (
        last is not None
        and end - last.last <= 1  # it waits up to the end (one late or missing scrape aside)
        and last_s >= t.stalled_hung_after.total_seconds()
        and len(gpus) > 1
    )
    if share < t.stalled_min_share and not hung:
        return None

    laggards = Counter(e.laggard for e in episodes if e.laggard is not None)
    odd, odd_count = laggards.most_common(1)[0] if laggards else (None, 0)
    odd_share = odd_count / len(episodes) if episodes else 0.0
    if len(gpus) == 1:
        pattern = "spin_poll"
    elif hung:
        pattern = "hung"
    elif odd is not None and odd_share >= ONE_RANK_SHARE and len(episodes) >= 2:
        pattern = "one_rank"
    else:
        pattern = "varying_ranks"
    lengths = [(e.last - e.first + 1) * interval for e in episodes]
    evidence: dict[str, Any] = base_evidence(n, w.devices, judged.start)
    waiting_w = [g.watts_waiting for g in gpus if g.waiting]
    working_w = [g.watts_working for g in gpus if g.watts_working is not None]
    limits = {g.limit_from for g in gpus}
    evidence |= {
        "pattern": pattern,
        "hung": hung,
        "severity": "critical" if hung else "warning",
        "waiting_share": rounded(share),
        "waiting_gpu_hours": rounded(waiting_s / 3600.0),
        "episodes": len(episodes),
        "episode_mean_minutes": rounded(sum(lengths) / len(lengths) / 60.0) if lengths else 0.0,
        "episode_max_minutes": rounded(max(lengths) / 60.0) if lengths else 0.0,
        "gpu_waiting_shares": {
            g.device.key.device_id: rounded(g.waiting / g.samples if g.samples else 0.0) for g in gpus
        },
        "power_waiting_watts": rounded(sum(waiting_w) / len(waiting_w)) if waiting_w else None,
        "power_working_watts": rounded(sum(working_w) / len(working_w)) if working_w else None,
        "power_limit_watts": rounded(max(g.limit_w for g in gpus)),
        "power_limit_from": "exporter" if limits == {"exporter"} else "datasheet",
        "power_metric": ",".join(sorted({g.power_metric for g in gpus if g.power_metric})),
        "stalled_busy_percent": t.stalled_busy_percent,
        "stalled_power_ratio": t.stalled_power_ratio,
        "signals": ",".join(
            (
                "utilization",
                "power",
                "power limit" if limits == {"exporter"} else "datasheet power limit",
                *(
                    ("clock-event reasons",)
                    if any(d.readings and d.readings.clock_events for d in w.devices)
                    else ()
                ),
                *(("asymmetry between GPUs",) if len(gpus) > 1 else ()),
            )
        ),
    }
    if hung:
        evidence["last_episode_minutes"] = rounded(last_s / 60.0)
    if odd is not None and pattern != "spin_poll":
        evidence["odd_one_out"] = odd
        evidence["odd_one_out_share"] = rounded(odd_share)
        pod = next((g.device.key.pod for g in gpus if g.device.key.device_id == odd), "")
        if pod:
            evidence["odd_one_out_pod"] = pod
    wasted = sum(g.waiting * g.interval_s / 3600.0 for g in gpus)
    strength = 1.0 if hung else min(1.0, share / 0.5)
    return workload_finding(
        FindingKind.STALLED_JOB,
        w,
        evidence,
        confidence=n.coverage * (0.5 + 0.5 * strength),
        wasted=wasted,
        t=t,
        recommendation=_advice(w, pattern, share, len(gpus), episodes, lengths, odd, last_s, evidence, t),
    )


def _advice(
    w: WorkloadView,
    pattern: str,
    share: float,
    gpus: int,
    episodes: list[_Episode],
    lengths: list[float],
    odd: str | None,
    last_s: float,
    evidence: dict[str, Any],
    t: Thresholds,
) -> str:
    name = f"{w.ref.kind} {w.ref.namespace}/{w.ref.name}"
    watts = evidence.get("power_waiting_watts")
    limit = evidence["power_limit_watts"]
    drawn = f" at {watts:.0f} W of a {limit:.0f} W limit" if watts is not None else ""
    mean = format_duration(timedelta(seconds=round(sum(lengths) / len(lengths)))) if lengths else "0s"
    pod = evidence.get("odd_one_out_pod")
    laggard = f"pod {pod} ({odd})" if pod else (odd or "one rank")
    owner = change_in_owner(w)
    if pattern == "spin_poll":
        return (
            f"{name} reads busy but its GPU draws idle power{drawn} in {share:.0%} of its time: it "
            "spin-waits with nothing to do, so its utilization says nothing about its load. Use a "
            "blocking wait (cudaDeviceScheduleBlockingSync, a server's idle sleep), then judge it "
            f"on its requests; scale it down when they are few.{owner}"
        )
    if pattern == "hung":
        return (
            f"{name} is hung: its {gpus} GPUs have spun in a collective{drawn} for "
            f"{format_duration(timedelta(seconds=round(last_s)))} up to now, waiting on "
            f"{laggard} that never arrives. It will not finish: stop it and restart from its "
            "last checkpoint, and set a NCCL watchdog timeout (init_process_group(timeout=...), "
            f"TORCH_NCCL_ASYNC_ERROR_HANDLING) so a dead rank ends the job.{owner}"
        )
    what = (
        f"{name}'s {gpus} GPUs read busy but waited on one rank in {share:.0%} of their time "
        f"({len(episodes)} waits of {mean} on average{drawn})"
    )
    if pattern == "one_rank":
        return (
            f"{what}, each time on {laggard}: periodic waits on one rank look like synchronous "
            "checkpointing. Write checkpoints asynchronously (torch.distributed.checkpoint.async_save) "
            f"or sharded from every rank, or checkpoint less often.{owner}"
        )
    return (
        f"{what}, on varying ranks: a straggler or an input problem. Look for a slow node (thermal, "
        "a failing link), uneven batches, or a data loader that starves one rank; the per-GPU "
        f"waiting shares say which ranks keep the others waiting.{owner}"
    )
