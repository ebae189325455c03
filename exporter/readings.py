"""Plain data the exporter passes between its stages: NVML readings in NVML's units, and one cycle's
readings per device in DCGM's. No I/O and no binding here, so pure modules (attribution, snapshot) can
use these types without importing ``pynvml``."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple

from exporter.capabilities import Capabilities

#: An opaque device handle: a ctypes pointer from the real library, any hashable object from a fake.
Handle = Any


class DeviceIdentity(NamedTuple):
    """What identifies a physical GPU. nvidia-smi: ``index,uuid,name,pci.bus_id``."""

    gpu_index: int
    uuid: str
    name: str
    pci_bus_id: str


class UtilizationRates(NamedTuple):
    """Percent of the last sample period (1/6 s to 1 s) the engines were busy.

    nvidia-smi: ``utilization.gpu``, ``utilization.memory``. Not supported on MIG instances.
    """

    gpu: int
    memory: int


class MemoryInfo(NamedTuple):
    """Frame-buffer memory in bytes. nvidia-smi: ``memory.total``, ``memory.used``, ``memory.free``,
    ``memory.reserved`` (MiB). ``used`` excludes ``reserved`` when the driver has the v2 call
    (``reserved`` is ``None`` where it does not, and ``used`` then includes it)."""

    total: int
    used: int
    free: int
    reserved: int | None = None


class Clocks(NamedTuple):
    """Current clocks in MHz. nvidia-smi: ``clocks.sm``, ``clocks.mem``."""

    sm: int | None
    memory: int | None


class UtilizationSamples(NamedTuple):
    """New entries of NVML's sub-second GPU-utilization buffer (``nvmlDeviceGetSamples``): each one's
    percent (0–100) in buffer order, and the oldest and newest CPU timestamps among them (µs). No
    object per sample: a cycle reads hundreds, and only these are used. ``buffered``: how many samples
    the driver answered (all it holds when asked from timestamp 0), ``oldest_us`` the oldest of those:
    what tells the buffer's depth, and whether samples were lost before a read.

    nvidia-smi: none (it shows the average); ``nvidia-smi -q -d UTILIZATION`` shows the min/max/avg of
    this buffer.
    """

    percents: tuple[int, ...]
    first_us: int = 0
    last_us: int = 0
    buffered: int = 0
    oldest_us: int = 0


class ProcessMemory(NamedTuple):
    """A compute process and the frame-buffer bytes it holds (``None`` when NVML cannot tell).

    nvidia-smi: ``--query-compute-apps=pid,used_memory``.
    """

    pid: int
    used_bytes: int | None


class ProcessUtilization(NamedTuple):
    """Per-process SM and memory-controller utilization, percent, for one sample.

    nvidia-smi: ``pmon`` columns ``sm`` and ``mem``.
    """

    pid: int
    timestamp_us: int
    sm_percent: int
    memory_percent: int


class MigInstance(NamedTuple):
    """A MIG device (GPU instance + compute instance) on a parent GPU.

    nvidia-smi: ``-L`` lists ``MIG <profile> Device <n>: (UUID: MIG-…)``; ``mig -lgi`` shows the GPU instance
    id and profile.
    """

    handle: Handle
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int | None
    profile: str
    slot: int = 0  # the index nvmlDeviceGetMigDeviceHandleByIndex took; the device plugin's index id


class GpmReading(NamedTuple):
    """GPU Performance Monitoring over the interval between two samples (Hopper and newer): ratios
    (0–1) and PCIe traffic (bytes per second).

    nvidia-smi: ``dmon --gpm-metrics`` 1 (graphics), 2 (SM), 3 (SM occupancy), 5 (any tensor), 10 (DRAM),
    20 / 21 (PCIe TX / RX).
    """

    graphics_active: float | None
    sm_active: float | None
    sm_occupancy: float | None
    tensor_active: float | None
    dram_active: float | None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None


class XidEvent(NamedTuple):
    """An XID critical error reported by the driver. nvidia-smi: none; the kernel log shows ``NVRM: Xid``."""

    uuid: str | None
    xid: int


class XidEventSet(NamedTuple):
    """An NVML event set with the devices registered on it, valid for one NVML initialisation."""

    handle: Any
    devices: dict[Hashable, str]
    generation: int


MIB = 1024 * 1024


class MigLabels(NamedTuple):
    """A MIG device as it appears in labels and in the kubelet's device ids."""

    uuid: str
    gpu_instance_id: int
    profile: str
    slot: int = 0


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One physical GPU, or one MIG instance of it (``mig`` set). Values are keyed by DCGM field name;
    a field NVML does not support is absent."""

    gpu: DeviceIdentity
    mig: MigLabels | None
    values: dict[str, float]
    samples: tuple[int, ...] | None
    processes: tuple[ProcessMemory, ...] | None = None
    process_utilization: tuple[ProcessUtilization, ...] | None = None
    capabilities: Capabilities | None = None  # physical GPUs only

    @property
    def uuid(self) -> str:
        return self.gpu.uuid if self.mig is None else self.mig.uuid


@dataclass(frozen=True, slots=True)
class NodeReading:
    """Everything one cycle read. ``ok`` is False when NVML itself could not be used."""

    ok: bool
    driver_version: str
    gpus: tuple[tuple[DeviceIdentity, bool], ...]
    devices: tuple[DeviceReading, ...]
    error: str | None = None
