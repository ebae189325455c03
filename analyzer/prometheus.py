"""The HTTP adapter for the Prometheus query API (Prometheus, Thanos, Mimir, VictoriaMetrics).

prometheus-api-client's ``PrometheusConnect`` owns the connection: our session, with bearer-token or
basic auth, TLS verification (or a CA bundle), a per-request timeout and urllib3 retries with
exponential backoff on connection errors, timeouts and 429/5xx answers. Its query helpers return
only ``data.result`` and report failures as text, so every call here goes through one ``_call`` on the
same session that reads the whole API envelope (status, ``errorType``, ``warnings``) and raises the
analyzer's own errors keyed on the HTTP status and the envelope's fields:

* ``SourceUnreachableError`` — connection refused, DNS, TLS, or timeouts after the retries;
* ``QueryError`` — the server rejected the query (400/422, or ``errorType`` timeout/execution);
* ``BadResponseError`` — anything else that is not a well-formed success: 5xx after the retries,
  HTML from a proxy, malformed JSON, an unexpected result type, or warnings (partial data).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from analyzer.errors import BadInputError, BadResponseError, QueryError, SourceUnreachableError

log = logging.getLogger(__name__)

_RETRY_STATUSES = (429, 500, 502, 503, 504)
# errorType values of the API envelope that mean "your query", not "my server".
_QUERY_ERROR_TYPES = frozenset({"bad_data", "execution", "timeout", "canceled", "422"})


@dataclass(frozen=True)
class PrometheusConfig:
    """How to reach the query API. Secrets never appear in ``repr`` or logs."""

    url: str
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    verify_tls: bool = True
    ca_file: str | None = None
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BadInputError(f"--prometheus-url {self.url!r}: expected http(s)://host[:port][/prefix]")
        if self.bearer_token is not None and self.basic_auth is not None:
            raise BadInputError("use either a bearer token or basic auth, not both")
        if self.timeout_s <= 0 or self.retries < 0 or self.backoff_s < 0:
            raise BadInputError("timeout must be positive; retries and backoff cannot be negative")

    @property
    def base_url(self) -> str:
        return self.url.rstrip("/")

    @property
    def display_url(self) -> str:
        """The URL without any user:password part."""
        parts = urlsplit(self.base_url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class VectorSample:
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class RangeSeries:
    labels: Mapping[str, str]
    timestamps: np.ndarray
    values: np.ndarray


@dataclass
class QueryStats:
    """What this client asked and received: the benchmark's and the logs' numbers."""

    requests: int = 0
    body_bytes: int = 0
    wire_bytes: int = 0


class PrometheusClient:
    """One method per API endpoint the analyzer uses; every answer checked in one place."""

    def __init__(self, config: PrometheusConfig, session: requests.Session | None = None) -> None:
        self.config = config
        self.session = session if session is not None else requests.Session()
        self.session.verify = config.ca_file if config.ca_file else config.verify_tls
        headers = {"Accept": "application/json"}
        if config.bearer_token is not None:
            headers["Authorization"] = f"Bearer {config.bearer_token}"
        self.session.headers.update(headers)
        self.stats = QueryStats()
        self.session.hooks["response"].append(self._count)
        retry = Retry(
            total=config.retries,
            connect=config.retries,
            read=config.retries,
            status=config.retries,
            backoff_factor=config.backoff_s,
            status_forcelist=_RETRY_STATUSES,
            # Queries are reads: POST is only used to fit long PromQL, so retrying it is safe.
            allowed_methods=frozenset({"GET", "POST"}),
            raise_on_status=False,
            respect_retry_after_header=True,
        )
        # PrometheusConnect mounts the retrying adapter on our session for this base URL.
        self.connect = PrometheusConnect(
            url=config.base_url,
            headers=headers,
            retry=retry,
            auth=config.basic_auth,
            session=self.session,
            timeout=config.timeout_s,
            method="POST",
        )
        if config.basic_auth is not None:
            self.session.auth = config.basic_auth

    def _count(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        body = len(response.content)
        self.stats.requests += 1
        self.stats.body_bytes += body
        wire = body
        if response.headers.get("Content-Encoding"):
            # urllib3 counts the compressed bytes it read; chunked answers may leave it at 0.
            tell = getattr(getattr(response, "raw", None), "tell", None)
            read = tell() if callable(tell) else 0
            if isinstance(read, int) and read > 0:
                wire = read
        self.stats.wire_bytes += wire

    def close(self) -> None:
        self.session.close()

    # --- endpoints ------------------------------------------------------------------------------

    def vector(self, promql: str, at: datetime) -> list[VectorSample]:
        """An instant query whose result is a vector (or a scalar, returned as one unlabelled sample)."""
        data = self._call("POST", "/api/v1/query", {"query": promql, "time": _ts(at)})
        kind, result = _result(data)
        if kind == "scalar":
            return [VectorSample({}, _value(result, promql))]
        if kind != "vector":
            raise BadResponseError(f"{self._where()}: expected a vector for {promql!r}, got {kind}")
        return [
            VectorSample(_labels(item, promql), _value(_field(item, "value", promql), promql))
            for item in result
        ]

    def matrix(self, promql: str, at: datetime) -> list[RangeSeries]:
        """An instant query over a range selector: the raw samples of each series."""
        data = self._call("POST", "/api/v1/query", {"query": promql, "time": _ts(at)})
        kind, result = _result(data)
        if kind != "matrix":
            raise BadResponseError(f"{self._where()}: expected a matrix for {promql!r}, got {kind}")
        return [_series(item, promql) for item in result]

    def query_range(self, promql: str, start: datetime, end: datetime, step_s: float) -> list[RangeSeries]:
        data = self._call(
            "POST",
            "/api/v1/query_range",
            {"query": promql, "start": _ts(start), "end": _ts(end), "step": f"{step_s:g}"},
        )
        kind, result = _result(data)
        if kind != "matrix":
            raise BadResponseError(f"{self._where()}: expected a matrix for {promql!r}, got {kind}")
        return [_series(item, promql) for item in result]

    def label_names(self, match: str, start: datetime, end: datetime) -> list[str]:
        data = self._call("GET", "/api/v1/labels", {"match[]": match, "start": _ts(start), "end": _ts(end)})
        return _strings(data, "/api/v1/labels")

    def label_values(self, label: str, match: str, start: datetime, end: datetime) -> list[str]:
        path = f"/api/v1/label/{label}/values"
        data = self._call("GET", path, {"match[]": match, "start": _ts(start), "end": _ts(end)})
        return _strings(data, path)

    # --- the one place that talks HTTP ----------------------------------------------------------

    def _where(self) -> str:
        return self.config.display_url

    def _call(self, method: str, path: str, params: Mapping[str, str]) -> Any:
        url = self.config.base_url + path
        what = params.get("query", path)
        try:
            if method == "POST":
                response = self.session.post(url, data=dict(params), timeout=self.config.timeout_s)
            else:
                response = self.session.get(url, params=dict(params), timeout=self.config.timeout_s)
        except requests.exceptions.SSLError as e:
            raise SourceUnreachableError(f"{self._where()}: TLS handshake failed: {e}") from e
        except requests.exceptions.Timeout as e:
            raise SourceUnreachableError(
                f"{self._where()}: no answer within {self.config.timeout_s:g}s "
                f"after {self.config.retries} retries ({what!r})"
            ) from e
        except requests.exceptions.ConnectionError as e:
            raise SourceUnreachableError(
                f"{self._where()}: cannot connect ({_root_cause(e)}) after {self.config.retries} retries"
            ) from e
        except requests.exceptions.RequestException as e:
            raise SourceUnreachableError(f"{self._where()}: request failed: {e}") from e

        body = _json_body(response)
        status = response.status_code
        if status == 200 and isinstance(body, dict) and body.get("status") == "success":
            warnings = body.get("warnings") or []
            if warnings:
                # Partial data (a Thanos store down, a Mimir shard timing out) can hide busy periods:
                # better no report than a report that calls a busy GPU idle.
                raise BadResponseError(
                    f"{self._where()}: answered with warnings (partial data?) for {what!r}: "
                    + "; ".join(str(w) for w in warnings)
                )
            if "data" not in body:
                raise BadResponseError(f"{self._where()}: success without data for {what!r}")
            return body["data"]

        error_type = str(body.get("errorType", "")) if isinstance(body, dict) else ""
        error = str(body.get("error", "")) if isinstance(body, dict) else ""
        detail = f"{error_type}: {error}" if error_type or error else _snippet(response)
        if status in (400, 422) or error_type in _QUERY_ERROR_TYPES:
            raise QueryError(f"{self._where()}: query rejected (HTTP {status}) {detail} — {what!r}")
        if status in (401, 403):
            raise BadResponseError(
                f"{self._where()}: HTTP {status}: credentials missing or refused "
                "(see --bearer-token-file / --basic-auth-user)"
            )
        if status == 404:
            raise BadResponseError(
                f"{self._where()}: HTTP 404 for {path}: not a Prometheus query API at this URL "
                "(Thanos/Mimir/VictoriaMetrics cluster URLs often need a path prefix such as /prometheus)"
            )
        if status >= 500:
            raise BadResponseError(
                f"{self._where()}: HTTP {status} after {self.config.retries} retries: {detail}"
            )
        raise BadResponseError(f"{self._where()}: unexpected answer (HTTP {status}): {detail}")


def _ts(at: datetime) -> str:
    return f"{at.timestamp():.3f}"


def _snippet(response: requests.Response) -> str:
    text = response.text.strip().replace("\n", " ")
    return text[:200] + ("…" if len(text) > 200 else "")


def _json_body(response: requests.Response) -> Any:
    try:
        return response.json()
    except (ValueError, json.JSONDecodeError) as e:
        if response.status_code == 200:
            raise BadResponseError(
                f"{response.url}: HTTP 200 but not JSON ({response.headers.get('Content-Type', '?')}): "
                f"{_snippet(response)}"
            ) from e
        return None


def _result(data: Any) -> tuple[str, Any]:
    if not isinstance(data, dict) or "resultType" not in data or "result" not in data:
        raise BadResponseError(f"malformed query data: {str(data)[:200]}")
    return str(data["resultType"]), data["result"]


def _field(item: Any, name: str, promql: str) -> Any:
    if not isinstance(item, dict) or name not in item:
        raise BadResponseError(f"malformed result item for {promql!r}: {str(item)[:200]}")
    return item[name]


def _labels(item: Any, promql: str) -> dict[str, str]:
    metric = _field(item, "metric", promql)
    if not isinstance(metric, dict):
        raise BadResponseError(f"malformed labels for {promql!r}: {str(metric)[:200]}")
    return {str(k): str(v) for k, v in metric.items()}


def _value(pair: Any, promql: str) -> float:
    try:
        return float(pair[1])
    except (TypeError, ValueError, IndexError, KeyError) as e:
        raise BadResponseError(f"malformed sample for {promql!r}: {str(pair)[:200]}") from e


def _series(item: Any, promql: str) -> RangeSeries:
    values = _field(item, "values", promql)
    try:
        ts = np.fromiter((float(p[0]) for p in values), dtype=float, count=len(values))
        vs = np.fromiter((float(p[1]) for p in values), dtype=float, count=len(values))
    except (TypeError, ValueError, IndexError, KeyError) as e:
        raise BadResponseError(f"malformed samples for {promql!r}") from e
    return RangeSeries(_labels(item, promql), ts, vs)


def _strings(data: Any, path: str) -> list[str]:
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise BadResponseError(f"{path}: expected a list of strings, got {str(data)[:200]}")
    return list(data)


def _root_cause(error: BaseException) -> str:
    """The reason a connection failed ("[Errno 111] Connection refused"), without urllib3's retry
    wrapper, which repeats the whole query URL."""
    reason: object = error.args[0] if error.args else error
    reason = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the real failure
    text = str(reason)
    marker = "Failed to establish a new connection: "
    return text.split(marker, 1)[1].rstrip("')\"") if marker in text else text
