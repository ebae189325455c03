"""The HTTP endpoints over a real socket, and the health the collection loop reports."""

from __future__ import annotations

import gzip
import http.client
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.cycle import Cycle
from exporter.exposition import Exposition
from exporter.http import MetricsServer
from exporter.loop import CollectionLoop
from exporter.nvml import Nvml
from exporter.podresources import PodResourcesClient
from exporter.pods import PodViewRefresher
from exporter.snapshot import Snapshot, SnapshotBuilder
from simulation.fake_nvml import FakeNvmlLibrary


class Served:
    """A cycle driven by hand, its loop (for health) and the HTTP server in front of them."""

    def __init__(self, library: FakeNvmlLibrary, clock: Any) -> None:
        self.clock = clock
        self.cycle = Cycle(Nvml(library), SnapshotBuilder("node-a", version="test"), wall_clock=clock)
        self.exposition = Exposition(lambda: self.loop.latest())
        self.loop = CollectionLoop(
            self.cycle.run, interval_s=1.0, monotonic=clock, after=self.exposition.prepare
        )
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


def test_metrics_negotiates_openmetrics_and_gzip(
    scenario: Callable[..., FakeNvmlLibrary], served: Callable[[FakeNvmlLibrary], Served]
) -> None:
    s = served(scenario("busy", gpus=1))
    s.loop.run_once()
    status, headers, body = s.get("/metrics", Accept="application/openmetrics-text;version=1.0.0")
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
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
def test_a_snapshot_is_encoded_once_and_then_served_as_bytes(
    scenario: Callable[..., FakeNvmlLibrary],
    served: Callable[[FakeNvmlLibrary], Served],
    headers: dict[str, str],
) -> None:
    s = served(scenario("busy", gpus=2))
    s.loop.run_once()
    status, first_headers, first = s.get("/metrics", **headers)
    assert status == 200
    assert first_headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert first_headers["Content-Encoding"] == "gzip"
    current = s.exposition.current()
    assert current is not None
    cached = current.body(openmetrics=True, compressed=True)
    for _ in range(3):
        assert s.get("/metrics", **headers)[2] == first == cached  # the very bytes encoded once
    assert gzip.decompress(first).endswith(b"# EOF\n")
    s.loop.run_once()  # a new snapshot is encoded in the variant scrapes asked for, off the scrape path
    fresh = s.exposition.current()
    assert fresh is not None and fresh is not current
    assert (True, True) in fresh._variants


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
