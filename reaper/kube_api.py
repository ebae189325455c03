"""The one Kubernetes protocol the reaper's logic is written against.

Plain JSON objects in and out, the reaper's own errors (reaper.adapter_errors) keyed on HTTP status.
``reaper.kube.KubeClient`` implements it over HTTP with the official client; the demo's
``simulation.in_memory_cluster.InMemoryCluster`` implements it in memory. The snapshot reader, the executor
and the runner take a ``KubeApi``; nothing else about either implementation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class KubeApi(Protocol):
    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        """The object; NotFoundError when it does not exist."""
        ...

    def get_optional(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None: ...

    def list_objects(
        self, kind: str, namespace: str | None = None, *, selector: str = "", cached: bool = False
    ) -> list[dict[str, Any]]:
        """Every object of a kind, cluster-wide (``namespace`` None) or in one namespace.

        ``selector``: a label selector in the API's query form (reaper.selectors). ``cached``: any
        recent version will do (``resourceVersion=0``, the API server's watch cache) — only for
        objects that are not written on the strength of this read alone (see docs/reaper.md).
        """
        ...

    def list_optional(
        self, kind: str, namespace: str | None = None, *, selector: str = "", cached: bool = False
    ) -> list[dict[str, Any]]:
        """Like ``list_objects`` for a custom kind that may not be installed: not served means none."""
        ...

    def patch(self, kind: str, namespace: str | None, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch; ``metadata.resourceVersion`` in it makes it conditional (ConflictError)."""
        ...

    def create(self, kind: str, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]: ...

    def delete(self, kind: str, namespace: str | None, name: str, *, uid: str = "") -> None:
        """Delete the object (of that uid, when given: a precondition); NotFoundError when it is gone."""
        ...

    def api_resources(self, group_version: str) -> list[dict[str, Any]] | None:
        """The discovery document's resources of ``group/version``; None when it is not served (404)."""
        ...

    def get_scale(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        """The object's ``/scale`` subresource (an autoscaling/v1 Scale)."""
        ...

    def patch_scale(
        self, kind: str, namespace: str | None, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A merge patch of ``/scale``; ``metadata.resourceVersion`` makes it conditional."""
        ...
