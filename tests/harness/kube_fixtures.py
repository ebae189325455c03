"""Pytest fixtures for an emulated Kubernetes API server per test (see harness.kube_emulator).

Conftests that need a cluster import ``cluster`` (and the loop it runs on) from here.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import kmock
import pytest

from harness.kube_emulator import ApiServer, EmulatedCluster, write_kubeconfig


@pytest.fixture(scope="session")
def _emulator_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kmock-emulator", daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


@contextmanager
def emulated_cluster(loop: asyncio.AbstractEventLoop, directory: Path) -> Iterator[EmulatedCluster]:
    """A fresh, empty emulated API server on 127.0.0.1, run on ``loop``, with a kubeconfig pointing at
    it written into ``directory``."""
    server = ApiServer()
    http = kmock.Server(server)

    async def start() -> str:
        await server.__aenter__()
        await http.__aenter__()
        return str(http.url).rstrip("/")

    async def stop() -> None:
        await http.__aexit__(None, None, None)
        await server.__aexit__(None, None, None)

    url = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
    emulated = EmulatedCluster(server, url, write_kubeconfig(directory / "kubeconfig", url), loop)
    emulated.declare(
        "HorizontalPodAutoscaler",
        "ConfigMap",
        "Lease",
        "Event",
        "Deployment",
        "StatefulSet",
        "Node",
        "ReplicaSet",
        "Job",
    )
    try:
        yield emulated
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=30)


@pytest.fixture
def cluster(_emulator_loop: asyncio.AbstractEventLoop, tmp_path: Path) -> Iterator[EmulatedCluster]:
    """A fresh, empty emulated API server per test (see :func:`emulated_cluster`)."""
    with emulated_cluster(_emulator_loop, tmp_path) as emulated:
        yield emulated
