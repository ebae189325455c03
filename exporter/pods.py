"""The node's pods as the exporter needs them, kept fresh by a background thread.

Node-local sources, none on the scrape path:

* the kubelet PodResources API: which container holds which GPU (``exporter.podresources``);
* the kubelet's pod log directory, ``/var/log/pods/<namespace>_<name>_<uid>/``: pod UID → name. The
  PodResources API carries no UIDs, and cgroups carry nothing but UIDs; this directory joins them
  without an API-server round trip or any RBAC. (Namespaces and pod names cannot contain ``_``.)
* the NVIDIA driver's ``/proc/driver/nvidia/gpus/<pci bus id>/information``: device minor → GPU UUID,
  read only while the kubelet lists DRA claims, as NVIDIA's DRA driver names GPUs by minor number
  (which need not be NVML's index).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Protocol

from exporter.attribution import EMPTY_VIEW, ClaimDevices, PodName, PodView, allocations
from exporter.config import DEFAULT_POD_LOG_DIR
from exporter.podresources import KubeletError, PodResourcesClient
from exporter.repeats import RepeatedWarnings
from exporter.worker import BackgroundThread

log = logging.getLogger(__name__)

DEFAULT_GPU_INFO_DIR = Path("/proc/driver/nvidia/gpus")


def scan_pod_log_dir(path: Path) -> dict[str, PodName]:
    """Pod UID → (namespace, name) from the directory names under ``path``."""
    names: dict[str, PodName] = {}
    with os.scandir(path) as entries:
        for entry in entries:
            parts = entry.name.split("_")
            if len(parts) == 3 and all(parts):
                names[parts[2]] = PodName(parts[0], parts[1])
    return names


def scan_gpu_minors(path: Path) -> dict[int, str]:
    """Device minor → GPU UUID from the driver's ``<pci bus id>/information`` files under ``path``
    (lines ``GPU UUID: GPU-…`` and ``Device Minor: 0``). A GPU whose file lacks either is left out."""
    minors: dict[int, str] = {}
    with os.scandir(path) as entries:
        for entry in entries:
            try:
                text = (Path(entry.path) / "information").read_text(errors="replace")
            except OSError:
                continue  # a GPU that went away between the listing and the read
            fields = {}
            for line in text.splitlines():
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
            uuid, minor = fields.get("GPU UUID", ""), fields.get("Device Minor", "")
            if uuid.startswith("GPU-") and minor.isdigit():
                minors[int(minor)] = uuid
    return minors


class PodViewSource(Protocol):
    """Where a collection cycle gets the current pod view from."""

    @property
    def errors(self) -> int: ...

    def view(self) -> PodView: ...


class PodViewRefresher(BackgroundThread):
    """Refreshes a :class:`PodView` every ``refresh_s`` seconds on its own thread; ``resource_names``
    are the resources beyond ``nvidia.com/…`` whose devices are NVIDIA GPUs.

    On failure the last good view is served until it is ``max_age_s`` old, then none: metrics go out
    without pod labels rather than with stale ones. Every failure counts in :attr:`errors`.
    """

    def __init__(
        self,
        client: PodResourcesClient,
        *,
        pod_log_dir: Path | None = DEFAULT_POD_LOG_DIR,
        gpu_info_dir: Path = DEFAULT_GPU_INFO_DIR,
        refresh_s: float = 10.0,
        max_age_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
        resource_names: Collection[str] = (),
    ) -> None:
        super().__init__("kubelet-pod-resources")
        self._client = client
        self._resource_names = frozenset(resource_names)
        self._pod_log_dir = pod_log_dir
        self._gpu_info_dir = gpu_info_dir
        self._refresh_s = refresh_s
        self._max_age_s = max_age_s
        self._monotonic = monotonic
        self._view = EMPTY_VIEW
        self._fetched_at: float | None = None
        self._errors = 0
        self._log_dir_warned = False
        self._gpu_info_warned = False
        self._warnings = RepeatedWarnings(log, monotonic=monotonic)

    @property
    def errors(self) -> int:
        """Failed refreshes so far (exported as ``gpu_exporter_kubelet_errors_total``)."""
        return self._errors

    def view(self) -> PodView:
        fetched_at = self._fetched_at
        if fetched_at is None or self._monotonic() - fetched_at > self._max_age_s:
            return EMPTY_VIEW
        return self._view

    def refresh(self) -> bool:
        try:
            devices = self._client.list_devices()
        except KubeletError as exc:
            self._errors += 1
            self._warnings.warn(
                "kubelet", f"kubelet pod resources unavailable ({exc}); GPUs go out without pod labels"
            )
            return False
        self._warnings.clear("kubelet", "kubelet pod resources available again")
        claimed = any(isinstance(d, ClaimDevices) for d in devices)
        minors = self._gpu_minors() if claimed else None
        self._view = PodView(allocations(devices, minors, self._resource_names), self._uid_names())
        self._fetched_at = self._monotonic()
        return True

    def _uid_names(self) -> dict[str, PodName]:
        if self._pod_log_dir is None:
            return {}
        try:
            return scan_pod_log_dir(self._pod_log_dir)
        except OSError as exc:
            if not self._log_dir_warned:
                log.warning("cannot list %s (%s): shared GPUs get no per-pod usage", self._pod_log_dir, exc)
                self._log_dir_warned = True
            return {}

    def _gpu_minors(self) -> dict[int, str]:
        try:
            return scan_gpu_minors(self._gpu_info_dir)
        except OSError as exc:
            if not self._gpu_info_warned:
                log.warning(
                    "cannot list %s (%s): GPUs of DRA claims go unattributed", self._gpu_info_dir, exc
                )
                self._gpu_info_warned = True
            return {}

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self._refresh_s)
