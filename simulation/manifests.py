"""Plain Kubernetes manifests as the API server returns them: apiVersion, kind, metadata, spec, status."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from common.timeutil import rfc3339
from reaper.kinds import KINDS

_NS_UUID = uuid.UUID("0b5e4c1e-9a43-4d8f-8f39-6c2f3b1f4a10")


def _uid(*parts: str) -> str:
    return str(uuid.uuid5(_NS_UUID, "/".join(parts)))


def manifest(
    kind: str,
    name: str,
    namespace: str | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    created: datetime | None = None,
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A plain object of ``kind`` (the reaper's kind names: ``KnativeService`` is Knative's Service).

    ``owner`` makes another manifest its controller, with the ownerReference a controller writes:
    apiVersion, kind, name, uid, ``controller: true`` and ``blockOwnerDeletion: true``.
    """
    meta: dict[str, Any] = {"name": name, "uid": _uid(kind, namespace or "", name), "resourceVersion": "1"}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    if created is not None:
        meta["creationTimestamp"] = rfc3339(created.replace(microsecond=0))
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    info = KINDS.get(kind)
    api_version, api_kind = (info.api_version, info.api_kind) if info else ("v1", kind)
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": api_kind, "metadata": meta}
    if spec is not None:
        obj["spec"] = dict(spec)
    if status is not None:
        obj["status"] = dict(status)
    return obj
