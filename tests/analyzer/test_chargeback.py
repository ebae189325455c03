"""gpu-analyzer chargeback against real Prometheus and VictoriaMetrics.

The standard fleet (whole GPUs, MIG instances, an exporter gap, a lost GPU) read raw and through the
hourly rollups promtool records from alerts/gpu-chargeback.recording.yaml; a small fleet of its own
with a time-sliced GPU, namespace labels (one namespace without the label) and both DCGM namings.
Expected hours come from the simulator's pods, counted in the same 5-minute spans.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from analyzer.chargeback.compute import mig_share
from analyzer.chargeback.model import ChargebackReport, unlabelled_group
from analyzer.chargeback.prices import Prices
from analyzer.chargeback.rules import rules_yaml
from analyzer.chargeback.run import chargeback
from analyzer.sources.prometheus.chargeback import ChargebackReads
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig, RangeSeries, VectorSample
from analyzer.sources.source_errors import NoDataError
from cli.analyzer import main
from common.errors import BadInputError
from common.model import TimeWindow
from common.timeutil import parse_duration
from harness.servers import PrometheusServer, VictoriaMetricsServer, backfill_rules, merged_blocks, serving
from simulation.fleet import Fleet, Series, simulate, with_naming

pytestmark = pytest.mark.slow

RULES = Path(__file__).resolve().parents[2] / "alerts" / "gpu-chargeback.recording.yaml"
SPAN = 300.0
H100 = "NVIDIA H100 80GB HBM3"


def _bill(
    url: str, window: TimeWindow, by: str = "namespace", prices: Prices | None = None, **kw: object
) -> ChargebackReport:
    reads = ChargebackReads(PrometheusClient(PrometheusConfig(url)), **kw)  # type: ignore[arg-type]
    return chargeback(reads, window, by, prices or Prices(2.0), 2.0, window.end)


def _expected_held(fleet: Fleet, window: TimeWindow) -> dict[str, float]:
    """Held GPU-hours per namespace: each pod's devices over the 5-minute spans it was alive in."""
    ends = np.arange(window.start.timestamp() + SPAN, window.end.timestamp() + 1, SPAN)
    nodes = {n.name: n for n in fleet.scenario.nodes}
    held: dict[str, float] = {}
    for pod in fleet.pods:
        if pod.pending:
            continue
        alive = ((ends > pod.start) & (ends - SPAN < pod.end)).sum()
        node = nodes[pod.node]
        share = mig_share(node.model, node.mig_profile or "")
        held[pod.namespace] = held.get(pod.namespace, 0.0) + alive * len(pod.slots) * share * SPAN / 3600
    return held


def _window(fleet: Fleet, hours: float = 6) -> TimeWindow:
    return TimeWindow.ending(fleet.scenario.end, timedelta(hours=hours))


@pytest.mark.parametrize("tsdb", ["prometheus_standard", "victoria_standard"])
def test_standard_fleet_bill(tsdb: str, standard_fleet: Fleet, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue(tsdb)
    window = _window(standard_fleet)
    report = _bill(server.url, window, prices=Prices(2.0, {H100: 4.5}))
    groups = {g.group: g for g in report.groups}
    for namespace, hours in _expected_held(standard_fleet, window).items():
        if hours:
            assert groups[namespace].held_gpu_hours == pytest.approx(hours, rel=0.02), namespace
    # The exporter of gpu-d was silent for 3 of the 6 hours: its holder's hours are unknown, not idle.
    gap = groups["ml-platform"]
    assert gap.unknown_gpu_hours == pytest.approx(2 * 3.0, rel=0.05)
    # A MIG instance counts its 3 of 7 slices, idle by its own activity.
    mig_idle = next(w for w in groups["team-b"].top_idle_workloads if w.workload.name == "mig-idle")
    assert mig_idle.idle_gpu_hours == pytest.approx(6 * 3 / 7, rel=0.03)
    # Idle endpoints' hours are idle; a training job's are used, none idle.
    ranker = next(w for w in groups["serving"].top_idle_workloads if w.workload.name == "legacy-ranker")
    assert ranker.workload.kind == "Deployment" and ranker.idle_gpu_hours == pytest.approx(12.0, rel=0.02)
    assert groups["research"].idle_gpu_hours < 0.05 * groups["research"].held_gpu_hours
    assert 0 < groups["research"].used_gpu_hours < groups["research"].held_gpu_hours
    for g in report.groups:
        assert g.used_gpu_hours + g.idle_gpu_hours + g.unknown_gpu_hours <= g.held_gpu_hours * 1.02
        assert sum(d.held_gpu_hours for d in g.daily) == pytest.approx(g.held_gpu_hours)
    # Prices per model; the rest at the default.
    h100 = next(m for m in groups["serving"].models if m.model == H100)
    assert h100.price_per_gpu_hour == 4.5 and h100.cost == pytest.approx(4.5 * h100.held_gpu_hours)
    assert report.totals.within_tolerance and report.totals.relative_difference < 0.01
    assert report.fleet.unallocated_gpu_hours > 0 and not report.partial


@pytest.fixture(scope="module")
def prometheus_with_rollups(
    standard_fleet: Fleet,
    prometheus_standard: PrometheusServer,
    standard_blocks: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PrometheusServer]:
    work = tmp_path_factory.mktemp("chargeback-rollups")
    end = standard_fleet.scenario.end
    rules = backfill_rules(prometheus_standard.url, RULES, end - timedelta(hours=23), end, work)
    with PrometheusServer(work / "tsdb", blocks=merged_blocks(work, standard_blocks, rules)) as server:
        yield server


def test_rollups_give_the_raw_bill(
    standard_fleet: Fleet, prometheus_standard: PrometheusServer, prometheus_with_rollups: PrometheusServer
) -> None:
    window = _window(standard_fleet, hours=20)
    raw = _bill(prometheus_standard.url, window)
    rolled = _bill(prometheus_with_rollups.url, window)
    assert raw.coverage.rollup_hours == 0
    assert rolled.coverage.rollup_hours >= 15, rolled.coverage
    rolled_groups = {g.group: g for g in rolled.groups}
    for a in raw.groups:
        b = rolled_groups[a.group]
        assert (a.held_gpu_hours, a.idle_gpu_hours, a.unknown_gpu_hours, a.used_gpu_hours) == pytest.approx(
            (b.held_gpu_hours, b.idle_gpu_hours, b.unknown_gpu_hours, b.used_gpu_hours), rel=1e-6
        ), a.group
    assert rolled.totals.within_tolerance


class _Recording(PrometheusClient):
    """A client that keeps what each query asked: the expression and the time it was evaluated over."""

    def __init__(self, config: PrometheusConfig) -> None:
        super().__init__(config)
        self.ranges: list[tuple[str, datetime, datetime]] = []
        self.instants: list[tuple[str, datetime]] = []

    def query_range(self, promql: str, start: datetime, end: datetime, step_s: float) -> list[RangeSeries]:
        self.ranges.append((promql, start, end))
        return super().query_range(promql, start, end, step_s)

    def vector(self, promql: str, at: datetime) -> list[VectorSample]:
        self.instants.append((promql, at))
        return super().vector(promql, at)


def test_month_over_rollups_reads_no_raw_under_them(
    standard_fleet: Fleet, prometheus_standard: PrometheusServer, prometheus_with_rollups: PrometheusServer
) -> None:
    """A window reaching far past the data, rollups covering its last 23 hours: the same bill as from
    raw samples, and no raw read reaches under the rollups — the data probe stops at their first
    hour, the owners are read over a day at most."""
    window = TimeWindow.ending(standard_fleet.scenario.end, timedelta(days=30))
    raw = _bill(prometheus_standard.url, window)
    client = _Recording(PrometheusConfig(prometheus_with_rollups.url))
    rolled = chargeback(ChargebackReads(client), window, "namespace", Prices(2.0), 2.0, window.end)
    assert rolled.partial and rolled.window == raw.window
    assert rolled.coverage.rollup_hours >= 22, rolled.coverage
    got = {g.group: g for g in rolled.groups}
    for a in raw.groups:
        b = got[a.group]
        assert (a.held_gpu_hours, a.idle_gpu_hours, a.unknown_gpu_hours, a.used_gpu_hours) == pytest.approx(
            (b.held_gpu_hours, b.idle_gpu_hours, b.unknown_gpu_hours, b.used_gpu_hours), rel=1e-6
        ), a.group
        assert [w.workload for w in a.top_idle_workloads] == [w.workload for w in b.top_idle_workloads]
    assert any(w.workload.kind == "Deployment" for g in rolled.groups for w in g.top_idle_workloads)
    rollups_begin = rolled.window.end - timedelta(hours=rolled.coverage.rollup_hours)
    (probe,) = [(s, e) for q, s, e in client.ranges if "group by (UUID)" in q]
    assert probe[1] <= rollups_begin + timedelta(hours=1), (probe, rollups_begin)
    owner_reads = [q for q, _ in client.instants if "kube_pod_owner" in q or "kube_replicaset_owner" in q]
    assert owner_reads
    for q in owner_reads:
        (reach,) = re.findall(r"\[(\w+)\]", q)
        assert parse_duration(reach) <= timedelta(days=1), q


@pytest.mark.chromium
def test_html_renders_bars_in_chromium(
    standard_fleet: Fleet, victoria_standard: VictoriaMetricsServer, tmp_path: Path
) -> None:
    from analyzer.report.chargeback_html import COLOURS, render_chargeback_html
    from harness.browser import pixels_near, screenshot

    report = _bill(victoria_standard.url, _window(standard_fleet, hours=30))
    page = tmp_path / "bill.html"
    page.write_text(render_chargeback_html(report), encoding="utf-8")
    image = screenshot(page, tmp_path / "bill.png", tmp_path / "profile")
    # Every group's bar shows its used, idle and unknown parts; the fleet's unallocated bar beside them.
    for part in ("used", "idle", "unknown", "unallocated"):
        assert pixels_near(image, COLOURS[part]) > 400, part  # a legend swatch is about 150
    assert report.partial and "Partial:" in page.read_text()


def test_rules_file_is_generated() -> None:
    assert RULES.read_text(encoding="utf-8") == rules_yaml()


# --- bad input ---------------------------------------------------------------------------------


def test_window_beyond_the_data_is_partial(
    standard_fleet: Fleet, victoria_standard: VictoriaMetricsServer
) -> None:
    report = _bill(victoria_standard.url, _window(standard_fleet, hours=24 * 30))
    assert report.partial and "holds GPU series from" in (report.partial_reason or "")
    assert report.window.hours <= 25 and report.requested_window.hours == 720


def test_bad_input(
    standard_fleet: Fleet, victoria_standard: VictoriaMetricsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    window = _window(standard_fleet)
    with pytest.raises(BadInputError, match="no kube_namespace_labels"):
        _bill(victoria_standard.url, window, by="label:team")
    with pytest.raises(BadInputError, match="'NVIDIA B300'"):
        _bill(victoria_standard.url, window, prices=Prices(2.0, {"NVIDIA B300": 9.0}))
    early = TimeWindow.ending(standard_fleet.scenario.start - timedelta(days=2), timedelta(hours=6))
    with pytest.raises(NoDataError):
        _bill(victoria_standard.url, early)
    end = window.end.isoformat()
    base = ["chargeback", "--prometheus-url", victoria_standard.url, "--end", end, "--window", "6h"]
    assert main([*base, "--by", "team"]) == 2
    empty = [
        "chargeback",
        "--prometheus-url",
        victoria_standard.url,
        "--end",
        early.end.isoformat(),
        "--window",
        "6h",
    ]
    assert main(empty) == 3
    assert "no GPU utilization" in capsys.readouterr().err


def test_cli_formats(standard_fleet: Fleet, victoria_standard: VictoriaMetricsServer, tmp_path: Path) -> None:
    base = [
        "chargeback",
        "--prometheus-url",
        victoria_standard.url,
        "--end",
        standard_fleet.scenario.end.isoformat(),
    ]
    base += ["--window", "6h"]
    out = tmp_path / "bill.json"
    assert main([*base, "--format", "json", "--output", str(out)]) == 0
    report = ChargebackReport.model_validate_json(out.read_text())
    assert report.totals.within_tolerance and {g.group for g in report.groups} >= {"serving", "research"}
    csv_out = tmp_path / "bill.csv"
    assert main([*base, "--format", "csv", "--share-unallocated", "--output", str(csv_out)]) == 0
    lines = csv_out.read_text().splitlines()
    assert lines[0].startswith("group,held_gpu_hours") and len(lines) == 1 + len(report.groups)
    assert main([*base, "--by", "cluster", "--format", "table", "--output", str(tmp_path / "t.txt")]) == 0
    assert "(no cluster label)" in (tmp_path / "t.txt").read_text()


# --- time-slicing, namespace labels, both namings ---------------------------------------------------

NAMING_SCENARIO = {
    "name": "chargeback",
    "seed": 5,
    "end": "2026-01-05T00:00:00Z",
    "duration": "8h",
    "step": "60s",
    "analysis_window": "6h",
    "nodes": [{"name": "gpu-n1", "gpus": 4}, {"name": "gpu-n2", "gpus": 2, "profiling": True}],
    "workloads": [
        {"namespace": "serving", "name": "ranker", "behaviour": "idle", "node": "gpu-n1"},
        {
            "namespace": "research",
            "name": "trainer",
            "kind": "Job",
            "behaviour": "training",
            "gpus_per_pod": 2,
            "node": "gpu-n2",
        },
        {"namespace": "sandbox", "name": "shell", "behaviour": "low_utilization", "node": "gpu-n1"},
    ],
}
SHARED_UUID = "GPU-5a1ced00-0000-4000-8000-00000000c0de"


def _ts(name: str, labels: dict[str, str], t: np.ndarray, v: np.ndarray | float) -> Series:
    return Series(
        name, tuple(sorted(labels.items())), t, np.broadcast_to(np.asarray(v, float), t.shape).copy()
    )


def _extras(end: float) -> list[Series]:
    """A time-sliced GPU held by two pods of `serving` (one idle, one at 30 % of the GPU), and the
    namespaces' `team` labels (sandbox has none)."""
    t = np.arange(end - 8 * 3600 + 60, end + 1, 60.0)
    gpu = {
        "UUID": SHARED_UUID,
        "gpu": "0",
        "modelName": "NVIDIA L40S",
        "Hostname": "gpu-ts",
        "job": "gpu-exporter",
    }
    out = [_ts("DCGM_FI_DEV_GPU_UTIL", gpu, t, 30.0)]
    ksm = {"job": "kube-state-metrics"}
    for pod, pct in (("chat-idle-0", 0.0), ("chat-busy-0", 30.0)):
        out.append(_ts("gpu_pod_sm_utilization_percent", gpu | {"namespace": "serving", "pod": pod}, t, pct))
        who = ksm | {"namespace": "serving", "pod": pod}
        out.append(
            _ts(
                "kube_pod_container_resource_requests",
                who | {"container": "main", "resource": "nvidia_com_gpu", "node": "gpu-ts"},
                t,
                1.0,
            )
        )
        out.append(_ts("kube_pod_status_phase", who | {"phase": "Running"}, t, 1.0))
        out.append(
            _ts(
                "kube_pod_owner",
                who | {"owner_kind": "<none>", "owner_name": "<none>", "owner_is_controller": "<none>"},
                t,
                1.0,
            )
        )
    for ns, team in (("serving", "web"), ("research", "ml"), ("sandbox", "")):
        labels = ksm | {"namespace": ns} | ({"label_team": team} if team else {})
        out.append(_ts("kube_namespace_labels", labels, t, 1.0))
    return out


@pytest.fixture(scope="module", params=["prometheus", "victoria"])
def naming_servers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """One TSDB per engine holding the fleet in every naming, each as the cluster of its name."""
    from simulation.fleet import Scenario

    scenario = Scenario.model_validate(NAMING_SCENARIO)
    series: list[Series] = []
    for form in ("legacy", "dcgm-4.7", "upgrade"):
        shaped = with_naming(scenario, form, at=timedelta(hours=-3), overlap=1, stagger=timedelta(minutes=5))  # type: ignore[arg-type]
        fleet_series = [*simulate(shaped).series, *_extras(scenario.end.timestamp())]
        series += [replace(s, labels=tuple(sorted((*s.labels, ("cluster", form))))) for s in fleet_series]
    with serving(request.param, series, tmp_path_factory.mktemp(f"chargeback-{request.param}")) as server:
        yield {"url": server.url, "end": scenario.end.isoformat()}


def test_namings_time_slicing_and_labels(naming_servers: dict[str, str]) -> None:
    from datetime import datetime

    end = datetime.fromisoformat(naming_servers["end"])
    window = TimeWindow.ending(end, timedelta(hours=6))
    bills = {}
    for form in ("legacy", "dcgm-4.7", "upgrade"):
        from analyzer.sources.promql import eq

        bills[form] = _bill(naming_servers["url"], window, by="label:team", scope=(eq("cluster", form),))
    legacy = {g.group: g for g in bills["legacy"].groups}
    assert set(legacy) == {"web", "ml", unlabelled_group("team")}
    # The time-sliced GPU: two pods, half of it each, 6 h; plus the idle ranker's whole GPU.
    web = legacy["web"]
    assert web.held_gpu_hours == pytest.approx(6.0 + 6.0, rel=0.02)
    assert web.idle_gpu_hours == pytest.approx(6.0 + 3.0, rel=0.05)
    idle_pods = {w.workload.name: w for w in web.top_idle_workloads}
    assert idle_pods["chat-idle-0"].held_gpu_hours == pytest.approx(3.0, rel=0.02)
    # chat-busy at 30 % of the whole GPU (within its half) for 6 h; chat-idle and the ranker near 0.
    assert 0.3 * 6.0 <= web.used_gpu_hours < 0.3 * 6.0 + 0.3
    for form, bill in bills.items():
        assert bill.totals.within_tolerance, form
        got = {g.group: g for g in bill.groups}
        for name, g in legacy.items():
            assert got[name].held_gpu_hours == pytest.approx(g.held_gpu_hours, rel=0.01), (form, name)
            assert got[name].idle_gpu_hours == pytest.approx(g.idle_gpu_hours, rel=0.03), (form, name)
            assert got[name].used_gpu_hours == pytest.approx(g.used_gpu_hours, rel=0.03), (form, name)


def test_chart_ships_the_rollups_verbatim_when_asked() -> None:
    import yaml

    from harness.chart import render

    source = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    values = {"prometheusRule": {"enabled": True, "chargebackRecordingRules": True}}
    (rule,) = [m for m in render(values) if m.kind == "PrometheusRule"]
    shipped = [g for g in rule.doc["spec"]["groups"] if g["name"] == "gpu-chargeback-rollups"]
    assert shipped == source
    (plain,) = [m for m in render({"prometheusRule": {"enabled": True}}) if m.kind == "PrometheusRule"]
    assert not [g for g in plain.doc["spec"]["groups"] if g["name"] == "gpu-chargeback-rollups"]
