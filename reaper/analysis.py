"""The reaper's one adapter to the analyzer: where a run's findings come from.

The analyzer over Prometheus (with the ``PrometheusConfig`` both command lines build), over any
other metrics source (the demo's simulated fleet), or a findings file. Each returns a
``FindingsSource`` for the runner; every data problem surfaces as a ``DataUnavailableError`` so
the run does nothing and exits 3; an unreadable findings file is bad input (exit 2). No other
reaper module imports the analyzer (an import-linter contract in pyproject.toml).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

from analyzer import CLUSTER_LABEL, MetricsSource, PrometheusConfig, analyze, scope_report
from common.errors import BadInputError
from common.model import FindingsReport, InvalidFindingsError, TimeWindow
from common.thresholds import Pricing, Thresholds
from common.timeutil import parse_time
from reaper.digest_message import IdleWorkload, NamespaceWeek, Week
from reaper.runner import FindingsSource

if TYPE_CHECKING:
    from analyzer import ChargebackReport

__all__ = [
    "PrometheusConfig",
    "file_source",
    "metrics_source",
    "prometheus_chargeback",
    "prometheus_metrics",
    "prometheus_source",
    "write_html_report",
]


def prometheus_source(
    config: PrometheusConfig,
    gpu_util_unit: str = "auto",
    namespaces: Collection[str] = (),
    cluster: str | None = None,
    cluster_label: str = CLUSTER_LABEL,
) -> FindingsSource:
    """The analyzer over Prometheus; ``config`` comes from the same options ``gpu-analyzer`` takes.

    With a ``cluster``, only that cluster's series (by ``cluster_label``) are analysed: every query
    carries the label's value. A source whose series do not name it (other clusters', or none at
    all: a Prometheus of one cluster needs no cluster configured) is refused by the analyzer (bad
    input, naming the clusters it holds)."""
    from analyzer import PrometheusSource

    def run(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        source = PrometheusSource(config, gpu_util_unit=gpu_util_unit, cluster_label=cluster_label)
        clusters = _only(cluster)
        return analyze(source, window, thresholds, now=window.end, namespaces=namespaces, clusters=clusters)

    return run


def metrics_source(
    source: MetricsSource, namespaces: Collection[str] = (), cluster: str | None = None
) -> FindingsSource:
    """The analyzer over any metrics source: the demo hands its simulated fleet in here."""

    def run(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        clusters = _only(cluster)
        return analyze(source, window, thresholds, now=window.end, namespaces=namespaces, clusters=clusters)

    return run


def _only(cluster: str | None) -> tuple[str, ...]:
    """The analysis restricted to the reaper's cluster, when one is configured (reaper.clusters): a
    name the source's series do not carry, whether they name other clusters or none, is refused by
    the analyzer (bad input naming the clusters there are), as ``gpu-analyzer analyze --cluster``
    refuses it: a mistyped name never acts on a whole Prometheus."""
    return () if cluster is None else (cluster,)


def file_source(path: Path, namespaces: Collection[str] = ()) -> FindingsSource:
    """Findings written earlier by ``gpu-analyzer analyze --format json``; staleness is the planner's call.

    The file is read and checked now, before any cluster call: a file that is missing or is not a
    findings document is bad input (exit 2), as a bad policy is.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise BadInputError(f"cannot read findings file {path}: {e.strerror or e}") from e
    try:
        found = scope_report(FindingsReport.from_json(text), namespaces)
        if namespaces:
            # The file counts the GPUs of its whole analysis, not of the scope applied now.
            found = found.model_copy(update={"gpus_judged": None})
    except InvalidFindingsError as e:  # the right document, with a field that is wrong: name it
        raise BadInputError(f"{path}: {e}") from e
    except OverflowError as e:  # a time that parses but falls outside the calendar once in UTC
        raise BadInputError(f"{path}: {out_of_range(text) or 'a time out of range'}") from e
    except (ValueError, TypeError) as e:  # JSON and pydantic errors derive from ValueError
        raise BadInputError(
            f"{path}: not a findings document from `gpu-analyzer analyze --format json`: {e}"
        ) from e

    def run(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        del window, thresholds  # the file was analysed already; the planner checks how old it is
        return found

    return run


def out_of_range(text: str) -> str | None:
    """Where a findings document holds a time that reads as a date but not as a UTC one (before year
    1 or after 9999 once its offset is applied), as ``window.start '0001-01-01T00:00:00+01:00' …``."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    for where, value in _strings(doc, ""):
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            continue  # not a time at all: the model names it if it is wrong
        try:
            parse_time(value)
        except ValueError as e:
            return f"{where}: {e}"
    return None


def _strings(doc: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(doc, str):
        yield where, doc
    elif isinstance(doc, dict):
        for key, value in doc.items():
            yield from _strings(value, f"{where}.{key}" if where else str(key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _strings(value, f"{where}[{i}]")


def prometheus_metrics(
    config: PrometheusConfig, gpu_util_unit: str = "auto", cluster_label: str = CLUSTER_LABEL
) -> MetricsSource:
    """Prometheus as a metrics source, for the report's plots of a ``gpu-reaper run``."""
    from analyzer import PrometheusSource

    return PrometheusSource(config, gpu_util_unit=gpu_util_unit, cluster_label=cluster_label)


def prometheus_chargeback(
    config: PrometheusConfig,
    window: TimeWindow,
    pricing: Pricing,
    idle_percent: float,
    now: datetime,
    gpu_util_unit: str = "auto",
    cluster_label: str = CLUSTER_LABEL,
) -> Week:
    """The analyzer's chargeback by namespace over ``window`` (``gpu-analyzer chargeback --by
    namespace``, the same figures), as the weekly digest reads it. No GPU series at all is a
    ``DataUnavailableError`` (exit 3), never a week of zeros; a price naming a model no GPU has is
    bad input (exit 2)."""
    from analyzer import run_chargeback

    report = run_chargeback(
        config,
        window,
        "namespace",
        pricing,
        idle_percent,
        now,
        gpu_util_unit=gpu_util_unit,
        cluster_label=cluster_label,
    )
    return week_of(report)


def week_of(report: ChargebackReport) -> Week:
    """A chargeback by namespace, in the digest's terms."""
    return Week(
        window=report.window,
        currency=report.currency,
        namespaces=tuple(
            NamespaceWeek(
                namespace=g.group,
                held_gpu_hours=g.held_gpu_hours,
                used_gpu_hours=g.used_gpu_hours,
                idle_gpu_hours=g.idle_gpu_hours,
                unknown_gpu_hours=g.unknown_gpu_hours,
                cost=g.cost,
                idle_cost=g.idle_cost,
                top_idle=tuple(
                    IdleWorkload(w.workload, w.idle_gpu_hours, w.idle_cost, w.held_gpu_hours, w.finding_kind)
                    for w in g.top_idle_workloads
                ),
            )
            for g in report.groups
        ),
        fleet_gpu_hours=report.fleet.fleet_gpu_hours,
        unallocated_gpu_hours=report.fleet.unallocated_gpu_hours,
        unallocated_cost=report.fleet.unallocated_cost,
        partial_reason=report.partial_reason if report.partial else None,
    )


def write_html_report(
    output: Path,
    found: FindingsReport,
    thresholds: Thresholds,
    *,
    source: MetricsSource | None = None,
    sections: Sequence[Markup] = (),
    currency: str = "USD",
    cluster: str | None = None,
) -> None:
    """The analyzer's HTML report of ``found`` with the reaper's ``sections`` (its plan) in it.

    With the metrics ``source`` the run analysed, the report has the analyzer's plots (the analysis
    runs again, in detail, of the run's ``cluster`` alone); without one (a findings file) it has the
    findings alone.
    """
    from analyzer import analyze_in_detail, offender_series, render_html

    if source is not None:
        clusters = _only(cluster)
        result = analyze_in_detail(source, found.window, thresholds, now=found.window.end, clusters=clusters)
        offenders = offender_series(source, result, top=6, thresholds=thresholds)
        html = render_html(
            result.report,
            thresholds,
            offenders,
            capabilities=result.capabilities,
            gpu_count=result.gpu_count,
            sections=sections,
            currency=currency,
        )
    else:
        html = render_html(found, thresholds, sections=sections, currency=currency)
    try:
        output.write_text(html, encoding="utf-8")
    except OSError as e:
        raise BadInputError(f"cannot write the HTML report to {output}: {e.strerror}") from e
