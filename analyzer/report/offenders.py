"""The top offenders' raw signals for the report's plots: one more batch of raw pulls, after judging.

Detection reads raw samples only for the few jobs the stalled-job rule reads; these plots read them
for the few findings with the most waste (a stalled job's power too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analyzer.analysis import Analysis
from analyzer.detection.views import DeviceView
from analyzer.report.share_series import ShareLine, bin_middles, from_histogram, from_samples
from analyzer.sources.aggregates import GpuReadings
from analyzer.sources.metrics_source import MetricsSource
from common.model import DataloaderStarvationEvidence, Finding, FindingKind
from common.thresholds import Thresholds

__all__ = ["OffenderSeries", "PowerLine", "ShareLine", "UtilizationLine", "offender_series", "top_offenders"]


@dataclass(frozen=True)
class UtilizationLine:
    device_id: str
    node: str
    timestamps: np.ndarray
    percent: np.ndarray


@dataclass(frozen=True)
class PowerLine:
    """A GPU's board power as a percentage of its limit (the one its verdict used)."""

    device_id: str
    node: str
    timestamps: np.ndarray
    percent: np.ndarray


@dataclass(frozen=True)
class OffenderSeries:
    """One finding and its GPUs' signals over the window, for plots: utilization, for a bimodal
    starvation the stalled / busy shares its verdict rests on, for a stalled job each GPU's power."""

    finding: Finding
    lines: tuple[UtilizationLine, ...]
    shares: tuple[ShareLine, ...] = ()
    power: tuple[PowerLine, ...] = ()


def top_offenders(findings: Sequence[Finding], top: int) -> list[Finding]:
    """Actionable findings with the most wasted GPU-hours."""
    ranked = sorted(
        (f for f in findings if f.kind.actionable),
        key=lambda f: (-f.wasted_gpu_hours, f.workload.key()),
    )
    return ranked[:top]


def _bimodal(f: Finding) -> DataloaderStarvationEvidence | None:
    e = f.evidence
    return e if isinstance(e, DataloaderStarvationEvidence) and e.pattern == "bimodal" else None


def offender_series(
    source: MetricsSource, analysis: Analysis, top: int = 6, thresholds: Thresholds | None = None
) -> list[OffenderSeries]:
    """Raw signals of the top offenders' GPUs (one more batch of raw pulls): utilization, plus the
    sample histogram's counters for a bimodal starvation whose shares came from it. Of several
    clusters, each offender's signals come from its own cluster's source and analysis."""
    t = thresholds or Thresholds()
    chosen = top_offenders(analysis.report.findings, top)
    if not analysis.parts:
        return _offender_series(source, analysis, chosen, t)
    found = {
        id(s.finding): s
        for part in analysis.parts
        for s in _offender_series(
            part.source, part.analysis, [f for f in chosen if f.cluster == part.cluster], t
        )
    }
    return [found[id(f)] for f in chosen if id(f) in found]


def _offender_series(
    source: MetricsSource, analysis: Analysis, chosen: Sequence[Finding], t: Thresholds
) -> list[OffenderSeries]:
    devices: dict[str, tuple[DeviceView, ...]] = {v.ref.key(): v.devices for v in analysis.workloads}
    devices |= {f"/Node/{n.name}": n.devices for n in analysis.nodes}
    wanted = {f.workload.key(): devices.get(f.workload.key(), ()) for f in chosen}
    keys = sorted({d.key for devs in wanted.values() for d in devs})
    bucket_keys = sorted(
        {
            d.key
            for f in chosen
            if (e := _bimodal(f)) is not None and e.shares_from == "histogram"
            for d in wanted[f.workload.key()]
        }
    )
    samples = source.device_samples(analysis.snapshot, keys, bucket_keys) if keys else {}
    stalled = sorted(
        {d.key for f in chosen if f.kind is FindingKind.STALLED_JOB for d in wanted[f.workload.key()]}
    )
    readings = source.gpu_readings(analysis.snapshot, stalled) if stalled else {}
    bounds = analysis.snapshot.capabilities.histogram_le
    out = []
    for f in chosen:
        lines, shares = [], []
        evidence = _bimodal(f)
        for d in wanted[f.workload.key()]:
            raw = samples.get(d.key)
            if raw is None:
                continue
            if raw.values.size:
                lines.append(UtilizationLine(d.key.device_id, d.info.node, raw.timestamps, raw.values))
            if evidence is None:
                continue
            binned = (
                from_histogram(raw, bounds, f.window)
                if evidence.shares_from == "histogram"
                else from_samples(raw, t.starvation_idle_percent, t.starvation_busy_percent, f.window)
            )
            if binned is not None:
                source_name = evidence.shares_from or "samples"
                middles = bin_middles(f.window)
                shares.append(ShareLine(d.key.device_id, d.info.node, middles, *binned, source=source_name))
        power = [
            line
            for d in wanted[f.workload.key()]
            if (r := readings.get(d.key)) is not None and (line := _power_line(d, r, f)) is not None
        ]
        out.append(OffenderSeries(f, tuple(lines), tuple(shares), tuple(power)))
    return out


def _power_line(d: DeviceView, r: GpuReadings, f: Finding) -> PowerLine | None:
    """The GPU's power against its limit: the one it serves (median), else the verdict's."""
    served = sorted(v for _, v in r.limit if v > 0)
    limit = served[len(served) // 2] if served else getattr(f.evidence, "power_limit_watts", None)
    if not r.power or not limit:
        return None
    times = np.array([t for t, _ in r.power])
    watts = np.array([v for _, v in r.power])
    return PowerLine(d.key.device_id, d.info.node, times, watts / limit * 100.0)
