"""Reads for a conditional write, and the retry that re-reads after a 409 (or 429) and tries again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from reaper.adapter_errors import ConflictError, TooManyRequestsError
from reaper.cluster import with_scale_replicas
from reaper.kube_api import KubeApi

log = logging.getLogger(__name__)

T = TypeVar("T")
Read = Callable[[], dict[str, Any]]


def reader(
    kube: KubeApi, kind: str, namespace: str | None, name: str, first: dict[str, Any] | None = None
) -> Read:
    """Reads the object: ``first`` (a copy already in hand) the first time, the API server after."""
    pending = [] if first is None else [first]

    def read() -> dict[str, Any]:
        return pending.pop() if pending else kube.get(kind, namespace, name)

    return read


def read_with_scale(kube: KubeApi, kind: str, namespace: str, name: str) -> Read:
    """Reads the object and its ``/scale`` (which carries the object's resourceVersion)."""

    def read() -> dict[str, Any]:
        obj = kube.get(kind, namespace, name)
        return with_scale_replicas(obj, kube.get_scale(kind, namespace, name))

    return read


@dataclass(frozen=True)
class ConflictRetry:
    attempts: int
    sleep: Callable[[float], None]

    def run(self, read: Read, attempt: Callable[[dict[str, Any]], T]) -> T:
        """Run ``attempt`` on the object; on 409 (or 429) re-read it and try again with the fresh version.

        Waits 0.1 s, 0.2 s, 0.4 s ... (at most 1 s) between tries; the last error is raised as it was.
        """
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=0.1, max=1.0),
            retry=retry_if_exception_type((ConflictError, TooManyRequestsError)),
            sleep=self.sleep,
            reraise=True,
            before_sleep=lambda state: log.info(
                "%s on attempt %d; re-reading",
                type(state.outcome.exception()).__name__ if state.outcome else "conflict",
                state.attempt_number,
            ),
        )
        return retrying(lambda: attempt(read()))
