"""The Kubernetes adapter: the only module that talks to the API server.

Built on the official client's configuration, authentication and transport; requests go through one
generic call that returns plain JSON (no model deserialisation: listing thousands of Deployments
through the generated models costs more than the API call) and raises the reaper's own errors,
keyed on HTTP status, chained ``from`` the client's exception.

Reads are lists, one per resource type and page (``limit``/``continue``, like client-go's pager).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from common.errors import BadInputError
from common.redaction import redact
from reaper import names
from reaper.adapter_errors import ExpiredError, KubeError, KubeUnavailableError, NotFoundError, kube_error_for
from reaper.kinds import KINDS

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
KUBECONFIG_ENV = "KUBECONFIG"
DEFAULT_KUBECONFIG = "~/.kube/config"

# Writes name the reaper as their field manager: managedFields then show who set spec.replicas to 0.
_MANAGER: list[tuple[str, Any]] = [("fieldManager", names.FIELD_MANAGER)]


@dataclass(frozen=True)
class KubeSettings:
    kubeconfig: str | None = None
    context: str | None = None
    timeout_seconds: float = 15.0
    page_size: int = 500


def load_api_client(settings: KubeSettings) -> k8s.ApiClient:
    """In-cluster configuration when running in a pod, else the kubeconfig (--kubeconfig, --context)."""
    configuration = k8s.Configuration()
    explicit = settings.kubeconfig is not None or settings.context is not None
    in_cluster = not explicit and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    where = "in-cluster configuration" if in_cluster else _check_kubeconfig(settings.kubeconfig)
    try:
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(
                config_file=settings.kubeconfig,
                context=settings.context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (ConfigException, OSError) as e:
        raise BadInputError(f"{where}: no usable Kubernetes configuration: {_one_line(e)}") from e
    except (yaml.YAMLError, TypeError, AttributeError, KeyError, ValueError) as e:
        # The client reads the file's structure without checking it: a list where a mapping belongs.
        raise BadInputError(f"{where}: not a usable kubeconfig ({type(e).__name__}: {_one_line(e)})") from e
    return k8s.ApiClient(configuration=configuration)


def _check_kubeconfig(flag: str | None) -> str:
    """Which kubeconfig a run reads, as a person would name it, once its files exist and parse as
    YAML mappings: the client's own words for a missing file ("No configuration found") or a YAML
    error (a traceback) name neither the file nor the setting it came from."""
    if flag is not None:
        where, paths = f"--kubeconfig {flag}", [Path(flag).expanduser()]
    elif os.environ.get(KUBECONFIG_ENV, "").strip(os.pathsep):
        value = os.environ[KUBECONFIG_ENV]
        where = f"${KUBECONFIG_ENV} {value}"
        paths = [Path(p).expanduser() for p in value.split(os.pathsep) if p]
    else:
        where, paths = DEFAULT_KUBECONFIG, [Path(DEFAULT_KUBECONFIG).expanduser()]
    existing = [p for p in paths if p.exists()]
    if not existing:
        if where == DEFAULT_KUBECONFIG:
            raise BadInputError(
                f"no Kubernetes configuration: not running in a pod, and no --kubeconfig, no "
                f"${KUBECONFIG_ENV}, no {DEFAULT_KUBECONFIG}"
            )
        missing = "the file does not exist" if len(paths) == 1 else "none of its files exists"
        raise BadInputError(f"{where}: {missing}")
    for path in existing:
        # Of several files ($KUBECONFIG=a:b), the one at fault is named too.
        at = f"{where}: {path}" if len(paths) > 1 else where
        if not path.is_file():
            raise BadInputError(f"{at}: not a file")
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise BadInputError(f"{at}: cannot read it ({e.strerror or e})") from e
        except yaml.YAMLError as e:
            raise BadInputError(f"{at}: not valid YAML ({_yaml_problem(e)})") from e
        if doc is not None and not isinstance(doc, dict):
            raise BadInputError(
                f"{at}: not a kubeconfig (a mapping of clusters, contexts and users) but a YAML "
                f"{type(doc).__name__}"
            )
    return where


def _yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error in one line, where it is and what: PyYAML's own text spans several."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{_one_line(problem)}"


def _one_line(e: object) -> str:
    return " ".join(str(e).split())


def _log_request(what: str, query: list[tuple[str, Any]] | None, outcome: str, started: float) -> None:
    """One debug line per API request (``-vv``): method, path with its query, outcome, duration."""
    if log.isEnabledFor(logging.DEBUG):
        asked = f"{what}?{urlencode(query, safe='=,/')}" if query else what
        log.debug("%s: %s in %.3fs", asked, outcome, time.monotonic() - started)


def _path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    info = KINDS[kind]
    ns = f"/namespaces/{namespace}" if namespace and info.namespaced else ""
    return f"{info.path_prefix}{ns}/{info.plural}" + (f"/{name}" if name else "")


class KubeClient:
    """The ``reaper.kube_api.KubeApi`` over HTTP. ``calls`` counts requests by verb and kind."""

    def __init__(self, api: k8s.ApiClient, timeout_seconds: float = 15.0, page_size: int = 500) -> None:
        self._api = api
        self._timeout = timeout_seconds
        self._page_size = page_size
        self.calls: Counter[tuple[str, str]] = Counter()

    @classmethod
    def from_settings(cls, settings: KubeSettings) -> KubeClient:
        return cls(load_api_client(settings), settings.timeout_seconds, settings.page_size)

    def close(self) -> None:
        self._api.close()

    # --- the one request path ---------------------------------------------------------------------

    def _request(
        self,
        method: str,
        kind: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        self.calls[(method, kind)] += 1
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        params = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        what = f"{method} {path}"
        started = time.monotonic()
        try:
            response = self._api.call_api(*params, _request_timeout=self._timeout)
            data = response.read()
        except ApiException as e:  # the client raises these for TLS failures, with status 0
            _log_request(what, query, f"failed ({e.reason})", started)
            raise KubeUnavailableError(f"{what}: {e.reason}", status=0) from e
        except urllib3.exceptions.HTTPError as e:
            _log_request(what, query, f"no answer ({type(e).__name__})", started)
            raise KubeUnavailableError(f"{what}: no answer from the API server ({type(e).__name__})") from e
        _log_request(what, query, f"{response.status}, {len(data or b'')} bytes", started)
        if not 200 <= response.status <= 299:
            message, reason = _status_message(data)
            raise kube_error_for(response.status, f"{what}: {response.status} {message}".rstrip(), reason)
        try:
            doc = json.loads(data) if data else {}
        except ValueError as e:
            raise KubeError(f"{what}: the API server answered with something other than JSON") from e
        if not isinstance(doc, dict):
            raise KubeError(f"{what}: expected a JSON object")
        return doc

    # --- reads --------------------------------------------------------------------------------------

    def list_objects(
        self, kind: str, namespace: str | None = None, *, selector: str = "", cached: bool = False
    ) -> list[dict[str, Any]]:
        """Every object of a kind (matching ``selector``), cluster-wide or in one namespace, in pages.

        ``cached`` asks for ``resourceVersion=0``: any version the API server has, served from its
        watch cache rather than a quorum read from etcd. Servers before the watch cache could page
        ignore ``limit`` then and answer in one response; newer ones page, and the pages are followed
        the same way. A continue token that expired mid-list (410 Expired: etcd compacted the
        revision the list started at) restarts the list once, unpaged, as client-go's pager does.
        """
        base: list[tuple[str, Any]] = [("labelSelector", selector)] if selector else []
        first = [*base, ("resourceVersion", "0")] if cached else base
        path = _path(kind, namespace)
        items: list[dict[str, Any]] = []
        query = [*first, ("limit", self._page_size)]
        while True:
            try:
                doc = self._request("GET", kind, path, query=query)
            except ExpiredError:
                if not any(k == "continue" for k, _ in query):
                    raise
                log.info("listing %s: the continue token expired; listing again in one request", kind)
                doc = self._request("GET", kind, path, query=first)
                return _items(doc)
            items.extend(_items(doc))
            token = (doc.get("metadata") or {}).get("continue") or None
            if not token:
                return items
            # Later pages carry only the token: it pins the resourceVersion the list started at.
            query = [*base, ("limit", self._page_size), ("continue", token)]

    def list_optional(
        self, kind: str, namespace: str | None = None, *, selector: str = "", cached: bool = False
    ) -> list[dict[str, Any]]:
        """Like ``list`` for a CRD that may not be installed (KEDA, Kubeflow, KServe…): 404 means none."""
        try:
            return self.list_objects(kind, namespace, selector=selector, cached=cached)
        except NotFoundError:
            return []

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        return self._request("GET", kind, _path(kind, namespace, name))

    def get_optional(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self.get(kind, namespace, name)
        except NotFoundError:
            return None

    # --- writes (called only by the executor) --------------------------------------------------------

    def patch(self, kind: str, namespace: str | None, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch; ``metadata.resourceVersion`` in it makes it conditional (409 if stale)."""
        path = _path(kind, namespace, name)
        return self._request("PATCH", kind, path, query=_MANAGER, body=body, content_type=MERGE_PATCH)

    def create(self, kind: str, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._request("POST", kind, _path(kind, namespace), query=_MANAGER, body=body)

    def delete(self, kind: str, namespace: str | None, name: str, *, uid: str = "") -> None:
        """DELETE, with a uid precondition when given: a new object of the same name is not deleted."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        body["propagationPolicy"] = "Background"
        if uid:
            body["preconditions"] = {"uid": uid}
        self._request("DELETE", kind, _path(kind, namespace, name), body=body)

    # --- discovery and the scale subresource (custom kinds that declare one) -------------------------

    def api_resources(self, group_version: str) -> list[dict[str, Any]] | None:
        try:
            doc = self._request("GET", "discovery", f"/apis/{group_version}")
        except NotFoundError:
            return None
        return [r for r in doc.get("resources") or () if isinstance(r, dict)]

    def get_scale(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        return self._request("GET", f"{kind}/scale", _path(kind, namespace, name) + "/scale")

    def patch_scale(
        self, kind: str, namespace: str | None, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        path = _path(kind, namespace, name) + "/scale"
        return self._request(
            "PATCH", f"{kind}/scale", path, query=_MANAGER, body=body, content_type=MERGE_PATCH
        )


def _items(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [i for i in doc.get("items") or () if isinstance(i, dict)]


def _status_message(data: bytes | None) -> tuple[str, str]:
    """The API server's Status message and reason, when the body is one."""
    try:
        doc = json.loads(data or b"")
    except ValueError:
        return "", ""
    if not isinstance(doc, dict):
        return "", ""
    # A proxy in front of the API server may echo the request, its token with it.
    return redact(str(doc.get("message") or "")), str(doc.get("reason") or "")
