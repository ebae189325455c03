"""Client for the kubelet PodResources v1 API (``List``) over its unix socket: device-plugin
devices and, where the kubelet reports them (Kubernetes 1.27+, ``KubeletPodResourcesDynamicResources``;
on by default from 1.34), devices of Dynamic Resource Allocation claims."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from common.errors import DataUnavailableError

# Generated stubs: mypy skips them (pyproject), so their names are typed as Any.
from exporter._proto import podresources_pb2 as _pb2
from exporter._proto import podresources_pb2_grpc as _pb2_grpc
from exporter.attribution import Assignment, ClaimDevices, ContainerDevices
from exporter.config import DEFAULT_SOCKET

#: gRPC's 4 MiB default is too small for nodes with many pods, CPUs and devices.
MAX_RECEIVE_BYTES = 64 * 1024 * 1024


class KubeletError(DataUnavailableError):
    """The PodResources API could not be read (socket missing, kubelet down, slow or malformed)."""


class PodResourcesClient:
    """Calls ``v1.PodResourcesLister/List``; a fresh channel per call, so a restarted kubelet is
    picked up without waiting out gRPC's reconnect backoff (calls are seconds apart, and local)."""

    def __init__(
        self,
        socket_path: Path = DEFAULT_SOCKET,
        *,
        timeout_s: float = 5.0,
        max_receive_bytes: int = MAX_RECEIVE_BYTES,
    ) -> None:
        self.socket_path = socket_path
        self._timeout_s = timeout_s
        self._options = [("grpc.max_receive_message_length", max_receive_bytes)]

    def list_devices(self) -> list[Assignment]:
        """Every device assignment on the node. Raises :class:`KubeletError`."""
        if not self.socket_path.exists():
            raise KubeletError(f"{self.socket_path} does not exist")
        target = f"unix://{self.socket_path.absolute()}"
        try:
            with grpc.insecure_channel(target, options=self._options) as channel:
                stub = _pb2_grpc.PodResourcesListerStub(channel)
                response = stub.List(_pb2.ListPodResourcesRequest(), timeout=self._timeout_s)
        except grpc.RpcError as exc:
            raise KubeletError(f"PodResources List failed: {exc.code().name}: {exc.details()}") from exc
        return list(_flatten(response))


def _flatten(response: Any) -> Iterator[Assignment]:
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                yield ContainerDevices(
                    namespace=pod.namespace,
                    pod=pod.name,
                    container=container.name,
                    resource_name=devices.resource_name,
                    device_ids=tuple(devices.device_ids),
                )
            for dynamic in container.dynamic_resources:
                for resource in dynamic.claim_resources:
                    yield ClaimDevices(
                        namespace=pod.namespace,
                        pod=pod.name,
                        container=container.name,
                        claim=f"{dynamic.claim_namespace}/{dynamic.claim_name}",
                        driver=resource.driver_name,
                        device=resource.device_name,
                        cdi_devices=tuple(device.name for device in resource.cdi_devices),
                    )
