"""Which custom kinds serve a ``scale`` subresource, as the API server's discovery documents say.

``GET /apis/<group>/<version>`` lists a group-version's resources, ``<plural>/scale`` among them
where the CRD declares ``subresources.scale``. Asked only for the owner kinds met while following
ownerReferences (never a cluster-wide crawl), once per group-version and run; a group-version that
is not served (404) is not installed.
"""

from __future__ import annotations

import logging
from typing import Any

from reaper.kinds import KINDS, KindInfo, register_scalable
from reaper.kube_api import KubeApi

log = logging.getLogger(__name__)


class ScaleDiscovery:
    def __init__(self, kube: KubeApi) -> None:
        self._kube = kube
        self._documents: dict[str, list[dict[str, Any]] | None] = {}

    def scalable(self, api_version: str, api_kind: str) -> KindInfo | None:
        """The kind, registered, when its group-version serves it with ``/scale``; else None."""
        group, _, version = api_version.rpartition("/")
        if not group or not version:
            return None  # the core API has no custom kinds
        known = next((k for k in KINDS.values() if k.group == group and k.api_kind == api_kind), None)
        if known is not None and not known.scale:
            return None  # a kind with its own actuator (or none) is not second-guessed
        if api_version not in self._documents:
            self._documents[api_version] = self._kube.api_resources(api_version)
            if self._documents[api_version] is None:
                log.info("%s is not served: %s is not installed", api_version, api_kind)
        resources = self._documents[api_version] or []
        served = {str(r.get("name") or "") for r in resources}
        for r in resources:
            plural = str(r.get("name") or "")
            if r.get("kind") == api_kind and "/" not in plural and f"{plural}/scale" in served:
                info = KindInfo(
                    api_kind,
                    api_kind,
                    group,
                    version,
                    plural,
                    custom=True,
                    namespaced=r.get("namespaced") is not False,
                    scale=True,
                )
                return register_scalable(info)
        return None
