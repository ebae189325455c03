"""kmock's Kubernetes emulator on a real port, driven by the real client (the reaper's tests and benchmark).

The emulator runs its aiohttp server on an event loop in a background thread, so tests stay
synchronous like the reaper itself. ``ApiServer`` adds what the reaper relies on from a real API
server and kmock leaves out: resourceVersion bookkeeping with 409 on a stale precondition, lists
as the API server serves them (below), and fault injection (a status or a slow answer for chosen
requests).

Lists, as a real API server answers them:
  * ``labelSelector`` filters; items come in etcd's key order (namespace, then name).
  * ``limit`` pages: at most that many items, an opaque ``metadata.continue`` and
    ``remainingItemCount`` (left out under a label selector, whose remainder the server cannot count).
    Every page of one list is cut from the snapshot taken at its first page, at one resourceVersion.
  * A continue token whose revision etcd has compacted (:meth:`ApiServer.compact`), or one issued for
    another list, is answered 410 Expired; one that cannot be decoded, 400. A continue with a
    resourceVersion other than "0" is refused (400), as the API server refuses it.
  * ``resourceVersion=0`` without a continue token is served from the watch cache: by default the
    way servers have long done it, ignoring ``limit`` and answering everything at once; with
    ``cache_pages`` the way servers whose watch cache can page do it. :meth:`ApiServer.freeze_cache`
    lets the cache lag behind the objects, as a real one may.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml

from common.errors import BadInputError
from reaper import selectors
from reaper.kinds import KINDS, object_kind
from reaper.kube import KubeClient, KubeSettings

# "group/version/plural" (core: "version/plural") per kind the reaper knows, as kmock names resources.
RESOURCES = {
    name: f"{k.group}/{k.version}/{k.plural}" if k.group else f"{k.version}/{k.plural}"
    for name, k in KINDS.items()
}
CLUSTER_SCOPED = {name for name, k in KINDS.items() if not k.namespaced}
BUILT_IN_SCALE = frozenset({"Deployment", "StatefulSet", "ReplicaSet"})  # apps/v1 kinds with /scale


_Snapshot = tuple[tuple[Any, ...], list[dict[str, Any]]]  # (what was listed, the items at its first page)


@dataclass
class Fault:
    """Answer matching requests with ``status`` (before any change) or after ``delay`` seconds (after it)."""

    method: str
    kind: str
    name: str | None = None
    status: int | None = None
    delay: float = 0.0
    times: int = 1
    query: str | None = None  # only requests carrying this query parameter (e.g. "continue")
    subresource: str | None = None  # only requests of this subresource ("scale"); None: the object

    def matches(self, request: kmock.Request) -> bool:
        if self.times <= 0 or request.method.value != self.method:
            return False
        if (request.subresource or None) != self.subresource:
            return False
        if self.query is not None and self.query not in request.url.query:
            return False
        if request.resource is None or str(request.resource.plural) != RESOURCES[self.kind].rsplit("/", 1)[1]:
            return False
        return self.name is None or request.name == self.name


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    faults: list[Fault] = attrs.field(factory=list, init=False)
    # Emulated controllers: called after every change, they reconcile children from their roots.
    controllers: list[Callable[[ApiServer], None]] = attrs.field(factory=list, init=False)
    # A watch cache that pages ``resourceVersion=0`` lists (newer servers) rather than ignoring limit.
    cache_pages: bool = attrs.field(default=False, init=False)
    _versions: dict[Any, int] = attrs.field(factory=dict, init=False)
    _counter: Any = attrs.field(factory=lambda: itertools.count(1000), init=False)
    _revision: int = attrs.field(default=999, init=False)  # the latest resourceVersion handed out
    _compacted: int = attrs.field(default=0, init=False)  # continue tokens at or below it have expired
    _cache: dict[Any, list[dict[str, Any]]] | None = attrs.field(default=None, init=False)
    # Lists being paged: id → (what was listed, the items at its first page).
    _snapshots: dict[int, _Snapshot] = attrs.field(factory=dict, init=False)
    _list_ids: Any = attrs.field(factory=itertools.count, init=False)
    list_bytes: int = attrs.field(default=0, init=False)  # bodies of list answers served, for benchmarks

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock 0.8 cannot parse the path /api/v1/namespaces (it reads "namespaces" as the start of
        # /namespaces/NAME/...): answer that one list here, from the same object store, and log it.
        if raw_request.method == "GET" and raw_request.path.rstrip("/") == "/api/v1/namespaces":
            resource = kmock.resource(RESOURCES["Namespace"])
            self._requests.append(
                kmock.Request(
                    id=len(self._requests),
                    method="GET",
                    url=raw_request.url,
                    action=kmock.action.LIST,
                    resource=resource,
                )
            )
            try:
                return self._serve_paged_list(self._requests[-1])
            except kmock.KubernetesError as e:
                body = {"kind": "Status", "status": "Failure", "reason": e.reason, "message": e.message}
                return aiohttp.web.json_response({**body, "code": e.status}, status=e.status)
        # It reads GET /api/v1/namespaces/NAME as a discovery of namespace NAME: answer with the
        # Namespace object (404 when there is none), as the API server does, and log it.
        parts = raw_request.path.rstrip("/").split("/")
        if raw_request.method == "GET" and len(parts) == 5 and parts[1:4] == ["api", "v1", "namespaces"]:
            request = kmock.Request(
                id=len(self._requests),
                method="GET",
                url=raw_request.url,
                action=kmock.action.FETCH,
                resource=kmock.resource(RESOURCES["Namespace"]),
                name=parts[4],
            )
            self._requests.append(request)
            return self._serve_namespace(request)
        return await super().__call__(raw_request)

    def _serve_namespace(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        fault = next((f for f in self.faults if f.matches(request)), None)
        status = None
        if fault is not None:
            fault.times -= 1
            status = fault.status
        key = (request.resource, None, request.name)
        found = self.objects[key] if key in self.objects and not self.objects[key].deleted else None
        if status is None and found is None:
            status = 404
        if status is not None or found is None:
            message = f"namespaces {request.name!r} not found" if status == 404 else "injected fault"
            body = {"kind": "Status", "status": "Failure", "reason": "Injected", "message": message}
            return aiohttp.web.json_response({**body, "code": status}, status=status)
        return aiohttp.web.json_response(found.raw)

    # --- lists --------------------------------------------------------------------------------------

    def _bump(self) -> int:
        self._revision = next(self._counter)
        return self._revision

    def compact(self) -> None:
        """etcd compacts its history: every continue token issued so far expires."""
        self._compacted = self._revision
        self._snapshots.clear()

    def freeze_cache(self) -> None:
        """The watch cache stops following changes: ``resourceVersion=0`` lists answer what is here now."""
        cache: dict[Any, list[dict[str, Any]]] = {}
        for (r, _, _), o in self.objects.items():
            if not o.deleted:
                cache.setdefault(r, []).append(json.loads(json.dumps(o.raw)))
        self._cache = cache

    def _current(self, resource: Any, cached: bool) -> list[dict[str, Any]]:
        if cached and self._cache is not None:
            return list(self._cache.get(resource, ()))
        return [o.raw for (r, _, _), o in self.objects.items() if r == resource and not o.deleted]

    def _serve_paged_list(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        built_in = _list_kind(request.resource, custom=False) != "List"  # always served, like a real server
        if not built_in and request.resource not in self._get_resources():
            raise kmock.KubernetesResourceNotFoundError()
        query = request.url.query
        selector = query.get("labelSelector", "")
        try:
            wanted = selectors.parse(selector)
        except BadInputError as e:
            raise kmock.KubernetesError(status=400, reason="BadRequest", message=str(e)) from None
        limit = int(query.get("limit") or 0)
        version = query.get("resourceVersion")
        token = query.get("continue")
        identity = (str(request.resource), request.namespace, selector)
        if token:
            if version not in (None, "", "0"):
                message = "specifying resource version is not allowed when using continue"
                raise kmock.KubernetesError(status=400, reason="BadRequest", message=message)
            revision, sid, snapshot, start = self._resume(token, identity)
        else:
            cached = version == "0"
            items = sorted(
                (
                    o
                    for o in self._current(request.resource, cached)
                    if (request.namespace is None or o["metadata"].get("namespace") == request.namespace)
                    and selectors.matches(wanted, o["metadata"].get("labels") or {})
                ),
                key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]),
            )
            if cached and not self.cache_pages:
                limit = 0  # the watch cache answers everything and cannot continue
            revision, sid, start = self._revision, next(self._list_ids), 0
            snapshot = (identity, items)
        items = snapshot[1]
        end = len(items) if limit <= 0 else min(len(items), start + limit)
        meta: dict[str, Any] = {"resourceVersion": str(revision)}
        if end < len(items):
            self._snapshots[sid] = snapshot
            meta["continue"] = _encode_token(revision, sid, end)
            if not selector:
                meta["remainingItemCount"] = len(items) - end
        kind = _list_kind(request.resource)
        response = aiohttp.web.json_response(
            {"apiVersion": "v1", "kind": kind, "metadata": meta, "items": items[start:end]}
        )
        self.list_bytes += len(response.body or b"")  # type: ignore[arg-type]
        return response

    def _resume(self, token: str, identity: tuple[Any, ...]) -> tuple[int, int, _Snapshot, int]:
        try:
            doc = json.loads(base64.urlsafe_b64decode(token.encode()))
            revision, sid, start = int(doc["rv"]), int(doc["list"]), int(doc["start"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise kmock.KubernetesError(
                status=400, reason="BadRequest", message="continue key is not valid"
            ) from None
        snapshot = self._snapshots.get(sid)
        if revision <= self._compacted or snapshot is None or snapshot[0] != identity:
            raise kmock.KubernetesError(
                status=410,
                reason="Expired",
                message="The provided continue parameter is too old to display a consistent list result. "
                "You can start a new list without the continue parameter.",
            )
        return revision, sid, snapshot, start

    async def _handle(self, request: kmock.Request) -> Any:
        fault = next((f for f in self.faults if f.matches(request)), None)
        if fault is not None:
            fault.times -= 1
            if fault.status is not None:
                raise kmock.KubernetesError(status=fault.status, reason="Injected", message="injected fault")
        if request.action == kmock.action.LIST and request.resource is not None:
            if request.resource.plural is None:  # GET /apis/<group>/<version>: discovery
                return aiohttp.web.json_response(await self._serve_version(request))
            return self._serve_paged_list(request)
        if request.subresource == "scale" and request.resource is not None:
            scaled = self._serve_scale(request)
            if fault is not None and fault.delay:
                await asyncio.sleep(fault.delay)  # the change is made; only the answer is late
            return scaled
        self._track_versions(request)
        response = await super()._handle(request)
        if request.action in (kmock.action.UPDATE, kmock.action.CREATE):
            for controller in self.controllers:
                controller(self)
        if fault is not None and fault.delay:
            await asyncio.sleep(fault.delay)  # the change is made; only the answer is late
        return response

    # --- the scale subresource ----------------------------------------------------------------------

    async def _serve_version(self, request: kmock.Request) -> Any:
        # The API server lists a CRD's scale subresource as an autoscaling/v1 Scale with its own verbs.
        doc = await super()._serve_version(request)
        for r in doc.get("resources", ()):
            if str(r.get("name", "")).endswith("/scale"):
                r.update(
                    kind="Scale",
                    group="autoscaling",
                    version="v1",
                    singularName="",
                    verbs=["get", "patch", "update"],
                )
        return doc

    def _serve_scale(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """``/scale`` of a custom kind that declares it: an autoscaling/v1 Scale over spec.replicas.

        Like the API server: the Scale carries the parent's resourceVersion, a write with another
        one is a 409, and a write changes the parent's spec.replicas (and its resourceVersion).
        """
        info = self.resources.get(request.resource) if request.resource in self.resources else None
        key = (request.resource, request.namespace, request.name)
        if (
            info is None
            or "scale" not in info.subresources
            or key not in self.objects
            or self.objects[key].deleted
        ):
            raise kmock.KubernetesError(status=404, reason="NotFound", message=f"{request.name!r} not found")
        if request.method.value == "PATCH":
            body = request.data if isinstance(request.data, dict) else {}
            current = str(self._versions.get(key) or self.objects[key].raw["metadata"].get("resourceVersion"))
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted and str(wanted) != current:
                raise kmock.KubernetesError(
                    status=409,
                    reason="Conflict",
                    message=f"Operation cannot be fulfilled on {request.resource.plural} {request.name!r}: "
                    "the object has been modified; please apply your changes to the "
                    "latest version and try again",
                )
            replicas = (body.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise kmock.KubernetesError(
                    status=422, reason="Invalid", message="spec.replicas: Invalid value"
                )
            version = self._bump()
            self._versions[key] = version
            self.objects[key].patch(
                {"metadata": {"resourceVersion": str(version)}, "spec": {"replicas": replicas}}
            )
            for controller in self.controllers:
                controller(self)
        elif request.method.value != "GET":
            raise kmock.KubernetesError(status=405, reason="MethodNotAllowed", message="get or patch /scale")
        obj = self.objects[key].raw
        meta = obj.get("metadata") or {}
        scale = {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
            "status": {"replicas": (obj.get("status") or {}).get("replicas", 0)},
        }
        return aiohttp.web.json_response(scale)

    def raw(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object (for emulated controllers; on the emulator's loop)."""
        key = (kmock.resource(RESOURCES[kind]), None if kind in CLUSTER_SCOPED else namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return self.objects[key].raw  # type: ignore[no-any-return]

    def controller_patch(self, kind: str, namespace: str | None, name: str, patch: dict[str, Any]) -> None:
        """A controller's own write: a merge into the stored object, with a new resourceVersion."""
        key = (kmock.resource(RESOURCES[kind]), None if kind in CLUSTER_SCOPED else namespace, name)
        version = self._bump()
        self._versions[key] = version
        meta = {**patch.get("metadata", {}), "resourceVersion": str(version)}
        self.objects[key].patch({**patch, "metadata": meta})

    def _track_versions(self, request: kmock.Request) -> None:
        # Synchronous (no await) from check to reservation, so two racing patches cannot both pass.
        if request.resource is None or not isinstance(request.data, dict):
            return
        meta = request.data.setdefault("metadata", {})
        if request.action == kmock.action.CREATE:
            meta.setdefault("uid", f"uid-{self._bump()}")
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            version = self._bump()
            key = (request.resource, request.namespace or meta.get("namespace"), meta.get("name"))
            if key not in self._versions or key not in self.objects or self.objects[key].deleted:
                self._versions[key] = version
                meta["resourceVersion"] = str(version)
            return
        if request.action != kmock.action.UPDATE or request.name is None:
            return
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return  # the emulator answers 404
        current = self._versions.get(key)
        if current is None:
            current = int(self.objects[key].get("metadata", {}).get("resourceVersion") or 1)
        wanted = meta.get("resourceVersion")
        if wanted and str(wanted) != str(current):
            raise kmock.KubernetesError(
                status=409,
                reason="Conflict",
                message=f"Operation cannot be fulfilled on {request.resource.plural} {request.name!r}: "
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        version = self._bump()
        self._versions[key] = version
        meta["resourceVersion"] = str(version)


def _encode_token(revision: int, list_id: int, start: int) -> str:
    doc = {"rv": revision, "list": list_id, "start": start}
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()


def _list_kind(resource: Any, custom: bool | None = None) -> str:
    """``DeploymentList`` for a known resource (of the given customness, if one is given), else ``List``."""
    plural, group = str(resource.plural), str(resource.group or "")
    api_kind = next(
        (
            k.api_kind
            for k in KINDS.values()
            if k.plural == plural and k.group == group and (custom is None or k.custom == custom)
        ),
        "",
    )
    return f"{api_kind}List"


class EmulatedCluster:
    """The emulator as tests use it: seed objects, read them back, inspect requests, inject faults."""

    def __init__(
        self, server: ApiServer, url: str, kubeconfig: Path, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.server = server
        self.url = url
        self.kubeconfig = kubeconfig
        self._loop = loop

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the emulator's loop (object access is not thread-safe while requests run)."""

        async def wrapper() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(timeout=30)

    @staticmethod
    def _key(kind: str, namespace: str | None, name: str) -> tuple[str, str | None, str]:
        return (RESOURCES[kind], None if kind in CLUSTER_SCOPED else namespace, name)

    def seed(self, objects: list[dict[str, Any]]) -> None:
        def put() -> None:
            for obj in objects:
                meta = obj["metadata"]
                self.server.objects[self._key(object_kind(obj), meta.get("namespace"), meta["name"])] = obj

        self.call(put)

    def declare(self, *kinds: str) -> None:
        """Make list calls of kinds with no objects answer an empty list rather than 404 (the built-in
        kinds that serve ``/scale`` on a real API server serve it here too)."""
        for kind in kinds:
            scale = {"scale"} if kind in BUILT_IN_SCALE else set()
            self.server.resources[RESOURCES[kind]] = kmock.ResourceInfo(
                kind=KINDS[kind].api_kind, subresources=scale
            )

    def install_crd(self, api_version: str, kind: str, plural: str, *, scale: bool) -> None:
        """Serve a custom kind as its CRD would: in discovery, listable, with ``/scale`` if declared."""
        RESOURCES.setdefault(kind, f"{api_version}/{plural}")
        info = kmock.ResourceInfo(
            kind=kind,
            namespaced=True,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            subresources={"scale"} if scale else set(),
        )
        self.call(lambda: self.server.resources.__setitem__(RESOURCES[kind], info))

    def obj(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        return self.call(lambda: self.server.objects[self._key(kind, namespace, name)].raw)  # type: ignore[no-any-return]

    def history(self, kind: str, namespace: str | None, name: str) -> list[dict[str, Any]]:
        return self.call(  # type: ignore[no-any-return]
            lambda: [
                v.raw for v in self.server.objects[self._key(kind, namespace, name)].history if v is not None
            ]
        )

    def objects(self, kind: str) -> list[dict[str, Any]]:
        resource = kmock.resource(RESOURCES[kind])
        return self.call(  # type: ignore[no-any-return]
            lambda: [o.raw for (r, _, _), o in self.server.objects.items() if r == resource and not o.deleted]
        )

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request served so far."""
        return self.call(lambda: [(r.method.value, r.url.path) for r in self.server])  # type: ignore[no-any-return]

    def request_urls(self) -> list[tuple[str, str]]:
        """(method, path and query string) of every request served so far, answered or refused."""
        return self.call(lambda: [(r.method.value, r.url.path_qs) for r in self.server])  # type: ignore[no-any-return]

    def mutations(self) -> list[tuple[str, str]]:
        return [r for r in self.requests() if r[0] != "GET"]

    def fail(self, fault: Fault) -> None:
        self.call(lambda: self.server.faults.append(fault))

    def client(self, timeout: float = 30.0) -> KubeClient:
        # Generous: a busy machine must not turn a slow answer into a failed test. Tests about
        # timeouts pass their own, short one, against a fault delayed well beyond it.
        return KubeClient.from_settings(
            KubeSettings(kubeconfig=str(self.kubeconfig), timeout_seconds=timeout)
        )


def write_kubeconfig(path: Path, url: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": url}}],
        "users": [{"name": "reaper", "user": {"token": "emulator-token"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "reaper"}}],
        "current-context": "emulator",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path
