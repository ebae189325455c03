"""What the HTTP server does with its connections: a cap on how many are open, and their failures
logged as one line each kind, then counted.

A connection waiting for its next request (or its first, TLS handshake included) is *idle*; one
reading a request or writing a response is *busy*. When the cap is reached, the connection idle the
longest is closed to make room: an idle kept-alive connection costs its client only a reconnect, so a
crowd of idle or abandoned connections never locks Prometheus out. Only when every connection is
busy (each bounded by the request timeout) is a new one refused.

Client-side failures (a reset, a failed TLS handshake, a request that never completes) are normal on
a server that is left running, and can come in storms. The first of each kind is logged at once, as
one line; repeats within ``window_s`` are counted and summarised in one line when the window ends
(or when the server stops), so a storm costs two lines, not a traceback each.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class ConnectionSlots:
    """Open connections against a cap; idle ones are evicted oldest first when it is reached."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: set[int] = set()
        self._idle: dict[int, socket.socket] = {}  # insertion order: longest idle first
        self._closed_by_us: set[int] = set()
        self._closing = False
        self._changed = threading.Condition()

    def admit(self, conn: socket.socket) -> bool:
        """Called before a connection is served; False when every open connection is busy."""
        victim = None
        with self._changed:
            if self._closing:
                return False
            if len(self._open) >= self.limit:
                if not self._idle:
                    return False
                key, victim = next(iter(self._idle.items()))
                self._forget(key)
                self._closed_by_us.add(key)
            self._open.add(id(conn))
            self._idle[id(conn)] = conn  # no request yet (nor TLS handshake): evictable
        if victim is not None:
            _hang_up(victim)
        return True

    def idle(self, conn: socket.socket) -> bool:
        """The connection waits for a request and may be evicted; False when the server is stopping."""
        with self._changed:
            if self._closing or id(conn) in self._closed_by_us:
                return False
            self._idle[id(conn)] = conn
            return True

    def busy(self, conn: socket.socket) -> bool:
        """A request has started on the connection; False when it was evicted meanwhile."""
        with self._changed:
            self._idle.pop(id(conn), None)
            return id(conn) not in self._closed_by_us

    def closed_by_us(self, conn: socket.socket) -> bool:
        with self._changed:
            return id(conn) in self._closed_by_us

    def release(self, conn: socket.socket) -> None:
        with self._changed:
            self._forget(id(conn))
            self._closed_by_us.discard(id(conn))
            self._changed.notify_all()

    def close(self, timeout_s: float) -> bool:
        """Stop: hang up every idle connection, then wait up to ``timeout_s`` for busy ones to finish
        their request. True when none is left."""
        with self._changed:
            self._closing = True
            idle = list(self._idle.items())
            for key, _ in idle:
                self._forget(key)
                self._closed_by_us.add(key)
        for _, conn in idle:
            _hang_up(conn)
        with self._changed:
            return self._changed.wait_for(lambda: not self._open and not self._closed_by_us, timeout_s)

    @property
    def open(self) -> int:
        with self._changed:
            return len(self._open)

    @property
    def idle_count(self) -> int:
        with self._changed:
            return len(self._idle)

    def _forget(self, key: int) -> None:
        self._open.discard(key)
        self._idle.pop(key, None)


def _hang_up(conn: socket.socket) -> None:
    # shutdown() wakes the thread blocked reading this socket (it reads end-of-file); close() would
    # not. The base-class method also works on a TLS socket without tearing down its state under
    # the reading thread.
    with contextlib.suppress(OSError):  # already gone
        socket.socket.shutdown(conn, socket.SHUT_RDWR)


@dataclass
class _Window:
    opened: float
    level: int
    fields: dict[str, Any]
    message: str = ""
    count: int = 0


class ClientErrorLog:
    """One line for the first failure of each kind; repeats counted and summarised once a window."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        window_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._window_s = window_s
        self._monotonic = monotonic
        self._windows: dict[str, _Window] = {}
        self._lock = threading.Lock()

    def record(self, kind: str, level: int, message: str, *, key: str | None = None, **fields: Any) -> None:
        """Log ``message`` if it is the first of its ``key`` (default: ``kind``) in this window, else
        count it. ``kind`` and ``fields`` go into the record as structured fields."""
        now = self._monotonic()
        fields = {"kind": kind, **fields}
        key = key or kind
        with self._lock:
            window = self._windows.get(key)
            if window is None:
                self._windows[key] = _Window(now, level, fields)
            else:
                window.message, window.fields, window.count = message, fields, window.count + 1
                return
        self._log.log(level, "%s", message, extra=fields)

    def flush(self, *, final: bool = False) -> None:
        """Summarise the windows that ended (all of them when ``final``); called often, costs little."""
        now = self._monotonic()
        due: list[_Window] = []
        with self._lock:
            for key, window in list(self._windows.items()):
                if not final and now - window.opened < self._window_s:
                    continue
                if window.count:
                    due.append(window)
                if window.count and not final:  # the storm may go on: a new window, counted afresh
                    self._windows[key] = _Window(now, window.level, {})
                else:
                    del self._windows[key]
        for window in due:
            elapsed = now - window.opened
            self._log.log(
                window.level,
                "%s (%d more like this in the last %s s)",
                window.message,
                window.count,
                f"{elapsed:.0f}" if elapsed >= 10 else f"{elapsed:.1f}",
                extra={**window.fields, "repeats": window.count},
            )
