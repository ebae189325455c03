"""The cyclic garbage collector paused while an analysis builds what lives to its end."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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
