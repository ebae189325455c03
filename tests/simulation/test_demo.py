"""``gpu-reaper demo``: the whole pipeline on the embedded fleet, with no cluster and no Prometheus."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from cli.reaper import main


def test_demo_prints_findings_dry_run_plan_slack_preview_and_writes_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    assert main(["demo", "--scenario", "standard"], stdout=out) == 0
    text = out.getvalue()

    assert 'scenario "standard"' in text
    assert "Findings over 2026-01-04T18:00:00Z → 2026-01-05T00:00:00Z: 15" in text
    assert re.search(r"idle_endpoint +serving/Deployment/legacy-ranker +2 +12\.0 +1\.00", text)
    # The dry-run plan: the real planner's decisions, with reasons.
    assert re.search(r"would scale_to_zero +serving/Deployment/legacy-ranker +idle endpoint on 2 GPUs", text)
    assert re.search(r"would cordon +Node/gpu-spare", text)
    assert re.search(r"insufficient_data +ml-platform/Deployment/gap-service", text)
    # The Slack preview: routed per owner channel, with money and the opt-out.
    assert "── Slack message to #serving-oncall" in text
    assert "── Slack message to #team-b" in text  # routed by the namespace annotation
    assert "Reclaimable 72 GPU-hours/day (≈ 180 USD/day)" in text
    assert "gpu-reaper/exclude=true" in text
    assert text.rstrip().endswith(
        "gpu-reaper: mode=dry-run findings=15 planned=10 applied=0 skipped=5 failed=0"
    )

    report = tmp_path / "gpu-reaper-report.html"
    html = report.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html") and "legacy-ranker" in html


def test_the_default_demo_reclaims_through_notebook_inferenceservice_and_raycluster(tmp_path: Path) -> None:
    out = io.StringIO()
    assert main(["demo", "--output", str(tmp_path / "r.html")], stdout=out) == 0
    text = out.getvalue()
    assert 'scenario "demo"' in text
    # The plan names the root it would stop and the child holding the GPUs.
    assert re.search(
        r"would scale_to_zero +research/Notebook/alice +idle endpoint .*"
        r"\[GPUs held by research/StatefulSet/alice\]",
        text,
    )
    assert re.search(
        r"would scale_to_zero +serving/InferenceService/summarizer +idle endpoint .*"
        r"\[GPUs held by serving/Deployment/summarizer-predictor\]",
        text,
    )
    assert re.search(r"notify +research/RayCluster/ray-tune +low utilization on 4 GPUs", text)
    # Slack says what it would do to each root, in its own terms.
    assert "*Would stop* `research/alice` (Notebook; GPUs held by StatefulSet research/alice)" in text
    assert "*Would stop* `serving/summarizer` (InferenceService; GPUs held by Deployment" in text
    assert "*Heads-up* `research/ray-tune` (RayCluster)" in text
    assert text.rstrip().endswith(
        "gpu-reaper: mode=dry-run findings=18 planned=13 applied=0 skipped=5 failed=0"
    )


def test_demo_output_path_and_policy(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "rules:\n  - name: tell\n    match: {findings: [idle_endpoint]}\n    action: notify\n",
        encoding="utf-8",
    )
    out = io.StringIO()
    assert main(["demo", "--policy", str(policy), "--output", str(tmp_path / "r.html")], stdout=out) == 0
    assert "would scale_to_zero" not in out.getvalue()
    assert re.search(r"notify +serving/Deployment/legacy-ranker", out.getvalue())
    assert (tmp_path / "r.html").stat().st_size > 10_000


def test_demo_with_unknown_scenario_is_bad_input(tmp_path: Path) -> None:
    assert main(["demo", "--scenario", "no-such-scenario", "--output", str(tmp_path / "r.html")]) == 2
