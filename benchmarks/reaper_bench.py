"""Reaper at fleet scale: Deployments (each with its ReplicaSet), GPU and CPU nodes in kmock's emulator.

The emulator pages lists as a real API server does (limit, continue, label selectors, the watch
cache at resourceVersion=0), so the requests counted here are the requests a cluster would serve.
Measures, in one run:
  * the requests, objects and time to read the cluster snapshot the reaper's way (GPU nodes by
    label, workloads and nodes from the watch cache, pages of ``--page-size``), against an older
    API server (the cache ignores limit) and a newer one (the cache pages);
  * the same kinds read the way the reaper did before (every list a quorum read, every node), side
    by side;
  * the same objects read the naive way (a GET per object), for comparison, at small sizes;
  * planning time for thousands of findings (pure, no I/O);
  * a whole dry-run (snapshot + plan + executor) and the mutating calls it makes (must be zero).

Run:  .venv/bin/python benchmarks/reaper_bench.py [--deployments 5000] [--gpu-nodes 1000] [--repeat 5]
Prints Markdown tables (the figures in docs/reaper.md come from it).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import platform
import random
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock

ROOT = Path(__file__).resolve().parents[1]
# The emulator with resourceVersions and the namespace-list workaround lives in the tests' harness. The
# repository root goes first: tests/reaper and tests/analyzer must not shadow the packages.
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from common.model import Finding, FindingKind, FindingsReport, TimeWindow, WorkloadRef  # noqa: E402
from harness.kube_emulator import RESOURCES, ApiServer, write_kubeconfig  # noqa: E402
from reaper.cluster import build_snapshot, read_snapshot  # noqa: E402
from reaper.kinds import WORKLOAD_KINDS  # noqa: E402
from reaper.kube import KubeClient, KubeSettings  # noqa: E402
from reaper.names import STATE_CONFIGMAP  # noqa: E402
from reaper.planner import plan  # noqa: E402
from reaper.policy import Policy, RunMode  # noqa: E402
from reaper.runner import RunSettings, run  # noqa: E402
from simulation.in_memory_cluster import manifest  # noqa: E402

NOW = datetime(2026, 1, 5, tzinfo=UTC)
WINDOW = TimeWindow.ending(NOW, timedelta(hours=6))
POLICY = Policy.model_validate(
    {
        "safety": {"consecutiveRuns": 1, "maxActionsPerRun": 50, "maxCordonShare": 0.05},
        "slack": {"channel": "#gpu-waste"},
        "rules": [
            {"name": "idle", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"},
            {
                "name": "nodes",
                "match": {"findings": ["low_utilization"], "kinds": ["Node"]},
                "action": "cordon",
            },
            {
                "name": "tell",
                "match": {"findings": ["low_utilization", "dataloader_starvation"]},
                "action": "notify",
            },
        ],
    }
)


class IndexedApiServer(ApiServer):
    """Serves single-object GETs by direct lookup.

    kmock matches every request against its reactions by replaying its request log, and its fetch scans
    every object: both grow with the run, which a real API server does not. Without this, the
    per-object-GET baseline would be charged for the emulator's bookkeeping instead of its requests.
    """

    async def _handle(self, request: Any) -> Any:
        if request.action == kmock.action.FETCH and request.resource is not None:
            try:
                obj = self.objects[request.resource, request.namespace, request.name]
            except KeyError:
                raise kmock.KubernetesObjectNotFoundError() from None
            if obj.deleted:
                raise kmock.KubernetesObjectNotFoundError()
            return aiohttp.web.json_response(obj.raw)
        return await super()._handle(request)


def fleet(deployments: int, nodes: int, cpu_nodes: int) -> list[dict[str, Any]]:
    """Deployments with their current ReplicaSet (old ones scaled to zero are left out: a real
    cluster keeps up to ten more per Deployment, each one more object in the ReplicaSet list)."""
    rng = random.Random(5)
    namespaces = [f"team-{i:03d}" for i in range(max(1, deployments // 50))]
    objects = [manifest("Namespace", ns) for ns in [*namespaces, "gpu-reaper", "kube-system"]]
    for i in range(deployments):
        ns, name = namespaces[i % len(namespaces)], f"model-{i:05d}"
        replicas = rng.randint(1, 4)
        created = NOW - timedelta(days=rng.randint(1, 90))
        labels = {"app": name, "tier": rng.choice(["inference", "batch"])}
        server = {"name": "server", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        template = {"metadata": {"labels": labels}, "spec": {"containers": [server]}}
        spec = {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template}
        deployment = manifest("Deployment", name, ns, labels=labels, created=created, spec=spec)
        rs_name = f"{name}-7d9f8b6c5"
        rs = manifest("ReplicaSet", rs_name, ns, labels=labels, created=created, spec=spec, owner=deployment)
        objects += [deployment, rs]
    for i in range(nodes):
        objects.append(
            manifest(
                "Node",
                f"gpu-node-{i:04d}",
                labels={"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                created=NOW - timedelta(days=30),
                spec={},
                status={"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}},
            )
        )
    for i in range(cpu_nodes):
        objects.append(
            manifest(
                "Node",
                f"cpu-node-{i:04d}",
                created=NOW - timedelta(days=30),
                spec={},
                status={"capacity": {"cpu": "64"}, "allocatable": {"cpu": "64"}},
            )
        )
    return objects


def findings(deployments: int, nodes: int) -> FindingsReport:
    """20 % idle endpoints, 30 % low utilization, 5 % starvation, 10 % of the nodes idle."""
    rng = random.Random(7)
    namespaces = max(1, deployments // 50)
    out = []
    for i in range(deployments):
        roll = rng.random()
        kind = (
            FindingKind.IDLE_ENDPOINT
            if roll < 0.2
            else FindingKind.LOW_UTILIZATION
            if roll < 0.5
            else FindingKind.DATALOADER_STARVATION
            if roll < 0.55
            else None
        )
        if kind is None:
            continue
        ref = WorkloadRef(kind="Deployment", name=f"model-{i:05d}", namespace=f"team-{i % namespaces:03d}")
        out.append(_finding(kind, ref, rng))
    for i in range(0, nodes, 10):
        out.append(
            _finding(FindingKind.LOW_UTILIZATION, WorkloadRef(kind="Node", name=f"gpu-node-{i:04d}"), rng)
        )
    return FindingsReport(window=WINDOW, generated_at=NOW, source="bench", findings=tuple(out))


def _finding(kind: FindingKind, ref: WorkloadRef, rng: random.Random) -> Finding:
    gpus = 8 if ref.kind == "Node" else rng.randint(1, 4)
    return Finding(
        kind=kind,
        workload=ref,
        gpus=tuple(f"GPU-{ref.name}-{g}" for g in range(gpus)),
        window=WINDOW,
        evidence={"mean_util_percent": 0.5, "max_util_percent": 1.5},
        confidence=0.99,
        wasted_gpu_hours=rng.uniform(1, 40),
    )


class Emulator:
    def __init__(self, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = IndexedApiServer()
        self.http = kmock.Server(self.server)
        url = self._call(self._start())
        self.kubeconfig = write_kubeconfig(tmp / "kubeconfig", url)
        for kind in (
            "HorizontalPodAutoscaler",
            "ConfigMap",
            "Lease",
            "Deployment",
            "StatefulSet",
            "ReplicaSet",
            "Job",
            "Node",
        ):
            self.server.resources[RESOURCES[kind]] = kmock.ResourceInfo(kind=kind)

    async def _start(self) -> str:
        await self.server.__aenter__()
        await self.http.__aenter__()
        return str(self.http.url).rstrip("/")

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=600)

    def seed(self, objects: list[dict[str, Any]]) -> None:
        async def put() -> None:
            for o in objects:
                meta = o["metadata"]
                ns = None if o["kind"] in ("Node", "Namespace") else meta.get("namespace")
                self.server.objects[RESOURCES[o["kind"]], ns, meta["name"]] = o

        self._call(put())

    def client(self, page_size: int = 500) -> KubeClient:
        settings = KubeSettings(kubeconfig=str(self.kubeconfig), timeout_seconds=300, page_size=page_size)
        return KubeClient.from_settings(settings)

    def served(self) -> int:
        """Requests the emulator has served so far (answered or refused)."""
        return int(self._call(self._count()))

    async def _count(self) -> int:
        return len(self.server._requests)

    def requests_since(self, start: int) -> list[tuple[str, str, int]]:
        """(method, path, page length) of each request served since ``start``."""

        async def log() -> list[tuple[str, str, int]]:
            return [
                (r.method.value, r.url.path, int(r.url.query.get("limit") or 0))
                for r in self.server._requests[start:]
            ]

        return list(self._call(log()))

    def list_bytes(self) -> int:
        async def read() -> int:
            return self.server.list_bytes

        return int(self._call(read()))

    def cache_pages(self, on: bool) -> None:
        async def switch() -> None:
            self.server.cache_pages = on

        self._call(switch())

    def close(self) -> None:
        async def stop() -> None:
            await self.http.__aexit__(None, None, None)
            await self.server.__aexit__(None, None, None)

        self._call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def p50(times: list[float]) -> float:
    return statistics.median(times)


def p99(times: list[float]) -> float:
    # Nearest rank: with fewer than 100 runs, the slowest one.
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def quorum_snapshot(client: KubeClient) -> Any:
    """The reaper before this change: every list a quorum read from etcd, every node in the cluster."""
    workloads = {
        k.name: client.list_optional(k.name) if k.custom else client.list_objects(k.name)
        for k in WORKLOAD_KINDS
    }
    client.get_optional("ConfigMap", "gpu-reaper", STATE_CONFIGMAP)
    return build_snapshot(
        workloads=workloads,
        nodes=client.list_objects("Node"),
        namespaces=client.list_objects("Namespace"),
        hpas=client.list_objects("HorizontalPodAutoscaler"),
        scaled_objects=client.list_optional("ScaledObject"),
    )


def per_object_baseline(client: KubeClient, names: list[tuple[str, str | None, str]]) -> Any:
    """What a naive reaper does: read every object it may act on, one GET each."""
    by_kind: dict[str, list[dict[str, Any]]] = {"Deployment": [], "Node": []}
    for kind, ns, name in names:
        by_kind[kind].append(client.get(kind, ns, name))
    return build_snapshot(deployments=by_kind["Deployment"], nodes=by_kind["Node"])


@dataclass
class Reads:
    label: str
    requests: int
    items: int
    megabytes: float  # list answers' bodies, one read
    times: list[float]
    by_path: Counter[str]


def measure(
    emu: Emulator, label: str, read: Callable[[KubeClient], Any], page_size: int, repeat: int
) -> Reads:
    client = emu.client(page_size)
    start, bytes_before = emu.served(), emu.list_bytes()
    times, snapshot = timed(lambda: read(client), repeat)
    log = emu.requests_since(start)
    megabytes = (emu.list_bytes() - bytes_before) / repeat / 1e6
    per_run = len(log) // repeat
    by_path = Counter(path for _, path, _ in log[:per_run])
    items = len(snapshot.workloads) + len(snapshot.nodes) + len(snapshot.namespaces)
    return Reads(label, per_run, items, megabytes, times, by_path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=5000)
    parser.add_argument("--gpu-nodes", type=int, default=1000)
    parser.add_argument("--cpu-nodes", type=int, default=2000)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--per-object-limit",
        type=int,
        default=10_000,
        help="skip the GET-per-object baseline above this many objects",
    )
    args = parser.parse_args()

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        emu = Emulator(Path(tmp))
        try:
            objects = fleet(args.deployments, args.gpu_nodes, args.cpu_nodes)
            emu.seed(objects)
            report = findings(args.deployments, args.gpu_nodes)

            reaper = lambda c: read_snapshot(c, "gpu-reaper")  # noqa: E731
            reads = [
                measure(emu, "before: quorum lists, every node", quorum_snapshot, args.page_size, args.repeat)
            ]
            emu.cache_pages(False)
            reads.append(
                measure(
                    emu, "reaper, older API server (cache ignores limit)", reaper, args.page_size, args.repeat
                )
            )
            emu.cache_pages(True)
            reads.append(
                measure(emu, "reaper, newer API server (cache pages)", reaper, args.page_size, args.repeat)
            )
            emu.cache_pages(False)

            snapshot = read_snapshot(emu.client(args.page_size), "gpu-reaper")
            plan_times, the_plan = timed(lambda: plan(report, snapshot, POLICY, NOW), args.repeat)

            dry = emu.client(args.page_size)
            start = emu.served()
            settings = RunSettings(policy=POLICY, mode=RunMode.DRY_RUN, namespace="gpu-reaper", end=NOW)
            run_times, result = timed(lambda: run(settings, lambda w, t: report, lambda: dry), 1)
            dry_log = emu.requests_since(start)
            mutating = sum(1 for method, _, _ in dry_log if method != "GET")

            # Last: kmock's reaction matching replays its request log, so its answers slow down as the
            # log grows; thousands of GETs first would bill the emulator's bookkeeping to the runs above.
            names = [
                (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
                for o in objects
                if o["kind"] == "Deployment"
                or (o["kind"] == "Node" and o["metadata"]["name"].startswith("gpu"))
            ]
            get_row = None
            if len(names) <= args.per_object_limit:
                baseline = emu.client(args.page_size)
                get_times, _ = timed(lambda: per_object_baseline(baseline, names), 1)
                get_row = (sum(baseline.calls.values()), get_times[0])
        finally:
            emu.close()

    n_obj = len(objects)
    print(
        f"# gpu-reaper benchmark — {args.deployments:,} Deployments (+ {args.deployments:,} ReplicaSets), "
        f"{args.gpu_nodes:,} GPU nodes, {args.cpu_nodes:,} other nodes"
    )
    print(
        f"\nPython {platform.python_version()} on {platform.machine()}; kmock {kmock.__version__} over HTTP, "
        f"paging like an API server; page size {args.page_size}; {args.repeat} reads each"
    )
    print(
        f"findings: {len(report.findings):,}; plan: {len(the_plan.actions):,} actions, "
        f"{len(the_plan.skips):,} skips\n"
    )
    print("| snapshot read | requests | objects kept | list bytes | p50 | p99 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in reads:
        print(
            f"| {r.label} | {r.requests:,} | {r.items:,} | {r.megabytes:.1f} MB "
            f"| {p50(r.times):.2f} s | {p99(r.times):.2f} s |"
        )
    if get_row is not None:
        print(
            f"| same objects, one GET each (naive) | {get_row[0]:,} | {len(names):,} | – "
            f"| {get_row[1]:.2f} s | – |"
        )
    planning = f"planning {len(report.findings):,} findings against {n_obj:,} objects"
    print(f"| {planning} | 0 | – | – | {p50(plan_times) * 1000:.0f} ms | {p99(plan_times) * 1000:.0f} ms |")
    whole = "whole dry-run (lease check, snapshot, plan, executor), older server"
    print(f"| {whole} | {len(dry_log)} ({mutating} mutating) | – | – | {run_times[0]:.2f} s | – |")
    print("\nrequests per path in one snapshot read:\n")
    paths = sorted({p for r in reads for p in r.by_path})
    print("| path | " + " | ".join(r.label for r in reads) + " |")
    print("| --- |" + " ---: |" * len(reads))
    for path in paths:
        print(f"| `{path}` | " + " | ".join(str(r.by_path.get(path, 0)) for r in reads) + " |")
    print(f"\nsummary: {result.summary_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
