"""The bill as a terminal table and as CSV (one row per group, then the fleet's unallocated rows)."""

from __future__ import annotations

import csv
from typing import TextIO

from analyzer.chargeback.model import ChargebackReport

CSV_FIELDS = (
    "group",
    "held_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unknown_gpu_hours",
    "cost",
    "idle_cost",
    "unallocated_gpu_hours",
    "unallocated_cost",
    "currency",
    "window_start",
    "window_end",
    "partial",
)


def _money(value: float | None, currency: str) -> str:
    return "-" if value is None else f"{value:,.2f} {currency}"


def render_chargeback_table(report: ChargebackReport, out: TextIO) -> None:
    w = report.window
    head = f"GPU chargeback by {report.by}, {w.start.isoformat()} to {w.end.isoformat()} ({w.hours:.1f} h)"
    out.write(head + "\n")
    if report.partial:
        out.write(f"PARTIAL: {report.partial_reason}\n")
    header = ("group", "held h", "used h", "idle h", "unknown h", "cost", "idle cost")
    rows = [
        (
            g.group,
            f"{g.held_gpu_hours:,.1f}",
            f"{g.used_gpu_hours:,.1f}",
            f"{g.idle_gpu_hours:,.1f}",
            f"{g.unknown_gpu_hours:,.1f}",
            _money(g.cost, report.currency),
            _money(g.idle_cost, report.currency),
        )
        for g in report.groups
    ]
    f = report.fleet
    rows.append(
        (
            "(unallocated)",
            f"{f.unallocated_gpu_hours:,.1f}",
            "",
            "",
            "",
            _money(f.unallocated_cost, report.currency),
            "",
        )
    )
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for r in (header, *rows):
        out.write(
            "  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)) + "\n"
        )
    t = report.totals
    verdict = "within" if t.within_tolerance else "NOT within"
    out.write(
        f"held {t.held_gpu_hours:,.1f} h + unallocated {t.unallocated_gpu_hours:,.1f} h = "
        f"{t.held_gpu_hours + t.unallocated_gpu_hours:,.1f} h; fleet {t.fleet_gpu_hours:,.1f} GPU-hours "
        f"({t.relative_difference:.2%} apart, {verdict} {t.tolerance:.0%})\n"
    )
    for g in report.groups:
        for wl in g.top_idle_workloads[:3]:
            kind = f" [{wl.finding_kind.value}]" if wl.finding_kind else ""
            out.write(
                f"  {g.group}: {wl.workload.kind}/{wl.workload.name} idle {wl.idle_gpu_hours:,.1f} h "
                f"{_money(wl.idle_cost, report.currency)}{kind}\n"
            )


def render_chargeback_csv(report: ChargebackReport, out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    common = (report.currency, report.window.start.isoformat(), report.window.end.isoformat(), report.partial)
    for g in report.groups:
        writer.writerow(
            (
                g.group,
                round(g.held_gpu_hours, 4),
                round(g.used_gpu_hours, 4),
                round(g.idle_gpu_hours, 4),
                round(g.unknown_gpu_hours, 4),
                "" if g.cost is None else round(g.cost, 2),
                "" if g.idle_cost is None else round(g.idle_cost, 2),
                round(g.unallocated_gpu_hours, 4),
                "" if g.unallocated_cost is None else round(g.unallocated_cost, 2),
                *common,
            )
        )
    if not report.share_unallocated:
        for u in report.fleet.unallocated_by_model:
            writer.writerow(
                (
                    f"(unallocated: {u.model or 'unknown model'})",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    round(u.unallocated_gpu_hours, 4),
                    "" if u.cost is None else round(u.cost, 2),
                    *common,
                )
            )
