"""The NVML layer (the binding's chokepoint, one object per GPU) against a fake binding that raises the
real pynvml exception classes."""

from __future__ import annotations

import ctypes
import logging
import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
import yaml

from exporter import fields as f
from exporter.capabilities import Capability
from exporter.device import Device
from exporter.device_reader import FIELD_IDS
from exporter.fields import NVML_ERRORS
from exporter.node_reader import GpuReader
from exporter.nvml import FIELD_ECC_SBE_VOL, FIELD_MEMORY_TEMP, GpuLost, Nvml, NvmlUnavailable, nvml_error
from exporter.nvml_library import (
    FIELD_NVLINK_TX,
    FIELD_PCIE_REPLAY,
    FIELD_POWER_INSTANT,
    FIELD_TOTAL_ENERGY,
    NvmlLibrary,
    handle_key,
)
from exporter.readings import Clocks, GpmReading, MemoryInfo, UtilizationRates
from harness.binaries import require_binary
from harness.rules import ALERTS_DIR
from simulation.fake_nvml import (
    REASON_GPU_IDLE,
    REASON_HW_THERMAL,
    REASON_SW_THERMAL,
    FakeGpu,
    FakeHandle,
    FakeMig,
    FakeNvmlLibrary,
    FakeProcess,
    FakeThrottle,
)
from simulation.gpu_profiles import constant

GIB = 1024**3


@pytest.fixture
def library(fake_gpus: Callable[..., FakeNvmlLibrary]) -> FakeNvmlLibrary:
    return fake_gpus(FakeGpu(0, utilization=constant(42.0)), FakeGpu(1, gpm=False))


@pytest.fixture
def nvml(library: FakeNvmlLibrary) -> Nvml:
    adapter = Nvml(library)
    adapter.init()
    return adapter


@pytest.fixture
def gpu0(nvml: Nvml) -> Device:
    device = nvml.device(0)
    assert device is not None
    return device


def _device(nvml: Nvml, index: int = 0) -> Device:
    device = nvml.device(index)
    assert device is not None
    return device


def _started(library: FakeNvmlLibrary) -> Nvml:
    nvml = Nvml(library)
    nvml.init()
    return nvml


GPU0 = FakeHandle(0)


@pytest.mark.parametrize(
    ("code", "exception_class"),
    [
        pytest.param("NOT_SUPPORTED", pynvml.NVMLError_NotSupported, id="not-supported"),
        pytest.param("GPU_IS_LOST", pynvml.NVMLError_GpuIsLost, id="gpu-is-lost"),
        pytest.param("FUNCTION_NOT_FOUND", pynvml.NVMLError_FunctionNotFound, id="function-not-found"),
    ],
)
def test_fakes_raise_the_real_binding_classes(code: str, exception_class: type[Exception]) -> None:
    assert type(nvml_error(code)) is exception_class


def test_typed_readings_in_nvml_units(gpu0: Device) -> None:
    assert gpu0.utilization() == UtilizationRates(gpu=42, memory=14)
    memory = gpu0.memory()
    assert isinstance(memory, MemoryInfo)
    assert memory.used == 20 * GIB  # v2: what processes hold, the driver's reservation apart
    assert memory.reserved == 527 * 2**20
    assert memory.total == memory.used + memory.free + memory.reserved
    assert gpu0.clocks() == Clocks(sm=1980, memory=2619)
    assert gpu0.clocks(sm=False) == Clocks(sm=None, memory=2619)  # only what is asked is read
    assert gpu0.temperature_c() == 50
    identity = gpu0.identity()
    assert identity is not None
    assert identity.pci_bus_id == "00000000:18:00.0"  # decoded from the binding's bytes
    assert identity.uuid.startswith("GPU-")


def test_not_supported_is_absent_not_an_error_and_not_asked_again_this_session(
    nvml: Nvml, gpu0: Device, library: FakeNvmlLibrary
) -> None:
    library.fail("nvmlDeviceGetTemperature", "NOT_SUPPORTED")
    assert [gpu0.temperature_c() for _ in range(3)] == [None, None, None]
    assert nvml.error_counts() == {}
    assert library.calls_to("nvmlDeviceGetTemperature") == 1  # what the GPU does not offer, it never will
    nvml.init()  # a new session (a new driver, perhaps) asks again
    assert _device(nvml).temperature_c() is None
    assert library.calls_to("nvmlDeviceGetTemperature") == 2


def test_function_not_found_is_logged_and_counted_once_then_never_called(
    nvml: Nvml, gpu0: Device, library: FakeNvmlLibrary, caplog: pytest.LogCaptureFixture
) -> None:
    library.remove_function("nvmlDeviceGetEncoderUtilization")
    with caplog.at_level(logging.WARNING, logger="exporter.nvml"):
        results = [gpu0.encoder_percent() for _ in range(3)]
    assert results == [None, None, None]
    assert nvml.error_counts() == {("nvmlDeviceGetEncoderUtilization", "FUNCTION_NOT_FOUND"): 1}
    assert sum("nvmlDeviceGetEncoderUtilization" in r.getMessage() for r in caplog.records) == 1
    calls = library.calls
    gpu0.encoder_percent()
    assert library.calls == calls  # the chokepoint no longer calls it


@pytest.mark.parametrize("code", ["UNINITIALIZED", "DRIVER_NOT_LOADED"])
def test_nvml_wide_codes_raise_and_ask_for_reinit(
    nvml: Nvml, gpu0: Device, library: FakeNvmlLibrary, code: str
) -> None:
    library.fail("nvmlDeviceGetMemoryInfo", code, times=1)
    assert not nvml.needs_init
    with pytest.raises(GpuLost) as raised:
        gpu0.memory()
    assert raised.value.code == code
    assert nvml.needs_init
    generation = nvml.generation
    nvml.init()
    assert not nvml.needs_init
    assert nvml.generation == generation + 1
    assert _device(nvml).memory() is not None  # a device of the new session
    assert nvml.error_counts() == {("nvmlDeviceGetMemoryInfo_v2", code): 1}


def test_a_lost_gpu_is_marked_down_without_reinitialising_nvml(
    nvml: Nvml, gpu0: Device, library: FakeNvmlLibrary
) -> None:
    """GPU_IS_LOST concerns one device: NVML stays up, so every other GPU keeps its state."""
    library.fail("nvmlDeviceGetMemoryInfo", "GPU_IS_LOST", gpu=0, times=1)
    with pytest.raises(GpuLost) as raised:
        gpu0.memory()
    assert raised.value.code == "GPU_IS_LOST"
    assert not nvml.needs_init
    assert _device(nvml, 1).memory() is not None


def test_memory_falls_back_to_v1_on_a_driver_without_v2(clock: Any) -> None:
    """v1's "used" includes the driver's reservation: that is what an old driver can tell."""
    library = FakeNvmlLibrary([FakeGpu(0, memory_v2=False)], clock=clock, sleep=clock.sleep)
    nvml = _started(library)
    gpu0 = _device(nvml)
    memory = gpu0.memory()
    assert memory == MemoryInfo(
        total=81559 * 2**20, used=20 * GIB + 527 * 2**20, free=81559 * 2**20 - 20 * GIB - 527 * 2**20
    )
    calls = library.calls
    gpu0.memory()
    assert library.calls == calls + 1  # v2 is not asked again
    assert nvml.error_counts() == {}


def test_other_errors_are_counted_and_leave_the_reading_out(
    nvml: Nvml, gpu0: Device, library: FakeNvmlLibrary
) -> None:
    library.fail("nvmlDeviceGetUtilizationRates", "UNKNOWN", times=2)
    assert gpu0.utilization() is None
    assert gpu0.utilization() is None
    assert gpu0.utilization() is not None
    assert nvml.error_counts() == {("nvmlDeviceGetUtilizationRates", "UNKNOWN"): 2}
    assert not nvml.needs_init


@pytest.mark.parametrize("code", ["LIBRARY_NOT_FOUND", "DRIVER_NOT_LOADED", "NO_PERMISSION"])
def test_init_failure_is_nvml_unavailable(library: FakeNvmlLibrary, code: str) -> None:
    library.fail("nvmlInit", code)
    nvml = Nvml(library)
    with pytest.raises(NvmlUnavailable, match=code):
        nvml.init()
    assert nvml.needs_init
    assert nvml.error_counts() == {("nvmlInit", code): 1}


def test_field_values_are_one_batch(gpu0: Device, library: FakeNvmlLibrary) -> None:
    calls = library.calls
    found = gpu0.fields(FIELD_IDS)
    assert library.calls == calls + 1  # one call for all the batched readings
    assert found[FIELD_POWER_INSTANT] == pytest.approx((70 + 630 * 0.42) * 1000)  # mW
    assert found[FIELD_TOTAL_ENERGY] > 0
    assert found[FIELD_PCIE_REPLAY] == 0
    assert found[FIELD_MEMORY_TEMP] == 50 + 6
    assert FIELD_NVLINK_TX in found


class NanDriver(FakeNvmlLibrary):
    """Answers double-typed values that are NaN, as a confused driver may."""

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: list[int]) -> list[SimpleNamespace]:
        self._gpu("nvmlDeviceGetFieldValues", handle)
        nan = SimpleNamespace(dVal=math.nan)
        ids = [f if isinstance(f, int) else f[0] for f in field_ids]  # (id, scope) pairs answer their id
        return [SimpleNamespace(fieldId=f, nvmlReturn=0, valueType=0, value=nan) for f in ids]

    def nvmlDeviceGetSamples(self, handle: FakeHandle, sampling_type: int, since_us: int) -> Any:
        self._gpu("nvmlDeviceGetSamples", handle)
        return 0, [SimpleNamespace(timeStamp=since_us + 1, sampleValue=SimpleNamespace(dVal=math.nan))]


def test_non_finite_doubles_are_absent_never_nan(clock: Any) -> None:
    gpu0 = _device(_started(NanDriver([FakeGpu(0)], clock=clock, sleep=clock.sleep)))
    assert gpu0.fields(FIELD_IDS) == {}
    samples = gpu0.utilization_samples(0, 0)
    assert samples is not None and samples.percents == ()  # NaN samples dropped
    assert samples.buffered == 1  # what the driver answered, all the same


def _gpu0_values(library: FakeNvmlLibrary, clock: Any, advance: float = 0.0) -> dict[str, float]:
    """GPU 0's values, in DCGM's units, from a collection ``advance`` seconds after NVML started."""
    reader = GpuReader(_started(library), wall_clock=clock, monotonic=clock)
    clock.advance(advance)
    return reader.read().devices[0].values


def test_power_usage_is_read_as_dcgm_reads_it_and_instant_power_from_the_field(clock: Any) -> None:
    """DCGM_FI_DEV_POWER_USAGE comes from nvmlDeviceGetPowerUsage (averaged on recent drivers);
    the instantaneous field goes to DCGM_FI_DEV_POWER_USAGE_INSTANT."""
    ramp = FakeGpu(0, utilization=lambda t: min(t * 10, 100.0))  # power climbing ~630 W per 10 s
    library = FakeNvmlLibrary([ramp], clock=clock, sleep=clock.sleep)
    gpu0 = _device(_started(library))
    clock.advance(5)
    average, instant = gpu0.power_mw(), gpu0.fields(FIELD_IDS).get(FIELD_POWER_INSTANT)
    assert average == library.nvmlDeviceGetPowerUsage(GPU0)
    assert instant is not None and average is not None and instant > average
    library.remove_function("nvmlDeviceGetFieldValues")
    assert gpu0.fields(FIELD_IDS) == {}
    assert gpu0.power_mw() == average


# -- throttling: clock-event reasons and violation counters ---------------------------------------------

HOT = FakeThrottle(reasons=REASON_SW_THERMAL | REASON_HW_THERMAL, power_share=0.1, thermal_share=0.25)
EVENT_REASONS = "nvmlDeviceGetCurrentClocksEventReasons"
THROTTLE_REASONS = "nvmlDeviceGetCurrentClocksThrottleReasons"
VIOLATION_STATUS = "nvmlDeviceGetViolationStatus"


@pytest.fixture
def hot(fake_gpus: Callable[..., FakeNvmlLibrary]) -> FakeNvmlLibrary:
    """GPU 0 busy and thermally throttled; GPU 1 idle."""
    return fake_gpus(FakeGpu(0, utilization=constant(97.0), throttle=HOT), FakeGpu(1))


@pytest.fixture
def hot_nvml(hot: FakeNvmlLibrary) -> Nvml:
    return _started(hot)


def test_clock_event_reasons_are_the_raw_bitmask(hot_nvml: Nvml) -> None:
    assert _device(hot_nvml).clock_event_reasons() == 0x20 | 0x40
    assert _device(hot_nvml, 1).clock_event_reasons() == REASON_GPU_IDLE
    assert hot_nvml.error_counts() == {}


def test_clock_event_reasons_not_supported_is_absent_without_trying_the_old_name(
    hot_nvml: Nvml, hot: FakeNvmlLibrary
) -> None:
    hot.fail(EVENT_REASONS, "NOT_SUPPORTED")
    hot.fail(THROTTLE_REASONS, "UNKNOWN")  # would be counted if it were called
    assert _device(hot_nvml).clock_event_reasons() is None
    assert hot_nvml.error_counts() == {}


def test_clock_event_reasons_fall_back_to_the_pre_535_name(
    hot_nvml: Nvml, hot: FakeNvmlLibrary, caplog: pytest.LogCaptureFixture
) -> None:
    hot.remove_function(EVENT_REASONS)
    gpu0 = _device(hot_nvml)
    with caplog.at_level(logging.WARNING, logger="exporter.nvml"):
        readings = [gpu0.clock_event_reasons() for _ in range(3)]
    assert readings == [0x60, 0x60, 0x60]
    assert hot_nvml.error_counts() == {(EVENT_REASONS, "FUNCTION_NOT_FOUND"): 1}
    assert sum(EVENT_REASONS in r.getMessage() for r in caplog.records) == 1


def test_clock_event_reasons_absent_when_neither_name_exists(hot_nvml: Nvml, hot: FakeNvmlLibrary) -> None:
    hot.remove_function(EVENT_REASONS)
    hot.remove_function(THROTTLE_REASONS)
    gpu0 = _device(hot_nvml)
    assert gpu0.clock_event_reasons() is None
    assert gpu0.clock_event_reasons() is None
    assert set(hot_nvml.error_counts()) == {
        (EVENT_REASONS, "FUNCTION_NOT_FOUND"),
        (THROTTLE_REASONS, "FUNCTION_NOT_FOUND"),
    }


def test_a_binding_without_the_function_counts_as_function_not_found() -> None:
    library = NvmlLibrary(SimpleNamespace())  # an old binding: neither name is an attribute
    assert Device(library, 0, GPU0).clock_event_reasons() is None
    assert library.error_counts() == {
        (EVENT_REASONS, "FUNCTION_NOT_FOUND"): 1,
        (THROTTLE_REASONS, "FUNCTION_NOT_FOUND"): 1,
    }


def test_violation_counters_come_with_the_field_values_batch_in_nanoseconds(
    hot: FakeNvmlLibrary, clock: Any
) -> None:
    values = _gpu0_values(hot, clock, advance=40.0)
    assert hot.calls_to("nvmlDeviceGetFieldValues") == 2  # one batch per GPU, now for five readings
    assert hot.calls_to(VIOLATION_STATUS) == 0
    assert values[f.THERMAL_VIOLATION] == pytest.approx(0.25 * 40 * 1e9)
    assert values[f.POWER_VIOLATION] == pytest.approx(0.1 * 40 * 1e9)


def test_an_idle_gpu_has_violation_counters_at_zero(hot: FakeNvmlLibrary, clock: Any) -> None:
    reader = GpuReader(Nvml(hot), wall_clock=clock, monotonic=clock)
    idle = reader.read().devices[1].values
    assert (idle[f.POWER_VIOLATION], idle[f.THERMAL_VIOLATION]) == (0, 0)  # supported, never throttled


@pytest.mark.parametrize(
    "missing",
    [
        pytest.param("slot", id="field-slot-not-supported"),
        pytest.param("function", id="field-values-function-not-found"),
    ],
)
def test_violation_counters_fall_back_to_violation_status(
    hot: FakeNvmlLibrary, clock: Any, missing: str
) -> None:
    if missing == "slot":
        hot.fail_field(pynvml.NVML_FI_DEV_PERF_POLICY_POWER, "NOT_SUPPORTED")
        hot.fail_field(pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL, "NOT_SUPPORTED")
    else:
        hot.remove_function("nvmlDeviceGetFieldValues")
    values = _gpu0_values(hot, clock, advance=10.0)
    assert values[f.THERMAL_VIOLATION] == pytest.approx(0.25 * 10 * 1e9)
    assert values[f.POWER_VIOLATION] == pytest.approx(0.1 * 10 * 1e9)


def test_violation_counters_not_supported_anywhere_are_absent_not_errors(
    hot: FakeNvmlLibrary, clock: Any
) -> None:
    hot.fail_field(pynvml.NVML_FI_DEV_PERF_POLICY_POWER, "NOT_SUPPORTED")
    hot.fail_field(pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL, "NOT_SUPPORTED")
    hot.fail(VIOLATION_STATUS, "NOT_SUPPORTED")
    nvml = Nvml(hot)
    values = GpuReader(nvml, wall_clock=clock, monotonic=clock).read().devices[0].values
    assert f.POWER_VIOLATION not in values and f.THERMAL_VIOLATION not in values
    assert f.POWER_USAGE_INSTANT in values  # the rest of the batch is unaffected
    assert nvml.error_counts() == {}


def test_violation_status_function_not_found_is_counted_once(hot: FakeNvmlLibrary, clock: Any) -> None:
    hot.remove_function("nvmlDeviceGetFieldValues")
    hot.remove_function(VIOLATION_STATUS)
    nvml = Nvml(hot)
    reader = GpuReader(nvml, wall_clock=clock, monotonic=clock)
    for _ in range(3):
        values = reader.read().devices[0].values
        clock.advance(5)
    assert f.POWER_VIOLATION not in values and f.THERMAL_VIOLATION not in values
    assert nvml.error_counts() == {
        ("nvmlDeviceGetFieldValues", "FUNCTION_NOT_FOUND"): 1,
        (VIOLATION_STATUS, "FUNCTION_NOT_FOUND"): 1,
    }


def test_utilization_samples_since_a_timestamp(nvml: Nvml, gpu0: Device, clock: Any) -> None:
    clock.advance(2.0)
    first = gpu0.utilization_samples(0, 0)
    assert first is not None and len(first.percents) == first.buffered == 13  # the buffer so far
    assert all(percent in range(40, 45) for percent in first.percents)
    assert first.first_us == first.oldest_us <= first.last_us
    newest = first.last_us
    nothing_new = gpu0.utilization_samples(newest, newest)  # NOT_FOUND: nothing new, not an error
    assert nothing_new is not None and nothing_new.percents == ()
    clock.advance(1.0)
    later = gpu0.utilization_samples(newest, newest)
    assert later is not None
    assert len(later.percents) == later.buffered == 6  # six per second
    assert later.first_us > newest
    whole = gpu0.utilization_samples(0, newest)  # the whole buffer asked for, only the new ones kept
    assert whole is not None and whole.percents == later.percents and whole.buffered == 19
    assert nvml.error_counts() == {}


def test_no_utilization_samples_on_mig(fake_gpus: Callable[..., FakeNvmlLibrary]) -> None:
    gpu0 = _device(_started(fake_gpus(FakeGpu(0, mig=(FakeMig(1, 2, 4 * GIB),)))))
    assert gpu0.utilization_samples(0, 0) is None
    assert gpu0.utilization() is None


def test_mig_mode_not_asked_again_of_a_gpu_without_mig_until_reinit(
    fake_gpus: Callable[..., FakeNvmlLibrary],
) -> None:
    # nvml.h: NOT_SUPPORTED from nvmlDeviceGetMigMode means the device does not support MIG mode.
    library = fake_gpus(FakeGpu(0), FakeGpu(1, mig=(FakeMig(1, 2, 4 * GIB),)))
    nvml = _started(library)
    for _ in range(3):
        assert _device(nvml, 0).mig_instances() == ()
        assert len(_device(nvml, 1).mig_instances()) == 1
    assert library.calls_to("nvmlDeviceGetMigMode") == 1 + 3  # GPU 0 once, GPU 1 (MIG on) when asked
    assert _device(nvml).capabilities()["mig"] == Capability(False, "NOT_SUPPORTED")
    nvml.init()  # a new session asks again
    assert _device(nvml).mig_instances() == ()
    assert library.calls_to("nvmlDeviceGetMigMode") == 5


def test_mig_instances_with_profile_names(fake_gpus: Callable[..., FakeNvmlLibrary]) -> None:
    gpu0 = _device(_started(fake_gpus(FakeGpu(0, mig=(FakeMig(1, 2, 30 * GIB), FakeMig(13, 0, 1 * GIB))))))
    instances = gpu0.mig_instances()
    assert [(m.gpu_instance_id, m.profile) for m in instances] == [(1, "3g.40gb"), (13, "1g.10gb")]
    assert all(m.uuid.startswith("MIG-") for m in instances)
    assert [m.slot for m in instances] == [0, 1]  # the device plugin's "<gpu>:<slot>" index ids
    assert gpu0.memory(instances[1].handle) == MemoryInfo(9984 * 2**20, GIB, 9984 * 2**20 - GIB, 0)


def test_mig_profile_from_attributes_when_instances_need_privileges(
    fake_gpus: Callable[..., FakeNvmlLibrary],
) -> None:
    library = fake_gpus(FakeGpu(0, mig=(FakeMig(5, 1, 2 * GIB),)))
    library.fail("nvmlDeviceGetGpuInstanceById", "NO_PERMISSION")
    assert [m.profile for m in _device(_started(library)).mig_instances()] == ["2g.20gb"]


def test_no_mig_instances_on_a_whole_gpu(nvml: Nvml, gpu0: Device) -> None:
    assert gpu0.mig_instances() == ()
    assert nvml.error_counts() == {}


def test_gpm_ratios_need_two_samples(gpu0: Device, clock: Any) -> None:
    assert gpu0.read_gpm("gpu0") is None  # first sample: nothing to compare with yet
    clock.advance(1.0)
    reading = gpu0.read_gpm("gpu0")
    assert isinstance(reading, GpmReading)
    assert reading.graphics_active == pytest.approx(0.42)
    assert reading.sm_active == pytest.approx(0.42 * 0.85)
    ratios = reading[:5]
    assert all(ratio is not None and 0.0 <= ratio <= 1.0 for ratio in ratios)
    assert reading.pcie_tx_bytes_per_s == pytest.approx(800 * 0.42 * 2**20)  # MiB/s → B/s


def test_gpm_computes_only_the_metrics_asked_for(gpu0: Device, clock: Any) -> None:
    """GRAPHICS_UTIL alone costs an H200's driver 1.8 ms: not asked where its family is not served."""
    gpu0.read_gpm("gpu0", metrics=(1, 3))
    clock.advance(1.0)
    reading = gpu0.read_gpm("gpu0", metrics=(1, 3))
    assert reading is not None
    assert [value is not None for value in reading] == [False, True, False, True, False, False, False]


def test_gpm_takes_two_calls_per_read_into_two_reused_buffers(
    nvml: Nvml, gpu0: Device, library: FakeNvmlLibrary, clock: Any
) -> None:
    """A sample goes into the spare buffer of the pair and the two swap: after the first two reads no
    buffer is allocated or freed, and none leaks when the GPU goes down or NVML is shut down."""
    for _ in range(2):
        gpu0.read_gpm("gpu0")
        clock.advance(1.0)
    calls = library.calls
    for _ in range(5):
        reading = gpu0.read_gpm("gpu0")
        assert reading is not None and reading.graphics_active == pytest.approx(0.42)
        clock.advance(1.0)
    assert library.calls - calls == 5 * 2  # nvmlGpmSampleGet and nvmlGpmMetricsGet
    assert library.calls_to("nvmlGpmSampleAlloc") == 2
    assert library.live_gpm_samples == 2
    gpu0.close()  # the GPU went down: both buffers go
    assert library.live_gpm_samples == 0
    gpu0.read_gpm("gpu0")
    nvml.shutdown()
    assert library.live_gpm_samples == 0


def test_gpm_absent_where_unsupported(nvml: Nvml) -> None:
    gpu1 = _device(nvml, 1)  # an A100-like device: no GPM
    assert gpu1.read_gpm("gpu1") is None
    assert gpu1.read_gpm("gpu1") is None
    assert gpu1.capabilities()["gpm"] == Capability(False)
    assert nvml.error_counts() == {}


def test_processes_and_their_utilization(fake_gpus: Callable[..., FakeNvmlLibrary]) -> None:
    processes = (FakeProcess(11, 3 * GIB, 0.5), FakeProcess(12, 1 * GIB, 0.25))
    gpu0 = _device(_started(fake_gpus(FakeGpu(0, utilization=constant(80.0), processes=processes))))
    assert [(p.pid, p.used_bytes) for p in gpu0.processes() or ()] == [(11, 3 * GIB), (12, GIB)]
    samples = gpu0.process_utilization(0)
    assert samples is not None
    assert {(s.pid, s.sm_percent) for s in samples} == {(11, 40), (12, 20)}
    assert gpu0.process_utilization(max(s.timestamp_us for s in samples)) == ()


def test_xid_events_name_the_gpu(fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any) -> None:
    nvml = _started(fake_gpus(FakeGpu(0), FakeGpu(1, xids=((2.0, 48),))))
    event_set = nvml.xid_event_set([(FakeHandle(0), "GPU-a"), (FakeHandle(1), "GPU-b")])
    assert event_set is not None
    assert nvml.wait_xid(event_set, 1000) is None  # timed out: nothing yet
    clock.advance(1.5)
    event = nvml.wait_xid(event_set, 1000)
    assert event is not None and (event.uuid, event.xid) == ("GPU-b", 48)
    assert nvml.error_counts() == {}


def test_ctypes_handles_to_the_same_device_share_a_key() -> None:
    buffer = ctypes.create_string_buffer(8)
    first = ctypes.cast(buffer, pynvml.c_nvmlDevice_t)
    second = ctypes.cast(buffer, pynvml.c_nvmlDevice_t)
    assert first is not second
    assert handle_key(first) == handle_key(second)


def test_shutdown_frees_gpm_samples(nvml: Nvml, gpu0: Device, library: FakeNvmlLibrary) -> None:
    gpu0.read_gpm("gpu0")
    library.fail("nvmlGpmSampleFree", "UNKNOWN")  # errors while cleaning up are irrelevant
    nvml.shutdown()
    assert nvml.needs_init
    assert nvml.error_counts() == {}


@pytest.mark.parametrize("call", ["nvmlDeviceGetProcessUtilization", "nvmlDeviceGetComputeRunningProcesses"])
def test_per_process_reads_retry_when_a_process_starts_between_the_two_calls(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any, call: str
) -> None:
    """The binding sizes its buffer, then reads; a process starting in between makes the read answer
    INSUFFICIENT_SIZE. DCGM retries; so does the NVML layer, instead of losing the cycle's numbers."""
    library = fake_gpus(FakeGpu(0, utilization=constant(50.0), processes=(FakeProcess(7, GIB, 1.0),)))
    nvml = _started(library)
    gpu0 = _device(nvml)
    clock.advance(1)
    library.fail(call, "INSUFFICIENT_SIZE", times=2)
    utilization = gpu0.process_utilization(0)
    processes = gpu0.processes()
    assert utilization is not None and [s.pid for s in utilization] == [7]
    assert processes is not None and [p.pid for p in processes] == [7]
    assert nvml.error_counts() == {}
    library.fail(call, "INSUFFICIENT_SIZE")  # never settles: counted once per read, reading left out
    if call.endswith("Utilization"):
        assert gpu0.process_utilization(0) is None
    else:
        assert gpu0.processes() is None
    assert nvml.error_counts() == {(call, "INSUFFICIENT_SIZE"): 1}


def test_without_a_driver_the_real_binding_fails_saying_what_to_check() -> None:
    """The real pynvml, on a machine without the NVIDIA library: the message points at the fix."""
    nvml = Nvml()
    try:
        nvml.init()
    except NvmlUnavailable as exc:
        message = str(exc)
    else:
        nvml.shutdown()
        pytest.skip("an NVIDIA driver is present")
    assert message.startswith(("nvmlInit: LIBRARY_NOT_FOUND", "nvmlInit: DRIVER_NOT_LOADED"))
    assert "NVIDIA container runtime" in message
    assert "--simulate" in message


def test_driver_time_is_counted_per_call(library: FakeNvmlLibrary) -> None:
    """gpu_exporter_nvml_seconds_total: every call's time, under its function's name."""
    ticks = iter(range(1000))
    nvml = Nvml(library, timer=lambda: next(ticks) / 1000)  # each call takes 1 ms on this timer
    nvml.init()
    gpu0 = _device(nvml)
    for _ in range(3):
        gpu0.temperature_c()
    gpu0.memory()
    seconds = nvml.call_seconds()
    assert seconds["nvmlDeviceGetTemperature"] == pytest.approx(0.003)
    assert seconds["nvmlDeviceGetMemoryInfo_v2"] == pytest.approx(0.001)  # the call's versioned name
    assert seconds["nvmlInit"] == pytest.approx(0.001)


# -- answers that hold for the session: asked once, counted once ----------------------------------------

INSTANCE_BY_ID = "nvmlDeviceGetGpuInstanceById"


def _mig_gpus(fake_gpus: Callable[..., FakeNvmlLibrary], count: int = 1) -> FakeNvmlLibrary:
    instances = (FakeMig(5, 1, 2 * GIB), FakeMig(13, 0, GIB))
    return fake_gpus(*(FakeGpu(i, mig=instances) for i in range(count)))


@pytest.mark.parametrize("code", ["NO_PERMISSION", "OPERATING_SYSTEM"])
def test_a_call_refused_for_good_is_asked_counted_and_logged_once_per_gpu(
    fake_gpus: Callable[..., FakeNvmlLibrary], caplog: pytest.LogCaptureFixture, code: str
) -> None:
    """Looking GPU instances up "requires privileged user" (nvml.h): without it every read of the
    layout would add an error per MIG instance and keep GpuExporterErrors firing."""
    library = _mig_gpus(fake_gpus, count=2)
    library.fail(INSTANCE_BY_ID, code)
    nvml = _started(library)
    with caplog.at_level(logging.DEBUG, logger="exporter.nvml"):
        for _ in range(5):
            for gpu in (0, 1):
                profiles = [m.profile for m in _device(nvml, gpu).mig_instances()]
                assert profiles == ["2g.20gb", "1g.10gb"]  # from the MIG devices' own attributes
    assert library.calls_to(INSTANCE_BY_ID) == 2  # once per GPU, not once per instance and read
    assert nvml.error_counts() == {(INSTANCE_BY_ID, code): 2}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"NVML {INSTANCE_BY_ID} failed with {code}; not called again on that device until NVML is"
        " re-initialised"
        + (
            ' — this container lacks the privilege for it (docs/install.md, "The exporter\'s privileges")'
            if code == "NO_PERMISSION"
            else ""
        )
    ]
    nvml.init()  # a new session may have the privilege (or a new driver): asked again, once
    _device(nvml).mig_instances()
    _device(nvml).mig_instances()
    assert library.calls_to(INSTANCE_BY_ID) == 3
    assert nvml.error_counts() == {(INSTANCE_BY_ID, code): 3}


def test_a_passing_error_is_still_asked_every_time(gpu0: Device, library: FakeNvmlLibrary) -> None:
    library.fail("nvmlDeviceGetPowerUsage", "UNKNOWN", times=2)
    assert [gpu0.power_mw() is None for _ in range(3)] == [True, True, False]
    assert library.calls_to("nvmlDeviceGetPowerUsage") == 3


def test_a_refused_field_of_the_batch_is_counted_once(
    nvml: Nvml, gpu0: Device, library: FakeNvmlLibrary
) -> None:
    """The batch call is still made (its other fields answer); the refused slot counts once."""
    library.fail_field(FIELD_ECC_SBE_VOL, "NO_PERMISSION")
    readings = [gpu0.fields(FIELD_IDS) for _ in range(4)]
    assert all(FIELD_ECC_SBE_VOL not in r and FIELD_TOTAL_ENERGY in r for r in readings)
    assert nvml.error_counts() == {(f"nvmlDeviceGetFieldValues[{FIELD_ECC_SBE_VOL}]", "NO_PERMISSION"): 1}


def test_a_field_the_gpu_does_not_offer_is_left_out_of_the_next_batches(
    gpu0: Device, library: FakeNvmlLibrary
) -> None:
    asked: list[list[Any]] = []
    real = library.nvmlDeviceGetFieldValues
    library.nvmlDeviceGetFieldValues = lambda handle, ids: asked.append(ids) or real(handle, ids)  # type: ignore[method-assign]
    library.fail_field(FIELD_NVLINK_TX, "NOT_SUPPORTED")  # a PCIe card: no NVLink
    gpu0.fields(FIELD_IDS)
    gpu0.fields(FIELD_IDS)
    assert [any(i == (FIELD_NVLINK_TX, 0xFFFFFFFF) for i in ids) for ids in asked] == [True, False]
    assert gpu0.capabilities()["nvlink"] == Capability(False, "NOT_SUPPORTED")


def test_a_refused_per_process_read_is_not_retried(fake_gpus: Callable[..., FakeNvmlLibrary]) -> None:
    library = fake_gpus(FakeGpu(0, processes=(FakeProcess(7, GIB, 1.0),)))
    library.fail("nvmlDeviceGetComputeRunningProcesses", "NO_PERMISSION")
    nvml = _started(library)
    assert [_device(nvml).processes() for _ in range(3)] == [None, None, None]
    assert library.calls_to("nvmlDeviceGetComputeRunningProcesses") == 1
    assert nvml.error_counts() == {("nvmlDeviceGetComputeRunningProcesses", "NO_PERMISSION"): 1}


def _error_counter_each_minute(library: FakeNvmlLibrary, clock: Any, minutes: int) -> list[int]:
    """gpu_exporter_nvml_errors_total as a scrape once a minute sees it, collecting every 5 s."""
    nvml = Nvml(library)
    reader = GpuReader(nvml, wall_clock=clock, monotonic=clock)
    scraped = [0]  # the counter is 0 (absent) before the first collection
    for _ in range(minutes):
        for _ in range(12):
            reader.read()
            clock.advance(5)
        scraped.append(sum(nvml.error_counts().values()))
    return scraped


def _alert_fires_at_the_end(tmp_path: Path, scraped: list[int]) -> bool:
    """Evaluate the shipped GpuExporterErrors rule over ``scraped`` with promtool, at the last minute."""
    tests = {
        "rule_files": [str(ALERTS_DIR / "gpu-exporter.rules.yaml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f'{NVML_ERRORS}{{job="gpu-exporter", instance="10.0.0.5:9400"}}',
                        "values": " ".join(str(v) for v in scraped),
                    }
                ],
                "alert_rule_test": [
                    {"eval_time": f"{len(scraped) - 1}m", "alertname": "GpuExporterErrors", "exp_alerts": []}
                ],
            }
        ],
    }
    path = tmp_path / "errors.test.yaml"
    path.write_text(yaml.safe_dump(tests))
    result = subprocess.run(
        [require_binary("promtool"), "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0 or "GpuExporterErrors" in output, output
    return result.returncode != 0


def test_a_privilege_the_container_lacks_does_not_keep_the_errors_alert_firing(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any, tmp_path: Path
) -> None:
    """Forty minutes of collections on a MIG GPU whose GPU instances need privileges: the counter
    grows once, so GpuExporterErrors (increase over 10 m, for 15 m) never fires. The same call failing
    with a passing error at every read of the layout does fire it: the check can tell the two apart."""
    refused = _mig_gpus(fake_gpus)
    refused.fail(INSTANCE_BY_ID, "NO_PERMISSION")
    scraped = _error_counter_each_minute(refused, clock, minutes=40)
    assert scraped[1:] == [1] * 40
    assert not _alert_fires_at_the_end(tmp_path, scraped)

    flaky = _mig_gpus(fake_gpus)
    flaky.fail(INSTANCE_BY_ID, "UNKNOWN")
    assert _alert_fires_at_the_end(tmp_path, _error_counter_each_minute(flaky, clock, minutes=40))


# -- older bindings -------------------------------------------------------------------------------------


class OldUnionDriver(FakeNvmlLibrary):
    """A driver answering an unsigned-short field through a binding whose value union predates ``usVal``
    (nvidia-ml-py before 12.570.86)."""

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: list[Any]) -> list[SimpleNamespace]:
        answers = super().nvmlDeviceGetFieldValues(handle, field_ids)
        for answer in answers:
            if answer.fieldId == FIELD_MEMORY_TEMP:
                answer.valueType, answer.value = 6, SimpleNamespace(uiVal=0)  # NVML_VALUE_TYPE_UNSIGNED_SHORT
        return answers


def test_an_unsigned_short_reading_the_binding_cannot_hold_is_left_out(clock: Any) -> None:
    found = _device(_started(OldUnionDriver([FakeGpu(0)], clock=clock, sleep=clock.sleep))).fields(FIELD_IDS)
    assert FIELD_MEMORY_TEMP not in found
    assert FIELD_TOTAL_ENERGY in found


def test_the_process_utilization_probe_is_asked_once_a_session_whatever_it_answers(
    nvml: Nvml, library: FakeNvmlLibrary
) -> None:
    """A GPU nobody shares is asked for per-process utilization only to fill its capability; a passing
    failure must not turn that probe into an error counted every cycle."""
    library.fail("nvmlDeviceGetProcessUtilization", "UNKNOWN")
    for _ in range(5):
        _device(nvml).capabilities()
    assert library.calls_to("nvmlDeviceGetProcessUtilization") == 1
    assert nvml.error_counts() == {("nvmlDeviceGetProcessUtilization", "UNKNOWN"): 1}
    nvml.init()  # a new session asks again
    _device(nvml).capabilities()
    assert library.calls_to("nvmlDeviceGetProcessUtilization") == 2


def test_a_refused_system_call_is_asked_again_next_cycle(nvml: Nvml, library: FakeNvmlLibrary) -> None:
    """Only a device's calls are kept from being asked again: a GPU count refused once must not
    leave the exporter without GPUs until it restarts."""
    library.fail("nvmlDeviceGetCount", "NO_PERMISSION", times=1)
    with pytest.raises(NvmlUnavailable):
        nvml.device_count()
    assert nvml.device_count() == 2


class UnreadableSamplesDriver(FakeNvmlLibrary):
    """Utilization samples in a value type this code does not know how to read."""

    def nvmlDeviceGetSamples(self, handle: FakeHandle, kind: int, since_us: int) -> tuple[int, list[Any]]:
        _, samples = super().nvmlDeviceGetSamples(handle, kind, since_us)
        return 99, samples


def test_samples_in_an_unreadable_value_type_are_unknown_not_idle(clock: Any) -> None:
    library = UnreadableSamplesDriver([FakeGpu(0, utilization=constant(0.0))], clock=clock, sleep=clock.sleep)
    gpu0 = _device(_started(library))
    clock.advance(5)
    assert gpu0.utilization_samples(0, 0) is None
