"""Queries run side by side through a bounded pool, and a server that pushes back slows it down.

A small proxy stands in front of a real VictoriaMetrics: it counts the queries in flight, and it can
answer the first attempt of each query 429 or 503 (with ``Retry-After: 0``), as an overloaded
gateway does. The analysis through it must give the same findings as straight to the server.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from analyzer.pipeline import Analysis
from analyzer.sources.pacing import AdaptiveLimit
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusConfig
from analyzer.sources.source_errors import QueryError
from harness.servers import VictoriaMetricsServer
from simulation.fleet import Fleet

from .conftest import run

pytestmark = [pytest.mark.slow, pytest.mark.victoriametrics]


@dataclass
class Proxy:
    upstream: str
    push_back: bool
    in_flight: int = 0
    most_in_flight: int = 0
    refused: list[int] = field(default_factory=list)
    seen: set[bytes] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    company: threading.Event = field(default_factory=threading.Event)
    sent: int = 0  # body bytes written back, gzip-compressed when the client asked for it
    plain: int = 0  # the same bodies before compression
    fail_on: bytes = b""  # a query holding this text is refused (HTTP 422), as a failed evaluation is


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            del format, args

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def _serve(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            key = self.path.encode() + body
            with proxy.lock:
                first = key not in proxy.seen
                proxy.seen.add(key)
                status = 0
                if proxy.push_back and first and self.path.startswith("/api/v1/query"):
                    status = 429 if len(proxy.refused) % 2 == 0 else 503
                    proxy.refused.append(status)
                proxy.in_flight += 1
                proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
                if proxy.in_flight > 1:
                    proxy.company.set()
            done = False

            def done_before_the_last_write() -> None:
                # The client may send its next query as soon as it has this answer's last byte,
                # before this thread runs again: a query is counted out before that byte goes.
                nonlocal done
                with proxy.lock:
                    if not done:
                        proxy.in_flight -= 1
                        done = True

            try:
                if proxy.fail_on and proxy.fail_on in body:
                    refusal = b'{"status":"error","errorType":"execution","error":"cannot evaluate"}'
                    done_before_the_last_write()
                    self.send_response(422)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(refusal)))
                    self.end_headers()
                    self.wfile.write(refusal)
                    return
                if status:
                    done_before_the_last_write()
                    self.send_response(status)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                # Hold the first query a moment for a second one: a pool that never sends two at
                # once is caught without depending on timing.
                proxy.company.wait(timeout=1.0)
                answer = requests.request(
                    method,
                    proxy.upstream + self.path,
                    data=body,
                    headers={"Content-Type": self.headers.get("Content-Type", "")},
                    timeout=30,
                )
                body = answer.content
                zipped = "gzip" in self.headers.get("Accept-Encoding", "")
                payload = gzip.compress(body) if zipped else body
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
                if zipped:
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                # Counted before the write: once the client has the bytes, the count must hold them.
                with proxy.lock:
                    proxy.sent += len(payload)
                    proxy.plain += len(body)
                done_before_the_last_write()
                self.wfile.write(payload)
            finally:
                done_before_the_last_write()

    return Handler


@pytest.fixture
def proxy_for(victoria_standard: VictoriaMetricsServer) -> Iterator[type[Proxy]]:
    servers: list[ThreadingHTTPServer] = []

    class Started(Proxy):
        url: str

    def start(push_back: bool) -> Started:
        proxy = Started(victoria_standard.url, push_back)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
        return proxy

    yield start  # type: ignore[misc]
    for server in servers:
        server.shutdown()
        server.server_close()


def _findings(analysis: Analysis) -> list[tuple[str, str]]:
    return sorted((f.kind.value, f.workload.key()) for f in analysis.report.findings)


def test_independent_queries_run_side_by_side_within_the_bound(
    proxy_for: type[Proxy], standard_fleet: Fleet, victoria_analysis: Analysis
) -> None:
    proxy = proxy_for(False)  # type: ignore[call-arg]
    source = PrometheusSource(PrometheusConfig(proxy.url, concurrency=3))  # type: ignore[attr-defined]
    analysis = run(source, standard_fleet)
    assert _findings(analysis) == _findings(victoria_analysis)
    assert 1 < proxy.most_in_flight <= 3
    # Bytes are counted as they crossed the wire (compressed), bodies as decoded.
    assert source.client.stats.wire_bytes == proxy.sent < proxy.plain == source.client.stats.body_bytes


def test_a_refused_query_fails_the_run_once_every_query_sent_has_ended(
    proxy_for: type[Proxy], standard_fleet: Fleet
) -> None:
    """The snapshot reads each answer as it needs it: a refusal is raised when its answer is read,
    naming the query, and no query sent beside it is left running when the error comes out."""
    proxy = proxy_for(False)  # type: ignore[call-arg]
    proxy.fail_on = b"kube_pod_start_time"
    source = PrometheusSource(PrometheusConfig(proxy.url, concurrency=3))  # type: ignore[attr-defined]
    with pytest.raises(QueryError, match="kube_pod_start_time") as refused:
        run(source, standard_fleet)
    assert "cannot evaluate" in str(refused.value)
    assert proxy.in_flight == 0
    assert source._fetched == {}


def test_a_refused_fleet_size_keeps_metricsql_and_asks_the_fleet_in_four_parts(
    proxy_for: type[Proxy], standard_fleet: Fleet, victoria_analysis: Analysis
) -> None:
    """The fleet's size rides on the MetricsQL probe. A server that refuses the two together (a
    limit, a timeout) is asked the probe alone: MetricsQL is still used, the fleet goes out in four
    parts (the side that is safe for a large fleet), and the findings do not change."""
    proxy = proxy_for(False)  # type: ignore[call-arg]
    proxy.fail_on = b"+or+count%28%7B__name__"
    source = PrometheusSource(PrometheusConfig(proxy.url, concurrency=3))  # type: ignore[attr-defined]
    analysis = run(source, standard_fleet)
    assert _findings(analysis) == _findings(victoria_analysis)
    caps = analysis.snapshot.capabilities
    assert caps.metricsql and caps.fleet_series is None
    sorts = [
        key for key in proxy.seen if b"quantiles_over_time" in key and b"gpu_analyzer_aggregate" not in key
    ]
    assert len(sorts) == 4 * len(caps.util_metrics)


def test_a_server_that_pushes_back_slows_the_pool_and_the_run_still_completes(
    proxy_for: type[Proxy], standard_fleet: Fleet, victoria_analysis: Analysis
) -> None:
    proxy = proxy_for(True)  # type: ignore[call-arg]
    config = PrometheusConfig(proxy.url, concurrency=4, backoff_s=0.01)  # type: ignore[attr-defined]
    source = PrometheusSource(config)
    analysis = run(source, standard_fleet)
    assert _findings(analysis) == _findings(victoria_analysis)
    assert 429 in proxy.refused and 503 in proxy.refused
    assert source.client.limit.push_backs == len(proxy.refused)
    assert source.client.limit.narrowest == 1  # many refusals in a row narrow it to one at a time


def test_the_limit_halves_on_push_back_and_earns_slots_back() -> None:
    limit = AdaptiveLimit(4)
    limit.push_back()
    assert limit.width == 2
    limit.push_back()
    limit.push_back()
    assert limit.width == 1
    for _ in range(12):
        limit.success()
    assert limit.width == 4
    with pytest.raises(ValueError, match="at least 1"):
        AdaptiveLimit(0)
