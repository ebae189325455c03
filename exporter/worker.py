"""The exporter's background threads: the collection loop, the kubelet refresher and the XID watcher."""

from __future__ import annotations

import abc
import threading


class BackgroundThread(abc.ABC):
    """Runs :meth:`_run` on a named daemon thread from :meth:`start` until :meth:`stop`.

    ``_run`` loops until ``self._stop`` is set and sleeps with ``self._stop.wait(…)``, so a stop is
    prompt and :meth:`stop` returns once the thread has finished.
    """

    def __init__(self, thread_name: str) -> None:
        self._thread_name = thread_name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @abc.abstractmethod
    def _run(self) -> None:
        """The thread's body; each subclass supplies its own loop."""
