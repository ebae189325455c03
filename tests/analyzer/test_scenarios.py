"""Edge cases end to end through the in-memory source: small simulated fleets, one fault each.

These run discovery, aggregation, the closer look and the detectors on series shaped exactly as a
TSDB would hold them — MIG without device utilization, units mixed per scrape job, counters that
restart inside the window, GPUs that vanish, pods inside their warm-up — in milliseconds.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from analyzer.detection import idle_endpoint
from analyzer.pipeline import Analysis, analyze_in_detail
from analyzer.sources import dcgm, vocabulary
from analyzer.sources.source_errors import NoDataError, SourceUnreachableError
from common.model import FindingKind, FindingsReport
from common.thresholds import Thresholds
from simulation.fleet import Fleet, Scenario, Series, expected_findings, simulate
from simulation.fleet.truth import window_of
from simulation.in_memory_source import InMemorySource, SimulatedSource


def fleet_of(nodes: list[dict[str, Any]], workloads: list[dict[str, Any]], **extra: Any) -> Fleet:
    return simulate(
        Scenario.model_validate(
            {
                "name": "edge",
                "seed": 3,
                "end": "2026-01-05T00:00:00Z",
                "duration": "12h",
                "analysis_window": "6h",
                "nodes": nodes,
                "workloads": workloads,
                **extra,
            }
        )
    )


def analyze_series(series: list[Series], fleet: Fleet, thresholds: Thresholds | None = None) -> Analysis:
    window = window_of(fleet)
    return analyze_in_detail(
        InMemorySource(series, "edge"), window, thresholds or Thresholds(), now=window.end
    )


def kinds(report: FindingsReport) -> dict[str, FindingKind]:
    return {f.workload.key(): f.kind for f in report.findings}


def truth(fleet: Fleet) -> dict[str, FindingKind]:
    return {ref.key(): e.kind for ref, e in expected_findings(fleet).items() if e.kind is not None}


def test_mig_node_has_only_profiling_utilization() -> None:
    fleet = fleet_of(
        [{"name": "mig", "gpus": 1, "profiling": True, "mig_profile": "3g.40gb", "mig_instances": 2}],
        [
            {"namespace": "a", "name": "idle-api", "behaviour": "idle", "node": "mig"},
            {"namespace": "a", "name": "busy-api", "behaviour": "serving", "node": "mig"},
        ],
    )
    analysis = analyze_series(fleet.series, fleet)
    # Profiling series only (a MIG instance has no device gauge), the engine activity first.
    util = analysis.snapshot.capabilities.util_metrics
    assert util[0] == dcgm.PROF_GR_ENGINE_ACTIVE and all(name.startswith("DCGM_FI_PROF_") for name in util)
    assert analysis.snapshot.capabilities.mig
    assert kinds(analysis.report) == {"a/Deployment/idle-api": FindingKind.IDLE_ENDPOINT}
    (finding,) = analysis.report.findings
    assert finding.gpus[0].endswith("/mig-0") or finding.gpus[0].endswith("/mig-1")
    assert finding.evidence.util_metric == dcgm.PROF_GR_ENGINE_ACTIVE
    # 0-1 profiling ratio read as percent: the idle instance's blips are ~1 %, not ~0.01 %.
    assert 0.5 < finding.evidence.max_util_percent <= 2.0


@pytest.mark.parametrize(("profile", "instances", "share"), [("1g.10gb", 7, 1 / 7), ("3g.40gb", 2, 3 / 7)])
def test_mig_slice_wastes_its_share_of_the_gpu(profile: str, instances: int, share: float) -> None:
    """An idle slice wastes (1 − mean) × hours × its share of the GPU, priced per whole GPU."""
    fleet = fleet_of(
        [{"name": "mig", "gpus": 1, "profiling": True, "mig_profile": profile, "mig_instances": instances}],
        [{"namespace": "a", "name": "idle-api", "behaviour": "idle", "node": "mig"}],
    )
    whole = fleet_of(
        [{"name": "whole", "gpus": 1, "profiling": True}],
        [{"namespace": "a", "name": "idle-api", "behaviour": "idle", "node": "whole"}],
    )
    priced = Thresholds(price_per_gpu_hour=2.5)
    (slice_finding,) = analyze_series(fleet.series, fleet, priced).report.findings
    (gpu_finding,) = analyze_series(whole.series, whole, priced).report.findings
    assert slice_finding.kind is gpu_finding.kind is FindingKind.IDLE_ENDPOINT
    mean = slice_finding.evidence.mean_util_percent or 0.0
    expected = (1 - mean / 100) * (slice_finding.evidence.judged_hours or 0.0) * share
    assert slice_finding.wasted_gpu_hours == pytest.approx(expected, abs=2e-3)
    assert slice_finding.estimated_cost == pytest.approx(expected * 2.5, abs=0.02)
    assert slice_finding.evidence.gpu_equivalents == pytest.approx(share, abs=1e-4)
    assert slice_finding.gpu_count == 1
    # A whole GPU keeps its figures and no gpu_equivalents key.
    assert gpu_finding.wasted_gpu_hours > 5.5
    assert "gpu_equivalents" not in gpu_finding.evidence.to_json()


def _relabel_job(series: list[Series], node: str, job: str, divide: float) -> list[Series]:
    out = []
    for s in series:
        labels = dict(s.labels)
        if labels.get("Hostname") == node and s.name == dcgm.DEV_GPU_UTIL:
            labels["job"] = job
            s = Series(s.name, tuple(sorted(labels.items())), s.timestamps, s.values / divide)
        out.append(s)
    return out


def test_mixed_units_per_scrape_job_and_metric() -> None:
    """One job reports DEV_GPU_UTIL as 0-1, another as 0-100, a third node only PROF ratios."""
    fleet = fleet_of(
        [
            {"name": "pct", "gpus": 2},
            {"name": "ratio", "gpus": 2},
            {"name": "prof", "gpus": 2, "profiling": True},
        ],
        [
            {"namespace": "a", "name": "idle-pct", "behaviour": "idle", "node": "pct"},
            {"namespace": "a", "name": "low-pct", "behaviour": "low_utilization", "node": "pct"},
            {"namespace": "a", "name": "idle-ratio", "behaviour": "idle", "node": "ratio"},
            {"namespace": "a", "name": "serve-ratio", "behaviour": "serving", "node": "ratio"},
            {"namespace": "a", "name": "low-prof", "behaviour": "low_utilization", "node": "prof"},
            {"namespace": "a", "name": "train-prof", "kind": "Job", "behaviour": "training", "node": "prof"},
        ],
    )
    series = _relabel_job(fleet.series, "ratio", "dcgm-recording-rule", 100.0)
    analysis = analyze_series(series, fleet)
    caps = analysis.snapshot.capabilities
    assert caps.dev_to_percent == {
        "dcgm-exporter": vocabulary.PERCENT_TO_PERCENT,
        "dcgm-recording-rule": vocabulary.RATIO_TO_PERCENT,
    }
    assert kinds(analysis.report) == truth(fleet)
    means = {f.workload.name: f.evidence.mean_util_percent for f in analysis.report.findings}
    assert 5 < means["low-pct"] < 25  # type: ignore[operator]
    assert 5 < means["low-prof"] < 25  # type: ignore[operator]


def test_counters_restarting_inside_the_window_keep_their_meaning() -> None:
    """Our exporter restarts 2 h before the end (histogram from zero) and the CPU-starved container
    restarts 1 h before the end (cAdvisor counters from zero): both verdicts hold."""
    fleet = fleet_of(
        [{"name": "ours", "gpus": 4, "exporter": "gpu-exporter", "exporter_restarts": ["-2h"]}],
        [
            {
                "namespace": "r",
                "name": "tok",
                "kind": "Job",
                "behaviour": "starvation_subsecond",
                "node": "ours",
            },
            {
                "namespace": "r",
                "name": "audio",
                "kind": "Job",
                "behaviour": "starvation_cpu",
                "node": "ours",
                "cpu_limit_cores": 6,
                "container_restarts": ["-1h"],
            },
            {"namespace": "r", "name": "train", "kind": "Job", "behaviour": "training", "node": "ours"},
        ],
    )
    analysis = analyze_series(fleet.series, fleet)
    by_name = {f.workload.name: f for f in analysis.report.findings}
    assert set(by_name) == {"tok", "audio"}
    assert by_name["tok"].evidence.pattern == "bimodal"
    assert by_name["tok"].evidence.shares_from == "histogram"
    assert by_name["audio"].evidence.pattern == "cpu_bound"
    assert by_name["audio"].evidence.cpu_saturation > 0.9
    pod_cpu = next(iter(v.pods[0].cpu for v in analysis.workloads if v.ref.name == "audio"))
    assert pod_cpu.throttled_ratio == pytest.approx(0.65, abs=0.02)


def test_gpu_that_never_reported_makes_its_workload_unknown() -> None:
    fleet = fleet_of(
        [{"name": "n", "gpus": 4}],
        [{"namespace": "a", "name": "pair", "behaviour": "idle", "gpus_per_pod": 2, "node": "n"}],
    )
    (pod,) = fleet.pods
    gone = pod.slots[1].uuid
    series = [s for s in fleet.series if s.label("UUID") != gone]
    (finding,) = [f for f in analyze_series(series, fleet).report.findings if f.workload.name == "pair"]
    assert finding.kind is FindingKind.UNKNOWN
    assert finding.evidence.gpus_missing == 1


def test_gpu_lost_mid_window_is_unknown_and_its_neighbour_still_judged() -> None:
    fleet = fleet_of(
        [{"name": "n", "gpus": 2, "gpu_losses": [{"gpu": 0, "at": "-2h"}]}],
        [
            {"namespace": "a", "name": "lost", "behaviour": "idle", "node": "n"},
            {"namespace": "a", "name": "fine", "behaviour": "idle", "node": "n"},
        ],
    )
    assert kinds(analyze_series(fleet.series, fleet).report) == {
        "a/Deployment/lost": FindingKind.UNKNOWN,
        "a/Deployment/fine": FindingKind.IDLE_ENDPOINT,
    }


@pytest.mark.parametrize(
    ("start", "behaviour", "expected"),
    [
        pytest.param("-20m", "idle", FindingKind.UNKNOWN, id="twenty-minutes-old-unknown-too-young"),
        pytest.param("-2h", "idle", FindingKind.UNKNOWN, id="two-hours-old-less-than-half-window-unknown"),
        pytest.param("-4h", "idle", FindingKind.IDLE_ENDPOINT, id="four-hours-old-idle-since-grace"),
        pytest.param("-4h", "serving", None, id="four-hours-old-serving-warm-up-zeros-ignored"),
        pytest.param("-4h", "low_utilization", FindingKind.LOW_UTILIZATION, id="four-hours-old-low"),
    ],
)
def test_warm_up_grace(start: str, behaviour: str, expected: FindingKind | None) -> None:
    fleet = fleet_of(
        [{"name": "n", "gpus": 2}],
        [
            {
                "namespace": "a",
                "name": "new",
                "behaviour": behaviour,
                "start": start,
                "warmup": "15m",
                "node": "n",
            },
            {"namespace": "a", "name": "old", "behaviour": "serving", "node": "n"},
        ],
    )
    analysis = analyze_series(fleet.series, fleet)
    assert kinds(analysis.report).get("a/Deployment/new") is expected
    assert kinds(analysis.report) == truth(fleet)
    (finding,) = [f for f in analysis.report.findings if f.workload.name == "new"] or [None]
    if expected is FindingKind.UNKNOWN:
        assert finding is not None and finding.evidence.reason == "too_young"
    elif expected is not None:
        assert finding is not None and finding.evidence.judged_hours == pytest.approx(4 - 0.5)


@pytest.mark.parametrize(
    ("gap", "expected"),
    [
        pytest.param(
            {"start": "-4h10m", "end": "-4h"}, FindingKind.IDLE_ENDPOINT, id="ten-minute-gap-judged"
        ),
        pytest.param({"start": "-5h", "end": "-2h"}, FindingKind.UNKNOWN, id="three-hour-gap-unknown"),
        pytest.param({"start": "-30m", "end": "12h"}, FindingKind.IDLE_ENDPOINT, id="gap-at-the-end-judged"),
        pytest.param(
            {"start": "-1h", "end": "12h"}, FindingKind.UNKNOWN, id="exporter-down-for-the-last-hour"
        ),
    ],
)
def test_exporter_gaps(gap: dict[str, str], expected: FindingKind) -> None:
    fleet = fleet_of(
        [{"name": "n", "gpus": 1, "gaps": [gap]}], [{"namespace": "a", "name": "s", "behaviour": "idle"}]
    )
    assert kinds(analyze_series(fleet.series, fleet).report) == {"a/Deployment/s": expected}


def test_without_kube_state_metrics_pods_are_their_own_workloads() -> None:
    fleet = fleet_of(
        [{"name": "n", "gpus": 2}],
        [
            {"namespace": "a", "name": "idle-api", "behaviour": "idle", "node": "n"},
            {"namespace": "a", "name": "busy", "behaviour": "training", "node": "n"},
        ],
    )
    series = [s for s in fleet.series if not s.name.startswith("kube_")]
    report = analyze_series(series, fleet).report
    (finding,) = report.findings
    assert finding.workload.kind == "Pod"
    # Without an owner nothing proves it is an endpoint: low utilization, never scale-to-zero.
    assert finding.kind is FindingKind.LOW_UTILIZATION


def test_no_gpu_series_is_an_error_not_an_empty_report() -> None:
    fleet = fleet_of([{"name": "n", "gpus": 1}], [{"namespace": "a", "name": "s", "behaviour": "idle"}])
    series = [s for s in fleet.series if not s.name.startswith("DCGM_FI")]
    with pytest.raises(NoDataError, match="no GPU utilization series"):
        analyze_series(series, fleet)


def test_simulated_source_is_named_for_its_scenario() -> None:
    fleet = fleet_of([{"name": "n", "gpus": 1}], [])
    assert SimulatedSource(fleet).description == "simulated:edge"


def test_unallocated_node_is_reported_as_node() -> None:
    fleet = fleet_of(
        [{"name": "busy", "gpus": 1}, {"name": "spare", "gpus": 2}],
        [{"namespace": "a", "name": "t", "kind": "Job", "behaviour": "training", "node": "busy"}],
    )
    report = analyze_series(fleet.series, fleet).report
    assert kinds(report) == {"/Node/spare": FindingKind.LOW_UTILIZATION}
    (finding,) = report.findings
    assert finding.gpu_count == 2
    assert finding.wasted_gpu_hours == pytest.approx(12.0, abs=0.1)


def test_a_scrape_interval_from_the_policy_overrides_detection() -> None:
    fleet = fleet_of([{"name": "n", "gpus": 1}], [{"namespace": "a", "name": "s", "behaviour": "idle"}])
    # Claiming a 30 s interval on 60 s data halves coverage: the verdict becomes unknown.
    t = Thresholds(scrape_interval="30s")  # type: ignore[arg-type]
    assert kinds(analyze_series(fleet.series, fleet, t).report) == {"a/Deployment/s": FindingKind.UNKNOWN}


def test_relabelled_ratio_fleet_matches_the_plain_one(standard_fleet: Fleet, relabelled_fleet: Fleet) -> None:
    plain = analyze_series(standard_fleet.series, standard_fleet).report
    relabelled = analyze_series(relabelled_fleet.series, relabelled_fleet).report
    assert kinds(plain) == kinds(relabelled) == truth(standard_fleet)
    for a, b in zip(plain.findings, relabelled.findings, strict=True):
        assert a.gpus == b.gpus
        assert a.pods == b.pods
        assert a.nodes == b.nodes


def test_series_replace_keeps_values_separate() -> None:
    """Guard for the helpers above: relabelling builds new series, the fleet stays untouched."""
    fleet = fleet_of(
        [{"name": "ratio", "gpus": 1}], [{"namespace": "a", "name": "s", "behaviour": "serving"}]
    )
    before = [s.values.copy() for s in fleet.series]
    _relabel_job(fleet.series, "ratio", "x", 100.0)
    assert all(np.array_equal(a, s.values) for a, s in zip(before, fleet.series, strict=True))
    assert replace(fleet.series[0]) == fleet.series[0]


def test_gpu_series_without_pod_labels_never_empty_a_node() -> None:
    """An exporter that lost pod attribution: the pods' GPUs are unknown, the node is not 'spare'."""
    fleet = fleet_of(
        [{"name": "n", "gpus": 2}],
        [{"namespace": "a", "name": "idle-api", "behaviour": "idle", "node": "n"}],
    )
    series = [
        Series(
            s.name,
            tuple((k, v) for k, v in s.labels if k not in ("pod", "namespace", "container")),
            s.timestamps,
            s.values,
        )
        if s.name.startswith("DCGM_FI")
        else s
        for s in fleet.series
    ]
    report = analyze_series(series, fleet).report
    assert kinds(report) == {"a/Deployment/idle-api": FindingKind.UNKNOWN}


def _drop_memory_of(series: list[Series], uuids: set[str] | None) -> list[Series]:
    """Without DCGM_FI_DEV_FB_USED for these GPUs (all GPUs when None)."""
    return [
        s
        for s in series
        if not (s.name == dcgm.DEV_FB_USED and (uuids is None or s.label(dcgm.UUID) in uuids))
    ]


@pytest.mark.parametrize(
    ("memory_fraction", "drop_memory", "expected"),
    [
        pytest.param(0.7, False, FindingKind.IDLE_ENDPOINT, id="memory-held-is-idle-endpoint"),
        pytest.param(
            0.002, False, FindingKind.LOW_UTILIZATION, id="memory-not-held-is-low-utilization-not-dropped"
        ),
        pytest.param(0.002, True, FindingKind.IDLE_ENDPOINT, id="no-memory-data-does-not-block"),
    ],
)
def test_idle_endpoint_needs_memory_held(
    memory_fraction: float, drop_memory: bool, expected: FindingKind
) -> None:
    fleet = fleet_of(
        [{"name": "n", "gpus": 2}],
        [
            {
                "namespace": "a",
                "name": "api",
                "behaviour": "idle",
                "gpus_per_pod": 2,
                "memory_fraction": memory_fraction,
            }
        ],
    )
    series = _drop_memory_of(fleet.series, None) if drop_memory else fleet.series
    analysis = analyze_series(series, fleet)
    assert kinds(analysis.report) == {"a/Deployment/api": expected}
    (finding,) = analysis.report.findings
    if drop_memory:
        assert not analysis.snapshot.capabilities.memory
        assert finding.evidence.memory_used_mib is None
    else:
        # Mean framebuffer per GPU once loaded (the warm-up ramp lies before the window).
        assert finding.evidence.memory_used_mib == pytest.approx(81559 * memory_fraction, rel=0.02)
        # The simulator's ground truth follows the same rule.
        assert truth(fleet) == {"a/Deployment/api": expected}


def test_a_gpu_without_memory_data_does_not_block_its_neighbours_verdict() -> None:
    fleet = fleet_of(
        [{"name": "n", "gpus": 2}],
        [{"namespace": "a", "name": "api", "behaviour": "idle", "gpus_per_pod": 2}],
    )
    one = next(s.label(dcgm.UUID) for s in fleet.series if s.name == dcgm.DEV_FB_USED)
    assert one is not None
    report = analyze_series(_drop_memory_of(fleet.series, {one}), fleet).report
    (finding,) = report.findings
    assert finding.kind is FindingKind.IDLE_ENDPOINT
    assert finding.evidence.min_memory_used_mib == pytest.approx(81559 * 0.7, rel=0.02)


class _MemoryReads(InMemorySource):
    """Records which GPUs each memory read asked for; the first read fails when told to."""

    def __init__(self, series: list[Series], fail_first: bool = False) -> None:
        super().__init__(series, "edge")
        self.reads: list[set[str]] = []
        self.fail_first = fail_first

    def memory_used(self, snapshot: Any, keys: Any) -> dict[Any, float]:
        self.reads.append({k.uuid for k in keys})
        if self.fail_first and len(self.reads) == 1:
            raise SourceUnreachableError("memory read refused")
        return super().memory_used(snapshot, keys)


def _uuids(fleet: Fleet, pod_prefix: str) -> set[str]:
    return {
        uuid
        for s in fleet.series
        if s.name == dcgm.DEV_GPU_UTIL
        and (s.label("pod") or "").startswith(pod_prefix)
        and (uuid := s.label(dcgm.UUID)) is not None
    }


def _busy_warmup(series: list[Series], uuids: set[str], minutes: float) -> list[Series]:
    """These GPUs at 60 % for the first minutes of their pod's samples (inside its warm-up grace)."""
    out = []
    for s in series:
        if s.name == dcgm.DEV_GPU_UTIL and s.label(dcgm.UUID) in uuids and s.label("pod"):
            values = s.values.copy()
            values[s.timestamps < s.timestamps[0] + minutes * 60] = 60.0
            s = replace(s, values=values)
        out.append(s)
    return out


def test_memory_is_read_once_for_idle_endpoints_and_later_for_one_idle_only_past_its_warmup() -> None:
    """The likely idle endpoints' memory is read beside the closer looks; an endpoint busy only in
    its warm-up (inside the window) is a candidate the early read did not know of: read after."""
    fleet = fleet_of(
        [{"name": "n", "gpus": 4}],
        [
            {"namespace": "a", "name": "old-api", "behaviour": "idle"},
            {"namespace": "a", "name": "young-api", "behaviour": "idle", "start": "8h"},
            {"namespace": "a", "name": "web", "behaviour": "serving"},
        ],
    )
    old, young = _uuids(fleet, "old-api"), _uuids(fleet, "young-api")
    source = _MemoryReads(_busy_warmup(fleet.series, young, 15))
    window = window_of(fleet)
    report = analyze_in_detail(source, window, Thresholds(), now=window.end).report
    assert len(source.reads) == 2 and old in source.reads and young in source.reads
    found = {f.workload.name: f for f in report.findings}
    for name in ("old-api", "young-api"):
        assert found[name].kind is FindingKind.IDLE_ENDPOINT
        assert found[name].evidence.memory_used_mib == pytest.approx(81559 * 0.7, rel=0.02)


def test_a_failed_early_memory_read_fails_the_run_only_when_a_candidate_needed_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def run(workload: dict[str, Any]) -> tuple[_MemoryReads, FindingsReport]:
        fleet = fleet_of([{"name": "n", "gpus": 1}], [workload])
        source, window = _MemoryReads(fleet.series, fail_first=True), window_of(fleet)
        return source, analyze_in_detail(source, window, Thresholds(), now=window.end).report

    with pytest.raises(SourceUnreachableError, match="memory read refused"):
        run({"namespace": "a", "name": "api", "behaviour": "idle"})
    # Idle, so read early, but too young to judge (1 h of a 6 h window): no candidate, so the
    # failed read is never waited for and the run reports it as unknown.
    caplog.set_level(logging.INFO, logger="analyzer.pipeline")
    source, report = run({"namespace": "a", "name": "api", "behaviour": "idle", "start": "11h"})
    assert len(source.reads) == 1
    assert [f.kind for f in report.findings] == [FindingKind.UNKNOWN]
    assert "early memory read failed (memory read refused)" in caplog.text


def test_an_idle_endpoint_candidate_is_what_the_detector_finds_before_the_request_rate(
    standard_fleet: Fleet,
) -> None:
    """The candidate test (which decides who costs a request-rate query) is the detector's rule
    without the request rate, for every workload of a fleet with every kind of finding."""
    t = Thresholds()
    window = window_of(standard_fleet)
    analysis = analyze_in_detail(SimulatedSource(standard_fleet), window, t, now=window.end)
    verdicts = {
        v.ref.key(): idle_endpoint.idle_endpoint_candidate(v, t, window.end) for v in analysis.workloads
    }
    assert verdicts == {
        v.ref.key(): idle_endpoint.idle_endpoint(replace(v, request_rate=None), t, window.end) is not None
        for v in analysis.workloads
    }
    assert any(verdicts.values()) and not all(verdicts.values())
