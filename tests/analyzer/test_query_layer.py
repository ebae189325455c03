"""The query layer against recorded real Prometheus answers, and its error paths at the wire level.

The happy path replays exchanges recorded from Prometheus 2.42 over the standard simulated fleet
(tests/analyzer/record_prometheus_fixtures.py writes them); error paths are built with `responses`.
A closed port stands in for a server that is down.
"""

from __future__ import annotations

import base64
import gc
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
import requests
import responses
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from requests.adapters import HTTPAdapter

from analyzer.pipeline import analyze
from analyzer.sources import prometheus_api, vocabulary
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig
from analyzer.sources.source_errors import BadResponseError, NoDataError, QueryError, SourceUnreachableError
from common.errors import BadInputError
from common.model import FindingKind, TimeWindow
from common.thresholds import Thresholds
from harness.recorded import RERECORD, explained, replay
from harness.servers import free_port
from simulation.fleet import Fleet, expected_findings
from simulation.fleet.truth import window_of

URL = "http://prometheus.test:9090"
AT = datetime(2026, 1, 5, tzinfo=UTC)
QUERY = f"{URL}/api/v1/query"
OK_VECTOR = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [{"metric": {"UUID": "GPU-1"}, "value": [1767571200, "42.5"]}],
    },
}


def client(retries: int = 2, **config: object) -> PrometheusClient:
    return PrometheusClient(PrometheusConfig(URL, retries=retries, backoff_s=0.0, timeout_s=5.0, **config))  # type: ignore[arg-type]


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


# --- recorded real answers ---------------------------------------------------------------------------


def test_recorded_prometheus_answers_give_the_ground_truth(
    mock: responses.RequestsMock, standard_fleet: Fleet
) -> None:
    exchanges = replay(mock, URL, "standard_fleet_analysis")
    source = PrometheusSource(PrometheusConfig(URL, retries=0))
    window = window_of(standard_fleet)
    with explained(mock, "standard_fleet_analysis"):
        report = analyze(source, window, Thresholds(), now=window.end)
    truth = {ref: e.kind for ref, e in expected_findings(standard_fleet).items() if e.kind is not None}
    assert {f.workload: f.kind for f in report.findings} == truth
    # Every request the analysis made was one of the recorded ones (responses refuses others), and
    # every recorded one is still sent.
    assert source.client.stats.requests == len(exchanges), (
        f"the analysis sent {source.client.stats.requests} requests, the recording holds {len(exchanges)}: "
        f"a query was added or dropped; re-record tests/fixtures/prometheus/standard_fleet_analysis.json "
        f"with `{RERECORD}`"
    )
    assert report.source == URL


def test_recorded_discovery_reads_dcgm_exporter_and_ours(
    mock: responses.RequestsMock, standard_fleet: Fleet
) -> None:
    replay(mock, URL, "standard_fleet_analysis")
    source = PrometheusSource(PrometheusConfig(URL, retries=0))
    with explained(mock, "standard_fleet_analysis"):
        caps = source.discover(window_of(standard_fleet), Thresholds())
    # Every utilization name the fleet serves, in the vocabulary's order of preference: profiling first.
    served = {s.name for s in standard_fleet.series}
    assert caps.util_metrics == vocabulary.present(vocabulary.Use.UTILIZATION, served)
    assert (
        caps.util_metrics[0] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
        and "DCGM_FI_DEV_GPU_UTIL" in caps.util_metrics
    )
    assert caps.host_label == "Hostname"
    assert caps.gpu_pod.pod == "pod"
    assert caps.mig
    assert caps.histogram_le == ("10", "75", "+Inf")
    assert caps.kube_state_metrics and caps.replicaset_owner and caps.cpu_throttling
    # Prometheus refused the MetricsQL probe (recorded as it answered: HTTP 400).
    assert caps.prometheus_engine and not caps.metricsql


def test_recorded_vector_and_matrix_parse(mock: responses.RequestsMock) -> None:
    exchanges = replay(mock, URL, "standard_fleet_analysis")
    c = client()
    matrix_call = next(
        e
        for e in exchanges
        if isinstance(e["body"].get("data"), dict) and e["body"]["data"].get("resultType") == "matrix"
    )
    series = c.matrix(
        matrix_call["params"]["query"], datetime.fromtimestamp(float(matrix_call["params"]["time"]), tz=UTC)
    )
    assert series
    assert all(len(s.timestamps) == len(s.values) > 10 for s in series)  # an hour of one device
    assert all(s.timestamps == sorted(set(s.timestamps)) for s in series)


# --- error paths ---------------------------------------------------------------------------------------


def test_server_errors_are_retried_then_reported(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, body="upstream connect error", status=502)
    with pytest.raises(BadResponseError, match="HTTP 502 after 2 retries"):
        client(retries=2).vector("up", AT)
    assert len(mock.calls) == 3


def test_a_transient_5xx_is_absorbed_by_retries(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, status=503, json={"status": "error", "errorType": "unavailable", "error": "restarting"})
    mock.post(QUERY, status=500, body="oops")
    mock.post(QUERY, json=OK_VECTOR)
    (sample,) = client(retries=3).vector("up", AT)
    assert sample.value == 42.5
    assert len(mock.calls) == 3


def test_timeouts_are_retried_then_unreachable(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, body=requests.exceptions.ReadTimeout("read timed out"))
    with pytest.raises(SourceUnreachableError, match="no answer within 5s"):
        client(retries=1).vector("up", AT)


def test_connection_refused_is_unreachable() -> None:
    c = PrometheusClient(PrometheusConfig(f"http://127.0.0.1:{free_port()}", retries=1, backoff_s=0.0))
    with pytest.raises(SourceUnreachableError, match="cannot connect") as err:
        c.vector("up", AT)
    # One line a person can act on: the server and the reason, not urllib3's retry wrapper and query URL.
    assert "Connection refused" in str(err.value)
    assert "/api/v1/" not in str(err.value)


@pytest.mark.parametrize(
    ("status", "body", "content_type", "error", "match"),
    [
        pytest.param(
            200, "<html>login</html>", "text/html", BadResponseError, "not JSON", id="html-from-a-proxy"
        ),
        pytest.param(
            200,
            '{"status": "success", "data": {',
            "application/json",
            BadResponseError,
            "not JSON",
            id="truncated-json",
        ),
        pytest.param(
            200,
            '{"status": "success"}',
            "application/json",
            BadResponseError,
            "without data",
            id="success-without-data",
        ),
        pytest.param(
            200,
            '{"status": "success", "data": {"resultType": "string", "result": [0, "x"]}}',
            "application/json",
            BadResponseError,
            "expected a vector",
            id="wrong-result-type",
        ),
        pytest.param(
            200,
            '{"status": "success", "data": {"resultType": "vector", "result": [{"value": [1, "2"]}]}}',
            "application/json",
            BadResponseError,
            "malformed result",
            id="result-without-labels",
        ),
        pytest.param(
            200,
            '{"status": "success", "data": {"resultType": "vector", '
            '"result": [{"metric": {}, "value": [1, "x"]}]}}',
            "application/json",
            BadResponseError,
            "malformed sample",
            id="value-not-a-number",
        ),
        pytest.param(
            400,
            '{"status": "error", "errorType": "bad_data", "error": "parse error"}',
            "application/json",
            QueryError,
            "bad_data: parse error",
            id="promql-rejected",
        ),
        pytest.param(
            422,
            '{"status": "error", "errorType": "execution", "error": "too many samples"}',
            "application/json",
            QueryError,
            "too many samples",
            id="query-too-big",
        ),
        pytest.param(
            503,
            '{"status": "error", "errorType": "timeout", "error": "query timed out"}',
            "application/json",
            QueryError,
            "timeout",
            id="query-timeout-after-retries",
        ),
        pytest.param(
            200,
            b'{"status": "success", "data": {"resultType": "vector", '
            b'"result": [{"metric": {"pod": "caf\xe9"}, "value": [1, "2"]}]}}',
            "application/json",
            BadResponseError,
            "not JSON",
            id="latin-1-not-utf-8",
        ),
        pytest.param(
            200, b"[" * 5000, "application/json", BadResponseError, "not JSON", id="nested-too-deep"
        ),
        pytest.param(
            502,
            b'{"status": "error", "error": "Passerelle d\xe9faillante"}',
            "application/json",
            BadResponseError,
            "HTTP 502",
            id="latin-1-error-after-retries",
        ),
        pytest.param(401, "Unauthorized", "text/plain", BadResponseError, "credentials", id="unauthorized"),
        pytest.param(
            404, "404 page not found", "text/plain", BadResponseError, "path prefix", id="wrong-path"
        ),
    ],
)
def test_bad_answers_raise_typed_errors(
    mock: responses.RequestsMock,
    status: int,
    body: str | bytes,
    content_type: str,
    error: type[Exception],
    match: str,
) -> None:
    mock.post(QUERY, body=body, status=status, content_type=content_type)
    with pytest.raises(error, match=match):
        client(retries=1).vector("up", AT)


def test_partial_data_with_warnings_is_refused(mock: responses.RequestsMock) -> None:
    """A Thanos store or Mimir shard missing can hide busy hours: no report beats a wrong one."""
    mock.post(QUERY, json={**OK_VECTOR, "warnings": ["store gateway 10.0.0.7:10901 unavailable"]})
    with pytest.raises(BadResponseError, match=r"partial data.*store gateway"):
        client().vector("up", AT)


def test_an_empty_tsdb_is_no_data_not_all_idle(mock: responses.RequestsMock) -> None:
    mock.get(f"{URL}/api/v1/label/__name__/values", json={"status": "success", "data": []})
    source = PrometheusSource(PrometheusConfig(URL, retries=0))
    window = TimeWindow.ending(AT, timedelta(hours=6))
    with pytest.raises(NoDataError, match="no GPU utilization series"):
        analyze(source, window, Thresholds(), now=AT)


# --- connection options ----------------------------------------------------------------------------


def test_bearer_token_is_sent_and_never_shown(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, json=OK_VECTOR)
    c = client(bearer_token="s3cr3t-token")
    c.vector("up", AT)
    assert mock.calls[0].request.headers["Authorization"] == "Bearer s3cr3t-token"
    assert "s3cr3t" not in repr(c.config)


def test_basic_auth_is_sent(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, json=OK_VECTOR)
    client(basic_auth=("reader", "pw")).vector("up", AT)
    expected = "Basic " + base64.b64encode(b"reader:pw").decode()
    assert mock.calls[0].request.headers["Authorization"] == expected


@pytest.mark.parametrize(
    ("options", "verify"),
    [
        pytest.param({}, True, id="verify-by-default"),
        pytest.param({"verify_tls": False}, False, id="insecure-skip-verify"),
        pytest.param(
            {"ca_file": "/etc/ssl/private-ca.pem"}, "/etc/ssl/private-ca.pem", id="private-ca-bundle"
        ),
    ],
)
def test_tls_options(options: dict[str, object], verify: object) -> None:
    c = PrometheusClient(PrometheusConfig("https://thanos.example", **options))  # type: ignore[arg-type]
    assert c.session.verify == verify


def test_queries_are_posted_form_encoded(mock: responses.RequestsMock) -> None:
    """Long PromQL (regexes of pod names) fits in a POST body; every supported TSDB accepts it."""
    mock.post(QUERY, json=OK_VECTOR)
    client().vector('sum(rate(x{pod=~"a|b"}[5m]))', AT)
    body = mock.calls[0].request.body
    assert isinstance(body, str)
    assert "query=sum%28rate" in body
    assert "time=1767571200.000" in body


def test_requests_are_issued_by_prometheus_api_client(
    mock: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library sends every request (its retry adapter, timeout, headers and auth); we check answers."""
    used: list[str] = []
    for name in ("custom_query", "custom_query_range", "get_label_names", "get_label_values"):
        real = getattr(PrometheusConnect, name)

        def spy(
            self: PrometheusConnect, *args: object, _real: Any = real, _name: str = name, **kw: object
        ) -> Any:
            used.append(_name)
            return _real(self, *args, **kw)

        monkeypatch.setattr(PrometheusConnect, name, spy)
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    mock.post(QUERY, json=OK_VECTOR)
    mock.post(f"{URL}/api/v1/query_range", json=matrix)
    mock.post(f"{URL}/api/v1/labels", json={"status": "success", "data": ["UUID", "pod"]})
    mock.get(f"{URL}/api/v1/label/le/values", json={"status": "success", "data": ["10", "+Inf"]})
    c = client()
    assert c.vector("up", AT)[0].value == 42.5
    assert c.query_range("up", AT - timedelta(hours=1), AT, 60) == []
    assert c.label_names("{UUID!=''}", AT - timedelta(hours=1), AT) == ["UUID", "pod"]
    assert c.label_values("le", "x_bucket", AT - timedelta(hours=1), AT) == ["10", "+Inf"]
    assert used == ["custom_query", "custom_query_range", "get_label_names", "get_label_values"]
    # The retrying adapter the library mounted for our base URL is the one that sends.
    adapter = c.session.get_adapter(QUERY)
    assert isinstance(adapter, HTTPAdapter)
    assert adapter.max_retries.total == 2
    assert c.stats.requests == 4


def test_a_checked_answer_is_decoded_once(
    mock: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large answers cost their parse: the hook's is the only one, whichever parser would do it."""
    parses: list[str] = []

    def counting(name: str, real: Any) -> Any:
        def parse(*args: Any, **kw: Any) -> Any:
            parses.append(name)
            return real(*args, **kw)

        return parse

    class CountingDecoder:
        def __init__(self, real: Any) -> None:
            self.decode = counting("vector", real.decode)

    monkeypatch.setattr(prometheus_api, "_vector_answers", CountingDecoder(prometheus_api._vector_answers))
    monkeypatch.setattr(msgspec.json, "decode", counting("msgspec", msgspec.json.decode))
    monkeypatch.setattr(json, "loads", counting("json", json.loads))
    monkeypatch.setattr(requests.Response, "json", counting("requests", requests.Response.json))
    mock.post(QUERY, json=OK_VECTOR)
    mock.post(f"{URL}/api/v1/query_range", json=_matrix([[1767571200, "1"], [1767571215, "2"]]))
    c = client()
    c.vector("up", AT)
    c.query_range("up", AT - timedelta(minutes=1), AT, 15)
    assert parses == ["vector", "msgspec"]  # a vector straight into samples, a matrix parsed once


# --- decoding samples --------------------------------------------------------------------------------


def _vector(*values: object, labels: object = None) -> dict[str, Any]:
    metric = {"UUID": "GPU-1", "gpu": "0"} if labels is None else labels
    result = [{"metric": metric, "value": [1767571200, v]} for v in values]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def _matrix(*series: list[Any]) -> dict[str, Any]:
    result = [{"metric": {"UUID": f"GPU-{i}"}, "values": values} for i, values in enumerate(series)]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def test_prometheus_spellings_of_nan_and_infinity_are_read(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, json=_vector("NaN", "+Inf", "-Inf", "1e3", "0"))
    mock.post(QUERY, json=_matrix([[1767571200, "NaN"], [1767571215.5, "+Inf"], [1767571230, "-Inf"]]))
    mock.post(QUERY, json={"status": "success", "data": {"resultType": "scalar", "result": [1, "+Inf"]}})
    c = client()
    values = [s.value for s in c.vector("x", AT)]
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf, 1000.0, 0.0]
    (series,) = c.matrix("x[1m]", AT)
    assert series.timestamps == [1767571200.0, 1767571215.5, 1767571230.0]
    assert math.isnan(series.values[0]) and series.values[1:] == [math.inf, -math.inf]
    assert [s.value for s in c.vector("scalar(x)", AT)] == [math.inf]


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(("NaN", "-Inf", "1e3", "0", "7.25"), id="plain-numbers"),
        # "+Inf" is read by the general path only: both paths must give the same samples.
        pytest.param(("NaN", "-Inf", "1e3", "0", "7.25", "+Inf"), id="with-plus-inf"),
    ],
)
def test_a_vector_reads_the_same_whichever_path_decodes_it(
    mock: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch, values: tuple[str, ...]
) -> None:
    typed: list[bool] = []
    plain_vector = prometheus_api._plain_vector

    def spy(content: bytes) -> Any:
        answer = plain_vector(content)
        typed.append(answer is not None)
        return answer

    monkeypatch.setattr(prometheus_api, "_plain_vector", spy)
    labels = {"UUID": "GPU-1", "namespace": "ml", "pod": "trainer-0"}
    mock.post(QUERY, json=_vector(*values, labels=labels))
    samples = client().vector("x", AT)
    assert typed == ["+Inf" not in values]  # each case took the path it is about
    assert [dict(s.labels) for s in samples] == [labels] * len(values)
    read = [s.value for s in samples]
    assert math.isnan(read[0]) and read[1:5] == [-math.inf, 1000.0, 0.0, 7.25]
    assert read[5:] == [math.inf] * (len(values) - 5)
    assert all(type(s.value) is float for s in samples)


def test_samples_keep_their_labels_and_order(mock: responses.RequestsMock) -> None:
    answer = _vector("1", "2")
    answer["data"]["result"][1]["metric"] = {"UUID": "GPU-2", "pod": "trainer-0"}
    mock.post(QUERY, json=answer)
    assert [(dict(s.labels), s.value) for s in client().vector("x", AT)] == [
        ({"UUID": "GPU-1", "gpu": "0"}, 1.0),
        ({"UUID": "GPU-2", "pod": "trainer-0"}, 2.0),
    ]


def test_a_label_value_that_is_not_a_string_is_read_as_text(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, json=_vector("5", labels={"UUID": "GPU-1", "gpu": 0}))
    (sample,) = client().vector("x", AT)
    assert sample.labels == {"UUID": "GPU-1", "gpu": "0"}
    assert sample.value == 5.0


def test_empty_answers_are_empty(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, json=_vector())
    mock.post(QUERY, json=_matrix())
    mock.post(QUERY, json=_matrix([]))
    c = client()
    assert c.vector("x", AT) == []
    assert c.matrix("x[1m]", AT) == []
    (series,) = c.matrix("x[1m]", AT)
    assert series.timestamps == series.values == []


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        pytest.param(_vector("1", None), "malformed sample", id="null-value"),
        pytest.param(_vector("1", "idle"), "malformed sample", id="value-not-a-number"),
        pytest.param(_vector("1", labels=["UUID"]), "malformed labels", id="labels-not-a-map"),
        pytest.param(
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}},
            "malformed result item",
            id="sample-without-value",
        ),
        pytest.param(
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1]}]}},
            "malformed sample",
            id="value-without-its-number",
        ),
        pytest.param(
            {"status": "success", "data": {"resultType": "scalar", "result": [1, None]}},
            "malformed sample",
            id="null-scalar",
        ),
    ],
)
def test_a_malformed_vector_is_refused_naming_the_query(
    mock: responses.RequestsMock, answer: dict[str, Any], match: str
) -> None:
    mock.post(QUERY, json=answer)
    with pytest.raises(BadResponseError, match=rf"{match} for 'avg_over_time\(x\[1h\]\)'"):
        client().vector("avg_over_time(x[1h])", AT)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([[1767571200, "1"], [1767571215, None]], id="null-value"),
        pytest.param([[None, "1"]], id="null-timestamp"),
        pytest.param([[1767571200, "1"], [1767571215, "busy"]], id="value-not-a-number"),
        pytest.param([[1767571200, "1"], [1767571215]], id="pair-without-value"),
        pytest.param({"1767571200": "1"}, id="samples-not-a-list"),
    ],
)
def test_a_malformed_series_is_refused_naming_the_query(mock: responses.RequestsMock, values: Any) -> None:
    mock.post(QUERY, json=_matrix([[1767571200, "3"]], values))
    with pytest.raises(BadResponseError, match=r"malformed samples for 'x\[1m\]'"):
        client().matrix("x[1m]", AT)


@pytest.mark.parametrize("running", [True, False], ids=["collector-running", "collector-stopped"])
def test_decoding_leaves_the_garbage_collector_as_it_found_it(
    mock: responses.RequestsMock, running: bool
) -> None:
    """Decoding pauses the cyclic collector; side-by-side decodes and failures must not leave it off
    (or switch it on for a program that turned it off)."""
    mock.post(QUERY, json=_vector("1"))
    mock.post(QUERY, json=_vector("2"))
    mock.post(QUERY, json=_vector(None))
    c = client(concurrency=2)
    was = gc.isenabled()
    (gc.enable if running else gc.disable)()
    try:
        assert [len(v) for v in c.vectors([("x", AT), ("y", AT)])] == [1, 1]
        assert gc.isenabled() is running
        with pytest.raises(BadResponseError):
            c.vector("z", AT)
        assert gc.isenabled() is running
    finally:
        (gc.enable if was else gc.disable)()


def test_the_librarys_text_only_exception_never_reaches_callers(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, status=503, json={"status": "error", "errorType": "unavailable", "error": "down"})
    with pytest.raises(BadResponseError, match="HTTP 503") as err:
        client(retries=0).vector("up", AT)
    assert not isinstance(err.value, PrometheusApiClientException)


def test_a_redirect_is_followed_and_the_final_answer_checked(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, status=307, headers={"Location": f"{URL}/prometheus/api/v1/query"})
    mock.post(f"{URL}/prometheus/api/v1/query", json=OK_VECTOR)
    (sample,) = client().vector("up", AT)
    assert sample.value == 42.5


def test_mimir_tenant_is_sent_on_every_request(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, json=OK_VECTOR)
    mock.get(f"{URL}/api/v1/label/__name__/values", json={"status": "success", "data": []})
    c = client(tenant="team-a|team-b")
    c.vector("up", AT)
    c.label_values("__name__", "{__name__=~'DCGM_.*'}", AT - timedelta(hours=1), AT)
    assert [call.request.headers["X-Scope-OrgID"] for call in mock.calls] == ["team-a|team-b"] * 2


def test_no_tenant_header_without_a_tenant(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, json=OK_VECTOR)
    client().vector("up", AT)
    assert "X-Scope-OrgID" not in mock.calls[0].request.headers


@pytest.mark.parametrize(
    "tenant",
    [
        pytest.param("", id="empty"),
        pytest.param("team a", id="space"),
        pytest.param("team-a\r\nX-Evil: 1", id="header-injection"),
    ],
)
def test_bad_tenants_are_bad_input(tenant: str) -> None:
    with pytest.raises(BadInputError, match="tenant"):
        PrometheusConfig(URL, tenant=tenant)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        pytest.param("prometheus:9090", "expected http", id="no-scheme"),
        pytest.param("ftp://prometheus", "expected http", id="wrong-scheme"),
    ],
)
def test_bad_urls_are_bad_input(url: str, problem: str) -> None:
    with pytest.raises(BadInputError, match=problem):
        PrometheusConfig(url)


def test_display_url_drops_credentials() -> None:
    assert (
        PrometheusConfig("https://user:pw@mimir.example/prometheus/").display_url
        == "https://mimir.example/prometheus"
    )


def test_bytes_and_requests_are_counted(mock: responses.RequestsMock) -> None:
    mock.post(QUERY, json=OK_VECTOR)
    c = client()
    c.vector("up", AT)
    c.vector("up", AT)
    assert c.stats.requests == 2
    assert c.stats.body_bytes > 100


def test_instant_value_distinguishes_no_data_from_zero(mock: responses.RequestsMock) -> None:
    empty = {"status": "success", "data": {"resultType": "vector", "result": []}}
    zero = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "0"]}]},
    }
    mock.post(QUERY, json=empty)
    mock.post(QUERY, json=zero)
    source = PrometheusSource(PrometheusConfig(URL, retries=0))
    assert source.instant_value("sum(rate(requests_total[6h]))", AT) is None
    assert source.instant_value("sum(rate(requests_total[6h]))", AT) == 0.0


def test_unknown_unit_override_is_refused() -> None:
    with pytest.raises(ValueError, match="gpu_util_unit"):
        PrometheusSource(PrometheusConfig(URL), gpu_util_unit="fraction")


def test_finding_kinds_are_the_documented_ones() -> None:
    assert {k.value for k in FindingKind} == {
        "idle_endpoint",
        "low_utilization",
        "dataloader_starvation",
        "stalled_job",
        "unknown",
    }


def _echo(request: requests.PreparedRequest) -> tuple[int, dict[str, str], str]:
    """A proxy that refuses the request and echoes it, headers and all, in its error page."""
    ordered = sorted(request.headers.items(), key=lambda kv: kv[0] != "Authorization")
    headers = "; ".join(f"{k}: {v}" for k, v in ordered)
    return 502, {"Content-Type": "text/html"}, f"<html>bad gateway: {headers} for {request.url}</html>"


@pytest.mark.parametrize(
    ("config", "secrets"),
    [
        pytest.param({"bearer_token": "s3cr3t-b3arer"}, ["s3cr3t-b3arer"], id="bearer-token"),
        pytest.param(
            {"basic_auth": ("reader", "pa55word")},
            [base64.b64encode(b"reader:pa55word").decode(), "pa55word"],
            id="basic-auth",
        ),
    ],
)
def test_an_error_page_echoing_the_request_never_shows_its_credentials(
    mock: responses.RequestsMock, config: dict[str, Any], secrets: list[str]
) -> None:
    mock.add_callback(responses.POST, QUERY, callback=_echo)
    with pytest.raises(BadResponseError) as caught:
        client(retries=0, **config).vector("up", AT)
    message = str(caught.value)
    assert "bad gateway" in message and "[redacted]" in message
    assert not [s for s in secrets if s in message]


def test_a_query_error_echoing_a_token_parameter_never_shows_it(mock: responses.RequestsMock) -> None:
    body = {"status": "error", "errorType": "bad_data", "error": "invalid parameter: token=abc123secret"}
    mock.post(QUERY, json=body, status=400)
    with pytest.raises(QueryError) as caught:
        client(retries=0).vector("up", AT)
    assert "abc123secret" not in str(caught.value) and "token=[redacted]" in str(caught.value)
