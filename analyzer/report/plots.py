"""Static plots for the HTML report, drawn with matplotlib's object API on the Agg canvas.

No pyplot: nothing global, no display needed, safe in a CronJob. Each function returns PNG bytes.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analyzer.report.offenders import OffenderSeries
from analyzer.report.summaries import cluster_name, spans_clusters
from common.model import DataloaderStarvationEvidence, Finding, FindingKind, StalledJobEvidence
from common.thresholds import Thresholds

KIND_COLOURS = {
    FindingKind.IDLE_ENDPOINT: "#d1495b",
    FindingKind.LOW_UTILIZATION: "#edae49",
    FindingKind.DATALOADER_STARVATION: "#00798c",
    FindingKind.STALLED_JOB: "#8d5a97",
    FindingKind.UNKNOWN: "#8d99ae",
}
LINE_COLOURS = ("#30638e", "#d1495b", "#00798c", "#edae49", "#66a182", "#8d5a97", "#e07a5f", "#3d405b")
_DPI = 110


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


def _plain(label: str) -> str:
    """A label drawn as written: a ``$`` would otherwise start matplotlib's mathtext."""
    return label.replace("$", r"\$")


def _namespace_label(f: Finding, grouped: bool) -> str:
    namespace = f.workload.namespace or "(whole nodes)"
    return f"{cluster_name(f.cluster)}/{namespace}" if grouped else namespace


def namespace_waste(findings: Sequence[Finding]) -> dict[str, dict[FindingKind, float]]:
    """Wasted GPU-hours per bar label and finding kind, the largest total last.

    Where the findings span clusters, each bar is one cluster's namespace (``cluster/namespace``):
    two clusters' namespaces of one name are two bars, never added together.
    """
    grouped = spans_clusters(findings)
    waste: dict[str, dict[FindingKind, float]] = defaultdict(lambda: defaultdict(float))
    for f in findings:
        if f.wasted_gpu_hours > 0:
            waste[_namespace_label(f, grouped)][f.kind] += f.wasted_gpu_hours
    return {
        label: dict(waste[label]) for label in sorted(waste, key=lambda label: sum(waste[label].values()))
    }


def waste_by_namespace(findings: Sequence[Finding]) -> bytes | None:
    """Horizontal bars of wasted GPU-hours per namespace (per cluster's namespace), split by finding kind."""
    waste = namespace_waste(findings)
    if not waste:
        return None
    order = list(waste)
    labels = [_plain(label) for label in order]  # cluster names are label values: any text at all
    fig = Figure(figsize=(8.0, 0.55 * len(order) + 1.4))
    ax = fig.subplots()
    left = [0.0] * len(order)
    for kind in (
        FindingKind.IDLE_ENDPOINT,
        FindingKind.STALLED_JOB,
        FindingKind.DATALOADER_STARVATION,
        FindingKind.LOW_UTILIZATION,
    ):
        widths = [waste[ns].get(kind, 0.0) for ns in order]
        if any(widths):
            ax.barh(labels, widths, left=left, color=KIND_COLOURS[kind], label=kind.value.replace("_", " "))
            left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:,.1f}", va="center", fontsize=9, color="#333333")
    ax.set_xlabel("wasted GPU-hours in the window")
    ax.spines[["top", "right"]].set_visible(False)
    # Above the axes, never inside: with one or two bars every corner of the axes is bar.
    ax.legend(frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, fontsize=9)
    ax.margins(x=0.12)
    return _png(fig)


STALLED_COLOUR = "#d1495b"
BUSY_COLOUR = "#00798c"
MAX_PANELS = 8


def _short_id(device_id: str) -> str:
    """``GPU-1a2b3c4d-…`` → ``1a2b3c4d``; a MIG instance keeps its ``/mig-N``."""
    uuid, _, mig = device_id.partition("/")
    short = uuid.split("-")[1][:8] if uuid.count("-") >= 1 and uuid.startswith("GPU-") else uuid[-8:]
    return f"{short}/{mig}" if mig else short


def _dates(timestamps: np.ndarray) -> np.ndarray:
    return np.asarray(date2num([datetime.fromtimestamp(t, tz=UTC) for t in timestamps.tolist()]))


def _panels(count: int, f: Finding) -> tuple[Figure, list[Axes]]:
    """One small panel per GPU (shared axes), so GPUs of one pod never hide behind each other."""
    shown = max(1, min(count, MAX_PANELS))
    cols = 1 if shown == 1 else 2
    rows = -(-shown // cols)
    fig = Figure(figsize=(6.4, 0.6 + (2.3 if rows == 1 else 1.45 * rows)))
    grid = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[shown:]:
        ax.set_visible(False)
    locator = AutoDateLocator(maxticks=5)
    for ax in axes[:shown]:
        ax.set_xlim(float(date2num(f.window.start)), float(date2num(f.window.end)))
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.spines[["top", "right"]].set_visible(False)
        ax.tick_params(labelsize=7)
    return fig, axes[:shown]


def _finish(fig: Figure, axes: list[Axes], ylabel: str, hidden: int, top: float = 100.0) -> bytes:
    axes[0].set_ylim(-top * 0.02, top * 1.02)
    fig.supylabel(ylabel, fontsize=8)
    handles, labels = axes[0].get_legend_handles_labels()
    if hidden:
        labels = [*labels, f"+{hidden} more GPU(s) not drawn"]
        handles = [*handles, Line2D([], [], lw=0)]
    fig.legend(handles, labels, frameon=False, fontsize=7, loc="lower center", ncol=3)
    fig.tight_layout(rect=(0, 0.07 if len(axes) > 2 else 0.1, 1, 1))
    return _png(fig)


def _util_reference(ax: Axes, f: Finding, t: Thresholds) -> None:
    """The line (or band) the verdict compared utilization with."""
    e = f.evidence
    if f.kind is FindingKind.IDLE_ENDPOINT:
        ax.axhline(
            t.idle_percent,
            color=KIND_COLOURS[f.kind],
            lw=1.5,
            ls="--",
            label=f"{t.idle_percent:g} % idle line",
        )
    elif f.kind is FindingKind.LOW_UTILIZATION:
        ax.axhline(
            t.low_utilization_percent,
            color=KIND_COLOURS[f.kind],
            lw=1.5,
            ls="--",
            label=f"{t.low_utilization_percent:g} % low-utilization line",
        )
    elif isinstance(e, DataloaderStarvationEvidence) and e.pattern == "cpu_bound":
        ax.axhspan(
            t.starvation_middling_min_percent,
            t.starvation_middling_max_percent,
            color=KIND_COLOURS[f.kind],
            alpha=0.12,
            lw=0,
            label="middling band (GPU waits on CPU)",
        )


def utilization(series: OffenderSeries, thresholds: Thresholds) -> bytes:
    """An offender's GPUs over the window, one panel each, with the line its verdict used."""
    f = series.finding
    fig, axes = _panels(len(series.lines), f)
    for ax, line in zip(axes, series.lines, strict=False):
        _util_reference(ax, f, thresholds)
        # Each GPU has a panel of its own: one colour, so the legend names every line.
        ax.plot(_dates(line.timestamps), line.percent, lw=1.0, color=LINE_COLOURS[0], label="GPU utilization")
        ax.set_title(f"{line.node} · GPU {_short_id(line.device_id)}", fontsize=8, loc="left")
    if not series.lines:
        _util_reference(axes[0], f, thresholds)
        axes[0].text(0.5, 0.5, "no samples", transform=axes[0].transAxes, ha="center", color="#666666")
    top = 100.0
    if f.kind is FindingKind.IDLE_ENDPOINT:
        # Everything lies at or below the idle line: zoom in, or line and samples merge at 0.
        peak = max(
            (float(np.nanmax(line.percent)) for line in series.lines if line.percent.size), default=0.0
        )
        top = min(100.0, max(10.0, 4 * thresholds.idle_percent, 1.5 * peak))
    return _finish(fig, axes, "GPU utilization %", max(0, len(series.lines) - MAX_PANELS), top)


def shares(series: OffenderSeries, thresholds: Thresholds) -> bytes:
    """A bimodal starvation: each GPU's stalled and busy shares of its samples, bin by bin."""
    f = series.finding
    fig, axes = _panels(len(series.shares), f)
    least = thresholds.starvation_min_share * 100
    for ax, line in zip(axes, series.shares, strict=False):
        when = _dates(line.timestamps)
        ax.axhline(least, color="#666666", lw=0.8, ls=":", label=f"{least:g} % share needed for each")
        ax.plot(
            when,
            line.stalled * 100,
            lw=1.3,
            color=STALLED_COLOUR,
            label=f"stalled (≤ {thresholds.starvation_idle_percent:g} %)",
        )
        ax.plot(
            when,
            line.busy * 100,
            lw=1.3,
            ls="--",
            color=BUSY_COLOUR,
            label=f"busy (> {thresholds.starvation_busy_percent:g} %)",
        )
        ax.set_title(f"{line.node} · GPU {_short_id(line.device_id)}", fontsize=8, loc="left")
    return _finish(fig, axes, "share of samples %", max(0, len(series.shares) - MAX_PANELS))


POWER_COLOUR = "#e07a5f"
ODD_COLOUR = KIND_COLOURS[FindingKind.STALLED_JOB]


def stalled(series: OffenderSeries, thresholds: Thresholds) -> bytes:
    """A stalled job's GPUs side by side on one time axis, one row each: utilization and board power
    (share of its limit), the power line the rule compared with, the odd one out framed."""
    f = series.finding
    e = f.evidence
    odd = e.odd_one_out if isinstance(e, StalledJobEvidence) else None
    power = {line.device_id: line for line in series.power}
    order = sorted(series.lines, key=lambda line: line.device_id != odd)  # the odd one always drawn
    drawn = sorted(order[:MAX_PANELS], key=lambda line: line.device_id)
    rows = max(1, len(drawn))
    fig = Figure(figsize=(6.4, 0.9 + 1.05 * rows))
    grid = fig.subplots(rows, 1, sharex=True, sharey=True, squeeze=False)
    axes = [row[0] for row in grid]
    locator = AutoDateLocator(maxticks=6)
    ratio = thresholds.stalled_power_ratio * 100
    for ax, line in zip(axes, drawn, strict=False):
        ax.set_xlim(float(date2num(f.window.start)), float(date2num(f.window.end)))
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        ax.tick_params(labelsize=7)
        ax.axhline(ratio, color="#666666", lw=0.8, ls=":", label=f"{ratio:g} % of the power limit")
        ax.plot(
            _dates(line.timestamps),
            line.percent,
            lw=1.0,
            color=LINE_COLOURS[0],
            label="GPU utilization",
            zorder=3,
        )
        if (watts := power.get(line.device_id)) is not None:
            ax.plot(
                _dates(watts.timestamps), watts.percent, lw=1.0, color=POWER_COLOUR, label="power, % of limit"
            )
        title = f"{line.node} · GPU {_short_id(line.device_id)}"
        if line.device_id == odd:
            # The GPU the others waited on: framed in the finding's colour, named in its title.
            ax.spines[:].set_color(ODD_COLOUR)
            ax.spines[:].set_linewidth(2.5)
            ax.set_title(
                f"{title} · odd one out (the others wait on it)", fontsize=8, loc="left", color=ODD_COLOUR
            )
        else:
            ax.spines[["top", "right"]].set_visible(False)
            ax.set_title(title, fontsize=8, loc="left")
    if not drawn:
        axes[0].text(0.5, 0.5, "no samples", transform=axes[0].transAxes, ha="center", color="#666666")
    return _finish(
        fig, axes, "% (utilization, power of limit)", max(0, len(series.lines) - MAX_PANELS), 105.0
    )


def offender(series: OffenderSeries, thresholds: Thresholds) -> bytes:
    """The chart of the signal the finding's verdict used."""
    if series.finding.kind is FindingKind.STALLED_JOB:
        return stalled(series, thresholds)
    return shares(series, thresholds) if series.shares else utilization(series, thresholds)
