"""The reaper's one adapter to the analyzer: where a run's findings come from.

The analyzer over Prometheus (with the ``PrometheusConfig`` both command lines build), over any
other metrics source (the demo's simulated fleet), or a findings file. Each returns a
``FindingsSource`` for the runner; every data problem surfaces as a ``DataUnavailableError`` so
the run does nothing and exits 3; an unreadable findings file is bad input (exit 2). No other
reaper module imports the analyzer (an import-linter contract in pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

from markupsafe import Markup

from analyzer import CLUSTER_LABEL, MetricsSource, PrometheusConfig, analyze, scope_report
from common.errors import BadInputError
from common.model import FindingsReport, InvalidFindingsError, TimeWindow
from common.thresholds import Thresholds
from reaper.runner import FindingsSource

__all__ = [
    "PrometheusConfig",
    "file_source",
    "metrics_source",
    "prometheus_metrics",
    "prometheus_source",
    "write_html_report",
]


def prometheus_source(
    config: PrometheusConfig,
    util_scale: str = "auto",
    namespaces: Collection[str] = (),
    cluster: str | None = None,
    cluster_label: str = CLUSTER_LABEL,
) -> FindingsSource:
    """The analyzer over Prometheus; ``config`` comes from the same options ``gpu-analyzer`` takes.

    With a ``cluster``, only that cluster's series (by ``cluster_label``) are analysed: every query
    carries the label's value. A source whose series name no cluster (the cluster's own Prometheus)
    is analysed whole; one that holds others but not this one is refused by the analyzer (bad input,
    naming the clusters it holds)."""
    from analyzer import PrometheusSource

    def run(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        source = PrometheusSource(config, util_scale=util_scale, cluster_label=cluster_label)
        clusters = _only(cluster, source, window, thresholds)
        return analyze(source, window, thresholds, now=window.end, namespaces=namespaces, clusters=clusters)

    return run


def metrics_source(
    source: MetricsSource, namespaces: Collection[str] = (), cluster: str | None = None
) -> FindingsSource:
    """The analyzer over any metrics source: the demo hands its simulated fleet in here."""

    def run(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        clusters = _only(cluster, source, window, thresholds)
        return analyze(source, window, thresholds, now=window.end, namespaces=namespaces, clusters=clusters)

    return run


def _only(
    cluster: str | None, source: MetricsSource, window: TimeWindow, thresholds: Thresholds
) -> tuple[str, ...]:
    """The analysis restricted to the reaper's cluster, when one is configured (reaper.clusters)
    and the source's series name clusters at all; their findings then carry no cluster, and are
    the reaper's. Asking costs nothing more: the analysis reuses what the source found."""
    if cluster is None or not source.clusters(window, thresholds):
        return ()
    return (cluster,)


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
    except InvalidFindingsError as e:  # the right document, with a field that is wrong: name it
        raise BadInputError(f"{path}: {e}") from e
    except (ValueError, TypeError) as e:  # JSON and pydantic errors derive from ValueError
        raise BadInputError(
            f"{path}: not a findings document from `gpu-analyzer analyze --format json`: {e}"
        ) from e

    def run(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        del window, thresholds  # the file was analysed already; the planner checks how old it is
        return found

    return run


def prometheus_metrics(
    config: PrometheusConfig, util_scale: str = "auto", cluster_label: str = CLUSTER_LABEL
) -> MetricsSource:
    """Prometheus as a metrics source, for the report's plots of a ``gpu-reaper run``."""
    from analyzer import PrometheusSource

    return PrometheusSource(config, util_scale=util_scale, cluster_label=cluster_label)


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
        clusters = _only(cluster, source, found.window, thresholds)
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
