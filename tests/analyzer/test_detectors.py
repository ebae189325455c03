"""Detectors, table-style: plain numbers in, a verdict (or none) out.

Each case builds a workload's view from utilization samples on a 60 s grid over a 6 h window, the
way the pipeline does after the closer look, so the cases read like the situations they model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from analyzer.detection import detectors, idle_endpoint, idle_node, low_utilization, starvation
from analyzer.detection.views import DeviceView, NodeView, PodView, RequestRate, WorkloadView
from analyzer.detection.workloads import pod_span
from analyzer.sources.aggregates import (
    CpuUsage,
    DeviceInfo,
    DeviceKey,
    PodRecord,
    Shares,
    coverage,
    quantile_levels,
)
from analyzer.sources.sample_math import (
    phase_lengths,
    sample_shares,
    util_stats,
)
from common.model import DataloaderStarvationEvidence, FindingKind, TimeWindow, WorkloadRef
from common.thresholds import Thresholds

END = datetime(2026, 1, 5, tzinfo=UTC)
WINDOW = TimeWindow.ending(END, timedelta(hours=6))
STEP_S = 60.0
T = Thresholds()


def series(
    level: float | Callable[[np.ndarray], np.ndarray],
    missing: Sequence[tuple[float, float]] = (),
) -> np.ndarray:
    """360 samples ending at END; ``missing`` holds (from, to) in hours before the end with no data."""
    count = int(WINDOW.duration.total_seconds() / STEP_S)
    back = (np.arange(count, 0, -1) - 1) * STEP_S / 3600.0  # hours before END, oldest first
    values = np.asarray(level(back), dtype=float) if callable(level) else np.full(count, float(level))
    keep = np.ones(count, dtype=bool)
    for older, newer in missing:
        keep &= ~((back < older) & (back >= newer))
    return np.where(keep, values, np.nan)


def noisy(mean: float, sd: float, seed: int = 0, low: float = 0.0, high: float = 100.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(mean + sd * rng.normal(size=360), low, high)


def idle(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.where(rng.random(360) < 0.05, 1.0, 0.0)


def sawtooth(back: np.ndarray) -> np.ndarray:
    """Two minutes computing at 95 %, two minutes waiting at 3 %."""
    return np.where((np.round(back * 60) // 2) % 2 == 0, 95.0, 3.0)


@dataclass(frozen=True)
class Gpu:
    values: np.ndarray
    histogram: Shares | None = None
    metric: str = "DCGM_FI_DEV_GPU_UTIL"
    mig_instance: str = ""
    memory_mib: float | None = None  # mean DCGM_FI_DEV_FB_USED over the window; None: not reported


@dataclass(frozen=True)
class Case:
    gpus: tuple[Gpu, ...]
    expected: FindingKind | None
    kind: str = "Deployment"
    started_hours_ago: float | None = 24.0
    cpu: CpuUsage = field(default_factory=CpuUsage)
    missing_devices: int = 0
    request_rate: RequestRate | None = None
    evidence: dict[str, object] = field(default_factory=dict)
    owner: WorkloadRef | None = None  # the controller the pods' labels name


def view(case: Case, t: Thresholds = T, now: datetime = END) -> WorkloadView:
    start = None if case.started_hours_ago is None else END - timedelta(hours=case.started_hours_ago)
    pod = PodRecord("ns", "app-pod", start=None if start is None else start.timestamp())
    span = pod_span(pod, WINDOW, t.warmup_grace, now)
    level = quantile_levels(t.starvation_min_share)[0]
    devices = []
    for i, gpu in enumerate(case.gpus if span is not None else ()):
        assert span is not None
        times = END.timestamp() - (np.arange(gpu.values.size, 0, -1) - 1) * STEP_S
        in_span = (times > span.start.timestamp()) & (times <= span.end.timestamp())
        judged = gpu.values[in_span]
        finite = np.isfinite(judged)
        present = judged[finite]
        devices.append(
            DeviceView(
                key=DeviceKey(f"GPU-{i}", gpu.mig_instance, "ns", "app-pod"),
                info=DeviceInfo(node="node-a", metric=gpu.metric, index=str(i)),
                stats=util_stats(present, level),
                coverage=coverage(present.size, span.duration.total_seconds(), STEP_S),
                span=span,
                shares=gpu.histogram
                or sample_shares(present, t.starvation_idle_percent, t.starvation_busy_percent),
                memory_used_mib=gpu.memory_mib,
                phases=phase_lengths(
                    times[in_span][finite], present, t.starvation_idle_percent, t.starvation_busy_percent
                ),
                interval_s=STEP_S,
            )
        )
    return WorkloadView(
        ref=WorkloadRef(kind=case.kind, name="app", namespace="ns"),
        pods=(PodView("ns", "app-pod", start, case.cpu),),
        devices=tuple(devices),
        window=WINDOW,
        judged=span,
        judged_seconds=0.0 if span is None else span.duration.total_seconds(),
        missing_devices=case.missing_devices,
        request_rate=case.request_rate,
        owner=case.owner,
    )


BIMODAL_HISTOGRAM = Shares(stalled=0.48, busy=0.5, weight=130_000, source="histogram")
UNIMODAL_HISTOGRAM = Shares(stalled=0.0, busy=0.0, weight=130_000, source="histogram")
CPU_PINNED = CpuUsage(usage_cores=5.8, limit_cores=6.0, throttled_ratio=0.65)
CPU_THROTTLED_ONLY = CpuUsage(usage_cores=3.0, limit_cores=8.0, throttled_ratio=0.4)
CPU_RELAXED = CpuUsage(usage_cores=2.0, limit_cores=8.0, throttled_ratio=0.01)

CASES = [
    # idle endpoints
    pytest.param(
        Case((Gpu(idle()), Gpu(idle(1))), FindingKind.IDLE_ENDPOINT), id="idle-deployment-is-idle-endpoint"
    ),
    pytest.param(Case((Gpu(idle()),), FindingKind.IDLE_ENDPOINT, kind="StatefulSet"), id="idle-statefulset"),
    pytest.param(
        Case((Gpu(idle()),), FindingKind.LOW_UTILIZATION, kind="Job"), id="idle-job-is-not-an-endpoint"
    ),
    pytest.param(
        Case((Gpu(idle()),), FindingKind.LOW_UTILIZATION, kind="Pod"), id="idle-bare-pod-is-low-utilization"
    ),
    pytest.param(
        Case((Gpu(idle()), Gpu(np.where(np.arange(360) == 200, 3.0, idle(2)))), FindingKind.LOW_UTILIZATION),
        id="one-sample-above-idle-line-is-not-idle",
    ),
    pytest.param(
        Case((Gpu(np.full(360, 2.0)),), FindingKind.IDLE_ENDPOINT), id="exactly-at-the-idle-line-is-idle"
    ),
    # memory held: an endpoint keeps its model loaded; GPUs without memory data do not block
    pytest.param(
        Case(
            (Gpu(idle(), memory_mib=40_000), Gpu(idle(1), memory_mib=39_000)),
            FindingKind.IDLE_ENDPOINT,
            evidence={"memory_used_mib": 39_500.0, "min_memory_used_mib": 39_000.0},
        ),
        id="idle-with-memory-held-is-idle-endpoint",
    ),
    pytest.param(
        Case(
            (Gpu(idle(), memory_mib=3.0),),
            FindingKind.LOW_UTILIZATION,
            evidence={"min_memory_used_mib": 3.0},
        ),
        id="idle-with-memory-not-held-is-low-utilization-never-dropped",
    ),
    pytest.param(
        Case((Gpu(idle(), memory_mib=40_000), Gpu(idle(1), memory_mib=0.0)), FindingKind.LOW_UTILIZATION),
        id="one-gpu-holding-no-memory-is-not-an-endpoint",
    ),
    pytest.param(
        Case((Gpu(idle()), Gpu(idle(1))), FindingKind.IDLE_ENDPOINT, evidence={"idle_min_memory_mib": 256.0}),
        id="idle-with-no-memory-data-is-idle-endpoint",
    ),
    pytest.param(
        Case(
            (Gpu(idle(), memory_mib=40_000), Gpu(idle(1))),
            FindingKind.IDLE_ENDPOINT,
            evidence={"min_memory_used_mib": 40_000.0},
        ),
        id="a-gpu-without-memory-data-does-not-block",
    ),
    pytest.param(
        Case((Gpu(idle(), memory_mib=256.0),), FindingKind.IDLE_ENDPOINT),
        id="memory-exactly-at-the-line-is-held",
    ),
    # warm-up grace
    pytest.param(
        Case(
            (Gpu(series(lambda b: np.where(b < 0.25, 0.0, np.nan))),),
            FindingKind.UNKNOWN,
            started_hours_ago=20 / 60,
            evidence={"reason": "too_young", "judged_hours": 0.0},
        ),
        id="warm-up-twenty-minutes-old-is-unknown-too-young-never-silent",
    ),
    pytest.param(
        Case(
            (Gpu(series(lambda b: np.where(b < 2, 0.0, np.nan))),),
            FindingKind.UNKNOWN,
            started_hours_ago=2.0,
            evidence={"reason": "too_young", "judged_hours": 1.5},
        ),
        id="warm-up-less-than-half-the-window-judged-is-unknown-too-young",
    ),
    pytest.param(
        Case(
            (Gpu(series(lambda b: np.where(b < 4, np.where(b > 3.75, 0.0, 60.0), np.nan))),),
            None,
            started_hours_ago=4.0,
        ),
        id="warm-up-zeros-are-not-judged-busy-after-grace",
    ),
    pytest.param(
        Case(
            (Gpu(series(lambda b: np.where(b < 4, 0.0, np.nan))),),
            FindingKind.IDLE_ENDPOINT,
            started_hours_ago=4.0,
        ),
        id="warm-up-over-idle-since-grace-ended",
    ),
    # gaps and vanished GPUs: never evidence of idleness
    pytest.param(
        Case((Gpu(series(0.0, missing=[(5, 2)])),), FindingKind.UNKNOWN), id="gap-of-three-hours-is-unknown"
    ),
    pytest.param(
        Case((Gpu(series(0.0, missing=[(4 + 1 / 6, 4)])),), FindingKind.IDLE_ENDPOINT),
        id="gap-of-ten-minutes-keeps-coverage",
    ),
    pytest.param(
        Case((Gpu(series(93.0, missing=[(2, 0)])),), FindingKind.UNKNOWN),
        id="gpu-fell-off-the-bus-is-unknown",
    ),
    pytest.param(
        Case((Gpu(idle()),), FindingKind.UNKNOWN, missing_devices=1),
        id="gpu-requested-but-never-reported-is-unknown",
    ),
    pytest.param(
        Case((Gpu(series(np.nan)),), FindingKind.UNKNOWN), id="no-samples-at-all-is-unknown-not-idle"
    ),
    # starvation
    pytest.param(
        Case(
            (Gpu(series(sawtooth)), Gpu(series(sawtooth))),
            FindingKind.DATALOADER_STARVATION,
            kind="Job",
            evidence={"pattern": "bimodal", "shares_from": "samples"},
        ),
        id="sawtooth-in-scraped-samples-is-starvation",
    ),
    pytest.param(
        Case(
            (Gpu(noisy(49, 2), histogram=BIMODAL_HISTOGRAM),),
            FindingKind.DATALOADER_STARVATION,
            kind="Job",
            evidence={"pattern": "bimodal", "shares_from": "histogram"},
        ),
        id="flat-gauge-bimodal-histogram-is-starvation",
    ),
    pytest.param(
        Case(
            (Gpu(noisy(45, 4), histogram=UNIMODAL_HISTOGRAM),),
            FindingKind.DATALOADER_STARVATION,
            kind="Job",
            cpu=CPU_PINNED,
            evidence={"pattern": "cpu_bound", "cpu_saturation": 0.9667},
        ),
        id="flat-middling-at-cpu-limit-is-starvation",
    ),
    pytest.param(
        Case(
            (Gpu(noisy(45, 4)),),
            FindingKind.DATALOADER_STARVATION,
            kind="Job",
            cpu=CPU_THROTTLED_ONLY,
            evidence={"pattern": "cpu_bound", "cpu_throttled_ratio": 0.4},
        ),
        id="flat-middling-cfs-throttled-is-starvation",
    ),
    pytest.param(
        Case((Gpu(noisy(45, 4)),), None, kind="Job", cpu=CPU_RELAXED),
        id="flat-middling-cpu-relaxed-is-healthy",
    ),
    pytest.param(
        Case((Gpu(noisy(45, 4)),), None, kind="Job", cpu=CpuUsage()),
        id="flat-middling-no-cpu-data-is-not-blamed",
    ),
    pytest.param(
        Case((Gpu(noisy(55, 25)),), None, kind="Job", cpu=CPU_PINNED),
        id="varying-middling-at-cpu-limit-is-not-flat",
    ),
    pytest.param(
        Case(
            (Gpu(np.where(np.arange(360) % 11 == 0, 0.0, noisy(45, 4))),),
            FindingKind.DATALOADER_STARVATION,
            kind="Job",
            cpu=CPU_PINNED,
            evidence={"pattern": "cpu_bound"},
        ),
        id="checkpoint-zeros-do-not-break-a-flat-cpu-bound-gpu",
    ),
    pytest.param(
        Case(
            (Gpu(noisy(45, 4)),),
            FindingKind.DATALOADER_STARVATION,
            kind="Job",
            cpu=CpuUsage(usage_cores=3.9, request_cores=4.0),
            evidence={"pattern": "cpu_bound", "cpu_saturation": 0.975, "cpu_saturation_of": "request"},
        ),
        id="no-cpu-limit-saturation-against-the-request",
    ),
    pytest.param(
        Case(
            # eight-minute runs and six-minute gaps: as bimodal as the sawtooth, at another time scale
            (Gpu(series(lambda b: np.where(np.round(b * 60) % 14 < 8, 95.0, 0.0))),),
            None,
            kind="Job",
        ),
        id="runs-with-minutes-long-idle-gaps-are-not-batch-stalls",
    ),
    pytest.param(
        Case(
            (Gpu(noisy(15, 3, low=6)),),
            FindingKind.LOW_UTILIZATION,
            kind="Job",
            cpu=CPU_PINNED,
            evidence={"cpu_pressed": True, "cpu_saturation": 0.9667, "cpu_saturation_of": "limit"},
        ),
        id="low-below-middling-band-stays-low-utilization-with-cpu-evidence",
    ),
    # healthy
    pytest.param(Case((Gpu(noisy(93, 3)),), None, kind="Job", cpu=CPU_PINNED), id="training-is-fine"),
    pytest.param(
        Case(
            (
                Gpu(
                    series(lambda b: 57 + 18 * np.sin(b)),
                ),
            ),
            None,
        ),
        id="serving-with-traffic-curve-is-fine",
    ),
    pytest.param(
        Case((Gpu(noisy(14, 3, low=6)),), FindingKind.LOW_UTILIZATION), id="steady-14-percent-is-low"
    ),
    pytest.param(
        Case((Gpu(noisy(31, 3)),), FindingKind.LOW_UTILIZATION, evidence={"near_miss": True}),
        id="just-above-low-line-is-a-near-miss",
    ),
    pytest.param(Case((Gpu(noisy(35, 3)),), None), id="well-above-low-line-is-fine"),
    # MIG and profiling metrics are already percent here; the instance is listed as its own device
    pytest.param(
        Case(
            (Gpu(idle(), metric="DCGM_FI_PROF_GR_ENGINE_ACTIVE", mig_instance="1"),),
            FindingKind.IDLE_ENDPOINT,
            evidence={"util_metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"},
        ),
        id="mig-instance-idle-from-profiling-metric",
    ),
    # request-rate check
    pytest.param(
        Case(
            (Gpu(idle()),),
            FindingKind.IDLE_ENDPOINT,
            request_rate=RequestRate("q", 0.0),
            evidence={"request_rate": 0.0},
        ),
        id="request-rate-zero-confirms-idle-endpoint",
    ),
    pytest.param(
        Case((Gpu(idle()),), FindingKind.LOW_UTILIZATION, request_rate=RequestRate("q", 0.2)),
        id="request-rate-traffic-vetoes-idle-endpoint",
    ),
    pytest.param(
        Case(
            (Gpu(idle()),),
            FindingKind.LOW_UTILIZATION,
            request_rate=RequestRate("q", None),
            evidence={"request_rate": None},
        ),
        id="request-rate-no-data-is-not-zero",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_classify(case: Case) -> None:
    finding = detectors.classify(view(case), T, END)
    got = None if finding is None else finding.kind
    assert got is case.expected
    if finding is not None:
        for key, value in case.evidence.items():
            assert finding.evidence.to_json().get(key) == value, key
        # Every number the detectors give is a declared field of its kind's evidence: none is stored
        # under a key the evidence model does not know (a misspelt one would be).
        assert not finding.evidence.model_extra
        assert finding.window == WINDOW
        assert finding.gpus == tuple(sorted(d.key.device_id for d in view(case).devices))


@pytest.mark.parametrize(
    ("detector", "case"),
    [
        pytest.param(
            idle_endpoint.idle_endpoint, Case((Gpu(series(0.0, missing=[(5, 2)])),), None), id="idle-endpoint"
        ),
        pytest.param(
            low_utilization.low_utilization, Case((Gpu(series(10.0, missing=[(5, 2)])),), None), id="low-util"
        ),
        pytest.param(
            starvation.dataloader_starvation,
            Case((Gpu(series(sawtooth, missing=[(5, 2)])),), None, kind="Job"),
            id="starvation",
        ),
    ],
)
def test_no_detector_concludes_from_too_little_data(
    detector: Callable[[WorkloadView, Thresholds, datetime], object], case: Case
) -> None:
    assert detector(view(case), T, END) is None


def test_wasted_gpu_hours_and_cost_follow_the_price() -> None:
    priced = T.model_copy(update={"price_per_gpu_hour": 2.5})
    finding = detectors.classify(
        view(Case((Gpu(np.full(360, 10.0)), Gpu(np.full(360, 20.0))), None)), priced, END
    )
    assert finding is not None
    assert finding.kind is FindingKind.LOW_UTILIZATION
    # (1 - 0.10) × 6 h + (1 - 0.20) × 6 h
    assert finding.wasted_gpu_hours == pytest.approx(10.2)
    assert finding.estimated_cost == pytest.approx(25.5)
    assert finding.evidence.mean_util_percent == pytest.approx(15.0)


def test_no_cost_without_a_price() -> None:
    finding = detectors.classify(view(Case((Gpu(np.full(360, 10.0)),), None)), T, END)
    assert finding is not None
    assert finding.estimated_cost is None


def test_unknown_is_never_actionable_and_carries_no_waste() -> None:
    finding = detectors.classify(view(Case((Gpu(series(0.0, missing=[(5, 2)])),), None)), T, END)
    assert finding is not None
    assert finding.kind is FindingKind.UNKNOWN
    assert not finding.kind.actionable
    assert finding.wasted_gpu_hours == 0
    assert finding.evidence.coverage == pytest.approx(0.5)


def test_memory_threshold_moves_the_verdict() -> None:
    small_model = view(Case((Gpu(idle(), memory_mib=900.0),), None))
    held = detectors.classify(small_model, T, END)
    assert held is not None
    assert held.kind is FindingKind.IDLE_ENDPOINT
    stricter = T.model_copy(update={"idle_min_memory_mib": 1024.0})
    finding = detectors.classify(small_model, stricter, END)
    assert finding is not None
    assert finding.kind is FindingKind.LOW_UTILIZATION
    assert "nothing runs on it" in finding.recommendation


def test_thresholds_move_the_verdict() -> None:
    steady = view(Case((Gpu(np.full(360, 35.0)),), None))
    assert detectors.classify(steady, T, END) is None
    stricter = T.model_copy(update={"low_utilization_percent": 40.0})
    finding = detectors.classify(steady, stricter, END)
    assert finding is not None
    assert finding.kind is FindingKind.LOW_UTILIZATION


def test_grace_is_measured_against_now() -> None:
    """Ten minutes after the pod's start it is too young to judge; hours later it is judged."""
    young = Case((Gpu(series(0.0)),), FindingKind.IDLE_ENDPOINT, started_hours_ago=4.0)
    pod = PodRecord("ns", "app-pod", start=(END - timedelta(hours=4)).timestamp())
    assert pod_span(pod, WINDOW, T.warmup_grace, END) == TimeWindow(
        start=END - timedelta(hours=3, minutes=30), end=END
    )
    early_now = END - timedelta(hours=3, minutes=50)
    assert pod_span(pod, WINDOW, T.warmup_grace, early_now) is None
    early = detectors.classify(view(young, now=early_now), T, early_now)
    assert early is not None and early.kind is FindingKind.UNKNOWN
    assert early.evidence.to_json()["reason"] == "too_young"
    late = detectors.classify(view(young), T, END)
    assert late is not None and late.kind is FindingKind.IDLE_ENDPOINT


def test_low_utilization_of_a_cpu_pressed_pod_recommends_cpu_first() -> None:
    finding = detectors.classify(
        view(Case((Gpu(noisy(4, 1, low=1)),), None, kind="Job", cpu=CPU_PINNED)), T, END
    )
    assert finding is not None and finding.kind is FindingKind.LOW_UTILIZATION
    assert "more CPU first" in finding.recommendation
    assert "fewer GPUs" not in finding.recommendation
    relaxed = detectors.classify(
        view(Case((Gpu(noisy(4, 1, low=1)),), None, kind="Job", cpu=CPU_RELAXED)), T, END
    )
    assert relaxed is not None and "fewer GPUs" in relaxed.recommendation


def test_a_near_miss_is_never_as_confident_as_a_clear_verdict() -> None:
    near = detectors.classify(view(Case((Gpu(noisy(31, 3)),), None)), T, END)
    clear = detectors.classify(view(Case((Gpu(noisy(14, 3, low=6)),), None)), T, END)
    assert near is not None and clear is not None
    assert near.confidence <= low_utilization.NEAR_MISS_CONFIDENCE < clear.confidence


@pytest.mark.parametrize(
    ("coverage_value", "expected"),
    [
        pytest.param(1.0, FindingKind.LOW_UTILIZATION, id="unallocated-node-is-low-utilization"),
        pytest.param(0.5, FindingKind.UNKNOWN, id="unallocated-node-with-gaps-is-unknown"),
    ],
)
def test_unallocated_node(coverage_value: float, expected: FindingKind) -> None:
    stats = util_stats(idle(), 0.1)
    devices = tuple(
        DeviceView(
            key=DeviceKey(f"GPU-{i}"),
            info=DeviceInfo(node="gpu-spare", metric="DCGM_FI_DEV_GPU_UTIL", index=str(i)),
            stats=stats,
            coverage=coverage_value,
            span=WINDOW,
        )
        for i in range(4)
    )
    finding = idle_node.idle_node(NodeView("gpu-spare", devices, WINDOW), T, END)
    assert finding is not None
    assert finding.kind is expected
    assert finding.workload == WorkloadRef(kind="Node", name="gpu-spare", namespace="")
    assert finding.nodes == ("gpu-spare",)
    assert finding.gpu_count == 4


def test_detect_orders_by_actionability_then_waste() -> None:
    views = [
        replace(
            view(Case((Gpu(np.full(360, 10.0)),), None)), ref=WorkloadRef(kind="Job", name="a", namespace="x")
        ),
        replace(
            view(Case((Gpu(idle()),), None)), ref=WorkloadRef(kind="Deployment", name="b", namespace="x")
        ),
        replace(
            view(Case((Gpu(series(0.0, missing=[(5, 2)])),), None)),
            ref=WorkloadRef(kind="Deployment", name="c", namespace="x"),
        ),
    ]
    kinds = [f.kind for f in detectors.detect(views, [], T, END)]
    assert kinds == [FindingKind.IDLE_ENDPOINT, FindingKind.LOW_UTILIZATION, FindingKind.UNKNOWN]


def test_every_detector_states_its_rule_and_evidence() -> None:
    for detector in (*detectors.DETECTORS, idle_node.idle_node):
        doc = detector.__doc__ or ""
        assert "Rule" in doc, detector.__name__
        assert "Evidence" in doc, detector.__name__


def test_starvation_says_which_sampling_each_number_comes_from() -> None:
    """Readings scraped every minute hover at 49 % while half the sub-second samples are above 75 %:
    the advice quotes both, each with its sampling, so the two numbers do not read as a contradiction."""
    from_histogram = detectors.classify(
        view(Case((Gpu(noisy(49, 2), histogram=BIMODAL_HISTOGRAM),), None, kind="Job")), T, END
    )
    assert from_histogram is not None
    evidence = from_histogram.evidence
    assert isinstance(evidence, DataloaderStarvationEvidence)
    assert evidence.util_interval_seconds == STEP_S
    # The scraped peak stays under the busy line the sub-second samples cross half the time.
    assert evidence.max_util_percent < T.starvation_busy_percent and evidence.busy_share == 0.5
    assert (
        "at or below 10 % in 48% and above 75 % in 50% of the exporter's sub-second utilization samples, "
        f"while the readings scraped every 1m peak at {evidence.max_util_percent:.0f} %"
    ) in from_histogram.recommendation
    from_scrapes = detectors.classify(view(Case((Gpu(series(sawtooth)),), None, kind="Job")), T, END)
    assert from_scrapes is not None and from_scrapes.evidence.to_json()["shares_from"] == "samples"
    assert "above 75 % in 50% of the readings scraped every 1m: they wait" in from_scrapes.recommendation


INFERENCE_SERVICE = WorkloadRef(kind="InferenceService", name="app", namespace="ns")


def test_an_idle_endpoint_under_a_controller_names_the_controller_to_stop() -> None:
    """Scaling a KServe predictor's Deployment is undone by KServe: the advice names what to stop,
    the finding stays the Deployment's (the workload the GPUs were measured on)."""
    owned = detectors.classify(view(Case((Gpu(idle()),), None, owner=INFERENCE_SERVICE)), T, END)
    assert owned is not None and owned.kind is FindingKind.IDLE_ENDPOINT
    assert owned.workload == WorkloadRef(kind="Deployment", name="app", namespace="ns")
    assert owned.owner == INFERENCE_SERVICE
    assert owned.recommendation.startswith(
        'Stop InferenceService ns/app (set its serving.kserve.io/stop annotation to "true"): '
        "the 1 GPU(s) of Deployment ns/app stayed at or below"
    )
    assert "Scale Deployment" not in owned.recommendation


def test_an_idle_endpoint_without_a_named_controller_says_the_reaper_resolves_it() -> None:
    plain = detectors.classify(view(Case((Gpu(idle()),), None)), T, END)
    assert plain is not None and plain.owner is None
    assert plain.recommendation.startswith("Scale Deployment ns/app to zero")
    assert "gpu-reaper finds it through the Kubernetes API before it acts" in plain.recommendation


def test_right_sizing_advice_sends_the_change_to_the_controller() -> None:
    notebook = WorkloadRef(kind="Notebook", name="app", namespace="ns")
    low = detectors.classify(
        view(Case((Gpu(noisy(8, 2)),), None, kind="StatefulSet", owner=notebook)), T, END
    )
    assert low is not None and low.kind is FindingKind.LOW_UTILIZATION and low.owner == notebook
    assert low.recommendation.endswith(
        "Make the change in Notebook ns/app: its controller reverts edits to StatefulSet ns/app."
    )
