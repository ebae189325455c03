"""A physical GPU's MIG layout: whether MIG mode is on, and its MIG devices with their profiles.

Reading it costs the driver about half a millisecond for the mode alone (an H200, docs/exporter.md),
so it is not read every cycle: :class:`exporter.device_reader.DeviceReader` has it read once per NVML
session and again when NVML reports a MIG reconfiguration (or, where the driver reports none, on a
slow cadence).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from exporter.nvml_library import (
    EMPTY,
    GPU_INSTANCE_PROFILE_COUNT,
    MIG_ENABLED,
    MISSING,
    NO_SUCH_PROFILE,
    NOTHING_NEW,
    NvmlLibrary,
    handle_key,
)
from exporter.readings import Handle, MigInstance

MIG_MODE: Final = "nvmlDeviceGetMigMode"


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class MigLayout:
    """Reads the MIG devices of one physical GPU. ``note(available, failed_call)`` records whether the
    GPU is in MIG mode, for its capabilities."""

    def __init__(
        self, library: NvmlLibrary, parent: Handle, note: Callable[[bool, str | None], None]
    ) -> None:
        self._lib = library
        self._parent = parent
        self._note = note
        self._profiles: dict[int, str] | None = None
        # nvml.h answers NOT_SUPPORTED for the mode only of a device that does not support MIG at all: a
        # property of the GPU, so not asked again this session.
        self.unsupported = False

    def read(self) -> tuple[MigInstance, ...]:
        """The MIG devices now; empty when MIG is off or unsupported."""
        if self.unsupported:
            return ()
        mode = self._lib.call(MIG_MODE, self._parent)
        if mode is MISSING and self._lib.last_failure(handle_key(self._parent), MIG_MODE) == "NOT_SUPPORTED":
            self.unsupported = True
        enabled = mode is not MISSING and int(mode[0]) == MIG_ENABLED
        self._note(enabled, MIG_MODE if mode is MISSING else None)
        if not enabled:
            return ()
        slots = self._lib.call("nvmlDeviceGetMaxMigDeviceCount", self._parent)
        if slots is MISSING:
            return ()
        instances = []
        for slot in range(int(slots)):
            mig = self._lib.call(
                "nvmlDeviceGetMigDeviceHandleByIndex", self._parent, slot, empty_on=NOTHING_NEW
            )
            if mig is MISSING or mig is EMPTY:
                continue  # NOT_FOUND: an empty slot
            uuid = self._lib.call("nvmlDeviceGetUUID", mig)
            gi = self._lib.call("nvmlDeviceGetGpuInstanceId", mig)
            if uuid is MISSING or gi is MISSING:
                continue
            ci = self._lib.call("nvmlDeviceGetComputeInstanceId", mig)
            instances.append(
                MigInstance(
                    handle=mig,
                    uuid=_text(uuid),
                    gpu_instance_id=int(gi),
                    compute_instance_id=None if ci is MISSING else int(ci),
                    profile=self._profile(mig, int(gi)),
                    slot=slot,
                )
            )
        return tuple(instances)

    def _profile(self, mig: Handle, gpu_instance_id: int) -> str:
        """Profile name such as ``1g.10gb``, as dcgm-exporter's ``GPU_I_PROFILE`` shows it."""
        instance = self._lib.call("nvmlDeviceGetGpuInstanceById", self._parent, gpu_instance_id)
        if instance is not MISSING:
            info = self._lib.call("nvmlGpuInstanceGetInfo", instance)
            if info is not MISSING:
                name = self._profile_names().get(int(info.profileId))
                if name:
                    return name
        # Looking GPU instances up can need privileges; the MIG device's own attributes cannot.
        attributes = self._lib.call("nvmlDeviceGetAttributes", mig)
        if attributes is MISSING:
            return ""
        gib = math.ceil(int(attributes.memorySizeMB) / 1024)
        return f"{int(attributes.gpuInstanceSliceCount)}g.{gib}gb"

    def _profile_names(self) -> dict[int, str]:
        if self._profiles is None:
            names = {}
            for profile in range(GPU_INSTANCE_PROFILE_COUNT):
                info = self._lib.call(
                    "nvmlDeviceGetGpuInstanceProfileInfo", self._parent, profile, empty_on=NO_SUCH_PROFILE
                )
                if info is not MISSING and info is not EMPTY:
                    names[int(info.id)] = _text(info.name).removeprefix("MIG ").strip()
            self._profiles = names
        return self._profiles
