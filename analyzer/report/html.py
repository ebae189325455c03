"""The HTML report: one self-contained file (plots embedded as data URIs), rendered with jinja2."""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from jinja2 import Environment, FunctionLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from analyzer.report import plots, units
from analyzer.report.offenders import OffenderSeries
from analyzer.report.summaries import (
    by_cluster,
    cluster_prefix,
    detail,
    mean_util,
    no_findings_line,
    spans_clusters,
)
from common.model import (
    Finding,
    FindingKind,
    FindingsReport,
    LowUtilizationEvidence,
    UnknownEvidence,
    UtilQuantile,
)
from common.thresholds import Thresholds
from common.timeutil import format_duration, to_the_second

TEMPLATE = "report.html.j2"
# The banner over each cluster's findings, where a report spans clusters: no plot draws this colour.
CLUSTER_COLOUR = "#5b4a8b"


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
    caption: str = ""


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _workload_name(f: Finding) -> str:
    ref = f.workload
    return f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name


# The finding kind's own name first, everywhere: "unknown" is what the table and the reaper say too.
_CARD_LABELS = {FindingKind.UNKNOWN: "unknown (too little data to judge)"}

_LABELS = {
    "judged_hours": "judged for",
    "stall_seconds": "stall length",
    "busy_seconds": "busy length",
}


def _title(f: Finding, grouped: bool) -> str:
    """``Deployment serving/x``, after ``[prod-eu] `` where the report spans clusters."""
    return f"{cluster_prefix(f, grouped)}{f.workload.kind} {_workload_name(f)}"


def _label(key: str) -> str:
    """``memory_used_mib`` → ``memory used``: the value carries its unit."""
    if key in _LABELS:
        return _LABELS[key]
    if UtilQuantile.level_of(key) is not None:
        return key.removesuffix("_util_percent").replace("_", ".") + " utilization"
    for suffix in ("_percent", "_mib", "_hours", "_seconds"):
        key = key.removesuffix(suffix)
    return key.replace("_", " ")


def _evidence_rows(f: Finding) -> list[tuple[str, str]]:
    return [(_label(key), units.evidence_value(key, value)) for key, value in f.evidence.to_json().items()]


def _caption(o: OffenderSeries, t: Thresholds) -> str:
    """What the chart draws, so the reader knows which signal the verdict used."""
    f = o.finding
    if o.shares:
        where = (
            "the exporter's sub-second sample histogram"
            if o.shares[0].source == "histogram"
            else "the scraped utilization samples"
        )
        step = format_duration(f.window.duration / len(o.shares[0].timestamps))
        return f"Stalled and busy shares of {where}, per {step}, one panel per GPU."
    if f.kind is FindingKind.STALLED_JOB:
        return (
            "GPU utilization and board power (a share of its limit) of the job's GPUs side by side, "
            f"against {t.stalled_power_ratio:.0%} of the limit; the odd one out is framed."
        )
    line = {
        FindingKind.IDLE_ENDPOINT: f"the {t.idle_percent:g} % idle line",
        FindingKind.LOW_UTILIZATION: f"the {t.low_utilization_percent:g} % low-utilization line",
    }.get(f.kind, "the middling band")
    return f"GPU utilization against {line}, one panel per GPU."


def _gpus(f: Finding) -> str:
    """``2 GPUs``; nothing where no GPU is attributed (never "0 GPUs")."""
    return f"{f.gpu_count} GPU{'s' if f.gpu_count != 1 else ''}" if f.gpu_count else ""


def _subtitle(f: Finding) -> str:
    parts = [
        f.kind.value.replace("_", " "),
        _gpus(f),
        f"{f.wasted_gpu_hours:,.1f} GPU-h wasted",
        detail(f),
    ]
    return " · ".join(p for p in parts if p)


def _row(f: Finding, currency: str) -> dict[str, object]:
    sized = f.evidence.right_size if isinstance(f.evidence, LowUtilizationEvidence) else None
    return {
        "kind": f.kind.value,
        "kind_label": f.kind.value.replace("_", " "),
        # An unknown finding says why there was too little data, in the reaper's words too.
        "why": f.evidence.why if isinstance(f.evidence, UnknownEvidence) else "",
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
        "right_size": "" if sized is None else sized.line(currency),
        "evidence": _evidence_rows(f),
        "pods": ", ".join(f.pods),
    }


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
    summary cards (the reaper's plan), so the analyzer knows nothing of what they show.
    ``capabilities``: how the source was read (``Analysis.capabilities``), one part per ``; ``;
    ``gpu_count``: the GPUs judged, by default the report's own count."""
    counts = Counter(f.kind for f in report.findings)
    wasted = sum(f.wasted_gpu_hours for f in report.findings)
    costs = [f.estimated_cost for f in report.findings if f.estimated_cost is not None]
    waste_png = plots.waste_by_namespace(report.findings)
    # Over several clusters every finding shows under its cluster, offenders name theirs.
    grouped = spans_clusters(report.findings)
    offender_plots = [
        _Plot(
            title=_title(o.finding, grouped),
            subtitle=_subtitle(o.finding),
            kind=o.finding.kind.value,
            data_uri=_data_uri(plots.offender(o, thresholds)),
            caption=_caption(o, thresholds),
        )
        for o in offenders
    ]
    rows = [_row(f, currency) for f in report.findings]
    clusters = [
        {
            "name": group.name,
            "labelled": group.cluster is not None,
            "count": len(group.findings),
            "wasted": group.wasted,
            "cost": group.cost,
            "rows": [_row(f, currency) for f in group.findings],
        }
        for group in (by_cluster(report.findings) if grouped else ())
    ]
    cards = [
        {
            "kind": kind.value,
            "label": _CARD_LABELS.get(kind, kind.value.replace("_", " ")),
            "count": counts.get(kind, 0),
        }
        for kind in FindingKind
    ]
    return _ENV.get_template(TEMPLATE).render(
        title="GPU waste report",
        window_start=to_the_second(report.window.start),
        window_end=to_the_second(report.window.end),
        window_length=format_duration(report.window.duration),
        generated_at=to_the_second(report.generated_at),
        source=report.source or "unknown source",
        capabilities=[part for part in capabilities.split("; ") if part],
        gpu_count=report.gpus_judged if gpu_count is None else gpu_count,
        missing=report.missing_sources,
        no_findings=no_findings_line(report),
        cards=cards,
        wasted=wasted,
        cost=sum(costs) if costs else None,
        price=thresholds.price_per_gpu_hour,
        currency=currency,
        sections=sections,
        waste_plot=_data_uri(waste_png) if waste_png else None,
        offender_plots=offender_plots,
        rows=rows,
        clusters=clusters,
        cluster_colour=CLUSTER_COLOUR,
        colours={kind.value: colour for kind, colour in plots.KIND_COLOURS.items()},
    )
