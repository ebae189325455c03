"""PromQL is built, never pasted: values are escaped, names validated, and every query parses."""

from __future__ import annotations

import re
from datetime import timedelta

import promql_parser
import pytest

from analyzer.sources import dcgm, promql
from analyzer.sources.aggregates import DeviceKey
from analyzer.sources.dcgm import Capabilities, PodLabels
from analyzer.sources.fleet_queries import FleetQueries

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
        "host_label": "Hostname",
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
                host_label="hostname",
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
