"""Benchmark: the analyzer against a strong hand-written PromQL baseline, on a real TSDB.

For each fleet size and pod age, the fleet is simulated and imported into VictoriaMetrics (or
backfilled into Prometheus) once, a slice of nodes at a time (``bench_fleet``: memory stays bounded
at 10,000 GPUs × 7 days). Then, for each window over it, after one warm-up run each, ``--runs`` runs
of each approach, ours and strong taking turns, every run in its own process so that its peak RSS
is its own:

* ``ours``   — ``analyzer.pipeline.analyze`` with the Prometheus-backed source;
* ``strong`` — what a competent user writes with plain ``requests``: a dozen fleet-wide PromQL
  aggregates (avg/max/quantile/count_over_time, the stalled and busy shares, memory, owners, pod
  start times, CPU usage, limits and throttling), the same thresholds, simple rules per workload;
* ``tsdb``   — the queries ``ours`` sent, replayed in the same process right after it with the same
  concurrency and nothing decoded: the time the TSDB itself needs for them;
* ``read``   — the same queries again, all at once, each answer decoded (gunzip, then JSON into
  labels and numbers) and dropped: the TSDB's time plus reading the answers, no rounds;
* ``floor``  — the same queries once more, in ``ours``' observed order: each sent once every
  request that had answered before ``ours`` asked for it has answered again, each answer decoded
  and dropped, nothing analysed. An estimate of what asking in ``ours``' rounds and reading the
  answers costs: a request waits for every earlier answer, needed or not, so it can wait longer
  than the design must (``read`` waits for nothing).

The three replays run one after another right after ``ours``, so VictoriaMetrics' result cache
(on unless ``--vm-flag=-search.disableCache``) serves them as it served ``ours``' own run.

Each row reports wall time (p50 and p99 by nearest rank: with fewer than 100 runs the p99 is the
worst run), queries, bytes on the wire (gzip) and decoded, peak RSS (the worst run's), and how many
of the strong baseline's (kind, workload) verdicts agree with ours; a third table gives what
preparing each fleet cost. A run that fails (a query the TSDB refuses, a timeout) is recorded as a
failure and the benchmark goes on; when the warm-up run fails, that approach is not run again over
that window. Usage::

    python benchmarks/analyzer_bench.py [--sizes 100,1000] [--windows 6h,24h,7d] [--runs 5]
        [--step 15s[,10000=60s]] [--tsdb victoriametrics|prometheus] [--vm-flag=-FLAG[=VALUE]]
        [--prepare-only] [--json results.json]

``--windows`` takes ``WINDOW`` or ``WINDOW/AGE`` (pods ``AGE`` old at the end; default a day,
or the window itself when longer, which puts every pod's warm-up inside the window). ``--step``
is the GPU scrape step, per fleet size if given as ``GPUS=STEP`` (Kubernetes and cAdvisor series
are always every 60 s). ``--vm-flag`` passes a flag to VictoriaMetrics (none by default: the
benchmark runs on its default limits, and the table header names any flag given).
``--prepare-only`` builds and imports the fleets and reports what that cost, nothing else.
Needs the Debian ``victoria-metrics`` (or ``prometheus`` and ``promtool``) binaries.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, TypeVar

import msgspec
import requests

ROOT = Path(__file__).resolve().parents[1]
# The repository root first (tests/analyzer must not shadow the package), then the test harness
# and this directory (bench_fleet).
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import strong_baseline  # noqa: E402
from bench_fleet import (  # noqa: E402
    END,
    SLICE_SAMPLES,
    ClusterSplit,
    ImportStats,
    SliceStats,
    import_json_lines,
    json_line_chunks,
    sliced_fleet,
    wait_for_merges,
)

from analyzer.pipeline import analyze, analyze_in_detail  # noqa: E402
from analyzer.sources import pacing, prometheus_api  # noqa: E402
from analyzer.sources.pacing import AdaptiveLimit  # noqa: E402
from analyzer.sources.prometheus.source import PrometheusSource  # noqa: E402
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig, PrometheusSession  # noqa: E402
from common.model import FindingKind, FindingsReport, TimeWindow, WorkloadRef  # noqa: E402
from common.thresholds import Thresholds  # noqa: E402
from common.timeutil import parse_duration  # noqa: E402
from simulation.fleet import Expected, score, write_openmetrics  # noqa: E402

if TYPE_CHECKING:
    from harness.servers import PrometheusServer, VictoriaMetricsServer

DEFAULT_STEP = timedelta(seconds=15)

# VictoriaMetrics' default -search.maxPointsPerTimeseries, which also bounds each series of a
# subquery: 7 days at 15 s are 40,320 points.
# A run, and a fleet's preparation (10,000 GPUs × 7 days is most of an hour on two busy cores).
CHILD_TIMEOUT_S = 3600
PREPARE_TIMEOUT_S = 4 * 3600


# --- the two approaches, each run in a child process -----------------------------------------------


class _Asked(threading.local):
    """When ours asked for the request this thread sends next: a pool call's batch was submitted
    then, a call on the caller's own thread began then (before waiting for a place in flight)."""

    at: float | None = None


ASKED = _Asked()
T = TypeVar("T")
R = TypeVar("R")


@contextmanager
def noting_asks() -> Iterator[None]:
    """Pool calls carry the time their batch was submitted to the thread that runs them."""
    submit_all = pacing.submit_all

    def noted_submit_all(limit: AdaptiveLimit, call: Callable[[T], R], items: Sequence[T]) -> list[Future[R]]:
        asked = time.perf_counter()

        def noted(item: T) -> R:
            ASKED.at = asked
            return call(item)

        return submit_all(limit, noted, items)

    # pacing.run_all looks the name up in its module, the client in its own.
    pacing.submit_all = prometheus_api.submit_all = noted_submit_all
    try:
        yield
    finally:
        pacing.submit_all = prometheus_api.submit_all = submit_all


class NotingClient(PrometheusClient):
    """Marks a request made on the caller's own thread as asked for when the call began."""

    def _ask(self, what: str, call: Callable[..., T], *args: Any) -> T:
        if ASKED.at is None:
            ASKED.at = time.perf_counter()
        try:
            return super()._ask(what, call, *args)
        finally:
            ASKED.at = None


class Call(NamedTuple):
    """One request ours sent, and when (``time.perf_counter``) it was asked for and answered."""

    verb: str
    url: str
    params: dict[str, str]
    asked: float
    answered: float


class NotingSession(PrometheusSession):
    """Writes down every request ours sends, for the replays: to a file, so that keeping thousands
    of query texts does not count in ours' peak RSS."""

    def __init__(self, log: IO[str]) -> None:
        super().__init__()
        self.log = log
        self._lock = threading.Lock()  # queries go out from several threads; a text file is not safe

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        sent = time.perf_counter()
        asked = sent if ASKED.at is None else ASKED.at
        try:
            return super().request(method, url, *args, **kwargs)
        finally:
            # Also when the client's hooks refuse the answer (a probe the server rejects): it was
            # counted, so it is replayed.
            answered = time.perf_counter()
            params = kwargs.get("params") or kwargs.get("data") or {}
            verb = method.decode() if isinstance(method, bytes) else method
            call = [verb, str(url), {str(k): str(v) for k, v in dict(params).items()}, asked, answered]
            with self._lock:
                self.log.write(json.dumps(call) + "\n")


def run_ours(
    url: str, window: TimeWindow, step: timedelta, whole: bool = False, in_detail: bool = False
) -> dict[str, Any]:
    """``whole``: the findings whole (every field, for comparing two runs') and no replays.
    ``in_detail``: ``analyze_in_detail``, which ``gpu-analyzer analyze`` runs (it keeps every
    cluster's whole analysis for the plots), rather than ``analyze``."""
    del step  # ours finds the scrape interval itself
    with tempfile.TemporaryFile("w+") as log, noting_asks():
        session = NotingSession(log)
        config = PrometheusConfig(url, timeout_s=600)
        client = NotingClient(config, session=session)
        start = time.perf_counter()
        source = PrometheusSource(client)
        if in_detail:
            report = analyze_in_detail(source, window, Thresholds(), now=window.end).report
        else:
            report = analyze(source, window, Thresholds(), now=window.end)
        wall = time.perf_counter() - start
        stats = client.stats
        result = _result(report, wall, stats.requests, stats.wire_bytes, stats.body_bytes, whole)
        if whole:
            return result
        log.seek(0)
        calls = [Call(*json.loads(line)) for line in log]
        if len(calls) != stats.requests:
            raise RuntimeError(f"replay log holds {len(calls)} requests, ours sent {stats.requests}")
        result["tsdb_s"] = replay(calls, config.concurrency)
        result["read_s"] = replay(calls, config.concurrency, decode=True)
        result["floor_s"] = floor(calls, config.concurrency)
    return result


def _gzip_session() -> requests.Session:
    """A plain session asking for gzip, as ours does."""
    http = requests.Session()
    http.headers["Accept-Encoding"] = "gzip"
    return http


def _send(http: requests.Session, call: Call) -> requests.Response:
    if call.verb.upper() == "POST":
        return http.post(call.url, data=call.params, stream=True, timeout=600)
    return http.get(call.url, params=call.params, stream=True, timeout=600)


def replay(calls: list[Call], concurrency: int, decode: bool = False) -> float:
    """The same requests, as many at once as ours allowed, bodies read raw and never decoded
    (``decode``: each decoded and dropped).

    Requests that depended on earlier answers went out later in ours too; replaying them all
    through one pool gives the TSDB's own time, a lower bound for any client.
    """
    with _gzip_session() as http:

        def one(call: Call) -> None:
            response = _send(http, call)
            if decode:
                _decoded(response)  # and dropped, as the floor drops it
            else:
                response.raw.read(decode_content=False)

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(one, calls))
        return time.perf_counter() - start


class _Item(msgspec.Struct, gc=False):
    metric: dict[str, str]
    value: tuple[float, float] | None = None  # an instant vector's sample
    values: list[tuple[float, float]] | None = None  # a range selector's samples


class _Data(msgspec.Struct, gc=False):
    result: list[_Item]


class _Answer(msgspec.Struct, gc=False):
    data: _Data


# Lax: the API writes numbers as strings. Label and status answers do not fit and are decoded plainly.
_answers = msgspec.json.Decoder(_Answer, strict=False)


def _decoded(response: requests.Response) -> object:
    raw = response.raw.read(decode_content=False)
    zipped = response.headers.get("Content-Encoding", "").strip().lower() in ("gzip", "x-gzip")
    body = gzip.decompress(raw) if zipped else raw
    try:
        return _answers.decode(body)
    except msgspec.ValidationError:  # another shape (labels, build info), or "+Inf"
        return msgspec.json.decode(body)


def floor(calls: list[Call], concurrency: int) -> float:
    """The same requests, each sent once every request that answered before ours asked for it has
    answered here, as many at once as ours allowed, each answer decoded and then dropped.

    No Python of ours runs between the rounds: from ``tsdb`` to this is about what asking in
    ``ours``' rounds and reading the answers costs; from this to ``ours``, what analysing them
    costs (and ours' own reading, in its client, beyond this plain decoding).
    """
    waits_for = [{j for j, other in enumerate(calls) if other.answered < call.asked} for call in calls]
    pending = sorted(range(len(calls)), key=lambda i: calls[i].asked)
    done: set[int] = set()
    with _gzip_session() as http, ThreadPoolExecutor(max_workers=concurrency) as pool:
        start = time.perf_counter()
        out: dict[Future[object], int] = {}
        while pending or out:
            ready = [i for i in pending if waits_for[i] <= done]
            pending = [i for i in pending if i not in ready]
            out |= {pool.submit(lambda c: _decoded(_send(http, c)), calls[i]): i for i in ready}
            # Each request was answered after it was asked for, so the earliest asked of those
            # pending waits only for requests done or out.
            assert out, "replay order has a cycle"
            finished, _ = wait(out, return_when=FIRST_COMPLETED)
            for f in finished:
                f.result()
                done.add(out.pop(f))
        return time.perf_counter() - start


def run_strong(url: str, window: TimeWindow, step: timedelta) -> dict[str, Any]:
    result = strong_baseline.run(
        url, strong_baseline.Window(window.start.timestamp(), window.end.timestamp()), step
    )
    return result | {"peak_rss_mb": peak_rss_mb()}


def _result(
    report: FindingsReport, wall: float, queries: int, wire: int, body: int, whole: bool = False
) -> dict[str, Any]:
    """A run's figures and findings: in short, or ``whole`` (each finding's JSON less its window)."""
    if whole:
        findings: list[Any] = [f.model_dump(mode="json", exclude={"window"}) for f in report.findings]
    else:
        findings = sorted(
            [f.kind.value, f.workload.namespace, f.workload.kind, f.workload.name, list(f.pods), list(f.gpus)]
            for f in report.findings
        )
    return {
        "wall_s": wall,
        "requests": queries,
        "body_bytes": body,
        "wire_bytes": wire,
        "peak_rss_mb": peak_rss_mb(),
        "verdicts": sorted([f.kind.value, f.workload.key()] for f in report.findings),
        "findings": findings,
    }


def peak_rss_mb(pid: int | str = "self") -> float:
    """Peak resident memory of a process since it started (exec).

    Not ``getrusage().ru_maxrss``: for a child started with vfork that also counts the parent's
    memory from before the exec.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- preparing a fleet, in a child process of its own ------------------------------------------------


def run_prepare(
    tsdb: str,
    target: str,
    gpus: int,
    windows: list[timedelta],
    age: timedelta,
    step: timedelta,
    slice_samples: int,
    split: ClusterSplit | None = None,
) -> dict[str, Any]:
    """Simulate the fleet a slice at a time into ``target``: a VictoriaMetrics URL, or a directory
    that receives Prometheus blocks. Returns the cost and the ground truth of each window."""
    stats, imported = SliceStats(), ImportStats()
    start = time.perf_counter()
    series = sliced_fleet(gpus, windows, age, step, stats, slice_samples, split)
    tool_rss = 0.0
    if tsdb == "victoriametrics":
        import_json_lines(target, json_line_chunks(series), imported)
    else:
        backfill(series, Path(target))
        tool_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    wall = time.perf_counter() - start
    return {
        "prepare_s": wall,
        "simulate_s": stats.simulate_s,
        "encode_s": wall - stats.simulate_s - imported.wait_s - imported.flush_s,
        "wait_s": imported.wait_s,
        "flush_s": imported.flush_s,
        "samples": stats.samples,
        "series": stats.series,
        "slices": stats.slices,
        "peak_rss_mb": peak_rss_mb(),
        "promtool_peak_rss_mb": tool_rss,
        "truth": {
            str(int(seconds)): [
                [e.kind.value if e.kind else None, ref.key(), e.why] for ref, e in truth.items()
            ]
            for seconds, truth in stats.truth.items()
        },
    }


def backfill(series: Any, blocks: Path) -> None:
    """OpenMetrics → TSDB blocks, in 24 h blocks: promtool re-reads its input once per block."""
    from harness.binaries import require_binary  # pytest comes with it: only where it is needed

    promtool = require_binary("promtool")
    blocks.parent.mkdir(parents=True, exist_ok=True)
    source = blocks.parent / "fleet.om"
    with source.open("w", encoding="utf-8") as fh:
        write_openmetrics(series, fh)
    try:
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
    finally:
        source.unlink()


# --- orchestration -------------------------------------------------------------------------------


def child(mode: str, args: list[str]) -> dict[str, Any]:
    """One run in its own process: its result, or ``{"error": ...}`` when it failed."""
    timeout = PREPARE_TIMEOUT_S if mode == "prepare" else CHILD_TIMEOUT_S
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{mode}: no answer after {timeout} s"}
    if out.returncode != 0:
        return {"error": f"{mode}: {_last_exception(out.stderr) or f'exit {out.returncode}'}"}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _last_exception(stderr: str) -> str:
    """The traceback's final ``module.Error: message`` line, without the module path."""
    lines = [line for line in stderr.splitlines() if re.match(r"^[\w.]+(Error|Exception)\b.*?:", line)]
    if not lines:
        return stderr.strip()[-500:]
    name, _, message = lines[-1].partition(": ")
    # The TSDB quotes the whole PromQL text, maybe twice, and it can be long (regexes of GPU
    # UUIDs): the reason comes after it.
    message = re.sub(r'"(?:[^"\\]|\\.)*"', lambda m: m[0] if len(m[0]) <= 80 else '"…"', message)
    return f"{name.rsplit('.', 1)[-1]}: {message}"[:1000]


def nearest_rank(values: list[float], p: float) -> float:
    """The p-th percentile by nearest rank: a value that occurred (p99 of fewer than 100 is the max)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summarize(runs: list[dict[str, Any]], warmup: dict[str, Any]) -> dict[str, Any]:
    """p50/p99 of the runs that succeeded; ``error`` when any run (or the warm-up) failed."""
    ok = [r for r in runs if "error" not in r]
    failed = [r["error"] for r in [warmup, *runs] if "error" in r]
    out: dict[str, Any] = {"runs": len(ok), "failed_runs": len(failed)}
    if failed:
        out["error"] = failed[0]
    if not ok:
        return out
    walls = [r["wall_s"] for r in ok]
    out |= {"wall_p50_s": nearest_rank(walls, 50), "wall_p99_s": nearest_rank(walls, 99), "wall_s": walls}
    rss = [r["peak_rss_mb"] for r in ok]
    out |= {"peak_rss_p50_mb": nearest_rank(rss, 50), "peak_rss_p99_mb": nearest_rank(rss, 99)}
    for replayed in ("tsdb", "read", "floor"):
        if f"{replayed}_s" in ok[0]:
            times = [r[f"{replayed}_s"] for r in ok]
            p50, p99 = nearest_rank(times, 50), nearest_rank(times, 99)
            out |= {f"{replayed}_p50_s": p50, f"{replayed}_p99_s": p99, f"{replayed}_s": times}
    for key in ("requests", "wire_bytes", "body_bytes"):
        out[key] = [min(r[key] for r in ok), max(r[key] for r in ok)]
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ok)
    out["verdicts"] = ok[0]["verdicts"]
    out["verdicts_stable"] = all(r["verdicts"] == ok[0]["verdicts"] for r in ok)
    if "subquery_step_s" in ok[0]:
        out["subquery_step_s"] = ok[0]["subquery_step_s"]
    if "findings" in ok[0]:
        out["findings"] = ok[0]["findings"]
    return out


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / (1 << 20)


def bench(
    gpus: int,
    age: timedelta,
    step: timedelta,
    windows: list[timedelta],
    options: argparse.Namespace,
    workdir: Path,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One fleet, prepared once, analyzed over each of ``windows``.

    Returns the fleet's preparation cost and one result per window.
    """
    from harness.servers import PrometheusServer, VictoriaMetricsServer

    label = f"{gpus}-{int(age.total_seconds())}-{int(step.total_seconds())}"
    fleet = fleet_figures(gpus, age, step, windows, options)
    prepare_args = prepare_arguments(gpus, age, step, windows, options)
    server: PrometheusServer | VictoriaMetricsServer
    if options.tsdb == "prometheus":
        blocks = workdir / f"backfill-{label}" / "blocks"
        prep = child("prepare", [*prepare_args, "--target", str(blocks)])
        if "error" in prep:
            return fleet | {"prepare": prep}, []
        server = PrometheusServer(workdir / f"tsdb-{label}", blocks=blocks)
    else:
        server = VictoriaMetricsServer(workdir / f"tsdb-{label}", extra_args=options.vm_flag)
    results = []
    with server:
        if isinstance(server, VictoriaMetricsServer):
            prep = import_into(server, prepare_args)
            if "error" in prep:
                return fleet | {"prepare": prep}, []
        prep |= tsdb_footprint(server)
        truths = prep.pop("truth")
        fleet["prepare"] = prep
        print(f"prepared {label}: {json.dumps(prep)}", file=sys.stderr, flush=True)
        if not options.prepare_only:
            for window in windows:
                truth = window_truth(truths, window)
                results.append(analyze_window(server.url, gpus, window, age, step, truth, options.runs))
                if options.process:
                    results[-1]["process"] = whole_processes(server.url, window, step, options.runs)
                results[-1] |= {"tsdb": options.tsdb, "vm_flags": options.vm_flag}
        fleet["tsdb_peak_rss_mb"] = peak_rss_mb(server.pid) if server.pid else None
    shutil.rmtree(workdir, ignore_errors=True)
    return fleet, results


def fleet_figures(
    gpus: int, age: timedelta, step: timedelta, windows: list[timedelta], options: argparse.Namespace
) -> dict[str, Any]:
    """What a fleet's row says before it is prepared."""
    return {
        "gpus": gpus,
        "age_s": age.total_seconds(),
        "step_s": step.total_seconds(),
        "windows_s": [w.total_seconds() for w in windows],
        "tsdb": options.tsdb,
        "vm_flags": options.vm_flag,
    }


def prepare_arguments(
    gpus: int, age: timedelta, step: timedelta, windows: list[timedelta], options: argparse.Namespace
) -> list[str]:
    """The preparing child's arguments, but for its target."""
    return [
        "--tsdb",
        options.tsdb,
        "--shape",
        str(gpus),
        "0",
        str(int(age.total_seconds())),
        str(int(step.total_seconds())),
        "--windows-s",
        ",".join(str(int(w.total_seconds())) for w in windows),
        "--slice-samples",
        str(options.slice_samples),
    ]


def import_into(server: VictoriaMetricsServer, prepare_args: list[str]) -> dict[str, Any]:
    """Prepare a fleet into a running VictoriaMetrics and wait for its merges to end."""
    prep = child("prepare", [*prepare_args, "--target", server.url])
    if "error" not in prep:
        prep["merge_wait_s"] = wait_for_merges(server.url)
    return prep


def tsdb_footprint(server: PrometheusServer | VictoriaMetricsServer) -> dict[str, Any]:
    """The TSDB's peak RSS so far and its data on disk."""
    return {
        "tsdb_peak_rss_mb": peak_rss_mb(server.pid) if server.pid else None,
        "tsdb_data_mb": dir_mb(server.workdir),
    }


def window_truth(truths: dict[str, Any], window: timedelta) -> dict[WorkloadRef, Expected]:
    """A window's ground truth, as the preparing child wrote it."""
    return {
        _ref(key): Expected(_ref(key), FindingKind(kind) if kind else None, why)
        for kind, key, why in truths[str(int(window.total_seconds()))]
    }


def analyze_window(
    url: str,
    gpus: int,
    window: timedelta,
    age: timedelta,
    step: timedelta,
    truth: dict[WorkloadRef, Expected],
    runs: int,
) -> dict[str, Any]:
    """Ours and strong over one window: a warm-up run each, then ``runs`` runs each, taking turns."""
    shape = [str(int(x)) for x in (gpus, window.total_seconds(), age.total_seconds(), step.total_seconds())]
    run_args = ["--url", url, "--shape", *shape]
    # One warm-up run each, so that neither pays for the first disk reads; then ours and strong
    # take turns, so that a busy spell on the shared machine hits both alike.
    warm = {mode: child(mode, run_args) for mode in ("ours", "strong")}
    done: dict[str, list[dict[str, Any]]] = {"ours": [], "strong": []}
    for _ in range(runs):
        for mode in ("ours", "strong"):
            if "error" not in warm[mode]:
                done[mode].append(child(mode, run_args))
    ours, strong = summarize(done["ours"], warm["ours"]), summarize(done["strong"], warm["strong"])
    result: dict[str, Any] = {
        "gpus": gpus,
        "window_s": window.total_seconds(),
        "age_s": age.total_seconds(),
        "step_s": step.total_seconds(),
        "ours": ours,
        "strong": strong,
        "expected": len(truth),
    }
    if "verdicts" in ours:
        found = {_ref(key): FindingKind(kind) for kind, key in ours["verdicts"]}
        result["scores"] = {k.value: v[:2] for k, v in score(truth, found).items()}
        result["findings"] = len(ours["verdicts"])
        if "verdicts" in strong:
            result["strong_agrees"] = len(
                {tuple(v) for v in ours["verdicts"]} & {tuple(v) for v in strong["verdicts"]}
            )
            result["strong_findings"] = len(strong["verdicts"])
    for side in (ours, strong):
        side.pop("verdicts", None)
    return result


def whole_processes(url: str, window: timedelta, step: timedelta, runs: int) -> dict[str, Any]:
    """Whole processes, start-up included, taking turns after a warm-up each: ``gpu-analyzer
    analyze`` (JSON to a file, as a CronJob would write it) against the strong baseline run as its
    own script (``strong_baseline.py``, which imports nothing of ours)."""
    span = TimeWindow.ending(END, window)
    cli = Path(sys.executable).with_name("gpu-analyzer")
    ours_cmd = [str(cli)] if cli.exists() else [sys.executable, "-m", "analyzer"]
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            "ours": [
                *ours_cmd,
                "analyze",
                "--prometheus-url",
                url,
                "--window",
                f"{int(window.total_seconds())}s",
                "--end",
                span.end.isoformat(),
                "--format",
                "json",
                "--output",
                str(Path(tmp) / "findings.json"),
            ],
            "strong": [
                sys.executable,
                str(ROOT / "benchmarks" / "strong_baseline.py"),
                url,
                str(span.start.timestamp()),
                str(span.end.timestamp()),
                str(step.total_seconds()),
            ],
        }

        def timed(side: str) -> float:
            started = time.perf_counter()
            done = subprocess.run(commands[side], capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
            wall = time.perf_counter() - started
            if done.returncode != 0:
                raise RuntimeError(f"{side}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
            return wall

        for side in commands:  # warm-up: first disk reads, the interpreter's caches
            timed(side)
        walls: dict[str, list[float]] = {"ours": [], "strong": []}
        for _ in range(runs):
            for side in commands:
                walls[side].append(timed(side))
        findings = json.loads((Path(tmp) / "findings.json").read_text())["findings"]
    return {
        side: {"wall_p50_s": nearest_rank(w, 50), "wall_p99_s": nearest_rank(w, 99), "wall_s": w}
        for side, w in walls.items()
    } | {"findings": len(findings)}


# --- output ----------------------------------------------------------------------------------------


def _span(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 86400:g} d" if s % 86400 == 0 and s >= 86400 * 2 else f"{s / 3600:g} h"


def _case(r: dict[str, Any]) -> str:
    text = f"{_span(r['window_s'])} ({_span(r['age_s'])})"
    return text if r["step_s"] == DEFAULT_STEP.total_seconds() else f"{text} @{r['step_s']:g} s"


def _short(error: str, limit: int = 200) -> str:
    """An error for a table cell: one line, no pipes, at most about ``limit`` characters.

    Its start (what failed) and its end (the TSDB's reason) are kept; ``--json`` keeps it whole.
    """
    text = " ".join(error.replace("|", "/").split())
    head = limit // 3
    return text if len(text) <= limit else f"{text[:head]} … {text[-(limit - head) :]}"


def wall_cells(x: dict[str, Any], cells: int) -> str:
    """A side's wall p50 (and how many runs failed) and p99 cells; or, where every run failed, why,
    and as many empty cells as a row has ``cells`` after its head."""
    if "wall_p50_s" not in x:
        return f"failed: {_short(x.get('error', ''))}" + " |" * (cells - 1)
    note = f" ({x['failed_runs']} failed)" if x["failed_runs"] else ""
    return f"{x['wall_p50_s']:.2f}{note} | {x['wall_p99_s']:.2f}"


def _range(pair: list[int]) -> str:
    lo, hi = pair
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


def _s(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _ratio(ours: dict[str, Any], replayed: str) -> str:
    """A replay's p50 over the TSDB's (blank for results written before that replay existed)."""
    value = ours.get(f"{replayed}_p50_s")
    return "" if value is None else f"{value / ours['tsdb_p50_s']:.2f}"


def process_table(results: list[dict[str, Any]]) -> str:
    """Whole processes, where ``--process`` timed them."""
    rows = [r for r in results if "process" in r]
    if not rows:
        return ""
    lines = [
        "",
        "Whole processes, start-up included (gpu-analyzer analyze --format json against the baseline "
        "script), taking turns:",
        "",
        "| GPUs | window | ours p50 s | ours p99 s | strong p50 s | strong p99 s | ours ÷ strong p50 | p99 |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        ours, strong = r["process"]["ours"], r["process"]["strong"]
        p50, p99 = ours["wall_p50_s"] / strong["wall_p50_s"], ours["wall_p99_s"] / strong["wall_p99_s"]
        lines.append(
            f"| {r['gpus']:,} | {r['window_s'] / 3600:g} h "
            f"| {ours['wall_p50_s']:.2f} | {ours['wall_p99_s']:.2f} "
            f"| {strong['wall_p50_s']:.2f} | {strong['wall_p99_s']:.2f} | {p50:.2f} | {p99:.2f} |"
        )
    return "\n".join(lines)


def table(fleets: list[dict[str, Any]], results: list[dict[str, Any]], runs: int) -> str:
    first = fleets[0]
    flags = ", flags " + " ".join(first["vm_flags"]) if first["vm_flags"] else ", default limits"
    steps = sorted({f["step_s"] for f in fleets})
    lines = [
        f"{first['tsdb']}{flags if first['tsdb'] == 'victoriametrics' else ''}; GPU samples every "
        f"{' / '.join(f'{s:g}' for s in steps)} s, Kubernetes and cAdvisor every 60 s; "
        f"{runs} run{'s' if runs != 1 else ''} of each after a warm-up, p50 and p99 by nearest rank; "
        "peak RSS is the worst run's.",
        "",
    ]
    if results:
        lines += [
            f"| GPUs | window (pod age) | run | wall p50 s | wall p99 (worst of {runs}) s | TSDB p50 s "
            "| TSDB p99 s | read p50 s | floor p50 s | queries | wire bytes | decoded bytes | peak RSS MiB |",
            "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in results:
            for name in ("ours", "strong"):
                x = r[name]
                head = f"| {r['gpus']:,} | {_case(r)} | {name} |"
                walls = wall_cells(x, 10)
                if "wall_p50_s" not in x:
                    lines.append(f"{head} {walls} |")
                    continue
                lines.append(
                    f"{head} {walls} | {_s(x.get('tsdb_p50_s'))} "
                    f"| {_s(x.get('tsdb_p99_s'))} | {_s(x.get('read_p50_s'))} | {_s(x.get('floor_p50_s'))} "
                    f"| {_range(x['requests'])} "
                    f"| {_range(x['wire_bytes'])} | {_range(x['body_bytes'])} | {x['peak_rss_mb']:.0f} |"
                )
        lines += [
            "",
            "| GPUs | window (pod age) | ours ÷ strong p50 | ours ÷ TSDB p50 | read ÷ TSDB p50 "
            "| floor ÷ TSDB p50 | wire bytes / 1,000 GPUs | strong agrees "
            "| precision/recall (ours vs ground truth) |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in results:
            o, s = r["ours"], r["strong"]
            if "wall_p50_s" not in o:
                lines.append(f"| {r['gpus']:,} | {_case(r)} | ours failed | | | | | | |")
                continue
            vs_strong = f"{o['wall_p50_s'] / s['wall_p50_s']:.2f}" if "wall_p50_s" in s else "strong failed"
            agrees = f"{r['strong_agrees']}/{r['findings']}" if "strong_agrees" in r else ""
            pr = ", ".join(f"{k} {p:.2f}/{rc:.2f}" for k, (p, rc) in sorted(r["scores"].items()))
            lines.append(
                f"| {r['gpus']:,} | {_case(r)} | {vs_strong} | {o['wall_p50_s'] / o['tsdb_p50_s']:.2f} "
                f"| {_ratio(o, 'read')} | {_ratio(o, 'floor')} "
                f"| {o['wire_bytes'][1] * 1000 / r['gpus']:,.0f} | {agrees} | {pr} |"
            )
        lines.append("")
    return "\n".join([*lines, prepare_table(fleets)])


def prepare_table(fleets: list[dict[str, Any]]) -> str:
    """What preparing each fleet cost (a fleet's ``variant``, when it has one, follows its age)."""
    lines = [
        "| GPUs | pod age (windows) | samples | slices | prepare s (simulate / encode / TSDB-bound) "
        "| prepare peak RSS MiB | TSDB peak RSS MiB | TSDB data MiB |",
        "| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for f in fleets:
        p = f["prepare"]
        case = f"{_span(f['age_s'])} ({', '.join(_span(w) for w in f['windows_s'])})"
        if f["step_s"] != DEFAULT_STEP.total_seconds():
            case += f" @{f['step_s']:g} s"
        if "variant" in f:
            case += f", {f['variant']}"
        if "error" in p:
            lines.append(f"| {f['gpus']:,} | {case} | failed: {_short(p['error'])} | | | | | |")
            continue
        bound = p["wait_s"] + p["flush_s"] + p.get("merge_wait_s", 0.0)
        total = p["prepare_s"] + p.get("merge_wait_s", 0.0)
        split = f"{total:.0f} ({p['simulate_s']:.0f} / {p['encode_s']:.0f} / {bound:.0f})"
        tool = f" (promtool {p['promtool_peak_rss_mb']:.0f})" if p["promtool_peak_rss_mb"] else ""
        tsdb_rss = max(p["tsdb_peak_rss_mb"] or 0, f.get("tsdb_peak_rss_mb") or 0)
        lines.append(
            f"| {f['gpus']:,} | {case} | {p['samples']:,} | {p['slices']} | {split} "
            f"| {p['peak_rss_mb']:.0f}{tool} | {tsdb_rss:.0f} | {p['tsdb_data_mb']:.1f} |"
        )
    return "\n".join(lines)


def _ref(key: str) -> WorkloadRef:
    namespace, kind, name = key.split("/", 2)
    return WorkloadRef(kind=kind, name=name, namespace=namespace)


def _window(text: str) -> tuple[timedelta, timedelta]:
    window, _, age = text.partition("/")
    w = parse_duration(window)
    return w, parse_duration(age) if age else max(w, timedelta(hours=24))


def _steps(text: str) -> tuple[timedelta, dict[int, timedelta]]:
    """``15s`` or ``15s,10000=60s``: the default GPU scrape step, and per fleet size."""
    default, per = DEFAULT_STEP, {}
    for part in text.split(","):
        size, eq, step = part.partition("=")
        if eq:
            per[int(size)] = parse_duration(step)
        else:
            default = parse_duration(part)
    return default, per


def _shape(values: list[str]) -> tuple[int, TimeWindow, timedelta, timedelta, timedelta]:
    gpus, window_s, age_s, step_s = (int(v) for v in values)
    window = timedelta(seconds=window_s)
    return gpus, TimeWindow.ending(END, window), window, timedelta(seconds=age_s), timedelta(seconds=step_s)


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    if args.child == "prepare":
        gpus, _, age_s, step_s = (int(v) for v in args.shape)
        windows = [timedelta(seconds=int(w)) for w in args.windows_s.split(",")]
        age, step = timedelta(seconds=age_s), timedelta(seconds=step_s)
        split = ClusterSplit(args.clusters, not args.merged) if args.clusters else None
        return run_prepare(args.tsdb, args.target, gpus, windows, age, step, args.slice_samples, split)
    _, span, _, _, step = _shape(args.shape)
    if args.child == "ours":
        return run_ours(args.url, span, step, whole=args.whole, in_detail=args.in_detail)
    return run_strong(args.url, span, step)


def add_options(parser: argparse.ArgumentParser, sizes: str, windows: str) -> None:
    """The options the analyzer's benchmarks share (``sizes`` and ``windows``: their defaults)."""
    parser.add_argument("--sizes", default=sizes, help="fleet sizes in GPUs, comma-separated")
    parser.add_argument("--windows", default=windows, help="WINDOW or WINDOW/AGE, comma-separated")
    parser.add_argument("--runs", type=int, default=5, help="measured runs after one warm-up (default 5)")
    parser.add_argument("--step", default="15s", help="GPU scrape step: 15s, or 15s,10000=60s per size")
    parser.add_argument(
        "--vm-flag", action="append", default=[], help="a VictoriaMetrics flag, written --vm-flag=-X=Y"
    )
    parser.add_argument(
        "--slice-samples", type=int, default=SLICE_SAMPLES, help="raw samples simulated at once"
    )
    parser.add_argument("--json", type=Path, help="write every figure (each run's) to this file")


Rows = tuple[list[dict[str, Any]], list[dict[str, Any]]]  # fleets prepared, results


def run_fleets(
    args: argparse.Namespace,
    prefix: str,
    one: Callable[[int, timedelta, timedelta, list[timedelta], Path], Rows],
    show: Callable[[list[dict[str, Any]], list[dict[str, Any]], int], str],
) -> Rows:
    """``one(gpus, age, step, windows, workdir)`` for each fleet size and pod age, in a temporary
    directory named ``prefix…``: windows over pods of the same age share one fleet, prepared once.
    Each fleet's rows (``show``) go to stderr as it ends, every figure so far to ``--json``."""
    default_step, steps = _steps(args.step)
    by_age: dict[timedelta, list[timedelta]] = {}
    for text in args.windows.split(","):
        window, age = _window(text)
        by_age.setdefault(age, []).append(window)
    fleets: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for gpus in (int(x) for x in args.sizes.split(",")):
            for age, windows in by_age.items():
                step = steps.get(gpus, default_step)
                workdir = Path(tmp) / f"{gpus}-{int(age.total_seconds())}"
                prepared, done = one(gpus, age, step, windows, workdir)
                fleets.extend(prepared)
                results.extend(done)
                print(show(prepared, done, args.runs).split("\n", 2)[2], file=sys.stderr, flush=True)
                if args.json:
                    args.json.write_text(json.dumps({"fleets": fleets, "results": results}, indent=2) + "\n")
    return fleets, results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_options(parser, sizes="100,1000", windows="6h,24h")
    parser.add_argument("--tsdb", choices=("victoriametrics", "prometheus"), default="victoriametrics")
    parser.add_argument("--prepare-only", action="store_true", help="build and import the fleets only")
    parser.add_argument(
        "--process",
        action="store_true",
        help="also time whole processes: gpu-analyzer analyze against the baseline script, start-up included",
    )
    parser.add_argument("--child", choices=("ours", "strong", "prepare"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--target", help=argparse.SUPPRESS)
    parser.add_argument("--shape", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--windows-s", help=argparse.SUPPRESS)
    # A fleet split into clusters (see clusters_bench.py): labelled, or merged into one cluster.
    parser.add_argument("--clusters", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--merged", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--in-detail", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args)))
        return 0
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    def one(gpus: int, age: timedelta, step: timedelta, windows: list[timedelta], workdir: Path) -> Rows:
        fleet, done = bench(gpus, age, step, windows, args, workdir)
        return [fleet], done

    fleets, results = run_fleets(args, "analyzer-bench-", one, table)
    print(table(fleets, results, args.runs))
    print(process_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
