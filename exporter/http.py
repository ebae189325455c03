"""The HTTP endpoints: ``/metrics`` (pre-encoded bytes), ``/healthz`` (liveness), ``/readyz`` (NVML),
and ``/health`` as dcgm-exporter serves it.

Liveness and readiness answer different questions. ``/healthz`` says the process works — its
collection loop keeps running — so the kubelet restarts only an exporter that is stuck; a node whose
driver is loading or missing does not restart-loop the pod. ``/readyz`` says NVML answered the last
collection, recently. ``/health`` answers as dcgm-exporter's does (``internal/pkg/server/server.go``,
``Health``), for probes and monitors written against it: 200 and ``OK`` whenever the server answers,
with its ``X-Registry-Available: true`` and ``nosniff`` headers. With a web config, TLS and basic auth
guard every path except the probes, which the kubelet calls without credentials and which reveal
nothing but a status line.

The server is meant to be left running facing any client: connections time out when idle
(:class:`ConnectionLimits`), their number is capped (:mod:`exporter.connections`), and what goes wrong
on a connection is logged as one line in the configured log format, never as a traceback on stderr.
"""

from __future__ import annotations

import base64
import binascii
import io
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from exporter.connections import ClientErrorLog, ConnectionSlots
from exporter.webconfig import WebConfig

log = logging.getLogger(__name__)

Health = Callable[[], tuple[bool, str]]


class Content(Protocol):
    """What ``/metrics`` serves: :class:`exporter.exposition.Exposition` (or, in the benchmark's floor,
    fixed bytes)."""

    def render(self, accept: str = "", accept_encoding: str = "") -> tuple[bytes, str, str | None]: ...


_INDEX = b"gpu-exporter: /metrics, /healthz (liveness), /readyz (NVML readiness), /health (dcgm-exporter's)\n"
_PROBES = frozenset({"/healthz", "/readyz", "/health"})
#: dcgm-exporter's answer on /health: its body and headers once its metrics registry exists, which it
#: does from the start here (a collection that has not finished yet serves an empty exposition).
_DCGM_HEALTH_BODY = b"OK"
_DCGM_HEALTH_HEADERS = {"X-Content-Type-Options": "nosniff", "X-Registry-Available": "true"}


@dataclass(frozen=True)
class ConnectionLimits:
    """How long and how many connections the server keeps.

    ``idle_s`` is above Prometheus' own 5-minute idle timeout for kept-alive scrape connections
    (prometheus/common ``config/http_config.go``, ``defaultHTTPClientOptions``), so the server never
    closes a connection Prometheus still means to reuse, while a client that went away frees its
    thread. ``request_s`` bounds the TLS handshake, the wait for the first request on a new
    connection, each read of a request once it started, and each write of a response. ``backlog``
    holds a Prometheus HA pair, probes and ad-hoc clients arriving together (the standard library's
    default of 5 drops the rest, and their clients retry only after a second).
    """

    idle_s: float = 360.0
    request_s: float = 10.0
    max_connections: int = 64
    backlog: int = 128


def _peer(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(address)


def _classify(exc: BaseException, peer: str, request_s: float) -> tuple[str, int, str]:
    """(kind, log level, what happened) for an exception on a connection."""
    if isinstance(exc, ssl.SSLError) and not isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        # An untrusted certificate, plain HTTP on the TLS port, no common protocol version: the
        # scraper's configuration, worth a warning.
        return "tls", logging.WARNING, f"TLS with {peer} failed"
    if isinstance(exc, ConnectionError | ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return "reset", logging.INFO, f"client {peer} closed the connection mid-exchange"
    if isinstance(exc, TimeoutError):
        return "timeout", logging.INFO, f"client {peer} went silent for {request_s:g} s"
    if isinstance(exc, OSError):  # the network between us (unreachable, ...), not this process
        return "network", logging.INFO, f"connection with {peer} failed"
    return "error", logging.ERROR, f"serving {peer} failed"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Connections are tracked by ConnectionSlots; stop() waits for busy ones there, with a deadline.
    block_on_close = False
    # Prometheus keeps connections open; a restarted exporter must rebind at once.
    allow_reuse_address = True
    ssl_context: ssl.SSLContext | None = None
    limits = ConnectionLimits()
    slots: ConnectionSlots
    errors: ClientErrorLog

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.ssl_context is not None:
            # The handshake runs on the connection's own thread (Handler.handle), never in accept().
            sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.admit(request):
            self.errors.record(
                "refused",
                logging.WARNING,
                f"{self.limits.max_connections} connections open and all busy: "
                f"refused a connection from {_peer(client_address)}",
                client=_peer(client_address),
            )
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One log line for what went wrong on a connection (the base class prints a traceback)."""
        exc = sys.exc_info()[1]
        peer = _peer(client_address)
        if exc is None or self.slots.closed_by_us(request):
            log.debug("connection from %s closed by the server: %r", peer, exc)
            return
        detail = f"{type(exc).__name__}: {exc}"
        kind, level, what = _classify(exc, peer, self.limits.request_s)
        # Unexpected errors are counted per exception type, so two different bugs are two lines.
        key = f"{kind} {type(exc).__name__}" if kind == "error" else kind
        self.errors.record(kind, level, f"{what}: {detail}", key=key, client=peer, error=detail)
        if kind == "error":
            log.debug("traceback of the error serving %s", peer, exc_info=exc)  # for a bug report

    def service_actions(self) -> None:
        # serve_forever calls this on every poll (0.1 s): summaries of error storms go out on time.
        self.errors.flush()


class _Server6(_Server):
    address_family = socket.AF_INET6


def _handler(
    exposition: Content, liveness: Health, readiness: Health, web: WebConfig, limits: ConnectionLimits
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Prometheus scrapes
        # Headers and body go out as separate writes; without TCP_NODELAY the body would wait for
        # the client's delayed ACK (~40 ms) on every kept-alive request.
        disable_nagle_algorithm = True
        server_version = "gpu-exporter"
        server: _Server
        timeout = limits.request_s  # applied to the socket in setup(): the TLS handshake's bound
        _requests = 0

        def handle(self) -> None:
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()  # here, so a failure is one of this connection's
            super().handle()

        def handle_one_request(self) -> None:
            if not self._request_arrived():
                self.close_connection = True
                return
            self._requests += 1
            super().handle_one_request()

        def _request_arrived(self) -> bool:
            """Wait for the first byte of a request: ``request_s`` on a new connection, ``idle_s``
            between kept-alive requests. Meanwhile the connection is idle and may be evicted."""
            slots = self.server.slots
            if not slots.idle(self.connection):
                return False
            self.connection.settimeout(limits.idle_s if self._requests else limits.request_s)
            try:
                first = cast(io.BufferedReader, self.rfile).peek(1)
            except TimeoutError:
                if self._requests:
                    log.debug("closing %s: idle for %g s", _peer(self.client_address), limits.idle_s)
                    return False
                raise  # a new connection that never sent a request: logged as a timeout
            finally:
                wanted = slots.busy(self.connection)
            self.connection.settimeout(limits.request_s)
            return bool(first) and wanted

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            if path not in _PROBES and not self._authorised():
                return
            if path == "/metrics":
                body, content_type, encoding = exposition.render(
                    self.headers.get("Accept", ""), self.headers.get("Accept-Encoding", "")
                )
                self._send(200, content_type, body, encoding)
            elif path == "/health":
                self._send(200, "text/plain; charset=utf-8", _DCGM_HEALTH_BODY, extra=_DCGM_HEALTH_HEADERS)
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
            # The access log (log_request) and anything else the base class says: debug, not stderr.
            log.debug("%s " + format, _peer(self.client_address), *args)

        def log_error(self, format: str, *args: Any) -> None:
            # A malformed request, or a read or write that timed out: one counted line.
            peer = _peer(self.client_address)
            detail = format % args
            self.server.errors.record(
                "request", logging.INFO, f"request from {peer} failed: {detail}", client=peer, error=detail
            )

    return Handler


class MetricsServer:
    """Serves ``exposition`` on ``host:port`` from a background thread (one thread per connection,
    at most ``limits.max_connections``)."""

    def __init__(
        self,
        exposition: Content,
        liveness: Health,
        host: str,
        port: int,
        *,
        readiness: Health | None = None,
        web: WebConfig | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        web = web or WebConfig()
        limits = limits or ConnectionLimits()
        ssl_context = web.ssl_context()  # before binding: a bad file leaves no socket open
        server_class = _Server6 if ":" in host else _Server
        handler = _handler(exposition, liveness, readiness or liveness, web, limits)
        # An empty host means every interface: the DaemonSet's pod IP is what Prometheus scrapes.
        server = server_class((host or "0.0.0.0", port), handler, bind_and_activate=False)  # noqa: S104
        server.request_queue_size = limits.backlog  # listen()'s backlog, read by server_activate()
        try:
            server.server_bind()
            server.server_activate()
        except BaseException:
            server.server_close()
            raise
        server.limits = limits
        server.slots = ConnectionSlots(limits.max_connections)
        server.errors = ClientErrorLog(log)
        server.ssl_context = ssl_context
        self._server = server
        self._thread: threading.Thread | None = None

    @property
    def tls(self) -> bool:
        return self._server.ssl_context is not None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def backlog(self) -> int:
        """The listen backlog the socket was opened with."""
        return int(self._server.request_queue_size)

    @property
    def open_connections(self) -> int:
        return self._server.slots.open

    @property
    def idle_connections(self) -> int:
        """Open connections waiting for a request (the ones a new connection may displace)."""
        return self._server.slots.idle_count

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
        # Kept-alive connections are hung up; a request in flight gets the request timeout to finish.
        if not self._server.slots.close(self._server.limits.request_s):
            log.info("stopped with %d connections still busy", self._server.slots.open)
        self._server.errors.flush(final=True)
