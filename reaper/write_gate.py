"""The write gate: the only code that sends changes to the cluster, and the single dry-run branch.

Every mutation — patches, Events, the state ConfigMap, the Lease — is a call handed to
:meth:`WriteGate.send`: in dry-run it logs ``DRY-RUN: would …`` and makes no request at all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from reaper.outcomes import Outcome
from reaper.policy import RunMode

log = logging.getLogger(__name__)

T = TypeVar("T")


class WriteGate:
    def __init__(self, mode: RunMode) -> None:
        self.mode = mode

    def send(self, what: str, call: Callable[[], T]) -> T | None:
        if not self.mode.writes:
            log.info("DRY-RUN: would %s", what)
            return None
        log.info("%s", what[0].upper() + what[1:])
        return call()

    @property
    def done(self) -> Outcome:
        """The outcome of an action that went through :meth:`send`."""
        return Outcome.APPLIED if self.mode.writes else Outcome.DRY_RUN
