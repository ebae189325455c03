"""Kubernetes Events on the objects the reaper touches, sent through the write gate."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from common.timeutil import rfc3339
from reaper import names
from reaper.adapter_errors import KubeError
from reaper.clock import Clock
from reaper.kinds import KINDS
from reaper.kube_api import KubeApi
from reaper.marks import meta
from reaper.write_gate import WriteGate

log = logging.getLogger(__name__)


class Events:
    def __init__(
        self, kube: KubeApi, gate: WriteGate, *, identity: str, wall_clock: Clock, cluster: str | None
    ) -> None:
        self.kube = kube
        self.gate = gate
        self.identity = identity  # the Events' reportingInstance: which run recorded them
        self.wall_clock = wall_clock
        # Named in every Event: where many clusters share names, an Event read away from its
        # cluster (an event exporter, a central log) still says which one it is about.
        self.cluster = cluster

    def record(self, obj: Mapping[str, Any], kind: str, reason: str, message: str) -> bool:
        """Record a Kubernetes Event on a touched object; a failure here never fails the action.

        Whether it was sent (or, in a dry-run, would be): a notice is kept only once its Event is."""
        name = meta(obj, "name")
        namespace = meta(obj, "namespace") or "default"  # cluster-scoped objects' events live in default
        now = rfc3339(self.wall_clock())
        api_version = KINDS[kind].api_version if kind in KINDS else "v1"
        if self.cluster is not None:
            message = f"[{self.cluster}] {message}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": api_version,
                "kind": kind,
                "name": name,
                "namespace": meta(obj, "namespace"),
                "uid": meta(obj, "uid"),
                "resourceVersion": meta(obj, "resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Normal",
            "source": {"component": names.COMPONENT},
            "reportingComponent": names.COMPONENT,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.gate.send(
                f"record Event {reason} on {kind} {name}", lambda: self.kube.create("Event", namespace, body)
            )
        except KubeError as e:
            log.warning("could not record an Event on %s %s: %s", kind, name, e)
            return False
        return True
