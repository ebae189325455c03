"""Reports over many clusters: one query view may hold several clusters with the same namespaces and
workload names, so the table and the HTML report show each finding under its cluster, with each
cluster's totals beside the overall ones, and never add two clusters' numbers together. Over one
cluster (or none named) both read exactly as they always did."""

from __future__ import annotations

import io
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from analyzer.report import plots
from analyzer.report.html import CLUSTER_COLOUR, render_html
from analyzer.report.offenders import OffenderSeries
from analyzer.report.summaries import NO_CLUSTER, by_cluster, spans_clusters
from analyzer.report.table import render_table
from common.model import Finding, FindingKind, FindingsReport
from common.thresholds import Thresholds
from harness.browser import pixels_near, screenshot
from harness.findings import finding, report

PRICE = Thresholds(price_per_gpu_hour=2.0)


def in_cluster(cluster: str | None, *found: Finding) -> list[Finding]:
    return [
        f.model_copy(update={"cluster": cluster, "estimated_cost": f.wasted_gpu_hours * 2.0}) for f in found
    ]


def two_clusters(unlabelled: bool = False) -> FindingsReport:
    """The same workloads in two clusters (listed out of order), each with its own numbers."""
    found = [
        *in_cluster(
            "prod-us", finding(name="x", wasted=5.0), finding("low_utilization", name="y", wasted=1.0)
        ),
        *in_cluster("prod-eu", finding(name="x", wasted=7.0)),
    ]
    if unlabelled:
        found += in_cluster(None, finding(name="z", namespace="batch", wasted=0.5))
    return report(*found)


def table_text(found: FindingsReport, width: int = 160) -> str:
    buf = io.StringIO()
    render_table(found, Console(file=buf, width=width, color_system=None), currency="EUR")
    return buf.getvalue()


def test_grouping_needs_two_named_clusters() -> None:
    plain = [finding(name="a"), finding(name="b")]
    assert not spans_clusters(plain)
    assert not spans_clusters(in_cluster("prod", *plain))
    assert not spans_clusters([*in_cluster("prod", plain[0]), *in_cluster(None, plain[1])])
    assert spans_clusters(two_clusters().findings)
    groups = by_cluster(two_clusters(unlabelled=True).findings)
    assert [g.name for g in groups] == ["prod-eu", "prod-us", NO_CLUSTER]
    assert [len(g.findings) for g in groups] == [1, 2, 1]
    assert [g.wasted for g in groups] == [7.0, 6.0, 0.5]


# --- the terminal table ----------------------------------------------------------------------------


def test_table_shows_each_cluster_under_its_heading_with_its_totals() -> None:
    text = table_text(two_clusters(unlabelled=True))
    eu, us, none, overall = (
        text.index("cluster prod-eu\n"),
        text.index("cluster prod-us\n"),
        text.index(f"{NO_CLUSTER}\n"),
        text.index("all clusters: "),
    )
    assert eu < us < none < overall, "clusters sorted by name, the unlabelled ones last, totals at the end"
    # The same workload name shows once in each cluster, under that cluster's heading.
    assert len(re.findall(r"serving/Deployment/x\s", text)) == 2
    assert "serving/Deployment/x" in text[eu:us] and "serving/Deployment/x" in text[us:none]
    assert "serving/Deployment/y" in text[us:none] and "serving/Deployment/y" not in text[eu:us]
    assert "batch/Deployment/z" in text[none:overall]
    # Each cluster's totals, then everything's.
    flat = " ".join(text.split())
    assert "prod-eu: 1 findings (1 idle_endpoint, 0 low_utilization," in flat
    assert "7.0 GPU-hours wasted, 14.00 EUR at the configured price" in flat
    assert "prod-us: 2 findings (1 idle_endpoint, 1 low_utilization," in flat
    assert "6.0 GPU-hours wasted, 12.00 EUR" in flat
    assert f"{NO_CLUSTER}: 1 findings" in flat
    assert (
        "all clusters: 4 findings (3 idle_endpoint, 1 low_utilization, 0 dataloader_starvation, 0 unknown);"
        in flat
    )
    assert "13.5 GPU-hours wasted, 27.00 EUR at the configured price" in flat


def test_table_prints_cluster_names_as_text_never_markup() -> None:
    found = report(
        *in_cluster("[bold]eu[/bold]", finding(name="x")),
        *in_cluster("us [link=http://x]", finding(name="x")),
    )
    text = table_text(found)
    assert "cluster [bold]eu[/bold]\n" in text
    assert "cluster us [link=http://x]\n" in text


def _one_cluster(labelled: str) -> tuple[FindingsReport, FindingsReport]:
    """Two findings without a cluster, and the same with one cluster named on all or some of them."""
    found = [finding(name="x", wasted=3.0), finding("low_utilization", name="y", namespace="ml")]
    named = (
        f.model_copy(update={"cluster": "prod" if labelled == "every finding" or i else None})
        for i, f in enumerate(found)
    )
    return report(*found), report(*named)


@pytest.mark.parametrize("labelled", ["every finding", "some findings"])
def test_table_over_one_cluster_reads_as_before(labelled: str) -> None:
    plain, clustered = _one_cluster(labelled)
    assert table_text(clustered) == table_text(plain)
    assert "cluster" not in table_text(plain)


# --- the waste plot ----------------------------------------------------------------------------------


def test_waste_plot_never_adds_two_clusters_namespaces_together() -> None:
    waste = plots.namespace_waste(two_clusters(unlabelled=True).findings)
    assert waste == {
        f"{NO_CLUSTER}/batch": {FindingKind.IDLE_ENDPOINT: 0.5},
        "prod-us/serving": {FindingKind.IDLE_ENDPOINT: 5.0, FindingKind.LOW_UTILIZATION: 1.0},
        "prod-eu/serving": {FindingKind.IDLE_ENDPOINT: 7.0},
    }
    # One cluster: bare namespaces, as before.
    one = plots.namespace_waste(
        in_cluster("prod", finding(name="x"), finding(name="n", workload_kind="Node"))
    )
    assert set(one) == {"serving", "(whole nodes)"}


def test_waste_plot_draws_cluster_names_as_written() -> None:
    # Unescaped, a pair of dollar signs is matplotlib mathtext, and this one does not parse.
    found = report(*in_cluster(r"eu$\nocommand$", finding(name="x")), *in_cluster("us", finding(name="x")))
    png = plots.waste_by_namespace(found.findings)
    assert png is not None and png.startswith(b"\x89PNG")


# --- the HTML report ---------------------------------------------------------------------------------

VOID = {"meta", "img", "br", "hr", "link", "input", "source", "col", "wbr", "area", "base", "embed", "track"}


class _Balance(HTMLParser):
    """Every element closed, in order: what a browser would otherwise silently repair."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:] or 'nothing'} at {self.getpos()}")
        else:
            self.open.pop()


def assert_balanced(html: str) -> None:
    checker = _Balance()
    checker.feed(html)
    checker.close()
    assert not checker.errors, checker.errors[:5]
    assert not checker.open, checker.open


def text_of(html: str) -> str:
    """The report's text, tags and plot bytes left out, whitespace folded."""
    html = re.sub(r"data:image/png;base64,[^\"]+", "", html)
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def offenders(found: FindingsReport) -> list[OffenderSeries]:
    return [OffenderSeries(finding=f, lines=()) for f in found.findings]


def test_html_groups_findings_by_cluster_with_their_totals() -> None:
    found = two_clusters(unlabelled=True)
    html = render_html(found, PRICE, offenders(found), currency="EUR")
    assert_balanced(html)
    sections = re.findall(
        r'<section class="cluster" id="cluster-(\d)">\s*<h3 class="cluster-head">(.*?)<span', html
    )
    assert sections == [("1", "Cluster prod-eu"), ("2", "Cluster prod-us"), ("3", NO_CLUSTER)]
    # Each cluster's findings in its own section, the same workload name in both.
    parts = re.split(r'<section class="cluster" ', html)[1:]
    assert [len(re.findall(r"<strong>serving/x</strong>", part)) for part in parts] == [1, 1, 0]
    assert "<strong>serving/y</strong>" in parts[1] and "<strong>serving/y</strong>" not in parts[0]
    assert "<strong>batch/z</strong>" in parts[2]
    text = text_of(html)
    assert "Cluster prod-eu 1 finding · 7.0 GPU-hours wasted · 14.00 EUR" in text
    assert "Cluster prod-us 2 findings · 6.0 GPU-hours wasted · 12.00 EUR" in text
    assert f"{NO_CLUSTER} 1 finding · 0.5 GPU-hours wasted · 1.00 EUR" in text
    # The totals per cluster and overall, near the top; the overall cards stay.
    assert (
        "Waste by cluster cluster findings wasted GPU-h cost (EUR) prod-eu 1 7.0 14.00 prod-us 2 6.0 12.00"
        in text
    )
    assert f"{NO_CLUSTER} 1 0.5 1.00 all clusters 4 13.5 27.00" in text
    assert "13.5 GPU-hours wasted in the window" in text
    assert "2 clusters, each shown apart" in text
    # Offender cards name their cluster.
    titles = re.findall(r"<h3>(.*?)</h3>", html)
    assert titles == [
        "[prod-us] Deployment serving/x",
        "[prod-us] Deployment serving/y",
        "[prod-eu] Deployment serving/x",
        f"[{NO_CLUSTER}] Deployment batch/z",
    ]


def test_html_escapes_cluster_names() -> None:
    evil = '<img src=x onerror="alert(1)">'
    found = report(*in_cluster(evil, finding(name="x")), *in_cluster("us", finding(name="x")))
    html = render_html(found, PRICE, offenders(found))
    assert_balanced(html)
    assert evil not in html and "onerror=" not in html.replace("onerror=&#34;", "")
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html
    assert "[&lt;img src=x onerror=&#34;alert(1)&#34;&gt;] Deployment serving/x" in html


@pytest.mark.parametrize("labelled", ["every finding", "some findings"])
def test_html_over_one_cluster_reads_as_before(labelled: str) -> None:
    plain, clustered = _one_cluster(labelled)
    expected = render_html(plain, PRICE, offenders(plain), gpu_count=4)
    assert render_html(clustered, PRICE, offenders(clustered), gpu_count=4) == expected
    assert "cluster" not in text_of(expected).lower()


def _bands(mask: np.ndarray) -> list[tuple[int, int]]:
    """Runs of consecutive true rows: (first, last)."""
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(rows) > 1)
    starts = [int(rows[0]), *(int(rows[i + 1]) for i in breaks)]
    ends = [*(int(rows[i]) for i in breaks), int(rows[-1])]
    return list(zip(starts, ends, strict=True))


@pytest.mark.chromium
def test_two_cluster_report_shows_its_grouping_in_chromium(tmp_path: Path) -> None:
    # prod-eu holds only idle endpoints, prod-us only low utilization: the badges under each banner
    # tell whose findings are drawn there.
    found = report(
        *in_cluster(
            "prod-us",
            finding("low_utilization", name="x"),
            finding("low_utilization", name="y", namespace="ml"),
        ),
        *in_cluster("prod-eu", finding(name="x"), finding(name="gpu-a", workload_kind="Node")),
    )
    page = tmp_path / "report.html"
    page.write_text(render_html(found, PRICE), encoding="utf-8")
    image = screenshot(page, tmp_path / "report.png", tmp_path / "profile")
    assert float(image[..., :3].std()) > 0.1, "the screenshot is blank"
    width = image.shape[1]
    rgb = image[..., :3]
    banner = (
        np.abs(rgb - np.array([int(CLUSTER_COLOUR[i : i + 2], 16) / 255 for i in (1, 3, 5)])) < 0.03
    ).all(-1)
    # A cluster's banner spans most of the page's width; nothing else has its colour.
    bands = _bands(banner.sum(axis=1) > width * 0.5)
    assert len(bands) == 2, f"one banner per cluster, found {bands}"
    assert all(10 <= end - start <= 60 for start, end in bands), bands
    (_, eu_end), (us_start, us_end) = bands
    eu, us = image[eu_end + 1 : us_start], image[us_end + 1 :]
    idle = plots.KIND_COLOURS[FindingKind.IDLE_ENDPOINT]
    low = plots.KIND_COLOURS[FindingKind.LOW_UTILIZATION]
    assert pixels_near(eu, idle) > 200 and pixels_near(eu, low) == 0, "prod-eu shows its idle endpoints"
    assert pixels_near(us, low) > 200 and pixels_near(us, idle) == 0, "prod-us shows its low utilization"
