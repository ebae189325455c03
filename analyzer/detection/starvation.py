"""``dataloader_starvation``: an active workload whose GPUs wait on its input pipeline."""

from __future__ import annotations

from datetime import datetime, timedelta

from analyzer.detection.verdict import (
    base_evidence,
    change_in_owner,
    cpu_of,
    judged_numbers,
    rounded,
    time_sliced,
    workload_finding,
)
from analyzer.detection.views import WorkloadView
from common.model import Finding, FindingKind
from common.thresholds import Thresholds
from common.timeutil import format_duration

# Stalls between batches last seconds; a scrape sees them as stalled samples interleaved with busy
# ones. Stretches longer than this, stalled or busy, are pauses between runs, evaluation or
# checkpoints: a different time scale, not a GPU waiting on its input pipeline.
MAX_BATCH_PHASE = timedelta(minutes=5)


def dataloader_starvation(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """An active workload whose GPUs wait on its input pipeline.

    Rule (either pattern, with enough coverage, judged long enough):

    * ``bimodal`` — at least ``starvation_min_share`` of utilization samples at or below
      ``starvation_idle_percent`` AND at least as many above ``starvation_busy_percent``: the GPU
      alternates between computing and waiting for the next batch. Shares come from the exporter's
      sub-second sample histogram where every GPU has one (it sees stalls a 15-60 s scrape averages
      away), from the scraped samples (counted by the TSDB) otherwise; then stalled and busy
      stretches must both last under ``MAX_BATCH_PHASE`` (mean): long idle gaps between runs are not
      batch stalls.
    * ``cpu_bound`` — mean between ``starvation_middling_min_percent`` and ``..._max_percent``, flat
      (on every GPU the highest quantile lies within half of ``starvation_flat_spread_percent``
      points of the median, so start-up, checkpoint or evaluation zeros do not break it), while a
      pod uses at least ``cpu_saturation_ratio`` of its CPU limit (of its request when it has no
      limit) or is CFS-throttled in at least ``cpu_throttling_ratio`` of its periods.

    Evidence: ``pattern``, ``stalled_share``, ``busy_share``, ``shares_from``, ``stall_seconds``,
    ``busy_seconds``, ``cpu_saturation``, ``cpu_saturation_of``, ``cpu_throttled_ratio``, plus
    the utilization numbers and ``util_interval_seconds``, the scrape interval of the readings they
    come from. The recommendation says which sampling each number it quotes comes from: histogram
    shares count sub-second samples, which a scraped reading's peak need not reach.
    """
    del now
    if time_sliced(w):
        return None  # a pod's SM share on a time-sliced GPU also waits on its neighbours' kernels
    found = judged_numbers(w, t)
    if found is None:
        return None
    judged, n = found
    if n.max <= t.idle_percent:
        return None

    shares = [d.shares for d in w.devices if d.shares is not None]
    pooled = None
    if len(shares) == len(w.devices):
        source = "histogram" if all(s.source == "histogram" for s in shares) else "samples"
        picked = [s for s in shares if s.source == source]
        if len(picked) == len(shares):
            weight = sum(s.weight for s in picked)
            if weight > 0:
                pooled = (
                    sum(s.stalled * s.weight for s in picked) / weight,
                    sum(s.busy * s.weight for s in picked) / weight,
                    source,
                )
    phases = [d.phases for d in w.devices if d.phases is not None]
    stall_s = max((p.stalled_s for p in phases), default=None)
    busy_s = max((p.busy_s for p in phases), default=None)
    batch_scale = pooled is not None and (
        pooled[2] == "histogram"
        or (
            stall_s is not None
            and busy_s is not None
            and max(stall_s, busy_s) <= MAX_BATCH_PHASE.total_seconds()
        )
    )
    bimodal = pooled is not None and min(pooled[0], pooled[1]) >= t.starvation_min_share and batch_scale

    cpu = cpu_of(w)
    middling = t.starvation_middling_min_percent <= n.mean <= t.starvation_middling_max_percent
    flat = n.widest_upper_spread <= t.starvation_flat_spread_percent / 2
    cpu_bound = cpu.pressed(t) and middling and flat
    if not (bimodal or cpu_bound):
        return None

    evidence = base_evidence(n, w.devices, judged.start)
    evidence["pattern"] = "bimodal" if bimodal else "cpu_bound"
    evidence["bimodal"] = bimodal
    evidence["cpu_bound"] = cpu_bound
    if pooled is not None:
        evidence |= {
            "stalled_share": rounded(pooled[0]),
            "busy_share": rounded(pooled[1]),
            "shares_from": pooled[2],
        }
    evidence |= cpu.evidence()
    if stall_s is not None and busy_s is not None:
        evidence |= {"stall_seconds": rounded(stall_s), "busy_seconds": rounded(busy_s)}
    interval = max((d.interval_s for d in w.devices if d.interval_s), default=None)
    if interval is not None:
        evidence["util_interval_seconds"] = rounded(interval)
    # The readings the mean and peak come from, one per scrape: not the sub-second samples a
    # histogram counts, which see the stalls those readings fall between.
    readings = (
        f"the readings scraped every {format_duration(timedelta(seconds=round(interval)))}"
        if interval is not None
        else "the scraped readings"
    )

    if bimodal and pooled is not None:
        strength = min(1.0, min(pooled[0], pooled[1]) / 0.4)
        split = (
            f"its GPUs sit at or below {t.starvation_idle_percent:g} % in {pooled[0]:.0%} and above "
            f"{t.starvation_busy_percent:g} % in {pooled[1]:.0%} of "
        )
        if pooled[2] == "histogram":
            what = (
                f"{split}the exporter's sub-second utilization samples, while {readings} peak at "
                f"{n.max:.0f} %: they wait for data between batches"
            )
        else:
            what = f"{split}{readings}: they wait for data between batches"
    else:
        strength = min(1.0, cpu.pressure(t))
        what = f"its GPUs hold a flat {n.mean:.0f} % (mean of {readings}) while the pod {cpu.text()}"
    cpu_first = "" if bimodal else "give the pod more CPU (raise or remove its limit, raise its request), "
    return workload_finding(
        FindingKind.DATALOADER_STARVATION,
        w,
        evidence,
        confidence=n.coverage * (0.5 + 0.5 * strength),
        wasted=n.wasted_gpu_hours,
        t=t,
        recommendation=(
            f"The input pipeline sets the pace of {w.ref.kind} {w.ref.namespace}/{w.ref.name}: {what}. "
            f"Usual fixes: {cpu_first}more DataLoader workers (num_workers), pin_memory=True, a larger "
            "prefetch_factor, decoding/augmenting on the GPU, and faster or local storage (cache the "
            f"dataset on node-local NVMe).{change_in_owner(w)}"
        ),
    )
