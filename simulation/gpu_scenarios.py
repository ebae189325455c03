"""The catalogue of fake-GPU scenarios behind ``gpu-exporter --simulate``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from common.errors import BadInputError
from simulation.fake_nvml import (
    GIB,
    REASON_HW_POWER_BRAKE,
    REASON_HW_THERMAL,
    REASON_SW_POWER_CAP,
    REASON_SW_THERMAL,
    FakeGpu,
    FakeMig,
    FakeNvmlLibrary,
    FakeProcess,
    FakeThrottle,
)
from simulation.gpu_profiles import constant, sawtooth
from simulation.gpu_scenario_names import SCENARIOS

#: Scenario names accepted by ``--simulate``.

_BUSY = constant(97.0)
_IDLE = constant(1.0)


def build_scenario(
    name: str,
    *,
    interval_s: float = 5.0,
    gpus: int = 4,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> FakeNvmlLibrary:
    """The fake binding for scenario ``name`` (one of :data:`SCENARIOS`).

    Timings scale with the collection interval so that a demo at 5 s and a test at 0.5 s tell the same
    story: the lost GPU (index 1) disappears after 4 intervals, with XID 79, and returns after 12; the
    sawtooth's period equals the interval and its near-idle phase straddles each period boundary, so
    every cycle's gauge lands on it while the sample histogram sees about 70 % busy time. In
    ``throttled`` every GPU is busy: GPU 0 overheats (software and hardware thermal slowdown, held down
    30 % of the time), GPU 1 has its hardware power brake asserted (40 %), the others sit at their
    software power cap as busy GPUs do (2 %).
    """

    def gpu(index: int, **kwargs: Any) -> FakeGpu:
        return FakeGpu(index, noise=3.0, **kwargs)

    if name == "idle":
        # Memory held, nothing running: the idle-endpoint pattern (A100: no GPM, profiling series absent).
        a100 = "NVIDIA A100-SXM4-80GB"
        devices = [
            gpu(i, name=a100, utilization=_IDLE, gpm=False, memory_used_bytes=31 * GIB) for i in range(gpus)
        ]
    elif name == "busy":
        devices = [gpu(i, utilization=_BUSY, memory_used_bytes=74 * GIB) for i in range(gpus)]
    elif name == "sawtooth":
        profile = sawtooth(interval_s, idle_fraction=0.3, idle=4.0, busy=97.0)
        devices = [gpu(i, utilization=profile, memory_used_bytes=60 * GIB) for i in range(gpus)]
    elif name == "lost-gpu":
        lost = (4 * interval_s, 12 * interval_s)
        devices = [gpu(i, utilization=_BUSY) for i in range(gpus)]
        devices[1] = gpu(1, utilization=_BUSY, lost_between=lost, xids=((lost[0], 79),))
    elif name == "mig":
        instances = (
            FakeMig(gpu_instance_id=1, profile_index=2, memory_used_bytes=30 * GIB, activity=0.8),
            FakeMig(gpu_instance_id=5, profile_index=1, memory_used_bytes=2 * GIB, activity=0.0),
            FakeMig(gpu_instance_id=13, profile_index=0, memory_used_bytes=8 * GIB, activity=0.4),
        )
        devices = [gpu(0, mig=instances)] + [gpu(i, utilization=_BUSY) for i in range(1, gpus)]
    elif name == "shared":
        # Time-sliced GPU 0: three pods' processes, one of them holding memory without computing.
        processes = (
            FakeProcess(4101, 20 * GIB, 0.6),
            FakeProcess(4102, 10 * GIB, 0.4),
            FakeProcess(4103, 2 * GIB, 0.0),
        )
        devices = [gpu(0, utilization=constant(80.0), memory_used_bytes=32 * GIB, processes=processes)]
        devices += [gpu(i, utilization=_BUSY) for i in range(1, gpus)]
    elif name == "throttled":
        hot = FakeThrottle(
            reasons=REASON_SW_THERMAL | REASON_HW_THERMAL,
            thermal_share=0.3,
            extra_celsius=14,
            sm_clock_mhz=1410,
        )
        braked = FakeThrottle(reasons=REASON_HW_POWER_BRAKE, power_share=0.4, sm_clock_mhz=990)
        capped = FakeThrottle(reasons=REASON_SW_POWER_CAP, power_share=0.02)
        throttles = {0: hot, 1: braked}
        devices = [
            gpu(i, utilization=_BUSY, memory_used_bytes=70 * GIB, throttle=throttles.get(i, capped))
            for i in range(gpus)
        ]
    else:
        raise BadInputError(f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}")
    return FakeNvmlLibrary(devices, clock=clock, sleep=sleep)
