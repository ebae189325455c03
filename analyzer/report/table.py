"""The terminal report: one rich table of findings and a summary line."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from analyzer.report.summaries import detail, mean_text, summary_line
from common.model import FindingKind, FindingsReport
from common.timeutil import format_duration, to_the_second

KIND_STYLE = {
    FindingKind.IDLE_ENDPOINT: "bold red",
    FindingKind.LOW_UTILIZATION: "yellow",
    FindingKind.DATALOADER_STARVATION: "cyan",
    FindingKind.UNKNOWN: "dim",
}


def render_table(report: FindingsReport, console: Console, currency: str = "USD") -> None:
    window = report.window
    console.print(
        f"[bold]GPU findings[/bold] {to_the_second(window.start)} → {to_the_second(window.end)} "
        f"({format_duration(window.duration)}) from {escape(report.source or 'unknown source')}"
    )
    if not report.findings:
        console.print("No findings: every judged GPU was busy enough, with enough data to say so.")
        return
    priced = any(f.estimated_cost is not None for f in report.findings)
    table = Table(show_lines=False, header_style="bold")
    table.add_column("kind")
    table.add_column("workload")
    table.add_column("GPUs", justify="right")
    table.add_column("mean", justify="right")
    table.add_column("detail")
    table.add_column("wasted GPU-h", justify="right")
    if priced:
        table.add_column(f"cost ({currency})", justify="right")
    table.add_column("conf.", justify="right")
    for f in report.findings:
        ref = f.workload
        name = f"{ref.namespace}/{ref.kind}/{ref.name}" if ref.namespace else f"{ref.kind}/{ref.name}"
        row: list[Text | str] = [
            Text(f.kind.value, style=KIND_STYLE[f.kind]),
            Text(name),  # cluster-chosen names are text, never rich markup
            str(f.gpu_count),
            mean_text(f),
            Text(detail(f)),
            f"{f.wasted_gpu_hours:.1f}",
        ]
        if priced:
            row.append("–" if f.estimated_cost is None else f"{f.estimated_cost:,.2f}")
        row.append(f"{f.confidence:.2f}")
        table.add_row(*row)
    console.print(table)
    console.print(summary_line(report, currency))
