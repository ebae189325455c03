"""Live pieces for the end-to-end alert test: a GPU fleet served as a /metrics page, and Alertmanager.

The exposition is computed at each scrape from the wall clock, so counters grow between scrapes
and timestamps (pod start, last collection, last reaper success) are relative to "now". It holds
one case for every alert of alerts/, plus a healthy serving pod that must never be named.
"""

from __future__ import annotations

import time
from pathlib import Path

from exporter import fields
from harness.binaries import require_binary
from harness.extra_fleet import pushed_reaper_samples
from harness.servers import _Server

HEALTHY_POD = "chat-api-0"


def exposition_line(name: str, labels: dict[str, str], value: float) -> str:
    """One sample in the Prometheus text format."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value:.17g}\n"


def _gpu(uuid: str, gpu: int, node: str, label: str = "Hostname") -> dict[str, str]:
    return {"UUID": uuid, "gpu": str(gpu), label: node, "modelName": "NVIDIA H100 80GB HBM3"}


def _pod(namespace: str, pod: str) -> dict[str, str]:
    return {"namespace": namespace, "pod": pod, "container": "main"}


class LiveFleet:
    """Renders the fleet's exposition; each call is one scrape."""

    def __init__(self) -> None:
        self.scrapes = 0

    def exposition(self) -> str:
        n, now = self.scrapes, time.time()
        self.scrapes += 1
        out: list[str] = []
        add = out.append

        # Pods holding GPUs on node-a (gpu-exporter): util, memory, age.
        pods = (
            ("serving", "legacy-ranker-0", "GPU-1", 0.0, 7200),  # idle, memory held
            ("research", "notebook-0", "GPU-2", 14.0, 7 * 3600),  # low utilization
            ("research", "tokenizer-0", "GPU-3", 50.0, 3600),  # bimodal samples
            ("research", "audio-0", "GPU-4", 45.0, 3600),  # CPU-throttled
            ("serving", HEALTHY_POD, "GPU-5", 60.0, 7 * 3600),  # healthy
        )
        for i, (namespace, pod, uuid, util, age) in enumerate(pods):
            labels = _gpu(uuid, i, "node-a") | _pod(namespace, pod)
            add(exposition_line("DCGM_FI_DEV_GPU_UTIL", labels, util))
            add(exposition_line("DCGM_FI_DEV_FB_USED", labels, 30000))
            add(exposition_line("DCGM_FI_DEV_GPU_TEMP", _gpu(uuid, i, "node-a"), 55))
            add(exposition_line(fields.GPU_UP, _gpu(uuid, i, "node-a"), 1))
            add(exposition_line("kube_pod_start_time", {"namespace": namespace, "pod": pod}, now - age))
            throttled = 7 if pod == "audio-0" else 0
            add(exposition_line("container_cpu_cfs_periods_total", _pod(namespace, pod), 10 * n))
            add(
                exposition_line(
                    "container_cpu_cfs_throttled_periods_total", _pod(namespace, pod), throttled * n
                )
            )
        # tokenizer-0's sub-second samples: half stalled at or below 5 %, half busy above 95 %.
        tokenizer = _gpu("GPU-3", 2, "node-a") | _pod("research", "tokenizer-0")
        samples = fields.UTILIZATION_SAMPLES
        for le, per_scrape in (("5.0", 150), ("10.0", 180), ("25.0", 180), ("50.0", 180), ("75.0", 180)):
            add(exposition_line(f"{samples}_bucket", tokenizer | {"le": le}, per_scrape * n))
        for le, per_scrape in (("90.0", 190), ("95.0", 250), ("+Inf", 360)):
            add(exposition_line(f"{samples}_bucket", tokenizer | {"le": le}, per_scrape * n))
        add(exposition_line(f"{samples}_count", tokenizer, 360 * n))
        add(exposition_line(f"{samples}_sum", tokenizer, 360 * 49 * n))

        # node-a: a GPU lost after XID 79, and an application XID 13 on tokenizer-0's GPU.
        add(exposition_line(fields.GPU_UP, _gpu("GPU-8", 7, "node-a"), 0))
        add(exposition_line(fields.XID_TOTAL, _gpu("GPU-8", 7, "node-a") | {"xid": "79"}, 1))
        add(exposition_line(fields.XID_TOTAL, _gpu("GPU-3", 2, "node-a") | {"xid": "13"}, 1))
        # node-b (dcgm-exporter, relabelled to `hostname`): a hot, braked GPU with XID 48; XID 43 next door.
        for uuid, gpu, temp, reasons, xid in (("GPU-6", 0, 91, 0x40 | 0x80, 48), ("GPU-7", 1, 60, 0x4, 43)):
            labels = _gpu(uuid, gpu, "node-b", label="hostname")
            add(exposition_line("DCGM_FI_DEV_GPU_TEMP", labels, temp))
            add(exposition_line("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", labels, reasons))
            add(exposition_line("DCGM_FI_DEV_XID_ERRORS", labels, xid))

        # gpu-exporter's own health: collections stuck for ten minutes, NVML errors piling up.
        add(exposition_line(fields.LAST_COLLECT, {}, now - 600))
        add(
            exposition_line(
                fields.NVML_ERRORS,
                {"call": "nvmlDeviceGetUtilizationRates", "code": "UNKNOWN"},
                n,
            )
        )
        add(exposition_line(fields.KUBELET_ERRORS, {}, 0))

        # The reaper: last success five hours ago, then a push with a failed scale-down and Slack
        # failures; its latest Job failed ten minutes ago; the CronJob last succeeded five hours ago.
        for sample in pushed_reaper_samples(now - 5 * 3600):
            add(exposition_line(sample.name, sample.labels, sample.value))
        job = {"namespace": "gpu-reaper", "job_name": "gpu-reaper-29471230"}
        add(exposition_line("kube_job_status_failed", job, 1))
        add(exposition_line("kube_job_status_start_time", job, now - 600))
        cronjob = {"namespace": "gpu-reaper", "cronjob": "gpu-reaper"}
        add(exposition_line("kube_cronjob_status_last_successful_time", cronjob, now - 5 * 3600))
        return "".join(out)


class AlertmanagerServer(_Server):
    """Debian's Alertmanager on a free loopback port, clustering off, with the given config."""

    ready_path = "/-/ready"

    def __init__(self, workdir: Path, config: str) -> None:
        super().__init__(workdir)
        self.binary = require_binary("prometheus-alertmanager")
        self.config_path = workdir / "alertmanager.yml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(config, encoding="utf-8")

    def _command(self) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]
