"""How many queries run at once: a small bounded pool that backs off when the server pushes back.

Independent queries (the snapshot's aggregates, the kube-state-metrics and CPU queries) go out side
by side, at most ``limit`` at a time, counting the requests the caller's own thread makes meanwhile
(the snapshot reads its first answers, and sends the interval probe, while the rest are out).
An answer of 429 (too many requests) or 503 (overloaded) halves the number allowed in flight,
down to one; the request itself is retried with backoff by the HTTP layer, so a loaded server
slows the run down and never fails it. Each run of successes earns one more slot back (additive
increase, multiplicative decrease, as TCP does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# A slot comes back after this many successes in a row at the reduced width.
_SUCCESSES_PER_SLOT = 4


class AdaptiveLimit:
    """At most ``ceiling`` holders at once; ``push_back`` halves the width, successes widen it again."""

    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError(f"concurrency must be at least 1, not {ceiling}")
        self.ceiling = ceiling
        self.width = ceiling
        self.narrowest = ceiling  # the lowest width reached: tests and logs read it
        self.push_backs = 0
        self._in_flight = 0
        self._streak = 0
        self._cond = threading.Condition()
        self._held = threading.local()  # slots this thread holds: a nested ``slot`` takes no other
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def pool(self) -> ThreadPoolExecutor:
        """Worker threads kept for the client's life: starting them anew for every batch of queries
        cost more than a small query's round trip."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.ceiling, thread_name_prefix="query")
            return self._pool

    @contextmanager
    def slot(self) -> Iterator[None]:
        """One of the ``width`` places in flight, for a request or a call that makes requests.

        Re-entrant: a request made inside a pool call uses that call's place, so requests from the
        pool and from the caller's own thread count against the one bound.
        """
        if getattr(self._held, "depth", 0):
            self._held.depth += 1
            try:
                yield
            finally:
                self._held.depth -= 1
            return
        with self._cond:
            self._cond.wait_for(lambda: self._in_flight < self.width)
            self._in_flight += 1
        self._held.depth = 1
        try:
            yield
        finally:
            self._held.depth = 0
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    def push_back(self) -> None:
        """The server answered 429 or 503: fewer queries at once from now on."""
        with self._cond:
            self.push_backs += 1
            self._streak = 0
            self.width = max(1, self.width // 2)
            self.narrowest = min(self.narrowest, self.width)

    def success(self) -> None:
        with self._cond:
            if self.width >= self.ceiling:
                return
            self._streak += 1
            if self._streak >= _SUCCESSES_PER_SLOT:
                self._streak = 0
                self.width += 1
                self._cond.notify_all()


def run_all(limit: AdaptiveLimit, call: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``call`` over ``items`` at most ``limit.width`` at a time; results in the items' order.

    The first exception (after the HTTP layer's retries) is raised once every call has ended.
    """
    if len(items) <= 1 or limit.ceiling == 1:
        return [call(item) for item in items]
    futures = submit_all(limit, call, items)
    wait(futures)  # every call ends before the first error is raised
    return [f.result() for f in futures]


def submit_all(limit: AdaptiveLimit, call: Callable[[T], R], items: Sequence[T]) -> list[Future[R]]:
    """As ``run_all``, without waiting: the caller reads each result when it needs it, so work on
    the first answers overlaps the calls still out.

    With a ceiling of one the calls run here, one after another, before this returns: the caller's
    own requests then never run beside the pool's.
    """
    if limit.ceiling == 1:
        return [_settled(call, item) for item in items]

    def one(item: T) -> R:
        with limit.slot():
            return call(item)

    pool = limit.pool()
    return [pool.submit(one, item) for item in items]


def _settled(call: Callable[[T], R], item: T) -> Future[R]:
    future: Future[R] = Future()
    try:
        future.set_result(call(item))
    except Exception as e:  # handed to the reader, as a pool's future would hand it
        future.set_exception(e)
    return future
