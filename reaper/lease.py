"""The coordination Lease: one run at a time changes the cluster (taken and released through the gate)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from common.timeutil import parse_time, rfc3339
from reaper import names
from reaper.adapter_errors import ConflictError, KubeError, LeaseHeldError
from reaper.clock import Clock
from reaper.kube_api import KubeApi
from reaper.marks import meta
from reaper.write_gate import WriteGate

log = logging.getLogger(__name__)


def _micro_time(value: datetime) -> str:
    # Lease times are MicroTime: RFC 3339 with microseconds.
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _expiry(spec: Mapping[str, Any]) -> datetime | None:
    renew = spec.get("renewTime") or spec.get("acquireTime")
    if not renew:
        return None
    try:
        return parse_time(str(renew)) + timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0))
    except (ValueError, OverflowError):
        # Unreadable, or past the end of the calendar: treat as expired rather than wedge every run.
        return None


class RunLease:
    def __init__(
        self,
        kube: KubeApi,
        gate: WriteGate,
        *,
        namespace: str,
        identity: str,
        duration: timedelta,
        wall_clock: Clock,  # real time, not a replay's: the Lease is about live concurrency
        sleep: Callable[[float], None],
    ) -> None:
        self.kube = kube
        self.gate = gate
        self.namespace = namespace
        self.identity = identity
        self.duration = duration
        self.wall_clock = wall_clock
        self.sleep = sleep

    @contextmanager
    def hold(self, wait: float = 0.0) -> Iterator[None]:
        """Hold the coordination Lease for the block; raises LeaseHeldError if another run keeps it."""
        deadline = time.monotonic() + wait
        while True:
            try:
                self._acquire()
                break
            except LeaseHeldError:
                if time.monotonic() >= deadline:
                    raise
                self.sleep(min(2.0, max(0.1, deadline - time.monotonic())))
        try:
            yield
        finally:
            try:
                self._release()
            except KubeError as e:
                # It expires on its own after leaseDurationSeconds; the next run is only delayed.
                log.warning("could not release the lease: %s", e)

    def _spec(self, now: datetime, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.duration.total_seconds()),
            "acquireTime": _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions,
        }

    def _acquire(self) -> None:
        now = self.wall_clock()
        current = self.kube.get_optional("Lease", self.namespace, names.LEASE_NAME)
        what = f"acquire Lease {self.namespace}/{names.LEASE_NAME} as {self.identity}"
        if current is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": names.LEASE_NAME,
                    "namespace": self.namespace,
                    "labels": {"app.kubernetes.io/managed-by": names.COMPONENT},
                },
                "spec": self._spec(now, 0),
            }
            try:
                self.gate.send(what, lambda: self.kube.create("Lease", self.namespace, body))
            except ConflictError as e:
                raise LeaseHeldError("another run", "it is released or expires") from e
            return
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        expires = _expiry(spec)
        if holder and holder != self.identity and expires is not None and expires > now:
            raise LeaseHeldError(holder, rfc3339(expires))
        if holder and holder != self.identity:
            log.warning("taking over the expired lease of %s (expired %s)", holder, rfc3339(expires or now))
        body = {
            "metadata": {"resourceVersion": meta(current, "resourceVersion")},
            "spec": self._spec(now, int(spec.get("leaseTransitions") or 0) + 1),
        }
        try:
            self.gate.send(what, lambda: self.kube.patch("Lease", self.namespace, names.LEASE_NAME, body))
        except ConflictError as e:
            # Someone else took it between our read and our write: their run goes on, ours does not.
            raise LeaseHeldError("another run", "it is released or expires") from e

    def _release(self) -> None:
        def release() -> None:
            # Read inside the write gate: in dry-run the lease was never taken, there is nothing to read.
            current = self.kube.get_optional("Lease", self.namespace, names.LEASE_NAME)
            if current is None or (current.get("spec") or {}).get("holderIdentity") != self.identity:
                return  # not ours any more (it expired and was taken over): leave it alone
            body = {
                "metadata": {"resourceVersion": meta(current, "resourceVersion")},
                "spec": {"holderIdentity": None, "renewTime": None, "acquireTime": None},
            }
            self.kube.patch("Lease", self.namespace, names.LEASE_NAME, body)

        self.gate.send(f"release Lease {self.namespace}/{names.LEASE_NAME}", release)
