"""Right-sizing, table-style: a long-running workload of low utilization, its GPUs' model, its
framebuffer peak and activity in; the smallest share that carries it (or why none) out.

The views are built the way the pipeline builds them (one pod per GPU unless a case says more, 6 h
judged); the finding comes from the real detector, so the activity quantile the rule sizes from is
the one the finding's evidence states.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from markupsafe import escape
from rich.console import Console

from analyzer.detection import detectors, right_size
from analyzer.detection.mig_profiles import MIG_GPUS, mig_gpu
from analyzer.detection.views import DeviceView, PodView, WorkloadView
from analyzer.report.html import render_html
from analyzer.report.table import render_table
from analyzer.sources.aggregates import DeviceInfo, DeviceKey, MemoryPeak, quantile_levels
from analyzer.sources.sample_math import util_stats
from common.evidence import LowUtilizationEvidence, RightSizing
from common.model import Finding, FindingKind, FindingsReport, TimeWindow, WorkloadRef
from common.thresholds import RightSizeSettings, Thresholds

END = datetime(2026, 1, 5, tzinfo=UTC)
WINDOW = TimeWindow.ending(END, timedelta(hours=6))
T = Thresholds(price_per_gpu_hour=3.0)
H100 = "NVIDIA H100 80GB HBM3"


@dataclass(frozen=True)
class Case:
    model: str | None
    peak_mib: float | None  # None: framebuffer not reported
    util_percent: float = 5.0  # steady activity, ±1 point
    capacity_mib: float | None = None  # used + free, where FB_FREE is reported
    mig_profile: str | None = None
    gpus: int = 1
    gpus_per_pod: int = 1
    kind: str = "Deployment"
    memory_used_mib: float | None = None  # the mean the idle-endpoint check reads


def _view(case: Case) -> WorkloadView:
    rng = np.random.default_rng(7)
    level = quantile_levels(T.starvation_min_share)[0]
    devices = []
    pods = []
    for i in range(case.gpus):
        pod = f"app-{i // case.gpus_per_pod}"
        noise = rng.normal(0.0, 1.0, 360) if case.util_percent else np.zeros(360)  # 0 %: truly idle
        values = np.clip(case.util_percent + noise, 0.0, 100.0)
        devices.append(
            DeviceView(
                key=DeviceKey(f"GPU-{i}", "1" if case.mig_profile else "", "ns", pod),
                info=DeviceInfo(
                    node="node-a",
                    metric="DCGM_FI_DEV_GPU_UTIL",
                    index=str(i),
                    model=case.model,
                    mig_profile=case.mig_profile,
                ),
                stats=util_stats(values, level),
                coverage=1.0,
                span=WINDOW,
                interval_s=60.0,
                memory_used_mib=case.memory_used_mib,
            )
        )
        pods.append(PodView("ns", pod, END - timedelta(days=2)))
    return WorkloadView(
        ref=WorkloadRef(kind=case.kind, name="app", namespace="ns"),
        pods=tuple({p.name: p for p in pods}.values()),
        devices=tuple(devices),
        window=WINDOW,
        judged=WINDOW,
        judged_seconds=WINDOW.duration.total_seconds(),
    )


def _sized(case: Case, t: Thresholds = T) -> tuple[Finding, RightSizing]:
    view = _view(case)
    finding = detectors.classify(view, t, END)
    assert finding is not None and finding.kind is FindingKind.LOW_UTILIZATION
    assert right_size.wanted(finding, t)
    peaks = (
        {}
        if case.peak_mib is None
        else {d.key: MemoryPeak(case.peak_mib, case.capacity_mib) for d in view.devices}
    )
    return finding, right_size.right_size(finding, view, peaks, t)


# Peak × 1.2 (the default headroom) against each profile's memory floor, at 5 % activity (one slice).
PROFILES = [
    pytest.param(Case("NVIDIA A100-SXM4-40GB", 3_000), "1g.5gb", id="A100-40GB 3 GiB: 1g.5gb"),
    pytest.param(Case("NVIDIA A100-SXM4-80GB", 9_000), "1g.20gb", id="A100-80GB 9 GiB: 1g.10gb too small"),
    pytest.param(Case(H100, 7_000), "1g.10gb", id="H100 7 GiB: 1g.10gb"),
    pytest.param(Case("NVIDIA H100 PCIe", 30_000, capacity_mib=81_000), "3g.40gb", id="H100 PCIe by memory"),
    pytest.param(Case("NVIDIA H100 NVL", 9_000), "1g.12gb", id="H100 NVL (94 GB) 9 GiB"),
    pytest.param(Case("NVIDIA GH200 480GB", 11_000), "1g.24gb", id="GH200 (96 GB) 11 GiB"),
    pytest.param(Case("NVIDIA H200", 9_000), "1g.18gb", id="H200 9 GiB"),
    pytest.param(Case("NVIDIA B200", 20_000), "1g.45gb", id="B200 20 GiB: 1g.23gb too small"),
    pytest.param(Case("NVIDIA A30", 5_000), "2g.12gb", id="A30 5 GiB: 1g.6gb too small"),
    pytest.param(Case(H100, 5_000, util_percent=25.0), "3g.40gb", id="H100 at 25 %: compute decides"),
]


@pytest.mark.parametrize(("case", "profile"), PROFILES)
def test_the_smallest_mig_profile_holding_the_peak_and_the_activity(case: Case, profile: str) -> None:
    finding, sized = _sized(case)
    assert sized.share == "mig", sized.reason
    assert sized.profile == profile
    assert sized.resource == f"nvidia.com/mig-{profile}"
    assert sized.change == f"nvidia.com/gpu: 1 → nvidia.com/mig-{profile}: 1"
    assert case.peak_mib is not None
    assert sized.memory_peak_mib == case.peak_mib and sized.memory_headroom == 0.2
    evidence = finding.evidence
    assert isinstance(evidence, LowUtilizationEvidence) and evidence.high_quantile is not None
    assert sized.compute_percent == pytest.approx(evidence.high_quantile.percent, abs=0.01)
    gpu = mig_gpu(case.model, case.capacity_mib)
    assert gpu is not None
    chosen = next(p for p in gpu.profiles if p.name == profile)
    # It holds the peak plus headroom, and no profile with fewer slices or less memory would.
    assert chosen.memory_mib >= case.peak_mib * 1.2
    slices = math.ceil(sized.compute_percent / 100 * gpu.slices / 0.8)
    assert chosen.slices >= slices
    smaller = [p for p in gpu.profiles if (p.slices, p.memory_mib) < (chosen.slices, chosen.memory_mib)]
    assert all(p.memory_mib < case.peak_mib * 1.2 or p.slices < slices for p in smaller)
    # Saving: one whole GPU becomes the profile's share of one, over the 6 h judged.
    share = chosen.slices / gpu.slices
    assert sized.share_of_gpu == pytest.approx(share, abs=1e-4)
    assert sized.gpu_equivalents_saved == pytest.approx(1 - share, abs=1e-3)
    assert sized.saved_gpu_hours == pytest.approx((1 - share) * 6, abs=1e-3)
    assert sized.saved_cost == pytest.approx((1 - share) * 6 * 3.0, abs=0.01)
    assert sized.line("EUR").startswith(f"Right-size to MIG {profile}: nvidia.com/gpu: 1 → ")
    assert f"GPU-hours ({sized.saved_cost:,.2f} EUR)" in sized.line("EUR")


def test_every_profile_memory_is_a_floor_of_its_share_of_the_gpu() -> None:
    for gpu in MIG_GPUS:
        for profile in gpu.profiles:
            assert profile.memory_mib <= gpu.memory_mib * profile.memory_eighths / 8
            assert profile.memory_mib <= float(profile.name.split(".")[1][:-2]) * 1e9 / 2**20
        assert [p.slices for p in gpu.profiles] == sorted(p.slices for p in gpu.profiles)
        assert gpu.profiles[-1].slices == gpu.slices


def test_a_peak_no_profile_holds_gets_no_recommendation_and_says_why() -> None:
    _, sized = _sized(Case(H100, 70_000))  # 84,000 MiB (82.0 GiB) with headroom: more than the GPU
    assert sized.share is None and sized.resource is None and sized.change is None
    assert "whole H100 80GB GPU" in sized.reason and "82.0 GiB" in sized.reason
    assert sized.gpu_equivalents_saved == 0 and sized.saved_gpu_hours == 0
    assert sized.line() == f"No smaller GPU share: {sized.reason}."


def test_a_peak_only_the_whole_gpu_holds_gets_no_recommendation() -> None:
    _, sized = _sized(Case(H100, 45_000))  # 54,000 MiB: only 7g.80gb, the whole GPU it has now
    assert sized.share is None
    assert "no smaller MIG profile" in sized.reason


def test_a_mig_instance_is_offered_a_smaller_profile() -> None:
    # 10 % of a 3g.40gb instance is 4.3 % of the GPU: one slice; 8,000 MiB × 1.2 needs 1g.20gb.
    _, sized = _sized(Case(H100, 8_000, util_percent=10.0, mig_profile="3g.40gb"))
    assert sized.share == "mig" and sized.profile == "1g.20gb"
    assert sized.change == "nvidia.com/mig-3g.40gb: 1 → nvidia.com/mig-1g.20gb: 1"
    assert sized.gpu_equivalents_saved == pytest.approx(3 / 7 - 1 / 7, abs=1e-3)
    assert sized.compute_percent == pytest.approx(11.3, abs=1.5)  # of the instance, as measured


def test_a_mig_instance_on_the_smallest_profile_that_holds_it_gets_none() -> None:
    _, sized = _sized(Case(H100, 7_000, mig_profile="1g.10gb"))
    assert sized.share is None
    assert sized.reason.startswith("already on 1g.10gb")


def test_a_gpu_without_mig_gets_a_time_sliced_share() -> None:
    # L4: 4,800 MiB of 23,034 is 21 % of the GPU, so four such pods fit one GPU.
    _, sized = _sized(Case("NVIDIA L4", 4_000, capacity_mib=23_034))
    assert sized.share == "time_slice" and sized.profile == "1/4"
    assert sized.resource == "nvidia.com/gpu.shared"
    assert sized.gpu_equivalents_saved == pytest.approx(0.75, abs=1e-3)
    assert "offers no MIG" in sized.reason and "isolates neither memory" in sized.reason
    assert sized.line().startswith("Right-size to 1/4 of a time-sliced GPU: nvidia.com/gpu: 1 → ")


def test_time_slicing_stops_at_the_policys_replicas() -> None:
    t = Thresholds(right_size=RightSizeSettings(max_time_slice_replicas=2))
    _, sized = _sized(Case("NVIDIA L4", 1_000, capacity_mib=23_034), t)
    assert sized.profile == "1/2"


def test_a_gpu_of_unknown_memory_gets_no_time_sliced_share() -> None:
    _, sized = _sized(Case("NVIDIA L4", 4_000))  # no FB_FREE, no size in the name
    assert sized.share is None and "memory size is unknown" in sized.reason
    _, named = _sized(Case("Tesla V100-SXM2-32GB", 4_000))  # the name states it
    assert named.share == "time_slice" and named.gpu_memory_mib == pytest.approx(32e9 / 2**20)


def test_pods_using_several_gpus_each_get_time_slicing_not_mig() -> None:
    _, sized = _sized(Case(H100, 7_000, gpus=2, gpus_per_pod=2))
    assert sized.share == "time_slice"
    assert "use 2 GPUs each" in sized.reason
    assert sized.gpu_equivalents_saved == pytest.approx(2 * (1 - 1 / 8), abs=1e-3)


def test_missing_memory_is_never_sized() -> None:
    _, sized = _sized(Case(H100, None))
    assert sized.share is None and "not reported" in sized.reason


def test_an_idle_workload_is_for_the_reaper_not_for_resizing() -> None:
    # Idle, its GPU nearly empty (an idle endpoint holds its model): a low-utilization finding.
    _, sized = _sized(Case(H100, 7_000, util_percent=0.0, memory_used_mib=100.0))
    assert sized.share is None and "stayed idle" in sized.reason


@pytest.mark.parametrize("kind", ["Job", "Pod", "RayCluster"])
def test_only_long_running_workloads_are_sized(kind: str) -> None:
    view = _view(Case(H100, 7_000, kind=kind))
    finding = detectors.classify(view, T, END)
    assert finding is not None and finding.kind is FindingKind.LOW_UTILIZATION
    assert not right_size.wanted(finding, T)


def test_the_policy_turns_recommendations_off() -> None:
    view = _view(Case(H100, 7_000))
    finding = detectors.classify(view, T, END)
    assert finding is not None
    assert not right_size.wanted(finding, Thresholds(right_size=RightSizeSettings(enabled=False)))


def test_headroom_and_quantile_come_from_the_policy() -> None:
    t = Thresholds.model_validate({"rightSize": {"memoryHeadroom": 0.5, "memoryQuantile": 0.95}})
    _, sized = _sized(Case(H100, 7_000), t)  # 10,500 MiB: 1g.10gb no longer holds it
    assert sized.profile == "1g.20gb"
    assert sized.memory_quantile == 0.95 and sized.memory_headroom == 0.5


def test_the_recommendation_is_written_into_the_findings_json() -> None:
    finding, sized = _sized(Case(H100, 7_000))
    with_it = finding.model_copy(
        update={"evidence": finding.evidence.model_copy(update={"right_size": sized})}
    )
    written = with_it.evidence.to_json()["right_size"]
    assert isinstance(written, dict)
    assert written["profile"] == "1g.10gb" and written["resource"] == "nvidia.com/mig-1g.10gb"
    read = LowUtilizationEvidence.model_validate(with_it.evidence.to_json())
    assert read.right_size == sized


def test_the_table_and_the_html_report_show_it_beside_the_finding() -> None:
    finding, sized = _sized(Case(H100, 7_000))
    finding = finding.model_copy(
        update={"evidence": finding.evidence.model_copy(update={"right_size": sized})}
    )
    report = FindingsReport(window=WINDOW, generated_at=END, source="test", findings=(finding,))
    console = Console(record=True, width=250)
    render_table(report, console, currency="EUR")
    assert "fits MIG 1g.10gb (saves 0.86 GPU)" in console.export_text()
    html = render_html(report, T, currency="EUR")
    assert f'<div class="right-size">{escape(sized.line("EUR"))}</div>' in html
    assert "nvidia.com/gpu: 1 → nvidia.com/mig-1g.10gb: 1" in html and "(15.43 EUR)" in html


def test_a_pod_already_on_a_time_sliced_gpu_is_not_resized() -> None:
    # Time-slicing guarantees no share: a pod's percent says what it used, not what it holds, so
    # only an idle one is a finding (for the reaper), and a busy-enough one is none at all.
    view = _view(Case(H100, 7_000))
    shared = replace(view, devices=tuple(replace(d, info=replace(d.info, sharers=4)) for d in view.devices))
    assert detectors.classify(shared, T, END) is None
