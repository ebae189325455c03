"""A real Prometheus scrapes ``gpu-exporter --simulate …`` processes; values are read back through its
HTTP API. ``promtool check metrics`` lints the exposition. The throttling alert rules and node-dashboard
panels, read from their files, are evaluated against what this exporter serves."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.binaries import require_binary
from harness.grafana import BUILTINS, DASHBOARDS_DIR, interpolate, load, panels
from harness.rules import load_rules

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
#: Scenario → collection interval. Timings inside a scenario scale with it (see simulation.gpu_scenarios).
SCENARIOS = {"lost-gpu": 0.5, "sawtooth": 1.0, "mig": 0.5, "shared": 0.5, "throttled": 0.5}
#: What promtool says about names and labels that dcgm-exporter compatibility requires.
DCGM_COMPATIBILITY_LINTS = (
    "label names should be written in 'snake_case' not 'camelCase'",  # modelName
    "metric name should not include type 'counter'",  # DCGM_FI_DEV_PCIE_REPLAY_COUNTER
    'counter metrics should have "_total" suffix',  # DCGM's counters, typed as dcgm-exporter types them
)


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback http URLs built here
        return bytes(response.read())


@dataclass
class Target:
    scenario: str
    port: int
    process: subprocess.Popen[bytes]
    ready_at: float = 0.0  # Unix time of the first healthy response

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Prometheus:
    def __init__(self, port: int, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.process = process
        self.log = log

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        body = _get(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}")
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def metadata(self, metric: str) -> list[dict[str, str]]:
        """What Prometheus recorded of a family from its targets' ``# TYPE`` / ``# HELP`` lines."""
        body = _get(f"{self.url}/api/v1/metadata?{urllib.parse.urlencode({'metric': metric})}")
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return list(answer["data"].get(metric, []))

    def raw(self, selector: str, since: float, window: str = "2m") -> dict[str, list[tuple[float, float]]]:
        """Every scraped sample of ``selector`` at or after ``since``, by series (keyed by its labels)."""
        series = {}
        for result in self.query(f"{selector}[{window}]"):
            key = ",".join(f"{k}={v}" for k, v in sorted(result["metric"].items()) if k != "__name__")
            series[key] = [(float(t), float(v)) for t, v in result["values"] if float(t) >= since]
        return series

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.25)
        tail = self.log.read_text(errors="replace")[-2000:]
        raise AssertionError(f"timed out after {timeout}s waiting for {what}; prometheus log:\n{tail}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, dict[str, Target]]]:
    binary = require_binary("prometheus")
    workdir = tmp_path_factory.mktemp("prometheus")
    ports = {name: _free_port() for name in SCENARIOS}
    static = "\n".join(
        f"      - targets: ['127.0.0.1:{port}']\n        labels: {{scenario: {name}}}"
        for name, port in ports.items()
    )
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
        f"scrape_configs:\n  - job_name: gpu-exporter\n    static_configs:\n{static}\n"
    )
    prometheus_port = _free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
                "--log.level=warn",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    prometheus = Prometheus(prometheus_port, process, log)
    targets: dict[str, Target] = {}
    try:
        prometheus.wait_for(lambda: _ready(f"{prometheus.url}/-/ready"), 30, "prometheus to be ready")
        # Prometheus applies target changes a few seconds after start; exporters start once it is
        # scraping (their ports still closed), so every phase of their scenarios gets scraped.
        prometheus.wait_for(lambda: len(prometheus.query("up")) == len(ports), 30, "the first scrapes")
        for name, port in ports.items():
            command = [sys.executable, "-m", "exporter", "--simulate", name, "--listen", f"127.0.0.1:{port}"]
            command += ["--interval", str(SCENARIOS[name]), "--no-kubernetes", "--hostname", f"sim-{name}"]
            with (workdir / f"exporter-{name}.log").open("wb") as sink:
                targets[name] = Target(name, port, subprocess.Popen(command, cwd=ROOT, stderr=sink))
        for target in targets.values():
            prometheus.wait_for(
                lambda t=target: _ready(f"{t.url}/healthz"), 30, f"{target.scenario} exporter"
            )
            target.ready_at = time.time()
        yield prometheus, targets
    finally:
        for target in targets.values():
            target.process.terminate()
            target.process.wait(timeout=15)
        process.terminate()
        process.wait(timeout=15)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        _get(url, timeout=1)
    except OSError:
        return False
    return True


def test_lost_gpu_every_scrape_succeeds_and_the_gpu_comes_back(
    stack: tuple[Prometheus, dict[str, Target]],
) -> None:
    prometheus, targets = stack
    since = targets["lost-gpu"].ready_at
    lost = 'gpu_up{scenario="lost-gpu",gpu="1"}'

    def came_back() -> bool:
        values = [v for samples in prometheus.raw(lost, since).values() for _, v in samples]
        return 0.0 in values and values[-1] == 1.0 and values.index(0.0) > 0

    prometheus.wait_for(came_back, 30, "GPU 1 to be lost and come back")

    scrapes = prometheus.raw('up{scenario="lost-gpu"}', since)
    [up] = scrapes.values()
    assert up and all(v == 1.0 for _, v in up), "every scrape answered 200 with a parseable exposition"
    scrape_times = {t for t, _ in up}
    utilization = prometheus.raw('DCGM_FI_DEV_GPU_UTIL{scenario="lost-gpu"}', since)
    by_gpu = {
        key.split("gpu=")[1].split(",")[0]: {t for t, _ in samples} for key, samples in utilization.items()
    }
    for gpu in ("0", "2", "3"):
        assert scrape_times <= by_gpu[gpu], f"GPU {gpu} missing from some scrape"
    [gpu_up] = prometheus.raw(lost, since).values()
    down = {t for t, v in gpu_up if v == 0.0}
    assert down and not down & by_gpu["1"], "no utilization for the lost GPU while it is down"
    by_xid = 'gpu_xid_errors_total{scenario="lost-gpu",gpu="1",xid="79"}'
    assert prometheus.value(by_xid) == 1
    # The GPU's XID total was scraped at 0 before XID 79 came, so increase() counts the XID. The series
    # by XID begins at its first event, where increase() sees no rise: it alone would show nothing.
    total = 'gpu_xid_errors_total{scenario="lost-gpu",gpu="1",xid=""}'
    [history] = prometheus.raw(total, 0.0, window="10m").values()
    assert history[0][1] == 0 and history[-1][1] == 1
    assert 1 <= (prometheus.value(f"increase({total}[10m])") or 0) < 1.5
    assert prometheus.value(f"increase({by_xid}[10m])") == 0

    # dcgm-exporter's last-XID gauge, with its err_code / err_msg labels, stays while the GPU is down:
    # an alert on `DCGM_FI_DEV_XID_ERRORS == 79` (fallen off the bus) fires while gpu_up says 0.
    [xid] = prometheus.raw(
        'DCGM_FI_DEV_XID_ERRORS{scenario="lost-gpu",gpu="1",err_code="79"}', since
    ).values()
    xid_times = {t for t, v in xid if v == 79.0}
    down_with_xid = sorted(t for t in down if t >= min(xid_times))
    assert down_with_xid and set(down_with_xid) <= xid_times, "XID 79 served in every scrape while down"
    at = down_with_xid[len(down_with_xid) // 2]
    [alert] = prometheus.query('DCGM_FI_DEV_XID_ERRORS{scenario="lost-gpu"} == 79', at=at)
    assert alert["metric"]["gpu"] == "1" and alert["metric"]["err_code"] == "79"
    assert alert["metric"]["err_msg"] == "GPU has fallen off the bus"  # dcgm-exporter's words
    assert prometheus.value('gpu_up{scenario="lost-gpu",gpu="1"}') == 1  # back now; at `at` it was 0:
    assert [float(r["value"][1]) for r in prometheus.query(lost, at=at)] == [0.0]


def test_sawtooth_visible_in_the_histogram_not_in_the_gauge(
    stack: tuple[Prometheus, dict[str, Target]],
) -> None:
    prometheus, targets = stack
    since = targets["sawtooth"].ready_at
    selector = '{scenario="sawtooth",gpu="0"}'
    prometheus.wait_for(
        lambda: (prometheus.value(f"gpu_utilization_samples_percent_count{selector}") or 0) >= 36,
        30,
        "six seconds of utilization samples",
    )
    [gauge] = prometheus.raw(f"DCGM_FI_DEV_GPU_UTIL{selector}", since).values()
    assert len(gauge) >= 4
    assert max(v for _, v in gauge) <= 10, "the gauge, read once per cycle, only ever sees the idle phase"

    def bucket(le: str) -> float:
        value = prometheus.value(
            f'gpu_utilization_samples_percent_bucket{{scenario="sawtooth",gpu="0",le="{le}"}}'
        )
        assert value is not None
        return value

    count = bucket("+Inf")
    assert 0.2 < bucket("10.0") / count < 0.45, "near-idle samples"
    assert (count - bucket("90.0")) / count > 0.55, "busy samples"
    assert bucket("10.0") == bucket("90.0"), "and nothing in between"


def test_mig_instances_and_profiling_ratios_reach_prometheus(
    stack: tuple[Prometheus, dict[str, Target]],
) -> None:
    prometheus, _ = stack
    prometheus.wait_for(
        lambda: prometheus.value('count(DCGM_FI_PROF_GR_ENGINE_ACTIVE{scenario="mig",GPU_I_ID!=""})') == 3,
        20,
        "three MIG instances with GPM ratios",
    )
    assert prometheus.value('DCGM_FI_DEV_FB_USED{scenario="mig",GPU_I_PROFILE="1g.10gb"}') == 8192
    assert prometheus.value('count(DCGM_FI_DEV_GPU_UTIL{scenario="mig",GPU_I_ID!=""})') is None


# -- throttling: the rules and panels written for dcgm-exporter's series work on ours -------------------

THROTTLED = "sim-throttled"  # the node label of the throttled scenario's exporter
#: GPU index → what the ``throttled`` scenario scripts for it (see simulation.gpu_scenarios.build_scenario).
HOT_GPU, BRAKED_GPU = "0", "1"
THROTTLING_ALERTS = {"GpuThermalThrottling": {HOT_GPU}, "GpuPowerBrakeThrottling": {BRAKED_GPU}}
THROTTLING_PANELS = ("Throttling (1 = active)", "Time spent throttled")
#: Grafana variables of the node dashboard: every cluster (its "All" value), the throttled node, and the
#: rate interval Grafana picks for a short range over 1 s scrapes (a 5 m window would not be full yet).
NODE_VARIABLES = {**BUILTINS, "__rate_interval": "10s", "cluster": ".*", "node": THROTTLED}


def _by_gpu(result: list[dict[str, Any]]) -> dict[str, float]:
    # The rules and panels answer with `hostname` whichever spelling the exporter serves (`Hostname`
    # in the legacy naming).
    return {
        r["metric"]["gpu"]: float(r["value"][1]) for r in result if r["metric"].get("hostname") == THROTTLED
    }


def _panel_queries(title: str) -> dict[str, str]:
    """refId → PromQL of a node-dashboard panel, Grafana variables replaced by concrete values."""
    [panel] = [p for p in panels(load(DASHBOARDS_DIR / "node.json")) if p.get("title") == title]
    return {t["refId"]: interpolate(t["expr"], NODE_VARIABLES) for t in panel["targets"]}


@pytest.mark.parametrize("alert", list(THROTTLING_ALERTS))
def test_throttling_alert_fires_on_this_exporter(
    stack: tuple[Prometheus, dict[str, Target]], alert: str
) -> None:
    prometheus, _ = stack
    [rule] = [r for r in load_rules() if r.alert == alert]
    expected = THROTTLING_ALERTS[alert]
    prometheus.wait_for(
        lambda: set(_by_gpu(prometheus.query(rule.expr))) >= expected, 30, f"{alert} to hold on {THROTTLED}"
    )
    fired = prometheus.query(rule.expr)
    assert set(_by_gpu(fired)) == expected, "only the scripted GPU, not the power-capped ones"
    assert all(r["metric"].get("hostname") == THROTTLED for r in fired), "no other scenario throttles"


def test_throttling_panel_decodes_the_reasons_of_this_exporter(
    stack: tuple[Prometheus, dict[str, Target]],
) -> None:
    prometheus, _ = stack
    queries = _panel_queries("Throttling (1 = active)")
    assert set(queries) == {"A", "B", "C"}  # thermal, power brake, power cap
    prometheus.wait_for(lambda: len(_by_gpu(prometheus.query(queries["A"]))) == 4, 30, "the throttling panel")
    thermal, brake, cap = (_by_gpu(prometheus.query(queries[ref])) for ref in ("A", "B", "C"))
    assert thermal == {"0": 1, "1": 0, "2": 0, "3": 0}
    assert brake == {"0": 0, "1": 1, "2": 0, "3": 0}
    assert cap == {"0": 0, "1": 0, "2": 1, "3": 1}


def test_time_spent_throttled_panel_reads_this_exporters_counters(
    stack: tuple[Prometheus, dict[str, Target]],
) -> None:
    prometheus, targets = stack
    queries = _panel_queries("Time spent throttled")
    assert set(queries) == {"A", "B"}  # thermal, power
    # rate() over a window the target has not been scraped for all along reads low: let it fill.
    full_window = targets["throttled"].ready_at + 12
    time.sleep(max(0.0, full_window - time.time()))
    thermal, power = (_by_gpu(prometheus.query(queries[ref])) for ref in ("A", "B"))
    assert len(thermal) == len(power) == 4
    # The shares of wall time the scenario scripts: the counters are nanoseconds, as DCGM's are.
    assert thermal[HOT_GPU] == pytest.approx(0.3, abs=0.05)
    assert power[BRAKED_GPU] == pytest.approx(0.4, abs=0.05)
    assert power["2"] == pytest.approx(0.02, abs=0.01)
    assert thermal["2"] == 0


#: Families and the type Prometheus must record for them. DCGM's counters carry no `_total`; served as
#: OpenMetrics they could only be typed `unknown`, which is what Prometheus, asking for OpenMetrics
#: first, used to record.
RECORDED_TYPES = {
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    "DCGM_FI_DEV_POWER_VIOLATION": "counter",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge",
    "DCGM_FI_DEV_XID_ERRORS": "gauge",
    "gpu_xid_errors_total": "counter",
    "gpu_utilization_samples_percent": "histogram",
}


def test_prometheus_records_dcgm_counters_as_counters(stack: tuple[Prometheus, dict[str, Target]]) -> None:
    prometheus, _ = stack
    prometheus.wait_for(
        lambda: all(prometheus.metadata(name) for name in RECORDED_TYPES), 20, "metadata of every family"
    )
    recorded = {name: {m["type"] for m in prometheus.metadata(name)} for name in RECORDED_TYPES}
    assert recorded == {name: {kind} for name, kind in RECORDED_TYPES.items()}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_promtool_accepts_the_exposition(stack: tuple[Prometheus, dict[str, Target]], scenario: str) -> None:
    promtool = require_binary("promtool")
    _, targets = stack
    exposition = _get(f"{targets[scenario].url}/metrics")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=exposition, capture_output=True, check=False
    )
    problems = [
        line for line in result.stderr.decode().splitlines() + result.stdout.decode().splitlines() if line
    ]
    # 0: clean; 3: lint findings only. Anything else is a format error.
    assert result.returncode in (0, 3), problems
    unexpected = [p for p in problems if not p.startswith("DCGM_") and not p.startswith("gpu_")]
    unexpected += [p for p in problems if not p.endswith(DCGM_COMPATIBILITY_LINTS)]
    unexpected += [p for p in problems if p.startswith("gpu_exporter_")]
    unexpected += [p for p in problems if p.endswith('"_total" suffix') and not p.startswith("DCGM_")]
    assert not unexpected, (
        "own metrics must be lint-clean; DCGM ones may only differ where compatibility demands"
    )
    assert "modelName" in exposition.decode()  # the one camelCase label, kept for dcgm-exporter dashboards


def test_exporters_and_prometheus_survived_the_run(stack: tuple[Prometheus, dict[str, Target]]) -> None:
    prometheus, targets = stack
    assert all(t.process.poll() is None for t in targets.values())
    assert prometheus.process.poll() is None
