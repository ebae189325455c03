"""The terminal report: one rich table of findings and a summary line."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from analyzer.report.summaries import (
    by_cluster,
    detail,
    findings_line,
    mean_text,
    spans_clusters,
    summary_line,
)
from common.model import Finding, FindingKind, FindingsReport
from common.timeutil import format_duration, to_the_second

KIND_STYLE = {
    FindingKind.IDLE_ENDPOINT: "bold red",
    FindingKind.LOW_UTILIZATION: "yellow",
    FindingKind.DATALOADER_STARVATION: "cyan",
    FindingKind.UNKNOWN: "dim",
}


def _table(findings: Sequence[Finding], priced: bool, currency: str) -> Table:
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
    for f in findings:
        ref = f.workload
        name = f"{ref.namespace}/{ref.kind}/{ref.name}" if ref.namespace else f"{ref.kind}/{ref.name}"
        row: list[Text | str] = [
            Text(f.kind.value, style=KIND_STYLE[f.kind]),
            Text(name),  # cluster-chosen names are text, never rich markup
            str(f.gpu_count) if f.gpu_count else "–",  # no GPU attributed: never "0"
            mean_text(f),
            Text(detail(f)),
            f"{f.wasted_gpu_hours:.1f}",
        ]
        if priced:
            row.append("–" if f.estimated_cost is None else f"{f.estimated_cost:,.2f}")
        row.append(f"{f.confidence:.2f}")
        table.add_row(*row)
    return table


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
    if not spans_clusters(report.findings):
        console.print(_table(report.findings, priced, currency))
        console.print(summary_line(report, currency))
        return
    # Several clusters: one table each, so same-named workloads of two clusters never read as one.
    # Cluster names are label values, user data: always Text, never rich markup.
    groups = by_cluster(report.findings)
    for group in groups:
        console.print()
        heading = f"cluster {group.name}" if group.cluster is not None else group.name
        console.print(Text(heading, style="bold underline"))
        console.print(_table(group.findings, priced, currency))
        console.print(Text(f"{group.name}: {findings_line(group.findings, currency)}"))
    console.print()
    console.print(Text(f"all clusters: {summary_line(report, currency)}", style="bold"))
