"""The analyzer's own exceptions; CLIs map them to exit codes (2 bad input, 3 data source unavailable)."""

from __future__ import annotations


class AnalyzerError(Exception):
    """Base of every error the analyzer raises on purpose."""


class BadInputError(AnalyzerError):
    """The user's input (flags, policy thresholds, window) cannot be used. Exit code 2."""


class DataSourceError(AnalyzerError):
    """The metrics source cannot be trusted for this run. Exit code 3; never 'all idle' or 'all fine'."""


class SourceUnreachableError(DataSourceError):
    """Connection refused, DNS failure, TLS failure or timeout after retries."""


class BadResponseError(DataSourceError):
    """The source answered, but not with a well-formed Prometheus API response (HTML, garbage, 5xx)."""


class QueryError(DataSourceError):
    """The source rejected a query (PromQL error, too many samples, execution timeout)."""


class NoDataError(DataSourceError):
    """No GPU series at all in the window: nothing can be concluded from silence."""
