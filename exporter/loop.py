"""The background collection loop and the health it reports."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from exporter.repeats import RepeatedWarnings
from exporter.snapshot import Snapshot
from exporter.worker import BackgroundThread

log = logging.getLogger(__name__)


class CollectionLoop(BackgroundThread):
    """Runs ``collect`` every ``interval_s`` on a fixed schedule and keeps the newest snapshot.

    The schedule is anchored at start, so a cycle that runs long delays the next one but the loop does
    not drift (a sawtooth-shaped workload is sampled at the same phase it would be on any other node).
    Missed slots are skipped, not run back to back.
    """

    def __init__(
        self,
        collect: Callable[[], Snapshot],
        *,
        interval_s: float,
        stale_after_s: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__("gpu-collection")
        self._collect = collect
        self._warnings = RepeatedWarnings(log, monotonic=monotonic)
        self._started_at: float | None = None
        self._last_cycle_at: float | None = None
        self._interval_s = interval_s
        self._stale_after_s = stale_after_s if stale_after_s is not None else max(3 * interval_s, 30.0)
        self._monotonic = monotonic
        self._latest: Snapshot | None = None
        self._last_ok_at: float | None = None
        self._last_problem = "no collection yet"

    def latest(self) -> Snapshot | None:
        return self._latest

    def run_once(self) -> Snapshot | None:
        try:
            snapshot = self._collect()
        except Exception as exc:
            # A bug or a surprise from a library must not kill the loop; /readyz reports it.
            log.exception("collection failed")
            self._last_problem = f"collection raised {type(exc).__name__}: {exc}"
            self._last_cycle_at = self._monotonic()
            return None
        self._latest = snapshot
        self._last_cycle_at = self._monotonic()
        if snapshot.ok:
            self._last_ok_at = self._last_cycle_at
            self._last_problem = ""
            self._warnings.clear("collection", "collection succeeded again")
        else:
            self._last_problem = snapshot.error or "collection failed"
            self._warnings.warn("collection", f"collection failed: {self._last_problem}")
        return snapshot

    def liveness(self) -> tuple[bool, str]:
        """``(True, …)`` while the loop keeps completing cycles, whatever NVML answered: a restart
        cannot load a driver, so only a stuck loop is worth one."""
        now = self._monotonic()
        last = self._last_cycle_at if self._last_cycle_at is not None else self._started_at
        if last is not None and now - last > self._stale_after_s:
            return False, f"no collection cycle finished for {now - last:.0f}s"
        return True, "alive" if not self._last_problem else f"alive; not ready: {self._last_problem}"

    def health(self) -> tuple[bool, str]:
        """Readiness: ``(True, "ok")`` while the last collection succeeded and was recent enough."""
        if self._last_problem:
            return False, self._last_problem
        if self._last_ok_at is None:
            return False, "no collection yet"
        age = self._monotonic() - self._last_ok_at
        if age > self._stale_after_s:
            return False, f"last successful collection {age:.0f}s ago"
        return True, "ok"

    def _run(self) -> None:
        anchor = self._started_at = self._monotonic()
        slot = 0
        while not self._stop.is_set():
            self.run_once()
            slot = max(slot + 1, int((self._monotonic() - anchor) / self._interval_s) + 1)
            self._stop.wait(max(0.0, anchor + slot * self._interval_s - self._monotonic()))
