"""Benchmark: the analyzer's pushdown against the naive "pull every series into pandas" approach.

For fleets of 100, 300 and 1,000 GPUs (24 h of samples every 15 s, backfilled into a real
Prometheus), each approach runs in its own process so peak RSS is its own:

* ``ours``  — ``analyzer.pipeline.analyze`` with the Prometheus-backed source (TSDB-side aggregates);
* ``naive`` — ``PrometheusConnect.custom_query_range`` of every GPU's utilization, one GPU at a time,
  into pandas (``MetricRangeDataFrame``), plus the Kubernetes and cAdvisor series the detectors need,
  then the same detectors over the same window.

Both must produce the same findings. Usage::

    python benchmarks/analyzer_bench.py [--sizes 100,300,1000] [--json results.json]

Needs the Debian ``prometheus`` and ``promtool`` binaries. Runtime is dominated by the backfill.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# The repository root first (tests/analyzer must not shadow the package), then the test harness.
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from analyzer.pipeline import analyze  # noqa: E402
from analyzer.sources import promql  # noqa: E402
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig  # noqa: E402
from analyzer.sources.prometheus_source import PrometheusSource  # noqa: E402
from common.model import FindingKind, FindingsReport, TimeWindow, WorkloadRef  # noqa: E402
from common.thresholds import Thresholds  # noqa: E402
from harness.binaries import require_binary  # noqa: E402
from simulation.fleet import (  # noqa: E402
    Fleet,
    Scenario,
    Series,
    expected_findings,
    score,
    simulate,
    write_openmetrics,
)
from simulation.metrics_source import InMemorySource  # noqa: E402

END = datetime(2026, 1, 5, tzinfo=UTC)
WINDOW = TimeWindow.ending(END, timedelta(hours=6))
STEP = "15s"
GPUS_PER_NODE = 8
# Series the naive approach pulls besides GPU utilization: what the detectors need to resolve
# workloads, warm-up and CPU pressure.
NAIVE_EXTRA = (
    "kube_pod_owner",
    "kube_replicaset_owner",
    "kube_pod_start_time",
    "kube_pod_container_resource_requests",
    "kube_pod_container_resource_limits",
    "container_cpu_usage_seconds_total",
    "container_cpu_cfs_periods_total",
    "container_cpu_cfs_throttled_periods_total",
)

# Eight-GPU node layouts, cycled through the fleet: (namespace, name, kind, behaviour, replicas, gpus/pod)
LAYOUTS: list[list[tuple[str, str, str, str, int, int]]] = [
    [("research", "pretrain", "Job", "training", 1, 8)],
    [
        ("serving", "chat", "Deployment", "serving", 4, 1),
        ("serving", "ranker", "Deployment", "idle", 2, 1),
        ("team", "notebook", "Deployment", "low_utilization", 1, 1),
        ("team", "shell", "Pod", "idle", 1, 1),
    ],
    [
        ("research", "vision", "Job", "starvation_sawtooth", 1, 4),
        ("research", "audio", "Job", "starvation_cpu", 1, 2),
        ("serving", "embed", "StatefulSet", "idle", 1, 1),
        ("team", "scorer", "Deployment", "low_utilization", 1, 1),
    ],
    [("research", "finetune", "Job", "training", 2, 4)],
    [("serving", "translate", "Deployment", "serving", 8, 1)],
]


def bench_scenario(gpus: int) -> Scenario:
    """A fleet of ``gpus`` GPUs: every behaviour, a spare node in ten, an exporter outage in twenty."""
    nodes: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    for n in range(gpus // GPUS_PER_NODE):
        name = f"gpu-{n:04d}"
        node: dict[str, Any] = {"name": name, "gpus": GPUS_PER_NODE}
        if n % 20 == 19:
            node["gaps"] = [{"start": "-5h", "end": "-2h"}]
        nodes.append(node)
        if n % 10 == 9:
            continue  # spare: nothing scheduled
        for ns, base, kind, behaviour, replicas, per_pod in LAYOUTS[n % len(LAYOUTS)]:
            spec: dict[str, Any] = {
                "namespace": ns,
                "name": f"{base}-{n:04d}",
                "kind": kind,
                "behaviour": behaviour,
                "replicas": replicas,
                "gpus_per_pod": per_pod,
                "node": name,
            }
            if behaviour == "starvation_cpu":
                spec["cpu_limit_cores"] = 6
            workloads.append(spec)
    return Scenario.model_validate(
        {
            "name": f"bench-{gpus}",
            "seed": 11,
            "end": END.isoformat(),
            "duration": "24h",
            "step": STEP,
            "analysis_window": "6h",
            "metrics": "minimal",
            "nodes": nodes,
            "workloads": workloads,
        }
    )


def trimmed_series(fleet: Fleet) -> Iterator[Series]:
    """The fleet as a cluster would typically scrape it: GPUs every 15 s, Kubernetes every 60 s.

    ``DCGM_FI_DEV_FB_FREE`` is dropped: nothing reads it, and it would double the backfill's size.
    """
    for s in fleet.series:
        if s.name == "DCGM_FI_DEV_FB_FREE":
            continue
        if s.name.startswith(("kube_", "container_")):
            keep = np.round(s.timestamps) % 60 == 0
            yield replace(s, timestamps=s.timestamps[keep], values=s.values[keep])
        else:
            yield s


# --- the two approaches, each run in a child process -----------------------------------------------


def run_ours(url: str) -> dict[str, Any]:
    client = PrometheusClient(PrometheusConfig(url, timeout_s=300))
    start = time.perf_counter()
    report = analyze(PrometheusSource(client), WINDOW, Thresholds(), now=END)
    wall = time.perf_counter() - start
    return _result(report, wall, client)


def run_naive(url: str) -> dict[str, Any]:
    from prometheus_api_client import MetricRangeDataFrame

    client = PrometheusClient(PrometheusConfig(url, timeout_s=300))
    prom = client.connect
    start = time.perf_counter()
    window_start, window_end = WINDOW.start, WINDOW.end
    # Every GPU, then each GPU's raw utilization over the window, one query per GPU.
    gpus = prom.custom_query(
        "count by (UUID) (count_over_time(DCGM_FI_DEV_GPU_UTIL[6h]))", {"time": END.timestamp()}
    )
    frames = []
    for item in gpus:
        uuid = item["metric"]["UUID"]
        selector = promql.selector("DCGM_FI_DEV_GPU_UTIL", [promql.eq("UUID", uuid)])
        data = prom.custom_query_range(selector, window_start, window_end, step=STEP)
        if data:
            frames.append(MetricRangeDataFrame(data))
    for metric in NAIVE_EXTRA:
        data = prom.custom_query_range(metric, window_start, window_end, step=STEP)
        if data:
            frames.append(MetricRangeDataFrame(data))
    series = [s for frame in frames for s in _frame_series(frame)]
    report = analyze(InMemorySource(series, url), WINDOW, Thresholds(), now=END)
    wall = time.perf_counter() - start
    return _result(report, wall, client)


def _frame_series(frame: Any) -> Iterator[Series]:
    """pandas back to (name, labels, timestamps, values) per series, for the same detectors."""
    label_columns = [c for c in frame.columns if c != "value"]
    frame = frame.reset_index()
    for labels, group in frame.groupby(label_columns, dropna=False, sort=False):
        pairs = tuple(
            (k, str(v)) for k, v in zip(label_columns, labels, strict=True) if isinstance(v, str) and v != ""
        )
        name = dict(pairs).pop("__name__", "")
        stamps = group["timestamp"].to_numpy().astype("datetime64[ms]").astype("int64") / 1000.0
        yield Series(
            name, tuple(p for p in pairs if p[0] != "__name__"), stamps, group["value"].to_numpy(float)
        )


def _result(report: FindingsReport, wall: float, client: PrometheusClient) -> dict[str, Any]:
    return {
        "wall_s": wall,
        "requests": client.stats.requests,
        "body_bytes": client.stats.body_bytes,
        "wire_bytes": client.stats.wire_bytes,
        "peak_rss_mb": peak_rss_mb(),
        "findings": sorted(
            [f.kind.value, f.workload.namespace, f.workload.kind, f.workload.name, list(f.pods), list(f.gpus)]
            for f in report.findings
        ),
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process since it started (exec).

    Not ``getrusage().ru_maxrss``: for a child started with vfork that also counts the parent's
    memory from before the exec.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(mode: str, url: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--url", url],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# --- orchestration -------------------------------------------------------------------------------


def backfill(series: Iterator[Series], workdir: Path) -> tuple[Path, int]:
    """OpenMetrics → TSDB blocks, in one 24 h block: promtool re-reads its input once per block."""
    promtool = require_binary("promtool")
    workdir.mkdir(parents=True, exist_ok=True)
    source, blocks = workdir / "fleet.om", workdir / "blocks"
    with source.open("w", encoding="utf-8") as fh:
        samples = write_openmetrics(series, fh)
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=24h",
            str(source),
            str(blocks),
        ],
        check=True,
        capture_output=True,
    )
    source.unlink()
    return blocks, samples


def bench(gpus: int, workdir: Path) -> dict[str, Any]:
    from harness.servers import PrometheusServer

    t0 = time.perf_counter()
    fleet = simulate(bench_scenario(gpus))
    blocks, samples = backfill(trimmed_series(fleet), workdir / f"backfill-{gpus}")
    prepare = time.perf_counter() - t0
    truth = expected_findings(fleet, WINDOW)
    del fleet
    with PrometheusServer(workdir / f"prometheus-{gpus}", blocks=blocks) as server:
        # Warm the server's page cache once so neither approach pays for the first disk read; the
        # machine is shared, so ours (seconds) is the median of three runs, naive (tens of seconds)
        # runs once.
        child("ours", server.url)
        runs = sorted((child("ours", server.url) for _ in range(3)), key=lambda r: float(r["wall_s"]))
        ours = runs[1]
        naive = child("naive", server.url)
    found = {
        WorkloadRef(kind=wkind, name=name, namespace=ns): FindingKind(kind)
        for kind, ns, wkind, name, _pods, _gpus in ours["findings"]
    }
    scores = score(truth, found)
    return {
        "gpus": gpus,
        "samples_backfilled": samples,
        "prepare_s": prepare,
        "ours": {k: v for k, v in ours.items() if k != "findings"},
        "naive": {k: v for k, v in naive.items() if k != "findings"},
        "findings": len(ours["findings"]),
        "same_findings": ours["findings"] == naive["findings"],
        "expected_findings": sum(1 for e in truth.values() if e.kind is not None),
        "scores": {k.value: v[:2] for k, v in scores.items()},
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| GPUs | approach | wall s | queries | bytes received | peak RSS MB | same findings |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        for name in ("ours", "naive"):
            x = r[name]
            lines.append(
                f"| {r['gpus']:,} | {name} | {x['wall_s']:.2f} | {x['requests']:,} | "
                f"{x['body_bytes']:,} | {x['peak_rss_mb']:.0f} | {'yes' if r['same_findings'] else 'NO'} |"
            )
    lines.append("")
    lines.append("| GPUs | speed-up | fewer bytes | findings | precision/recall (ours vs ground truth) |")
    lines.append("| ---: | ---: | ---: | ---: | --- |")
    for r in results:
        ratio_t = r["naive"]["wall_s"] / r["ours"]["wall_s"]
        ratio_b = r["naive"]["body_bytes"] / r["ours"]["body_bytes"]
        pr = ", ".join(f"{k} {p:.2f}/{rc:.2f}" for k, (p, rc) in sorted(r["scores"].items()))
        lines.append(f"| {r['gpus']:,} | {ratio_t:.1f}× | {ratio_b:.1f}× | {r['findings']} | {pr} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,300,1000")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", choices=("ours", "naive"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run = run_ours if args.child == "ours" else run_naive
        print(json.dumps(run(args.url)))
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="analyzer-bench-") as tmp:
        for gpus in (int(x) for x in args.sizes.split(",")):
            result = bench(gpus, Path(tmp))
            results.append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["same_findings"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
