"""The HTTP adapter for the Prometheus query API (Prometheus, Thanos, Mimir, VictoriaMetrics).

prometheus-api-client's ``PrometheusConnect`` sends every request: instant queries through
``custom_query``, range queries through ``custom_query_range``, label names and values through
``get_label_names`` / ``get_label_values``, with our per-request timeout, bearer-token or basic auth,
the Mimir tenant header and TLS verification (or a CA bundle), on a session where it mounts a urllib3
``Retry`` with exponential backoff on connection errors, timeouts and 429/5xx answers.

The library judges an answer by ``status_code == 200`` alone and reports anything else as text, and
it keeps only ``data.result`` of a success. So a response hook on our session checks each answer
before the library sees it — the whole API envelope (status, ``errorType``, ``warnings``) — and
raises the analyzer's own errors, keyed on the HTTP status and the envelope's fields, never on text:

* ``SourceUnreachableError`` — connection refused, DNS, TLS, or timeouts after the retries;
* ``QueryError`` — the server rejected the query (400/422, or ``errorType`` timeout/execution);
* ``BadResponseError`` — anything else that is not a well-formed success: 5xx after the retries,
  HTML from a proxy, malformed JSON, an unexpected result type, or warnings (partial data).

A checked answer reaches the library already decoded: parsed once (msgspec) and, for a query, its
``data.result`` converted to ``VectorSample`` / ``RangeSeries`` in the same pass, still remembering the
envelope's ``resultType``. A plain vector answer, the common case, is parsed straight into samples.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from types import TracebackType
from typing import Any, Literal, NamedTuple, Self, TypeVar
from urllib.parse import parse_qs, urlsplit

import msgspec
import requests
import urllib3
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3 import BaseHTTPResponse
from urllib3.connectionpool import ConnectionPool
from urllib3.util.retry import Retry

from analyzer.sources.pacing import AdaptiveLimit, run_all, submit_all
from analyzer.sources.prometheus_config import PrometheusConfig
from analyzer.sources.source_errors import BadResponseError, QueryError, SourceUnreachableError
from common.errors import DataUnavailableError, GpuToolError
from common.memory import collector_paused
from common.redaction import redact

log = logging.getLogger(__name__)

_RETRY_STATUSES = (429, 500, 502, 503, 504)
# Answers that say "slow down" rather than "broken": they narrow the pool of queries in flight.
_PUSH_BACK_STATUSES = frozenset({429, 503})
# errorType values of the API envelope that mean "your query", not "my server".
_QUERY_ERROR_TYPES = frozenset({"bad_data", "execution", "timeout", "canceled", "422"})
# Endpoints whose data is {resultType, result}.
_INSTANT_PATH = "/api/v1/query"
_QUERY_PATHS = (_INSTANT_PATH, "/api/v1/query_range")
TENANT_HEADER = "X-Scope-OrgID"

T = TypeVar("T")

__all__ = ["PrometheusClient", "PrometheusConfig", "PrometheusSession", "RangeSeries", "VectorSample"]


class VectorSample(NamedTuple):
    """One sample of an instant vector (a tuple: a 10,000-series answer builds 10,000 of them)."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class RangeSeries:
    """One series of a range query, as decoded: lists, which readers needing arrays convert."""

    labels: Mapping[str, str]
    timestamps: list[float]
    values: list[float]


@dataclass
class QueryStats:
    """What this client asked and received: the benchmark's and the logs' numbers."""

    requests: int = 0
    body_bytes: int = 0
    wire_bytes: int = 0


class PrometheusSession(requests.Session):
    """The session prometheus-api-client sends on: a POST carries its parameters in a form body.

    The library puts every parameter in the URL, POST included. PromQL that names a few hundred GPUs
    outgrows the 8 KiB request line many reverse proxies accept (nginx, ingress controllers), while
    Prometheus, Thanos, Mimir and VictoriaMetrics all read a POST's form body.
    """

    def __init__(self) -> None:
        super().__init__()
        self._environment: dict[tuple[Any, ...], dict[str, Any]] = {}  # see merge_environment_settings

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        verb = method.decode() if isinstance(method, bytes) else method
        if verb.upper() == "POST" and kwargs.get("params") and kwargs.get("data") is None:
            kwargs["data"] = kwargs.pop("params")
        # Streamed, so that the response hook reads the body as it crossed the wire (compressed)
        # and counts those bytes before decompressing it once.
        kwargs.setdefault("stream", True)
        return super().request(method, url, *args, **kwargs)

    def merge_environment_settings(
        self, url: str | bytes | None, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        """requests' own merge (proxy variables, ``NO_PROXY``, CA bundle variables), done once per
        server and set of arguments: it walks the whole environment on every request, which in a
        pod with many service variables costs more than the request itself."""
        origin = urlsplit(url.decode() if isinstance(url, bytes) else url or "")[:2]
        mine = (self.trust_env, _frozen(self.proxies), self.stream, self.verify, self.cert)
        key = (origin, _frozen(proxies), stream, verify, cert, mine)
        known = self._environment.get(key)
        if known is None:
            known = dict(super().merge_environment_settings(url, proxies, stream, verify, cert))
            self._environment[key] = known
        return {**known, "proxies": dict(known["proxies"] or {})}


def _frozen(mapping: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((mapping or {}).items()))


class _PacedRetry(Retry):
    """urllib3's retry policy, telling the pool when the server pushes back (429/503).

    urllib3 retries below requests' hooks, so only the retry policy sees the intermediate answers.
    """

    limit: AdaptiveLimit | None = None

    def new(self, **kw: Any) -> Self:
        retry = super().new(**kw)
        retry.limit = self.limit
        return retry

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        if self.limit is not None and response is not None and response.status in _PUSH_BACK_STATUSES:
            self.limit.push_back()
        return super().increment(method, url, response, error, _pool, _stacktrace)


class _Result(list[Any]):
    """``data.result`` as the library hands it back, still knowing the envelope's ``resultType``."""

    def __init__(self, items: Iterable[Any], result_type: str) -> None:
        super().__init__(items)
        self.result_type = result_type


class _CheckedResponse(requests.Response):
    """An answer the hook has parsed and checked: ``json()`` returns that envelope, not a re-parse."""

    def __init__(self, response: requests.Response, envelope: dict[str, Any]) -> None:
        super().__init__()
        self.__dict__.update(response.__dict__)
        self._envelope = envelope

    def json(self, **kwargs: Any) -> Any:
        del kwargs
        return self._envelope


class PrometheusClient:
    """One method per API endpoint the analyzer uses; every answer checked in one place."""

    def __init__(self, config: PrometheusConfig, session: PrometheusSession | None = None) -> None:
        self.config = config
        self.session = session if session is not None else PrometheusSession()
        self.session.verify = config.ca_file if config.ca_file else config.verify_tls
        self.stats = QueryStats()
        self._stats_lock = threading.Lock()
        self.limit = AdaptiveLimit(config.concurrency)
        # Set once a request ran out of time on every attempt before the server had answered any:
        # see _timed_out.
        self._unresponsive: DataUnavailableError | None = None
        self.session.hooks["response"].extend([self._count, self._check])
        retry = _PacedRetry(
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
        retry.limit = self.limit
        # gzip only: the one encoding every TSDB speaks and the hook decodes (see _read_wire).
        headers = {"Accept": "application/json", "Accept-Encoding": "gzip"}
        if config.bearer_token is not None:
            headers["Authorization"] = f"Bearer {config.bearer_token}"
        if config.tenant is not None:
            headers[TENANT_HEADER] = config.tenant
        # Mounts the retrying adapter on our session for the base URL; sends headers, auth and the
        # timeout with every request.
        self.connect = PrometheusConnect(
            url=config.base_url,
            headers=headers,
            retry=retry,
            auth=config.basic_auth,
            session=self.session,
            timeout=config.timeout_s,
            method="POST",
        )

    def _count(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        wire = _read_wire(response, self._where())
        body = len(response.content)
        with self._stats_lock:
            self.stats.requests += 1
            self.stats.body_bytes += body
            self.stats.wire_bytes += body if wire is None else wire
        if response.status_code == 200:
            self.limit.success()

    def close(self) -> None:
        self.connect.close()

    # --- endpoints ------------------------------------------------------------------------------

    def vector(self, promql: str, at: datetime) -> list[VectorSample]:
        """An instant query whose result is a vector (or a scalar, returned as one unlabelled sample)."""
        kind, result = self._typed(self._ask(promql, self.connect.custom_query, promql, {"time": _ts(at)}))
        if kind not in ("vector", "scalar"):  # a scalar arrives as one unlabelled sample
            raise BadResponseError(f"{self._where()}: expected a vector for {promql!r}, got {kind}")
        return result

    def vectors(self, queries: Sequence[tuple[str, datetime]]) -> list[list[VectorSample]]:
        """Independent instant queries, run side by side through the bounded pool; answers in order."""
        return self.read_vectors(queries, lambda answer: answer)

    def read_vectors(
        self, queries: Sequence[tuple[str, datetime]], read: Callable[[list[VectorSample]], T]
    ) -> list[T]:
        """As ``vectors``, each answer passed through ``read`` as soon as it arrives (in the pool's
        thread): only what ``read`` keeps outlives it, not a whole round's parsed labels."""
        return run_all(self.limit, lambda q: read(self.vector(*q)), queries)

    def submit_vectors(
        self, queries: Sequence[tuple[str, datetime]], read: Callable[[list[VectorSample]], T]
    ) -> list[Future[T]]:
        """As ``read_vectors``, without waiting: each answer (or error) is read from its future."""
        return submit_all(self.limit, lambda q: read(self.vector(*q)), queries)

    def matrix(self, promql: str, at: datetime) -> list[RangeSeries]:
        """An instant query over a range selector: the raw samples of each series."""
        kind, result = self._typed(self._ask(promql, self.connect.custom_query, promql, {"time": _ts(at)}))
        if kind != "matrix":
            raise BadResponseError(f"{self._where()}: expected a matrix for {promql!r}, got {kind}")
        return result

    def query_range(self, promql: str, start: datetime, end: datetime, step_s: float) -> list[RangeSeries]:
        """A range query (start and end go out in whole seconds, as prometheus-api-client sends them)."""
        kind, result = self._typed(
            self._ask(promql, self.connect.custom_query_range, promql, start, end, f"{step_s:g}")
        )
        if kind != "matrix":
            raise BadResponseError(f"{self._where()}: expected a matrix for {promql!r}, got {kind}")
        return result

    def label_names(self, match: str, start: datetime, end: datetime) -> list[str]:
        params = {"match[]": match, "start": _ts(start), "end": _ts(end)}
        path = "/api/v1/labels"
        return _strings(self._ask(f"{path} {match}", self.connect.get_label_names, params), path)

    def label_values(self, label: str, match: str, start: datetime, end: datetime) -> list[str]:
        path = f"/api/v1/label/{label}/values"
        params = {"match[]": match, "start": _ts(start), "end": _ts(end)}
        return _strings(self._ask(f"{path} {match}", self.connect.get_label_values, label, params), path)

    def build_info(self) -> dict[str, Any]:
        """``/api/v1/status/buildinfo``'s data: which engine answers (empty where it says nothing)."""
        path = "/api/v1/status/buildinfo"

        def get() -> requests.Response:
            return self.session.get(
                f"{self.config.base_url}{path}",
                headers=self.connect.headers,
                auth=self.config.basic_auth,
                timeout=self.config.timeout_s,
            )

        data = self._ask(path, get).json().get("data")
        return data if isinstance(data, dict) else {}

    # --- the one place that talks HTTP ----------------------------------------------------------

    def _where(self) -> str:
        return self.config.display_url

    def _typed(self, result: Any) -> tuple[str, list[Any]]:
        if not isinstance(result, _Result):  # the hook wraps every query answer
            raise BadResponseError(f"{self._where()}: malformed query data: {str(result)[:200]}")
        return result.result_type, result

    def _ask(self, what: str, call: Callable[..., T], *args: Any) -> T:
        """Run one prometheus-api-client call; transport failures become the analyzer's errors.

        Answers are judged by ``_check`` before the library reads them. Each request is logged at
        debug level with what it asked, how long it took and how many series (or names) came back.
        """
        if self._unresponsive is not None:
            raise SourceUnreachableError(str(self._unresponsive))
        started = time.monotonic()
        try:
            with self.limit.slot():  # requests from this thread count against the pool's bound
                answer = call(*args)
        except GpuToolError as e:  # raised by _check, on an answer
            log.debug("%s: failed after %.3fs: %s", _asked(what), time.monotonic() - started, e)
            raise
        except requests.exceptions.SSLError as e:
            raise self._failed(what, started, f"TLS handshake failed: {e}") from e
        except requests.exceptions.ConnectTimeout as e:
            raise self._timed_out(what, started, "cannot connect") from e
        except requests.exceptions.Timeout as e:
            raise self._timed_out(what, started, "no answer") from e
        except requests.exceptions.ConnectionError as e:
            # urllib3 reports a read timeout whose retries ran out as a connection error: the server
            # was reached, and did not answer in time.
            if isinstance(_reason(e), urllib3.exceptions.ReadTimeoutError):
                raise self._timed_out(what, started, "no answer") from e
            raise self._failed(what, started, f"cannot connect ({_root_cause(e)}){self._after()}") from e
        except requests.exceptions.RequestException as e:
            raise self._failed(what, started, f"request failed: {e}") from e
        except PrometheusApiClientException as e:  # only if an answer slipped past _check
            reason = f"unexpected answer for {_short(what)!r}"
            raise self._failed(what, started, reason, BadResponseError) from e
        if log.isEnabledFor(logging.DEBUG):
            size = len(answer) if isinstance(answer, list) else None
            unit = "series" if not what.startswith("/") else "values"
            got = f"{size} {unit}" if size is not None else "answered"
            log.debug("%s: %s in %.3fs", _asked(what), got, time.monotonic() - started)
        return answer

    def _after(self) -> str:
        n = self.config.retries
        return f" after {n} {'retry' if n == 1 else 'retries'}" if n else ""

    def _failed(
        self,
        what: str,
        started: float,
        reason: str,
        kind: type[DataUnavailableError] = SourceUnreachableError,
    ) -> DataUnavailableError:
        error = kind(f"{self._where()}: {redact(reason)}")
        log.debug("%s: failed after %.3fs: %s", _asked(what), time.monotonic() - started, error)
        return error

    def _timed_out(self, what: str, started: float, reason: str) -> DataUnavailableError:
        """A request whose every attempt ran out of time. Where the server has answered nothing
        yet in this run, it is taken as unresponsive: the requests still to come fail at once
        rather than each waiting out its own timeouts (a run would otherwise wait many times
        the timeout before giving up)."""
        error = self._failed(
            what,
            started,
            f"{reason} within {self.config.timeout_s:g}s{self._after()} ({_short(what)!r})",
        )
        with self._stats_lock:
            if self.stats.requests == 0 and self._unresponsive is None:
                self._unresponsive = error
        return error

    def _checked(self, body: dict[str, Any], path: str, what: str) -> dict[str, Any]:
        """A success's envelope, refused if partial; a query's result decoded into our types."""
        warnings = body.get("warnings") or []
        if warnings:
            # Partial data (a Thanos store down, a Mimir shard timing out) can hide busy periods:
            # better no report than a report that calls a busy GPU idle.
            raise BadResponseError(
                f"{self._where()}: answered with warnings (partial data?) for {what!r}: "
                + redact("; ".join(str(w) for w in warnings))
            )
        if "data" not in body:
            raise BadResponseError(f"{self._where()}: success without data for {what!r}")
        data = body["data"]
        if not path.endswith(_QUERY_PATHS):
            return body
        if not isinstance(data, dict) or not isinstance(data.get("result"), list):
            raise BadResponseError(f"{self._where()}: malformed query data: {redact(str(data))[:200]}")
        kind = str(data.get("resultType", ""))
        return {**body, "data": {**data, "result": _Result(_decoded(data["result"], kind, what), kind)}}

    def _check(self, response: requests.Response, *args: object, **kwargs: object) -> requests.Response:
        """Response hook: a well-formed success goes on to the library, anything else raises here."""
        if response.is_redirect:
            return response  # requests follows it; the final answer is checked
        path = urlsplit(response.url).path
        what = _query_text(response.request) or path
        status = response.status_code
        plain = status == 200 and path.endswith(_INSTANT_PATH)  # a range query's answer is a matrix
        with _decoding, collector_paused():
            samples = _plain_vector(response.content) if plain else None
            if samples is not None:
                envelope = {"status": "success", "data": {"resultType": "vector", "result": samples}}
                return _CheckedResponse(response, envelope)
            body = _json_body(response, self._where())
            if status == 200 and isinstance(body, dict) and body.get("status") == "success":
                checked = _CheckedResponse(response, self._checked(body, path, what))
                del body  # the parsed tree goes while the collector is still paused
                return checked

        error_type = str(body.get("errorType", "")) if isinstance(body, dict) else ""
        error = str(body.get("error", "")) if isinstance(body, dict) else ""
        # Server text, which may echo the request and its credentials: redacted before it is shown.
        detail = redact(f"{error_type}: {error}") if error_type or error else _snippet(response)
        if status in (400, 422) or error_type in _QUERY_ERROR_TYPES:
            raise QueryError(f"{self._where()}: query rejected (HTTP {status}) {detail} — {what!r}")
        if status in (401, 403):
            raise BadResponseError(
                f"{self._where()}: HTTP {status}: credentials missing or refused "
                "(see --prometheus-token-file / --prometheus-user; Mimir also needs --prometheus-tenant)"
            )
        if status in (404, 501):
            # 501 Not Implemented: a web server with no query API there; nothing a retry would change.
            prefixed = urlsplit(self.config.base_url).path.rstrip("/").endswith("/prometheus")
            hint = (
                "check the host and the path before /prometheus"
                if prefixed
                else "Thanos/Mimir/VictoriaMetrics cluster URLs often need a path prefix such as /prometheus"
            )
            raise BadResponseError(
                f"{self._where()}: HTTP {status} for {path}: not a Prometheus query API at this URL ({hint})"
            )
        if status >= 500:
            raise BadResponseError(f"{self._where()}: HTTP {status}{self._after()}: {detail}")
        raise BadResponseError(f"{self._where()}: unexpected answer (HTTP {status}): {detail}")


def _read_wire(response: requests.Response, where: str) -> int | None:
    """Read a streamed body as sent: returns its size on the wire and leaves it decoded in place.

    None when the body was already read (a response that was not streamed).
    """
    raw = response.raw
    if response.__dict__.get("_content_consumed") or raw is None:
        return None
    data = raw.read(decode_content=False)
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    try:
        decoded = gzip.decompress(data) if encoding in ("gzip", "x-gzip") and data else data
    except (OSError, EOFError, zlib.error) as e:
        raise BadResponseError(f"{where}: a gzip body that does not decompress ({e})") from e
    if encoding not in ("", "identity", "gzip", "x-gzip"):
        raise BadResponseError(f"{where}: answered in {encoding!r}, which was not asked for")
    response.__dict__["_content"] = decoded
    response.__dict__["_content_consumed"] = True
    raw.release_conn()
    return len(data)


def _query_text(request: requests.PreparedRequest) -> str | None:
    """The PromQL a request carried, from its form body or its URL."""
    body = request.body
    text = body.decode(errors="replace") if isinstance(body, bytes) else (body or "")
    for source in (text, urlsplit(request.url or "").query):
        values = parse_qs(source).get("query")
        if values:
            return values[0]
    return None


def _ts(at: datetime) -> str:
    return f"{at.timestamp():.3f}"


def _snippet(response: requests.Response) -> str:
    """The body's first characters on one line (an HTML error page's lines run together), with any
    credential it echoes redacted first (a cut must not leave part of one)."""
    text = redact(" ".join(response.text.split()))
    return text[:200] + ("…" if len(text) > 200 else "")


# The common answer, a vector without warnings, is decoded straight into these: types checked and
# values read as numbers inside msgspec's parser, with no dict per item and no second pass over
# the answer in Python (about 60 % of the time of parsing to dicts and converting). An answer they do
# not fit (a number as a label value, "+Inf", warnings, a matrix) takes the general path, which
# reads or refuses it item by item.
class _VectorItem(msgspec.Struct, gc=False):
    metric: dict[str, str]
    value: tuple[float, float]


class _VectorData(msgspec.Struct, gc=False):
    result_type: Literal["vector"] = msgspec.field(name="resultType")
    result: list[_VectorItem]


class _VectorAnswer(msgspec.Struct, gc=False):
    status: Literal["success"]
    data: _VectorData
    warnings: list[Any] = msgspec.field(default_factory=list)


# Lax mode reads the API's number strings ("12.5", "NaN", "-Inf") as floats; it refuses "+Inf".
_vector_answers = msgspec.json.Decoder(_VectorAnswer, strict=False)
_metric_of, _value_pair = attrgetter("metric"), attrgetter("value")


def _plain_vector(content: bytes) -> _Result | None:
    """A successful vector answer without warnings as samples; None for any other answer."""
    try:
        answer = _vector_answers.decode(content)
    except (msgspec.MsgspecError, ValueError, RecursionError):  # invalid UTF-8 is a ValueError
        return None
    if answer.warnings:
        return None
    items = answer.data.result
    return _Result(samples_of(map(_metric_of, items), map(_second, map(_value_pair, items))), "vector")


def _json_body(response: requests.Response, where: str) -> Any:
    """The parsed body; None for an error status whose body is not JSON (said by the caller).

    A success that is not JSON is named by the server, not by its URL: a query's URL carries the
    whole encoded selector, hundreds of characters that say nothing about what went wrong.
    """
    try:
        return msgspec.json.decode(response.content)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as e:
        if response.status_code == 200:
            raise BadResponseError(
                f"{where}: HTTP 200 but not JSON ({response.headers.get('Content-Type', '?')}): "
                f"{_snippet(response)}"
            ) from e
        return None


# One answer decoded at a time: decoding holds the GIL anyway, so answers decoded side by side take
# as long, but each holds its whole parsed tree meanwhile (at 10,000 GPUs, about 10 MB an answer).
# The cyclic collector is paused meanwhile (see common.memory.collector_paused): JSON builds no
# cycles, but a matrix answer is a million young lists that all survive, and the collector's
# repeated passes over them cost most of the parse (12 MB of samples parse 5-6x faster paused).
_decoding = threading.Lock()


def _decoded(result: list[Any], kind: str, promql: str) -> list[Any]:
    """A query's ``data.result`` as our types; any other result type is left for the caller to refuse."""
    if kind == "vector":
        return _samples(result, promql)
    if kind == "matrix":
        return [_series(item, promql) for item in result]
    if kind == "scalar":
        return [VectorSample({}, _value(result, promql))]
    return result


_first, _second = itemgetter(0), itemgetter(1)
_metric, _pair = itemgetter("metric"), itemgetter("value")


def _samples(result: list[Any], promql: str) -> list[VectorSample]:
    """A vector's samples: values converted in one pass over the answer, labels kept as parsed.

    Any fault sends the answer through the item-by-item path, which names the item at fault.
    """
    try:
        values = list(map(float, map(_second, map(_pair, result))))
        labels = list(map(_metric, result))
        _check_label_sets(labels)
    except (TypeError, ValueError, OverflowError, KeyError, IndexError):
        return [
            VectorSample(_labels(item, promql), _value(_field(item, "value", promql), promql))
            for item in result
        ]
    return samples_of(labels, values)


def samples_of(labels: Iterable[Mapping[str, str]], values: Iterable[float]) -> list[VectorSample]:
    """Samples from labels and values, built without a Python call per sample (a named tuple's
    own constructor is one: at 10,000 GPUs a run builds a quarter of a million samples)."""
    return list(map(tuple.__new__, repeat(VectorSample), zip(labels, values, strict=True)))


def _check_label_sets(labels: list[Any]) -> None:
    """Raises TypeError unless every label set is a dict of strings (keys always are in JSON).

    Both checks loop in C: ``dict.values`` refuses anything that is not a dict, and the set of
    the values' types must be ``{str}``.
    """
    if not set(map(type, chain.from_iterable(map(dict.values, labels)))) <= {str}:
        raise TypeError("labels")


def _series(item: Any, promql: str) -> RangeSeries:
    """One series' samples: ``[timestamp, "value"]`` pairs into two lists, without a Python loop.

    Values come as strings ("NaN", "+Inf" included); ``float`` reads them all, and refuses a null.
    """
    values = _field(item, "values", promql)
    try:
        if not isinstance(values, list):
            raise TypeError(type(values).__name__)
        ts = list(map(float, map(_first, values)))
        vs = list(map(float, map(_second, values)))
    except (TypeError, ValueError, OverflowError, IndexError, KeyError) as e:
        raise BadResponseError(f"malformed samples for {promql!r}: {e}") from e
    return RangeSeries(_labels(item, promql), ts, vs)


def _field(item: Any, name: str, promql: str) -> Any:
    if not isinstance(item, dict) or name not in item:
        raise BadResponseError(f"malformed result item for {promql!r}: {str(item)[:200]}")
    return item[name]


def _labels(item: Any, promql: str) -> dict[str, str]:
    metric = _field(item, "metric", promql)
    if not isinstance(metric, dict):
        raise BadResponseError(f"malformed labels for {promql!r}: {str(metric)[:200]}")
    if set(map(type, metric.values())) <= {str}:
        return metric  # as parsed: a fresh dict of strings
    return {str(k): str(v) for k, v in metric.items()}


def _value(pair: Any, promql: str) -> float:
    try:
        return float(pair[1])
    except (TypeError, ValueError, OverflowError, IndexError, KeyError) as e:
        raise BadResponseError(f"malformed sample for {promql!r}: {str(pair)[:200]}") from e


def _strings(data: Any, path: str) -> list[str]:
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise BadResponseError(f"{path}: expected a list of strings, got {str(data)[:200]}")
    return list(data)


def _reason(error: BaseException) -> object:
    """What urllib3's retry wrapper (``MaxRetryError``, inside requests' error) says went wrong."""
    inner: object = error.args[0] if error.args else error
    return getattr(inner, "reason", inner)


def _short(what: str, limit: int = 80) -> str:
    """A query or request, cut for an error message (the debug log has it whole)."""
    return what if len(what) <= limit else what[: limit - 1] + "…"


def _asked(what: str) -> str:
    return what if what.startswith("/") else f"query {what}"


def _root_cause(error: BaseException) -> str:
    """The reason a connection failed ("[Errno 111] Connection refused"), without urllib3's retry
    wrapper, which repeats the whole query URL."""
    reason: object = error.args[0] if error.args else error
    reason = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the real failure
    text = str(reason)
    marker = "Failed to establish a new connection: "
    return text.split(marker, 1)[1].rstrip("')\"") if marker in text else text
