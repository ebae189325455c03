"""One pass over every GPU through the NVML session, into plain readings in DCGM's units."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Hashable

from exporter.cadence import DEFAULT_CADENCES, Cadences
from exporter.capabilities import CapabilityLog
from exporter.device_reader import DeviceReader, WantsProcesses
from exporter.nvml import GpuLost, Nvml, NvmlUnavailable
from exporter.read_plan import ReadPlan
from exporter.readings import DeviceIdentity, DeviceReading, Handle, MigLabels, NodeReading
from exporter.sample_buffer import SampleBuffer

__all__ = ["GpuReader", "WantsProcesses"]

log = logging.getLogger(__name__)


def _no_processes(_gpu: DeviceIdentity, _mig: MigLabels | None) -> bool:
    return False


class GpuReader:
    """Reads all GPUs each cycle, remembering every GPU it has seen so a lost one is reported down.

    ``interval_s`` is the collection interval the cadences count in; ``served`` the families
    ``/metrics`` serves (``None``: all), so nothing else is read; ``monotonic`` the clock the cadences
    run on, ``wall_clock`` the one NVML's sample timestamps are read against."""

    def __init__(
        self,
        nvml: Nvml,
        *,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        interval_s: float = 5.0,
        cadences: Cadences = DEFAULT_CADENCES,
        served: Collection[str] | None = None,
    ) -> None:
        self._nvml = nvml
        self._wall_clock = wall_clock
        self._monotonic = monotonic
        self._interval_s = interval_s
        self._cadences = cadences
        self._plan = ReadPlan(served)
        self._known: dict[str, DeviceIdentity] = {}
        self._driver_version = ""
        self._readers: dict[int, DeviceReader] = {}
        self._generation = -1
        self._count = -1
        # Each GPU's sample ring as read so far, by UUID: kept across NVML sessions, as the driver's is.
        self._samples: dict[str, SampleBuffer] = {}
        self.handles: tuple[tuple[Handle, str], ...] = ()
        self._capability_log = CapabilityLog(log)
        self._offered: tuple[tuple[int, int], ...] = ()

    def read(
        self, wants_processes: WantsProcesses | None = None, *, reinit: bool | None = None
    ) -> NodeReading:
        """Read every GPU. ``wants_processes(gpu, mig)`` selects the devices whose per-process usage is
        needed — the shared ones. ``reinit`` is whether to (re-)initialise NVML first, as the caller
        decided when it paused the XID thread for it; the XID thread may ask for a re-init meanwhile,
        which must wait for the next cycle's pause (``None``: decide now, for callers without an XID
        thread)."""
        nvml = self._nvml
        try:
            if nvml.needs_init if reinit is None else reinit:
                nvml.init()
                self._driver_version = nvml.driver_version() or ""
            count = nvml.device_count()
        except (NvmlUnavailable, GpuLost) as exc:
            return self._failed(str(exc))
        if self._generation != nvml.generation or count != self._count:
            # Handles die with the NVML session, and index → GPU holds only while the count does
            # (nvml.h: removing a GPU renumbers the others and voids their handles).
            if self._generation == nvml.generation:
                nvml.forget_devices()
            self._readers = {}
            self._generation, self._count = nvml.generation, count

        now, now_us = self._monotonic(), round(self._wall_clock() * 1_000_000)
        wants = wants_processes or _no_processes
        up: set[str] = set()
        read: set[Hashable] = set()
        devices: list[DeviceReading] = []
        handles: list[tuple[Handle, str]] = []
        for index in range(count):
            reader = self._readers.get(index)
            identity = None
            try:
                if reader is None:
                    device = nvml.device(index)
                    if device is None:
                        continue
                    reader = self._readers[index] = DeviceReader(
                        device, self._plan, self._cadences, self._interval_s, nvml.mig_events
                    )
                identity = reader.device.identity()
                if identity is None:
                    continue
                self._known[identity.uuid] = identity
                samples = self._samples.get(identity.uuid)
                if samples is None:
                    samples = self._samples[identity.uuid] = SampleBuffer()
                devices.extend(reader.read(identity, samples, now, now_us, wants))
            except GpuLost as exc:
                log.debug("GPU %d is down: %s", index, exc)
                if reader is not None:
                    reader.lost(None if identity is None else self._samples.get(identity.uuid))
                continue
            up.add(identity.uuid)
            read.add(reader.device.key)
            handles.append((reader.device.handle, identity.uuid))
        for uuid, samples in self._samples.items():
            if uuid not in up:
                samples.unread()
        self.handles = tuple(handles)
        # The start-up log again only when what a GPU offers, or which GPUs were read, changed.
        offered = tuple(
            (i, r.device.capability_changes) for i, r in self._readers.items() if r.device.key in read
        )
        if offered != self._offered:
            self._offered = offered
            self._capability_log.update(
                (d.gpu.gpu_index, d.gpu.name, d.capabilities) for d in devices if d.capabilities is not None
            )
        gpus = tuple((identity, uuid in up) for uuid, identity in self._known.items())
        return NodeReading(True, self._driver_version, gpus, tuple(devices))

    def _failed(self, error: str) -> NodeReading:
        self.handles = ()
        for samples in self._samples.values():
            samples.unread()
        for reader in self._readers.values():
            reader.interrupted()
        gpus = tuple((identity, False) for identity in self._known.values())
        return NodeReading(False, self._driver_version, gpus, (), error)
