"""Analyzer: reads DCGM series from Prometheus and turns them into findings about GPU waste.

The package's public surface, what the reaper (through ``reaper.analysis``) and the command line
use; everything else is the analyzer's own. Each name is imported from its module when first asked
for (PEP 562's module ``__getattr__``, built by ``common.surface``), so that importing one analyzer
module — or starting a command for ``--help`` — does not load them all (docs/architecture.md,
"Public surfaces" and "Start-up time").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.surface import lazy_surface

# name → the module that defines it
_SURFACE = {
    "Analysis": "analyzer.analysis",
    "ChargebackReport": "analyzer.chargeback.model",
    "CLUSTER_LABEL": "analyzer.sources.dcgm",
    "MetricsSource": "analyzer.sources.metrics_source",
    "PrometheusConfig": "analyzer.sources.prometheus_config",
    "PrometheusSource": "analyzer.sources.prometheus.source",
    "analyze": "analyzer.pipeline",
    "run_chargeback": "analyzer.chargeback.run",
    "render_chargeback_table": "analyzer.chargeback.render",
    "render_chargeback_csv": "analyzer.chargeback.render",
    "render_chargeback_html": "analyzer.report.chargeback_html",
    "analyze_in_detail": "analyzer.pipeline",
    "offender_series": "analyzer.report.offenders",
    "render_html": "analyzer.report.html",
    "render_table": "analyzer.report.table",
    "scope_report": "analyzer.scope",
}

__all__ = [
    "CLUSTER_LABEL",
    "Analysis",
    "ChargebackReport",
    "MetricsSource",
    "PrometheusConfig",
    "PrometheusSource",
    "analyze",
    "analyze_in_detail",
    "offender_series",
    "render_chargeback_csv",
    "render_chargeback_html",
    "render_chargeback_table",
    "render_html",
    "render_table",
    "run_chargeback",
    "scope_report",
]

if TYPE_CHECKING:  # what type checkers and editors see
    from analyzer.analysis import Analysis
    from analyzer.chargeback.model import ChargebackReport
    from analyzer.chargeback.render import render_chargeback_csv, render_chargeback_table
    from analyzer.chargeback.run import run_chargeback
    from analyzer.pipeline import analyze, analyze_in_detail
    from analyzer.report.chargeback_html import render_chargeback_html
    from analyzer.report.html import render_html
    from analyzer.report.offenders import offender_series
    from analyzer.report.table import render_table
    from analyzer.scope import scope_report
    from analyzer.sources.dcgm import CLUSTER_LABEL
    from analyzer.sources.metrics_source import MetricsSource
    from analyzer.sources.prometheus.source import PrometheusSource
    from analyzer.sources.prometheus_config import PrometheusConfig


__getattr__, __dir__ = lazy_surface(__name__, _SURFACE)
