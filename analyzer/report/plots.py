"""Static plots for the HTML report, drawn with matplotlib's object API on the Agg canvas.

No pyplot: nothing global, no display needed, safe in a CronJob. Each function returns PNG bytes.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
from matplotlib.figure import Figure

from analyzer.pipeline import OffenderSeries
from common.model import Finding, FindingKind
from common.thresholds import Thresholds

KIND_COLOURS = {
    FindingKind.IDLE_ENDPOINT: "#d1495b",
    FindingKind.LOW_UTILIZATION: "#edae49",
    FindingKind.DATALOADER_STARVATION: "#00798c",
    FindingKind.UNKNOWN: "#8d99ae",
}
LINE_COLOURS = ("#30638e", "#d1495b", "#00798c", "#edae49", "#66a182", "#8d5a97", "#e07a5f", "#3d405b")
_DPI = 110


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


def waste_by_namespace(findings: Sequence[Finding]) -> bytes | None:
    """Horizontal bars of wasted GPU-hours per namespace, split by finding kind."""
    waste: dict[str, dict[FindingKind, float]] = defaultdict(lambda: defaultdict(float))
    for f in findings:
        if f.wasted_gpu_hours > 0:
            waste[f.workload.namespace or "(whole nodes)"][f.kind] += f.wasted_gpu_hours
    if not waste:
        return None
    order = sorted(waste, key=lambda ns: sum(waste[ns].values()))
    fig = Figure(figsize=(8.0, 0.55 * len(order) + 1.4))
    ax = fig.subplots()
    left = [0.0] * len(order)
    for kind in (FindingKind.IDLE_ENDPOINT, FindingKind.DATALOADER_STARVATION, FindingKind.LOW_UTILIZATION):
        widths = [waste[ns].get(kind, 0.0) for ns in order]
        if any(widths):
            ax.barh(order, widths, left=left, color=KIND_COLOURS[kind], label=kind.value.replace("_", " "))
            left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:,.1f}", va="center", fontsize=9, color="#333333")
    ax.set_xlabel("wasted GPU-hours in the window")
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, loc="lower right", fontsize=9)
    ax.margins(x=0.12)
    return _png(fig)


def utilization(series: OffenderSeries, thresholds: Thresholds) -> bytes:
    """One offender's GPUs over the window, with the idle and low-utilization lines."""
    f = series.finding
    fig = Figure(figsize=(6.4, 2.7))
    ax = fig.subplots()
    ax.axhspan(0, thresholds.idle_percent, color=KIND_COLOURS[FindingKind.IDLE_ENDPOINT], alpha=0.12, lw=0)
    ax.axhline(
        thresholds.low_utilization_percent,
        color=KIND_COLOURS[FindingKind.LOW_UTILIZATION],
        lw=1,
        ls="--",
        label=f"{thresholds.low_utilization_percent:g} % low-utilization line",
    )
    for i, line in enumerate(series.lines[: len(LINE_COLOURS)]):
        when = date2num([datetime.fromtimestamp(t, tz=UTC) for t in line.timestamps.tolist()])
        short = line.device_id.split("-")[-1][:8] if "/" not in line.device_id else line.device_id[-14:]
        ax.plot(when, line.percent, lw=1.1, color=LINE_COLOURS[i], label=f"{line.node} {short}")
    if not series.lines:
        ax.text(0.5, 0.5, "no samples", transform=ax.transAxes, ha="center", color="#666666")
    ax.set_ylim(-2, 102)
    ax.set_xlim(float(date2num(f.window.start)), float(date2num(f.window.end)))
    ax.set_ylabel("GPU utilization %")
    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    return _png(fig)
