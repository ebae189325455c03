"""Collection cycles through the production path (fake only at the NVML boundary), read back from the
encoded exposition through prometheus_client's parser, the way Prometheus would see them."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.samples import Sample

from exporter.cadence import Cadences
from exporter.cgroups import PodUidResolver
from exporter.cycle import Cycle
from exporter.exposition import Exposition
from exporter.nvml import SLOW_FIELDS_EVERY_S, Nvml
from exporter.podresources import PodResourcesClient
from exporter.pods import PodViewRefresher
from exporter.snapshot import Snapshot, SnapshotBuilder
from exporter.xid import XidCounter, XidWatcher
from exporter.xid_catalogue import describe
from harness.exposition import stored_samples
from simulation.fake_nvml import GIB, FakeGpu, FakeMig, FakeNvmlLibrary
from simulation.gpu_profiles import constant

HOST = "node-a"
BUCKETS = ("5.0", "10.0", "25.0", "50.0", "75.0", "90.0", "95.0", "+Inf")


class Harness:
    """A cycle, the registry serving its snapshots, and a clock to step."""

    def __init__(self, library: FakeNvmlLibrary, clock: Any, **cycle_kwargs: Any) -> None:
        self.library = library
        self.clock = clock
        self.nvml = Nvml(library)
        self.xids = XidCounter()
        self.watcher = XidWatcher(self.nvml, self.xids, wait_ms=10)
        self.cycle = Cycle(
            self.nvml,
            SnapshotBuilder(HOST, version="test"),
            xid_counter=self.xids,
            xid_watcher=self.watcher,
            wall_clock=clock,
            monotonic=clock,
            **cycle_kwargs,
        )
        self.snapshot: Snapshot | None = None
        self.exposition = Exposition(lambda: self.snapshot)

    def run(self, advance: float = 0.0) -> Snapshot:
        self.clock.advance(advance)
        self.snapshot = self.cycle.run()
        return self.snapshot

    def labels(self, index: int, **extra: str) -> dict[str, str]:
        gpu = self.library.gpus[index]
        return {
            "gpu": str(index),
            "UUID": gpu.uuid,
            "pci_bus_id": gpu.pci_bus_id,
            "device": f"nvidia{index}",
            "modelName": gpu.name,
            "Hostname": HOST,
            "DCGM_FI_DRIVER_VERSION": "550.54.15",
            **extra,
        }

    def text(self) -> str:
        return self.exposition.render()[0].decode()

    def samples(self) -> list[Sample]:
        return stored_samples(self.text())

    def value(self, name: str, labels: dict[str, str]) -> float | None:
        found = [s.value for s in self.samples() if s.name == name and s.labels == labels]
        assert len(found) <= 1, f"{name}{labels} appears {len(found)} times"
        return found[0] if found else None

    def series(self, name: str) -> list[dict[str, str]]:
        return [s.labels for s in self.samples() if s.name == name]


@pytest.fixture
def harness(clock: Any) -> Callable[..., Harness]:
    return lambda library, **kwargs: Harness(library, clock, **kwargs)


def test_busy_gpus_in_dcgm_units(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    h = harness(scenario("busy"))
    h.run()
    gpu0 = h.labels(0)
    assert h.value("DCGM_FI_DEV_GPU_UTIL", gpu0) == pytest.approx(97, abs=2)
    assert h.value("DCGM_FI_DEV_FB_USED", gpu0) == 74 * 1024  # MiB
    # v2 memory info, as DCGM and nvidia-smi read it: the driver's reservation is neither used nor free.
    assert h.value("DCGM_FI_DEV_FB_RESERVED", gpu0) == 527
    assert h.value("DCGM_FI_DEV_FB_FREE", gpu0) == 81559 - 74 * 1024 - 527
    assert h.value("DCGM_FI_DEV_POWER_USAGE", gpu0) == pytest.approx(70 + 630 * 0.97)  # W
    assert h.value("DCGM_FI_DEV_POWER_USAGE_INSTANT", gpu0) == pytest.approx(70 + 630 * 0.97)
    assert h.value("DCGM_FI_DEV_MEMORY_TEMP", gpu0) == h.value("DCGM_FI_DEV_GPU_TEMP", gpu0) + 6
    assert h.value("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu0) == 0
    assert h.value("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu0) == 0
    assert h.value("DCGM_FI_DEV_SM_CLOCK", gpu0) == 1980
    assert h.value("DCGM_FI_DEV_XID_ERRORS", {**gpu0, "err_code": "0", "err_msg": describe(0)}) == 0
    assert h.value("gpu_up", gpu0) == 1
    assert h.value("DCGM_FI_PROF_SM_ACTIVE", gpu0) is None  # GPM needs two samples
    assert h.value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu0) == 0  # a rate: none from one reading
    h.run(advance=5)
    assert h.value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu0) == pytest.approx(0.97)
    assert h.value("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gpu0) == pytest.approx(0.97 * 0.6)
    assert h.value("DCGM_FI_PROF_PCIE_TX_BYTES", gpu0) == pytest.approx(800 * 0.97 * 2**20)  # B/s
    # DCGM's NVLink figure: (TX + RX KiB since the last reading) / s / 1000; the fake sends 970 MB/s each way.
    assert h.value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu0) == 1940
    assert h.value("gpu_exporter_build_info", {"version": "test"}) == 1
    assert h.value("gpu_exporter_last_collect_timestamp_seconds", {}) == h.clock.now


def test_nvlink_bandwidth_is_dcgms_rate_and_restarts_after_an_outage(
    fake_gpus: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    h = harness(fake_gpus(FakeGpu(0, utilization=constant(50.0), lost_between=(10.0, 20.0))))
    rates = [h.value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", h.labels(0)) for _ in [h.run()]]
    for _ in range(5):
        h.run(advance=5)
        rates.append(h.value("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", h.labels(0)))
    # 500 MB/s each way: 1,000,000 KiB/s / 1000. Down at 10 and 15 s; back at 20 s with no reading
    # before it to take a rate from (DCGM's first reading is 0 too), then the rate again.
    assert rates == [0, 1000, None, None, 0, 1000]


def test_pcie_bytes_are_whole_bytes_per_second_as_dcgm_stores_them(
    fake_gpus: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    h = harness(fake_gpus(FakeGpu(0, utilization=constant(33.3))))
    h.run()
    h.run(advance=5)
    # GPM reports MiB/s (266.4 here); DCGM multiplies by 2^20 into an int64 field, truncating.
    assert h.value("DCGM_FI_PROF_PCIE_TX_BYTES", h.labels(0)) == math.floor(800 * (33.3 / 100) * 2**20)


def test_unsupported_readings_are_absent_never_nan(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    library = scenario("idle")  # A100s: no GPM
    library.fail("nvmlDeviceGetTemperature", "NOT_SUPPORTED")
    h = harness(library)
    h.run()
    h.run(advance=5)
    assert h.series("DCGM_FI_DEV_GPU_TEMP") == []
    assert h.series("DCGM_FI_PROF_SM_ACTIVE") == []
    values = [s.value for s in h.samples()]
    assert not any(math.isnan(v) for v in values)
    assert "# TYPE DCGM_FI_DEV_GPU_TEMP" not in h.text()
    assert (
        h.value(
            "gpu_exporter_nvml_errors_total", {"call": "nvmlDeviceGetTemperature", "code": "NOT_SUPPORTED"}
        )
        is None
    )


def test_the_slow_counters_are_read_every_30_s_and_served_in_between(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    # Energy, thermal violation and PCIe replays cost the driver milliseconds each (docs/exporter.md):
    # read on the first cycle and then every SLOW_FIELDS_EVERY_S, the last reading served between.
    h = harness(scenario("throttled"))
    h.run()
    hot, braked = h.labels(0), h.labels(1)
    first = h.value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", hot)
    assert first is not None
    for _ in range(5):
        h.run(advance=5)
        assert h.value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", hot) == first  # not due: served as read
        assert h.value("DCGM_FI_DEV_THERMAL_VIOLATION", hot) == 0
    # The cheap counters move every cycle.
    assert h.value("DCGM_FI_DEV_POWER_VIOLATION", braked) == pytest.approx(0.4 * 25 * 1e9)
    h.run(advance=5)  # 30 s since the first reading: due
    assert h.value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", hot) > first
    assert h.value("DCGM_FI_DEV_THERMAL_VIOLATION", hot) == pytest.approx(0.3 * 30 * 1e9)


def test_throttling_in_dcgm_units(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    h = harness(scenario("throttled"))
    h.run()
    h.run(advance=SLOW_FIELDS_EVERY_S)  # the thermal counter is one of the slow fields
    hot, braked, capped = h.labels(0), h.labels(1), h.labels(2)
    assert h.value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", hot) == 0x20 | 0x40
    assert h.value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", braked) == 0x80
    assert h.value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", capped) == 0x4
    assert h.value("DCGM_FI_DEV_THERMAL_VIOLATION", hot) == pytest.approx(0.3 * SLOW_FIELDS_EVERY_S * 1e9)
    assert h.value("DCGM_FI_DEV_POWER_VIOLATION", braked) == pytest.approx(0.4 * SLOW_FIELDS_EVERY_S * 1e9)
    assert h.value("DCGM_FI_DEV_THERMAL_VIOLATION", braked) == 0
    assert h.value("DCGM_FI_DEV_GPU_TEMP", hot) == 89
    assert h.value("DCGM_FI_DEV_SM_CLOCK", hot) == 1410
    exposition = h.text()
    # Typed as dcgm-exporter types it, under DCGM's name (no _total); field 112 under both names.
    assert "# TYPE DCGM_FI_DEV_THERMAL_VIOLATION counter" in exposition
    assert "# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge" in exposition
    assert h.value("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", hot) == 0x20 | 0x40


def test_throttling_is_read_for_whole_gpus_only(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    h = harness(scenario("mig", gpus=1))
    h.run()
    for name in ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_POWER_VIOLATION"):
        assert [s["gpu"] for s in h.series(name)] == ["0"]
        assert not any("GPU_I_ID" in s for s in h.series(name))


def test_sample_histogram_accumulates_between_cycles(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    h = harness(scenario("busy"))
    h.run()
    first = h.value("gpu_utilization_samples_percent_count", h.labels(0))
    h.run(advance=5)
    gpu0 = h.labels(0)
    count = h.value("gpu_utilization_samples_percent_count", gpu0)
    assert first is not None and count == first + 30  # six samples a second, none counted twice
    buckets = [h.value("gpu_utilization_samples_percent_bucket", {**gpu0, "le": le}) for le in BUCKETS]
    assert buckets == sorted(buckets)  # cumulative
    assert buckets[-1] == count
    assert buckets[BUCKETS.index("90.0")] == 0  # every sample of a busy GPU is above 95 %
    total = h.value("gpu_utilization_samples_percent_sum", gpu0)
    assert total == pytest.approx(97 * count, rel=0.02)


def test_sawtooth_shows_in_the_histogram_not_in_the_gauge(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    h = harness(scenario("sawtooth", interval_s=5.0))
    gauges = []
    for _ in range(6):
        h.run(advance=5)
        gauges.append(h.value("DCGM_FI_DEV_GPU_UTIL", h.labels(0)))
    assert all(g is not None and g <= 10 for g in gauges)  # every cycle lands on the idle phase
    gpu0 = h.labels(0)
    idle = h.value("gpu_utilization_samples_percent_bucket", {**gpu0, "le": "10.0"}) or 0
    below_busy = h.value("gpu_utilization_samples_percent_bucket", {**gpu0, "le": "90.0"}) or 0
    count = h.value("gpu_utilization_samples_percent_count", gpu0) or 0
    assert idle == below_busy  # nothing in between: bimodal
    assert 0.25 < idle / count < 0.35
    assert (count - below_busy) / count > 0.65


def test_lost_gpu_goes_down_alone_and_comes_back(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    h = harness(scenario("lost-gpu", interval_s=1.0))
    up: list[float | None] = []
    gpu0_util: list[float | None] = []
    gpu1_util: list[float | None] = []
    gpu0_prof: list[float | None] = []
    gpu1_prof: list[float | None] = []
    gpu1_xid: list[float | None] = []
    gpu1_xids: list[float | None] = []
    counts = []
    for step in range(15):
        snapshot = h.run(advance=0 if step == 0 else 1)
        h.watcher.poll_once()
        assert snapshot.ok  # one GPU down is not a failed collection
        up.append(h.value("gpu_up", h.labels(1)))
        gpu0_util.append(h.value("DCGM_FI_DEV_GPU_UTIL", h.labels(0)))
        gpu0_prof.append(h.value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", h.labels(0)))
        gpu1_prof.append(h.value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", h.labels(1)))
        gpu1_util.append(h.value("DCGM_FI_DEV_GPU_UTIL", h.labels(1)))
        counts.append(h.value("gpu_utilization_samples_percent_count", h.labels(1)))
        gpu1_xid.append(h.value("DCGM_FI_DEV_XID_ERRORS", h.labels(1, err_code="79", err_msg=describe(79))))
        gpu1_xids.append(h.value("gpu_xid_errors_total", h.labels(1)))
    assert up == [1.0] * 4 + [0.0] * 8 + [1.0] * 3
    # XID 79 arrives as the GPU falls off (counted after cycle 4): its last-XID gauge stays served while
    # the GPU is down, so an alert on `DCGM_FI_DEV_XID_ERRORS == 79` sees it, and after it returns.
    assert gpu1_xid == [None] * 5 + [79.0] * 10
    # The GPU's XID total is served at 0 from its first collection, so increase() counts XID 79.
    assert gpu1_xids == [0.0] * 5 + [1.0] * 10
    assert all(v is not None for v in gpu0_util)  # the others keep flowing
    assert [v is None for v in gpu1_util] == [False] * 4 + [True] * 8 + [False] * 3
    before, after = counts[3], counts[12]
    assert before is not None and after is not None and after > before  # the histogram resumes, no reset
    assert h.value("gpu_xid_errors_total", {**h.labels(1), "xid": "79"}) == 1
    # Its handle is kept for the session, so the cycle's first reading of it is what fails.
    lost = h.value(
        "gpu_exporter_nvml_errors_total", {"call": "nvmlDeviceGetUtilizationRates", "code": "GPU_IS_LOST"}
    )
    assert lost == 8  # once per cycle while lost
    assert h.library.calls_to("nvmlDeviceGetHandleByIndex") == 4  # once per GPU and NVML session
    # GPU_IS_LOST concerns that GPU only: NVML is not re-initialised, so the healthy GPUs keep their
    # GPM state (every profiling series after the first pair of samples). The XID set is rebuilt
    # without the lost GPU and with it again on its return, the abandoned ones freed: one stays live.
    assert h.library.calls_to("nvmlInit") == 1
    assert all(v is not None for v in gpu0_prof[1:])
    assert h.library.calls_to("nvmlEventSetCreate") == 3
    assert h.library.live_event_sets == 1
    # The lost GPU's own GPM samples were dropped: its ratios restart with a fresh pair rather than
    # spanning the outage (one cycle back without them, then present again).
    assert [p is None for p in gpu1_prof[11:]] == [True, True, False, False]


def test_an_idle_gpu_without_samples_counts_as_idle_time(
    fake_gpus: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    """nvmlDeviceGetSamples is reported to answer NOT_FOUND while a GPU sits idle (no samples are
    recorded). That time is idle, not missing: it must land in the low buckets, or the starvation
    signal would miss exactly the stalls."""
    phases = {0: 97.0, 1: 0.0, 2: 97.0}  # busy, then 10 s idle without samples, then busy again
    gpu = FakeGpu(0, samples_when_idle=False, utilization=lambda t: phases[min(max(int(t // 10), 0), 2)])
    h = harness(fake_gpus(gpu))
    h.run()
    labels = h.labels(0)
    for _ in range(2):
        h.run(advance=5)
    busy_count = h.value("gpu_utilization_samples_percent_count", labels) or 0
    h.run(advance=5)  # t = 15 and 19.5: the idle stretch, NVML answers NOT_FOUND
    h.run(advance=4.5)
    idle = h.value("gpu_utilization_samples_percent_bucket", {**labels, "le": "5.0"}) or 0
    assert idle == pytest.approx(58, abs=6)  # ~9.7 s since the last busy sample, six a second
    h.run(advance=5.5)
    h.run(advance=5)
    total = h.value("gpu_utilization_samples_percent_count", labels) or 0
    assert total - busy_count == pytest.approx(120, abs=12)  # idle and busy again, nothing twice
    assert h.value("gpu_utilization_samples_percent_bucket", {**labels, "le": "5.0"}) == idle


def test_no_samples_on_a_busy_gpu_invents_no_idle_time(
    fake_gpus: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    library = fake_gpus(FakeGpu(0, utilization=constant(97.0)))
    h = harness(library)
    h.run()
    library.fail("nvmlDeviceGetSamples", "NOT_FOUND")
    h.run(advance=5)
    assert h.value("gpu_utilization_samples_percent_bucket", {**h.labels(0), "le": "5.0"}) == 0


def test_handles_are_looked_up_again_when_the_gpu_count_changes(
    fake_gpus: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    """Handles are kept for the NVML session, but a removed GPU (nvmlDeviceRemoveGpu) renumbers the
    others and voids their handles: index 0 is then the former GPU 1, under its own UUID."""
    library = fake_gpus(FakeGpu(0, utilization=constant(10.0)), FakeGpu(1, utilization=constant(80.0)))
    h = harness(library)
    h.run()
    library.gpus = library.gpus[1:]
    h.run(advance=5)
    assert h.value("DCGM_FI_DEV_GPU_UTIL", h.labels(0)) == pytest.approx(80, abs=1)


def _idle_gpu(**kwargs: Any) -> FakeGpu:
    """A GPU that sits idle and, as reported of real ones, records no samples meanwhile (NOT_FOUND)."""
    return FakeGpu(0, samples_when_idle=False, utilization=constant(0.0), **kwargs)


def _idle_samples(h: Harness) -> float:
    return h.value("gpu_utilization_samples_percent_bucket", {**h.labels(0), "le": "5.0"}) or 0


def test_an_outage_of_an_idle_gpu_is_not_counted_as_idle_time(
    fake_gpus: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    """Off the bus from t=10 to t=40 and answering NOT_FOUND with a 0 % gauge on its return: the 30 s
    nobody saw are not idle samples. Only the observed intervals count (0-5, 40-45, 45-50: 30 each)."""
    h = harness(fake_gpus(_idle_gpu(lost_between=(10.0, 40.0))))
    up = [h.run(advance=0 if step == 0 else 5) and h.value("gpu_up", h.labels(0)) for step in range(11)]
    assert up == [1.0] * 2 + [0.0] * 6 + [1.0] * 3
    assert _idle_samples(h) == pytest.approx(90, abs=2)  # not 300: the outage would add 180


def test_failed_collections_are_not_counted_as_idle_time(
    fake_gpus: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    library = fake_gpus(_idle_gpu())
    h = harness(library)
    h.run()
    h.run(advance=5)
    assert _idle_samples(h) == pytest.approx(30, abs=1)
    library.fail("nvmlDeviceGetCount", "DRIVER_NOT_LOADED", times=1)
    library.fail("nvmlInit", "DRIVER_NOT_LOADED", times=3)
    assert [h.run(advance=5).ok for _ in range(4)] == [False] * 4
    assert h.run(advance=5).ok  # back after 25 s without NVML: counting restarts now
    h.run(advance=5)
    assert _idle_samples(h) == pytest.approx(60, abs=2)


def test_a_failed_sample_read_leaves_its_gap_uncounted(
    fake_gpus: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    library = fake_gpus(_idle_gpu())
    h = harness(library)
    h.run()
    h.run(advance=5)
    library.fail("nvmlDeviceGetSamples", "UNKNOWN", times=3)
    for _ in range(3):
        h.run(advance=5)
    assert h.value("gpu_up", h.labels(0)) == 1  # the GPU stayed up; only its sample buffer went unread
    h.run(advance=5)
    h.run(advance=5)
    assert _idle_samples(h) == pytest.approx(60, abs=2)  # 0-5 and the last interval, not the 15 s unread


def test_a_lost_gpu_gets_no_samples_for_its_outage(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    """The driver records nothing while a GPU is off the bus: on its return the histogram takes the
    samples recorded before the loss and after the return, none for the 8 s in between."""
    h = harness(scenario("lost-gpu", interval_s=1.0), interval_s=1.0, cadences=Cadences(samples=1))
    counts = []
    for step in range(14):
        h.run(advance=0 if step == 0 else 1)
        counts.append(h.value("gpu_utilization_samples_percent_count", h.labels(1)))
    before, after = counts[3], counts[13]
    assert before is not None and after is not None
    assert after - before == pytest.approx(6 * 2, abs=2)  # t=3..4 and t=12..13, six samples a second
    assert h.value("gpu_utilization_samples_percent_bucket", {**h.labels(1), "le": "5.0"}) == 0


def test_nvml_gone_fails_the_collection_and_keeps_gpus_known(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    library = scenario("busy", gpus=2)
    h = harness(library)
    assert h.run().ok
    library.fail("nvmlDeviceGetCount", "DRIVER_NOT_LOADED", times=1)
    library.fail("nvmlInit", "DRIVER_NOT_LOADED", times=1)
    failed = h.run(advance=5)
    assert not failed.ok
    assert [h.value("gpu_up", h.labels(i)) for i in (0, 1)] == [0, 0]
    assert h.series("DCGM_FI_DEV_GPU_UTIL") == []
    assert not h.run(advance=5).ok  # init fails once more
    assert h.run(advance=5).ok
    assert h.value("gpu_up", h.labels(0)) == 1


def test_mig_instances_carry_instance_labels(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    h = harness(scenario("mig", gpus=2))
    h.run()
    h.run(advance=5)
    instance = h.labels(0, GPU_I_ID="13", GPU_I_PROFILE="1g.10gb")
    assert h.value("DCGM_FI_DEV_FB_USED", instance) == 8 * 1024
    assert h.value("DCGM_FI_PROF_GR_ENGINE_ACTIVE", instance) == pytest.approx(0.4)
    assert h.value("DCGM_FI_DEV_GPU_UTIL", instance) is None  # NVML has no utilization for MIG
    mig_series = [s for s in h.series("DCGM_FI_DEV_FB_USED") if "GPU_I_ID" in s]
    assert sorted((s["GPU_I_ID"], s["GPU_I_PROFILE"]) for s in mig_series) == [
        ("1", "3g.40gb"),
        ("13", "1g.10gb"),
        ("5", "2g.20gb"),
    ]
    assert not [s for s in h.series("gpu_utilization_samples_percent_count") if s["gpu"] == "0"]
    assert h.value("DCGM_FI_DEV_GPU_UTIL", h.labels(1)) is not None
    # A MIG GPU's memory is served per instance only, as by dcgm-exporter: a sum or a count of devices
    # over DCGM_FI_DEV_FB_USED takes each slice once and the GPU not again on top.
    assert [s for s in h.series("DCGM_FI_DEV_FB_USED") if s["gpu"] == "0" and "GPU_I_ID" not in s] == []
    assert h.value("DCGM_FI_DEV_FB_USED", h.labels(1)) is not None
    assert h.value("DCGM_FI_DEV_GPU_TEMP", h.labels(0)) is not None  # whole-GPU readings stay whole


def test_mig_devices_named_by_index_are_attributed(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness], kubelet: Any
) -> None:
    """The NVIDIA device plugin's index strategy names a MIG device "<gpu>:<slot>", the slot being
    its index on the GPU (nvmlDeviceGetMigDeviceHandleByIndex), not its GPU instance id."""
    library = scenario("mig", gpus=1)
    kubelet.assign(("ml", "infer-0", "main", "nvidia.com/mig-1g.10gb", ["0:2"]))
    pods = PodViewRefresher(PodResourcesClient(kubelet.socket_path), pod_log_dir=None)
    assert pods.refresh()
    h = harness(library, pods=pods)
    h.run()
    slot2 = h.labels(
        0, GPU_I_ID="13", GPU_I_PROFILE="1g.10gb", pod="infer-0", namespace="ml", container="main"
    )
    assert h.value("DCGM_FI_DEV_FB_USED", slot2) == 8 * 1024
    holders = {s.get("pod") for s in h.series("DCGM_FI_DEV_FB_USED") if s.get("GPU_I_ID") == "1"}
    assert holders == {None}  # the other instances stay unattributed


POD_UIDS = {
    4101: "0a0a0a0a-0000-4000-8000-000000000001",
    4102: "0a0a0a0a-0000-4000-8000-000000000002",
    4103: "0a0a0a0a-0000-4000-8000-000000000003",
}


@pytest.fixture
def node_files(tmp_path: Path) -> tuple[Path, Path]:
    """A host /proc with the shared scenario's processes, and the kubelet's pod log directory."""
    proc, logs = tmp_path / "proc", tmp_path / "pods"
    for index, (pid, uid) in enumerate(POD_UIDS.items()):
        (proc / str(pid)).mkdir(parents=True)
        slice_ = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
        (proc / str(pid) / "cgroup").write_text(
            f"0::/kubepods.slice/{slice_}/cri-containerd-{pid:064x}.scope\n"
        )
        (logs / f"team-a_worker-{index}_{uid}" / "main").mkdir(parents=True)
    (logs / "team-b_solo_0b0b0b0b-0000-4000-8000-000000000001" / "main").mkdir(parents=True)
    return proc, logs


def test_shared_gpu_gets_per_pod_usage_and_exclusive_gpu_gets_pod_labels(
    scenario: Callable[..., FakeNvmlLibrary],
    harness: Callable[..., Harness],
    kubelet: Any,
    node_files: tuple[Path, Path],
) -> None:
    library = scenario("shared", gpus=2)
    shared, solo = library.gpus[0].uuid, library.gpus[1].uuid
    kubelet.assign(
        *[("team-a", f"worker-{r}", "main", "nvidia.com/gpu.shared", [f"{shared}::{r}"]) for r in range(3)],
        ("team-b", "solo", "main", "nvidia.com/gpu", [solo]),
    )
    proc, logs = node_files
    pods = PodViewRefresher(PodResourcesClient(kubelet.socket_path), pod_log_dir=logs)
    assert pods.refresh()
    h = harness(library, pods=pods, pid_resolver=PodUidResolver(proc))
    h.run()

    def pod(name: str, vgpu: str) -> dict[str, str]:
        return h.labels(0, pod=name, namespace="team-a", container="main", vgpu=vgpu)

    util, memory = "gpu_pod_sm_utilization_percent", "gpu_pod_memory_used_bytes"
    assert h.value(util, pod("worker-0", "0")) == pytest.approx(48, abs=2)  # 60 % of 80 %
    assert h.value(util, pod("worker-1", "1")) == pytest.approx(32, abs=2)
    assert h.value(util, pod("worker-2", "2")) == 0  # holds memory, computes nothing
    assert h.value(memory, pod("worker-0", "0")) == 20 * 1024**3
    assert h.value(memory, pod("worker-2", "2")) == 2 * 1024**3
    assert h.value("DCGM_FI_DEV_GPU_UTIL", h.labels(0)) == pytest.approx(80, abs=2)  # whole GPU, unattributed
    assert h.value("DCGM_FI_DEV_POWER_USAGE", pod("worker-0", "0")) is None  # device-level series stay whole

    # `sum by (gpu)` counts the shared GPU once: one DCGM series per family for it, and the pods'
    # shares add up to no more than the GPU's own numbers.
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"):
        assert [s for s in h.series(name) if s["gpu"] == "0"] == [h.labels(0)], name
    gpu_util = h.value("DCGM_FI_DEV_GPU_UTIL", h.labels(0))
    pods_util = sum(h.value(util, pod(f"worker-{r}", str(r))) or 0 for r in range(3))
    assert pods_util <= gpu_util + 2
    pods_mib = sum(h.value(memory, pod(f"worker-{r}", str(r))) or 0 for r in range(3)) / 1024**2
    assert pods_mib <= h.value("DCGM_FI_DEV_FB_USED", h.labels(0))

    solo_labels = h.labels(1, pod="solo", namespace="team-b", container="main")
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "gpu_utilization_samples_percent_count",
    ):
        assert h.value(name, solo_labels) is not None, name
    assert h.value("gpu_up", h.labels(1)) == 1  # GPU-level identity, no pod labels
    assert h.value("gpu_exporter_kubelet_errors_total", {}) == 0


def test_kubelet_trouble_means_no_pod_labels_and_a_counted_error(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness], kubelet: Any
) -> None:
    library = scenario("busy", gpus=1)
    kubelet.assign(("team-b", "solo", "main", "nvidia.com/gpu", [library.gpus[0].uuid]))
    kubelet.hanging = True
    pods = PodViewRefresher(PodResourcesClient(kubelet.socket_path, timeout_s=0.2), pod_log_dir=None)
    assert not pods.refresh()
    h = harness(library, pods=pods, pid_resolver=PodUidResolver(Path("/nonexistent")))
    h.run()
    assert h.value("DCGM_FI_DEV_GPU_UTIL", h.labels(0)) is not None
    assert not [s for s in h.series("DCGM_FI_DEV_GPU_UTIL") if "pod" in s]
    assert h.value("gpu_exporter_kubelet_errors_total", {}) == 1


def test_mig_instance_held_by_a_pod_gets_its_labels(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness], kubelet: Any
) -> None:
    library = scenario("mig", gpus=1)
    kubelet.assign(("serving", "infer-0", "model", "nvidia.com/mig-1g.10gb", [library.gpus[0].mig_uuid(2)]))
    pods = PodViewRefresher(PodResourcesClient(kubelet.socket_path), pod_log_dir=None)
    assert pods.refresh()
    h = harness(library, pods=pods, pid_resolver=PodUidResolver(Path("/nonexistent")))
    h.run()
    held = h.labels(
        0, GPU_I_ID="13", GPU_I_PROFILE="1g.10gb", pod="infer-0", namespace="serving", container="model"
    )
    assert h.value("DCGM_FI_DEV_FB_USED", held) == 8 * 1024
    assert h.value("DCGM_FI_DEV_FB_USED", h.labels(0, GPU_I_ID="1", GPU_I_PROFILE="3g.40gb")) is not None


def test_driver_gone_right_after_init_is_a_failed_collection_not_a_crash(
    scenario: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    library = scenario("busy", gpus=1)
    library.fail("nvmlSystemGetDriverVersion", "DRIVER_NOT_LOADED", times=1)
    h = harness(library)
    first = h.run()
    assert not first.ok
    assert "DRIVER_NOT_LOADED" in (first.error or "")
    assert h.run(advance=5).ok


def test_nvml_is_never_reinitialised_unless_the_xid_thread_was_paused_for_it(
    fake_gpus: Callable[..., FakeNvmlLibrary],
    harness: Callable[..., Harness],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The XID thread may report a lost driver (and so ask for a re-init) just after a cycle decided
    no pause was needed: that cycle must not shut NVML down under the thread's event wait."""
    h = harness(fake_gpus(_idle_gpu()))
    h.run()
    inits_unpaused: list[bool] = []
    real_init = Nvml.init

    def init(self: Nvml) -> None:
        inits_unpaused.append(not h.watcher._pause_requested)
        real_init(self)

    answers = iter([False])  # the cycle's look: nothing to do; every later look: re-init wanted

    monkeypatch.setattr(Nvml, "init", init)
    monkeypatch.setattr(Nvml, "needs_init", property(lambda self: next(answers, True)))
    h.run(advance=5)
    assert inits_unpaused == []  # left for the next cycle, which pauses the thread first
    h.run(advance=5)
    assert inits_unpaused == [False]


def test_mig_instances_a_reconfiguration_removed_keep_no_gpm_buffers(
    fake_gpus: Callable[..., FakeNvmlLibrary], harness: Callable[..., Harness]
) -> None:
    instances = (FakeMig(1, 0, GIB), FakeMig(2, 0, GIB), FakeMig(3, 0, GIB))
    library = fake_gpus(FakeGpu(0, mig=instances))
    h = harness(library)
    for step in range(3):
        h.run(advance=5 if step else 0)
        h.watcher.poll_once()  # the XID thread's event set also carries MIG reconfigurations
    before = library.live_gpm_samples  # two buffers each: the GPU and its three instances
    library.reconfigure_mig(0, instances[:1])
    h.watcher.poll_once()  # NVML reports the reconfiguration: the layout is read again
    h.run(advance=5)
    h.run(advance=5)
    assert library.live_gpm_samples == before - 2 * 2
