"""The HTML report renders in a real browser and shows its plots (headless Chromium screenshot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.pipeline import Analysis, offender_series
from analyzer.report import plots
from analyzer.report.html import render_html
from common.model import FindingKind, FindingsReport
from common.thresholds import Thresholds
from harness.browser import pixels_near, screenshot
from simulation.fleet import Fleet
from simulation.fleet.truth import window_of
from simulation.metrics_source import SimulatedSource


@pytest.fixture(scope="module")
def report_html(simulated_analysis: Analysis, standard_fleet: Fleet) -> str:
    source = SimulatedSource(standard_fleet)
    offenders = offender_series(source, simulated_analysis, top=6)
    return render_html(
        simulated_analysis.report,
        Thresholds(),
        offenders,
        capabilities=simulated_analysis.capabilities,
        gpu_count=simulated_analysis.gpu_count,
    )


@pytest.mark.chromium
def test_report_renders_with_its_plots_in_chromium(report_html: str, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(report_html, encoding="utf-8")
    image = screenshot(page, tmp_path / "report.png", tmp_path / "profile")
    assert image.shape[:2] == (2000, 1280)
    assert float(image[..., :3].std()) > 0.1, "the screenshot is blank"
    # Bars of the waste plot and badges/cards, one colour per finding kind...
    for kind in (FindingKind.IDLE_ENDPOINT, FindingKind.LOW_UTILIZATION, FindingKind.DATALOADER_STARVATION):
        assert pixels_near(image, plots.KIND_COLOURS[kind]) > 2000, kind
    # ...and the utilization lines of the offender plots.
    assert pixels_near(image, plots.LINE_COLOURS[0], tolerance=0.08) > 300


def test_report_lists_every_finding(report_html: str, simulated_analysis: Analysis) -> None:
    for f in simulated_analysis.report.findings:
        assert f.workload.name in report_html
        assert f.recommendation.split(":")[0].replace("&", "&amp;") in report_html


def test_report_escapes_what_the_cluster_names(simulated_analysis: Analysis) -> None:
    report = simulated_analysis.report
    evil = report.findings[0].model_copy(update={"recommendation": "<script>alert(1)</script>"})
    html = render_html(
        FindingsReport(window=report.window, generated_at=report.generated_at, findings=(evil,)), Thresholds()
    )
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;" in html


def test_empty_report_says_so(standard_fleet: Fleet) -> None:
    window = window_of(standard_fleet)
    html = render_html(FindingsReport(window=window, generated_at=window.end), Thresholds())
    assert "No findings" in html
    assert "data:image/png" not in html
