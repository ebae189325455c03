"""The terminal report: one rich table of findings and a summary line."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from analyzer.report.summaries import (
    by_cluster,
    detail,
    findings_line,
    mean_text,
    no_findings_line,
    spans_clusters,
    summary_line,
)
from common.model import Finding, FindingKind, FindingsReport
from common.timeutil import format_duration, to_the_second

KIND_STYLE = {
    FindingKind.IDLE_ENDPOINT: "bold red",
    FindingKind.LOW_UTILIZATION: "yellow",
    FindingKind.DATALOADER_STARVATION: "cyan",
    FindingKind.STALLED_JOB: "bold magenta",
    FindingKind.UNKNOWN: "dim",
}


def _name(f: Finding) -> str:
    ref = f.workload
    return f"{ref.namespace}/{ref.kind}/{ref.name}" if ref.namespace else f"{ref.kind}/{ref.name}"


def _numbers(f: Finding, priced: bool) -> list[Text | str]:
    row: list[Text | str] = [
        str(f.gpu_count) if f.gpu_count else "–",  # no GPU attributed: never "0"
        f"{f.wasted_gpu_hours:.1f}",
    ]
    if priced:
        row.append("–" if f.estimated_cost is None else f"{f.estimated_cost:,.2f}")
    row.append(f"{f.confidence:.2f}")
    return row


# The narrowest the detail column wraps to before the detail moves under the name instead.
_DETAIL_WIDTH = 30


def _wide(findings: Sequence[Finding], priced: bool, currency: str, detail_width: int | None = None) -> Table:
    """One column per number; the workload's name is never wrapped (the detail wraps instead)."""
    table = Table(show_lines=False, header_style="bold")
    table.add_column("kind", no_wrap=True)
    table.add_column("workload", no_wrap=True)
    table.add_column("GPUs", justify="right", no_wrap=True)
    table.add_column("mean", justify="right", no_wrap=True)
    table.add_column("detail", max_width=detail_width)
    table.add_column("wasted GPU-h", justify="right")
    if priced:
        table.add_column(f"cost ({currency})", justify="right")
    table.add_column("conf.", justify="right", no_wrap=True)
    for f in findings:
        gpus, *numbers = _numbers(f, priced)
        table.add_row(
            Text(f.kind.value, style=KIND_STYLE[f.kind]),
            Text(_name(f)),  # cluster-chosen names are text, never rich markup
            gpus,
            mean_text(f),
            Text(detail(f)),
            *numbers,
        )
    return table


def _stacked(findings: Sequence[Finding], priced: bool, currency: str) -> Group:
    """For a narrow terminal: each finding's name on a line of its own, the whole width for it
    (folded only where the name alone is wider), its kind, numbers and detail indented below."""
    lines: list[Text | Padding] = []
    for f in findings:
        gpus = f"{f.gpu_count} GPU{'s' if f.gpu_count != 1 else ''}" if f.gpu_count else "no GPU attributed"
        cost = f" ({f.estimated_cost:,.2f} {currency})" if priced and f.estimated_cost is not None else ""
        numbers = Text(f.kind.value, style=KIND_STYLE[f.kind])
        numbers.append(
            f" · {gpus} · mean {mean_text(f)} · {f.wasted_gpu_hours:.1f} GPU-h wasted{cost} · "
            f"conf. {f.confidence:.2f}"
        )
        lines += [
            Text(_name(f), style="bold", overflow="fold"),  # names are text, never rich markup
            Padding(numbers, (0, 0, 0, 2)),  # wrapped lines keep the indent
            Padding(Text(detail(f), style="dim"), (0, 0, 0, 2)),
        ]
    return Group(*lines)


def _table(findings: Sequence[Finding], priced: bool, currency: str, console: Console) -> Table | Group:
    """The widest layout the console holds: the name that says who wastes the GPU is never cut,
    the detail moves under it instead."""
    narrowest = _wide(findings, priced, currency, detail_width=_DETAIL_WIDTH)
    # Measured unbounded: a measure within the console's width is clamped to it.
    needed = console.measure(narrowest, options=console.options.update_width(1 << 16)).maximum
    if needed <= console.width:
        return _wide(findings, priced, currency)
    return _stacked(findings, priced, currency)


def _judged(report: FindingsReport) -> str:
    n = report.gpus_judged
    if n is None:
        return ""
    return f" · {n} GPU{'' if n == 1 else 's'} judged"


def _missing(report: FindingsReport, console: Console) -> None:
    """What the verdicts lack, before any of them: a reader must know what could not be seen."""
    for m in report.missing_sources:
        line = Text(f"⚠ no {m.what}", style="bold yellow")
        line.append(m.sentence().removeprefix(f"no {m.what}"))
        console.print(line)


def render_table(report: FindingsReport, console: Console, currency: str = "USD") -> None:
    window = report.window
    console.print(
        f"[bold]GPU findings[/bold] {to_the_second(window.start)} → {to_the_second(window.end)} "
        f"({format_duration(window.duration)}) from {escape(report.source or 'unknown source')}"
        + _judged(report)
    )
    _missing(report, console)
    if not report.findings:
        console.print(no_findings_line(report))
        return
    priced = any(f.estimated_cost is not None for f in report.findings)
    if not spans_clusters(report.findings):
        console.print(_table(report.findings, priced, currency, console))
        console.print(summary_line(report, currency))
        return
    # Several clusters: one table each, so same-named workloads of two clusters never read as one.
    # Cluster names are label values, user data: always Text, never rich markup.
    groups = by_cluster(report.findings)
    for group in groups:
        console.print()
        heading = f"cluster {group.name}" if group.cluster is not None else group.name
        console.print(Text(heading, style="bold underline"))
        console.print(_table(group.findings, priced, currency, console))
        console.print(Text(f"{group.name}: {findings_line(group.findings, currency)}"))
    console.print()
    console.print(Text(f"all clusters: {summary_line(report, currency)}", style="bold"))
