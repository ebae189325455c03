"""What each NVML call of a collection cycle costs on a real GPU: the figures exporter_bench.py charges.

Runs the exporter's own collection cycle (the production ``Nvml`` wrapper and reader, no Kubernetes)
against the real driver, with the binding wrapped so that every call is timed, wall clock and the
calling thread's CPU clock. Prints, per NVML function, the calls per cycle and the p50 / p99 / mean
cost, then the cycle's own wall and CPU p50 / p99; ``--json FILE`` writes the same for
``exporter_bench.py --call-costs FILE``.

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
from exporter.cgroups import PodUidResolver  # noqa: E402
from exporter.cycle import Cycle  # noqa: E402
from exporter.nvml import FIELD_IDS, SLOW_FIELD_CYCLES, Nvml, NvmlUnavailable  # noqa: E402
from exporter.snapshot import SnapshotBuilder  # noqa: E402


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


def field_costs(handle: Any, repeats: int = 20) -> dict[str, float]:
    """Each field of the exporter's batch asked alone: p50 µs by field id (the batch's cost is about
    their sum; exporter_bench.py charges a batch the fields it asks for)."""
    out = {}
    for field in FIELD_IDS:
        times = []
        for _ in range(repeats):
            started = time.perf_counter_ns()
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlDeviceGetFieldValues(handle, [field])
            times.append((time.perf_counter_ns() - started) / 1000)
        out[str(field if isinstance(field, int) else field[0])] = round(statistics.median(times), 2)
    return out


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
    args = parser.parse_args(argv)

    binding = TimedBinding(pynvml)
    nvml = Nvml(binding)
    try:
        nvml.init()
    except NvmlUnavailable as exc:
        print(f"nvml_call_costs: no GPU to measure: {exc}", file=sys.stderr)
        return 2
    uuids = [
        pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
        for i in range(pynvml.nvmlDeviceGetCount())
    ]
    pods = None if args.whole else SharedPods(uuids)
    # Processes are read only where they can be attributed: the host's /proc, as the DaemonSet mounts it.
    resolver = None if pods is None else PodUidResolver(Path("/proc"))
    cycle = Cycle(
        nvml,
        SnapshotBuilder("cost-node", version=VERSION),
        pods=pods,
        pid_resolver=resolver,
        # The slow counters every SLOW_FIELD_CYCLES cycles, as the exporter at any interval.
        slow_fields_every_s=SLOW_FIELD_CYCLES * args.interval,
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

    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    field_us = field_costs(handle)
    device = {
        "name": pynvml.nvmlDeviceGetName(handle),
        "gpus": pynvml.nvmlDeviceGetCount(),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "nvml": pynvml.nvmlSystemGetNVMLVersion(),
        "binding": getattr(pynvml, "__version__", "unknown"),
        "python": sys.version.split()[0],
    }
    calls = {}
    for name, wall in sorted(binding.wall_us.items()):
        if not wall:
            continue
        w50, w99 = p50_p99(wall)
        calls[name] = {
            "per_cycle": len(wall) / args.cycles,
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
    if args.json is not None:
        document = {"device": device, "calls": calls, "cycle": cycle_figures, "field_us": field_us}
        args.json.write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
