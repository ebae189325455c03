"""Reads for a conditional write, and the retry that re-reads after a 409 (or 429) and tries again."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

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
        """Run ``attempt`` on the object; on 409 (or 429) re-read it and try again with the fresh version."""
        obj = read()
        for n in range(1, self.attempts + 1):
            try:
                return attempt(obj)
            except (ConflictError, TooManyRequestsError) as e:
                if n == self.attempts:
                    raise
                log.info("%s on attempt %d; re-reading", type(e).__name__, n)
                self.sleep(min(0.05 * 2**n, 1.0))
                obj = read()
        raise AssertionError("unreachable")  # pragma: no cover
