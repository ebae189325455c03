"""PromQL is built, never pasted: values are escaped, names validated, and every query parses."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import promql_parser
import pytest

from analyzer.sources import dcgm, promql
from analyzer.sources.aggregates import DeviceKey
from analyzer.sources.dcgm import Capabilities, PodLabels
from analyzer.sources.fleet_queries import FleetQueries
from analyzer.sources.prometheus_api import PrometheusClient
from analyzer.sources.prometheus_config import PrometheusConfig
from common.errors import DataUnavailableError
from harness.servers import VictoriaMetricsServer

HOSTILE = [
    pytest.param('a"} or vector(1) #', id="quote-breaks-out-of-the-literal"),
    pytest.param("back\\slash", id="backslash"),
    pytest.param("new\nline", id="newline"),
    pytest.param("dots.and*stars+(group)|alt[class]{1}^$?", id="regex-metacharacters"),
    pytest.param("üñíçødé-pod", id="unicode"),
]


@pytest.mark.parametrize("value", HOSTILE)
def test_quoted_values_parse_back_to_themselves(value: str) -> None:
    expr = promql_parser.parse(promql.selector("x", [promql.eq("pod", value)]))
    (matcher,) = expr.matchers.matchers  # type: ignore[attr-defined]
    assert matcher.value == value


@pytest.mark.parametrize("value", HOSTILE)
def test_regex_alternations_match_exactly_their_values(value: str) -> None:
    pattern = promql.regex_of([value, "other"])
    assert re.fullmatch(pattern, value)
    assert re.fullmatch(pattern, "other")
    assert not re.fullmatch(pattern, value + "x")
    promql_parser.parse(promql.selector("x", [promql.one_of("pod", [value, "other"])]))


def test_hostile_value_cannot_add_a_second_selector() -> None:
    text = promql.selector("kube_pod_owner", [promql.eq("pod", 'x"} or up{job="')])
    expr = promql_parser.parse(text)
    assert type(expr).__name__ == "VectorSelector"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("bad-label", id="dash"),
        pytest.param("1st", id="leading-digit"),
        pytest.param("", id="empty"),
    ],
)
def test_label_names_are_validated(name: str) -> None:
    with pytest.raises(ValueError, match="label name"):
        promql.eq(name, "x")


def test_metric_names_are_validated() -> None:
    with pytest.raises(ValueError, match="metric name"):
        promql.selector("rate(x)")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(timedelta(hours=6), "21600s", id="hours"),
        pytest.param(timedelta(seconds=15), "15s", id="seconds"),
        pytest.param(timedelta(milliseconds=1500), "1500ms", id="milliseconds"),
    ],
)
def test_durations(value: timedelta, text: str) -> None:
    assert promql.duration(value) == text


def test_render_template_escapes_every_placeholder() -> None:
    template = 'sum(rate(http_requests_total{namespace="$namespace", pod=~"$pods"}[$window]))'
    text = promql.render_template(
        template, {"namespace": 'ns"evil', "window": "6h"}, {"pods": ["web-1", "web.2"]}
    )
    promql_parser.parse(text)
    assert 'namespace="ns\\"evil"' in text
    assert 'pod=~"web-1|web\\\\.2"' in text


def test_render_template_refuses_unknown_placeholders() -> None:
    with pytest.raises(KeyError):
        promql.render_template('up{x="$nope"}', {}, {})


def _capabilities(**overrides: object) -> Capabilities:
    base: dict[str, object] = {
        "util_metrics": (dcgm.PROF_GR_ENGINE_ACTIVE, dcgm.DEV_GPU_UTIL),
        "host_labels": ("Hostname",),
        "gpu_pod": PodLabels(),
        "mig": True,
        "histogram_le": ("10", "75", "+Inf"),
        "memory": True,
        "kube_state_metrics": True,
        "replicaset_owner": True,
    }
    return Capabilities(**{**base, **overrides})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "caps",
    [
        pytest.param(_capabilities(), id="dcgm-exporter-labels"),
        pytest.param(
            _capabilities(
                host_labels=("hostname",),
                gpu_pod=PodLabels(pod="exported_pod", namespace="exported_namespace"),
                ksm_pod=PodLabels(pod="exported_pod", namespace="exported_namespace"),
                mig=False,
            ),
            id="relabelled",
        ),
        pytest.param(_capabilities(kube_state_metrics=False), id="no-kube-state-metrics"),
    ],
)
def test_every_fleet_query_parses(caps: Capabilities) -> None:
    q = FleetQueries(caps, timedelta(hours=6))
    key = DeviceKey("GPU-1", "0", "ns", 'we"ird')
    queries = [
        q.histogram_increase(),
        q.device_raw(dcgm.DEV_GPU_UTIL, ["GPU-1", "GPU-2"], timedelta(minutes=30)),
        q.bucket_raw(["GPU-1"], timedelta(hours=1)),
        q.one_device_raw(dcgm.DEV_GPU_UTIL, key, "dcgm-exporter"),
        q.memory(["GPU-1"]),
        q.gpu_pods(),
        q.pod_owners(),
        q.pod_start_times(),
        q.pod_gpu_requests(),
        q.replicaset_owners(),
        q.cpu_usage(),
        q.cpu_limits(),
        q.cpu_throttled_ratio(),
        FleetQueries.names_match(),
        FleetQueries.util_match(),
    ]
    for metric in caps.util_metrics:
        queries += [
            q.device_count(metric),
            q.device_sum(metric),
            q.device_max(metric),
            q.device_quantile(metric, 0.1),
        ]
    for text in queries:
        promql_parser.parse(text)


def test_aggregates_carry_only_the_identifying_labels() -> None:
    """Answers stay small: a device holder is UUID, MIG instance, namespace and pod — nothing else."""
    q = FleetQueries(_capabilities(), timedelta(hours=6))
    assert q.device_max(dcgm.DEV_GPU_UTIL).startswith("max by (UUID, GPU_I_ID, namespace, pod) (")
    assert "Hostname" in q.device_count(dcgm.DEV_GPU_UTIL)


def _uuids(count: int) -> list[str]:
    return [f"GPU-{i:08x}-9ad2-5dc5-8ae8-5e66d2e9af27" for i in range(count)]


def test_fitting_splits_runs_whose_text_is_too_long_and_keeps_every_name_once() -> None:
    names = _uuids(1_000)
    # A query naming each UUID twice (used + free) is too long at 200 a run: the runs halve.
    build = FleetQueries(_capabilities(), timedelta(hours=6)).memory_capacity
    runs = list(promql.fitting(names, build, 200))
    assert [name for run in runs for name in run] == names
    assert all(len(build(run)) <= promql.MAX_QUERY_CHARS for run in runs)
    assert max(map(len, runs)) <= 200 and len(runs) > 1_000 / 200
    # A short text keeps the runs at the count given.
    assert [len(run) for run in promql.fitting(names[:450], lambda run: "x", 200)] == [200, 200, 50]
    # One name too long for the limit is still sent alone: the server will say why it refuses it.
    assert list(promql.fitting(["n"], lambda run: "x" * (promql.MAX_QUERY_CHARS + 1), 200)) == [["n"]]


@pytest.mark.victoriametrics
def test_every_memory_query_over_a_thousand_gpus_is_short_enough_for_victoriametrics(
    victoria_standard: VictoriaMetricsServer,
) -> None:
    """VictoriaMetrics refuses query texts over 16 KiB by default: the memory reads (the likely
    idle endpoints', right-sizing's peaks and capacity) over 1,000 GPUs, on a fleet with per-pod
    memory (each query naming every UUID twice), must all be accepted."""
    q = FleetQueries(_capabilities(pod_memory=True), timedelta(hours=6))
    client = PrometheusClient(PrometheusConfig(victoria_standard.url))
    at = datetime(2026, 1, 5, tzinfo=UTC)
    builds = [q.memory, lambda run: q.memory_peak(run, 0.99), q.memory_capacity]
    texts = [build(run) for build in builds for run in promql.fitting(_uuids(1_000), build, 200)]
    assert max(map(len, texts)) > 8_000  # long texts were sent, not only short ones
    assert client.vectors([(text, at) for text in texts]) == [[] for _ in texts]
    with pytest.raises(DataUnavailableError, match="maxQueryLen"):  # what 200 UUIDs a text met
        client.vector(q.memory_capacity(_uuids(200)), at)
