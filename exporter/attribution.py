"""Which pod holds which GPU, and how much of a shared GPU each pod uses. Pure functions of plain data.

Device ids as device plugins report them to the kubelet:

* ``GPU-<uuid>`` / ``MIG-<uuid>``: NVIDIA device plugin, ``deviceIDStrategy: uuid`` (the default);
* ``<uuid>::<n>``: the n-th replica of a time-sliced or MPS-shared GPU (NVIDIA device plugin);
* ``<index>`` / ``nvidia<index>``: index strategy, and GKE's plugin;
* ``<index>:<slot>``: a MIG device under the index strategy — the parent GPU's index and the MIG
  device's index on it (``nvmlDeviceGetMigDeviceHandleByIndex``);
* ``nvidia<index>/vgpu<n>``, ``nvidia<index>/gi<id>[/vgpu<n>]``: GKE's shared GPUs and MIG partitions.

The replica number becomes the ``vgpu`` label, as in dcgm-exporter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from exporter.readings import ProcessMemory, ProcessUtilization

_GKE = re.compile(r"^(?:nvidia)?(\d+)(?:/gi(\d+))?(?:/vgpu(\d+))?$")
_MIG_INDEX = re.compile(r"^(\d+):(\d+)$")


class ContainerDevices(NamedTuple):
    """Devices of one resource assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


class Holder(NamedTuple):
    """A container that holds a device (a whole GPU, a MIG instance, or one replica of a shared GPU)."""

    namespace: str
    pod: str
    container: str
    vgpu: str | None = None


class PodName(NamedTuple):
    namespace: str
    name: str


@dataclass(frozen=True)
class PodView:
    """What the kubelet said at one moment; never changed after construction."""

    allocated: Mapping[str, tuple[Holder, ...]] = field(default_factory=dict)
    uid_names: Mapping[str, PodName] = field(default_factory=dict)


EMPTY_VIEW = PodView()


class PodUsage(NamedTuple):
    """One pod's share of a shared device: SM utilization (%) and frame-buffer bytes held."""

    holder: Holder
    sm_percent: float | None
    memory_bytes: int | None


def index_key(gpu_index: int, gpu_instance_id: int | None = None) -> str:
    """Lookup key for devices the plugin names by index."""
    return f"index:{gpu_index}" if gpu_instance_id is None else f"index:{gpu_index}/gi:{gpu_instance_id}"


def mig_index_key(gpu_index: int, slot: int) -> str:
    """Lookup key for a MIG device the NVIDIA plugin names ``<gpu>:<slot>`` (index strategy)."""
    return f"index:{gpu_index}/mig:{slot}"


def parse_device_id(device_id: str) -> tuple[str, str | None]:
    """``(key, replica)``: the key names a GPU or MIG device by UUID or index; replica is ``None``
    unless the device is one replica of a shared GPU."""
    if "::" in device_id:
        key, _, replica = device_id.partition("::")
        return key, replica
    mig = _MIG_INDEX.match(device_id)
    if mig:
        return mig_index_key(int(mig.group(1)), int(mig.group(2))), None
    match = _GKE.match(device_id)
    if match:
        gpu, gi, vgpu = match.groups()
        return index_key(int(gpu), None if gi is None else int(gi)), vgpu
    return device_id, None


def allocations(containers: Iterable[ContainerDevices]) -> dict[str, tuple[Holder, ...]]:
    """Device key → the containers holding it, for NVIDIA resources only."""
    found: dict[str, list[Holder]] = {}
    for assignment in containers:
        if not assignment.resource_name.startswith("nvidia.com/"):
            continue
        for device_id in assignment.device_ids:
            key, replica = parse_device_id(device_id)
            holder = Holder(assignment.namespace, assignment.pod, assignment.container, replica)
            found.setdefault(key, []).append(holder)
    return {key: tuple(sorted(holders)) for key, holders in found.items()}


def holders_of(
    allocated: Mapping[str, tuple[Holder, ...]],
    uuid: str,
    gpu_index: int,
    gpu_instance_id: int | None = None,
    mig_slot: int | None = None,
) -> tuple[Holder, ...]:
    """Holders of the device with this UUID (a GPU's or a MIG device's) under any naming scheme."""
    found = allocated.get(uuid, ()) + allocated.get(index_key(gpu_index, gpu_instance_id), ())
    if mig_slot is not None:
        found += allocated.get(mig_index_key(gpu_index, mig_slot), ())
    return found


def is_shared(holders: Sequence[Holder]) -> bool:
    """Shared devices get per-pod series; an exclusively held one gets pod labels on every series."""
    return len(holders) > 1 or any(h.vgpu is not None for h in holders)


def pod_usage(
    holders: Sequence[Holder],
    processes: Sequence[ProcessMemory] | None,
    utilization: Sequence[ProcessUtilization] | None,
    pid_uids: Mapping[int, str],
    uid_names: Mapping[str, PodName],
) -> list[PodUsage]:
    """Each holding pod's SM utilization and memory on a shared device, from NVML's per-process data.

    PIDs map to pods through their cgroup (``pid_uids``) and the node's pod directory (``uid_names``).
    A pod that holds a replica but runs nothing on the device uses 0 — exactly the waste to show.
    Where NVML gave no process list, or no pod names are known, usage is unknown: nothing is returned
    rather than a misleading 0 for every pod.
    """
    if processes is None or not uid_names:
        return []
    pods: dict[PodName, list[Holder]] = {}
    for holder in holders:
        pods.setdefault(PodName(holder.namespace, holder.pod), []).append(holder)

    def pod_of(pid: int) -> PodName | None:
        uid = pid_uids.get(pid)
        return None if uid is None else uid_names.get(uid)

    memory: dict[PodName, int] = {}
    memory_known: set[PodName] = set()
    for process in processes:
        pod = pod_of(process.pid)
        if pod in pods:
            used = process.used_bytes
            memory[pod] = memory.get(pod, 0) + (used or 0)
            if used is not None:
                memory_known.add(pod)

    sm: dict[PodName, float] = {}
    if utilization is not None:
        per_pid: dict[int, list[int]] = {}
        for sample in utilization:
            per_pid.setdefault(sample.pid, []).append(sample.sm_percent)
        for pid, values in per_pid.items():
            pod = pod_of(pid)
            if pod in pods:
                sm[pod] = sm.get(pod, 0.0) + sum(values) / len(values)

    usage = []
    for pod in sorted(pods):
        pod_holders = pods[pod]
        replicas = sorted({h.vgpu for h in pod_holders if h.vgpu is not None})
        holder = Holder(pod.namespace, pod.name, pod_holders[0].container, ",".join(replicas) or None)
        if pod not in memory:
            memory_bytes: int | None = 0  # holds a replica, runs nothing here
        else:
            memory_bytes = memory[pod] if pod in memory_known else None
        sm_percent = None if utilization is None else min(sm.get(pod, 0.0), 100.0)
        usage.append(PodUsage(holder, sm_percent, memory_bytes))
    return usage
