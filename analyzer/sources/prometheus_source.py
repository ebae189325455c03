"""The Prometheus-backed ``MetricsSource``, where callers have always imported it from.

The source lives in ``analyzer.sources.prometheus``, one module per query round (see its
``source`` module and docs/architecture.md, "Where is a query built?"). Tunables are read where
they are used: patch ``analyzer.sources.prometheus.spans.MAX_ROWS_PER_QUERY``, not a copy here."""

from __future__ import annotations

from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus.spans import PODS_PER_QUERY
from analyzer.sources.prometheus.spans import near_spans as _near_spans

__all__ = ["PODS_PER_QUERY", "PrometheusSource", "_near_spans"]
