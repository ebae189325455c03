"""Warnings that would repeat every cycle, logged once and then counted.

A missing kubelet socket or an NVML that does not load fails every few seconds for as long as it
lasts. The first occurrence is logged at once; repeats are counted and summarised at most every
``summary_s`` seconds ("… repeated 119 times in the last 600 s"), and the end of the condition is
logged with the total, so the log says when it started, that it lasted, and when it ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _State:
    message: str
    since: float
    last_summary: float
    repeats: int = 0
    total: int = 1


class RepeatedWarnings:
    def __init__(
        self,
        logger: logging.Logger,
        *,
        summary_s: float = 600.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._summary_s = summary_s
        self._monotonic = monotonic
        self._active: dict[str, _State] = {}
        self._lock = threading.Lock()

    def warn(self, key: str, message: str) -> None:
        """Log ``message`` the first time ``key`` fails; count it while the failure lasts."""
        now = self._monotonic()
        with self._lock:
            state = self._active.get(key)
            if state is None:
                self._active[key] = _State(message, now, now)
                first, summary = True, None
            else:
                state.repeats += 1
                state.total += 1
                state.message = message
                first, summary = False, None
                if now - state.last_summary >= self._summary_s:
                    summary = (state.message, state.repeats, now - state.last_summary)
                    state.repeats, state.last_summary = 0, now
        if first:
            self._log.warning("%s", message)
        elif summary is not None:
            self._log.warning("%s (repeated %d times in the last %.0f s)", *summary)

    def clear(self, key: str, recovered: str) -> None:
        """The failure ``key`` is over: log ``recovered`` with how often and how long it failed."""
        with self._lock:
            state = self._active.pop(key, None)
        if state is not None:
            self._log.info(
                "%s (after %d failures over %.0f s)", recovered, state.total, self._monotonic() - state.since
            )
