"""Benchmark: the analyzer against a strong hand-written PromQL baseline, on a real TSDB.

For each fleet size and window (samples every 15 s, imported into VictoriaMetrics or backfilled
into Prometheus), three runs, each in its own process so that peak RSS is its own:

* ``ours``   — ``analyzer.pipeline.analyze`` with the Prometheus-backed source;
* ``strong`` — what a competent user writes with plain ``requests``: a dozen fleet-wide PromQL
  aggregates (avg/max/quantile/count_over_time, the stalled and busy shares, memory, owners, pod
  start times, CPU usage, limits and throttling), the same thresholds, simple rules per workload;
* ``tsdb``   — the queries ``ours`` sent, replayed with the same concurrency and nothing decoded:
  the time the TSDB itself needs for them.

Each row reports wall time, queries, bytes on the wire (gzip) and decoded, peak RSS, and how many
of the strong baseline's (kind, workload) verdicts agree with ours. Usage::

    python benchmarks/analyzer_bench.py [--sizes 100,1000] [--windows 6h,24h] [--tsdb victoriametrics]
        [--json results.json]

``--windows`` takes ``WINDOW`` or ``WINDOW/AGE`` (pods ``AGE`` old at the end; default a day,
or the window itself when longer, which puts every pod's warm-up inside the window).
Needs the Debian ``victoria-metrics`` (or ``prometheus`` and ``promtool``) binaries.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[1]
# The repository root first (tests/analyzer must not shadow the package), then the test harness.
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from analyzer.pipeline import analyze  # noqa: E402
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig, PrometheusSession  # noqa: E402
from analyzer.sources.prometheus_source import PrometheusSource  # noqa: E402
from common.model import FindingKind, FindingsReport, TimeWindow, WorkloadRef  # noqa: E402
from common.thresholds import Thresholds  # noqa: E402
from common.timeutil import parse_duration  # noqa: E402
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

END = datetime(2026, 1, 5, tzinfo=UTC)
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


def bench_scenario(gpus: int, window: timedelta, age: timedelta) -> Scenario:
    """A fleet of ``gpus`` GPUs: every behaviour, a spare node in ten, an exporter outage in twenty."""
    nodes: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    for n in range(gpus // GPUS_PER_NODE):
        name = f"gpu-{n:04d}"
        node: dict[str, Any] = {"name": name, "gpus": GPUS_PER_NODE}
        if n % 20 == 19:
            node["gaps"] = [{"start": "-3h", "end": "-2h"}]
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
            "duration": f"{int(age.total_seconds())}s",
            "step": STEP,
            "analysis_window": f"{int(window.total_seconds())}s",
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


class NotingSession(PrometheusSession):
    """Remembers every request ours sends, for the replay."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        params = kwargs.get("params") or kwargs.get("data") or {}
        verb = method.decode() if isinstance(method, bytes) else method
        self.calls.append((verb, str(url), {str(k): str(v) for k, v in dict(params).items()}))
        return super().request(method, url, *args, **kwargs)


def run_ours(url: str, window: TimeWindow) -> dict[str, Any]:
    session = NotingSession()
    config = PrometheusConfig(url, timeout_s=600)
    client = PrometheusClient(config, session=session)
    start = time.perf_counter()
    report = analyze(PrometheusSource(client), window, Thresholds(), now=window.end)
    wall = time.perf_counter() - start
    result = _result(report, wall, client.stats.requests, client.stats.wire_bytes, client.stats.body_bytes)
    result["tsdb_s"] = replay(session.calls, config.concurrency)
    return result


def replay(calls: list[tuple[str, str, dict[str, str]]], concurrency: int) -> float:
    """The same requests, as many at once as ours allowed, bodies read raw and never decoded.

    Requests that depended on earlier answers went out later in ours too; replaying them all
    through one pool gives the TSDB's own time, a lower bound for any client.
    """
    with requests.Session() as http:
        http.headers["Accept-Encoding"] = "gzip"

        def one(call: tuple[str, str, dict[str, str]]) -> int:
            verb, url, params = call
            if verb.upper() == "POST":
                r = http.post(url, data=params, stream=True, timeout=600)
            else:
                r = http.get(url, params=params, stream=True, timeout=600)
            return len(r.raw.read(decode_content=False))

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(one, calls))
        return time.perf_counter() - start


class Strong:
    """A competent user's script: fleet-wide PromQL aggregates, plain requests, simple rules."""

    def __init__(self, url: str, window: TimeWindow) -> None:
        self.url, self.window = url, window
        self.http = requests.Session()
        self.http.headers["Accept-Encoding"] = "gzip"
        self.requests = self.wire = self.body = 0

    def query(self, q: str) -> list[dict[str, Any]]:
        r = self.http.post(
            f"{self.url}/api/v1/query", data={"query": q, "time": self.window.end.timestamp()}, stream=True
        )
        raw = r.raw.read(decode_content=False)
        data = gzip.decompress(raw) if r.headers.get("Content-Encoding") == "gzip" else raw
        self.requests += 1
        self.wire += len(raw)
        self.body += len(data)
        answer = json.loads(data)
        if answer.get("status") != "success":
            raise RuntimeError(f"strong query failed: {answer.get('error', '')[:300]}")
        return list(answer["data"]["result"])

    def run(self) -> FindingsReport:
        t = Thresholds()
        w = f"{int(self.window.duration.total_seconds())}s"
        by = "by (UUID, namespace, pod)"
        util = "DCGM_FI_DEV_GPU_UTIL"
        queries = {
            "avg": f"avg {by} (avg_over_time({util}[{w}]))",
            "max": f"max {by} (max_over_time({util}[{w}]))",
            "q90": f"max {by} (quantile_over_time(0.9, {util}[{w}]))",
            "count": f"sum {by} (count_over_time({util}[{w}]))",
            "stalled": f"avg {by} (avg_over_time(({util} <= bool {t.starvation_idle_percent})[{w}:{STEP}]))",
            "busy": f"avg {by} (avg_over_time(({util} > bool {t.starvation_busy_percent})[{w}:{STEP}]))",
            "memory": f"max {by} (avg_over_time(DCGM_FI_DEV_FB_USED[{w}]))",
            "owner": f"max by (namespace, pod, owner_kind, owner_name) (last_over_time(kube_pod_owner[{w}]))",
            "rs": f"max by (namespace, replicaset, owner_kind, owner_name) "
            f"(last_over_time(kube_replicaset_owner[{w}]))",
            "start": f"max by (namespace, pod) (max_over_time(kube_pod_start_time[{w}]))",
            "cpu": f"sum by (namespace, pod) (rate(container_cpu_usage_seconds_total[{w}]))",
            "limit": f"sum by (namespace, pod) (max_over_time("
            f'kube_pod_container_resource_limits{{resource="cpu"}}[{w}]))',
            "throttled": f"sum by (namespace, pod) (increase(container_cpu_cfs_throttled_periods_total"
            f"[{w}])) / sum by (namespace, pod) (increase(container_cpu_cfs_periods_total[{w}]))",
        }
        with ThreadPoolExecutor(max_workers=4) as pool:
            answers = dict(zip(queries, pool.map(self.query, queries.values()), strict=True))

        def per(name: str, *labels: str) -> dict[tuple[str, ...], float]:
            return {
                tuple(i["metric"].get(lb, "") for lb in labels): float(i["value"][1]) for i in answers[name]
            }

        gpu = ("UUID", "namespace", "pod")
        avg, top, q90, count = per("avg", *gpu), per("max", *gpu), per("q90", *gpu), per("count", *gpu)
        stalled, busy = per("stalled", *gpu), per("busy", *gpu)
        start = per("start", "namespace", "pod")
        cpu, limit, throttled = (
            per("cpu", "namespace", "pod"),
            per("limit", "namespace", "pod"),
            per("throttled", "namespace", "pod"),
        )
        rs_owner = {
            (i["metric"].get("namespace", ""), i["metric"].get("replicaset", "")): (
                i["metric"].get("owner_kind", ""),
                i["metric"].get("owner_name", ""),
            )
            for i in answers["rs"]
        }
        owner: dict[tuple[str, str], WorkloadRef] = {}
        for i in answers["owner"]:
            m = i["metric"]
            ns, pod, kind, name = (
                m.get("namespace", ""),
                m.get("pod", ""),
                m.get("owner_kind"),
                m.get("owner_name"),
            )
            if kind == "ReplicaSet" and (ns, name) in rs_owner:
                kind, name = rs_owner[(ns, name)]
            owner[(ns, pod)] = WorkloadRef(kind=kind or "Pod", name=name or pod, namespace=ns)
        gpus: dict[WorkloadRef, list[tuple[str, str, str]]] = defaultdict(list)
        for key in avg:
            if key[2]:
                gpus[
                    owner.get((key[1], key[2]), WorkloadRef(kind="Pod", name=key[2], namespace=key[1]))
                ].append(key)
        expected = self.window.duration.total_seconds() / 15.0
        grace = t.warmup_grace.total_seconds()
        found: list[Any] = []
        for ref, keys in gpus.items():
            pods = {(k[1], k[2]) for k in keys}
            young = any(start.get(p, 0.0) + grace > self.window.start.timestamp() for p in pods)
            coverage = min(count[k] / expected for k in keys)
            mean = sum(avg[k] for k in keys) / len(keys)
            if young or coverage < t.min_coverage:
                kind = FindingKind.UNKNOWN
            elif all(top[k] <= t.idle_percent for k in keys) and ref.kind in ("Deployment", "StatefulSet"):
                kind = FindingKind.IDLE_ENDPOINT
            elif min(
                sum(stalled[k] for k in keys) / len(keys), sum(busy[k] for k in keys) / len(keys)
            ) >= t.starvation_min_share or (
                t.starvation_middling_min_percent <= mean <= t.starvation_middling_max_percent
                and all(q90[k] - avg[k] <= t.starvation_flat_spread_percent / 2 for k in keys)
                and any(
                    (limit.get(p) and cpu.get(p, 0.0) / limit[p] >= t.cpu_saturation_ratio)
                    or throttled.get(p, 0.0) >= t.cpu_throttling_ratio
                    for p in pods
                )
            ):
                kind = FindingKind.DATALOADER_STARVATION
            elif mean < t.low_utilization_percent:
                kind = FindingKind.LOW_UTILIZATION
            else:
                continue
            found.append((kind, ref))
        self.found = found
        return FindingsReport(window=self.window, generated_at=self.window.end, source=self.url, findings=())


def run_strong(url: str, window: TimeWindow) -> dict[str, Any]:
    strong = Strong(url, window)
    start = time.perf_counter()
    strong.run()
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "requests": strong.requests,
        "wire_bytes": strong.wire,
        "body_bytes": strong.body,
        "peak_rss_mb": peak_rss_mb(),
        "verdicts": sorted([k.value, r.key()] for k, r in strong.found),
    }


def _result(report: FindingsReport, wall: float, queries: int, wire: int, body: int) -> dict[str, Any]:
    return {
        "wall_s": wall,
        "requests": queries,
        "body_bytes": body,
        "wire_bytes": wire,
        "peak_rss_mb": peak_rss_mb(),
        "verdicts": sorted([f.kind.value, f.workload.key()] for f in report.findings),
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


def child(mode: str, url: str, window: TimeWindow) -> dict[str, Any]:
    span = str(int(window.duration.total_seconds()))
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--url", url, "--span", span],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        # The error line comes first; long PromQL texts follow it.
        lines = [line[:500] for line in out.stderr.splitlines() if "Error" in line]
        raise RuntimeError(f"{mode} run failed:\n" + "\n".join(lines[-5:]))
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


def bench(gpus: int, window: timedelta, age: timedelta, tsdb: str, workdir: Path) -> dict[str, Any]:
    from harness.servers import PrometheusServer, VictoriaMetricsServer

    t0 = time.perf_counter()
    fleet = simulate(bench_scenario(gpus, window, age))
    span = TimeWindow.ending(END, window)
    truth = expected_findings(fleet, span)
    label = f"{gpus}-{int(window.total_seconds())}-{int(age.total_seconds())}"
    server: PrometheusServer | VictoriaMetricsServer
    if tsdb == "prometheus":
        blocks, samples = backfill(trimmed_series(fleet), workdir / f"backfill-{label}")
        server = PrometheusServer(workdir / f"tsdb-{label}", blocks=blocks)
    else:
        samples = sum(s.values.size for s in trimmed_series(fleet))
        server = VictoriaMetricsServer(workdir / f"tsdb-{label}")
    with server:
        if isinstance(server, VictoriaMetricsServer):
            server.import_json_lines(trimmed_series(fleet))
        del fleet
        prepare = time.perf_counter() - t0
        # One warm-up run each, so that neither pays for the first disk read; then the median of
        # three (the machine is shared).
        child("ours", server.url, span)
        child("strong", server.url, span)
        ours = sorted((child("ours", server.url, span) for _ in range(3)), key=_wall)[1]
        strong = sorted((child("strong", server.url, span) for _ in range(3)), key=_wall)[1]
    found = {_ref(key): FindingKind(kind) for kind, key in ours["verdicts"]}
    scores = score(truth, found)
    agree = len({tuple(v) for v in ours["verdicts"]} & {tuple(v) for v in strong["verdicts"]})
    return {
        "gpus": gpus,
        "window_h": window.total_seconds() / 3600,
        "age_h": age.total_seconds() / 3600,
        "tsdb": tsdb,
        "samples": samples,
        "prepare_s": prepare,
        "ours": {k: v for k, v in ours.items() if k not in ("verdicts", "findings")},
        "strong": {k: v for k, v in strong.items() if k != "verdicts"},
        "findings": len(ours["verdicts"]),
        "strong_agrees": agree,
        "strong_findings": len(strong["verdicts"]),
        "scores": {k.value: v[:2] for k, v in scores.items()},
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| GPUs | window (pod age) | run | wall s | TSDB s | queries | wire bytes | decoded bytes "
        "| peak RSS MiB |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        for name in ("ours", "strong"):
            x = r[name]
            tsdb = f"{x['tsdb_s']:.2f}" if "tsdb_s" in x else ""
            lines.append(
                f"| {r['gpus']:,} | {r['window_h']:g} h ({r['age_h']:g} h) | {name} | {x['wall_s']:.2f} "
                f"| {tsdb} | "
                f"{x['requests']:,} | {x['wire_bytes']:,} | {x['body_bytes']:,} | {x['peak_rss_mb']:.0f} |"
            )
    lines.append("")
    lines.append(
        "| GPUs | window (pod age) | ours ÷ strong wall | ours ÷ TSDB | wire bytes / 1,000 GPUs | "
        "strong agrees | precision/recall (ours vs ground truth) |"
    )
    lines.append("| ---: | --- | ---: | ---: | ---: | ---: | --- |")
    for r in results:
        o, s = r["ours"], r["strong"]
        pr = ", ".join(f"{k} {p:.2f}/{rc:.2f}" for k, (p, rc) in sorted(r["scores"].items()))
        lines.append(
            f"| {r['gpus']:,} | {r['window_h']:g} h ({r['age_h']:g} h) | {o['wall_s'] / s['wall_s']:.2f} | "
            f"{o['wall_s'] / o['tsdb_s']:.2f} | {o['wire_bytes'] * 1000 / r['gpus']:,.0f} | "
            f"{r['strong_agrees']}/{r['findings']} | {pr} |"
        )
    return "\n".join(lines)


def _wall(result: dict[str, Any]) -> float:
    return float(result["wall_s"])


def _ref(key: str) -> WorkloadRef:
    namespace, kind, name = key.split("/", 2)
    return WorkloadRef(kind=kind, name=name, namespace=namespace)


def _window(text: str) -> tuple[timedelta, timedelta]:
    window, _, age = text.partition("/")
    w = parse_duration(window)
    return w, parse_duration(age) if age else max(w, timedelta(hours=24))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--windows", default="6h,24h")
    parser.add_argument("--tsdb", choices=("victoriametrics", "prometheus"), default="victoriametrics")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", choices=("ours", "strong"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--span", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        window = TimeWindow.ending(END, timedelta(seconds=args.span))
        run = run_ours if args.child == "ours" else run_strong
        print(json.dumps(run(args.url, window)))
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="analyzer-bench-") as tmp:
        for gpus in (int(x) for x in args.sizes.split(",")):
            for text in args.windows.split(","):
                window, age = _window(text)
                result = bench(gpus, window, age, args.tsdb, Path(tmp))
                results.append(result)
                print(json.dumps(result), file=sys.stderr, flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
