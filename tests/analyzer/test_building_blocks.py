"""The pure pieces under the detectors: schema decisions, owner resolution, sample arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from analyzer.detection.mig import gpu_share
from analyzer.detection.ownership import resolve
from analyzer.sources import dcgm, vocabulary
from analyzer.sources.aggregates import (
    DeviceInfo,
    DeviceKey,
    PodRecord,
    coverage,
    histogram_shares,
    pod_records,
)
from analyzer.sources.dcgm import Capabilities, PodLabels
from analyzer.sources.prometheus.spans import PODS_PER_QUERY
from analyzer.sources.prometheus.spans import near_spans as _near_spans
from analyzer.sources.sample_math import (
    counter_increase,
    counter_rate,
    sample_shares,
    util_stats,
)
from common.model import TimeWindow, WorkloadRef


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({"Hostname", "UUID"}, ("Hostname",), id="dcgm-exporter-up-to-4.8.2"),
        pytest.param({"hostname", "UUID"}, ("hostname",), id="dcgm-exporter-4.8.3-on"),
        pytest.param({"node", "instance"}, ("node",), id="node-label"),
        pytest.param({"instance"}, ("instance",), id="only-instance"),
        pytest.param({"Hostname", "hostname", "node"}, ("Hostname", "hostname"), id="mid-upgrade-both"),
        pytest.param({"hostname", "node", "instance"}, ("hostname",), id="exporter-label-wins"),
    ],
)
def test_host_labels(labels: set[str], expected: tuple[str, ...]) -> None:
    assert dcgm.choose_host_labels(labels) == expected


def test_a_device_is_on_the_node_its_series_name_under_either_label() -> None:
    caps = Capabilities(
        util_metrics=(dcgm.DEV_GPU_UTIL,), host_labels=("Hostname", "hostname"), gpu_pod=PodLabels()
    )
    assert caps.node_of({"Hostname": "gpu-a"}) == "gpu-a"
    assert caps.node_of({"hostname": "gpu-b", "Hostname": ""}) == "gpu-b"
    assert caps.node_of({"instance": "10.0.0.1:9400"}) == ""
    assert caps.identity_labels()[-5:-3] == ("Hostname", "hostname")


@pytest.mark.parametrize(
    ("labels", "pod", "namespace"),
    [
        pytest.param({"pod", "namespace"}, "pod", "namespace", id="honoured-labels"),
        pytest.param(
            {"pod", "namespace", "exported_pod", "exported_namespace"},
            "exported_pod",
            "exported_namespace",
            id="exported-labels-win",
        ),
        pytest.param({"exported_pod", "namespace"}, "exported_pod", "namespace", id="only-pod-exported"),
    ],
)
def test_pod_labels(labels: set[str], pod: str, namespace: str) -> None:
    chosen = dcgm.choose_pod_labels(labels)
    assert (chosen.pod, chosen.namespace) == (pod, namespace)


@pytest.mark.parametrize(
    ("max_value", "fraction", "scale"),
    [
        pytest.param(97.0, False, vocabulary.PERCENT_TO_PERCENT, id="above-one-is-percent"),
        pytest.param(
            97.0, True, vocabulary.PERCENT_TO_PERCENT, id="above-one-is-percent-even-with-fractions"
        ),
        pytest.param(0.97, True, vocabulary.RATIO_TO_PERCENT, id="fractions-at-most-one-are-ratio"),
        pytest.param(1.0, False, vocabulary.PERCENT_TO_PERCENT, id="idle-percent-blips-stay-percent"),
        pytest.param(0.0, False, vocabulary.PERCENT_TO_PERCENT, id="all-zero-is-percent"),
    ],
)
def test_unit_decision(max_value: float, fraction: bool, scale: float) -> None:
    assert dcgm.dev_unit_to_percent(max_value, fraction) == scale


@pytest.mark.parametrize(
    ("ones_share", "scale"),
    [
        pytest.param(0.05, vocabulary.PERCENT_TO_PERCENT, id="rare-1-percent-blips-are-an-idle-gpu"),
        pytest.param(
            0.3, vocabulary.RATIO_TO_PERCENT, id="often-exactly-1-is-a-busy-0-1-gauge-never-read-as-idle"
        ),
    ],
)
def test_a_job_of_only_zeros_and_ones(ones_share: float, scale: float) -> None:
    assert dcgm.dev_unit_to_percent(1.0, False, ones_share) == scale


@pytest.mark.parametrize(
    ("stamps", "expected"),
    [
        pytest.param(np.arange(0, 600, 15.0), 15.0, id="regular"),
        pytest.param(
            np.concatenate([np.arange(0, 300, 30.0), np.arange(3600, 4000, 30.0)]), 30.0, id="with-a-gap"
        ),
        pytest.param(np.array([0.0, 60.0]), None, id="too-few"),
        pytest.param([60.0, 0.0, 30.0, 45.0], 15.0, id="a-decoded-list-out-of-order"),
    ],
)
def test_median_interval(stamps: np.ndarray | list[float], expected: float | None) -> None:
    assert dcgm.median_interval([stamps]) == expected


def test_median_interval_takes_gaps_within_each_series() -> None:
    """Two replicas scraping 15 s apart in phase: 30 s each, never the 15 s between them."""
    assert dcgm.median_interval([[0.0, 30.0, 60.0, 90.0], [15.0, 45.0, 75.0]]) == 30.0


@pytest.mark.parametrize(
    ("bounds", "expected"),
    [
        pytest.param(
            {"5": 5, "10": 10, "25": 25, "50": 50, "75": 75, "90": 90, "95": 95, "+Inf": np.inf},
            ("10", "75", "+Inf"),
            id="our-exporter-buckets",
        ),
        pytest.param(
            {"5.0": 5, "10.0": 10, "75.0": 75, "+Inf": np.inf},
            ("10.0", "75.0", "+Inf"),
            id="client-library-spelling",
        ),
        pytest.param({"8": 8, "60": 60, "+Inf": np.inf}, ("8", "60", "+Inf"), id="nearest-lower-bounds"),
    ],
)
def test_bucket_choice(bounds: dict[str, float], expected: tuple[str, str, str]) -> None:
    assert dcgm.pick_buckets(bounds, 10.0, 75.0) == expected


def test_bucket_choice_refuses_histograms_that_cannot_split() -> None:
    with pytest.raises(ValueError, match="lacks"):
        dcgm.pick_buckets({"50": 50, "+Inf": np.inf}, 10.0, 75.0)


def _pod(owner_kind: str | None, owner_name: str | None, name: str = "p-1") -> PodRecord:
    return PodRecord(namespace="ns", name=name, owner_kind=owner_kind, owner_name=owner_name)


@pytest.mark.parametrize(
    ("owner", "replicasets", "expected"),
    [
        pytest.param(
            ("ReplicaSet", "web-7d9f8c6b5x"),
            {("ns", "web-7d9f8c6b5x"): ("Deployment", "web")},
            ("Deployment", "web"),
            id="replicaset-to-deployment",
        ),
        pytest.param(
            ("ReplicaSet", "web-7d9f8c6b5x"),
            {("ns", "other"): ("Deployment", "x")},
            ("ReplicaSet", "web-7d9f8c6b5x"),
            id="unknown-replicaset-stays-replicaset",
        ),
        pytest.param(
            ("ReplicaSet", "web-7d9f8c6b5x"),
            {},
            ("Deployment", "web"),
            id="no-replicaset-series-hash-suffix-names-deployment",
        ),
        pytest.param(("ReplicaSet", "handmade"), {}, ("ReplicaSet", "handmade"), id="no-hash-no-guess"),
        pytest.param(
            ("ReplicaSet", "rs"),
            {("ns", "rs"): ("<none>", "<none>")},
            ("ReplicaSet", "rs"),
            id="bare-replicaset",
        ),
        pytest.param(("Job", "train"), {}, ("Job", "train"), id="job"),
        pytest.param(("StatefulSet", "db"), {}, ("StatefulSet", "db"), id="statefulset"),
        pytest.param(("RayCluster", "ray"), {}, ("RayCluster", "ray"), id="custom-controller"),
        pytest.param(("<none>", "<none>"), {}, ("Pod", "p-1"), id="bare-pod"),
        pytest.param((None, None), {}, ("Pod", "p-1"), id="no-owner-series"),
    ],
)
def test_resolution(
    owner: tuple[str | None, str | None],
    replicasets: dict[tuple[str, str], tuple[str, str]],
    expected: tuple[str, str],
) -> None:
    ref = resolve(_pod(*owner), replicasets)
    assert ref == WorkloadRef(kind=expected[0], name=expected[1], namespace="ns")


@pytest.mark.parametrize(
    ("job_owner", "expected"),
    [
        pytest.param(("CronJob", "nightly"), ("CronJob", "nightly"), id="cronjob-runs-are-one-workload"),
        pytest.param(("JobSet", "trainer"), ("JobSet", "trainer"), id="jobset-jobs-are-one-workload"),
        pytest.param(("<none>", "<none>"), ("Job", "train"), id="ownerless-job-is-itself"),
        pytest.param(None, ("Job", "train"), id="no-job-owner-series"),
    ],
)
def test_jobs_resolve_to_the_owner_above_them(
    job_owner: tuple[str, str] | None, expected: tuple[str, str]
) -> None:
    jobs = {} if job_owner is None else {("ns", "train"): job_owner}
    assert resolve(_pod("Job", "train"), {}, jobs) == WorkloadRef(
        kind=expected[0], name=expected[1], namespace="ns"
    )


def test_ownerless_jobs_sharing_a_name_label_are_one_group() -> None:
    pod = PodRecord("ns", "eval-a-x1", owner_kind="Job", owner_name="eval-a", group="eval-sweep")
    assert resolve(pod, {}, {}) == WorkloadRef(kind="JobGroup", name="eval-sweep", namespace="ns")
    # An owner above the Job wins over the label.
    assert resolve(pod, {}, {("ns", "eval-a"): ("CronJob", "nightly")}).kind == "CronJob"
    # A Deployment's pods are never regrouped by their label.
    rs = PodRecord("ns", "web-1", owner_kind="ReplicaSet", owner_name="web-7d9f8c6b5x", group="web")
    assert resolve(rs, {("ns", "web-7d9f8c6b5x"): ("Deployment", "web")}).kind == "Deployment"


def _row(pod: str, value: float, **labels: str) -> tuple[tuple[str, str], dict[str, str], float]:
    return (("ns", pod), labels, value)


@pytest.mark.parametrize(
    ("scheduled", "pending", "requests", "never_scheduled"),
    [
        pytest.param(
            [_row("p", 0.0, condition="true")],
            [_row("p", 1.0)],
            [_row("p", 1.0, node="")],
            True,
            id="podscheduled-false-all-window",
        ),
        pytest.param(
            [_row("p", 1.0, condition="true")],
            [_row("p", 1.0)],
            [_row("p", 1.0, node="n")],
            False,
            id="scheduled-but-still-pending-holds-its-gpu",
        ),
        pytest.param(
            [],
            [_row("p", 1.0)],
            [_row("p", 1.0, node="")],
            True,
            id="no-condition-series-pending-without-node",
        ),
        pytest.param(
            [],
            [_row("p", 0.0)],
            [_row("p", 1.0, node="")],
            False,
            id="no-condition-series-running-is-never-guessed-unscheduled",
        ),
    ],
)
def test_pods_never_scheduled_follow_kube_state_metrics(
    scheduled: list[Any], pending: list[Any], requests: list[Any], never_scheduled: bool
) -> None:
    owners = [_row("p", 1.0, owner_kind="ReplicaSet", owner_name="rs", owner_is_controller="true")]
    pod = pod_records(owners, [], requests, scheduled=scheduled, pending=pending)[("ns", "p")]
    assert pod.never_scheduled is never_scheduled


def test_a_pod_recreated_under_its_name_requests_what_one_incarnation_does() -> None:
    owners = [_row("db-0", 1.0, owner_kind="StatefulSet", owner_name="db", owner_is_controller="true")]
    requests = [
        _row("db-0", 1.0, uid="a", node=""),  # before the old incarnation was scheduled
        _row("db-0", 1.0, uid="a", node="n1"),
        _row("db-0", 1.0, uid="b", node="n2"),
    ]
    starts = [_row("db-0", 100.0, uid="a"), _row("db-0", 900.0, uid="b")]
    pod = pod_records(owners, starts, requests)[("ns", "db-0")]
    assert pod.gpu_requests == 1
    assert pod.starts == (100.0, 900.0)
    assert pod.start == 900.0


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([0, 10, 20, 30], 30, id="monotonic"),
        pytest.param([100, 110, 5, 15], 10 + 5 + 10, id="reset-counts-from-zero"),
        pytest.param([100, 110, 0, 0, 7], 10 + 7, id="reset-to-zero"),
        pytest.param([5], 0, id="single-sample"),
    ],
)
def test_counter_increase(values: list[float], expected: float) -> None:
    assert counter_increase(np.asarray(values, dtype=float)) == expected


def test_counter_rate_across_a_reset() -> None:
    t = np.array([0.0, 60.0, 120.0, 180.0])
    assert counter_rate(t, np.array([0.0, 300.0, 60.0, 360.0])) == pytest.approx((300 + 60 + 300) / 180)


def test_util_stats_quantiles_interpolate_like_quantile_over_time() -> None:
    stats = util_stats(np.array([0.0, 10.0, 20.0, 30.0, 40.0, np.nan]), 0.1)
    assert stats is not None
    assert stats.samples == 5
    assert stats.mean == 20.0
    assert stats.q_low == pytest.approx(4.0)  # rank 0.1 × (5 - 1) = 0.4 → 0 + 0.4 × 10
    assert stats.q_high == pytest.approx(36.0)
    assert util_stats(np.array([np.nan]), 0.1) is None


def test_shares_from_samples_and_histogram_agree() -> None:
    values = np.array([2.0] * 45 + [50.0] * 10 + [95.0] * 45)
    raw = sample_shares(values, 10.0, 75.0)
    hist = histogram_shares(stalled_count=45.0, busy_bound_count=55.0, total=100.0)
    assert raw is not None and hist is not None
    assert (raw.stalled, raw.busy) == pytest.approx((hist.stalled, hist.busy))
    assert (raw.stalled, raw.busy) == pytest.approx((0.45, 0.45))
    assert histogram_shares(0.0, 0.0, 0.0) is None


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        pytest.param(361, 1.0, id="closed-range-extra-sample-capped"),
        pytest.param(180, 0.5, id="half"),
        pytest.param(0, 0.0, id="none"),
    ],
)
def test_coverage(samples: int, expected: float) -> None:
    assert coverage(samples, 6 * 3600.0, 60.0) == expected


def test_device_ids_name_mig_instances() -> None:
    assert DeviceKey("GPU-1").device_id == "GPU-1"
    assert DeviceKey("GPU-1", "2", "ns", "p").device_id == "GPU-1/mig-2"
    assert not DeviceKey("GPU-1").allocated


def test_units_per_scrape_job_follow_device_maxima() -> None:
    scales = dcgm.dev_to_percent_by_job(
        {
            "dcgm-exporter": [97.0, 0.0, 1.0],
            "recording-rule": [0.97, 0.01, 0.0],
            "idle-pool": [1.0, 0.0],
        }
    )
    assert scales == {
        "dcgm-exporter": vocabulary.PERCENT_TO_PERCENT,
        "recording-rule": vocabulary.RATIO_TO_PERCENT,
        "idle-pool": vocabulary.PERCENT_TO_PERCENT,
    }
    busy = dcgm.dev_to_percent_by_job({"binary": [1.0, 1.0]}, {"binary": 0.8})
    assert busy == {"binary": vocabulary.RATIO_TO_PERCENT}


@pytest.mark.parametrize(
    ("profile", "model", "share"),
    [
        ("1g.10gb", "NVIDIA A100-SXM4-80GB", 1 / 7),
        ("3g.40gb", "NVIDIA H100 80GB HBM3", 3 / 7),
        ("7g.80gb", None, 1.0),
        ("1g.6gb", "NVIDIA A30", 1 / 4),
        ("2g.12gb", None, 2 / 4),  # no model label: the A30's 6 GB per slice tells it
        ("1g.10gb+me", None, 1 / 7),
        (None, "NVIDIA A100-SXM4-80GB", 1.0),  # a whole GPU
        ("odd-profile", None, 1.0),  # unreadable: the whole GPU, never a guess
    ],
)
def test_mig_share_of_a_gpu(profile: str | None, model: str | None, share: float) -> None:
    info = DeviceInfo(node="n", metric="DCGM_FI_PROF_GR_ENGINE_ACTIVE", model=model, mig_profile=profile)
    assert gpu_share(info) == pytest.approx(share)


def test_pods_started_in_one_second_are_each_named_in_one_first_busy_query() -> None:
    """A Job's parallel pods (or a fleet brought up at once) share one start: holders listed by
    GPU, a pod's GPUs scattered among the others', must still name each pod in one query only,
    or every query selects and returns the GPUs of pods it does not need."""
    start = datetime(2026, 1, 5, tzinfo=UTC)
    span = TimeWindow(start=start, end=start + timedelta(minutes=30))
    pods = [f"train-{i:03d}" for i in range(2 * PODS_PER_QUERY + 10)]
    holders = sorted(
        ((DeviceKey(f"GPU-{gpu:02d}-{pod}", "", "research", pod), span) for pod in pods for gpu in range(4)),
        key=lambda h: h[0].uuid,
    )
    groups = list(_near_spans(holders))
    named = [pod for _, group in groups for pod in group]
    assert sorted(named) == pods  # every pod, each once
    assert len(groups) == 3
    assert all(reach == span for reach, _ in groups)
