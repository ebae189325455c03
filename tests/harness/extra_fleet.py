"""A second fleet for the series the standard simulation does not produce.

The standard fleet has no exporter self-metrics, no XIDs, no throttling and no reaper runs. This
fixture adds them, on top of a small simulated fleet whose scrape config relabelled dcgm-exporter's
``Hostname`` to ``hostname`` — so every dashboard query is also shown to work on that label.

What it holds at ``END`` (each line makes one alert condition true, or one panel non-empty):

* gpu-h1 (dcgm-exporter) and gpu-h2 (gpu-exporter, profiling): the simulated GPUs, ``hostname`` label;
* gpu-h2 GPU 3 lost 20 minutes ago (``gpu_up`` 0) after XID 79; GPU 2 had two XID 13 four minutes ago;
* gpu-hot (dcgm-exporter): GPU 0 at 91 °C, thermally throttled, power brake on, last XID 48;
  GPU 1 at 60 °C under its software power cap only, last XID 43;
* gpu-exporter on gpu-h3 answers scrapes but has not collected for 30 minutes and counts NVML and
  kubelet errors; the exporter on gpu-h4 has been unreachable for 15 minutes;
* the reaper's last successful run was 5 hours ago; its latest push reported a failed scale-down and
  two Slack failures; its latest Job (40 minutes old) failed; its CronJob last succeeded 5 hours ago.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
from prometheus_client.samples import Sample

from exporter import fields
from reaper.metrics import RunMetrics, registry_for
from simulation.fleet import Scenario, Series, gpu_uuid, simulate

END = datetime(2026, 1, 5, tzinfo=UTC)
END_S = END.timestamp()
STEP_S = 60.0
TIMES = END_S - STEP_S * np.arange(120, -1, -1)  # the last two hours, END included

RELABELLED_SCENARIO = {
    "name": "relabelled",
    "seed": 11,
    "end": END.isoformat(),
    "duration": "8h",
    "step": "60s",
    "analysis_window": "1h",
    "labels": {"hostname": "hostname"},
    "nodes": [
        {"name": "gpu-h1", "gpus": 4},
        {"name": "gpu-h2", "gpus": 4, "exporter": "gpu-exporter", "profiling": True},
    ],
    "workloads": [
        {"namespace": "serving", "name": "legacy-ranker", "behaviour": "idle", "node": "gpu-h2"},
        {"namespace": "serving", "name": "chat-api", "behaviour": "serving", "node": "gpu-h1"},
        {"namespace": "research", "name": "notebook-alice", "behaviour": "low_utilization", "node": "gpu-h1"},
        {
            "namespace": "research",
            "name": "tokenizer-bench",
            "kind": "Job",
            "behaviour": "starvation_subsecond",
            "gpus_per_pod": 2,
            "node": "gpu-h2",
        },
        {
            "namespace": "research",
            "name": "audio-train",
            "kind": "Job",
            "behaviour": "starvation_cpu",
            "node": "gpu-h1",
        },
    ],
}


def _series(
    name: str, labels: dict[str, str], values: np.ndarray | float, since: float | None = None
) -> Series:
    """One series over the last two hours (or from ``since`` on)."""
    full = np.broadcast_to(np.asarray(values, dtype=float), TIMES.shape).copy()
    keep = since <= TIMES if since is not None else np.ones(TIMES.shape, dtype=bool)
    return Series(name, tuple(sorted(labels.items())), TIMES[keep], full[keep])


def _step(before: float, after: float, at: float) -> np.ndarray:
    return np.where(at <= TIMES, after, before)


def _gpu(node: str, index: int, job: str) -> dict[str, str]:
    return {
        "gpu": str(index),
        "UUID": gpu_uuid(node, index),
        "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        "device": f"nvidia{index}",
        "modelName": "NVIDIA H100 80GB HBM3",
        "hostname": node,
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
        "instance": f"{node}:9400",
        "job": job,
    }


def exporter_series() -> list[Series]:
    """gpu-exporter's own health and XID counter, and scrape health of both exporters."""
    out = []
    for i in range(4):
        lost = i == 3
        out.append(
            _series(
                fields.GPU_UP, _gpu("gpu-h2", i, "gpu-exporter"), _step(1, 0 if lost else 1, END_S - 1200)
            )
        )
    out.append(_series(fields.XID_TOTAL, _gpu("gpu-h2", 3, "gpu-exporter") | {"xid": "79"}, 1.0, END_S - 300))
    out.append(
        _series(
            fields.XID_TOTAL,
            _gpu("gpu-h2", 2, "gpu-exporter") | {"xid": "13"},
            _step(1, 3, END_S - 240),
        )
    )
    for node, up_since_lost in (
        ("gpu-h1", None),
        ("gpu-h2", None),
        ("gpu-h3", None),
        ("gpu-h4", END_S - 900),
    ):
        job = "dcgm-exporter" if node == "gpu-h1" else "gpu-exporter"
        up = np.ones(TIMES.shape) if up_since_lost is None else _step(1, 0, up_since_lost)
        out.append(_series("up", {"job": job, "instance": f"{node}:9400"}, up))
    for node in ("gpu-h2", "gpu-h3"):
        target = {"job": "gpu-exporter", "instance": f"{node}:9400"}
        stuck = node == "gpu-h3"
        last = np.minimum(TIMES, END_S - 1800) if stuck else TIMES - 2.0
        out += [
            _series(fields.LAST_COLLECT, target, last),
            _series(fields.COLLECT_DURATION, target, 0.04),
            _series(fields.BUILD_INFO, target | {"version": "0.1.0"}, 1.0),
            _series(fields.KUBELET_ERRORS, target, np.arange(TIMES.size) // 5 if stuck else 0.0),
        ]
        if stuck:
            errors = target | {"call": "nvmlDeviceGetUtilizationRates", "code": "UNKNOWN"}
            out.append(_series(fields.NVML_ERRORS, errors, np.arange(TIMES.size, dtype=float)))
    return out


def hot_node_series() -> list[Series]:
    """dcgm-exporter on a node with a hot, throttled GPU that reported a critical XID."""
    out = []
    # Violation counters are nanoseconds of throttling: 2e8 ns per second is 20 % of the time.
    for i, (temp, reasons, thermal_ns_per_s, xid) in enumerate(
        ((91.0, 0x40 | 0x80, 2e8, 48), (60.0, 0x4, 0.0, 43))
    ):
        labels = _gpu("gpu-hot", i, "dcgm-exporter")
        seconds = np.arange(TIMES.size) * STEP_S
        out += [
            _series("DCGM_FI_DEV_GPU_TEMP", labels, temp),
            _series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", labels, float(reasons)),
            _series("DCGM_FI_DEV_THERMAL_VIOLATION", labels, seconds * thermal_ns_per_s),
            _series("DCGM_FI_DEV_POWER_VIOLATION", labels, seconds * 1e8),
            _series("DCGM_FI_DEV_XID_ERRORS", labels, _step(0, xid, END_S - 600)),
        ]
    return out


def pushed_reaper_samples(last_success: float) -> list[Sample]:
    """The reaper's series as its Pushgateway holds them, from the reaper's own exposition.

    The latest run failed a scale-down and two Slack messages, so it pushed no success timestamp;
    the Pushgateway replaces only the metrics a push carries and keeps ``last_success``'s.
    """
    good_run = RunMetrics(success_timestamp=last_success)
    latest_run = RunMetrics(
        actions={
            ("scale_to_zero", "applied"): 2,
            ("scale_to_zero", "failed"): 1,
            ("notify", "applied"): 3,
            ("cordon", "skipped"): 1,
        },
        findings={"idle_endpoint": 3, "low_utilization": 4, "dataloader_starvation": 2},
        reclaimed_gpu_hours=12.5,
        duration_seconds=8.2,
        slack_failures=2,
    )
    held = {f.name: f for run in (good_run, latest_run) for f in registry_for(run).collect()}
    return [sample for family in held.values() for sample in family.samples]


def reaper_series() -> list[Series]:
    """What the reaper pushed (last success 5 hours ago), and kube-state-metrics' view of its CronJob."""
    pushed = {"job": "gpu-reaper", "instance": ""}
    out = [
        _series(sample.name, pushed | sample.labels, sample.value)
        for sample in pushed_reaper_samples(END_S - 5 * 3600)
    ]
    ksm = {"job": "kube-state-metrics", "instance": "kube-state-metrics:8080", "namespace": "gpu-reaper"}
    for name, started, failed in (
        ("gpu-reaper-29471180", END_S - 7000, 0.0),
        ("gpu-reaper-29471230", END_S - 2400, 1.0),
    ):
        job = ksm | {"job_name": name}
        out += [
            _series("kube_job_status_start_time", job, started, since=started),
            _series("kube_job_status_failed", job, failed, since=started),
        ]
    out.append(
        _series("kube_cronjob_status_last_successful_time", ksm | {"cronjob": "gpu-reaper"}, END_S - 5 * 3600)
    )
    return out


def extra_fleet() -> list[Series]:
    """The relabelled simulated fleet plus every series above."""
    relabelled = simulate(Scenario.model_validate(RELABELLED_SCENARIO))
    return [*relabelled.series, *exporter_series(), *hot_node_series(), *reaper_series()]
