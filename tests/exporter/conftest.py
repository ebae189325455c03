"""Fixtures for the exporter tests: a controllable clock, scripted NVML fakes and a real kubelet
PodResources gRPC server on a temporary unix socket."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from exporter._proto import podresources_pb2 as pb
from exporter._proto import podresources_pb2_grpc as pb_grpc
from simulation.fake_nvml import FakeGpu, FakeNvmlLibrary
from simulation.gpu_scenarios import build_scenario


class FakeClock:
    """Wall-clock stand-in: starts at a fixed Unix time and moves only when told (or when slept on)."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def scenario(clock: FakeClock) -> Callable[..., FakeNvmlLibrary]:
    """``scenario("lost-gpu", interval_s=1.0)``: a scripted NVML driven by the test's clock."""

    def make(name: str, **kwargs: Any) -> FakeNvmlLibrary:
        return build_scenario(name, clock=clock, sleep=clock.sleep, **kwargs)

    return make


@pytest.fixture
def fake_gpus(clock: FakeClock) -> Callable[..., FakeNvmlLibrary]:
    """``fake_gpus(FakeGpu(0), FakeGpu(1, ...))``: a fake binding with hand-made devices."""

    def make(*gpus: FakeGpu) -> FakeNvmlLibrary:
        return FakeNvmlLibrary(gpus, clock=clock, sleep=clock.sleep)

    return make


@pytest.fixture
def free_port() -> Callable[[], int]:
    def pick() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    return pick


class FakeKubelet(pb_grpc.PodResourcesListerServicer):
    """The kubelet's PodResourcesLister, served for real over gRPC; tests set what it answers."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.response = pb.ListPodResourcesResponse()
        self.calls = 0
        self.hanging = False
        self.released = threading.Event()

    def List(
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        self.calls += 1
        if self.hanging:
            self.released.wait(30)
        return self.response

    def assign(self, *containers: tuple[str, str, str, str, list[str]]) -> None:
        """Answer with these (namespace, pod, container, resource, device ids) assignments."""
        pods: dict[tuple[str, str], pb.PodResources] = {}
        for namespace, pod, container, resource, device_ids in containers:
            entry = pods.setdefault((namespace, pod), pb.PodResources(name=pod, namespace=namespace))
            entry.containers.append(
                pb.ContainerResources(
                    name=container,
                    devices=[pb.ContainerDevices(resource_name=resource, device_ids=device_ids)],
                )
            )
        self.response = pb.ListPodResourcesResponse(pod_resources=list(pods.values()))


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    # Unix socket paths are limited to ~108 bytes: keep it short rather than under pytest's tmp_path.
    directory = Path(tempfile.mkdtemp(prefix="kubelet-"))
    fake = FakeKubelet(directory / "kubelet.sock")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_PodResourcesListerServicer_to_server(fake, server)
    server.add_insecure_port(f"unix://{fake.socket_path}")
    server.start()
    try:
        yield fake
    finally:
        fake.released.set()
        server.stop(grace=None).wait()
        shutil.rmtree(directory, ignore_errors=True)
