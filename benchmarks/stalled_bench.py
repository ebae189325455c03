"""Benchmark: what the stalled-job round adds to an analysis, on a real VictoriaMetrics.

The benchmark fleet (``bench_fleet``) with board power and the enforced limit on every GPU, and a
data-parallel Job waiting on a checkpointing rank on one node in fifty, is imported once; then
``--runs`` analyses over the window with the stalled-job round and as many without it (its
candidates dropped: no waits counted, no raw samples read), taking turns so that a busy spell on
the shared machine hits both alike. VictoriaMetrics runs with ``-search.disableCache``: every run
pays the TSDB's whole work, as a run over a new window does.

Each side reports the p50 wall time, requests, bytes on the wire (gzip) and decoded, and the
samples VictoriaMetrics fetched for its queries (each query replayed once with ``trace=1``: the
sum of its "fetch unique series" samples, subqueries' fetches included), and the table gives the
stalled-job round's share as a ratio to the analysis without it. Usage::

    python benchmarks/stalled_bench.py [--gpus 10000] [--window 24h] [--step 15s] [--runs 3]
        [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from bench_fleet import (  # noqa: E402
    END,
    SLICE_SAMPLES,
    ImportStats,
    SliceStats,
    import_json_lines,
    json_line_chunks,
    sliced_fleet,
    wait_for_merges,
)

from analyzer.detection import stalled_job  # noqa: E402
from analyzer.pipeline import analyze  # noqa: E402
from analyzer.sources.prometheus.source import PrometheusSource  # noqa: E402
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig, PrometheusSession  # noqa: E402
from common.model import FindingKind, TimeWindow  # noqa: E402
from common.thresholds import Thresholds  # noqa: E402
from common.timeutil import parse_duration  # noqa: E402

_FETCHED = re.compile(r"fetch unique series=\d+, blocks=\d+, samples=(\d+)")


class NotingSession(PrometheusSession):
    """Keeps every query sent (verb, URL, parameters), for the traced replay."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        params = kwargs.get("params") or kwargs.get("data") or {}
        verb = method.decode() if isinstance(method, bytes) else method
        self.calls.append((verb, str(url), {str(k): str(v) for k, v in dict(params).items()}))
        return super().request(method, url, *args, **kwargs)


@contextmanager
def without_stalled_round() -> Iterator[None]:
    """No workload is a stalled-job candidate: the round asks nothing."""
    candidate = stalled_job.candidate
    stalled_job.candidate = lambda w, t: False  # type: ignore[assignment]
    try:
        yield
    finally:
        stalled_job.candidate = candidate  # type: ignore[assignment]


def samples_fetched(calls: list[tuple[str, str, dict[str, str]]]) -> int:
    """The samples VictoriaMetrics fetched answering ``calls`` (queries only), from its traces."""
    total = 0
    with requests.Session() as http:
        for verb, url, params in calls:
            if not url.endswith(("/api/v1/query", "/api/v1/query_range")):
                continue
            traced = params | {"trace": "1"}
            if verb.upper() == "POST":
                answer = http.post(url, data=traced, timeout=600)
            else:
                answer = http.get(url, params=traced, timeout=600)
            text = json.dumps(answer.json().get("trace", {}))
            total += sum(int(n) for n in _FETCHED.findall(text))
    return total


def one_run(url: str, window: TimeWindow, with_round: bool, traced: bool) -> dict[str, Any]:
    session = NotingSession()
    client = PrometheusClient(PrometheusConfig(url, timeout_s=600), session=session)
    start = time.perf_counter()
    if with_round:
        report = analyze(PrometheusSource(client), window, Thresholds(), now=window.end)
    else:
        with without_stalled_round():
            report = analyze(PrometheusSource(client), window, Thresholds(), now=window.end)
    wall = time.perf_counter() - start
    stats = client.stats
    out: dict[str, Any] = {
        "wall_s": wall,
        "requests": stats.requests,
        "wire_bytes": stats.wire_bytes,
        "body_bytes": stats.body_bytes,
        "stalled": sum(f.kind is FindingKind.STALLED_JOB for f in report.findings),
        "findings": len(report.findings),
    }
    if traced:
        out["samples_fetched"] = samples_fetched(session.calls)
    return out


def p50(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def main() -> int:
    from harness.servers import VictoriaMetricsServer

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--window", default="24h")
    parser.add_argument("--step", default="15s")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    window_len, step = parse_duration(args.window), parse_duration(args.step)
    window = TimeWindow.ending(END, window_len)
    with (
        tempfile.TemporaryDirectory() as tmp,
        VictoriaMetricsServer(Path(tmp) / "tsdb", extra_args=["-search.disableCache"]) as server,
    ):
        t0 = time.perf_counter()
        stats, imported = SliceStats(), ImportStats()
        series = sliced_fleet(args.gpus, [window_len], window_len, step, stats, SLICE_SAMPLES, power=True)
        import_json_lines(server.url, json_line_chunks(series), imported)
        wait_for_merges(server.url)
        prepared = {"prepare_s": time.perf_counter() - t0, "samples": stats.samples, "series": stats.series}
        print(f"prepared: {json.dumps(prepared)}", file=sys.stderr, flush=True)
        # A warm-up each (the first disk reads), then the runs taking turns; the first of each traced.
        runs: dict[str, list[dict[str, Any]]] = {"with": [], "without": []}
        for side in runs:
            one_run(server.url, window, side == "with", traced=False)
        for i in range(args.runs):
            for side in runs:
                runs[side].append(one_run(server.url, window, side == "with", traced=i == 0))
                print(f"{side}: {json.dumps(runs[side][-1])}", file=sys.stderr, flush=True)
    summary = {
        side: {
            "wall_s_p50": p50([r["wall_s"] for r in done]),
            **{k: done[0][k] for k in ("requests", "wire_bytes", "body_bytes", "samples_fetched", "stalled")},
        }
        for side, done in runs.items()
    }
    result = {"gpus": args.gpus, "window": args.window, "step": args.step, "prepare": prepared} | summary
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


def table(r: dict[str, Any]) -> str:
    rows = [
        ("wall time, p50 (s)", "wall_s_p50", "{:.2f}"),
        ("requests", "requests", "{:,}"),
        ("bytes on the wire", "wire_bytes", "{:,}"),
        ("bytes decoded", "body_bytes", "{:,}"),
        ("samples fetched by the TSDB", "samples_fetched", "{:,}"),
    ]
    lines = [
        f"{r['gpus']:,} GPUs × {r['window']} at {r['step']} (VictoriaMetrics, cache off)",
        "| | without the round | with it | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, key, fmt in rows:
        a, b = r["without"][key], r["with"][key]
        lines.append(f"| {name} | {fmt.format(a)} | {fmt.format(b)} | {b / a:.3f} |")
    lines.append(f"| stalled jobs found | {r['without']['stalled']} | {r['with']['stalled']} | |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
