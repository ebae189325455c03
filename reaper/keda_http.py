"""The KEDA HTTP add-on adapter for ``wake: keda-http``: which of its APIs the cluster serves, the
hand-over (or the pause of a ScaledObject already there) and its undo on restore.

The decisions are reaper.wake's; this module reads what they need and sends every write through the
write gate. A stop is recorded first (the count to restore, in the reaper's ConfigMap), then the
add-on's objects are created, then the workload is scaled to 0 through ``/scale``, conditional on
the version read: a run that dies in between leaves a record and objects restore finds again.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from functools import partial
from typing import Any

from common.errors import BadInputError
from common.timeutil import rfc3339
from reaper import wake
from reaper.actuators import RECORDED_SCALE, Change, write_line
from reaper.adapter_errors import ConflictError, ForbiddenError, NotFoundError
from reaper.clock import Clock
from reaper.conflict_retry import ConflictRetry, reader
from reaper.events import Events
from reaper.kinds import object_kind
from reaper.kube_api import KubeApi
from reaper.marks import meta
from reaper.outcomes import ActionResult, Outcome, Refused, RestoreResult
from reaper.planner import Plan, PlannedAction
from reaper.policy.schema import WAKEABLE_KINDS
from reaper.state_store import StateStore
from reaper.stop import Stopper
from reaper.write_gate import WriteGate

log = logging.getLogger(__name__)

# Where the add-on's external scaler answers, when it is not installed the chart's default way.
SCALER_ADDRESS_ENV = "GPU_REAPER_KEDA_HTTP_SCALER_ADDRESS"
_WAKE_KINDS = ("ScaledObject", "InterceptorRoute", "HTTPScaledObject")  # deleted in this order
_OURS = f"{wake.MANAGED_BY_LABEL}={wake.MANAGED_BY}"


def settings_from_env() -> wake.WakeSettings:
    address = os.environ.get(SCALER_ADDRESS_ENV, "").strip()
    return wake.WakeSettings(scaler_address=address or wake.DEFAULT_SCALER_ADDRESS)


class Waker:
    def __init__(
        self,
        kube: KubeApi,
        gate: WriteGate,
        *,
        events: Events,
        store: StateStore,
        retry: ConflictRetry,
        stopper: Stopper,
        clock: Clock,
        settings: wake.WakeSettings | None = None,
    ) -> None:
        self.kube = kube
        self.gate = gate
        self.events = events
        self.store = store
        self.retry = retry
        self.stopper = stopper
        self.clock = clock
        self.settings = settings or settings_from_env()
        self._api: tuple[wake.AddonApi | None] | None = None  # asked once per run

    # --- discovery ---------------------------------------------------------------------------------

    def api(self) -> wake.AddonApi | None:
        """The add-on API the cluster serves (the newer when both are); None when its CRDs are absent."""
        if self._api is None:
            documents = {api.value: self.kube.api_resources(api.value) for api in wake.AddonApi}
            served = wake.served_api(documents)
            if served is wake.AddonApi.INTERCEPTOR_ROUTE and not self.kube.api_resources("keda.sh/v1alpha1"):
                served = None  # an InterceptorRoute scales nothing without KEDA's ScaledObject
            self._api = (served,)
        return self._api[0]

    def preflight(self, plan: Plan) -> None:
        """Refuse the run (bad input, exit 2) before any write when a wake rule acts on a cluster
        without the add-on: said once, naming the rule and the workloads."""
        wanting = [a for a in plan.actions if a.wake is not None]
        if not wanting or self.api() is not None:
            return
        rules = ", ".join(sorted({a.rule for a in wanting}))
        which = ", ".join(f"{a.written.kind} {a.written.key()}" for a in wanting)
        raise BadInputError(
            f"rule {rules}: wake: keda-http for {which}, but this cluster serves neither the KEDA HTTP "
            f"add-on's InterceptorRoute ({wake.AddonApi.INTERCEPTOR_ROUTE.value}, with KEDA's "
            f"keda.sh/v1alpha1 ScaledObject) nor its HTTPScaledObject "
            f"({wake.AddonApi.HTTP_SCALED_OBJECT.value}): install the add-on, or drop wake from the rule; "
            "nothing was written"
        )

    # --- the stop ----------------------------------------------------------------------------------

    def stop(self, action: PlannedAction) -> ActionResult:
        ref = action.written
        if ref.kind not in WAKEABLE_KINDS or ref.namespace != action.target.namespace:
            raise Refused(f"wake: keda-http wakes {' and '.join(WAKEABLE_KINDS)} only, not {ref.kind}")
        api = self.api()
        if api is None:
            raise Refused("the KEDA HTTP add-on's CRDs are not installed; nothing changed")
        now = rfc3339(self.clock())
        where = f"{ref.kind} {ref.namespace}/{ref.name}"
        # Read whole (the pod template's labels pick the Service): no first try on the plan's copy.
        planned = None

        def attempt(obj: dict[str, Any]) -> tuple[dict[str, Any] | None, Change, wake.WakeDecision]:
            live, change = self.stopper._checked_stop(obj, planned, action, RECORDED_SCALE, now)
            replicas = live.replicas if live.replicas is not None else 1
            decision = self._decide(obj, ref.kind, replicas, api, action.reason)
            if isinstance(decision, wake.Refuse):
                raise Refused(f"wake: keda-http: {decision.reason}; nothing changed")

            def write() -> dict[str, Any]:
                self.store.remember(
                    ref.kind,
                    ref.namespace,
                    ref.name,
                    uid=meta(obj, "uid"),
                    original_replicas=replicas,
                    reason=action.reason,
                )
                if isinstance(decision, wake.HandOver):
                    for made in decision.objects:
                        self._create(made, ref.kind, ref.name)
                else:
                    self._pause(ref.namespace, decision.scaled_object, now)
                scale = {"metadata": {"resourceVersion": meta(obj, "resourceVersion")}, "spec": change.spec}
                return self.kube.patch_scale(ref.kind, ref.namespace, ref.name, scale)

            what = f"scale {where} through its scale subresource {change.description} and {_how(decision)}"
            return self.gate.send(f"{what} ({action.reason})", write), change, decision

        scaled, change, decision = self.retry.run(
            reader(self.kube, ref.kind, ref.namespace, ref.name), attempt
        )
        written = f"{write_line(ref.kind, ref.namespace, ref.name, change)}; {_how(decision)}"
        handed = wake.Handed.of(decision) if not isinstance(decision, wake.Refuse) else None
        if scaled is None:
            return ActionResult(action, Outcome.DRY_RUN, write=written, wake=handed)
        self.events.record(
            scaled,
            ref.kind,
            RECORDED_SCALE.done,
            f"gpu-reaper: {RECORDED_SCALE.verb}, {change.description}, {_how(decision)}: {action.reason}. "
            f"Restore: gpu-reaper restore {ref.namespace}/{ref.name}",
        )
        detail = f"{change.description}; {_how(decision)}"
        return ActionResult(action, Outcome.APPLIED, detail, write=written, wake=handed)

    def _decide(
        self, obj: dict[str, Any], kind: str, replicas: int, api: wake.AddonApi, reason: str
    ) -> wake.WakeDecision:
        """Read afresh what the plan may have missed: the autoscalers on it, the Services in front of it."""
        namespace, name = meta(obj, "namespace"), meta(obj, "name")
        scaled = [
            o
            for o in self.kube.list_optional("ScaledObject", namespace)
            if _targets(o, kind, name) and not wake.ours(o)
        ]
        hpas = [
            o
            for o in self.kube.list_objects("HorizontalPodAutoscaler", namespace)
            if _targets(o, kind, name) and not _owned_by(o, "ScaledObject", {meta(s, "name") for s in scaled})
        ]
        if hpas:
            which = ", ".join(meta(h, "name") for h in hpas)
            return wake.Refuse(f"HorizontalPodAutoscaler {which} scales it; a ScaledObject would fight it")
        if len(scaled) > 1:
            return wake.Refuse(
                f"several ScaledObjects scale it ({', '.join(meta(s, 'name') for s in scaled)})"
            )
        if scaled:
            return wake.pause_decision(scaled[0])
        served = wake.serving_port(obj, self.kube.list_objects("Service", namespace))
        if isinstance(served, wake.Refuse):
            return served
        return wake.hand_over(obj, kind, served, replicas, api, self.settings, reason)

    def _create(self, made: dict[str, Any], kind: str, name: str) -> None:
        made_kind = object_kind(made)
        namespace = made["metadata"]["namespace"]
        try:
            self.kube.create(made_kind, namespace, made)
        except ConflictError as e:  # AlreadyExists: a retry's own object is fine, anyone else's is not
            # Found among the reaper's own (a list it makes anyway): no get on the add-on's kinds.
            mine = self.kube.list_optional(made_kind, namespace, selector=_OURS)
            existing = next((o for o in mine if meta(o, "name") == made["metadata"]["name"]), None)
            if existing is None or not wake.wakes(existing, kind, name):
                raise Refused(
                    f"{made_kind} {namespace}/{made['metadata']['name']} exists and is not gpu-reaper's; "
                    "the workload was not scaled"
                ) from e

    def _pause(self, namespace: str, name: str, now: str) -> None:
        current = self.kube.get("ScaledObject", namespace, name)
        self.kube.patch(
            "ScaledObject", namespace, name, wake.pause_patch(meta(current, "resourceVersion"), now)
        )

    # --- restore -----------------------------------------------------------------------------------

    def handed_over(self, namespace: str | None) -> Iterator[tuple[str, str, str]]:
        """(kind, namespace, name) of every workload the reaper handed over or paused a ScaledObject of."""
        seen: set[tuple[str, str, str]] = set()
        for obj in self._listed(namespace):
            target = _wake_target(obj)
            if target is not None and target not in seen:
                seen.add(target)
                yield target

    def undo(self, kind: str, namespace: str, name: str, uid: str, restored: RestoreResult) -> RestoreResult:
        """After the workload's own restore: its count set again where only the wake objects still say
        it, then the objects the reaper created removed and the ScaledObject it paused unpaused."""
        if kind not in WAKEABLE_KINDS:
            return restored
        created = [o for o in self._listed(namespace, paused=False) if wake.wakes(o, kind, name, uid)]
        paused = [
            o for o in self._listed(namespace, ours=False) if _wake_target(o) == (kind, namespace, name)
        ]
        if not created and not paused:
            return restored
        done: list[str] = []
        if restored.outcome is Outcome.SKIPPED:
            count = wake.recorded_replicas(created)
            scaled = self._scale_back(kind, namespace, name, count) if count is not None else None
            if scaled:
                done.append(scaled)
        elif restored.outcome is Outcome.FAILED:
            return restored  # the objects stay, so the workload still wakes; a retry finds them
        for obj in sorted(created, key=lambda o: _WAKE_KINDS.index(object_kind(o))):
            what = f"{object_kind(obj)} {namespace}/{meta(obj, 'name')}"
            self.gate.send(
                f"delete {what} (gpu-reaper's wake for {kind} {namespace}/{name})",
                partial(self._delete, obj),
            )
            done.append(f"deleted {what}")
        for obj in paused:
            so = meta(obj, "name")
            self.gate.send(
                f"unpause ScaledObject {namespace}/{so}",
                partial(self._unpause, namespace, so),
            )
            done.append(f"unpaused ScaledObject {namespace}/{so}")
        detail = "; ".join(([restored.detail] if restored.outcome is not Outcome.SKIPPED else []) + done)
        return RestoreResult(restored.target, self.gate.done, detail)

    def _listed(
        self, namespace: str | None, *, ours: bool = True, paused: bool = True
    ) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        # Listed only where the add-on is served: where it is not, the reaper made none of them.
        for kind in _WAKE_KINDS if ours and self.api() is not None else ():
            try:
                found += self.kube.list_optional(kind, namespace, selector=_OURS)
            except ForbiddenError as e:
                log.warning("not allowed to list %s (%s): gpu-reaper's wake objects there stay", kind, e)
        if paused:
            try:
                found += [
                    o
                    for o in self.kube.list_optional("ScaledObject", namespace)
                    if wake.PAUSED_BY_REAPER in ((o.get("metadata") or {}).get("annotations") or {})
                ]
            except ForbiddenError as e:
                log.warning("not allowed to list ScaledObjects (%s): those gpu-reaper paused stay paused", e)
        return found

    def _scale_back(self, kind: str, namespace: str, name: str, count: int) -> str | None:
        """The handed-over count, where the workload is at 0 and the record of stops no longer says it."""
        current = self.kube.get(kind, namespace, name)
        if (current.get("spec") or {}).get("replicas"):
            return None
        body = {
            "metadata": {"resourceVersion": meta(current, "resourceVersion")},
            "spec": {"replicas": count},
        }
        self.gate.send(
            f"restore {kind} {namespace}/{name} through its scale subresource: {count} replicas",
            lambda: self.kube.patch_scale(kind, namespace, name, body),
        )
        return f"{count} replicas"

    def _delete(self, obj: dict[str, Any]) -> None:
        # Gone already is fine: the add-on's operator removes a ScaledObject with its HTTPScaledObject.
        with contextlib.suppress(NotFoundError):
            self.kube.delete(
                object_kind(obj), meta(obj, "namespace"), meta(obj, "name"), uid=meta(obj, "uid")
            )

    def _unpause(self, namespace: str, name: str) -> None:
        current = self.kube.get("ScaledObject", namespace, name)
        if wake.PAUSED_BY_REAPER not in ((current.get("metadata") or {}).get("annotations") or {}):
            return  # unpaused by someone since: theirs now
        self.kube.patch("ScaledObject", namespace, name, wake.unpause_patch(meta(current, "resourceVersion")))


def _how(decision: wake.WakeDecision) -> str:
    if isinstance(decision, wake.HandOver):
        return f"handed to the KEDA HTTP add-on: {decision.describe()}; a request wakes it"
    if isinstance(decision, wake.Pause):
        return f"ScaledObject {decision.scaled_object} paused at 0 replicas ({wake.KEDA_PAUSED_REPLICAS})"
    return decision.reason  # pragma: no cover (a refusal writes nothing)


def _targets(obj: dict[str, Any], kind: str, name: str) -> bool:
    target = (obj.get("spec") or {}).get("scaleTargetRef") or {}
    # KEDA defaults the target kind to Deployment; an HPA always names it.
    if not isinstance(target, dict):
        return False
    return target.get("name") == name and (target.get("kind") or "Deployment") == kind


def _owned_by(obj: dict[str, Any], kind: str, names: set[str]) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, dict) and r.get("kind") == kind and r.get("name") in names for r in refs)


def _wake_target(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    """The workload a wake object or a paused ScaledObject is about."""
    namespace = meta(obj, "namespace")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if wake.ours(obj):
        kind, _, name = str(annotations.get(wake.WAKES) or "").partition("/")
        return (kind, namespace, name) if kind in WAKEABLE_KINDS and name else None
    if wake.PAUSED_BY_REAPER in annotations:
        target = (obj.get("spec") or {}).get("scaleTargetRef") or {}
        kind = str(target.get("kind") or "Deployment") if isinstance(target, dict) else ""
        name = str(target.get("name") or "") if isinstance(target, dict) else ""
        return (kind, namespace, name) if kind in WAKEABLE_KINDS and name else None
    return None
