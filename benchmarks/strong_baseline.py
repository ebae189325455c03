"""The strong baseline: what a competent user writes instead of the analyzer, as one standalone script.

Fleet-wide PromQL aggregates through plain ``requests``, the analyzer's default thresholds written
out, simple rules per workload. It imports nothing of this project, so run as its own process it
pays only its own start-up (``analyzer_bench.py --process`` times it so, beside ``gpu-analyzer
analyze``); ``analyzer_bench.py`` also runs it in-process.

Run: ``python benchmarks/strong_baseline.py URL WINDOW_START WINDOW_END SCRAPE_STEP_S`` (unix seconds);
prints one JSON line: wall time, requests, bytes and the (kind, workload) verdicts.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, NamedTuple

import requests

VM_MAX_POINTS = 30_000  # VictoriaMetrics' default -search.maxPointsPerTimeseries


class Thresholds(NamedTuple):
    """The analyzer's defaults (common.thresholds), written out as a user would copy them."""

    idle_percent: float = 2.0
    low_utilization_percent: float = 30.0
    min_coverage: float = 0.9
    warmup_grace_s: float = 30 * 60.0
    starvation_idle_percent: float = 10.0
    starvation_busy_percent: float = 75.0
    starvation_min_share: float = 0.2
    starvation_middling_min_percent: float = 20.0
    starvation_middling_max_percent: float = 75.0
    starvation_flat_spread_percent: float = 25.0
    cpu_saturation_ratio: float = 0.9
    cpu_throttling_ratio: float = 0.25


THRESHOLDS = Thresholds()


class Ref(NamedTuple):
    kind: str
    name: str
    namespace: str

    def key(self) -> str:
        """As the analyzer writes a workload: ``namespace/Kind/name``."""
        return f"{self.namespace}/{self.kind}/{self.name}"


class Window(NamedTuple):
    start: float  # unix seconds
    end: float

    @property
    def duration(self) -> timedelta:
        return timedelta(seconds=self.end - self.start)


def subquery_step(window: timedelta, scrape: timedelta, max_points: int = VM_MAX_POINTS) -> timedelta:
    """The finest multiple of the scrape step whose subquery over ``window`` stays under ``max_points``."""
    points = window.total_seconds() / scrape.total_seconds()
    return scrape * (int(points // max_points) + 1)


class Strong:
    """A competent user's script: fleet-wide PromQL aggregates, plain requests, simple rules.

    The stalled and busy shares are subqueries; over a long window at the scrape step they would
    exceed VictoriaMetrics' default point limit per series (30,000: 7 days at 15 s are 40,320), so,
    as a user who hit that error would, they step at the finest multiple of the scrape step that
    stays under it (30 s for 7 days at 15 s): the shares are then estimated from every other sample.
    """

    def __init__(self, url: str, window: Window, step: timedelta) -> None:
        self.url, self.window, self.step = url, window, step
        self.sub_step = subquery_step(window.duration, step)
        self.http = requests.Session()
        self.http.headers["Accept-Encoding"] = "gzip"  # as ours asks
        self.requests = self.wire = self.body = 0

    def query(self, q: str) -> list[dict[str, Any]]:
        r = self.http.post(
            f"{self.url}/api/v1/query",
            data={"query": q, "time": self.window.end},
            stream=True,
            timeout=600,
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

    def run(self) -> list[tuple[str, Ref]]:
        t = THRESHOLDS
        w = f"{int(self.window.duration.total_seconds())}s"
        sub = f"{int(self.sub_step.total_seconds())}s"
        by = "by (UUID, namespace, pod)"
        util = "DCGM_FI_DEV_GPU_UTIL"
        queries = {
            "avg": f"avg {by} (avg_over_time({util}[{w}]))",
            "max": f"max {by} (max_over_time({util}[{w}]))",
            "q90": f"max {by} (quantile_over_time(0.9, {util}[{w}]))",
            "count": f"sum {by} (count_over_time({util}[{w}]))",
            "stalled": f"avg {by} (avg_over_time(({util} <= bool {t.starvation_idle_percent})[{w}:{sub}]))",
            "busy": f"avg {by} (avg_over_time(({util} > bool {t.starvation_busy_percent})[{w}:{sub}]))",
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
        owner: dict[tuple[str, str], Ref] = {}
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
            owner[(ns, pod)] = Ref(kind or "Pod", name or pod, ns)
        gpus: dict[Ref, list[tuple[str, ...]]] = defaultdict(list)
        for key in avg:
            if key[2]:
                gpus[owner.get((key[1], key[2]), Ref("Pod", key[2], key[1]))].append(key)
        expected = self.window.duration / self.step
        grace = t.warmup_grace_s
        found: list[tuple[str, Ref]] = []
        for ref, keys in gpus.items():
            pods = {(k[1], k[2]) for k in keys}
            young = any(start.get(p, 0.0) + grace > self.window.start for p in pods)
            coverage = min(count[k] / expected for k in keys)
            mean = sum(avg[k] for k in keys) / len(keys)
            if young or coverage < t.min_coverage:
                kind = "unknown"
            elif all(top[k] <= t.idle_percent for k in keys) and ref.kind in ("Deployment", "StatefulSet"):
                kind = "idle_endpoint"
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
                kind = "dataloader_starvation"
            elif mean < t.low_utilization_percent:
                kind = "low_utilization"
            else:
                continue
            found.append((kind, ref))
        return found


def run(url: str, window: Window, step: timedelta) -> dict[str, Any]:
    strong = Strong(url, window, step)
    start = time.perf_counter()
    found = strong.run()
    wall = time.perf_counter() - start
    return {
        "wall_s": wall,
        "requests": strong.requests,
        "wire_bytes": strong.wire,
        "body_bytes": strong.body,
        "subquery_step_s": strong.sub_step.total_seconds(),
        "verdicts": sorted([kind, ref.key()] for kind, ref in found),
    }


if __name__ == "__main__":
    url, start, end, step_s = sys.argv[1:5]
    print(json.dumps(run(url, Window(float(start), float(end)), timedelta(seconds=float(step_s)))))
