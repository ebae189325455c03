"""The HTTP endpoints over a real socket, the health the collection loop reports, the server's
connection limits and error logging, and the web config file."""

from __future__ import annotations

import gzip
import http.client
import itertools
import logging
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bcrypt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import ConfigError
from exporter.connections import ClientErrorLog
from exporter.cycle import Cycle
from exporter.exposition import Encoder, Exposition
from exporter.http import ConnectionLimits, MetricsServer
from exporter.loop import CollectionLoop
from exporter.nvml import Nvml
from exporter.podresources import PodResourcesClient
from exporter.pods import PodViewRefresher
from exporter.snapshot import Snapshot, SnapshotBuilder
from exporter.webconfig import BasicAuth, load_web_config, parse_web_config
from simulation.fake_nvml import FakeNvmlLibrary


class Served:
    """A cycle driven by hand, its loop (for health) and the HTTP server in front of them."""

    def __init__(self, library: FakeNvmlLibrary, clock: Any) -> None:
        self.clock = clock
        self.cycle = Cycle(Nvml(library), SnapshotBuilder("node-a", version="test"), wall_clock=clock)
        self.exposition = Exposition(lambda: self.loop.latest())
        self.loop = CollectionLoop(self.cycle.run, interval_s=1.0, monotonic=clock)
        self.server = MetricsServer(
            self.exposition, self.loop.liveness, "127.0.0.1", 0, readiness=self.loop.health
        )
        self.server.start()
        self.connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=5)

    def get(self, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
        self.connection.request("GET", path, headers=headers)  # one kept-alive connection, as Prometheus
        response = self.connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()

    def close(self) -> None:
        self.connection.close()
        self.server.stop()


@pytest.fixture
def served(clock: Any) -> Iterator[Callable[[FakeNvmlLibrary], Served]]:
    started: list[Served] = []

    def make(library: FakeNvmlLibrary) -> Served:
        started.append(Served(library, clock))
        return started[-1]

    yield make
    for s in started:
        s.close()


def gpu_util_by_gpu(body: bytes) -> dict[str, float]:
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    samples = families["DCGM_FI_DEV_GPU_UTIL"].samples if "DCGM_FI_DEV_GPU_UTIL" in families else []
    return {s.labels["gpu"]: s.value for s in samples}


def gpu_up_by_gpu(body: bytes) -> dict[str, float]:
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    return {s.labels["gpu"]: s.value for s in families["gpu_up"].samples}


def test_every_scrape_succeeds_while_a_gpu_is_lost_and_back(
    scenario: Callable[..., FakeNvmlLibrary], served: Callable[[FakeNvmlLibrary], Served], clock: Any
) -> None:
    s = served(scenario("lost-gpu", interval_s=1.0))
    seen_down = False
    for step in range(15):
        clock.advance(0 if step == 0 else 1)
        s.loop.run_once()
        status, _, body = s.get("/metrics")
        assert status == 200
        utils, up = gpu_util_by_gpu(body), gpu_up_by_gpu(body)
        assert {"0", "2", "3"} <= utils.keys()  # the other GPUs' series, every time
        lost = 4 <= step < 12
        assert up["1"] == (0 if lost else 1)
        assert ("1" in utils) is not lost
        seen_down |= lost
        assert s.get("/readyz")[0] == 200  # a lost GPU is reported, not a sick exporter
    assert seen_down


def test_readiness_follows_nvml_and_liveness_does_not_restart_a_node_without_a_driver(
    scenario: Callable[..., FakeNvmlLibrary], served: Callable[[FakeNvmlLibrary], Served], clock: Any
) -> None:
    library = scenario("busy", gpus=1)
    s = served(library)
    status, _, body = s.get("/readyz")
    assert (status, body) == (503, b"no collection yet\n")
    assert s.get("/healthz")[0] == 200  # starting up is alive
    assert s.get("/metrics")[0] == 200  # nothing collected yet is still a valid, empty exposition
    s.loop.run_once()
    assert s.get("/readyz") == (200, s.get("/readyz")[1], b"ok\n")
    library.fail("nvmlDeviceGetCount", "DRIVER_NOT_LOADED")
    library.fail("nvmlInit", "DRIVER_NOT_LOADED")
    for _ in range(40):  # far past the staleness limit: a driver that stays away
        clock.advance(1)
        s.loop.run_once()
    status, _, body = s.get("/readyz")
    assert status == 503
    assert b"DRIVER_NOT_LOADED" in body
    assert b"NVIDIA container runtime" in body  # the message says what to check
    status, _, body = s.get("/healthz")
    assert status == 200, body  # the kubelet must not restart-loop the pod: a restart loads no driver
    status, _, body = s.get("/metrics")
    assert status == 200
    assert gpu_up_by_gpu(body) == {"0": 0.0}


def test_health_answers_as_dcgm_exporters_does(
    scenario: Callable[..., FakeNvmlLibrary], served: Callable[[FakeNvmlLibrary], Served], clock: Any
) -> None:
    """dcgm-exporter's /health (internal/pkg/server/server.go, Health): 200, ``OK``, and its headers,
    whatever the collection says; probes and monitors written for it keep working."""
    library = scenario("busy", gpus=1)
    s = served(library)

    def health() -> tuple[int, str, str, str, bytes]:
        status, headers, body = s.get("/health")
        return (
            status,
            headers["Content-Type"],
            headers["X-Registry-Available"],
            headers["X-Content-Type-Options"],
            body,
        )

    dcgm = (200, "text/plain; charset=utf-8", "true", "nosniff", b"OK")
    assert health() == dcgm  # before the first collection
    s.loop.run_once()
    assert health() == dcgm
    library.fail("nvmlInit", "DRIVER_NOT_LOADED")
    library.fail("nvmlDeviceGetCount", "DRIVER_NOT_LOADED")
    clock.advance(1)
    s.loop.run_once()
    assert s.get("/readyz")[0] == 503
    assert health() == dcgm  # not ready, yet answering: what dcgm-exporter's /health says too


def test_liveness_fails_only_when_the_loop_is_stuck() -> None:
    now = [0.0]
    collect = StubCollect()
    collect.results = [snapshot(False, "nvmlInit: LIBRARY_NOT_FOUND")]
    loop = CollectionLoop(collect, interval_s=5.0, monotonic=lambda: now[0])
    loop.run_once()
    now[0] += 29
    assert loop.liveness()[0]
    now[0] += 2  # no cycle finished for 31 s: the loop is stuck
    assert loop.liveness() == (False, "no collection cycle finished for 31s")


def test_metrics_serves_the_text_format_and_negotiates_gzip(
    scenario: Callable[..., FakeNvmlLibrary], served: Callable[[FakeNvmlLibrary], Served]
) -> None:
    s = served(scenario("busy", gpus=1))
    s.loop.run_once()
    status, headers, body = s.get("/metrics", Accept="application/openmetrics-text;version=1.0.0")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in body and b"# EOF" not in body
    status, headers, body = s.get("/metrics", **{"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    assert b"DCGM_FI_DEV_GPU_UTIL{" in gzip.decompress(body)


#: The headers Prometheus 2.x and 3.x send on a scrape (scrape.go's default scrape protocols).
PROMETHEUS_2 = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
PROMETHEUS_3 = {
    "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=1.0.0;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


@pytest.mark.parametrize("headers", [PROMETHEUS_2, PROMETHEUS_3], ids=["prometheus-2", "prometheus-3"])
def test_a_snapshot_is_encoded_by_its_first_scrape_once_and_then_served_as_bytes(
    scenario: Callable[..., FakeNvmlLibrary],
    served: Callable[[FakeNvmlLibrary], Served],
    headers: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encodings: list[Snapshot] = []
    plain = Encoder.plain

    def counted(encoder: Encoder, snapshot: Snapshot) -> bytes:
        encodings.append(snapshot)
        return plain(encoder, snapshot)

    monkeypatch.setattr(Encoder, "plain", counted)
    s = served(scenario("busy", gpus=2))
    s.loop.run_once()
    s.loop.run_once()
    assert encodings == []  # collections encode nothing: a snapshot no scrape asks for costs nothing
    status, first_headers, first = s.get("/metrics", **headers)
    assert status == 200
    assert first_headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert first_headers["Content-Encoding"] == "gzip"
    current = s.exposition.current()
    assert current is not None and encodings == [current.snapshot]
    cached = current.body(compressed=True)
    for _ in range(3):
        assert s.get("/metrics", **headers)[2] == first == cached  # the very bytes encoded once
    assert b"\nDCGM_FI_DEV_GPU_UTIL{" in gzip.decompress(first)
    assert len(encodings) == 1

    s.loop.run_once()  # a new snapshot waits, unencoded, for the scrape that asks for it
    fresh = s.exposition.current()
    assert fresh is not None and fresh is not current
    assert not fresh.encoded(compressed=True)
    # Scrapers racing for it (a Prometheus pair, each on its own connection) encode it once.
    port = s.server.port

    def scrape(_: int) -> bytes:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            connection.request("GET", "/metrics", headers=headers)
            return connection.getresponse().read()
        finally:
            connection.close()

    with ThreadPoolExecutor(6) as pool:
        bodies = set(pool.map(scrape, range(6)))
    assert bodies == {fresh.body(compressed=True)}
    assert encodings == [current.snapshot, fresh.snapshot]


def test_scrapes_never_call_nvml_or_the_kubelet(
    scenario: Callable[..., FakeNvmlLibrary], kubelet: Any, clock: Any
) -> None:
    library = scenario("busy", gpus=2)
    kubelet.assign(("serving", "api-0", "main", "nvidia.com/gpu", [library.gpus[0].uuid]))
    pods = PodViewRefresher(PodResourcesClient(kubelet.socket_path), pod_log_dir=None)
    assert pods.refresh()
    cycle = Cycle(Nvml(library), SnapshotBuilder("node-a", version="test"), pods=pods, wall_clock=clock)
    loop = CollectionLoop(cycle.run, interval_s=1.0, monotonic=clock)
    server = MetricsServer(Exposition(loop.latest), loop.health, "127.0.0.1", 0)
    server.start()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        loop.run_once()
        nvml_calls, kubelet_calls = library.calls, kubelet.calls
        bodies = set()
        for _ in range(5):
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            assert response.status == 200
            bodies.add(response.read())
        assert (library.calls, kubelet.calls) == (nvml_calls, kubelet_calls)
        (body,) = bodies  # the same snapshot, served as it was collected
        assert b'pod="api-0"' in body
    finally:
        connection.close()
        server.stop()


def test_unknown_paths_are_404(
    scenario: Callable[..., FakeNvmlLibrary], served: Callable[[FakeNvmlLibrary], Served]
) -> None:
    s = served(scenario("idle", gpus=1))
    assert s.get("/metrics/extra")[0] == 404
    assert s.get("/")[0] == 200


class StubCollect:
    def __init__(self) -> None:
        self.results: list[Snapshot | Exception] = []

    def __call__(self) -> Snapshot:
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def snapshot(ok: bool, error: str | None = None) -> Snapshot:
    return Snapshot(taken_at=0.0, ok=ok, duration_s=0.0, error=error)


@pytest.mark.parametrize(
    ("results", "age", "healthy", "reason"),
    [
        pytest.param([], 0, False, "no collection yet", id="before-the-first-collection"),
        pytest.param([snapshot(True)], 5, True, "ok", id="recent-success"),
        pytest.param(
            [snapshot(True)], 31, False, "last successful collection 31s ago", id="stale-loop-stuck"
        ),
        pytest.param(
            [snapshot(True), snapshot(False, "nvmlInit: DRIVER_NOT_LOADED")],
            0,
            False,
            "nvmlInit: DRIVER_NOT_LOADED",
            id="nvml-unavailable",
        ),
        pytest.param(
            [snapshot(True), RuntimeError("bug")],
            0,
            False,
            "collection raised RuntimeError: bug",
            id="collection-raised",
        ),
        pytest.param([snapshot(False, "x"), snapshot(True)], 0, True, "ok", id="recovered"),
    ],
)
def test_health(results: list[Any], age: float, healthy: bool, reason: str) -> None:
    now = [0.0]
    collect = StubCollect()
    collect.results = list(results)
    loop = CollectionLoop(collect, interval_s=5.0, monotonic=lambda: now[0])
    for _ in results:
        loop.run_once()
    now[0] += age
    assert loop.health() == (healthy, reason)


def test_a_failed_collection_keeps_the_last_snapshot() -> None:
    collect = StubCollect()
    good = snapshot(True)
    collect.results = [good, RuntimeError("bug")]
    loop = CollectionLoop(collect, interval_s=5.0)
    loop.run_once()
    loop.run_once()
    assert loop.latest() is good


def test_loop_runs_on_a_fixed_schedule() -> None:
    calls: list[float] = []
    done = threading.Event()

    def collect() -> Snapshot:
        calls.append(time.monotonic())
        if len(calls) == 4:
            done.set()
        return snapshot(True)

    loop = CollectionLoop(collect, interval_s=0.05)
    loop.start()
    assert done.wait(5)
    loop.stop()
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert all(0.03 < gap < 0.5 for gap in gaps[:3])


# --- a server left running: connections, their limits, and what their failures log ---------------


class Fixed:
    """``/metrics`` content of fixed bytes; ``fail`` makes rendering raise, as a bug would."""

    def __init__(self, body: bytes = b"x 1\n", fail: Exception | None = None) -> None:
        self.body, self.fail = body, fail

    def render(self, accept: str = "", accept_encoding: str = "") -> tuple[bytes, str, str | None]:
        if self.fail is not None:
            raise self.fail
        return self.body, "text/plain; version=0.0.4", None


@contextmanager
def running(
    limits: ConnectionLimits | None = None, content: Fixed | None = None, **kwargs: Any
) -> Iterator[MetricsServer]:
    server = MetricsServer(content or Fixed(), lambda: (True, "ok"), "127.0.0.1", 0, limits=limits, **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def connect(server: MetricsServer, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def read_response(sock: socket.socket) -> bytes:
    """One HTTP/1.1 response with a Content-Length, read off a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head)[1])  # type: ignore[index]
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def closed_by_server(sock: socket.socket) -> bool:
    """Waits (up to the socket's timeout) for the server to close its end."""
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout() -> None:
    with running(ConnectionLimits(idle_s=0.2)) as server, connect(server) as sock:
        for _ in range(2):  # kept alive between requests, as Prometheus scrapes
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200")
        assert closed_by_server(sock)  # then idle: closed, its thread freed
        assert wait_until(lambda: server.open_connections == 0)


def test_a_connection_that_stalls_before_or_inside_a_request_is_cut_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = ConnectionLimits(idle_s=600, request_s=0.2)  # the idle timeout is not what closes them
    with (
        caplog.at_level(logging.INFO, logger="exporter.http"),
        running(limits) as server,
        connect(server) as silent,
        connect(server) as stalled,
    ):
        stalled.sendall(b"GET /metrics HTTP/1.1\r\nHost:")
        assert closed_by_server(silent)
        assert closed_by_server(stalled)
    messages = [r.getMessage() for r in caplog.records]
    assert any("went silent for 0.2 s" in m for m in messages), messages
    assert any("timed out" in m for m in messages), messages


def test_two_hundred_idle_connections_hold_no_more_threads_than_the_cap() -> None:
    limits = ConnectionLimits(request_s=60, max_connections=16)
    with running(limits) as server:
        baseline = threading.active_count()
        clients: list[socket.socket] = []
        try:
            for _ in range(200):
                clients.append(connect(server))
            # The oldest idle connections make room for new ones: all but the last 16 are closed.
            assert all(closed_by_server(c) for c in clients[:-16])
            assert wait_until(lambda: threading.active_count() <= baseline + 16)
            assert server.open_connections == 16
            with connect(server) as scraper:  # Prometheus is never locked out by idle connections
                scraper.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
                assert read_response(scraper).startswith(b"HTTP/1.1 200")
        finally:
            for c in clients:
                c.close()


def test_when_every_connection_is_busy_a_new_one_is_refused_cleanly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = ConnectionLimits(request_s=60, max_connections=4)
    with caplog.at_level(logging.INFO, logger="exporter.http"), running(limits) as server:
        busy = [connect(server) for _ in range(4)]
        try:
            for c in busy:
                c.sendall(b"GET /metrics HTTP/1.1\r\n")  # a request started, never finished
            assert wait_until(lambda: server.open_connections == 4 and server.idle_connections == 0)
            with connect(server) as refused:
                assert closed_by_server(refused)
            busy.pop().close()
            assert wait_until(lambda: server.open_connections == 3)
            with connect(server) as served:
                served.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                assert read_response(served).startswith(b"HTTP/1.1 200")
        finally:
            for c in busy:
                c.close()
    assert any("4 connections open and all busy: refused" in r.getMessage() for r in caplog.records)


def test_the_listen_backlog_holds_fifty_connections_arriving_at_once() -> None:
    server = MetricsServer(Fixed(), lambda: (True, "ok"), "127.0.0.1", 0)
    waiting: list[socket.socket] = []
    try:
        assert server.backlog == 128
        # Not accepting yet: every connection must fit in the kernel's queue. With the standard
        # library's backlog of 5, the 7th SYN is dropped and its connect() never completes here.
        for _ in range(50):
            waiting.append(connect(server, timeout=5))
    finally:
        for c in waiting:
            c.close()
        server.stop()

    with running() as server:
        start = threading.Barrier(50)

        def scrape(_: int) -> int:
            start.wait()
            connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            try:
                connection.request("GET", "/metrics")
                response = connection.getresponse()
                response.read()
                return response.status
            finally:
                connection.close()

        with ThreadPoolExecutor(50) as pool:
            assert list(pool.map(scrape, range(50))) == [200] * 50


def reset_mid_response(port: int, context: ssl.SSLContext | None = None) -> None:
    """A client that asks for /metrics, reads the first bytes and resets (SO_LINGER 0 close)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
    assert sock.recv(16)
    sock.close()


def test_clients_resetting_mid_response_log_one_line_not_tracebacks(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    big = Fixed(b"x" * 4_000_000)  # far more than socket buffers: the reset lands mid-write
    with caplog.at_level(logging.DEBUG, logger="exporter.http"), running(content=big) as server:
        for _ in range(30):
            reset_mid_response(server.port)
        assert wait_until(lambda: server.open_connections == 0)
    assert capsys.readouterr().err == ""  # socketserver printed a traceback per reset
    resets = [r for r in caplog.records if getattr(r, "kind", None) == "reset"]
    assert len(resets) <= 2  # the first, then one summary of the rest
    assert resets[0].levelno == logging.INFO
    assert "\n" not in resets[0].getMessage()
    assert 1 + sum(getattr(r, "repeats", 0) for r in resets) == 30  # every reset counted


def test_an_unexpected_error_is_one_line_with_its_type_and_the_traceback_only_at_debug(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        caplog.at_level(logging.DEBUG, logger="exporter.http"),
        running(content=Fixed(fail=RuntimeError("encoder bug"))) as server,
        connect(server) as sock,
    ):
        client_port = sock.getsockname()[1]
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        assert closed_by_server(sock)
    assert capsys.readouterr().err == ""
    errors = [r for r in caplog.records if r.levelno >= logging.INFO and r.name == "exporter.http"]
    assert [r.getMessage() for r in errors] == [
        f"serving 127.0.0.1:{client_port} failed: RuntimeError: encoder bug"
    ]
    assert not any(r.exc_info for r in errors)
    assert any(r.exc_info and r.levelno == logging.DEBUG for r in caplog.records)


def test_an_error_storm_is_logged_once_then_summarised_once_a_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    errors = ClientErrorLog(logging.getLogger("exporter.test"), window_s=60, monotonic=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="exporter.test"):
        for i in range(30):
            errors.record("reset", logging.INFO, f"client 10.0.0.{i} reset", client=f"10.0.0.{i}")
            errors.flush()
            now[0] += 1
        assert caplog.messages == ["client 10.0.0.0 reset"]
        now[0] = 61
        errors.flush()  # the window ended: one summary naming the last one and the count
        assert caplog.messages[-1] == "client 10.0.0.29 reset (29 more like this in the last 61 s)"
        summary = caplog.records[-1]
        assert (summary.repeats, summary.client) == (29, "10.0.0.29")  # type: ignore[attr-defined]
        errors.record("reset", logging.INFO, "client 10.0.0.1 reset")  # counted in the new window
        errors.flush(final=True)  # the server stops: nothing counted is left unsaid
        assert caplog.messages[-1] == "client 10.0.0.1 reset (1 more like this in the last 0.0 s)"
        now[0] += 1
        errors.record("reset", logging.INFO, "client 10.0.0.2 reset")  # a new storm starts afresh
        assert caplog.messages[-1] == "client 10.0.0.2 reset"
        assert len(caplog.messages) == 4


# --- the web config file -----------------------------------------------------------------------


def test_a_web_config_that_is_not_utf8_is_one_line_naming_the_file(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_bytes(b"basic_auth_users:\n  caf\xe9: x\n")
    with pytest.raises(ConfigError) as error:
        load_web_config(web)
    assert str(error.value) == f"--web.config.file {web}: not UTF-8 text (byte 0xe9 at offset 23)"


@pytest.mark.parametrize(
    "hashed",
    [
        pytest.param("$2y$10$tooshort", id="truncated"),
        pytest.param("$2y$99$" + "a" * 53, id="cost-out-of-range"),
        pytest.param("$2y$10$" + "a" * 52 + "!", id="not-bcrypt-base64"),
        pytest.param("s3cret", id="plain-password"),
    ],
)
def test_a_malformed_bcrypt_hash_is_refused_at_load_naming_user_and_file(hashed: str) -> None:
    with pytest.raises(ConfigError, match=r"^web\.yml: basic_auth_users\.prometheus: expected a bcrypt hash"):
        parse_web_config(f"basic_auth_users:\n  prometheus: '{hashed}'\n", "web.yml")


def test_an_unknown_user_costs_a_bcrypt_check_like_a_wrong_password() -> None:
    cheap = bcrypt.hashpw(b"a", bcrypt.gensalt(rounds=4))
    dear = bcrypt.hashpw(b"b", bcrypt.gensalt(rounds=6))
    calls: list[bytes] = []

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return bcrypt.checkpw(password, hashed)

    auth = BasicAuth({"alice": cheap, "bob": dear}, checkpw=counting)
    assert not auth.check("mallory", "b")  # bob's password under a made-up name: still refused
    assert calls == [dear]  # checked against the slowest configured hash, not skipped
    assert not auth.check("alice", "wrong")
    assert auth.check("alice", "a")
    assert auth.check("alice", "a")  # remembered: no second bcrypt check
    assert calls == [dear, cheap, cheap]


@pytest.mark.parametrize("missing", ["cert_file", "key_file", "client_ca_file"])
def test_a_missing_tls_file_is_named(tmp_path: Path, missing: str) -> None:
    files = {"cert_file": "tls.crt", "key_file": "tls.key", "client_ca_file": "ca.crt"}
    for key, name in files.items():
        if key != missing:
            (tmp_path / name).write_text("not read: the missing file is found first\n")
    web = tmp_path / "web.yml"
    web.write_text(
        "tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n"
        + "".join(f"  {key}: {name}\n" for key, name in files.items())  # relative: next to web.yml
    )
    with pytest.raises(ConfigError) as error:
        load_web_config(web)
    expected = f"{web}: tls_server_config.{missing} {tmp_path / files[missing]}: No such file or directory"
    assert str(error.value) == expected
