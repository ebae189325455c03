"""Exporter overhead: collection-cycle CPU time, /metrics latency against its floor, memory.

Setup: 8 simulated GPUs (Hopper-like: GPM on), each time-sliced between 8 pods (64 pods, 64 processes,
per-process attribution through cgroup files and a pod log directory on disk). The NVML binding is a
zero-cost fake: every call returns a pre-built object, so the figures are the exporter's own overhead.

Scrape latency is measured over HTTP (keep-alive, as Prometheus scrapes) and compared, in the same run
and interleaved, with the floor: ``generate_latest()`` over a registry whose collector returns the same
samples pre-built. Two variants: a new snapshot before every scrape (the production case: collections
every 5 s, scrapes every 15-30 s, so each scrape renders a snapshot for the first time) and repeated
scrapes of one snapshot.

Run: ``python benchmarks/exporter_bench.py [--scrapes 1000] [--cycles 10000]``
"""

from __future__ import annotations

import argparse
import gc
import http.client
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.app import freeze_startup_objects  # noqa: E402
from exporter.attribution import (  # noqa: E402
    ContainerDevices,
    PodName,
    PodView,
    allocations,
)
from exporter.cgroups import PodUidResolver  # noqa: E402
from exporter.collector import SnapshotCollector, render  # noqa: E402
from exporter.cycle import Cycle  # noqa: E402
from exporter.http import MetricsServer  # noqa: E402
from exporter.nvml import Nvml, nvml_error  # noqa: E402
from exporter.snapshot import Snapshot, SnapshotBuilder  # noqa: E402
from exporter.xid import XidCounter  # noqa: E402

GPUS = 8
PODS_PER_GPU = 8
COLLECTION_INTERVAL_S = 5.0
SAMPLES_PER_INTERVAL = 30  # NVML keeps ~6 utilization samples per second


class _Handle:
    """Hashable, like the ctypes pointers the real binding hands out."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class ZeroCostNvml:
    """Pre-built answers to every call the adapter makes; only the sample timestamps move."""

    def __init__(self, gpus: int, processes_per_gpu: int) -> None:
        self.now_us = 1_700_000_000_000_000
        self._handles = [_Handle(i) for i in range(gpus)]
        self._uuids = [f"GPU-00000000-0000-4000-8000-{i:012d}" for i in range(gpus)]
        self._pci = [SimpleNamespace(busId=f"00000000:{0x18 + i:02X}:00.0".encode()) for i in range(gpus)]
        self._util = SimpleNamespace(gpu=57, memory=21)
        self._memory = SimpleNamespace(total=85520809984, used=42949672960, free=42571137024)
        value = SimpleNamespace(uiVal=412000, ullVal=123456789)
        self._fields = [
            SimpleNamespace(fieldId=186, nvmlReturn=0, valueType=1, value=value),
            SimpleNamespace(fieldId=83, nvmlReturn=0, valueType=3, value=value),
            SimpleNamespace(fieldId=94, nvmlReturn=0, valueType=3, value=value),
            SimpleNamespace(fieldId=74, nvmlReturn=0, valueType=3, value=value),
            SimpleNamespace(fieldId=75, nvmlReturn=0, valueType=3, value=value),
        ]
        self._procs = [
            [
                SimpleNamespace(pid=10_000 + g * processes_per_gpu + p, usedGpuMemory=4 << 30)
                for p in range(processes_per_gpu)
            ]
            for g in range(gpus)
        ]
        self._gpm_support = SimpleNamespace(isSupportedDevice=1)

    def advance(self, seconds: float) -> None:
        self.now_us += int(seconds * 1_000_000)

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self._handles)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return self._handles[i]

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return self._uuids[h.index]

    def nvmlDeviceGetName(self, h: Any) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        return self._pci[h.index]

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        return self._util

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        return self._memory

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        return 64

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        return 1980

    def nvmlDeviceGetEncoderUtilization(self, h: Any) -> list[int]:
        return [0, 167000]

    def nvmlDeviceGetDecoderUtilization(self, h: Any) -> list[int]:
        return [0, 167000]

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[int]) -> list[Any]:
        return self._fields

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return 0x4

    def nvmlDeviceGetSamples(self, h: Any, kind: int, since_us: int) -> tuple[int, list[Any]]:
        step = int(COLLECTION_INTERVAL_S * 1_000_000 / SAMPLES_PER_INTERVAL)
        first = self.now_us - SAMPLES_PER_INTERVAL * step
        return 1, [
            SimpleNamespace(timeStamp=first + k * step, sampleValue=SimpleNamespace(uiVal=(k * 37) % 101))
            for k in range(1, SAMPLES_PER_INTERVAL + 1)
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        return self._procs[h.index]

    def nvmlDeviceGetProcessUtilization(self, h: Any, since_us: int) -> list[Any]:
        return [
            SimpleNamespace(pid=p.pid, timeStamp=self.now_us, smUtil=9, memUtil=3)
            for p in self._procs[h.index]
        ]

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:
        raise nvml_error("NOT_SUPPORTED")  # a new exception each time, as the binding raises

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        return self._gpm_support

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace()

    def nvmlGpmSampleFree(self, sample: Any) -> None: ...
    def nvmlGpmSampleGet(self, h: Any, sample: Any) -> Any:
        return sample

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=42.0) for _ in range(5)]

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        return request


class StaticPods:
    """A pod view that never changes (the kubelet refresh runs on its own thread in production)."""

    errors = 0

    def __init__(self, view: PodView) -> None:
        self._view = view

    def view(self) -> PodView:
        return self._view


class Prebuilt(Collector):
    def __init__(self, snapshot: Snapshot, collector: SnapshotCollector) -> None:
        self._families = list(collector.collect())

    def collect(self) -> Any:
        return self._families


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(tmp: Path) -> tuple[Cycle, ZeroCostNvml]:
    library = ZeroCostNvml(GPUS, PODS_PER_GPU)
    devices, names = [], {}
    proc_root = tmp / "proc"
    for g in range(GPUS):
        for r in range(PODS_PER_GPU):
            pid = 10_000 + g * PODS_PER_GPU + r
            uid = f"{g:08x}-0000-4000-8000-{r:012x}"
            name = f"trainer-{g}-{r}"
            devices.append(
                ContainerDevices("ml", name, "main", "nvidia.com/gpu.shared", (f"{library._uuids[g]}::{r}",))
            )
            names[uid] = PodName("ml", name)
            (proc_root / str(pid)).mkdir(parents=True)
            scope = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{pid:064x}.scope"
            (proc_root / str(pid) / "cgroup").write_text(
                f"0::/kubepods.slice/kubepods-burstable.slice/{scope}\n"
            )
    view = PodView(allocations(devices), names)
    clock = [1_700_000_000.0]
    cycle = Cycle(
        Nvml(library),
        SnapshotBuilder("bench-node", version="bench"),
        pods=StaticPods(view),
        pid_resolver=PodUidResolver(proc_root),
        xid_counter=XidCounter(),
        wall_clock=lambda: clock[0],
    )
    return cycle, library


def quantiles(values: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return statistics.median(values), cuts[98], statistics.fmean(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=10_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cycle, library = build(Path(tmp))
        latest: list[Snapshot] = []

        def one_cycle() -> Snapshot:
            library.advance(COLLECTION_INTERVAL_S)
            snapshot = cycle.run()
            latest[:] = [snapshot]
            return snapshot

        for _ in range(50):  # warm-up: caches, first GPM sample, histograms
            one_cycle()
        freeze_startup_objects()  # as Exporter.start() does
        rss_start = rss_mib()

        # 1. Collection-cycle CPU time.
        cpu = []
        for _ in range(1000):
            started = time.thread_time()
            one_cycle()
            cpu.append((time.thread_time() - started) * 1000)

        # 2. /metrics latency against the floor, interleaved.
        registry = CollectorRegistry(auto_describe=False)
        collector = SnapshotCollector(lambda: latest[0] if latest else None)
        registry.register(collector)
        server = MetricsServer(registry, lambda: (True, "ok"), "127.0.0.1", 0)
        server.start()
        conn = http.client.HTTPConnection("127.0.0.1", server.port)
        snapshot = latest[0]
        samples = sum(len(s) for _, s in render(snapshot))
        floor_registry = CollectorRegistry(auto_describe=False)
        floor_registry.register(Prebuilt(snapshot, SnapshotCollector(lambda: snapshot)))
        body_bytes = len(generate_latest(floor_registry))

        def scrape() -> float:
            started = time.perf_counter()
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            return (time.perf_counter() - started) * 1000

        def floor() -> float:
            started = time.perf_counter()
            generate_latest(floor_registry)
            return (time.perf_counter() - started) * 1000

        for _ in range(50):
            scrape()
            floor()
        fresh, same, floor_ms = [], [], []
        for _ in range(args.scrapes):
            one_cycle()  # not timed: a new snapshot, rendered for the first time by the next scrape
            fresh.append(scrape())
            same.append(scrape())
            floor_ms.append(floor())
        conn.close()
        server.stop()

        # 3. Memory over many cycles.
        rss_before = rss_mib()
        for _ in range(args.cycles):
            one_cycle()
        gc.collect()
        rss_after = rss_mib()

    p50_cpu, p99_cpu, mean_cpu = quantiles(cpu)
    f50, f99, _ = quantiles(floor_ms)
    n50, n99, _ = quantiles(fresh)
    s50, s99, _ = quantiles(same)
    print(f"exporter benchmark: {GPUS} GPUs, {GPUS * PODS_PER_GPU} pods (time-sliced), zero-cost NVML fake")
    print(f"python {sys.version.split()[0]}; exposition: {samples} samples, {body_bytes} bytes")
    print()
    print("| measure | p50 | p99 | target | ratio to target |")
    print("| --- | --- | --- | --- | --- |")
    print(
        f"| collection cycle, CPU (mean {mean_cpu:.2f} ms) | {p50_cpu:.2f} ms | {p99_cpu:.2f} ms "
        f"| ≤ 5 ms | p99 {p99_cpu / 5:.2f} of target |"
    )
    print(f"| floor: generate_latest(), pre-built | {f50:.2f} ms | {f99:.2f} ms | | |")
    for label, p50, p99 in (("new snapshot each scrape", n50, n99), ("same snapshot", s50, s99)):
        print(
            f"| /metrics over HTTP, {label} | {p50:.2f} ms | {p99:.2f} ms | p99 ≤ 1.5 × floor "
            f"| p50 {p50 / f50:.2f} ×, p99 {p99 / f99:.2f} × floor ({p99 / f99 / 1.5:.2f} of target) |"
        )
    print(f"| RSS after warm-up | {rss_start:.1f} MiB | | ≤ 60 MB | {rss_start * 1.048576 / 60:.2f} |")
    growth = rss_after - rss_before
    print(
        f"| RSS growth over {args.cycles} cycles | {growth:+.2f} MiB | | ≤ 2 MB "
        f"| {max(growth, 0) * 1.048576 / 2:.2f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
