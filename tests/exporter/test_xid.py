"""The XID event thread: counting, rebuilding its event set, and staying out of NVML while paused."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from exporter.cycle import Cycle
from exporter.nvml import Nvml
from exporter.snapshot import SnapshotBuilder
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
    assert library.live_event_sets == 1
    nvml.init()  # a new NVML session: the old set is freed before nvmlShutdown, not leaked
    assert library.live_event_sets == 0
    watcher.watch(nvml.generation, [(FakeHandle(0), library.gpus[0].uuid)])
    clock.advance(10)
    assert watcher.poll_once()
    assert counter.counts() == {(library.gpus[0].uuid, 48): 1}
    assert library.live_event_sets == 1
    nvml.shutdown()
    assert library.live_event_sets == 0


def test_nvml_gone_during_wait_drops_the_set_until_reinit(fake_gpus: Callable[..., FakeNvmlLibrary]) -> None:
    library = fake_gpus(FakeGpu(0))
    nvml, _, watcher = watched(library, wait_ms=1)
    library.fail("nvmlEventSetWait", "UNINITIALIZED", times=1)
    assert not watcher.poll_once()
    assert nvml.needs_init
    nvml.init()
    watcher.watch(nvml.generation, [(FakeHandle(0), library.gpus[0].uuid)])
    assert not watcher.poll_once()  # a fresh set, no error this time
    assert library.live_event_sets == 1


def test_a_lost_gpu_is_taken_off_the_event_set_and_put_back_when_it_returns(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    """Through the collection cycle, as in production: GPU 1 falls off the bus at t=2 (XID 79) and is
    back at t=6. NVML cannot take a GPU off a set, and a set holding a lost GPU answers GPU_IS_LOST to
    every wait, so the set is read out, freed and built without it, then with it again: one live set
    throughout, XID 79 counted, and the other GPUs' XIDs (during and after the outage) all arrive."""
    library = fake_gpus(
        FakeGpu(0, xids=((3.0, 13), (7.0, 31))),
        FakeGpu(1, lost_between=(2.0, 6.0), xids=((2.0, 79),)),
        FakeGpu(2, xids=((4.0, 48),)),
    )
    nvml = Nvml(library)
    counter = XidCounter()
    watcher = XidWatcher(nvml, counter, wait_ms=10)
    cycle = Cycle(nvml, SnapshotBuilder("node", version="test"), xid_counter=counter, xid_watcher=watcher)
    live = []
    for step in range(9):
        clock.now = 1_750_000_000.0 + step
        cycle.run()
        while watcher.poll_once():
            pass
        live.append(library.live_event_sets)
    uuid = [gpu.uuid for gpu in library.gpus]
    assert counter.counts() == {(uuid[0], 13): 1, (uuid[0], 31): 1, (uuid[1], 79): 1, (uuid[2], 48): 1}
    assert live == [1] * 9
    assert library.calls_to("nvmlEventSetCreate") == 3  # all GPUs, without GPU 1, all GPUs again
    assert not nvml.needs_init  # one lost GPU is no reason to re-initialise NVML
    cycle.shutdown()
    assert library.live_event_sets == 0


def test_a_set_answering_gpu_is_lost_is_freed_and_rebuilt_once(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    """The watcher may see the loss before the collection loop does: the wait fails with GPU_IS_LOST
    while the lost GPU is still on the watch list. The set is freed (not leaked) and rebuilt once,
    without the GPU whose registration now fails; GPU 0's XIDs keep arriving."""
    library = fake_gpus(FakeGpu(0, xids=((2.0, 13), (5.0, 31))), FakeGpu(1, lost_between=(1.0, 1e9)))
    _, counter, watcher = watched(library, wait_ms=1)
    assert not watcher.poll_once()
    for _ in range(6):
        clock.advance(1)
        for _ in range(5):
            watcher.poll_once()
        assert library.live_event_sets == 1
    assert counter.counts() == {(library.gpus[0].uuid, 13): 1, (library.gpus[0].uuid, 31): 1}
    assert library.calls_to("nvmlEventSetCreate") == 2


def test_a_failing_wait_backs_off_instead_of_spinning() -> None:
    """nvmlEventSetWait failing at once (not a timeout) must not turn the thread into a busy loop."""
    library = FakeNvmlLibrary([FakeGpu(0)])  # real clock: the thread runs freely for a second
    library.fail("nvmlEventSetWait", "UNKNOWN")
    _, _, watcher = watched(library, wait_ms=50)
    watcher.start()
    try:
        time.sleep(1.0)
    finally:
        watcher.stop()
    # Backing off from 50 ms and doubling: a handful of attempts; spinning would make thousands.
    assert 1 <= library.calls_to("nvmlEventSetWait") <= 8
    assert watcher.failed_waits == library.calls_to("nvmlEventSetWait")


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


def test_a_gpu_lost_from_a_working_set_is_left_behind_without_a_pause(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a GPU falls off the bus, its peers often report XIDs of their own at the same moment: the
    set is rebuilt without it at once, never after a back-off during which those would be lost. A set
    that fails before it ever waited is still backed off from."""
    library = fake_gpus(FakeGpu(0, xids=((3.0, 74),)), FakeGpu(1, lost_between=(2.0, 1e9), xids=((2.0, 79),)))
    _, counter, watcher = watched(library, wait_ms=1)
    pauses: list[float] = []
    monkeypatch.setattr(watcher, "_back_off", lambda: pauses.append(clock()))
    for _ in range(4):
        clock.advance(1)
        for _ in range(3):
            watcher.poll_once()
    assert pauses == []
    assert counter.counts() == {(library.gpus[1].uuid, 79): 1, (library.gpus[0].uuid, 74): 1}
    assert library.live_event_sets == 1
