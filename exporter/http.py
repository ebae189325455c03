"""The HTTP endpoints: ``/metrics`` (Prometheus text or OpenMetrics) and ``/healthz``."""

from __future__ import annotations

import gzip
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, str]]
_INDEX = b"gpu-exporter: /metrics, /healthz\n"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Prometheus keeps connections open; a restarted exporter must rebind at once.
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def _handler(registry: CollectorRegistry, health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Prometheus scrapes
        # Headers and body go out as separate writes; without TCP_NODELAY the body would wait for
        # the client's delayed ACK (~40 ms) on every kept-alive request.
        disable_nagle_algorithm = True
        server_version = "gpu-exporter"

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path == "/metrics":
                self._metrics()
            elif path == "/healthz":
                ok, reason = health()
                self._send(200 if ok else 503, "text/plain; charset=utf-8", f"{reason}\n".encode())
            elif path == "/":
                self._send(200, "text/plain; charset=utf-8", _INDEX)
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found\n")

        def _metrics(self) -> None:
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(registry)
            encoding = None
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                body = gzip.compress(body, compresslevel=6)
                encoding = "gzip"
            self._send(200, content_type, body, encoding)

        def _send(self, status: int, content_type: str, body: bytes, encoding: str | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


class MetricsServer:
    """Serves the registry on ``host:port`` from a background thread (one thread per connection)."""

    def __init__(self, registry: CollectorRegistry, health: Health, host: str, port: int) -> None:
        server = _Server6 if ":" in host else _Server
        # An empty host means every interface: the DaemonSet's pod IP is what Prometheus scrapes.
        self._server = server((host or "0.0.0.0", port), _handler(registry, health))  # noqa: S104
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        # A short poll keeps shutdown prompt; an idle wake-up every 0.1 s costs nothing measurable.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.1,), name="http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for serve_forever, which must have started
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
