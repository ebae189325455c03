"""The collector's pause around an analysis."""

from __future__ import annotations

import gc
import threading

import pytest

from common.memory import collector_paused


def test_the_collector_resumes_after_the_last_pause_ends_and_only_if_it_ran() -> None:
    was = gc.isenabled()
    gc.enable()
    try:
        inner_done, outer_may_end = threading.Event(), threading.Event()

        def other_thread() -> None:
            with collector_paused():
                inner_done.set()
                outer_may_end.wait(timeout=30)

        with collector_paused():
            assert not gc.isenabled()
            worker = threading.Thread(target=other_thread)
            worker.start()
            assert inner_done.wait(timeout=30)
        # The first pause ended, the other thread's has not: still paused.
        assert not gc.isenabled()
        outer_may_end.set()
        worker.join(timeout=30)
        assert gc.isenabled()

        gc.disable()  # an operator's (or a caller's) own choice is kept
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def _walks(tracked: list[object]) -> int:
    """How many objects of ``tracked`` the next young collection would walk."""
    young = {id(o) for o in gc.get_objects(generation=0)}
    return sum(id(o) in young for o in tracked)


@pytest.mark.parametrize("frozen_before", [False, True], ids=["nothing-frozen", "caller-froze-objects"])
def test_what_a_pause_built_is_not_walked_by_a_young_collection_when_it_ends(frozen_before: bool) -> None:
    """A run's objects outlive its pause; resuming must not send them all through a young collection
    (the count of young allocations starts again), and nothing may be left frozen by us (or
    unfrozen, when a caller froze objects on purpose)."""
    was = gc.isenabled()
    gc.enable()
    gc.unfreeze()  # whatever an earlier test froze
    gc.collect()
    sentinel: list[object] = []  # frozen with the caller's objects, when the caller freezes
    if frozen_before:
        gc.freeze()
    try:
        with collector_paused():
            kept = [[i] for i in range(50_000)]
        assert gc.isenabled()
        # Frozen objects are the ones no generation lists (the freeze count alone drops whenever
        # one of them is freed, by this or any other thread).
        assert (id(sentinel) in {id(o) for o in gc.get_objects()}) is not frozen_before
        if not frozen_before:
            assert gc.get_freeze_count() == 0
            assert gc.get_count()[0] < gc.get_threshold()[0]  # no young collection is due
            assert _walks(kept) == 0
            assert {id(o) for o in gc.get_objects(generation=2)} >= {id(o) for o in kept}
    finally:
        gc.unfreeze()
        if not was:
            gc.disable()
