"""Process-wide memory settings the command-line tools apply once, at start."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# glibc's mallopt parameter for the arena cap (M_ARENA_MAX in malloc.h).
_M_ARENA_MAX = -8


def limit_malloc_arenas(count: int = 2) -> bool:
    """Cap glibc's malloc arenas at ``count``; True when the cap was set.

    glibc gives every thread that allocates its own arena, up to eight per core, and an arena's
    freed pages mostly stay mapped. The analyzer decodes answers in a small thread pool, so each
    worker's arena holds its own high-water mark: capped at two, a 10,000-GPU run peaks about
    30 MiB lower (docs/analyzer.md) for no measurable cost in time. An operator's own
    ``MALLOC_ARENA_MAX`` wins; elsewhere than glibc this does nothing.
    """
    if not sys.platform.startswith("linux") or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, count))


_pause_lock = threading.Lock()
_pauses = 0
_collector_was_running = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block, resumed (if it ran) after the last
    of several such blocks, in any thread, ends.

    The analyzer builds a few hundred thousand objects that all live to the end of the run, and no
    cycles to speak of (a few hundred objects at 10,000 GPUs). The collector, triggered by those
    allocations, passes over the growing heap again and again: at 10,000 GPUs a third of the run's
    CPU time, for nothing to free.
    """
    global _pauses, _collector_was_running
    with _pause_lock:
        if _pauses == 0:
            _collector_was_running = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _collector_was_running:
                _age_survivors()
                gc.enable()


def _age_survivors() -> None:
    """Moves every tracked object to the oldest generation without walking them, and zeroes the
    count of young allocations.

    The count grew through the pause; left as is, the first allocation after it starts a young
    collection that walks everything the block built and kept (0.1 s at 10,000 GPUs), to free
    nothing. ``freeze`` then ``unfreeze`` splice the generations' lists into the oldest one, as a
    collection would for survivors, so those objects wait for the next full collection, like any
    long-lived object. Skipped while anything is frozen on purpose (unfreeze would release it).
    """
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
