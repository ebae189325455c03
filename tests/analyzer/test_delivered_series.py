"""Series as real monitoring stacks deliver them: the same verdicts with and without duplicates.

Each way a stack delivers a series more than once (kube-state-metrics rescheduled, rolled out,
run twice or sharded; dcgm-exporter scraped by two jobs; an HA pair written into one TSDB, each
replica with gaps of its own; an exporter restarted on its node) is one cluster of a single TSDB,
beside the standard fleet delivered once and a cluster whose workloads of the same names behave
otherwise. One analysis reads them all, each cluster apart: every shape must judge every workload
as the fleet delivered once is judged, and no verdict may cross from one cluster to another.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analyzer.pipeline import Analysis, analyze, analyze_in_detail
from analyzer.sources import dcgm
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusConfig
from common.errors import BadInputError
from common.model import FindingKind
from common.thresholds import Thresholds
from harness.servers import PrometheusServer, VictoriaMetricsServer, backfill_blocks
from simulation.fleet import Behaviour, Fleet, Series, load_scenario, simulate
from simulation.fleet.scenario import Delivery, Interval, NodeSpec, Scenario, WorkloadSpec
from simulation.fleet.truth import window_of

pytestmark = pytest.mark.slow

ONCE = "once"
SWAPPED = "swapped"  # the same names, other behaviours: legacy-ranker serves, chat-api idles
SHAPES: dict[str, dict[str, Any]] = {
    ONCE: {},
    "ksm-rescheduled": {"kube_state_metrics": {"moves": ["-2h"]}},
    "ksm-rollout": {"kube_state_metrics": {"moves": ["-3h"], "rollout_overlap": "10m"}},
    "ksm-two-replicas": {"kube_state_metrics": {"replicas": 2}},
    "ksm-sharded": {"kube_state_metrics": {"shards": 3}},
    "dcgm-scraped-twice": {"gpu_scrapes": 2},
    "ha-pair": {
        "ha_replicas": 2,
        # Each replica misses what the other holds: the union has no gap.
        "replica_gaps": [
            {"replica": 1, "start": "-3h", "end": "-2h"},
            {"replica": 0, "start": "-5h30m", "end": "-5h"},
        ],
    },
    "exporter-restarted": {},  # gpu-a's and gpu-b's exporter pods restart (new instance), same UUIDs
    # Every way at once, as a real stack combines them: in Prometheus, whose backfill costs most of
    # this module's time, the shapes are checked in these two clusters (each alone in VictoriaMetrics).
    "kube-state-metrics-every-way": {
        "kube_state_metrics": {"moves": ["-2h"], "rollout_overlap": "10m", "replicas": 2, "shards": 3}
    },
    "gpu-series-every-way": {
        "gpu_scrapes": 2,
        "ha_replicas": 2,
        "replica_gaps": [
            {"replica": 1, "start": "-3h", "end": "-2h"},
            {"replica": 0, "start": "-5h30m", "end": "-5h"},
        ],
    },
}
COMBINED = ("kube-state-metrics-every-way", "gpu-series-every-way")
IN_PROMETHEUS = (ONCE, *COMBINED, SWAPPED)

Verdicts = dict[tuple[str, str, str], str]


# A young endpoint (it started 5 h before the end, so it is judged over its own span) whose node's
# exporter was down for an hour of it: too little data, in every shape. Delivered twice, its
# samples must not count twice and fill the hole.
LATE_IDLE = ("Deployment", "serving", "late-idle")


def _scenario(shape: str) -> Scenario:
    standard = load_scenario("standard")
    late = NodeSpec(
        name="gpu-late", gpus=2, gaps=(Interval(start=timedelta(hours=-2), end=timedelta(hours=-1)),)
    )
    idle = WorkloadSpec(
        namespace="serving",
        name="late-idle",
        behaviour=Behaviour.IDLE,
        start=timedelta(hours=-5),
        node="gpu-late",
    )
    base = standard.model_copy(
        update={"nodes": (*standard.nodes, late), "workloads": (*standard.workloads, idle)}
    )
    update: dict[str, Any] = {"delivery": Delivery.model_validate(SHAPES.get(shape, {}) | {"cluster": shape})}
    if shape in ("exporter-restarted", "gpu-series-every-way"):
        update["nodes"] = tuple(
            n.model_copy(update={"exporter_moves": (timedelta(hours=-2),)})
            if n.name in ("gpu-a", "gpu-b")
            else n
            for n in base.nodes
        )
    if shape == SWAPPED:
        swap = {"legacy-ranker": Behaviour.SERVING, "chat-api": Behaviour.IDLE}
        update["workloads"] = tuple(
            w.model_copy(update={"behaviour": swap[w.name]}) if w.name in swap else w for w in base.workloads
        )
    return base.model_copy(update=update)


def _recent(fleet: Fleet) -> Iterator[Series]:
    """The samples an analysis of the fleet's window reads (ten minutes before it, for margin) of
    the metrics it reads: a backfill of one day of every series of ten fleets would take most of
    the suite's time."""
    since = window_of(fleet).start.timestamp() - 600
    for s in fleet.series:
        keep = s.timestamps > since
        if s.name in dcgm.KNOWN_METRICS and keep.any():
            yield Series(s.name, s.labels, s.timestamps[keep], s.values[keep])


@pytest.fixture(scope="module")
def fleets() -> dict[str, Fleet]:
    return {shape: simulate(_scenario(shape)) for shape in [*SHAPES, SWAPPED]}


def _all_series(fleets: dict[str, Fleet], only: tuple[str, ...] | None = None) -> Iterator[Series]:
    for shape, fleet in fleets.items():
        if only is None or shape in only:
            yield from _recent(fleet)


def _verdicts(analysis: Analysis | Any, cluster: str | None) -> Verdicts:
    findings = analysis.findings if hasattr(analysis, "findings") else analysis.report.findings
    return {
        (f.workload.kind, f.workload.namespace, f.workload.name): f.kind.value
        for f in findings
        if f.cluster == cluster
    }


def _analysis(url: str, fleet: Fleet, clusters: tuple[str, ...] = ()) -> Analysis:
    window = window_of(fleet)
    source = PrometheusSource(PrometheusConfig(url))
    return analyze_in_detail(source, window, Thresholds(), now=window.end, clusters=clusters)


def _check_every_shape(
    analysis: Analysis, baseline: Analysis, shapes: tuple[str, ...] = tuple(SHAPES)
) -> None:
    once = _verdicts(analysis, ONCE)
    # The cluster delivered once, read apart, is judged as the same fleet without any cluster label.
    assert once.pop(LATE_IDLE) == FindingKind.UNKNOWN.value
    assert once == _verdicts(baseline, None)
    once[LATE_IDLE] = FindingKind.UNKNOWN.value
    assert once[("Deployment", "serving", "legacy-ranker")] == FindingKind.IDLE_ENDPOINT.value
    for shape in shapes:
        assert _verdicts(analysis, shape) == once, f"{shape}: verdicts differ from the fleet delivered once"
    # Same names, other cluster: each judged on its own cluster's series alone.
    swapped = _verdicts(analysis, SWAPPED)
    assert ("Deployment", "serving", "legacy-ranker") not in swapped
    assert swapped[("Deployment", "serving", "chat-api")] == FindingKind.IDLE_ENDPOINT.value
    assert ("Deployment", "serving", "chat-api") not in once
    assert {p.cluster for p in analysis.parts} == {*shapes, SWAPPED}


@pytest.fixture(scope="module")
def victoria_delivered(fleets: dict[str, Fleet], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with VictoriaMetricsServer(tmp_path_factory.mktemp("victoria-delivered")) as server:
        server.import_series(_all_series(fleets))
        yield server.url


@pytest.mark.victoriametrics
def test_victoriametrics_every_delivery_shape_gives_the_verdicts_of_one_delivery(
    victoria_delivered: str, fleets: dict[str, Fleet], victoria_analysis: Analysis
) -> None:
    _check_every_shape(_analysis(victoria_delivered, fleets[ONCE]), victoria_analysis)


@pytest.mark.prometheus
def test_prometheus_every_delivery_shape_at_once_gives_the_verdicts_of_one_delivery(
    fleets: dict[str, Fleet], tmp_path: Path, prometheus_analysis: Analysis
) -> None:
    blocks = backfill_blocks(_all_series(fleets, IN_PROMETHEUS), tmp_path / "backfill")
    with PrometheusServer(tmp_path / "prometheus", blocks=blocks) as server:
        analysis = _analysis(server.url, fleets[ONCE])
    _check_every_shape(analysis, prometheus_analysis, (ONCE, *COMBINED))


@pytest.mark.victoriametrics
def test_a_cluster_analysed_among_others_is_judged_as_alone(
    victoria_delivered: str, fleets: dict[str, Fleet], tmp_path: Path
) -> None:
    with VictoriaMetricsServer(tmp_path / "alone") as server:
        server.import_series(_recent(fleets[SWAPPED]))
        alone = _analysis(server.url, fleets[SWAPPED])
    among = _analysis(victoria_delivered, fleets[ONCE], clusters=(SWAPPED,))
    assert {f.cluster for f in among.report.findings} == {SWAPPED}
    assert _verdicts(among, SWAPPED) == _verdicts(alone, SWAPPED)


@pytest.mark.victoriametrics
def test_an_unknown_cluster_is_bad_input_naming_the_clusters_held(
    victoria_delivered: str, fleets: dict[str, Fleet]
) -> None:
    window = window_of(fleets[ONCE])
    source = PrometheusSource(PrometheusConfig(victoria_delivered))
    with pytest.raises(BadInputError, match=r"prod-eu.*not found.*ha-pair"):
        analyze(source, window, Thresholds(), now=window.end, clusters=("prod-eu",))


def test_a_delivery_shape_changes_only_how_series_arrive() -> None:
    """The simulator's shapes keep every sample's value: a duplicated series is a copy."""
    once = simulate(_scenario(ONCE))
    twice = simulate(_scenario("ksm-two-replicas"))
    names = {s.name for s in once.series if s.label("job") == "kube-state-metrics"}
    for name in names:
        a = [s for s in once.series if s.name == name]
        b = [s for s in twice.series if s.name == name]
        assert len(b) == 2 * len(a)
        assert sum(s.values.size for s in b) == 2 * sum(s.values.size for s in a)
        assert np.isclose(sum(s.values.sum() for s in b), 2 * sum(s.values.sum() for s in a))


def _another_cluster(fleet: Fleet) -> Iterator[Series]:
    """The fleet as a second cluster of the same GitOps repository would report it, written into the
    same TSDB without a label telling the two apart: the same names, other GPUs, other pod uids,
    other scrape targets."""
    for s in _recent(fleet):
        labels = dict(s.labels)
        for name in ("UUID", "uid", "instance"):
            if name in labels:
                labels[name] = f"{labels[name]}-second-cluster"
        yield Series(s.name, tuple(sorted(labels.items())), s.timestamps, s.values)


def _check_ambiguous(analysis: Analysis) -> None:
    by_name = {f.workload.name: f for f in analysis.report.findings}
    ranker = by_name["legacy-ranker"]
    assert ranker.kind is FindingKind.UNKNOWN
    evidence = ranker.evidence.to_json()
    assert evidence["reason"] == "ambiguous"
    assert "ran as two pods at once" in str(evidence["ambiguity"])
    assert "second-cluster" in str(evidence["ambiguity"])
    assert ranker.wasted_gpu_hours == 0.0
    # No workload of two clusters is merged into one verdict that could be acted on.
    merged = [
        f.workload.name for f in analysis.report.findings if f.kind.actionable and f.workload.kind != "Node"
    ]
    assert merged == []


@pytest.mark.victoriametrics
def test_victoriametrics_two_unlabelled_clusters_of_one_name_are_unknown_never_merged(
    fleets: dict[str, Fleet], tmp_path: Path
) -> None:
    with VictoriaMetricsServer(tmp_path) as server:
        server.import_series([*_recent(fleets[ONCE]), *_another_cluster(fleets[ONCE])])
        _check_ambiguous(_analysis(server.url, fleets[ONCE]))


@pytest.mark.prometheus
def test_prometheus_two_unlabelled_clusters_of_one_name_are_unknown_never_merged(
    fleets: dict[str, Fleet], tmp_path: Path
) -> None:
    blocks = backfill_blocks([*_recent(fleets[ONCE]), *_another_cluster(fleets[ONCE])], tmp_path / "backfill")
    with PrometheusServer(tmp_path / "prometheus", blocks=blocks) as server:
        _check_ambiguous(_analysis(server.url, fleets[ONCE]))


@pytest.mark.victoriametrics
def test_the_request_rate_template_names_the_workloads_cluster(
    victoria_delivered: str, fleets: dict[str, Fleet]
) -> None:
    """`$cluster` lets a policy's request-rate query read the workload's own cluster: this one has
    data (0) only when the cluster is filled in; no data would never make an idle endpoint."""
    window = window_of(fleets[ONCE])
    template = 'sum(kube_pod_owner{cluster="$cluster", namespace="$namespace", pod=~"$pods"}) * 0'
    thresholds = Thresholds(request_rate_query=template)
    source = PrometheusSource(PrometheusConfig(victoria_delivered))
    report = analyze(source, window, thresholds, now=window.end, clusters=(SWAPPED,))
    chat = next(f for f in report.findings if f.workload.name == "chat-api")
    assert chat.kind is FindingKind.IDLE_ENDPOINT
    assert f'cluster="{SWAPPED}"' in str(chat.evidence.to_json()["request_rate_query"])
