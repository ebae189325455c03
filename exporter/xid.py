"""XID critical errors, counted from NVML's event API on a dedicated thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from exporter.nvml import EventWaitFailed, GpuLost, Nvml, XidEvent, XidEventSet
from exporter.worker import BackgroundThread

log = logging.getLogger(__name__)


class XidCounter:
    """XID counts per (GPU UUID, XID) and the last XID per GPU; written by one thread, read by another."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int], int] = {}
        self._last: dict[str, int] = {}

    def record(self, uuid: str, xid: int) -> None:
        with self._lock:
            self._counts[(uuid, xid)] = self._counts.get((uuid, xid), 0) + 1
            self._last[uuid] = xid

    def counts(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self._counts)

    def last(self) -> dict[str, int]:
        with self._lock:
            return dict(self._last)


class XidWatcher(BackgroundThread):
    """Waits for XID events and counts them.

    The collection loop says which devices to watch (:meth:`watch`) after each enumeration: the GPUs it
    read, so a lost GPU is left out and a returning one is back. The event set is built here, on the
    watcher's own thread, for exactly those GPUs, and built again when they change or NVML was
    re-initialised: NVML has no call to take a GPU off a set, and a set holding a lost GPU answers every
    wait with GPU_IS_LOST, so the other GPUs' XIDs would stop. Before a set of this session is dropped
    its pending events are read out and it is freed, so one set is live at a time and none leaks; the
    sets of an earlier session were freed by :meth:`Nvml.shutdown`. NVML must not be shut down while a
    wait is in progress: :meth:`paused` holds the watcher outside NVML for as long as the caller needs
    (at most one ``wait_ms`` to get there, nothing when :meth:`request_pause` came a cycle earlier).
    """

    #: Longest pause between two attempts while nvmlEventSetWait keeps failing at once.
    MAX_BACKOFF_S = 30.0
    #: Most events read out of a set before it is dropped (a bound, should a driver never run dry).
    MAX_DRAINED = 256

    def __init__(self, nvml: Nvml, counter: XidCounter, *, wait_ms: int = 250) -> None:
        super().__init__("nvml-xid-events")
        self._nvml = nvml
        self._counter = counter
        self._wait_ms = wait_ms
        self._wanted: tuple[int, tuple[tuple[Any, str], ...]] = (0, ())
        self._event_set: XidEventSet | None = None
        self._watched: frozenset[str] = frozenset()
        self._cond = threading.Condition()
        self._pause_requested = False
        self._busy = False
        self._backoff_s = 0.0
        self._set_waited = False  # the current set answered a wait (an event or a timeout)
        self.failed_waits = 0

    def watch(self, generation: int, devices: Sequence[tuple[Any, str]]) -> None:
        """Watch these (handle, UUID) pairs, valid for NVML ``generation``."""
        self._wanted = (generation, tuple(devices))

    def request_pause(self) -> None:
        """Ask the watcher to stop waiting on NVML after its current wait, without blocking the caller.

        The collection loop calls this as soon as NVML needs re-initialising, so that by the next cycle
        the watcher is already parked and :meth:`paused` returns at once.
        """
        with self._cond:
            self._pause_requested = True

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the watcher outside NVML for the duration of the ``with`` block."""
        with self._cond:
            self._pause_requested = True
            while self._busy:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._pause_requested = False
                self._cond.notify_all()

    def poll_once(self) -> bool:
        """Wait up to ``wait_ms`` for one event and count it; ``True`` when one arrived."""
        current = self._current_set()
        if current is None or not current.devices:
            self._stop.wait(self._wait_ms / 1000)
            return False
        try:
            event = self._nvml.wait_xid(current, self._wait_ms)
        except EventWaitFailed:
            # The wait returned at once with an error: without a pause this loop would spin a core.
            self.failed_waits += 1
            self._back_off()
            return False
        except GpuLost:
            # A GPU on the set fell off the bus (or NVML went away): the set answers so at once, every
            # time. It is freed; the next one is built at once without that GPU, whose registration now
            # fails — a pause here would lose the other GPUs' XIDs (an XID 79 often comes with its
            # peers' NVLink errors). Only a set that fails before it ever waited is backed off from.
            worked = self._set_waited
            self._drop_set()
            if not worked:
                self._back_off()
            return False
        self._backoff_s = 0.0
        self._set_waited = True
        return self._count(event)

    def _current_set(self) -> XidEventSet | None:
        """The event set for the GPUs asked for, built (again) when they or the NVML session changed."""
        generation, devices = self._wanted
        if generation != self._nvml.generation:
            # Handles of another NVML session: wait for the collection loop to hand over this one's.
            if self._event_set is not None and self._event_set.generation != self._nvml.generation:
                self._drop_set()
            return None
        uuids = frozenset(uuid for _, uuid in devices)
        current = self._event_set
        if current is not None and current.generation == generation and uuids == self._watched:
            return current
        if current is not None:
            self._drop_set()
        self._watched = uuids
        if devices:
            self._set_waited = False
            try:
                self._event_set = self._nvml.xid_event_set(devices)
            except GpuLost:
                self._event_set = None  # NVML itself went away; the collection loop re-initialises it
        return self._event_set

    def _drop_set(self) -> None:
        """Read out what the current set still holds (events recorded before a GPU was lost, XID 79
        among them), then free it."""
        current, self._event_set = self._event_set, None
        if current is None:
            return
        if current.generation == self._nvml.generation:
            for _ in range(self.MAX_DRAINED):
                try:
                    event = self._nvml.wait_xid(current, 0)
                except (EventWaitFailed, GpuLost):
                    break
                if event is None:
                    break
                self._count(event)
        self._nvml.free_event_set(current)

    def _back_off(self) -> None:
        self._backoff_s = min(max(2 * self._backoff_s, self._wait_ms / 1000), self.MAX_BACKOFF_S)
        self._stop.wait(self._backoff_s)

    def _count(self, event: XidEvent | None) -> bool:
        if event is None:
            return False
        if event.uuid is None:
            log.warning("XID %d from a device that was not registered", event.xid)
            return False
        log.warning("XID %d on GPU %s", event.xid, event.uuid)
        self._counter.record(event.uuid, event.xid)
        return True

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()  # a parked (paused) watcher sees the stop at once
        super().stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while self._pause_requested and not self._stop.is_set():
                    self._cond.wait(0.1)
                if self._stop.is_set():
                    return
                self._busy = True
            try:
                self.poll_once()
            except Exception:
                # This thread must outlive any surprise from a driver; the loop's health shows the rest.
                log.exception("XID watcher iteration failed")
                self._stop.wait(self._wait_ms / 1000)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
