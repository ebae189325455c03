"""XID critical errors, counted from NVML's event API on a dedicated thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from exporter.nvml import EventWaitFailed, GpuLost, Nvml, XidEventSet
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

    The collection loop says which devices to watch (:meth:`watch`) after each enumeration; the event set
    is built and rebuilt here, on the watcher's own thread, whenever NVML was re-initialised or the set
    of GPUs changed. NVML must not be shut down while a wait is in progress: :meth:`paused` holds the
    watcher outside NVML for as long as the caller needs (at most one ``wait_ms`` to get there, nothing
    when :meth:`request_pause` came a cycle earlier).
    """

    #: Longest pause between two attempts while nvmlEventSetWait keeps failing at once.
    MAX_BACKOFF_S = 30.0

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
        generation, devices = self._wanted
        uuids = frozenset(uuid for _, uuid in devices)
        current = self._event_set
        # A GPU that went missing stays registered (its events may still arrive, and it is back in
        # the set when it returns); only a new NVML session or a GPU never watched rebuilds the set.
        if current is None or current.generation != generation or not uuids <= self._watched:
            if current is not None:
                self._nvml.free_event_set(current)
            self._event_set = current = self._nvml.xid_event_set(devices) if devices else None
            self._watched = uuids
        if current is None or not current.devices:
            self._stop.wait(self._wait_ms / 1000)
            return False
        try:
            event = self._nvml.wait_xid(current, self._wait_ms)
        except EventWaitFailed:
            # The wait returned at once with an error: without a pause this loop would spin a core.
            self.failed_waits += 1
            self._backoff_s = min(max(2 * self._backoff_s, self._wait_ms / 1000), self.MAX_BACKOFF_S)
            self._stop.wait(self._backoff_s)
            return False
        except GpuLost:
            # The set died with NVML; rebuild it once the collection loop has re-initialised.
            self._event_set = None
            self._watched = frozenset()
            self._stop.wait(self._wait_ms / 1000)
            return False
        self._backoff_s = 0.0
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
