"""The HTML report renders in a real browser and shows its plots (headless Chromium screenshot); each
chart draws the signal its verdict used; the reports speak human units."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from rich.console import Console

from analyzer.pipeline import Analysis
from analyzer.report import plots
from analyzer.report.html import render_html
from analyzer.report.offenders import OffenderSeries, offender_series
from analyzer.report.table import render_table
from common.model import DataloaderStarvationEvidence, FindingKind, FindingsReport
from common.thresholds import Thresholds
from harness.browser import pixels_near, screenshot
from harness.findings import finding, report
from simulation.fleet import Fleet
from simulation.fleet.truth import window_of
from simulation.in_memory_source import SimulatedSource


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


@pytest.fixture(scope="module")
def offenders(simulated_analysis: Analysis, standard_fleet: Fleet) -> dict[str, OffenderSeries]:
    found = offender_series(
        SimulatedSource(standard_fleet), simulated_analysis, top=20, thresholds=Thresholds()
    )
    return {o.finding.workload.name: o for o in found}


def _png(data: bytes, tmp_path: Path) -> np.ndarray:
    path = tmp_path / "chart.png"
    path.write_bytes(data)
    return imread(str(path))


@pytest.mark.parametrize("name", ["tokenizer-bench", "vision-finetune"])
def test_bimodal_starvation_chart_shows_the_shares_its_verdict_used(
    offenders: dict[str, OffenderSeries], name: str, tmp_path: Path
) -> None:
    series = offenders[name]
    evidence = series.finding.evidence
    assert isinstance(evidence, DataloaderStarvationEvidence)
    assert evidence.pattern == "bimodal"
    # One share line per GPU, from the signal the verdict used, agreeing with the verdict's numbers.
    assert len(series.shares) == series.finding.gpu_count == 2
    for line in series.shares:
        assert line.source == evidence.shares_from
        assert float(np.nanmean(line.stalled)) == pytest.approx(evidence.stalled_share, abs=0.05)
        assert float(np.nanmean(line.busy)) == pytest.approx(evidence.busy_share, abs=0.05)
    image = _png(plots.offender(series, Thresholds()), tmp_path)
    half = image.shape[1] // 2
    for part in (image[:, :half], image[:, half:]):  # one panel per GPU, side by side
        assert pixels_near(part, plots.STALLED_COLOUR, tolerance=0.08) > 100
        assert pixels_near(part, plots.BUSY_COLOUR, tolerance=0.08) > 100
    stalled = pixels_near(image, plots.STALLED_COLOUR, tolerance=0.08)
    assert pixels_near(image, plots.LINE_COLOURS[0], tolerance=0.08) < stalled / 10, "no utilization line"


def test_idle_endpoint_chart_draws_the_idle_line_not_the_low_utilization_line(
    offenders: dict[str, OffenderSeries], tmp_path: Path
) -> None:
    series = offenders["legacy-ranker"]
    assert series.finding.kind is FindingKind.IDLE_ENDPOINT
    image = _png(plots.offender(series, Thresholds()), tmp_path)
    assert pixels_near(image, plots.KIND_COLOURS[FindingKind.IDLE_ENDPOINT], tolerance=0.08) > 100
    assert pixels_near(image, plots.KIND_COLOURS[FindingKind.LOW_UTILIZATION], tolerance=0.08) == 0
    half = image.shape[1] // 2
    for part in (image[:, :half], image[:, half:]):  # its two GPUs in panels of their own
        assert pixels_near(part, plots.LINE_COLOURS[0], tolerance=0.08) > 100


def test_low_utilization_chart_draws_the_low_utilization_line(
    offenders: dict[str, OffenderSeries], tmp_path: Path
) -> None:
    series = offenders["batch-scorer"]
    assert series.finding.kind is FindingKind.LOW_UTILIZATION
    image = _png(plots.offender(series, Thresholds()), tmp_path)
    assert pixels_near(image, plots.KIND_COLOURS[FindingKind.LOW_UTILIZATION], tolerance=0.08) > 100


def test_report_shows_evidence_in_human_units_and_times_to_the_second(report_html: str) -> None:
    text = re.sub(r"data:image/png;base64,[^\"]+", "", report_html)  # the plots' bytes are no text
    assert not re.search(r"\de[+-]\d\d", text), "a raw float in scientific notation"
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", text), "a timestamp finer than the second"
    assert re.search(r"<dt>memory used</dt><dd>\d+\.\d GiB</dd>", text)
    assert re.search(r"<dt>coverage</dt><dd>\d+\.\d %</dd>", text)
    assert re.search(r"<dt>judged from</dt><dd>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</dd>", text)
    assert "Stalled and busy shares of the exporter&#39;s sub-second sample histogram" in report_html


def test_terminal_table_shows_human_units(simulated_analysis: Analysis) -> None:
    console = Console(record=True, width=200)
    render_table(simulated_analysis.report, console)
    text = console.export_text()
    assert not re.search(r"\de[+-]\d\d", text)
    assert not re.search(r"\d\d:\d\d:\d\d\.\d", text)
    assert re.search(r"max \d+\.\d %, \d+\.\d GiB held per GPU", text)
    assert re.search(r"bimodal: \d+\.\d % stalled / \d+\.\d % busy", text)


# --- what a reader trips on ---------------------------------------------------------------------------


def _mask(image: np.ndarray, hex_colour: str, tolerance: float = 0.03) -> np.ndarray:
    rgb = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return np.asarray((np.abs(image[..., :3] - rgb) < tolerance).all(-1))


@pytest.mark.chromium
def test_a_one_bar_waste_chart_keeps_its_legend_off_the_bar(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(report(finding(name="ranker", wasted=12.0)), Thresholds()), encoding="utf-8")
    image = screenshot(page, tmp_path / "report.png", tmp_path / "profile")
    bar = _mask(image, plots.KIND_COLOURS[FindingKind.IDLE_ENDPOINT])
    # The bar is the only wide run of its colour (cards and badges are narrow): its rows and columns.
    rows = np.flatnonzero(bar.sum(axis=1) > 300)
    assert rows.size > 20, "no bar drawn"
    cols = np.flatnonzero(bar[rows].any(axis=0) & (bar[rows].sum(axis=0) > rows.size // 2))
    # Inside its edges nothing is drawn over it: a legend's label would leave holes of another colour.
    inside = bar[rows.min() + 2 : rows.max() - 1, cols.min() + 2 : cols.max() - 1]
    covered = int(inside.size - inside.sum())
    assert covered < 10, f"{covered} pixels of the bar are covered"


def test_a_workload_with_no_gpu_attributed_shows_no_zero_and_no_dangling_separator() -> None:
    nothing = finding(
        FindingKind.UNKNOWN,
        name="new-model",
        gpus=0,
        wasted=0.0,
        evidence={"reason": "too_young", "judged_hours": 0.0},
    ).model_copy(update={"nodes": ()})
    html = render_html(report(nothing), Thresholds())
    row = html[html.index("<strong>serving/new-model</strong>") :]
    row = row[: row.index("</tr>")]
    assert re.search(r'<span class="empty">Deployment</span>', row), row
    assert not re.search(r"·\s*<", row)
    assert '<td class="num">0</td>' not in row
    console = Console(record=True, width=200)
    render_table(report(nothing), console)
    assert not re.search(r"new-model +0 ", console.export_text())


def test_unknown_findings_go_by_one_name_with_their_reason(tmp_path: Path) -> None:
    young = finding(
        FindingKind.UNKNOWN, name="fresh", wasted=0.0, evidence={"reason": "too_young", "judged_hours": 1.5}
    )
    gappy = finding(
        FindingKind.UNKNOWN,
        name="gappy",
        wasted=0.0,
        evidence={"reason": "low_coverage", "coverage": 0.4, "min_coverage": 0.9},
    )
    html = render_html(report(young, gappy), Thresholds())
    assert "unknown (too little data to judge)" in html  # the card
    assert '<div class="why">too young: 1.5 h judged</div>' in html
    assert '<div class="why">low coverage: 40.0 % of samples of 90 % needed</div>' in html
    console = Console(record=True, width=200)
    render_table(report(young, gappy), console)
    text = console.export_text()
    assert "too young: 1.5 h judged" in text and "low coverage: 40.0 % of samples" in text


# --- one unit, one time format, words for how the data was read (issue 41) -----------------------------


def test_memory_reads_in_one_unit_throughout(report_html: str) -> None:
    """55.8 GiB in the subtitle, the evidence and the recommendation alike: never 57,091 MiB beside it."""
    text = re.sub(r"data:image/png;base64,[^\"]+", "", report_html)
    assert "GiB" in text
    assert not re.search(r"\d{1,3}(,\d{3})+ MiB", text), re.search(r".{80}\d{1,3}(,\d{3})+ MiB.{20}", text)
    assert "holding 55.8 GiB each" in text


def test_the_report_says_in_words_how_the_data_was_read(
    report_html: str, simulated_analysis: Analysis
) -> None:
    footer = report_html[report_html.index("<footer>") : report_html.index("</footer>")]
    assert "How the data source was read:" in footer
    parts = simulated_analysis.capabilities.split("; ")
    assert footer.count("<li>") == len(parts) > 1
    assert "; " not in footer.replace("&#39;", "'")


def test_a_report_with_no_findings_says_how_many_gpus_it_rests_on() -> None:
    empty = report().model_copy(update={"gpus_judged": 3})
    html = render_html(empty, Thresholds())
    assert "No findings: all 3 judged GPUs were busy enough" in html
    assert "· 3 GPUs judged ·" in html
    console = Console(record=True, width=120)
    render_table(empty, console)
    assert "No findings: all 3 judged GPUs were busy enough" in console.export_text()
