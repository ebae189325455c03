"""The exporter against a real GPU, compared with ``nvidia-smi`` on the same device.

Marked ``gpu``: skipped where no NVIDIA driver answers (no ``nvidia-smi``, or NVML cannot initialise),
so the suite passes on machines without a GPU. On a GPU node: ``pytest -m gpu tests/exporter``. The
busy-GPU checks need a CUDA load from a package that ships one (CuPy or PyTorch); without either
they are skipped, and the rest still runs.

Tolerances, and why:

* memory used / total: ±64 MiB (allocations of other processes move between the two reads); our
  used + free + reserved equals nvidia-smi's total within 1 MiB;
* power: ±15 % or ±15 W, whichever is larger (both average over about a second, not in step);
* temperature: ±3 °C; clocks: ±10 % (boost moves between the two reads);
* utilization: both at most 10 % on an idle GPU, both at least 50 % under the CUDA load;
* the sample histogram: idle, at least 80 % of the new samples at or below 10 %; busy, at most 20 %.
"""

from __future__ import annotations

import gc
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.app import Exporter
from exporter.config import ExporterConfig
from exporter.nvml import Nvml, NvmlUnavailable
from harness.exposition import stored_samples

pytestmark = pytest.mark.gpu

QUERY = "index,uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm,clocks.mem"


def _nvidia_smi() -> str:
    path = shutil.which("nvidia-smi")
    if path is None:
        pytest.skip("no nvidia-smi: not a GPU node")
    nvml = Nvml()
    try:
        nvml.init()
    except NvmlUnavailable as exc:
        pytest.skip(f"NVML unavailable: {exc}")
    finally:
        nvml.shutdown()
    return path


def smi(query: str = QUERY) -> list[dict[str, str]]:
    out = subprocess.run(
        [_nvidia_smi(), f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    keys = query.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=True)) for line in out.splitlines()]


def number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    _nvidia_smi()
    config = ExporterConfig(
        listen_host="127.0.0.1",
        listen_port=0,
        interval_s=1.0,
        kubelet_socket=None,
        hostname="gpu-test",
        simulate=None,
        log_format="text",
        pod_log_dir=Path("/var/log/pods"),
        proc_root=Path("/proc"),
    )
    running = Exporter(config)
    running.loop.run_once()
    try:
        yield running
    finally:
        running.server.stop()
        running.cycle.shutdown()
        gc.unfreeze()


def values(exporter: Exporter) -> dict[tuple[str, str], dict[str, float]]:
    """(family, UUID) → {label-set key: value}: the whole-GPU series keyed by UUID."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for sample in stored_samples(exporter.exposition.render()[0].decode()):
        if "UUID" in sample.labels and "GPU_I_ID" not in sample.labels:
            key = sample.labels.get("le", "")
            out.setdefault((sample.name, sample.labels["UUID"]), {})[key] = sample.value
    return out


def one(table: dict[tuple[str, str], dict[str, float]], name: str, uuid: str) -> float | None:
    found = table.get((name, uuid))
    return None if not found else next(iter(found.values()))


def close(ours: float | None, theirs: float | None, absolute: float, relative: float = 0.0) -> bool:
    if ours is None or theirs is None:
        return ours is None and theirs is None
    return abs(ours - theirs) <= max(absolute, relative * abs(theirs))


def test_readings_match_nvidia_smi(exporter: Exporter) -> None:
    time.sleep(1.2)
    exporter.loop.run_once()
    table = values(exporter)
    body = exporter.exposition.render()[0].decode()
    mig_gpus = {s.labels["UUID"] for s in stored_samples(body) if "GPU_I_ID" in s.labels}
    for gpu in smi():
        uuid = gpu["uuid"]
        where = f"GPU {gpu['index']} ({uuid})"
        used, total = number(gpu["memory.used"]), number(gpu["memory.total"])
        fb_used = one(table, "DCGM_FI_DEV_FB_USED", uuid)
        if uuid in mig_gpus:  # its memory is served per instance (test_mig_instances_match_nvidia_smi)
            assert fb_used is None, f"{where}: a MIG GPU's memory served again on the GPU"
        else:
            assert close(fb_used, used, 64), f"{where}: FB_USED {fb_used} vs memory.used {used}"
        parts = [one(table, f"DCGM_FI_DEV_FB_{p}", uuid) for p in ("USED", "FREE", "RESERVED")]
        if None not in parts and total is not None:
            assert abs(sum(p for p in parts if p is not None) - total) <= 1, f"{where}: {parts} vs {total}"
        power = one(table, "DCGM_FI_DEV_POWER_USAGE", uuid)
        assert close(power, number(gpu["power.draw"]), 15, 0.15), f"{where}: power {power} vs {gpu}"
        temp = one(table, "DCGM_FI_DEV_GPU_TEMP", uuid)
        assert close(temp, number(gpu["temperature.gpu"]), 3), f"{where}: temperature {temp} vs {gpu}"
        for ours, theirs in (("DCGM_FI_DEV_SM_CLOCK", "clocks.sm"), ("DCGM_FI_DEV_MEM_CLOCK", "clocks.mem")):
            value = one(table, ours, uuid)
            assert close(value, number(gpu[theirs]), 30, 0.10), f"{where}: {ours} {value} vs {gpu[theirs]}"


def _cuda_load(stop: threading.Event) -> Callable[[], None]:
    """A function that keeps GPU 0 busy until ``stop`` is set, from CuPy or PyTorch."""
    try:
        import cupy  # type: ignore[import-not-found]

        def run_cupy() -> None:
            a = cupy.random.random((4096, 4096), dtype=cupy.float32)
            while not stop.is_set():
                a = a @ a
                a /= cupy.abs(a).max()
                cupy.cuda.Stream.null.synchronize()

        return run_cupy
    except ImportError:
        pass
    torch: Any = pytest.importorskip("torch", reason="a busy GPU needs CuPy or PyTorch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch without CUDA")

    def run_torch() -> None:
        a = torch.rand((4096, 4096), device="cuda:0")
        while not stop.is_set():
            a = a @ a
            a = a / a.abs().max()
            torch.cuda.synchronize()

    return run_torch


def _low_share(exporter: Exporter, uuid: str, seconds: float) -> tuple[float, float | None]:
    """Share of the samples taken over ``seconds`` at or below 10 %, and the last utilization gauge."""
    before = values(exporter)
    time.sleep(seconds)
    exporter.loop.run_once()
    after = values(exporter)
    buckets_before = before.get(("gpu_utilization_samples_percent_bucket", uuid), {})
    buckets_after = after.get(("gpu_utilization_samples_percent_bucket", uuid), {})
    low = buckets_after.get("10.0", 0) - buckets_before.get("10.0", 0)
    count = buckets_after.get("+Inf", 0) - buckets_before.get("+Inf", 0)
    assert count > 0, "no utilization samples between two collections"
    return low / count, one(after, "DCGM_FI_DEV_GPU_UTIL", uuid)


def test_sample_histogram_and_gauge_idle_then_busy(exporter: Exporter) -> None:
    gpu0 = smi("index,uuid,mig.mode.current")[0]
    if gpu0["mig.mode.current"] == "Enabled":
        pytest.skip("GPU 0 is split into MIG instances: no whole-GPU utilization")
    uuid = gpu0["uuid"]
    stop = threading.Event()
    load = _cuda_load(stop)
    idle_share, idle_gauge = _low_share(exporter, uuid, 5)
    assert idle_share >= 0.8, f"idle GPU: only {idle_share:.0%} of samples at or below 10 %"
    assert idle_gauge is not None and idle_gauge <= 10
    smi_idle = number(smi("utilization.gpu")[0]["utilization.gpu"])
    assert smi_idle is not None and smi_idle <= 10
    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        time.sleep(2)  # the load is running
        busy_share, busy_gauge = _low_share(exporter, uuid, 5)
        smi_busy = number(smi("utilization.gpu")[0]["utilization.gpu"])
    finally:
        stop.set()
        worker.join(30)
    assert busy_share <= 0.2, f"busy GPU: {busy_share:.0%} of samples at or below 10 %"
    assert busy_gauge is not None and busy_gauge >= 50
    assert smi_busy is not None and smi_busy >= 50


def test_mig_instances_match_nvidia_smi(exporter: Exporter) -> None:
    listing = subprocess.run([_nvidia_smi(), "-L"], capture_output=True, text=True, check=True).stdout
    mig_uuids = {line.split("UUID: ")[1].rstrip(")") for line in listing.splitlines() if "MIG-" in line}
    if not mig_uuids:
        pytest.skip("no MIG instances on this node")
    served = {
        s.labels["UUID"] + "/" + s.labels["GPU_I_ID"]
        for s in stored_samples(exporter.exposition.render()[0].decode())
        if s.name == "DCGM_FI_DEV_FB_USED" and "GPU_I_ID" in s.labels
    }
    assert len(served) == len(mig_uuids), f"{len(served)} MIG series vs {len(mig_uuids)} from nvidia-smi -L"
