"""Which pod holds which GPU, and how much of a shared GPU each pod uses. Pure functions of plain data.

Device ids as device plugins report them to the kubelet:

* ``GPU-<uuid>`` / ``MIG-<uuid>``: NVIDIA device plugin (whatever its ``deviceIDStrategy``: that
  setting only changes the ids handed to the container);
* ``<id>::<n>``: the n-th replica of a time-sliced or MPS-shared device, ``<id>`` in any form here
  (NVIDIA device plugin, ``AnnotatedID``);
* ``<index>`` / ``nvidia<index>``: plain indices, and GKE's plugin;
* ``<index>:<slot>``: a MIG device named by the parent GPU's index and the MIG device's index on it
  (``nvmlDeviceGetMigDeviceHandleByIndex``);
* ``nvidia<index>/vgpu<n>``, ``nvidia<index>/gi<id>[/vgpu<n>]``: GKE's shared GPUs and MIG partitions.

The replica number becomes the ``vgpu`` label, as in dcgm-exporter.

Devices allocated through Dynamic Resource Allocation come as claims (:class:`ClaimDevices`); NVIDIA's
driver (``gpu.nvidia.com``) names a whole GPU ``gpu-<minor>`` after its ``/dev/nvidia<minor>`` node,
which the node's driver directory maps to a UUID (``exporter.pods.scan_gpu_minors``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from exporter.readings import ProcessMemory, ProcessUtilization

_GKE = re.compile(r"^(?:nvidia)?(\d+)(?:/gi(\d+))?(?:/vgpu(\d+))?$")
_MIG_INDEX = re.compile(r"^(\d+):(\d+)$")

#: NVIDIA's DRA driver (k8s-dra-driver-gpu): its name, the CDI kinds of the devices it hands out
#: (``<vendor>/device=<name>``, and ``<vendor>/claim=<claim uid>-<name>`` where a claim carries its
#: own container edits), and its name for a whole GPU. MIG devices (``gpu-<minor>-mig-<profile id>-
#: <placement start>-<size>``) and VFIO passthrough (``gpu-vfio-<n>``) match nothing here.
DRA_GPU_DRIVER = "gpu.nvidia.com"
_CDI_DEVICE_KIND = "k8s.gpu.nvidia.com/device"
_CDI_CLAIM_KIND = "k8s.gpu.nvidia.com/claim"
_CLAIM_SCOPED = re.compile(r"^[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}-(.+)$")
_DRA_GPU = re.compile(r"^gpu-(\d+)$")


class ContainerDevices(NamedTuple):
    """Devices of one resource assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


class ClaimDevices(NamedTuple):
    """One resource of a DRA claim, as the kubelet reports it for one container that uses the claim.

    ``driver`` and ``device`` (the device's name in the driver's ResourceSlice) come from Kubernetes
    1.31 on; every version lists the CDI devices the driver prepared.
    """

    namespace: str
    pod: str
    container: str
    claim: str  # <namespace>/<name>
    driver: str
    device: str
    cdi_devices: tuple[str, ...]


Assignment = ContainerDevices | ClaimDevices


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
        # The replica suffix goes on whatever id the plugin uses (``0::1``, ``0:2::0``, ``GPU-…::3``).
        base, _, replica = device_id.partition("::")
        return parse_device_id(base)[0], replica
    mig = _MIG_INDEX.match(device_id)
    if mig:
        return mig_index_key(int(mig.group(1)), int(mig.group(2))), None
    match = _GKE.match(device_id)
    if match:
        gpu, gi, vgpu = match.groups()
        return index_key(int(gpu), None if gi is None else int(gi)), vgpu
    return device_id, None


def dra_device_names(claim: ClaimDevices) -> tuple[str, ...]:
    """The names NVIDIA's DRA driver gave the devices of this claim resource (``gpu-0``, …), from the
    device name where the kubelet reports it, else from the CDI device names; none for other drivers
    and for CDI names of another form (the driver's older ``claim=<uid>`` names carry no device)."""
    names = []
    if claim.driver == DRA_GPU_DRIVER and claim.device:
        names.append(claim.device)
    for cdi in claim.cdi_devices:
        kind, _, name = cdi.partition("=")
        if kind == _CDI_DEVICE_KIND and name:
            names.append(name)
        elif kind == _CDI_CLAIM_KIND and (scoped := _CLAIM_SCOPED.match(name)):
            names.append(scoped.group(1))
    return tuple(dict.fromkeys(names))


def dra_gpu_minor(name: str) -> int | None:
    """The ``/dev/nvidia<minor>`` number of a whole GPU NVIDIA's DRA driver calls ``gpu-<minor>``."""
    match = _DRA_GPU.match(name)
    return None if match is None else int(match.group(1))


NVIDIA_RESOURCE_PREFIX = "nvidia.com/"


def allocations(
    assignments: Iterable[Assignment],
    gpu_minors: Mapping[int, str] | None = None,
    resource_names: Collection[str] = (),
) -> dict[str, tuple[Holder, ...]]:
    """Device key → the containers holding it, for NVIDIA devices only: resources named
    ``nvidia.com/…`` (``gpu``, ``mig-1g.10gb``, ``gpu.shared``, …) and those of ``resource_names``
    (``--nvidia-resource-names``, as dcgm-exporter's ``NVIDIA_RESOURCE_NAMES``: a device plugin that
    registers NVIDIA GPUs under another domain).

    ``gpu_minors`` (device minor → GPU UUID) resolves GPUs allocated through DRA claims; without it,
    or for a minor it lacks, such a GPU stays unattributed.
    """
    found: dict[str, set[Holder]] = {}
    for assignment in assignments:
        if isinstance(assignment, ClaimDevices):
            holder = Holder(assignment.namespace, assignment.pod, assignment.container)
            for name in dra_device_names(assignment):
                minor = dra_gpu_minor(name)
                uuid = None if minor is None or gpu_minors is None else gpu_minors.get(minor)
                if uuid is not None:
                    found.setdefault(uuid, set()).add(holder)
            continue
        resource = assignment.resource_name
        if not resource.startswith(NVIDIA_RESOURCE_PREFIX) and resource not in resource_names:
            continue
        for device_id in assignment.device_ids:
            key, replica = parse_device_id(device_id)
            holder = Holder(assignment.namespace, assignment.pod, assignment.container, replica)
            found.setdefault(key, set()).add(holder)
    # A set: the kubelet may list one claim's devices more than once (kubernetes/kubernetes#141335).
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
    """Whether the device is shared: held by several pods (replicas, or one DRA claim several pods
    use), or handed out in replicas at all — one pod holding the only replica taken so far still
    holds a time-sliced GPU. Each pod holding a shared device gets its own per-pod series."""
    return len({(h.namespace, h.pod) for h in holders}) > 1 or any(h.vgpu is not None for h in holders)


def _pod_holder(holders: Sequence[Holder]) -> Holder:
    """One pod's holders as one: its first container by name, and every replica it holds."""
    replicas = sorted({h.vgpu for h in holders if h.vgpu is not None})
    first = min(holders, key=lambda h: h.container)
    return Holder(first.namespace, first.pod, first.container, ",".join(replicas) or None)


def sole_holder(holders: Sequence[Holder]) -> Holder | None:
    """The pod to name on the device's own (DCGM) series: the one pod holding it, alone on a
    time-sliced GPU too, as dcgm-exporter does; ``None`` when no pod or several pods hold it.

    Its labels equal that pod's per-pod series' (:func:`pod_usage`), so ``A or B`` over the two
    families keeps one series per pod and device.
    """
    pods = {(h.namespace, h.pod) for h in holders}
    return _pod_holder(holders) if len(pods) == 1 else None


def pods_holding(holders: Sequence[Holder]) -> dict[PodName, Holder]:
    """Each pod holding the device, in name order, with its holders as one (see :func:`sole_holder`).
    A function of the pod view alone: the exporter computes it once per view, not every cycle."""
    pods: dict[PodName, list[Holder]] = {}
    for holder in holders:
        pods.setdefault(PodName(holder.namespace, holder.pod), []).append(holder)
    return {pod: _pod_holder(pods[pod]) for pod in sorted(pods)}


def pod_usage(
    holders: Sequence[Holder],
    processes: Sequence[ProcessMemory] | None,
    utilization: Sequence[ProcessUtilization] | None,
    pid_uids: Mapping[int, str],
    uid_names: Mapping[str, PodName],
) -> list[PodUsage]:
    """:func:`usage_of_pods` for the pods holding a device, from its holders."""
    return usage_of_pods(pods_holding(holders), processes, utilization, pid_uids, uid_names)


def usage_of_pods(
    pods: Mapping[PodName, Holder],
    processes: Sequence[ProcessMemory] | None,
    utilization: Sequence[ProcessUtilization] | None,
    pid_uids: Mapping[int, str],
    uid_names: Mapping[str, PodName],
) -> list[PodUsage]:
    """Each holding pod's SM utilization and memory on a shared device, from NVML's per-process data.

    ``pods``: the device's holding pods (:func:`pods_holding`). PIDs map to pods through their
    cgroup (``pid_uids``) and the node's pod directory (``uid_names``).
    A pod that holds a replica but runs nothing on the device uses 0 — exactly the waste to show.
    Where NVML gave no process list, or no pod names are known, usage is unknown: nothing is returned
    rather than a misleading 0 for every pod.
    """
    if processes is None or not uid_names:
        return []

    def pod_of(pid: int) -> PodName | None:
        uid = pid_uids.get(pid)
        return None if uid is None else uid_names.get(uid)

    memory: dict[PodName, int] = {}
    memory_known: set[PodName] = set()
    for process in processes:
        pod = pod_of(process.pid)
        if pod is not None and pod in pods:
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
            if pod is not None and pod in pods:
                sm[pod] = sm.get(pod, 0.0) + sum(values) / len(values)

    usage = []
    for pod, holder in pods.items():
        if pod not in memory:
            memory_bytes: int | None = 0  # holds a replica, runs nothing here
        else:
            memory_bytes = memory[pod] if pod in memory_known else None
        sm_percent = None if utilization is None else min(sm.get(pod, 0.0), 100.0)
        usage.append(PodUsage(holder, sm_percent, memory_bytes))
    return usage
