"""Reaper at fleet scale: 5,000 Deployments and 1,000 nodes in kmock's Kubernetes emulator.

Measures, in one run:
  * the API calls and time to read the cluster snapshot the reaper's way (one paged list per kind),
  * the same objects read the naive way (a GET per object), for comparison,
  * planning time for thousands of findings (pure, no I/O),
  * a whole dry-run (snapshot + plan + executor) and the mutating calls it makes (must be zero).

Run:  .venv/bin/python benchmarks/reaper_bench.py [--deployments 5000] [--nodes 1000] [--repeat 5]
Prints a Markdown table (the figures in docs/reaper.md come from it).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
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
from reaper.kube import KubeClient, KubeSettings  # noqa: E402
from reaper.planner import plan  # noqa: E402
from reaper.policy import Policy, RunMode  # noqa: E402
from reaper.runner import RunSettings, run  # noqa: E402
from simulation.cluster import manifest  # noqa: E402

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


def fleet(deployments: int, nodes: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    namespaces = [f"team-{i:03d}" for i in range(max(1, deployments // 50))]
    objects = [manifest("Namespace", ns) for ns in [*namespaces, "gpu-reaper", "kube-system"]]
    for i in range(deployments):
        ns = namespaces[i % len(namespaces)]
        objects.append(
            manifest(
                "Deployment",
                f"model-{i:05d}",
                ns,
                labels={"app": f"model-{i:05d}", "tier": rng.choice(["inference", "batch"])},
                created=NOW - timedelta(days=rng.randint(1, 90)),
                spec={"replicas": rng.randint(1, 4)},
            )
        )
    for i in range(nodes):
        objects.append(
            manifest(
                "Node",
                f"gpu-node-{i:04d}",
                created=NOW - timedelta(days=30),
                spec={},
                status={"capacity": {"nvidia.com/gpu": "8"}},
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

    def client(self) -> KubeClient:
        return KubeClient.from_settings(KubeSettings(kubeconfig=str(self.kubeconfig), timeout_seconds=120))

    def close(self) -> None:
        async def stop() -> None:
            await self.http.__aexit__(None, None, None)
            await self.server.__aexit__(None, None, None)

        self._call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def per_object_baseline(client: KubeClient, names: list[tuple[str, str | None, str]]) -> Any:
    """What a naive reaper does: read every object it may act on, one GET each."""
    by_kind: dict[str, list[dict[str, Any]]] = {"Deployment": [], "Node": []}
    for kind, ns, name in names:
        by_kind[kind].append(client.get(kind, ns, name))
    return build_snapshot(deployments=by_kind["Deployment"], nodes=by_kind["Node"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        emu = Emulator(Path(tmp))
        try:
            objects = fleet(args.deployments, args.nodes)
            emu.seed(objects)
            report = findings(args.deployments, args.nodes)
            names = [
                (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"])
                for o in objects
                if o["kind"] in ("Deployment", "Node")
            ]

            client = emu.client()
            list_time, snapshot = timed(lambda: read_snapshot(client, "gpu-reaper"), args.repeat)
            list_calls = sum(client.calls.values()) // args.repeat

            plan_time, the_plan = timed(lambda: plan(report, snapshot, POLICY, NOW), args.repeat)

            dry = emu.client()
            settings = RunSettings(policy=POLICY, mode=RunMode.DRY_RUN, namespace="gpu-reaper", end=NOW)
            run_time, result = timed(lambda: run(settings, lambda w, t: report, lambda: dry), 1)
            mutating = sum(n for (verb, _), n in dry.calls.items() if verb != "GET")
            dry_calls = sum(dry.calls.values())

            # Last: kmock's reaction matching replays its request log, so its answers slow down as the
            # log grows; 6,000 GETs first would bill the emulator's bookkeeping to the runs above.
            baseline = emu.client()
            get_time, _ = timed(lambda: per_object_baseline(baseline, names), 1)
            get_calls = sum(baseline.calls.values())
        finally:
            emu.close()

    n_obj = args.deployments + args.nodes
    print(f"# gpu-reaper benchmark — {args.deployments:,} Deployments, {args.nodes:,} nodes")
    print(
        f"\nPython {platform.python_version()} on {platform.machine()}; kmock {kmock.__version__} over HTTP"
    )
    print(
        f"findings: {len(report.findings):,}; plan: {len(the_plan.actions):,} actions, "
        f"{len(the_plan.skips):,} skips\n"
    )
    print("| measure | API calls | time |")
    print("| --- | ---: | ---: |")
    print(f"| snapshot, one paged list per kind (reaper) | {list_calls} | {list_time:.2f} s |")
    print(f"| same objects, one GET each (baseline) | {get_calls:,} | {get_time:.2f} s |")
    planning = f"planning {len(report.findings):,} findings against {n_obj:,} objects"
    print(f"| {planning} | 0 | {plan_time * 1000:.0f} ms |")
    whole = "whole dry-run (lease check, snapshot, plan, executor)"
    print(f"| {whole} | {dry_calls} ({mutating} mutating) | {run_time:.2f} s |")
    print(f"\nsummary: {result.summary_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
