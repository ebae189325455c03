"""Stalled jobs: GPUs that read busy while they wait on one rank, read through each source.

The ``stalled`` fleet holds data-parallel Jobs as DDP and NCCL behave (one rank per pod; waiting
ranks spin in the all-reduce at 100 % and near-idle power), beside what must not be flagged: real
training, a job checkpointing every few hundred steps, power-capped training (its clock-event
reasons say so), a serving endpoint at honest utilization. Every source must give the ground
truth's verdicts, and the same numbers.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread

from analyzer.analysis import Analysis
from analyzer.detection.power_limits import datasheet_limit
from analyzer.pipeline import analyze_in_detail
from analyzer.report import plots
from analyzer.report.html import render_html
from analyzer.report.offenders import OffenderSeries, offender_series
from common.model import Finding, FindingKind, FindingsReport, StalledJobEvidence, UtilizationEvidence
from common.thresholds import Thresholds
from harness.analyses import TSDBS, report_on
from harness.browser import pixels_near, screenshot
from simulation.fleet import Fleet, expected_findings, load_scenario, simulate, with_naming
from simulation.fleet.scenario import Scenario
from simulation.fleet.truth import window_of
from simulation.in_memory_source import InMemorySource, SimulatedSource

pytestmark = pytest.mark.slow


_UTILIZATION = frozenset(UtilizationEvidence.model_fields) | {"p10_util_percent", "p90_util_percent"}


@pytest.fixture(scope="module")
def stalled_fleet() -> Fleet:
    return simulate(load_scenario("stalled"))


def _stalled(report: FindingsReport) -> dict[str, Finding]:
    return {f.workload.name: f for f in report.findings if f.kind is FindingKind.STALLED_JOB}


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])


def _evidence(f: Finding) -> StalledJobEvidence:
    assert isinstance(f.evidence, StalledJobEvidence)
    return f.evidence


@pytest.mark.parametrize("tsdb", TSDBS)
def test_stalled_jobs_are_found_and_nothing_else_is(stalled_fleet: Fleet, tsdb: str, tmp_path: Path) -> None:
    report = report_on(stalled_fleet, tsdb, tmp_path)
    truth = {ref.name: e.kind for ref, e in expected_findings(stalled_fleet).items()}
    found = {f.workload.name: f.kind for f in report.findings}
    assert found == {name: kind for name, kind in truth.items() if kind is not None}
    stalled = _stalled(report)
    assert set(stalled) == {"ckpt-often", "straggler", "hung-run", "poller"}
    often, straggler, hung, poller = (
        _evidence(stalled[n]) for n in ("ckpt-often", "straggler", "hung-run", "poller")
    )
    # Rank 0 writes a checkpoint every 5 minutes for 2: the other three GPUs wait 2/5 of the time.
    assert often.pattern == "one_rank" and often.odd_one_out_share == 1.0
    assert often.waiting_share == pytest.approx(0.3, abs=0.02)
    assert often.episode_mean_minutes == pytest.approx(2.0, abs=0.1)
    assert stalled["ckpt-often"].wasted_gpu_hours == pytest.approx(3 * 6 * 0.4, rel=0.05)
    assert often.power_limit_from == "datasheet" and often.power_limit_watts == 700.0
    assert straggler.pattern == "varying_ranks" and (straggler.odd_one_out_share or 0) < 0.8
    # The last rank died two hours before the end: critical, the wait still going on.
    assert hung.pattern == "hung" and hung.hung and hung.severity == "critical"
    assert hung.last_episode_minutes == pytest.approx(120.0, abs=2.0)
    assert hung.power_limit_from == "exporter"  # our exporter serves the enforced limit
    assert hung.odd_one_out_pod is not None and hung.odd_one_out_pod.startswith("hung-run-")
    assert poller.pattern == "spin_poll" and poller.power_limit_watts == 250.0
    for e in (often, straggler, hung, poller):
        assert e.power_waiting_watts is not None and e.power_waiting_watts < 0.35 * (e.power_limit_watts or 0)
        assert e.signals and "power" in e.signals


@pytest.mark.parametrize("tsdb", TSDBS[1:])
def test_a_tsdb_gives_the_in_memory_numbers(stalled_fleet: Fleet, tsdb: str, tmp_path: Path) -> None:
    """The same verdicts and numbers from a TSDB as in memory (the raw reads are the same samples)."""
    memory = _stalled(report_on(stalled_fleet, "in-memory", tmp_path / "m"))
    other = _stalled(report_on(stalled_fleet, tsdb, tmp_path / tsdb))
    assert other.keys() == memory.keys()
    for name, f in memory.items():
        assert other[name].wasted_gpu_hours == f.wasted_gpu_hours, name
        # The stalled-job numbers (the utilization summary's edges are each source's own).
        mine = {k: v for k, v in f.evidence.to_json().items() if k in StalledJobEvidence.model_fields}
        theirs = {k: v for k, v in other[name].evidence.to_json().items() if k in mine}
        assert {k: v for k, v in theirs.items() if k not in _UTILIZATION} == {
            k: v for k, v in mine.items() if k not in _UTILIZATION
        }, name


def test_both_dcgm_namings_give_the_same_verdicts(stalled_fleet: Fleet, tmp_path: Path) -> None:
    current = simulate(with_naming(load_scenario("stalled"), "dcgm-4.7"))
    legacy = _stalled(report_on(stalled_fleet, "in-memory", tmp_path))
    renamed = _stalled(report_on(current, "in-memory", tmp_path))
    assert renamed.keys() == legacy.keys()
    for name, f in legacy.items():
        assert _evidence(renamed[name]).waiting_share == _evidence(f).waiting_share, name
    assert "DCGM_FI_DEV_BOARD_POWER_WATTS" in (_evidence(renamed["ckpt-often"]).power_metric or "")


def test_gpus_without_power_readings_are_never_called_stalled(stalled_fleet: Fleet) -> None:
    """No power series: no stalled verdict, and no other verdict drawn from the busy-looking GPUs."""
    unpowered = [
        s
        for s in stalled_fleet.series
        if s.name not in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT")
    ]
    window = window_of(stalled_fleet)
    report = analyze_in_detail(
        InMemorySource(unpowered, "unpowered"), window, Thresholds(), now=window.end
    ).report
    assert not _stalled(report)
    assert {f.workload.name for f in report.findings} == {"quiet-api"}


def test_a_cap_the_exporter_does_not_serve_is_told_by_the_clock_event_reasons(stalled_fleet: Fleet) -> None:
    """Power-capped training draws 28 % of its datasheet limit: without its reasons it would read
    as waiting; with them (SW power cap) it is never judged."""
    no_reasons = [s for s in stalled_fleet.series if s.name != "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]
    window = window_of(stalled_fleet)
    report = analyze_in_detail(
        InMemorySource(no_reasons, "blind"), window, Thresholds(), now=window.end
    ).report
    assert "capped-train" in _stalled(report)  # what the reasons prevent (see the parametrized test)


def test_a_shorter_hung_threshold_and_a_higher_share_change_the_verdicts(
    stalled_fleet: Fleet, tmp_path: Path
) -> None:
    strict = Thresholds(stalled_min_share=0.5, stalled_hung_after=timedelta(hours=3))
    stalled = _stalled(report_on(stalled_fleet, "in-memory", tmp_path, strict))
    assert set(stalled) == {"poller"}  # the hung job's 2 h wait is not hung under a 3 h threshold


@pytest.mark.parametrize(
    ("model", "watts"),
    [
        ("NVIDIA H100 80GB HBM3", 700.0),
        ("NVIDIA H100 PCIe", 350.0),
        ("NVIDIA H100 NVL", 400.0),
        ("NVIDIA H200", 700.0),
        ("NVIDIA A100-SXM4-80GB", 400.0),
        ("NVIDIA A100-PCIE-40GB", 250.0),
        ("NVIDIA L4", 72.0),
        ("NVIDIA L40S", 350.0),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A10G", None),
        ("Some Future GPU", None),
        (None, None),
    ],
)
def test_datasheet_limits_by_model_name(model: str | None, watts: float | None) -> None:
    assert datasheet_limit(model) == watts


def test_a_stalled_job_finding_reads_back_and_a_policy_can_route_it(
    stalled_fleet: Fleet, tmp_path: Path
) -> None:
    from reaper.policy.schema import Match

    report = report_on(stalled_fleet, "in-memory", tmp_path)
    again = FindingsReport.from_json(report.to_json())
    assert again.to_json() == report.to_json()
    assert '"schema_version": 2' in report.to_json()
    assert Match.model_validate({"findings": ["stalled_job"]}).findings == ("stalled_job",)


@pytest.fixture(scope="module")
def stalled_analysis(stalled_fleet: Fleet) -> tuple[Analysis, dict[str, OffenderSeries]]:
    window = window_of(stalled_fleet)
    source = SimulatedSource(stalled_fleet)
    analysis = analyze_in_detail(source, window, Thresholds(), now=window.end)
    found = offender_series(source, analysis, top=10, thresholds=Thresholds())
    return analysis, {o.finding.workload.name: o for o in found}


def test_the_chart_puts_the_jobs_gpus_side_by_side_with_the_odd_one_out_framed(
    stalled_analysis: tuple[Analysis, dict[str, OffenderSeries]], tmp_path: Path
) -> None:
    series = stalled_analysis[1]["ckpt-often"]
    odd = _evidence(series.finding).odd_one_out
    # Every GPU's utilization and its power against the limit the verdict used (700 W: datasheet).
    assert len(series.lines) == len(series.power) == 4
    # Every board draws near-idle power 2 minutes in 5; the checkpointing rank's utilization drops
    # then too, the others' reads busy throughout (they spin in the all-reduce).
    assert all(float(np.mean(p.percent <= 35.0)) == pytest.approx(0.4, abs=0.1) for p in series.power)
    quiet = {u.device_id: float(np.mean(u.percent < 50.0)) for u in series.lines}
    assert quiet.pop(odd or "") == pytest.approx(0.4, abs=0.1)
    assert all(share < 0.05 for share in quiet.values())
    path = tmp_path / "chart.png"
    path.write_bytes(plots.offender(series, Thresholds()))
    image = imread(str(path))
    # Four rows on one time axis (ranks in order), the frame in the finding's colour around one:
    # the odd one out's, about a quarter of the height, where its rank's row lies.
    framed = np.flatnonzero(
        (np.abs(image[..., :3] - _rgb(plots.ODD_COLOUR)).max(axis=-1) < 0.06).sum(axis=1) > 100
    )
    assert framed.size, "no frame drawn"
    height = image.shape[0]
    assert 0.12 * height < framed.max() - framed.min() < 0.3 * height
    middle = (framed.max() + framed.min()) / 2 / height
    rank = sorted(p.device_id for p in series.power).index(odd or "")
    assert rank / 4 < middle < (rank + 1) / 4
    # Each line in every row: four bands of image rows holding it, apart from one another.
    for colour in (plots.POWER_COLOUR, plots.LINE_COLOURS[0]):
        held = np.flatnonzero((np.abs(image[..., :3] - _rgb(colour)).max(axis=-1) < 0.08).sum(axis=1) > 5)
        assert held.size and int((np.diff(held) > 10).sum()) + 1 == 4, colour


@pytest.mark.chromium
def test_the_report_shows_a_stalled_job_side_by_side_in_chromium(
    stalled_analysis: tuple[Analysis, dict[str, OffenderSeries]], tmp_path: Path
) -> None:
    analysis, offenders = stalled_analysis
    only = FindingsReport(
        window=analysis.report.window,
        generated_at=analysis.report.generated_at,
        findings=(offenders["ckpt-often"].finding,),
    )
    page = tmp_path / "report.html"
    page.write_text(render_html(only, Thresholds(), [offenders["ckpt-often"]]), encoding="utf-8")
    assert "the odd one out is framed" in page.read_text(encoding="utf-8")
    image = screenshot(page, tmp_path / "report.png", tmp_path / "profile")
    assert pixels_near(image, plots.POWER_COLOUR, tolerance=0.08) > 300
    assert pixels_near(image, plots.ODD_COLOUR, tolerance=0.06) > 400


class _Reads(SimulatedSource):
    """Notes which pods' waits were counted and which were read raw."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__(fleet)
        self.counted: set[str] = set()
        self.read: set[str] = set()

    def waiting_counts(self, snapshot: Any, wanted: Any, rule: Any) -> Any:
        self.counted |= {key.pod.rsplit("-", 1)[0] for key, _ in wanted}
        self.counting = True  # the in-memory count reads its own samples: not a raw read
        try:
            return super().waiting_counts(snapshot, wanted, rule)
        finally:
            self.counting = False

    def gpu_readings(self, snapshot: Any, keys: Any) -> Any:
        if not getattr(self, "counting", False):
            self.read |= {key.pod.rsplit("-", 1)[0] for key in keys}
        return super().gpu_readings(snapshot, keys)


def test_only_jobs_whose_counted_waits_come_near_a_threshold_are_read_raw(stalled_fleet: Fleet) -> None:
    """Every busy job's waits are counted where the samples are; raw samples cross the wire only for
    the jobs that may be stalled (at 10,000 GPUs most GPUs are busy, few of them stalled)."""
    source = _Reads(stalled_fleet)
    window = window_of(stalled_fleet)
    analyze_in_detail(source, window, Thresholds(), now=window.end)
    busy = {"ckpt-often", "ckpt-rare", "straggler", "hung-run", "real-train", "capped-train"}
    assert busy | {"poller-w7wbnfhkws"} <= source.counted
    assert source.read == {"ckpt-often", "straggler", "hung-run", "poller-w7wbnfhkws"}


@pytest.fixture(scope="module")
def offset_fleet() -> Fleet:
    """Eight-rank jobs over four nodes of two GPUs, each node scraped by Prometheus at its own
    offset within the minute (:00, :07, :37, :52), every timestamp jittered by a few
    milliseconds: no two nodes' samples share a timestamp, as on a real cluster, and no node holds
    half of a job's ranks."""
    offsets = (0.0, 7.0, 37.0, 52.0)
    nodes = [
        {"name": f"{job}-{i}", "gpus": 2, "scrape_offset_s": offset, "scrape_jitter_ms": 4.0}
        | ({"serves_power_limit": True} if job == "h" else {})
        for job in ("s", "h")
        for i, offset in enumerate(offsets)
    ]
    ddp = {"namespace": "research", "kind": "Job", "replicas": 8, "warmup": "5m"}
    return simulate(
        Scenario.model_validate(
            {
                "name": "scrape-offsets",
                "seed": 5,
                "end": "2026-01-05T00:00:00Z",
                "duration": "4h",
                "step": "60s",
                "analysis_window": "3h",
                "nodes": nodes,
                # First fit in node order: the straggler on the s- nodes, the hung job on the h- ones.
                "workloads": [
                    ddp | {"name": "straggler", "behaviour": "ddp_straggler"},
                    ddp | {"name": "hung-run", "behaviour": "ddp_hung", "stall_at": "-2h"},
                ],
            }
        )
    )


@pytest.mark.parametrize("tsdb", [TSDBS[0], TSDBS[1]])
def test_ranks_on_nodes_scraped_at_different_offsets_are_judged_on_one_clock(
    offset_fleet: Fleet, tsdb: str, tmp_path: Path
) -> None:
    """Each GPU's samples are put in buckets of the data's step before a moment is judged: a job
    whose nodes are scraped 7 s and 37 s apart keeps its straggler and hung verdicts."""
    utilization = [s for s in offset_fleet.series if s.name == "DCGM_FI_DEV_GPU_UTIL"]
    stamps = {s.label("Hostname"): {float(t) for t in s.timestamps} for s in utilization}
    assert len(stamps) == 8 and all(not (stamps[a] & stamps[b]) for a in stamps for b in stamps if a != b), (
        "the nodes' samples must never share a timestamp"
    )
    report = report_on(offset_fleet, tsdb, tmp_path)
    stalled = _stalled(report)
    assert set(stalled) == {"straggler", "hung-run"}
    straggler, hung = _evidence(stalled["straggler"]), _evidence(stalled["hung-run"])
    assert straggler.pattern == "varying_ranks" and not straggler.hung
    assert straggler.episodes is not None and straggler.episodes >= 5
    assert hung.pattern == "hung" and hung.hung and hung.severity == "critical"
    assert hung.last_episode_minutes == pytest.approx(120.0, abs=2.0)
    assert hung.odd_one_out_pod is not None and hung.odd_one_out_pod.startswith("hung-run-")
