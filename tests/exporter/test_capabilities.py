"""Which metric families each GPU can have: served as ``gpu_exporter_capability`` and logged at start,
so an A100's empty profiling panels read as "not offered there", not as a broken exporter."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.capabilities import Capability, summary
from exporter.cycle import Cycle
from exporter.exposition import Exposition
from exporter.node_reader import GpuReader
from exporter.nvml import FIELD_NVLINK_TX, Nvml
from exporter.readings import DeviceReading
from exporter.snapshot import SnapshotBuilder
from simulation.fake_nvml import GIB, FakeGpu, FakeMig, FakeNvmlLibrary

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
MIGS = (FakeMig(1, 2, 30 * GIB), FakeMig(13, 0, GIB))


def _read(library: FakeNvmlLibrary, clock: Any, cycles: int = 1) -> list[DeviceReading]:
    reader = GpuReader(Nvml(library), wall_clock=clock, monotonic=clock)
    devices: list[DeviceReading] = []
    for _ in range(cycles):
        devices = list(reader.read().devices)
        clock.advance(5)
    return [d for d in devices if d.mig is None]


def _available(device: DeviceReading) -> dict[str, bool]:
    assert device.capabilities is not None
    return {name: c.available for name, c in device.capabilities.items()}


def test_each_gpu_says_what_nvml_offers_on_it(fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any) -> None:
    library = fake_gpus(FakeGpu(0), FakeGpu(1, name=A100, gpm=False), FakeGpu(2, mig=MIGS))
    library.fail_field(FIELD_NVLINK_TX, "NOT_SUPPORTED")  # a PCIe card: no NVLink
    h100, a100, mig = _read(library, clock)
    assert _available(h100) == {
        "gpm": True,
        "mig": False,
        "process_utilization": True,
        "samples": True,
        "nvlink": False,
        "ecc": True,
    }
    assert _available(a100)["gpm"] is False
    # nvml.h: no utilization samples and no per-process utilization on a MIG-enabled GPU.
    assert _available(mig) == {
        **_available(h100),
        "mig": True,
        "samples": False,
        "process_utilization": False,
    }
    assert mig.capabilities is not None
    assert mig.capabilities["samples"] == Capability(False, "NOT_SUPPORTED")


def test_a_refused_call_names_its_code(fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any) -> None:
    library = fake_gpus(FakeGpu(0))
    library.fail("nvmlDeviceGetProcessUtilization", "NO_PERMISSION")
    (gpu,) = _read(library, clock, cycles=3)
    assert gpu.capabilities is not None
    assert gpu.capabilities["process_utilization"] == Capability(False, "NO_PERMISSION")
    assert library.calls_to("nvmlDeviceGetProcessUtilization") == 1  # asked once, for the capability


def test_a_passing_error_does_not_take_a_capability_away(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    library = fake_gpus(FakeGpu(0))
    nvml = Nvml(library)
    reader = GpuReader(nvml, wall_clock=clock, monotonic=clock)
    reader.read()
    library.fail("nvmlDeviceGetSamples", "UNKNOWN", times=1)
    clock.advance(5)
    (gpu,) = reader.read().devices
    assert gpu.samples is None  # this cycle's samples are lost...
    assert gpu.capabilities is not None and gpu.capabilities["samples"].available  # ...not the family


def test_the_gauge_is_served_per_gpu_and_capability(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    library = fake_gpus(FakeGpu(0, name=A100, gpm=False))
    cycle = Cycle(Nvml(library), SnapshotBuilder("node-a", version="test"), wall_clock=clock, monotonic=clock)
    snapshot = cycle.run()
    body = Exposition(lambda: snapshot).render()[0].decode()
    (family,) = [f for f in text_string_to_metric_families(body) if f.name == "gpu_exporter_capability"]
    assert family.type == "gauge"
    samples = {(s.labels["capability"], s.labels["gpu"]): s.value for s in family.samples}
    assert samples == {
        ("gpm", "0"): 0.0,
        ("mig", "0"): 0.0,
        ("process_utilization", "0"): 1.0,
        ("samples", "0"): 1.0,
        ("nvlink", "0"): 1.0,
        ("ecc", "0"): 1.0,
    }
    # Lint-clean label names (no modelName); gpu, UUID and Hostname join it to gpu_up.
    assert {tuple(sorted(s.labels)) for s in family.samples} == {("Hostname", "UUID", "capability", "gpu")}


def test_the_start_up_log_names_what_each_model_lacks_once(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    library = fake_gpus(
        FakeGpu(0, name=A100, gpm=False),
        FakeGpu(1, name=A100, gpm=False),
        FakeGpu(2, name=A100, gpm=False, mig=MIGS),
        FakeGpu(3, name=H100),
    )
    with caplog.at_level(logging.INFO, logger="exporter.node_reader"):
        _read(library, clock, cycles=4)
    lines = [r.getMessage() for r in caplog.records if r.name == "exporter.node_reader"]
    gpm = (
        "gpm [DCGM_FI_PROF_* from NVML GPM] (GPM needs Hopper or newer (nvmlGpmQueryDeviceSupport); on"
        " A100/V100 run dcgm-exporter for the DCGM_FI_PROF_* family beside this exporter (docs/install.md))"
    )
    assert lines[0] == f"GPUs 0-1 ({A100}): unavailable: {gpm}"
    assert lines[1].startswith(f"GPU 2 ({A100}, MIG mode): unavailable: {gpm}; process_utilization [")
    assert (
        "samples [the sub-second histogram gpu_utilization_samples_percent] (NVML: NOT_SUPPORTED;" in lines[1]
    )
    assert lines[2:] == [f"GPU 3 ({H100}): every metric family available"]  # and nothing more: no repeats


def test_the_summary_groups_gpus_by_model_and_what_they_lack() -> None:
    whole = {"gpm": Capability(True), "mig": Capability(False, "NOT_SUPPORTED"), "ecc": Capability(True)}
    no_ecc = {**whole, "ecc": Capability(False, "NOT_SUPPORTED")}
    lines = summary(
        [(0, "L4", no_ecc), (1, "L4", no_ecc), (2, "L4", no_ecc), (5, "L4", no_ecc), (4, "H100", whole)]
    )
    assert lines == [
        "GPUs 0-2, 5 (L4): unavailable: ecc [DCGM_FI_DEV_ECC_* counters] (NVML: NOT_SUPPORTED; ECC is off or"
        " absent on this GPU)",
        "GPU 4 (H100): every metric family available",
    ]


def test_the_gauge_follows_a_capability_lost_between_collections(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    """The builder keeps each GPU's capability series while what it offers is unchanged; a refusal
    that settles a capability changes what is served at once."""
    library = fake_gpus(FakeGpu(0, name=A100, gpm=False))
    cycle = Cycle(Nvml(library), SnapshotBuilder("node-a", version="test"), wall_clock=clock, monotonic=clock)

    def samples_offered() -> float:
        snapshot = cycle.run()
        body = Exposition(lambda: snapshot).render()[0].decode()
        (family,) = [f for f in text_string_to_metric_families(body) if f.name == "gpu_exporter_capability"]
        return next(s.value for s in family.samples if s.labels["capability"] == "samples")

    assert samples_offered() == 1.0
    clock.advance(5)
    assert samples_offered() == 1.0
    library.fail("nvmlDeviceGetSamples", "NOT_SUPPORTED")
    clock.advance(30)  # past the sample buffer's cadence: read, and refused
    assert samples_offered() == 0.0
