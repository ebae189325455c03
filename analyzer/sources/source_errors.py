"""Why a metrics source could not be trusted: each is a ``DataUnavailableError`` (exit code 3)."""

from __future__ import annotations

from common.errors import DataUnavailableError


class SourceUnreachableError(DataUnavailableError):
    """Connection refused, DNS failure, TLS failure or timeout after retries."""


class BadResponseError(DataUnavailableError):
    """The source answered, but not with a well-formed Prometheus API response (HTML, garbage, 5xx)."""


class QueryError(DataUnavailableError):
    """The source rejected a query (PromQL error, too many samples, execution timeout)."""


class NoDataError(DataUnavailableError):
    """No GPU series at all in the window: nothing can be concluded from silence."""
