"""The HTML report: one self-contained file (plots embedded as data URIs), rendered with jinja2."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from jinja2 import Environment, FunctionLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from analyzer.pipeline import OffenderSeries
from analyzer.report import plots
from analyzer.report.summaries import detail, mean_util
from common.model import Finding, FindingKind, FindingsReport
from common.thresholds import Thresholds
from common.timeutil import format_duration, rfc3339

TEMPLATE = "report.html.j2"


def _load(name: str) -> str:
    return resources.files("analyzer.report.templates").joinpath(name).read_text(encoding="utf-8")


_ENV = Environment(
    loader=FunctionLoader(_load),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass(frozen=True)
class _Plot:
    title: str
    subtitle: str
    kind: str
    data_uri: str


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _workload_name(f: Finding) -> str:
    ref = f.workload
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name


def _evidence_rows(f: Finding) -> list[tuple[str, str]]:
    rows = []
    for key, value in f.evidence.to_json().items():
        if isinstance(value, float):
            text = f"{value:,.4g}"
        elif value is None:
            text = "–"
        else:
            text = str(value)
        rows.append((key.replace("_", " "), text))
    return rows


def render_html(
    report: FindingsReport,
    thresholds: Thresholds,
    offenders: Sequence[OffenderSeries] = (),
    capabilities: str = "",
    gpu_count: int | None = None,
    sections: Sequence[Markup] = (),
    currency: str = "USD",
) -> str:
    """The whole report as one HTML document; ``sections``: escaped HTML a caller adds after the
    summary cards (the reaper's plan), so the analyzer knows nothing of what they show."""
    counts = Counter(f.kind for f in report.findings)
    wasted = sum(f.wasted_gpu_hours for f in report.findings)
    costs = [f.estimated_cost for f in report.findings if f.estimated_cost is not None]
    waste_png = plots.waste_by_namespace(report.findings)
    offender_plots = [
        _Plot(
            title=f"{o.finding.workload.kind} {_workload_name(o.finding)}",
            subtitle=(
                f"{o.finding.kind.value.replace('_', ' ')} · {o.finding.gpu_count} GPU(s) · "
                f"{o.finding.wasted_gpu_hours:,.1f} GPU-h wasted · {detail(o.finding)}"
            ),
            kind=o.finding.kind.value,
            data_uri=_data_uri(plots.utilization(o, thresholds)),
        )
        for o in offenders
    ]
    rows = [
        {
            "kind": f.kind.value,
            "kind_label": f.kind.value.replace("_", " "),
            "workload_kind": f.workload.kind,
            "name": _workload_name(f),
            "namespace": f.workload.namespace or "–",
            "gpus": f.gpu_count,
            "nodes": ", ".join(f.nodes),
            "mean": mean_util(f),
            "wasted": f.wasted_gpu_hours,
            "cost": f.estimated_cost,
            "confidence": f.confidence,
            "recommendation": f.recommendation,
            "evidence": _evidence_rows(f),
            "pods": ", ".join(f.pods),
        }
        for f in report.findings
    ]
    cards = [
        {"kind": kind.value, "label": kind.value.replace("_", " "), "count": counts.get(kind, 0)}
        for kind in FindingKind
    ]
    return _ENV.get_template(TEMPLATE).render(
        title="GPU waste report",
        window_start=rfc3339(report.window.start),
        window_end=rfc3339(report.window.end),
        window_length=format_duration(report.window.duration),
        generated_at=rfc3339(report.generated_at),
        source=report.source or "unknown source",
        capabilities=capabilities,
        gpu_count=gpu_count,
        cards=cards,
        wasted=wasted,
        cost=sum(costs) if costs else None,
        price=thresholds.price_per_gpu_hour,
        currency=currency,
        sections=sections,
        waste_plot=_data_uri(waste_png) if waste_png else None,
        offender_plots=offender_plots,
        rows=rows,
        colours={kind.value: colour for kind, colour in plots.KIND_COLOURS.items()},
    )
