"""A notice's annotations on the workload: ``gpu-reaper/noticed-at`` and ``gpu-reaper/act-after``.

``kubectl get -o yaml`` then shows the owners, next to the notice's Event, when it was given and when
the reaper may act; they come off when the notice is used up (the action ran) or dropped (busy again,
redeployed, snoozed). Written where the reaper patches the object anyway (the custom controllers it
stops by a field or annotation, kinds scaled through a CRD's ``/scale``, nodes); on Deployments,
StatefulSets and ReplicaSets, which it otherwise writes only through ``/scale``, only where the install
grants that patch (``run --notice-annotations``, the chart's ``rbac.noticeAnnotations``). Every write
goes through the write gate; a refused one is logged, never a failed run: the Event and the state
ConfigMap still carry the notice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from common.timeutil import rfc3339
from reaper import names
from reaper.actuators import RecordedScale, actuator_of
from reaper.adapter_errors import KubeError
from reaper.kube_api import KubeApi
from reaper.state import Notice
from reaper.write_gate import WriteGate

log = logging.getLogger(__name__)

KEYS = (names.NOTICED_AT, names.ACT_AFTER)


def marks_of(notice: Notice) -> dict[str, str]:
    return {names.NOTICED_AT: rfc3339(notice.noticed_at), names.ACT_AFTER: rfc3339(notice.act_after)}


def annotatable(kind: str, scale_only_kinds: bool) -> bool:
    """Whether the reaper writes the notice's annotations on an object of ``kind``: always where its
    stop patches the object, on the kinds it writes through ``/scale`` only when allowed to."""
    if kind == "Node":
        return True
    actuator = actuator_of(kind)
    if actuator is None:
        return False
    return scale_only_kinds or not isinstance(actuator, RecordedScale)


class NoticeMarks:
    def __init__(self, kube: KubeApi, gate: WriteGate, *, scale_only_kinds: bool = False) -> None:
        self.kube = kube
        self.gate = gate
        self.scale_only_kinds = scale_only_kinds

    def put(self, notice: Notice) -> None:
        """Annotate the noticed object (a new notice)."""
        if not annotatable(notice.kind, self.scale_only_kinds):
            return
        marks = marks_of(notice)
        said = ", ".join(f"{k}={v}" for k, v in marks.items())
        self._send(notice, f"annotate {_where(notice)}: {said}", {"metadata": {"annotations": marks}})

    def take_off(self, notice: Notice) -> None:
        """Remove a used-up or dropped notice's annotations, where they are still on the object."""
        if not annotatable(notice.kind, self.scale_only_kinds):
            return
        try:
            current = self.kube.get_optional(notice.kind, notice.namespace or None, notice.name)
        except KubeError as e:
            log.warning("could not read %s to remove its notice annotations: %s", _where(notice), e)
            return
        if current is None or not any(k in _annotations_of(current) for k in KEYS):
            return
        # A merge patch removing two keys changes nothing else, whoever wrote the object since.
        body = {"metadata": {"annotations": dict.fromkeys(KEYS)}}
        self._send(notice, f"remove {', '.join(KEYS)} from {_where(notice)}", body)

    def _send(self, notice: Notice, what: str, body: Mapping[str, Any]) -> None:
        try:
            self.gate.send(
                what, lambda: self.kube.patch(notice.kind, notice.namespace or None, notice.name, body)
            )
        except KubeError as e:
            # The notice stands on its Event and the state ConfigMap: a missing annotation delays nothing.
            log.warning("could not %s: %s", what, e)


def _where(notice: Notice) -> str:
    return f"{notice.kind} {notice.ref}"


def _annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}
