"""``wake: keda-http``: hand an idle workload to the KEDA HTTP add-on, so the first request wakes it.

Pure: plain Kubernetes JSON in, plain JSON and decisions out; reaper.keda_http reads and writes.

The add-on routes requests through its interceptor and scales the workload from zero when one
arrives. Since add-on 0.14 that takes two objects: an ``InterceptorRoute`` (http.keda.sh/v1beta1:
which hosts reach which Service and port) and a KEDA ``ScaledObject`` (keda.sh/v1alpha1) whose
trigger is the add-on's external scaler (``external-push``, metadata ``scalerAddress`` and
``interceptorRoute``). Before 0.14 one ``HTTPScaledObject`` (http.keda.sh/v1alpha1, deprecated since)
did both: the add-on's operator writes the ScaledObject itself, copying its labels and annotations.
Whichever the cluster's discovery serves is written; the newer when both are.

The hosts routed are the Service's in-cluster names only: a route with no host is the add-on's
catch-all, and any other host would take requests meant for someone else's Service.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # reaper.cluster reads ``ours`` from here
    from reaper.cluster import Autoscaler

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-reaper"
# On every object the reaper creates for a wake: the workload it wakes (``Deployment/NAME``), its uid.
WAKES = "gpu-reaper/wakes"
WAKES_UID = "gpu-reaper/wakes-uid"
ORIGINAL_REPLICAS = "gpu-reaper/original-replicas"
# On a ScaledObject someone else owns that the reaper paused: when, so restore unpauses only its own.
PAUSED_BY_REAPER = "gpu-reaper/paused-at"
# KEDA's own pause annotations (keda.sh docs, "Pause autoscaling"): paused-replicas scales the
# target to that count and holds it there; paused holds it at whatever count it has.
KEDA_PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
KEDA_PAUSED = "autoscaling.keda.sh/paused"

# The add-on chart's external scaler Service, installed in namespace keda (its default install).
DEFAULT_SCALER_ADDRESS = "keda-add-ons-http-external-scaler.keda:9090"
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
# Concurrent requests per replica the add-on's scaler aims at: a GPU model server batches them.
DEFAULT_TARGET_CONCURRENCY = 100

_HTTP_PROTOCOLS = frozenset({"http", "https", "kubernetes.io/h2c", "kubernetes.io/ws", "kubernetes.io/wss"})
_HTTP_PORT_NAMES = frozenset({"http", "https", "http2", "h2c", "grpc", "web"})


class AddonApi(StrEnum):
    """Which of the add-on's APIs the cluster serves: the group-version written."""

    INTERCEPTOR_ROUTE = "http.keda.sh/v1beta1"  # add-on 0.14 onwards, with a KEDA ScaledObject
    HTTP_SCALED_OBJECT = "http.keda.sh/v1alpha1"  # before 0.14; deprecated since

    @property
    def kind(self) -> str:
        return "InterceptorRoute" if self is AddonApi.INTERCEPTOR_ROUTE else "HTTPScaledObject"


def served_api(resources: Mapping[str, Sequence[Mapping[str, Any]] | None]) -> AddonApi | None:
    """The add-on API to write, from the discovery documents of its group-versions (None: not served)."""
    for api in AddonApi:
        listed = resources.get(api.value) or ()
        if any(r.get("kind") == api.kind and "/" not in str(r.get("name") or "") for r in listed):
            return api
    return None


@dataclass(frozen=True)
class WakeSettings:
    scaler_address: str = DEFAULT_SCALER_ADDRESS
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    target_concurrency: int = DEFAULT_TARGET_CONCURRENCY


@dataclass(frozen=True)
class Served:
    """The Service and port a workload serves on: what the interceptor forwards a request to."""

    service: str
    port: int


@dataclass(frozen=True)
class Refuse:
    """Nothing is written to this workload, for this reason."""

    reason: str


@dataclass(frozen=True)
class Pause:
    """A KEDA ScaledObject already scales it: paused at 0 replicas the way KEDA documents."""

    scaled_object: str


@dataclass(frozen=True)
class HandOver:
    """The add-on's objects to create, in order (the route before the ScaledObject that names it)."""

    objects: tuple[dict[str, Any], ...]
    served: Served

    def describe(self) -> str:
        made = " and ".join(f"{o['kind']} {o['metadata']['name']}" for o in self.objects)
        return f"{made} (Service {self.served.service} port {self.served.port})"


WakeDecision = Refuse | Pause | HandOver


@dataclass(frozen=True)
class Handed:
    """What a wake action handed over (or would), as the plan, the report and Slack say it."""

    objects: tuple[str, ...]  # "InterceptorRoute llm", "ScaledObject llm"; or the one paused
    service: str = ""  # "llm:8000": where the interceptor sends the first request
    paused: bool = False  # someone else's ScaledObject paused at 0: no request wakes it

    @classmethod
    def of(cls, decision: HandOver | Pause) -> Handed:
        if isinstance(decision, Pause):
            return cls((f"ScaledObject {decision.scaled_object}",), paused=True)
        made = tuple(f"{o['kind']} {o['metadata']['name']}" for o in decision.objects)
        return cls(made, f"{decision.served.service}:{decision.served.port}")

    def sentence(self) -> str:
        """One line: what is handed over, and what the first request does (docs/wake.md)."""
        if self.paused:
            return (
                f"{self.objects[0]} paused at 0 replicas ({KEDA_PAUSED_REPLICAS}): no request wakes it "
                "while paused; restore unpauses it"
            )
        return (
            f"handed to the KEDA HTTP add-on: {' + '.join(self.objects)} → Service {self.service}; the "
            "first request through the add-on's interceptor wakes it, after a cold start (minutes for "
            "a large model)"
        )


# --- the Service and port a workload serves on --------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pod_labels(workload: Mapping[str, Any]) -> Mapping[str, str]:
    labels = _mapping(_mapping(_mapping(workload.get("spec")).get("template")).get("metadata")).get("labels")
    return {str(k): str(v) for k, v in _mapping(labels).items()}


def selects(service: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """The Service's selector picks pods with these labels (a Service without one picks none)."""
    selector = _mapping(_mapping(service.get("spec")).get("selector"))
    return bool(selector) and all(labels.get(str(k)) == str(v) for k, v in selector.items())


def _is_http(port: Mapping[str, Any]) -> bool:
    name = str(port.get("name") or "").lower()
    protocol = str(port.get("appProtocol") or "").lower()
    return protocol in _HTTP_PROTOCOLS or name in _HTTP_PORT_NAMES or name.startswith(("http-", "grpc-"))


def _tcp_ports(service: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    ports = _mapping(service.get("spec")).get("ports")
    return [
        p
        for p in (ports if isinstance(ports, list) else ())
        if isinstance(p, Mapping)
        and str(p.get("protocol") or "TCP") == "TCP"
        and isinstance(p.get("port"), int)
        and not isinstance(p.get("port"), bool)
    ]


def serving_port(workload: Mapping[str, Any], services: Iterable[Mapping[str, Any]]) -> Served | Refuse:
    """The one Service (and its one HTTP port) that sends requests to the workload's pods.

    A headless Service (a StatefulSet's governing one) routes no request through a cluster IP: it
    counts only when it is the only one. Several candidates are refused, not guessed between: the
    interceptor would wake the workload for one and leave callers of the other failing.
    """
    labels = pod_labels(workload)
    name = str(_mapping(workload.get("metadata")).get("name") or "")
    matching = [
        s
        for s in services
        if selects(s, labels) and str(_mapping(s.get("spec")).get("type") or "ClusterIP") != "ExternalName"
    ]
    routed = [s for s in matching if str(_mapping(s.get("spec")).get("clusterIP") or "") != "None"]
    candidates = routed or matching
    if not candidates:
        return Refuse(f"no Service selects the pods of {name}: the add-on routes requests through one")
    if len(candidates) > 1:
        which = ", ".join(sorted(str(_mapping(s.get("metadata")).get("name")) for s in candidates))
        return Refuse(f"several Services select the pods of {name} ({which}); the add-on routes one")
    service = candidates[0]
    svc = str(_mapping(service.get("metadata")).get("name") or "")
    ports = _tcp_ports(service)
    if len(ports) > 1:
        ports = [p for p in ports if _is_http(p)]
    if len(ports) != 1:
        return Refuse(
            f"Service {svc} has {'no' if not ports else 'several'} HTTP port"
            f"{'' if not ports else 's'} to route to (name one http, or set appProtocol: http)"
        )
    return Served(svc, int(ports[0]["port"]))


# --- the objects written ----------------------------------------------------------------------------


def hosts(service: str, namespace: str, cluster_domain: str = DEFAULT_CLUSTER_DOMAIN) -> list[str]:
    """The names in-cluster callers reach the Service by: nobody else's requests match them."""
    base = f"{service}.{namespace}"
    return [base, f"{base}.svc", f"{base}.svc.{cluster_domain}"]


def _metadata(
    workload: Mapping[str, Any], kind: str, name: str, replicas: int, reason: str
) -> dict[str, Any]:
    meta = _mapping(workload.get("metadata"))
    return {
        "name": name,
        "namespace": str(meta.get("namespace") or ""),
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        "annotations": {
            WAKES: f"{kind}/{meta.get('name')}",
            WAKES_UID: str(meta.get("uid") or ""),
            ORIGINAL_REPLICAS: str(replicas),
            "gpu-reaper/reason": reason,
        },
    }


def hand_over(
    workload: Mapping[str, Any],
    kind: str,
    served: Served,
    replicas: int,
    api: AddonApi,
    settings: WakeSettings = WakeSettings(),
    reason: str = "",
) -> HandOver:
    """The add-on objects that scale ``workload`` between 0 and its ``replicas`` on its requests."""
    meta = _mapping(workload.get("metadata"))
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    api_version = str(workload.get("apiVersion") or "apps/v1")
    routed = hosts(served.service, namespace, settings.cluster_domain)
    if api is AddonApi.HTTP_SCALED_OBJECT:
        httpso = {
            "apiVersion": api.value,
            "kind": api.kind,
            "metadata": _metadata(workload, kind, name, replicas, reason),
            "spec": {
                "hosts": routed,
                "scaleTargetRef": {
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": name,
                    "service": served.service,
                    "port": served.port,
                },
                "replicas": {"min": 0, "max": replicas},
                "scalingMetric": {"concurrency": {"targetValue": settings.target_concurrency}},
            },
        }
        return HandOver((httpso,), served)
    route = {
        "apiVersion": api.value,
        "kind": api.kind,
        "metadata": _metadata(workload, kind, name, replicas, reason),
        "spec": {
            "target": {"service": served.service, "port": served.port},
            "rules": [{"hosts": routed}],
            "scalingMetric": {"concurrency": {"targetValue": settings.target_concurrency}},
        },
    }
    scaled = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _metadata(workload, kind, name, replicas, reason),
        "spec": {
            "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": name},
            "minReplicaCount": 0,
            "maxReplicaCount": replicas,
            "triggers": [
                {
                    "type": "external-push",
                    "metadata": {"scalerAddress": settings.scaler_address, "interceptorRoute": name},
                }
            ],
        },
    }
    return HandOver((route, scaled), served)


# --- autoscalers already on the workload ------------------------------------------------------------


def ours(obj: Mapping[str, Any]) -> bool:
    """Created by the reaper for a wake (its label and the workload it wakes)."""
    meta = _mapping(obj.get("metadata"))
    labels = _mapping(meta.get("labels"))
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY and WAKES in _mapping(meta.get("annotations"))


def wakes(obj: Mapping[str, Any], kind: str, name: str, uid: str = "") -> bool:
    """One of the reaper's wake objects, for this workload (of this uid, where both say one)."""
    if not ours(obj):
        return False
    annotations = _mapping(_mapping(obj.get("metadata")).get("annotations"))
    said = str(annotations.get(WAKES_UID) or "")
    return annotations.get(WAKES) == f"{kind}/{name}" and (not uid or not said or said == uid)


@dataclass(frozen=True)
class ScalerCheck:
    """What row 8 (autoscaled) makes of the autoscalers on a workload, for a rule that may wake."""

    done: bool  # the reaper's own hand-over: nothing left to do
    detail: str


def check_scalers(scalers: Sequence[Autoscaler], wake: str | None) -> ScalerCheck | None:
    """None: go on (no autoscaler, or one KEDA ScaledObject a wake rule pauses); else why not."""
    if not scalers:
        return None
    own = [a for a in scalers if a.ours]
    # KEDA scales through an HPA it owns (keda-hpa-NAME): part of the ScaledObject, not another scaler.
    objects = {a.name for a in scalers if a.kind == "ScaledObject"}
    others = [
        a for a in scalers if not a.ours and not (a.owner_kind == "ScaledObject" and a.owner in objects)
    ]
    if own and all(a.ours or a.owner_kind == "ScaledObject" for a in scalers):
        names = ", ".join(a.describe() for a in own)
        return ScalerCheck(
            True,
            f"handed to the KEDA HTTP add-on by gpu-reaper ({names}): it is at zero "
            "whenever idle, and a request wakes it",
        )
    keda = [a for a in others if a.kind == "ScaledObject"]
    if wake is not None and len(others) == 1 and len(keda) == 1:
        return None  # paused at 0 replicas (autoscaling.keda.sh/paused-replicas) by the stop
    described = ", ".join(a.describe() for a in others)
    if wake is not None:
        hpas = [a for a in others if a.kind != "ScaledObject"]
        why = (
            f"{', '.join(a.describe() for a in hpas)} is not KEDA's: a ScaledObject for the wake would "
            "fight it, and it has no pause"
            if hpas
            else "several ScaledObjects scale it; KEDA allows one per workload"
        )
        return ScalerCheck(False, f"scaled by {described}; wake: keda-http refused: {why}")
    return ScalerCheck(
        False, f"scaled by {described}; lower its minimum replicas (KEDA: minReplicaCount 0) instead"
    )


def pause_decision(scaled_object: Mapping[str, Any]) -> Pause | Refuse:
    """Pause someone else's ScaledObject at 0, unless it is paused already (by its owner: theirs)."""
    meta = _mapping(scaled_object.get("metadata"))
    annotations = _mapping(meta.get("annotations"))
    name = str(meta.get("name") or "")
    if PAUSED_BY_REAPER in annotations:
        return Refuse(f"ScaledObject {name} is paused by gpu-reaper already")
    for key in (KEDA_PAUSED_REPLICAS, KEDA_PAUSED):
        if key in annotations:
            said = f"{key}={annotations[key]!r}"
            return Refuse(f"ScaledObject {name} is paused by its owner ({said}); left alone")
    return Pause(name)


def pause_patch(resource_version: str, now: str) -> dict[str, Any]:
    return {
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": {KEDA_PAUSED_REPLICAS: "0", PAUSED_BY_REAPER: now},
        }
    }


def unpause_patch(resource_version: str) -> dict[str, Any]:
    return {
        "metadata": {
            "resourceVersion": resource_version,
            "annotations": {KEDA_PAUSED_REPLICAS: None, PAUSED_BY_REAPER: None},
        }
    }


def recorded_replicas(objects: Iterable[Mapping[str, Any]]) -> int | None:
    """The count the reaper handed over, as its own wake objects say (for a restore without a record)."""
    for obj in objects:
        text = str(_mapping(_mapping(obj.get("metadata")).get("annotations")).get(ORIGINAL_REPLICAS) or "")
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None
