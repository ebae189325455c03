"""The HTTP endpoints: ``/metrics`` (pre-encoded bytes), ``/healthz`` (liveness), ``/readyz`` (NVML).

Liveness and readiness answer different questions. ``/healthz`` says the process works — its
collection loop keeps running — so the kubelet restarts only an exporter that is stuck; a node whose
driver is loading or missing does not restart-loop the pod. ``/readyz`` says NVML answered the last
collection, recently. With a web config, TLS and basic auth guard every path except the two probes,
which the kubelet calls without credentials and which reveal nothing but a status line.
"""

from __future__ import annotations

import base64
import binascii
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import urlsplit

from exporter.webconfig import WebConfig

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, str]]


class Content(Protocol):
    """What ``/metrics`` serves: :class:`exporter.exposition.Exposition` (or, in the benchmark's floor,
    fixed bytes)."""

    def render(self, accept: str = "", accept_encoding: str = "") -> tuple[bytes, str, str | None]: ...


_INDEX = b"gpu-exporter: /metrics, /healthz (liveness), /readyz (NVML readiness)\n"
_PROBES = frozenset({"/healthz", "/readyz"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Prometheus keeps connections open; a restarted exporter must rebind at once.
    allow_reuse_address = True
    ssl_context: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.ssl_context is not None:
            # The handshake runs on the connection's own thread (first read), never in accept().
            sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address


class _Server6(_Server):
    address_family = socket.AF_INET6


def _handler(
    exposition: Content, liveness: Health, readiness: Health, web: WebConfig
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Prometheus scrapes
        # Headers and body go out as separate writes; without TCP_NODELAY the body would wait for
        # the client's delayed ACK (~40 ms) on every kept-alive request.
        disable_nagle_algorithm = True
        server_version = "gpu-exporter"

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path not in _PROBES and not self._authorised():
                return
            if path == "/metrics":
                body, content_type, encoding = exposition.render(
                    self.headers.get("Accept", ""), self.headers.get("Accept-Encoding", "")
                )
                self._send(200, content_type, body, encoding)
            elif path in _PROBES:
                ok, reason = (liveness if path == "/healthz" else readiness)()
                self._send(200 if ok else 503, "text/plain; charset=utf-8", f"{reason}\n".encode())
            elif path == "/":
                self._send(200, "text/plain; charset=utf-8", _INDEX)
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found\n")

        def _authorised(self) -> bool:
            auth = web.basic_auth
            if auth is None:
                return True
            scheme, _, encoded = self.headers.get("Authorization", "").partition(" ")
            if scheme.lower() == "basic":
                try:
                    user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
                except (binascii.Error, UnicodeDecodeError):
                    sep = ""
                if sep and auth.check(user, password):
                    return True
            self._send(
                401,
                "text/plain; charset=utf-8",
                b"Unauthorized\n",
                extra={"WWW-Authenticate": 'Basic realm="gpu-exporter"'},
            )
            return False

        def _send(
            self,
            status: int,
            content_type: str,
            body: bytes,
            encoding: str | None = None,
            extra: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            if encoding:
                self.send_header("Content-Encoding", encoding)
            for name, value in {**web.headers, **(extra or {})}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


class MetricsServer:
    """Serves ``exposition`` on ``host:port`` from a background thread (one thread per connection)."""

    def __init__(
        self,
        exposition: Content,
        liveness: Health,
        host: str,
        port: int,
        *,
        readiness: Health | None = None,
        web: WebConfig | None = None,
    ) -> None:
        web = web or WebConfig()
        server_class = _Server6 if ":" in host else _Server
        handler = _handler(exposition, liveness, readiness or liveness, web)
        # An empty host means every interface: the DaemonSet's pod IP is what Prometheus scrapes.
        self._server = server_class((host or "0.0.0.0", port), handler)  # noqa: S104
        self._server.ssl_context = web.ssl_context()
        self._thread: threading.Thread | None = None

    @property
    def tls(self) -> bool:
        return self._server.ssl_context is not None

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
