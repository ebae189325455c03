"""The XID event thread: counting, rebuilding its event set, and staying out of NVML while paused."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from exporter.nvml import Nvml
from exporter.xid import XidCounter, XidWatcher
from simulation.fake_nvml import FakeGpu, FakeHandle, FakeNvmlLibrary


def watched(library: FakeNvmlLibrary, wait_ms: int = 100) -> tuple[Nvml, XidCounter, XidWatcher]:
    nvml = Nvml(library)
    nvml.init()
    counter = XidCounter()
    watcher = XidWatcher(nvml, counter, wait_ms=wait_ms)
    watcher.watch(nvml.generation, [(FakeHandle(g.index), g.uuid) for g in library.gpus])
    return nvml, counter, watcher


def test_counts_each_xid_per_gpu(fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any) -> None:
    library = fake_gpus(FakeGpu(0, xids=((1.0, 13), (2.0, 13), (3.0, 31))), FakeGpu(1))
    _, counter, watcher = watched(library)
    clock.advance(5)
    while watcher.poll_once():
        pass
    uuid = library.gpus[0].uuid
    assert counter.counts() == {(uuid, 13): 2, (uuid, 31): 1}
    assert counter.last() == {uuid: 31}


def test_event_set_is_rebuilt_after_nvml_reinit(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    library = fake_gpus(FakeGpu(0, xids=((10.0, 48),)))
    nvml, counter, watcher = watched(library)
    assert not watcher.poll_once()
    creates = library.calls
    nvml.init()  # a new NVML session: the old event set is void
    watcher.watch(nvml.generation, [(FakeHandle(0), library.gpus[0].uuid)])
    clock.advance(10)
    assert watcher.poll_once()
    assert library.calls > creates
    assert counter.counts() == {(library.gpus[0].uuid, 48): 1}


def test_lost_gpu_during_wait_drops_the_set_until_reinit(fake_gpus: Callable[..., FakeNvmlLibrary]) -> None:
    library = fake_gpus(FakeGpu(0))
    nvml, _, watcher = watched(library, wait_ms=1)
    library.fail("nvmlEventSetWait", "GPU_IS_LOST", times=1)
    assert not watcher.poll_once()
    assert nvml.needs_init
    assert not watcher.poll_once()  # a fresh set, no error this time


def test_paused_keeps_the_thread_out_of_nvml() -> None:
    library = FakeNvmlLibrary([FakeGpu(0)])  # real clock and sleep: the thread really waits
    _, _, watcher = watched(library, wait_ms=50)
    inside = threading.Event()
    original = library.nvmlEventSetWait

    def wait(event_set: Any, timeout_ms: int) -> Any:
        inside.set()
        try:
            return original(event_set, timeout_ms)
        finally:
            inside.clear()

    library.nvmlEventSetWait = wait  # type: ignore[method-assign]
    watcher.start()
    try:
        deadline = time.monotonic() + 5
        while not inside.is_set() and time.monotonic() < deadline:
            time.sleep(0.005)
        with watcher.paused():
            assert not inside.is_set()
            time.sleep(0.15)  # several wait periods: the thread must not start another wait
            assert not inside.is_set()
    finally:
        watcher.stop()


def test_request_pause_parks_the_thread_without_blocking() -> None:
    """Events, not timings: the NVML wait in progress ends only when the test releases it."""
    library = FakeNvmlLibrary([FakeGpu(0)])
    _, _, watcher = watched(library, wait_ms=50)
    entered, release = threading.Event(), threading.Event()
    waits = []
    original = library.nvmlEventSetWait

    def wait(event_set: Any, timeout_ms: int) -> Any:
        waits.append(timeout_ms)
        entered.set()
        release.wait(60)
        return original(event_set, timeout_ms)

    library.nvmlEventSetWait = wait  # type: ignore[method-assign]
    watcher.start()
    try:
        assert entered.wait(60)
        caller = threading.Thread(target=watcher.request_pause)
        caller.start()
        caller.join(60)
        assert not caller.is_alive()  # returned while the wait was still in progress
        assert not release.is_set() and len(waits) == 1
        release.set()  # the wait in progress ends; no new one starts
        with watcher.paused():
            assert len(waits) == 1
        entered.clear()
        assert entered.wait(60)  # resumed after the pause
    finally:
        release.set()
        watcher.stop()
