"""The optional recording rules: where their rollups cover the window the analyzer reads them, where
they do not it reads raw samples, and either way it finds the same.

The rules are backfilled by promtool over the standard fleet's history held in a real Prometheus
(as a user adding them to an existing server would), and the rollup blocks loaded next to the raw.
Over two clusters in one TSDB (same nodes, namespaces, pods and GPUs, told apart by `cluster`), the
rules record exactly what each cluster's own evaluation records, and the analyzer, reading one
cluster at a time, reads its cluster's rollups only.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pytest
import requests
import yaml

from analyzer.pipeline import Analysis, analyze_in_detail
from analyzer.sources import dcgm, rollup_rules, rollups
from analyzer.sources.aggregates import FleetSnapshot
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusConfig
from common import metric_names
from common.model import TimeWindow
from common.thresholds import Thresholds
from harness.binaries import require_binary
from harness.rules import ALERTS_DIR
from harness.servers import (
    PrometheusServer,
    VictoriaMetricsServer,
    backfill_blocks,
    backfill_rules,
    merged_blocks,
)
from simulation.fleet import Fleet, Series
from simulation.fleet.truth import window_of

RULES_FILE = ALERTS_DIR / "gpu-analyzer.recording.yaml"
# Rules evaluated over the last 7 h of the fleet's day: the scored 6 h window is covered, a 9 h one
# starts before the first rollup.
RULES_SPAN = timedelta(hours=7)
# The rollups read on the standard fleet, which serves the legacy names (test_dcgm_namings reads
# those of DCGM 4.7's names, and of both).
LEGACY_ROLLED_UP = {name for name in rollups.ROLLED_UP if name in metric_names.BY_LEGACY}


END = datetime(2026, 1, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("window", "latest", "expected"),
    [
        # A rollup stamped t covers (t - 6m, t - 1m]: the last span ends a minute before ``end``.
        pytest.param(
            TimeWindow.ending(END, timedelta(hours=1)),
            END,
            rollups.Cover(
                lead=timedelta(minutes=4), interior=timedelta(minutes=55), trail=timedelta(minutes=1)
            ),
            id="stamped-on-end",
        ),
        pytest.param(
            TimeWindow.ending(END, timedelta(hours=1)),
            END - timedelta(minutes=2, milliseconds=8),
            rollups.Cover(
                lead=timedelta(minutes=1, seconds=59, milliseconds=992),
                interior=timedelta(minutes=55),
                trail=timedelta(minutes=3, milliseconds=8),
            ),
            id="ragged",
        ),
        # ``start`` on a span edge: the lead is a whole step, so that the sample on ``start`` is
        # read raw, with the raw query's own range semantics.
        pytest.param(
            TimeWindow.ending(END, timedelta(minutes=61)),
            END,
            rollups.Cover(
                lead=timedelta(minutes=5), interior=timedelta(minutes=55), trail=timedelta(minutes=1)
            ),
            id="start-on-an-edge",
        ),
        pytest.param(TimeWindow.ending(END, timedelta(minutes=6)), END, None, id="no-whole-step"),
        pytest.param(
            TimeWindow.ending(END, timedelta(hours=1)), END + timedelta(seconds=1), None, id="after"
        ),
        pytest.param(TimeWindow.ending(END, timedelta(hours=1)), END - timedelta(hours=1), None, id="before"),
    ],
)
def test_window_splits_into_raw_edges_and_whole_rollup_steps(
    window: TimeWindow, latest: datetime, expected: rollups.Cover | None
) -> None:
    found = rollups.cover(window, latest)
    assert found == expected
    if found is not None:
        assert found.lead + found.interior + found.trail == window.duration
        assert timedelta(0) < found.lead <= rollups.STEP


def test_a_missed_evaluation_means_raw_samples() -> None:
    c = rollups.Cover(lead=timedelta(minutes=5), interior=timedelta(hours=1), trail=timedelta(0))
    assert rollups.missing(c, 12.0) is None
    assert rollups.missing(c, 11.0) == "11 of the 12 evaluations in the window recorded"
    assert rollups.missing(c, None) == "0 of the 12 evaluations in the window recorded"


def test_rules_file_passes_promtool_check_rules() -> None:
    result = subprocess.run(
        [require_binary("promtool"), "check", "rules", RULES_FILE.name],
        capture_output=True,
        text=True,
        check=False,
        cwd=ALERTS_DIR,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rollups.ALL_NAMES)} rules found" in result.stdout


def test_rules_record_what_the_analyzer_reads() -> None:
    (group,) = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))["groups"]
    assert group["interval"] == "5m"
    assert sorted(r["record"] for r in group["rules"]) == sorted(rollups.ALL_NAMES)


def test_the_committed_rules_are_the_generated_ones() -> None:
    # A utilization name added to analyzer/sources/vocabulary.py gets its rule from the generator.
    assert RULES_FILE.read_text(encoding="utf-8") == rollup_rules.rules_yaml(), (
        "alerts/gpu-analyzer.recording.yaml is generated from the utilization names the analyzer reads "
        "(analyzer/sources/rollup_rules.py) and no longer matches them: regenerate it with "
        f"`{rollup_rules.COMMAND}` and commit it with the change"
    )


@pytest.fixture(scope="module")
def rules_server(
    standard_fleet: Fleet,
    standard_blocks: Path,
    prometheus_standard: PrometheusServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PrometheusServer]:
    workdir = tmp_path_factory.mktemp("recording-rules")
    end = standard_fleet.scenario.end
    rule_blocks = backfill_rules(prometheus_standard.url, RULES_FILE, end - RULES_SPAN, end, workdir)
    with PrometheusServer(workdir / "server", merged_blocks(workdir, standard_blocks, rule_blocks)) as server:
        yield server


def _snapshots(url: str, window: TimeWindow) -> tuple[FleetSnapshot, FleetSnapshot]:
    rolled = PrometheusSource(PrometheusConfig(url)).snapshot(window, Thresholds())
    raw = PrometheusSource(PrometheusConfig(url), recording_rules=False).snapshot(window, Thresholds())
    return rolled, raw


def _assert_same_numbers(rolled: FleetSnapshot, raw: FleetSnapshot) -> None:
    assert rolled.devices.keys() == raw.devices.keys()
    for key, dev in raw.devices.items():
        mine = rolled.devices[key]
        assert mine.info == dev.info
        # Counts, maxima and quantiles exactly; sums are added in another order.
        assert mine.stats.samples == dev.stats.samples, key
        assert mine.stats.max == dev.stats.max, key
        assert (mine.stats.q_low, mine.stats.q_high, mine.stats.median) == (
            dev.stats.q_low,
            dev.stats.q_high,
            dev.stats.median,
        )
        assert mine.stats.mean == pytest.approx(dev.stats.mean, rel=1e-12, abs=1e-12), key
        assert mine.interval_s == dev.interval_s
    assert rolled.capabilities.dev_to_percent == raw.capabilities.dev_to_percent


@pytest.mark.prometheus
@pytest.mark.parametrize(
    ("back", "length"),
    [
        pytest.param(timedelta(0), timedelta(hours=6), id="scored-window"),
        # Neither edge on a rollup instant nor on a sample: lead and trail of odd lengths.
        pytest.param(
            timedelta(minutes=2, seconds=30, milliseconds=7), timedelta(hours=5, minutes=3), id="ragged"
        ),
        # Edges on sample instants: the sample on the left edge counts as in the raw query.
        pytest.param(timedelta(minutes=7), timedelta(hours=6), id="on-samples"),
    ],
)
def test_rollups_give_the_raw_numbers(
    rules_server: PrometheusServer,
    standard_fleet: Fleet,
    back: timedelta,
    length: timedelta,
    caplog: pytest.LogCaptureFixture,
) -> None:
    window = TimeWindow.ending(standard_fleet.scenario.end - back, length)
    with caplog.at_level(logging.INFO, logger="analyzer.sources.prometheus"):
        rolled, raw = _snapshots(rules_server.url, window)
    assert set(rolled.capabilities.rollups) == LEGACY_ROLLED_UP
    assert raw.capabilities.rollups == ()
    assert "recording-rule rollups" in caplog.text
    _assert_same_numbers(rolled, raw)


@pytest.mark.prometheus
def test_rules_starting_mid_window_fall_back_to_raw_samples(
    rules_server: PrometheusServer, standard_fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    window = TimeWindow.ending(standard_fleet.scenario.end, RULES_SPAN + timedelta(hours=2))
    with caplog.at_level(logging.INFO, logger="analyzer.sources.prometheus"):
        rolled, raw = _snapshots(rules_server.url, window)
    assert rolled.capabilities.rollups == ()
    assert "evaluations in the window recorded); reading raw samples" in caplog.text
    _assert_same_numbers(rolled, raw)


@pytest.mark.prometheus
def test_without_rules_the_analyzer_reads_raw_samples(
    prometheus_standard: PrometheusServer, standard_fleet: Fleet
) -> None:
    snapshot = PrometheusSource(PrometheusConfig(prometheus_standard.url)).snapshot(
        window_of(standard_fleet), Thresholds()
    )
    assert snapshot.capabilities.rollups == ()
    assert "rollups" not in snapshot.capabilities.describe()


class _Recorder:
    """The instant queries a source sends, to replay them with Prometheus' query statistics."""

    def __init__(self, source: PrometheusSource) -> None:
        self.queries: list[tuple[str, str]] = []
        source.client.session.hooks["response"].append(self._record)

    def _record(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        request = response.request
        body = request.body.decode() if isinstance(request.body, bytes) else (request.body or "")
        form = parse_qs(body)
        if request.url and request.url.endswith("/api/v1/query") and "query" in form:
            self.queries.append((form["query"][0], form.get("time", [""])[0]))

    def samples_read(self, url: str) -> int:
        """Samples the TSDB loaded to answer them (its own count, ``stats=all``)."""
        total = 0
        for query, at in self.queries:
            answer = requests.post(
                url + "/api/v1/query", data={"query": query, "time": at, "stats": "all"}, timeout=30
            ).json()
            total += answer["data"]["stats"]["samples"]["totalQueryableSamples"]
        return total


def _analysis(url: str, fleet: Fleet, recording_rules: bool) -> tuple[Analysis, PrometheusSource, _Recorder]:
    source = PrometheusSource(PrometheusConfig(url), recording_rules=recording_rules)
    recorder = _Recorder(source)
    window = window_of(fleet)
    return analyze_in_detail(source, window, Thresholds(), now=window.end), source, recorder


@pytest.mark.prometheus
def test_findings_are_the_same_with_and_without_rules_for_fewer_samples_read(
    rules_server: PrometheusServer, standard_fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    with_rules, rolled, rolled_queries = _analysis(rules_server.url, standard_fleet, True)
    without, raw, raw_queries = _analysis(rules_server.url, standard_fleet, False)
    assert with_rules.snapshot.capabilities.rollups
    ours, theirs = with_rules.report.findings, without.report.findings
    assert [(f.kind, f.workload, f.pods, f.nodes, f.gpus, f.window) for f in ours] == [
        (f.kind, f.workload, f.pods, f.nodes, f.gpus, f.window) for f in theirs
    ]
    for a, b in zip(ours, theirs, strict=True):
        assert a.wasted_gpu_hours == pytest.approx(b.wasted_gpu_hours, rel=1e-9)
        assert a.confidence == pytest.approx(b.confidence, rel=1e-9)
        mine, theirs_ = a.evidence.to_json(), b.evidence.to_json()
        assert mine.keys() == theirs_.keys()
        for key, value in mine.items():
            if isinstance(value, float):
                assert value == pytest.approx(theirs_[key], rel=1e-9), key
            else:
                assert value == theirs_[key], key
    read_rolled = rolled_queries.samples_read(rules_server.url)
    read_raw = raw_queries.samples_read(rules_server.url)
    with capsys.disabled():
        print(
            f"\nrecording rules, standard fleet, 6 h at 60 s: {rolled.client.stats.requests} requests, "
            f"{rolled.client.stats.wire_bytes} B on the wire, {read_rolled} samples read by the TSDB; "
            f"without: {raw.client.stats.requests} requests, {raw.client.stats.wire_bytes} B, "
            f"{read_raw} samples"
        )
    # Four of the seven full-window scans per utilization metric read rollups (at a 60 s scrape
    # interval one point per five samples); the quantiles and everything else read what they did.
    assert read_rolled < read_raw


# --- samples stamped exactly on rollup instants ---------------------------------------------------


def _openmetrics(path: Path, stamps: dict[str, list[datetime]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        fh.write("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
        for i, (uuid, times) in enumerate(stamps.items()):
            labels = f'UUID="{uuid}",gpu="{i}",Hostname="node-a",modelName="NVIDIA H100",job="dcgm"'
            for n, t in enumerate(s.timestamp() for s in times):
                fh.write(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {(n * 7 + i * 13) % 101} {t:.3f}\n")
        fh.write("# EOF\n")


@pytest.mark.prometheus
def test_samples_on_span_edges_count_once_and_edge_only_holders_keep_theirs(
    rules_server: PrometheusServer, standard_fleet: Fleet, tmp_path: Path
) -> None:
    """Prometheus 2.x ranges include their left end: a sample stamped exactly on a span's edge must
    still land in one rollup only, the window's edges must count as the raw query does, and a
    holder whose samples lie in the raw edges only keeps them."""
    end = standard_fleet.scenario.end
    at = requests.post(
        rules_server.url + "/api/v1/query",
        data={
            "query": f"timestamp({rollups.selector(dcgm.DEV_GPU_UTIL, rollups.FLEET)})",
            "time": end.timestamp(),
        },
        timeout=30,
    ).json()["data"]["result"]
    # promtool runs a group at the same phase whatever the data: learn it from the first backfill.
    instant = datetime.fromtimestamp(round(float(at[0]["value"][1]) * 1000) / 1000, tz=UTC)
    edge = instant - rollups.LAG  # where that evaluation's span ends
    first = instant - timedelta(hours=3)
    every_minute = [first + timedelta(seconds=60 * n) for n in range(181)]
    lead_start = edge - timedelta(hours=2, minutes=30)
    source = tmp_path / "edges.om"
    _openmetrics(
        source,
        {
            "GPU-edge-0": every_minute,
            "GPU-edge-1": every_minute,
            # Holders with samples in one raw edge of the first window and no rollup inside it.
            "GPU-lead-only": [lead_start + timedelta(minutes=m) for m in (1, 2, 3)],
            "GPU-trail-only": [instant - timedelta(seconds=s) for s in (40, 20, 0)],
        },
    )
    raw = tmp_path / "raw"
    subprocess.run(
        [require_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(source), str(raw)],
        check=True,
        capture_output=True,
    )
    with PrometheusServer(tmp_path / "first", raw) as server:
        rule_blocks = backfill_rules(server.url, RULES_FILE, first, instant, tmp_path)
    with PrometheusServer(tmp_path / "second", merged_blocks(tmp_path, raw, rule_blocks)) as server:
        for window in (
            TimeWindow(start=lead_start, end=instant),  # start on a span edge
            TimeWindow(start=edge - timedelta(hours=2), end=edge),  # both on span edges
            TimeWindow(start=first + timedelta(minutes=31), end=instant - timedelta(minutes=2)),
        ):
            rolled, plain = _snapshots(server.url, window)
            assert rolled.capabilities.rollups == (dcgm.DEV_GPU_UTIL,)
            _assert_same_numbers(rolled, plain)
            expected = round(window.duration / timedelta(minutes=1)) + 1  # 2.x: both edges count
            samples = {k.uuid: d.stats.samples for k, d in rolled.devices.items()}
            assert samples["GPU-edge-0"] == samples["GPU-edge-1"] == expected
            if window.start == lead_start:
                assert samples["GPU-lead-only"] == samples["GPU-trail-only"] == 3


# --- VictoriaMetrics: ranges open on the left, the same split -------------------------------------


@pytest.mark.prometheus
@pytest.mark.victoriametrics
def test_victoriametrics_reads_the_same_rollups_to_the_same_numbers(
    rules_server: PrometheusServer, standard_fleet: Fleet, tmp_path: Path
) -> None:
    """The rollups as vmalert would have written them (copied from Prometheus, stamps and all)
    next to the raw samples: VictoriaMetrics' left-open ranges give the raw numbers too."""
    end = standard_fleet.scenario.end
    recorded = []
    for name in rollups.ALL_NAMES:
        answer = requests.post(
            rules_server.url + "/api/v1/query",
            data={"query": f"{name}[{int(RULES_SPAN.total_seconds())}s]", "time": end.timestamp()},
            timeout=30,
        ).json()["data"]["result"]
        for item in answer:
            labels = tuple(sorted((k, v) for k, v in item["metric"].items() if k != "__name__"))
            stamps = np.array([float(t) for t, _ in item["values"]])
            values = np.array([float(v) for _, v in item["values"]])
            recorded.append(Series(name, labels, stamps, values))
    assert recorded
    with VictoriaMetricsServer(tmp_path / "victoria") as server:
        # Raw samples as Prometheus got them; rollups at full precision (the text import keeps 10 digits).
        server.import_series(standard_fleet.series)
        server.import_json_lines(recorded)
        for window in (
            window_of(standard_fleet),
            TimeWindow.ending(end - timedelta(minutes=2, seconds=30, milliseconds=7), timedelta(hours=5)),
        ):
            rolled, raw = _snapshots(server.url, window)
            assert set(rolled.capabilities.rollups) == LEGACY_ROLLED_UP
            _assert_same_numbers(rolled, raw)


# --- many clusters in one TSDB ---------------------------------------------------------------------

CLUSTERS = ("east", "west")
# The series the rules file records, and the utilization metrics they roll up.
RECORDS = tuple(
    rule["record"]
    for group in yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))["groups"]
    for rule in group["rules"]
)
# The standard fleet serves the legacy names: their rollups are the ones recorded, and read.
ROLLED_UP = {m for m in dcgm.UTIL_METRICS if rollups.rule_name(m) in RECORDS} & LEGACY_ROLLED_UP
CLUSTERS_SPAN = timedelta(hours=4)  # the raw history each cluster holds
CLUSTERS_RULES_SPAN = timedelta(hours=3)  # the rules' history over it
LATE_RULES_SPAN = timedelta(hours=1)  # west's rules in the late case


def _cluster_series(fleet: Fleet, cluster: str) -> list[Series]:
    """The standard fleet's last hours as cluster ``cluster`` holds them: the same nodes,
    namespaces, pods and GPUs in each. West's utilization is halved and a third of its utilization
    series miss every fourth scrape, so that each number of its rollups differs from east's."""
    since = fleet.scenario.end.timestamp() - CLUSTERS_SPAN.total_seconds()
    out = []
    for i, s in enumerate(fleet.series):
        keep = s.timestamps > since
        values = s.values
        if cluster == "west" and s.name in dcgm.UTIL_METRICS:
            values = values / 2
            if i % 3 == 0:
                keep &= np.arange(keep.size) % 4 != 0
        if keep.any():
            labels = tuple(sorted((*s.labels, (dcgm.CLUSTER_LABEL, cluster))))
            out.append(Series(s.name, labels, s.timestamps[keep], values[keep]))
    return out


@dataclass(frozen=True)
class ClusterServers:
    together: PrometheusServer  # both clusters' raw series, the rules evaluated over both at once
    apart: PrometheusServer  # the rules' output only, evaluated over each cluster alone
    late: PrometheusServer  # both clusters' raw series and each one's own rules; west's started late


@pytest.fixture(scope="module")
def cluster_servers(
    standard_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterServers]:
    workdir = tmp_path_factory.mktemp("recording-rules-clusters")
    end = standard_fleet.scenario.end
    series = {cluster: _cluster_series(standard_fleet, cluster) for cluster in CLUSTERS}
    raw = {
        "both": backfill_blocks([*series["east"], *series["west"]], workdir / "both"),
        **{cluster: backfill_blocks(series[cluster], workdir / cluster) for cluster in CLUSTERS},
    }

    def rules_over(blocks: str, name: str, span: timedelta) -> Path:
        out = workdir / f"rules-{name}"
        out.mkdir()
        with PrometheusServer(out / "server", raw[blocks]) as server:
            return backfill_rules(server.url, RULES_FILE, end - span, end, out)

    rules = {
        "both": rules_over("both", "both", CLUSTERS_RULES_SPAN),
        "east": rules_over("east", "east", CLUSTERS_RULES_SPAN),
        "west": rules_over("west", "west", CLUSTERS_RULES_SPAN),
        "west-late": rules_over("west", "west-late", LATE_RULES_SPAN),
    }

    def merged(name: str, *blocks: Path) -> Path:
        return merged_blocks(workdir / f"merged-{name}", *blocks)

    with ExitStack() as stack:
        yield ClusterServers(
            together=stack.enter_context(
                PrometheusServer(workdir / "together", merged("together", raw["both"], rules["both"]))
            ),
            apart=stack.enter_context(
                PrometheusServer(workdir / "apart", merged("apart", rules["east"], rules["west"]))
            ),
            late=stack.enter_context(
                PrometheusServer(
                    workdir / "late", merged("late", raw["both"], rules["east"], rules["west-late"])
                )
            ),
        )


Recorded = dict[tuple[tuple[str, str], ...], list[list[object]]]


def _recorded(url: str, end: datetime) -> Recorded:
    """Every rollup series the server holds over the rules' span, by its labels: [stamp, value] pairs."""
    span = int((CLUSTERS_RULES_SPAN + timedelta(minutes=10)).total_seconds())
    out: Recorded = {}
    for name in RECORDS:
        answer = requests.post(
            url + "/api/v1/query", data={"query": f"{name}[{span}s]", "time": end.timestamp()}, timeout=60
        )
        answer.raise_for_status()
        for item in answer.json()["data"]["result"]:
            out[tuple(sorted(item["metric"].items()))] = item["values"]
    return out


@pytest.mark.prometheus
def test_rules_over_two_clusters_record_what_each_cluster_records_alone(
    cluster_servers: ClusterServers, standard_fleet: Fleet
) -> None:
    end = standard_fleet.scenario.end
    together = _recorded(cluster_servers.together.url, end)
    apart = _recorded(cluster_servers.apart.url, end)
    # The same series, stamps and values, to the last digit: nothing of one cluster reaches another's.
    assert together.keys() == apart.keys()
    for key, values in together.items():
        assert values == apart[key], key

    def cluster_of(key: tuple[tuple[str, str], ...]) -> str | None:
        return dict(key).get(dcgm.CLUSTER_LABEL)

    assert {cluster_of(key) for key in together} == set(CLUSTERS)
    # One fleet count per cluster and metric, where one series was recorded for both before.
    fleet = sorted(key for key in together if dict(key)[rollups.ROLLUP_LABEL] == rollups.FLEET)
    assert fleet == sorted(
        (("__name__", name), (dcgm.CLUSTER_LABEL, cluster), (rollups.ROLLUP_LABEL, rollups.FLEET))
        for name in RECORDS
        for cluster in CLUSTERS
        if name in {rollups.rule_name(metric) for metric in ROLLED_UP}
    )
    # One series per cluster for each raw series: the same holders in both, with numbers of their own.
    per_cluster = {
        cluster: {
            tuple(kv for kv in key if kv[0] != dcgm.CLUSTER_LABEL): values
            for key, values in together.items()
            if cluster_of(key) == cluster
        }
        for cluster in CLUSTERS
    }
    east, west = per_cluster["east"], per_cluster["west"]
    assert east.keys() == west.keys()
    kinds = {dict(key)[rollups.ROLLUP_LABEL] for key in east}
    assert kinds == {*rollups.KINDS, rollups.FLEET}
    for kind in kinds:
        assert any(east[key] != west[key] for key in east if dict(key)[rollups.ROLLUP_LABEL] == kind), (
            f"the clusters' {kind} rollups do not differ: the test would not see them added together"
        )


@pytest.mark.prometheus
@pytest.mark.parametrize(
    "back",
    [
        pytest.param(timedelta(0), id="at-end"),
        pytest.param(timedelta(minutes=2, seconds=30, milliseconds=7), id="ragged"),
    ],
)
def test_each_cluster_reads_its_own_rollups_to_the_raw_numbers(
    cluster_servers: ClusterServers, standard_fleet: Fleet, back: timedelta
) -> None:
    url = cluster_servers.together.url
    window = TimeWindow.ending(standard_fleet.scenario.end - back, timedelta(hours=2))
    for cluster in CLUSTERS:
        rolled = PrometheusSource(PrometheusConfig(url)).for_cluster(cluster).snapshot(window, Thresholds())
        raw = (
            PrometheusSource(PrometheusConfig(url), recording_rules=False)
            .for_cluster(cluster)
            .snapshot(window, Thresholds())
        )
        assert set(rolled.capabilities.rollups) == ROLLED_UP, cluster
        _assert_same_numbers(rolled, raw)


@pytest.mark.prometheus
def test_a_cluster_whose_rules_started_late_reads_raw_samples_alone(
    cluster_servers: ClusterServers, standard_fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    """Each cluster's own ruler: east's rules cover the window, west's started within it. East reads
    its rollups, west its raw samples, and both find the raw numbers."""
    url = cluster_servers.late.url
    window = TimeWindow.ending(standard_fleet.scenario.end, LATE_RULES_SPAN + timedelta(hours=1))
    for cluster, used in (("east", ROLLED_UP), ("west", set())):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="analyzer.sources.prometheus"):
            rolled = (
                PrometheusSource(PrometheusConfig(url)).for_cluster(cluster).snapshot(window, Thresholds())
            )
        raw = (
            PrometheusSource(PrometheusConfig(url), recording_rules=False)
            .for_cluster(cluster)
            .snapshot(window, Thresholds())
        )
        assert set(rolled.capabilities.rollups) == used, cluster
        if not used:
            assert "evaluations in the window recorded); reading raw samples" in caplog.text
        _assert_same_numbers(rolled, raw)
