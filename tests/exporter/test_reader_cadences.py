"""What the reader asks of NVML, and how often: the costly readings on their cadences (monotonic clock),
the MIG layout on NVML's reconfiguration events, per-process utilization only where it is needed,
nothing the served families do not need, and a sub-second histogram that stays exact."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from common import metric_names as m
from exporter import fields as f
from exporter.cadence import Cadence, Cadences
from exporter.cycle import Cycle
from exporter.exposition import Exposition
from exporter.node_reader import GpuReader
from exporter.nvml import Nvml
from exporter.readings import DeviceIdentity, MigLabels, NodeReading
from exporter.sample_buffer import SampleBuffer
from exporter.snapshot import SnapshotBuilder
from exporter.xid import XidCounter, XidWatcher
from simulation.fake_nvml import (
    GIB,
    SAMPLE_BUFFER,
    FakeGpu,
    FakeHandle,
    FakeMig,
    FakeNvmlLibrary,
    FakeProcess,
)
from simulation.gpu_profiles import constant

INTERVAL_S = 5.0
MIGS = (FakeMig(1, 2, 30 * GIB), FakeMig(13, 0, GIB))


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _running(library: FakeNvmlLibrary, clock: Any, warm_s: float = 30.0) -> Nvml:
    """NVML initialised ``warm_s`` seconds ago: the driver's sample ring is full, as on a node."""
    nvml = Nvml(library)
    nvml.init()
    clock.advance(warm_s)
    return nvml


def _reader(nvml: Nvml, clock: Any, **kwargs: Any) -> GpuReader:
    return GpuReader(nvml, wall_clock=clock, monotonic=clock, interval_s=INTERVAL_S, **kwargs)


def _collect(reader: GpuReader, clock: Any, cycles: int, **kwargs: Any) -> list[NodeReading]:
    readings = []
    for _ in range(cycles):
        readings.append(reader.read(**kwargs))
        clock.advance(INTERVAL_S)
    return readings


def test_the_costly_readings_are_taken_on_their_cadences_and_served_in_between(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    library = fake_gpus(FakeGpu(0, utilization=lambda t: 20 + t / 10))
    readings = _collect(_reader(_running(library, clock), clock), clock, cycles=24)  # two minutes
    assert library.calls_to("nvmlDeviceGetUtilizationRates") == 24  # the cheap gauges: every cycle
    assert library.calls_to("nvmlDeviceGetFieldValues") == 24
    assert library.calls_to("nvmlDeviceGetSamples") == 8  # every 15 s: the ring holds 20 s
    assert library.calls_to("nvmlGpmSampleGet") == 2 + 7  # the first pair, then every 15 s
    assert library.calls_to("nvmlDeviceGetMigMode") == 1  # NOT_SUPPORTED: a GPU without MIG
    values = [r.devices[0].values for r in readings]
    energy = [v[f.TOTAL_ENERGY] for v in values]
    assert [e != before for before, e in itertools.pairwise(energy)] == [
        i % 6 == 5 for i in range(23)
    ]  # the costly counters every 30 s, the last reading served in between
    engine = [v.get(f.PROF_GR_ENGINE_ACTIVE) for v in values]
    assert engine[0] is None and all(e is not None for e in engine[1:])  # held between reads
    assert len(set(engine[1:])) == 1 + 7
    samples = [r.devices[0].samples for r in readings]
    assert all(s for s in samples[::3]) and all(s == () for i, s in enumerate(samples) if i % 3)


def test_a_wall_clock_stepped_back_freezes_no_reading(fake_gpus: Callable[..., FakeNvmlLibrary]) -> None:
    """NTP or a resumed VM steps the wall clock back an hour: the cadences count on the monotonic clock,
    so energy, thermal violation and PCIe replays are read again 30 s later as ever."""
    monotonic, wall = Clock(1000.0), Clock(1_750_000_000.0)
    library = FakeNvmlLibrary(
        [FakeGpu(0, utilization=constant(90.0))], clock=monotonic, sleep=monotonic.advance
    )
    reader = GpuReader(Nvml(library), wall_clock=wall, monotonic=monotonic, interval_s=INTERVAL_S)
    first = reader.read().devices[0].values[f.TOTAL_ENERGY]
    wall.advance(-3600.0)
    for _ in range(6):
        monotonic.advance(INTERVAL_S)
        wall.advance(INTERVAL_S)
        values = reader.read().devices[0].values
    assert values[f.TOTAL_ENERGY] > first
    assert library.calls_to("nvmlDeviceGetSamples") >= 3  # nor the sample buffer


def _watched(library: FakeNvmlLibrary, clock: Any) -> tuple[Nvml, Cycle, XidWatcher]:
    """A cycle and the XID thread's watcher, polled by hand: its event set carries MIG events."""
    nvml = Nvml(library)
    watcher = XidWatcher(nvml, XidCounter(), wait_ms=1)
    cycle = Cycle(
        nvml,
        SnapshotBuilder("node-a", version="test"),
        xid_watcher=watcher,
        wall_clock=clock,
        monotonic=clock,
        interval_s=INTERVAL_S,
    )
    return nvml, cycle, watcher


def _gpu_instances(cycle: Cycle) -> list[str]:
    snapshot = cycle.run()
    return sorted(s.labels["GPU_I_ID"] for s in snapshot.series[f.FB_USED] if "GPU_I_ID" in s.labels)


def test_the_mig_layout_is_read_on_nvmls_reconfiguration_events_not_every_cycle(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    library = fake_gpus(FakeGpu(0, mig=MIGS), FakeGpu(1))
    nvml, cycle, watcher = _watched(library, clock)
    assert _gpu_instances(cycle) == ["1", "13"]
    watcher.poll_once()  # the XID thread registers XIDs and MIG reconfigurations
    for _ in range(12):
        clock.advance(INTERVAL_S)
        assert _gpu_instances(cycle) == ["1", "13"]
    # Once a session, and once more after the registration (a change in between would be missed).
    assert library.calls_to("nvmlDeviceGetMigMode") == 1 + 1 + 1  # + GPU 1's NOT_SUPPORTED, once
    library.reconfigure_mig(0, (*MIGS[1:], FakeMig(5, 1, 2 * GIB)))
    watcher.poll_once()  # NVML reports it; the XID wait goes on
    clock.advance(INTERVAL_S)
    assert _gpu_instances(cycle) == ["13", "5"]
    assert library.calls_to("nvmlDeviceGetMigMode") == 4
    nvml.init()  # a new NVML session reads it again
    clock.advance(INTERVAL_S)
    assert _gpu_instances(cycle) == ["13", "5"]
    assert library.calls_to("nvmlDeviceGetMigMode") == 6  # both GPUs: GPU 1 is asked again too


def test_without_mig_events_the_layout_is_read_on_a_slow_cadence_and_xids_still_come(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    library = fake_gpus(FakeGpu(0, mig=MIGS, mig_events=False, xids=((40.0, 31),)))
    nvml, cycle, watcher = _watched(library, clock)
    cycle.run()
    watcher.poll_once()
    library.reconfigure_mig(0, MIGS[:1])
    asked = []
    for _ in range(7):
        clock.advance(INTERVAL_S)
        cycle.run()
        asked.append(library.calls_to("nvmlDeviceGetMigMode"))
    assert asked == [1] * 5 + [2] * 2  # read again 30 s after the last read
    # Until then the removed instance's readings were refused (and left out); not since.
    errors = nvml.error_counts()
    assert {code for _, code in errors} == {"INVALID_ARGUMENT"}
    clock.advance(INTERVAL_S)
    cycle.run()
    assert nvml.error_counts() == errors
    clock.advance(10)
    watcher.poll_once()
    assert watcher._counter.counts() == {(library.gpus[0].uuid, 31): 1}  # the refusal cost no XID


def test_nothing_is_read_that_is_not_served(fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any) -> None:
    """A counters file with the utilization and memory used, in DCGM 4.7's naming: only their calls,
    the sample buffer (the histogram is always served) and the GPU's identity."""
    library = fake_gpus(FakeGpu(0, utilization=constant(60.0)))
    reader = _reader(_running(library, clock), clock, served={m.GPU_UTIL_RATIO, m.FB_USED_BYTES})
    (device,) = _collect(reader, clock, cycles=7)[-1].devices
    assert set(device.values) == {
        f.GPU_UTIL,
        f.MEM_COPY_UTIL,
        f.FB_USED,
        f.FB_FREE,
        f.FB_RESERVED,
        f.FB_TOTAL,
    }
    for call in (
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEncoderUtilization",
        "nvmlDeviceGetDecoderUtilization",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlGpmQueryDeviceSupport",
        "nvmlGpmSampleGet",
    ):
        assert library.calls_to(call) == 0, call
    assert library.calls_to("nvmlDeviceGetSamples") > 0


def test_the_gauge_is_read_for_the_histogram_only_when_it_must_tell_idle(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any
) -> None:
    """Not served, the utilization gauge is still asked where the sample buffer had nothing new: the
    histogram counts that time idle only when the gauge says 0 %."""
    library = fake_gpus(FakeGpu(0, utilization=constant(0.0), samples_when_idle=False))
    reader = _reader(_running(library, clock), clock, served={m.FB_USED})
    histogram = [r.devices[0].samples for r in _collect(reader, clock, cycles=4)]
    # A ring that never held a sample has no known depth: it is read every collection.
    assert histogram == [(), (0,) * 30, (0,) * 30, (0,) * 30]  # 5 s of idle samples, six a second
    assert library.calls_to("nvmlDeviceGetUtilizationRates") == 4  # at the reads that found nothing
    assert library.calls_to("nvmlDeviceGetTemperature") == 0


class CountingProcesses(FakeNvmlLibrary):
    """Counts per-process utilization reads by GPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.per_gpu: dict[int, int] = {}

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, since_us: int) -> list[Any]:
        self.per_gpu[handle.gpu] = self.per_gpu.get(handle.gpu, 0) + 1
        return super().nvmlDeviceGetProcessUtilization(handle, since_us)


def _everyone_shares(_gpu: DeviceIdentity, _mig: MigLabels | None) -> bool:
    return True


def test_per_process_utilization_is_read_only_where_processes_run_on_a_shared_gpu(clock: Any) -> None:
    """The costly call (2.7 ms on an H200) for a shared GPU with processes, on its cadence, the last
    reading served in between; a shared GPU without processes is asked once, for its capability."""
    busy = FakeGpu(0, utilization=constant(80.0), processes=(FakeProcess(41, GIB, 0.5),))
    library = CountingProcesses([busy, FakeGpu(1)], clock=clock, sleep=clock.advance)
    reader = _reader(_running(library, clock), clock)
    readings = _collect(reader, clock, cycles=7, wants_processes=_everyone_shares)
    assert library.per_gpu == {0: 3, 1: 1}  # GPU 0 every 15 s; GPU 1 its capability probe
    shares = [r.devices[0].process_utilization for r in readings]
    assert shares[1] == shares[2] == shares[0] and shares[0]  # served as read
    assert [r.devices[1].process_utilization for r in readings] == [()] * 7  # nothing runs: 0 per pod


def _histogram(
    library: FakeNvmlLibrary, clock: Any, cadences: Cadences, interval_s: float, cycles: int
) -> Any:
    reader = GpuReader(
        _running(library, clock), wall_clock=clock, monotonic=clock, interval_s=interval_s, cadences=cadences
    )
    counted: list[int] = []
    calls = library.calls_to("nvmlDeviceGetSamples")
    for _ in range(cycles):
        counted.extend(reader.read().devices[0].samples or ())
        clock.advance(interval_s)
    counted.extend(reader.read().devices[0].samples or ())  # a last read takes what is left
    return len(counted), sum(counted), library.calls_to("nvmlDeviceGetSamples") - calls


@pytest.mark.parametrize("interval_s", [5.0, 10.0, 15.0])
def test_the_sample_histogram_is_exact_whatever_the_cadence(clock: Any, interval_s: float) -> None:
    """Read every third collection where the driver's ring (120 samples, 20 s) allows it, more often
    where it would wrap in between: the same samples as reading every collection, none lost."""
    gpu = FakeGpu(0, utilization=lambda t: 50 + 40 * ((t // 7) % 2), noise=6.0)
    cycles = round(300 / interval_s)

    def run(cadences: Cadences) -> Any:
        own = Clock(clock.now)
        return _histogram(
            FakeNvmlLibrary([gpu], clock=own, sleep=own.advance), own, cadences, interval_s, cycles
        )

    every, spaced = run(Cadences(samples=1)), run(Cadences())
    assert spaced[:2] == every[:2]
    assert every[0] == pytest.approx(6 * 300 + SAMPLE_BUFFER, abs=2)  # the ring at start, then six a second
    assert spaced[2] == {5.0: 21, 10.0: cycles + 1, 15.0: cycles + 1}[interval_s]


def test_a_ring_that_wrapped_before_it_was_read_is_said(
    fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    library = fake_gpus(FakeGpu(0, utilization=constant(70.0)))
    reader = _reader(_running(library, clock), clock)
    _collect(reader, clock, cycles=2)
    clock.advance(40.0)  # the collection loop stalled: nothing read for 45 s, the ring holds 20
    with caplog.at_level(logging.WARNING, logger="exporter.node_reader"):
        reader.read()
    # Warnings only: caplog keeps every record since the test began, and the first collections' INFO
    # capability line is among them once a command-line test earlier in the run set the root to INFO.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "GPU 0: the driver's utilization-sample buffer (120 samples) wrapped before it was read;"
        " reads are now spaced to fit it"
    ]


def test_the_ring_is_measured_and_the_reads_spaced_to_fit_it() -> None:
    ring = SampleBuffer()
    assert ring.collections(3, INTERVAL_S) == 1  # depth unknown: every collection
    ring.depth, ring.period_us = 120, 1_000_000 // 6  # 20 s
    assert ring.collections(3, INTERVAL_S) == 3
    assert ring.collections(3, 10.0) == 1  # 30 s would wrap it
    ring.period_us = 200_000  # five a second: 24 s
    assert ring.collections(6, INTERVAL_S) == 4
    ring.depth = 71  # a ring not yet full when measured: 14 s
    assert ring.collections(3, INTERVAL_S) == 2


def test_a_cadence_is_due_on_its_slot_and_after_a_clock_went_back() -> None:
    cadence = Cadence(15.0, 2.5)
    assert cadence.due(100.0)
    cadence.done(100.0)
    assert [cadence.due(100.0 + s) for s in (5.0, 10.0, 14.9, 15.0)] == [False, False, True, True]
    assert cadence.due(90.0)  # a clock that went backwards: due, never frozen


def test_the_driver_time_is_served_per_call(fake_gpus: Callable[..., FakeNvmlLibrary], clock: Any) -> None:
    ticks = iter(range(10_000))
    library = fake_gpus(FakeGpu(0))
    nvml = Nvml(library, timer=lambda: next(ticks) / 10_000)  # every call takes 0.1 ms on this timer
    cycle = Cycle(nvml, SnapshotBuilder("node-a", version="test"), wall_clock=clock, monotonic=clock)
    snapshot = cycle.run()
    body = Exposition(lambda: snapshot).render()[0].decode()
    (family,) = [x for x in text_string_to_metric_families(body) if x.name == "gpu_exporter_nvml_seconds"]
    assert family.type == "counter"
    seconds = {s.labels["call"]: s.value for s in family.samples if s.name.endswith("_total")}
    assert seconds["nvmlDeviceGetSamples"] == pytest.approx(0.0001)
    assert seconds["nvmlDeviceGetTemperature"] == pytest.approx(0.0001)
    assert sum(seconds.values()) == pytest.approx(0.0001 * library.calls)  # every call, under its name
