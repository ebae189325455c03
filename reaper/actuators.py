"""How the reaper stops each kind of root controller, and how ``restore`` undoes it.

Pure: each actuator turns a live object into the merge patch of its native, reversible stop (or
restore); the executor adds the reaper's own annotations (reaped-at, reason) and the
resourceVersion precondition, and sends it through its one write gate. A root kind with no entry
here is never written to: its children are skipped as ``controller_managed``, and a kind with no
safe native stop is only reported (:func:`notify_only`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reaper import names
from reaper.cluster import Workload
from reaper.kinds import KINDS
from reaper.policy import Action


@dataclass(frozen=True)
class Change:
    """What a stop or a restore writes besides the reaper's own annotations."""

    spec: Mapping[str, Any]
    annotations: Mapping[str, str | None]
    description: str  # "scale from 3 to 0 replicas", "set kubeflow-resource-stopped"
    before: Mapping[str, Any] = field(default_factory=dict)  # the spec values it replaces, where known

    def fields(self) -> str:
        """The fields it writes, as a person reads them: ``replicas 2 → 0``, ``annotation k=v``.

        The reaper's own ``gpu-reaper/`` marks travel in the same patch and are left out: they
        record the stop, they do not make it.
        """
        parts = [
            f"{key} {_json(self.before[key])} → {_json(value)}"
            if key in self.before
            else f"{key}={_json(value)}"
            for key, value in self.spec.items()
        ]
        parts += [
            f"annotation {key}={value}" if value is not None else f"annotation {key} removed"
            for key, value in self.annotations.items()
            if not key.startswith(names.PREFIX)
        ]
        return ", ".join(parts)


def _json(value: Any) -> str:
    """A field value as the object spells it (``true``, not ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


def write_line(kind: str, namespace: str | None, name: str, change: Change) -> str:
    """What one write does, by the object and field: ``Deployment serving/x: replicas 2 → 0``."""
    where = f"{namespace}/{name}" if namespace else name
    return f"{kind} {where}: {change.fields()}"


# A node's cordon: the executor sends this spec, and the plan names it by the same words.
CORDON = Change({"unschedulable": True}, {}, "cordon", before={"unschedulable": False})


class Actuator(ABC):
    """A root kind's native stop. ``marker`` is the annotation that says the reaper stopped it."""

    verb = "stop"  # the action's one name in the terminal, the HTML report and Slack
    past = "stopped"
    log_verb = "stop"  # "scale Deployment a/b from 3 to 0 replicas", "stop Notebook a/b with …"
    done = "Stopped"
    marker = names.REAPED_AT

    @abstractmethod
    def stopped(self, w: Workload) -> str | None:
        """Why the object is already stopped (nothing to do), or None."""

    @abstractmethod
    def stop(self, w: Workload, now: str) -> Change:
        """The write that stops ``w``."""

    @abstractmethod
    def restore(self, w: Workload) -> Change | str:
        """The change that undoes the stop, or why it cannot be undone automatically."""


class ScaleToZero(Actuator):
    """spec.replicas to 0, the original count in gpu-reaper/original-replicas (Deployment, LWS, Rollout…)."""

    verb = "scale to zero"
    past = "scaled to zero"
    log_verb = "scale"
    done = "ScaledToZero"
    marker = names.ORIGINAL_REPLICAS

    def stopped(self, w: Workload) -> str | None:
        return "already at 0 replicas" if w.replicas == 0 else None

    def stop(self, w: Workload, now: str) -> Change:
        replicas = w.replicas if w.replicas is not None else 1
        return Change(
            {"replicas": 0},
            {names.ORIGINAL_REPLICAS: str(replicas)},
            f"from {replicas} to 0 replicas",
            before={"replicas": replicas},
        )

    def restore(self, w: Workload) -> Change | str:
        recorded = w.annotations.get(names.ORIGINAL_REPLICAS)
        try:
            original = int(recorded or "")
        except ValueError:
            return f"unreadable {names.ORIGINAL_REPLICAS}={recorded!r}; fix it by hand"
        # Someone scaled it back up by hand: keep their number, just clear our marks.
        replicas = w.replicas or original
        return Change({"replicas": replicas}, {names.ORIGINAL_REPLICAS: None}, f"{replicas} replicas")


@dataclass(frozen=True)
class StopAnnotation(Actuator):
    """An annotation the kind's own controller reads as "stop" (Kubeflow Notebook, KServe)."""

    key: str
    timestamp: bool  # the value is the stop time (Kubeflow) rather than "true" (KServe)
    unheeded: str = ""  # what it means when the GPUs stay busy under the annotation

    def stopped(self, w: Workload) -> str | None:
        value = w.annotations.get(self.key)
        if value is None or (not self.timestamp and value.strip().lower() != "true"):
            return None
        return f"already annotated {self.key}={value}" + (f"; {self.unheeded}" if self.unheeded else "")

    def stop(self, w: Workload, now: str) -> Change:
        value = now if self.timestamp else "true"
        return Change({}, {self.key: value}, f"with {self.key}={value}")

    def restore(self, w: Workload) -> Change | str:
        return Change({}, {self.key: None}, f"removed {self.key}")


class Suspend(Actuator):
    """spec.suspend: true, which the controller honours by deleting the pods (RayCluster, JobSet)."""

    verb = "suspend"
    past = "suspended"
    log_verb = "suspend"
    done = "Suspended"

    def stopped(self, w: Workload) -> str | None:
        return "already suspended" if w.suspended else None

    def stop(self, w: Workload, now: str) -> Change:
        return Change({"suspend": True}, {}, "with spec.suspend=true", before={"suspend": False})

    def restore(self, w: Workload) -> Change | str:
        return Change({"suspend": False}, {}, "set spec.suspend=false")


class KueueDeactivate(Suspend):
    """A Job, JobSet or RayCluster Kueue manages: Kueue owns its ``spec.suspend`` and would unsuspend
    it while its Workload stays admitted, so the stop is ``spec.active: false`` on that Workload, which
    Kueue answers by evicting it and suspending the object itself; restore sets it back to true and
    Kueue admits it again.

    ``spec`` of the change is the Workload's; the executor finds the Workload by its ownerReference
    to the object (reaper.kueue) and marks the object with the reaper's annotations (reaper.stop).
    """

    def stop(self, w: Workload, now: str) -> Change:
        description = "by deactivating its Kueue Workload (spec.active=false)"
        return Change({"active": False}, {}, description, before={"active": True})

    def restore(self, w: Workload) -> Change | str:
        return Change({"active": True}, {}, "reactivated its Kueue Workload (spec.active=true)")


class ScaleSubresource(ScaleToZero):
    """A custom kind whose CRD declares a scale subresource: spec.replicas is written through ``/scale``.

    The same stop and restore as :class:`ScaleToZero`; the executor sends the replicas to
    ``<plural>/<name>/scale`` and the annotations to the object itself (reaper.discovery).
    """


class RecordedScale(ScaleToZero):
    """Deployment, StatefulSet, ReplicaSet: spec.replicas to 0 through their ``/scale`` subresource
    only, the original count and the reaper's marks kept in its own ConfigMap (reaper.state_store),
    never on the object: the reaper needs no ``patch`` on these kinds, which would let whoever holds
    its token rewrite their pod templates.

    Releases before this one wrote the marks as annotations (``marker``): an object carrying them at
    0 replicas is still restored from them (reaper.restore).
    """

    def stop(self, w: Workload, now: str) -> Change:
        replicas = w.replicas if w.replicas is not None else 1
        return Change({"replicas": 0}, {}, f"from {replicas} to 0 replicas", before={"replicas": replicas})

    def restore_to(self, w: Workload, original: int) -> Change:
        """Back to ``original`` replicas; someone who scaled it up meanwhile keeps their number."""
        replicas = w.replicas or original
        before = {"replicas": w.replicas or 0}
        return Change({"replicas": replicas}, {}, f"{replicas} replicas", before=before)

    def legacy_marked(self, w: Workload) -> bool:
        """Stopped by an earlier release (its annotation), and still at 0: once the object runs again,
        whatever brought it back settled that stop, and a leftover annotation means nothing."""
        return self.marker in w.annotations and w.replicas == 0


SCALE_SUBRESOURCE = ScaleSubresource()
KUEUE_DEACTIVATE = KueueDeactivate()
# Kinds whose own stop is ``spec.suspend`` unless Kueue manages them (its queue-name label): then
# through their Workload, as a Kueue-managed Job always is.
KUEUE_SUSPENDABLE = frozenset({"JobSet", "RayCluster"})
RECORDED_SCALE = RecordedScale()
_SCALE = ScaleToZero()
_SUSPEND = Suspend()
ACTUATORS: Mapping[str, Actuator] = {
    "Deployment": RECORDED_SCALE,
    "StatefulSet": RECORDED_SCALE,
    "ReplicaSet": RECORDED_SCALE,  # reached only when it has no controller of its own
    "LeaderWorkerSet": _SCALE,
    "Rollout": _SCALE,
    # Kubeflow's notebook controller scales the StatefulSet to 0 while the annotation is set.
    "Notebook": StopAnnotation(names.KUBEFLOW_STOPPED, timestamp=True),
    # KServe (2025 onwards, kserve#4337 serverless, kserve#4455 raw deployment) deletes the
    # predictor's workloads while it is "true"; older KServe ignores it (docs/reaper.md).
    "InferenceService": StopAnnotation(
        names.KSERVE_STOP,
        timestamp=False,
        unheeded="if its GPUs are still busy, this KServe predates the stop annotation: stop it by hand",
    ),
    "RayCluster": _SUSPEND,
    "JobSet": _SUSPEND,
    "Job": KUEUE_DEACTIVATE,  # only Kueue-managed ones: see actuator_for
}


def verbs(action: Action, kind: str) -> tuple[str, str]:
    """The one name of what ``action`` does to an object of ``kind``, and its past: the same words in
    the terminal plan, the HTML report, Slack and the skip details (``scale to zero``, ``stop``,
    ``suspend``, ``cordon``, ``heads-up``)."""
    if action is Action.CORDON:
        return "cordon", "cordoned"
    if action is Action.NOTIFY:
        return "heads-up", "heads-up"
    actuator = actuator_of(kind)
    return (actuator.verb, actuator.past) if actuator is not None else (_SCALE.verb, _SCALE.past)


def actuator_for(root: Workload) -> Actuator | None:
    """The native stop of a root, or None when it has none (then :func:`notify_only` says why)."""
    if root.kind == "Job" and names.KUEUE_QUEUE_LABEL not in root.labels:
        return None
    return kueue_or(root.kind, root.labels)


def kueue_or(kind: str, labels: Mapping[str, str]) -> Actuator | None:
    """The kind's actuator, or Kueue's deactivation where Kueue manages a JobSet or RayCluster."""
    if kind in KUEUE_SUSPENDABLE and names.KUEUE_QUEUE_LABEL in labels:
        return KUEUE_DEACTIVATE
    return actuator_of(kind)


def actuator_of(kind: str) -> Actuator | None:
    """The actuator of a kind: its own, or the scale subresource's for a kind discovery found."""
    info = KINDS.get(kind)
    return SCALE_SUBRESOURCE if info is not None and info.scale else ACTUATORS.get(kind)


def notify_only(root: Workload) -> str | None:
    """Why a root the reaper knows is reported rather than stopped; None for kinds it does not know."""
    if root.kind == "RayService":
        return (
            "RayService has no safe native stop (its controller recreates a suspended RayCluster); "
            "scale its workers down or delete it when it is no longer needed"
        )
    if root.kind == "KnativeService":
        min_scale = next(
            (
                f"{k}={root.template_annotations[k]}"
                for k in names.KNATIVE_MIN_SCALE
                if k in root.template_annotations
            ),
            None,
        )
        keeps = (
            f"its revision template sets {min_scale}"
            if min_scale
            else "requests keep arriving (Knative scales an unused revision to zero by itself)"
        )
        return f"Knative Service is never scaled by gpu-reaper: it stays up because {keeps}"
    if root.kind == "Job":
        return (
            "a Job that Kueue does not manage is left to finish; suspend it (spec.suspend) if it should not"
        )
    return None
