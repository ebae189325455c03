"""Proxy variables still apply though the session reads the environment once per server.

One small HTTP server plays both parts: a query sent through it as a proxy arrives with the whole
URL in its request line, a query sent straight to it with the path alone.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig

AT = datetime(2026, 1, 5, tzinfo=UTC)
ANSWER = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


class _Server(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lines: list[str] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.lines.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, format: str, *args: object) -> None:
        del format, args  # quiet


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    started = _Server()
    threading.Thread(target=started.serve_forever, daemon=True).start()
    yield started
    started.shutdown()
    started.server_close()


def test_proxy_variables_apply_to_every_request(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", server.url)
    client = PrometheusClient(PrometheusConfig(server.url, retries=0))
    client.vector("vector(1)", AT)
    client.vector("vector(2)", AT)
    assert server.lines == [f"{server.url}/api/v1/query"] * 2  # both through the proxy


def test_no_proxy_sends_queries_straight_to_the_server(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    client = PrometheusClient(PrometheusConfig(server.url, retries=0))
    client.vector("vector(1)", AT)
    client.vector("vector(2)", AT)
    assert server.lines == ["/api/v1/query"] * 2
