"""Benchmark: ``gpu-analyzer chargeback`` against the PromQL a competent user would write, on VictoriaMetrics.

The fleet (``--gpus`` GPUs, 8 per node, one model, ``--days`` days ending ``END``): each GPU held by
one pod at a time (a pod lives three days, then the next takes the GPU), a tenth never held; pods
request one ``nvidia_com_gpu`` and run; every pod's GPU is idle on even days of the window and at
60 % on odd ones. A 30-day month over 10,000 GPUs is 1.3 billion raw samples at a 60 s scrape, more
than can be imported here, so each approach gets the data it reads:

* ours — the hourly chargeback rollups over the whole window (computed here from the fleet's 60 s
  samples exactly as alerts/gpu-chargeback.recording.yaml would record them: ``rollups`` below;
  tests/benchmarks/test_chargeback_bench.py checks them against promtool's evaluation of the rule
  and the bill against a bill from raw samples), plus the raw series at ``--step`` where a
  chargeback over rollups still reads raw samples: the window's first 2 hours (where the data
  begins), its last 8 hours (the trail the rollups do not cover yet), and each pod's last day of
  ``kube_pod_owner`` (the owners of the idlest pods) at ``--owner-step``. Two variants: rollups
  up to the window's end (the last hour read raw), and missing for the last 6 hours;
* baseline — its own TSDB with the raw series over the whole window at ``--baseline-step``
  (coarser than 60 s: the baseline's queries decode every sample, so at 60 s they would read
  ``baseline-step / 60`` times as many samples as measured here), and two hand-written queries:
  ``sum by (namespace)`` of GPU requests × time and of utilization × time.

Each approach runs ``--runs`` times in its own process (its peak RSS its own), after ``--warmups``
warm-up runs (default 1); ``--variants`` picks some of ``rollups``, ``rollups -6h``, ``baseline``.
VictoriaMetrics runs without its result cache (``-search.disableCache``): a repeated query is
computed again, as a month's first chargeback would be. Reports wall time p50 and worst (nearest
rank), bytes on the wire (gzip) and peak RSS. Usage::

    python benchmarks/chargeback_bench.py [--gpus 10000] [--days 30] [--runs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from analyzer_bench import peak_rss_mb  # noqa: E402
from bench_fleet import ImportStats, import_json_lines, json_line_chunks, wait_for_merges  # noqa: E402

from common import metric_names as m  # noqa: E402
from common.timeutil import parse_duration  # noqa: E402
from harness.servers import VictoriaMetricsServer  # noqa: E402
from simulation.fleet import Series  # noqa: E402

END = datetime(2026, 2, 1, tzinfo=UTC)
POD_DAYS = 3
MODEL = "NVIDIA H100 80GB HBM3"
NAMESPACES = 40
SPAN, HOUR, DAY = 300.0, 3600.0, 86400.0
IDLE_RATIO = m.CHARGEBACK_IDLE_PERCENT / 100.0
Region = tuple[float, float]


@dataclass(frozen=True)
class Layout:
    """Which series a TSDB gets: raw samples in ``raw`` regions ((lo, hi], unix seconds) at ``step``;
    rollups stamped up to ``rollups_until`` (None: none); ``kube_pod_owner`` over each pod's last
    day at ``owner_step`` (None: with the raw samples)."""

    gpus: int
    days: int
    step: float
    raw: tuple[Region, ...]
    rollups_until: float | None = None
    owner_step: float | None = None
    offset: float = SPAN  # the rule group's evaluation offset past the hour
    pod_meta: bool = True  # kube_pod_status_phase and kube_pod_owner (the baseline reads neither)

    @property
    def start(self) -> float:
        return END.timestamp() - self.days * DAY


def _labels(d: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(d.items()))


def _grid(lo: float, hi: float, step: float) -> np.ndarray:
    """Scrape times in (lo, hi] on the step grid."""
    first = math.floor(lo / step) * step + step
    return np.arange(first, hi + step / 2, step)


def _in(t: np.ndarray, regions: Sequence[Region]) -> np.ndarray:
    keep = np.zeros(t.size, dtype=bool)
    for lo, hi in regions:
        keep |= (t > lo) & (t <= hi)
    return t[keep]


def utilization(t: np.ndarray, start: float) -> np.ndarray:
    """Percent: 0 on the window's even days, 60 on odd ones."""
    return np.where(((t - start) // DAY).astype(int) % 2 == 0, 0.0, 60.0)


def rollups(
    t: np.ndarray, percent: np.ndarray, start: float, offset: float = SPAN
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One holder's samples as the rule records them: per 5-minute span ``(e - 5m, e]`` the span is
    sampled (1), used (mean activity, 0-1), idle (top activity at or below the threshold); summed
    per hourly stamp ``s`` over the spans ending in ``(s - 65m, s - 5m]``, the stamps ``offset``
    past the hour (Prometheus evaluates a group at a fixed offset from a hash of its name). Part →
    (stamps, values)."""
    ends = np.ceil(t / SPAN) * SPAN
    span_ends, inverse = np.unique(ends, return_inverse=True)
    count = np.bincount(inverse)
    mean = np.bincount(inverse, percent) / count
    firsts = np.r_[0, np.flatnonzero(np.diff(inverse)) + 1]
    top = np.maximum.reduceat(percent, firsts)
    per_span = {
        "sampled": np.ones(span_ends.size),
        "used": np.clip(mean * 0.01, 0.0, 1.0),
        "idle": (top * 0.01 <= IDLE_RATIO).astype(float),
    }
    hour = np.ceil((span_ends + SPAN - start - offset) / HOUR).astype(int)
    hours, at = np.unique(hour, return_inverse=True)
    stamps = start + offset + hours * HOUR
    out = {part: (stamps, np.bincount(at, v)) for part, v in per_span.items()}
    out["held"] = out["sampled"]
    return out


def _rollup(
    labels: dict[str, str], part: str, stamps: np.ndarray, values: np.ndarray, until: float
) -> Series:
    keep = stamps <= until
    return Series(
        m.CHARGEBACK_ROLLUP, _labels(labels | {m.CHARGEBACK_PART: part}), stamps[keep], values[keep]
    )


def fleet(layout: Layout) -> Iterator[Series]:
    """The series of ``layout``."""
    start, end, step = layout.start, END.timestamp(), layout.step
    until = layout.rollups_until
    life_parts: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    unheld = 0
    for g in range(layout.gpus):
        node, uuid = f"node-{g // 8}", f"GPU-{g:08x}-0000-4000-8000-000000000000"
        gpu = {"UUID": uuid, "gpu": str(g % 8), "modelName": MODEL, "Hostname": node, "job": "dcgm-exporter"}
        if g % 10 == 9:  # never held
            unheld += 1
            t = _in(_grid(start, end, step), layout.raw)
            yield Series(m.GPU_UTIL, _labels(gpu), t, np.zeros(t.size))
            continue
        for life in range(math.ceil(layout.days / POD_DAYS)):
            lo, hi = start + life * POD_DAYS * DAY, min(end, start + (life + 1) * POD_DAYS * DAY)
            pod, ns = f"job-{g}-{life}", f"team-{g % NAMESPACES}"
            t = _in(_grid(lo, hi, step), layout.raw)
            holder = gpu | {"namespace": ns, "pod": pod, "container": "main"}
            yield Series(m.GPU_UTIL, _labels(holder), t, utilization(t, start))
            ksm = {"job": "kube-state-metrics", "namespace": ns, "pod": pod}
            request = ksm | {"container": "main", "resource": "nvidia_com_gpu", "node": node}
            yield Series("kube_pod_container_resource_requests", _labels(request), t, np.ones(t.size))
            if not layout.pod_meta:
                continue
            yield Series("kube_pod_status_phase", _labels(ksm | {"phase": "Running"}), t, np.ones(t.size))
            owner = ksm | {
                "owner_kind": "Job",
                "owner_name": f"job-{g}-{life}",
                "owner_is_controller": "true",
            }
            last_day = None if layout.owner_step is None else _grid(max(lo, hi - DAY), hi, layout.owner_step)
            t_owner = t if last_day is None else last_day
            yield Series("kube_pod_owner", _labels(owner), t_owner, np.ones(t_owner.size))
            if until is None:
                continue
            if life not in life_parts:
                full = _grid(lo, hi, 60.0)  # the rollups sum the 60 s scrape, whatever ``step`` is
                life_parts[life] = rollups(full, utilization(full, start), start, layout.offset)
            key = {"namespace": ns, "pod": pod, "modelName": MODEL}
            for part, (stamps, values) in life_parts[life].items():
                yield _rollup(key, part, stamps, values, until)
            req = {"namespace": ns, "pod": pod, "resource": "nvidia_com_gpu"}
            stamps, values = life_parts[life]["sampled"]
            yield _rollup(req, "requested", stamps, values, until)
    if until is None:
        return
    whole = _grid(start, end, 60.0)
    stamps, spans = rollups(whole, np.zeros(whole.size), start, layout.offset)["sampled"]
    if unheld:
        yield _rollup({"modelName": MODEL}, "unallocated", stamps, spans * unheld, until)
    yield _rollup({"modelName": MODEL}, "reported", stamps, spans * layout.gpus, until)
    yield _rollup({}, "evaluations", stamps, spans, until)


def ours_layout(gpus: int, days: int, step: float, rollups_until: float, owner_step: float) -> Layout:
    end = END.timestamp()
    start = end - days * DAY
    return Layout(
        gpus, days, step, ((start, start + 2 * HOUR), (end - 8 * HOUR, end)), rollups_until, owner_step
    )


def baseline_queries(days: int, step: float) -> list[str]:
    """What a competent user writes: every sample stands for one scrape interval."""
    hours = f"{step:g} / 3600"
    return [
        "sum by (namespace) (sum_over_time("
        f'kube_pod_container_resource_requests{{resource="nvidia_com_gpu"}}[{days}d])) * {hours}',
        f'sum by (namespace) (sum_over_time(DCGM_FI_DEV_GPU_UTIL{{pod!=""}}[{days}d])) / 100 * {hours}',
    ]


def run_child(mode: str, url: str, days: int, step: float) -> dict[str, float]:
    """One measured run in this process."""
    t0 = time.perf_counter()
    if mode == "baseline":
        http = requests.Session()
        http.headers["Accept-Encoding"] = "gzip"
        wire = 0
        held = 0.0
        for i, q in enumerate(baseline_queries(days, step)):
            r = http.post(
                f"{url}/api/v1/query", data={"query": q, "time": END.timestamp()}, stream=True, timeout=3600
            )
            body = r.raw.read(decode_content=False)
            wire += len(body)
            r.raise_for_status()
            if i == 0:  # the baseline's "held" figure, to set beside ours
                text = gzip.decompress(body) if r.headers.get("Content-Encoding") == "gzip" else body
                held = sum(float(s["value"][1]) for s in json.loads(text)["data"]["result"])
        return {"s": time.perf_counter() - t0, "wire": wire, "rss": peak_rss_mb(), "held": held}
    from analyzer.chargeback.prices import Prices
    from analyzer.chargeback.run import chargeback
    from analyzer.sources.prometheus.chargeback import ChargebackReads
    from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig
    from common.model import TimeWindow

    client = PrometheusClient(PrometheusConfig(url, timeout_s=3600))
    reads = ChargebackReads(client)
    report = chargeback(
        reads, TimeWindow(start=END - timedelta(days=days), end=END), "namespace", Prices(2.0), 2.0, END
    )
    if not report.totals.within_tolerance:
        raise SystemExit(f"totals off: {report.totals}")
    return {
        "s": time.perf_counter() - t0,
        "wire": client.stats.wire_bytes,
        "rss": peak_rss_mb(),
        "rollup_h": report.coverage.rollup_hours,
        "held": report.fleet.held_gpu_hours,
        "idle": report.fleet.idle_gpu_hours,
    }


def measure(mode: str, url: str, days: int, step: float, runs: int, warmups: int = 1) -> dict[str, object]:
    results = []
    for _ in range(runs + warmups):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                mode,
                "--url",
                url,
                "--days",
                str(days),
                "--step",
                f"{step:g}s",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            return {"mode": mode, "error": out.stderr.strip().splitlines()[-3:]}
        results.append(json.loads(out.stdout))
    measured = results[warmups:]
    timed = sorted(r["s"] for r in measured)
    return {
        "mode": mode,
        "runs": runs,
        "p50_s": round(timed[(len(timed) - 1) // 2], 2),
        "worst_s": round(timed[-1], 2),
        "wire_kb": round(results[-1]["wire"] / 1e3, 1),
        "peak_rss_mb": round(max(r["rss"] for r in measured)),
        "held_gpu_hours": results[-1].get("held"),
        "idle_gpu_hours": results[-1].get("idle"),
        "rollup_hours": results[-1].get("rollup_h"),
    }


def _load(url: str, layout: Layout) -> dict[str, float]:
    stats = ImportStats()
    t0 = time.perf_counter()
    samples = 0

    def counted() -> Iterator[Series]:
        nonlocal samples
        for s in fleet(layout):
            samples += len(s.timestamps)
            yield s

    import_json_lines(url, json_line_chunks(counted()), stats)
    merged = wait_for_merges(url)
    return {"import_s": round(time.perf_counter() - t0, 1), "samples": samples, "merges_s": round(merged, 1)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, default=10_000)
    p.add_argument("--days", type=int, default=30)
    p.add_argument("--step", default="60s")
    p.add_argument("--owner-step", default="15m")
    p.add_argument("--baseline-step", default="15m")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--warmups", type=int, default=1)
    p.add_argument("--variants", default="rollups,rollups -6h,baseline", help="comma-separated")
    p.add_argument("--json", type=Path)
    p.add_argument("--child")
    p.add_argument("--url")
    args = p.parse_args()
    step = parse_duration(args.step).total_seconds()
    if args.child:
        print(json.dumps(run_child(args.child, args.url, args.days, step)))
        return
    owner_step = parse_duration(args.owner_step).total_seconds()
    base_step = parse_duration(args.baseline_step).total_seconds()
    end = END.timestamp()
    start = end - args.days * DAY
    plans = [
        ("rollups", ours_layout(args.gpus, args.days, step, end, owner_step), step),
        ("rollups -6h", ours_layout(args.gpus, args.days, step, end - 6 * HOUR, owner_step), step),
        ("baseline", Layout(args.gpus, args.days, base_step, ((start, end),), pod_meta=False), base_step),
    ]
    rows = []
    wanted = set(args.variants.split(","))
    for variant, layout, read_step in [p for p in plans if p[0] in wanted]:
        # No result cache: every run, warm-up or not, has the TSDB compute its answer afresh.
        cold = ("-search.disableCache",)
        with tempfile.TemporaryDirectory() as tmp, VictoriaMetricsServer(Path(tmp), cold) as server:
            loaded = _load(server.url, layout)
            print(json.dumps({"variant": variant, **loaded}), flush=True)
            mode = "baseline" if variant == "baseline" else "ours"
            row = {
                "variant": variant,
                **measure(mode, server.url, args.days, read_step, args.runs, args.warmups),
                **loaded,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
