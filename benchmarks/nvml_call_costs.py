"""What each NVML call of a collection cycle costs on a real GPU: the figures exporter_bench.py charges.

Runs the exporter's own collection cycle (the production ``Nvml`` wrapper and reader, no Kubernetes)
against the real driver, with the binding wrapped so that every call is timed, wall clock and the
calling thread's CPU clock. Prints, per NVML function, the calls per cycle and the p50 / p99 / mean
cost, then the cycle's own wall and CPU p50 / p99; ``--json FILE`` writes the same for
``exporter_bench.py --call-costs FILE``. Every reading is taken every cycle here (each costly one too,
whatever its cadence in production: ``--production-cadences`` runs the exporter's own), so each call's
cost is measured. It also measures the depth of the driver's utilization-sample ring: the samples it
answers when asked from timestamp 0, and the time they span.

Needs a GPU and its driver; on a machine without one it stops with NVML's reason.

Run: ``python benchmarks/nvml_call_costs.py [--cycles 300] [--interval 0.1] [--json costs.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pynvml  # noqa: E402

from common.version import VERSION  # noqa: E402
from exporter.attribution import ContainerDevices, PodView, allocations  # noqa: E402
from exporter.cadence import Cadences  # noqa: E402
from exporter.cgroups import PodUidResolver  # noqa: E402
from exporter.cycle import Cycle  # noqa: E402
from exporter.device_reader import FIELD_IDS  # noqa: E402
from exporter.nvml import Nvml, NvmlUnavailable  # noqa: E402
from exporter.snapshot import SnapshotBuilder  # noqa: E402
from simulation.gpu_scenarios import build_scenario  # noqa: E402


class TimedBinding:
    """The real binding, with every ``nvml*`` function timed on each call (errors included)."""

    def __init__(self, library: Any) -> None:
        self._library = library
        self.wall_us: dict[str, list[float]] = defaultdict(list)
        self.cpu_us: dict[str, list[float]] = defaultdict(list)
        self.failures: dict[str, int] = defaultdict(int)
        for name in dir(library):
            if name.startswith("nvml") and callable(getattr(library, name)):
                setattr(self, name, self._timed(name, getattr(library, name)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._library, name)  # constants and structs

    def _timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        wall, cpu = self.wall_us[name], self.cpu_us[name]

        def call(*args: Any, **kwargs: Any) -> Any:
            started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            except pynvml.NVMLError:
                self.failures[name] += 1
                raise
            finally:
                cpu.append((time.thread_time_ns() - started_cpu) / 1000)
                wall.append((time.perf_counter_ns() - started) / 1000)

        return call

    def reset(self) -> None:
        for values in (*self.wall_us.values(), *self.cpu_us.values()):
            values.clear()
        self.failures.clear()


class SharedPods:
    """Every GPU time-sliced between two pods, so the cycle also asks for per-process usage, as on a
    node of shared GPUs (the calls a whole-GPU node skips)."""

    errors = 0

    def __init__(self, uuids: list[str]) -> None:
        devices = [
            ContainerDevices("bench", f"pod-{i}-{r}", "main", "nvidia.com/gpu.shared", (f"{uuid}::{r}",))
            for i, uuid in enumerate(uuids)
            for r in range(2)
        ]
        self._view = PodView(allocations(devices), {})

    def view(self) -> PodView:
        return self._view


def field_costs(library: Any, handle: Any, repeats: int = 20) -> dict[str, float]:
    """Each field of the exporter's batch asked alone: p50 µs by field id (the batch's cost is about
    their sum; exporter_bench.py charges a batch the fields it asks for)."""
    out = {}
    for field in FIELD_IDS:
        times = []
        for _ in range(repeats):
            started = time.perf_counter_ns()
            with contextlib.suppress(pynvml.NVMLError):
                library.nvmlDeviceGetFieldValues(handle, [field])
            times.append((time.perf_counter_ns() - started) / 1000)
        out[str(field if isinstance(field, int) else field[0])] = round(statistics.median(times), 2)
    return out


def sample_ring(library: Any, handle: Any) -> dict[str, float]:
    """The driver's utilization-sample ring as it answers from timestamp 0 (all it holds): how many
    samples, the time they span and the mean period. Read after the cycles, so it has filled."""
    _, samples = library.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    stamps = sorted(int(s.timeStamp) for s in samples)
    span_s = (stamps[-1] - stamps[0]) / 1e6 if len(stamps) > 1 else 0.0
    period_ms = span_s * 1000 / (len(stamps) - 1) if len(stamps) > 1 else float("nan")
    return {"depth": len(stamps), "span_s": round(span_s, 3), "period_ms": round(period_ms, 2)}


PROCESS_UTILIZATION = "nvmlDeviceGetProcessUtilization"
#: Every reading every cycle, so that each call's cost is measured.
EVERY_CYCLE = Cadences(gpm=1, samples=1, process_utilization=1, slow_fields=1, mig_fallback=1)


def p50_p99(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    return statistics.median(values), statistics.quantiles(values, n=100, method="inclusive")[98]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=300, help="cycles timed after ten warm-up cycles")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between cycles")
    parser.add_argument(
        "--whole", action="store_true", help="whole GPUs: no per-process calls (default: time-sliced)"
    )
    parser.add_argument("--json", type=Path, help="write the figures here for exporter_bench.py")
    parser.add_argument(
        "--production-cadences",
        action="store_true",
        help="the exporter's own cadences (costly readings every few cycles), not every reading each cycle",
    )
    parser.add_argument(
        "--simulate",
        metavar="SCENARIO",
        help="a fake GPU scenario (gpu-exporter --simulate's) instead of the driver: checks the tool runs",
    )
    args = parser.parse_args(argv)

    library = pynvml if args.simulate is None else build_scenario(args.simulate, interval_s=args.interval)
    binding = TimedBinding(library)
    nvml = Nvml(binding)
    try:
        nvml.init()
    except NvmlUnavailable as exc:
        print(f"nvml_call_costs: no GPU to measure: {exc}", file=sys.stderr)
        return 2
    uuids = [
        library.nvmlDeviceGetUUID(library.nvmlDeviceGetHandleByIndex(i))
        for i in range(library.nvmlDeviceGetCount())
    ]
    pods = None if args.whole else SharedPods(uuids)
    # Processes are read only where they can be attributed: the host's /proc, as the DaemonSet mounts it.
    resolver = None if pods is None else PodUidResolver(Path("/proc"))
    cycle = Cycle(
        nvml,
        SnapshotBuilder("cost-node", version=VERSION),
        pods=pods,
        pid_resolver=resolver,
        interval_s=args.interval,
        cadences=Cadences() if args.production_cadences else EVERY_CYCLE,
    )
    for _ in range(10):  # first GPM sample, handles, capability probes
        cycle.run()
        time.sleep(args.interval)
    binding.reset()
    wall_ms, cpu_ms = [], []
    for _ in range(args.cycles):
        started, started_cpu = time.perf_counter(), time.thread_time()
        cycle.run()
        cpu_ms.append((time.thread_time() - started_cpu) * 1000)
        wall_ms.append((time.perf_counter() - started) * 1000)
        time.sleep(args.interval)

    handle = library.nvmlDeviceGetHandleByIndex(0)
    per_cycle = {name: len(wall) / args.cycles for name, wall in binding.wall_us.items()}
    if not binding.wall_us.get(PROCESS_UTILIZATION):
        # Asked only of a shared GPU where processes run: timed apart on a GPU without any.
        for _ in range(20):
            with contextlib.suppress(pynvml.NVMLError):
                binding.nvmlDeviceGetProcessUtilization(handle, 0)
        per_cycle[PROCESS_UTILIZATION] = 0.0
    field_us = field_costs(library, handle)
    ring = sample_ring(library, handle)
    nvml_version = getattr(library, "nvmlSystemGetNVMLVersion", None)
    device = {
        "name": library.nvmlDeviceGetName(handle),
        "gpus": library.nvmlDeviceGetCount(),
        "driver": library.nvmlSystemGetDriverVersion(),
        "nvml": "simulated" if nvml_version is None else nvml_version(),
        "binding": getattr(pynvml, "__version__", "unknown"),
        "python": sys.version.split()[0],
    }
    calls = {}
    for name, wall in sorted(binding.wall_us.items()):
        if not wall:
            continue
        w50, w99 = p50_p99(wall)
        calls[name] = {
            "per_cycle": per_cycle.get(name, 0.0),
            "wall_p50_us": round(w50, 2),
            "wall_p99_us": round(w99, 2),
            "wall_mean_us": round(statistics.fmean(wall), 2),
            "cpu_mean_us": round(statistics.fmean(binding.cpu_us[name]), 2),
            "failures": binding.failures.get(name, 0),
        }
    nvml.shutdown()  # after the figures: its frees are not a cycle's calls
    c50, c99 = p50_p99(wall_ms)
    u50, u99 = p50_p99(cpu_ms)
    cycle_figures = {
        "cycles": args.cycles,
        "interval_s": args.interval,
        "shared": not args.whole,
        "wall_p50_ms": round(c50, 3),
        "wall_p99_ms": round(c99, 3),
        "cpu_p50_ms": round(u50, 3),
        "cpu_p99_ms": round(u99, 3),
    }
    print(
        f"{device['name']} ×{device['gpus']}, driver {device['driver']}, NVML {device['nvml']}, "
        f"binding {device['binding']}, python {device['python']}"
    )
    shape = "whole GPUs" if args.whole else "each GPU time-sliced between two pods"
    print(f"{args.cycles} cycles, {args.interval} s apart, {shape}")
    print()
    print(
        "| NVML function | calls / cycle | wall p50 µs | wall p99 µs | wall mean µs | CPU mean µs | failed |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, figures in calls.items():
        print(
            f"| {name} | {figures['per_cycle']:.2f} | {figures['wall_p50_us']} | {figures['wall_p99_us']} "
            f"| {figures['wall_mean_us']} | {figures['cpu_mean_us']} | {figures['failures']} |"
        )
    print(f"| whole cycle (ms) | | {c50:.3f} | {c99:.3f} | | CPU p50 {u50:.3f}, p99 {u99:.3f} | |")
    print()
    print("each field alone, p50 µs:", ", ".join(f"{k} {v}" for k, v in field_us.items()))
    print(
        f"utilization-sample ring: {ring['depth']} samples over {ring['span_s']} s "
        f"(one every {ring['period_ms']} ms)"
    )
    if args.json is not None:
        document = {
            "device": device,
            "calls": calls,
            "cycle": cycle_figures,
            "field_us": field_us,
            "sample_ring": ring,
        }
        args.json.write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
