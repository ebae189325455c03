"""``--metric-names``: the legacy naming (dcgm-exporter up to 4.8) and DCGM 4.7's (dcgm-exporter 4.9),
read back from the encoded exposition of real collection cycles over the fake NVML, the way Prometheus
stores them; and ``--hostname-label``, and a counters file in either naming."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from prometheus_client.samples import Sample

from cli.exporter import build_exporter, from_args
from common import metric_names as m
from exporter import fields as f
from exporter.attribution import EMPTY_VIEW
from exporter.counters_file import parse_collectors
from exporter.cycle import Cycle
from exporter.exposition import Exposition, encode
from exporter.naming import Naming
from exporter.nvml import Nvml
from exporter.readings import DeviceIdentity, DeviceReading, NodeReading
from exporter.snapshot import Counters, Series, Snapshot, SnapshotBuilder
from harness.exposition import stored_samples
from simulation.fake_nvml import GIB, FakeNvmlLibrary
from simulation.gpu_scenarios import build_scenario

HOST = "node-a"
DRIVER = "550.54.15"
LEGACY = Naming("legacy", "Hostname")
CURRENT = Naming("dcgm-4.7", "hostname")


class _Clock:
    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _run(name: str, naming: Naming, cycles: int = 2, **kwargs: Any) -> list[Sample]:
    """The exposition after ``cycles`` collections 5 s apart (GPM ratios need two), on a clock of its
    own: the same scenario gives the same readings to every naming."""
    clock = _Clock()
    library: FakeNvmlLibrary = build_scenario(name, clock=clock, sleep=clock.advance, **kwargs)
    builder = SnapshotBuilder(HOST, version="test", naming=naming)
    cycle = Cycle(Nvml(library), builder, wall_clock=clock, monotonic=clock)
    snapshot = None
    for step in range(cycles):
        clock.advance(0 if step == 0 else 5)
        snapshot = cycle.run()
    return stored_samples(Exposition(lambda: snapshot, naming.families()).render()[0].decode())


def _as_4_7(sample: Sample) -> Sample:
    """What DCGM 4.7's naming must serve for a legacy sample: the new name, the value in the new
    unit, the renamed labels; the exporter's own families keep name and value."""
    labels = dict(sample.labels)
    if "Hostname" in labels:
        labels["hostname"] = labels.pop("Hostname")
    if m.DRIVER_VERSION_LABEL in labels:
        labels[m.DRIVER_VERSION_LABEL_4_7] = labels.pop(m.DRIVER_VERSION_LABEL)
    renamed = m.BY_LEGACY.get(sample.name)
    if renamed is None:
        return sample._replace(labels=labels)
    return sample._replace(name=renamed.current, labels=labels, value=sample.value * renamed.to_current)


def _key(sample: Sample) -> tuple[str, tuple[tuple[str, str], ...]]:
    return sample.name, tuple(sorted(sample.labels.items()))


@pytest.mark.parametrize("name", ["busy", "mig", "throttled", "lost-gpu"])
def test_dcgm_4_7_serves_each_legacy_sample_renamed_in_its_new_unit(name: str) -> None:
    # The frame-buffer capacity is served by default in DCGM 4.7's naming only, the clock-event
    # reasons' deprecated pre-3.3 name in the legacy one (tested below); a collection's wall time is
    # the one reading that differs between two runs.
    skip = {m.FB_CAPACITY_BYTES, m.CLOCK_THROTTLE_REASONS, m.COLLECT_DURATION, m.NVML_SECONDS}
    current = {_key(s): s.value for s in _run(name, CURRENT) if s.name not in skip}
    expected = {_key(t): t.value for t in map(_as_4_7, _run(name, LEGACY)) if t.name not in skip}
    assert len({name for name, _ in expected} & {r.current for r in m.DCGM_4_7}) >= 8  # renames seen
    assert current.keys() == expected.keys()
    for key, value in expected.items():
        assert current[key] == pytest.approx(value, rel=1e-12), key
    renamed = {r.legacy for r in m.DCGM_4_7}
    assert not renamed & {s.name for s in _run(name, CURRENT)}, "no legacy name of a renamed field"


def test_dcgm_4_7_values_in_base_units() -> None:
    legacy = {_key(s): s.value for s in _run("busy", LEGACY)}
    current = {_key(s): s.value for s in _run("busy", CURRENT)}
    gpu0 = {
        "gpu": "0",
        "UUID": "GPU-5eed0000-0000-4000-8000-000000000000",
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
    }
    old = {**gpu0, "Hostname": HOST, "DCGM_FI_DRIVER_VERSION": DRIVER}
    new = {**gpu0, "hostname": HOST, "DCGM_FI_SYSTEM_DRIVER_VERSION": DRIVER}

    def pair(before: str, after: str) -> tuple[float, float]:
        return legacy[before, tuple(sorted(old.items()))], current[after, tuple(sorted(new.items()))]

    util, ratio = pair("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO")
    assert ratio == util / 100 and 0.9 < ratio <= 1.0  # percent → ratio 0–1
    assert pair("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES") == (74 * 1024, 74 * GIB)  # MiB → B
    assert pair("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ") == (1980, 1.98e9)  # MHz → Hz
    energy_mj, energy_j = pair("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL")
    assert energy_j == energy_mj / 1000 and energy_j > 0  # mJ → J
    assert pair("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL") == (1940, 1.94e9)
    watts = pair("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS")
    assert watts[0] == watts[1] == pytest.approx(70 + 630 * 0.97)  # watts stay watts
    kept = pair("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")  # kept its name
    assert kept == (0, 0)
    ratios = pair("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO")
    assert ratios[0] == ratios[1] == pytest.approx(0.97)  # already a ratio
    xid = {**new, "err_code": "0", "err_msg": "No Error"}
    assert current["DCGM_FI_DEV_XID_ERROR", tuple(sorted(xid.items()))] == 0
    # Our own families: the same names, units and values; the node and driver labels as the naming's.
    assert current["gpu_up", tuple(sorted(new.items()))] == 1
    assert current["gpu_xid_errors_total", tuple(sorted(new.items()))] == 0


def test_each_family_is_typed_and_described_in_its_naming() -> None:
    text = encode(_snapshot_of_every_family(), CURRENT.families()).decode()
    for legacy, spec in f.SPECS_4_7.items():
        assert f"# TYPE {spec.name} {f.SPECS[legacy].type}\n" in text
        assert f"\n{legacy}{{" not in text and f"# TYPE {legacy} " not in text
    assert "# TYPE DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL counter\n" in text
    assert "# TYPE DCGM_FI_DEV_XID_ERROR gauge\n" in text
    assert "# HELP DCGM_FI_DEV_FB_USED_BYTES Framebuffer memory used (in bytes).\n" in text
    # Fields that kept their name keep it, and the exporter's own families are the same.
    for kept in (f.POWER_VIOLATION, f.ECC_SBE_VOL_TOTAL, f.CLOCKS_EVENT_REASONS, f.PROF_PCIE_TX_BYTES):
        assert f"# TYPE {kept} " in text
    assert "# TYPE gpu_xid_errors_total counter\n" in text


def _snapshot_of_every_family() -> Snapshot:
    labels = {"gpu": "0", "UUID": "GPU-1"}
    series = {name: (Series(labels, 57.0),) for name in f.SPECS if f.SPECS[name].type != "histogram"}
    return Snapshot(taken_at=0.0, ok=True, duration_s=0.0, series=MappingProxyType(series))


def test_a_percent_becomes_the_nearest_ratio_not_a_rounding_artefact() -> None:
    text = encode(_snapshot_of_every_family(), CURRENT.families()).decode()
    assert (
        'DCGM_FI_DEV_GPU_UTIL_RATIO{UUID="GPU-1",gpu="0"} 0.57\n' in text
    )  # 57 * 0.01 is 0.5700000000000001
    assert 'DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL{UUID="GPU-1",gpu="0"} 0.057\n' in text
    assert 'DCGM_FI_DEV_FB_USED_BYTES{UUID="GPU-1",gpu="0"} 5.9768832e+07\n' in text


def _reading(values: dict[str, float]) -> NodeReading:
    gpu = DeviceIdentity(0, "GPU-a", "NVIDIA H200", "00000000:18:00.0")
    return NodeReading(True, DRIVER, ((gpu, True),), (DeviceReading(gpu, None, values, None),))


def _encoded(naming: Naming, reading: NodeReading, served: frozenset[str] | None = None) -> str:
    snapshot = SnapshotBuilder(HOST, version="test", naming=naming).build(
        reading, EMPTY_VIEW, {}, Counters(), taken_at=0.0, duration_s=0.0
    )
    return encode(snapshot, naming.families(served)).decode()


def test_the_frame_buffer_capacity_is_served_by_default_in_dcgm_4_7_only() -> None:
    reading = _reading({f.FB_USED: 1024.0, f.FB_TOTAL: 143771.0})
    assert "\nDCGM_FI_DEV_FB_CAPACITY_BYTES{" in _encoded(CURRENT, reading)
    capacity = [s for s in stored_samples(_encoded(CURRENT, reading)) if s.name == m.FB_CAPACITY_BYTES]
    assert [s.value for s in capacity] == [143771 * 2**20]
    legacy = _encoded(LEGACY, reading)
    assert "DCGM_FI_DEV_FB_TOTAL" not in legacy and "DCGM_FI_DEV_FB_USED{" in legacy
    # A counters file asks for it in the legacy naming, by either name.
    for listed in ("DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_CAPACITY_BYTES"):
        served = parse_collectors(f"{listed}, gauge, capacity\n", "counters.csv").served
        assert "\nDCGM_FI_DEV_FB_TOTAL{" in _encoded(LEGACY, reading, served)


def test_the_deprecated_clock_event_name_is_served_by_default_in_the_legacy_naming_only() -> None:
    # Field 112 is DCGM_FI_DEV_CLOCKS_EVENT_REASONS since DCGM 3.3; the older name stays a deprecated
    # alias that legacy dashboards read. DCGM 4.7's naming serves the current name alone.
    reading = _reading({f.CLOCKS_EVENT_REASONS: 4.0, f.CLOCK_THROTTLE_REASONS: 4.0})
    legacy, current = _encoded(LEGACY, reading), _encoded(CURRENT, reading)
    assert (
        "\nDCGM_FI_DEV_CLOCK_THROTTLE_REASONS{" in legacy and "\nDCGM_FI_DEV_CLOCKS_EVENT_REASONS{" in legacy
    )
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in current
    assert "\nDCGM_FI_DEV_CLOCKS_EVENT_REASONS{" in current


@pytest.mark.parametrize(
    ("naming", "present", "absent"),
    [
        pytest.param(Naming("legacy", "Hostname"), "Hostname", "hostname", id="legacy-Hostname"),
        pytest.param(Naming("legacy", "hostname"), "hostname", "Hostname", id="legacy-dcgm-exporter-4.8.3"),
        pytest.param(Naming("dcgm-4.7", "hostname"), "hostname", "Hostname", id="dcgm-4.7"),
        pytest.param(Naming("dcgm-4.7", None), None, "ostname", id="no-hostname"),
    ],
)
def test_the_node_label_is_the_namings_or_none(naming: Naming, present: str | None, absent: str) -> None:
    samples = _run("lost-gpu", naming, cycles=1)
    per_gpu = [s for s in samples if "gpu" in s.labels]
    assert {s.name for s in per_gpu} >= {"gpu_up", "gpu_exporter_capability", "gpu_xid_errors_total"}
    for sample in per_gpu:
        assert not any(absent in label for label in sample.labels if label != present), sample
        if present is not None:
            assert sample.labels[present] == HOST, sample


COUNTERS_LEGACY = """\
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
DCGM_FI_DRIVER_VERSION, label, Driver Version
"""
COUNTERS_4_7 = """\
DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, GPU utilization (ratio).
DCGM_FI_DEV_FB_USED_BYTES, gauge, Framebuffer memory used (in B).
DCGM_FI_DEV_XID_ERROR, gauge, Value of the last XID error encountered.
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
DCGM_FI_SYSTEM_DRIVER_VERSION, label, Driver Version
"""
COUNTERS_MIXED = """\
DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, GPU utilization (ratio).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_XID_ERROR, gauge, Value of the last XID error encountered.
DCGM_FI_DEV_XID_ERRORS, gauge, the same field under its legacy name
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.
"""


@pytest.mark.parametrize(
    "text", [COUNTERS_LEGACY, COUNTERS_4_7, COUNTERS_MIXED], ids=["legacy", "4.7", "mixed"]
)
def test_a_counters_file_in_either_naming_selects_the_same_families(text: str) -> None:
    chosen = parse_collectors(text, "counters.csv")
    dcgm = {name for name in chosen.served if name.startswith("DCGM_")}
    assert dcgm == {f.GPU_UTIL, f.FB_USED, f.XID_ERRORS, f.ECC_DBE_VOL_TOTAL}
    assert chosen.skipped == ()  # the driver-version label is served on every series anyway


@pytest.mark.parametrize(("naming", "text"), [("dcgm-4.7", COUNTERS_LEGACY), ("legacy", COUNTERS_4_7)])
def test_the_exporter_serves_a_counters_files_families_in_its_own_naming(
    tmp_path: Path, naming: str, text: str
) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text(text)
    argv = ["--listen", "127.0.0.1:0", "--no-kubernetes", "--simulate", "busy", "-f", str(counters)]
    exporter = build_exporter(from_args([*argv, "--metric-names", naming]))
    try:
        exporter.loop.run_once()
        samples = stored_samples(exporter.exposition.render()[0].decode())
    finally:
        exporter.server.stop()
    dcgm = [s for s in samples if s.name.startswith("DCGM_")]
    names = (f.GPU_UTIL, f.FB_USED, f.XID_ERRORS, f.ECC_DBE_VOL_TOTAL)
    assert {s.name for s in dcgm} == (
        {m.current_name(n) for n in names} if naming == "dcgm-4.7" else set(names)
    )
    labels = (
        {"hostname", m.DRIVER_VERSION_LABEL_4_7}
        if naming == "dcgm-4.7"
        else {"Hostname", m.DRIVER_VERSION_LABEL}
    )
    assert all(labels <= s.labels.keys() for s in dcgm)
