"""The run's plan in the HTML report: ``gpu-reaper run --report`` over a real Prometheus and the emulator,
looked at in headless Chromium; and the section's wording for apply, webhooks and stopped runs."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from pathlib import Path

import pytest

from cli.reaper import main
from common.model import FindingKind
from harness.browser import pixels_near, screenshot
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from harness.kube_emulator import EmulatedCluster
from harness.servers import PrometheusServer
from reaper import names
from reaper.cluster import read_snapshot
from reaper.executor import Executor
from reaper.plan_report import PlanView, render_plan_section
from reaper.planner import plan
from reaper.policy import Policy, RunMode
from simulation.fleet import Fleet
from simulation.in_memory_cluster import InMemoryCluster, fleet_objects, manifest

DRY_RUN_BLUE = "#1565c0"
POLICY = """\
window: 6h
pricePerGpuHour: 3
currency: EUR
safety: {consecutiveRuns: 2, maxCordonShare: 0.25}
slack:
  channel: "#gpu-waste"
  routes:
    - {namespaces: [serving], channel: "#serving-oncall"}
rules:
  - name: idle-endpoints
    match: {findings: [idle_endpoint], minConfidence: 0.9}
    action: scale_to_zero
  - name: idle-nodes
    match: {findings: [low_utilization], kinds: [Node]}
    action: cordon
  - name: tell-owners
    match: {findings: [low_utilization, dataloader_starvation]}
    action: notify
"""


def plan_section(html: str) -> str:
    start = html.index('<section class="plan"')
    return html[start : html.index("</section>", start)]


@pytest.mark.prometheus
@pytest.mark.chromium
@pytest.mark.slow
def test_run_writes_its_plan_into_the_html_report(
    standard_fleet: Fleet,
    prometheus_standard: PrometheusServer,
    cluster: EmulatedCluster,
    tmp_path: Path,
) -> None:
    cluster.seed(
        fleet_objects(standard_fleet, workload_annotations={"team-b/mig-idle": {names.EXCLUDE: "true"}})
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    page = tmp_path / "report.html"
    out = io.StringIO()
    argv = [
        "run",
        "--prometheus-url",
        prometheus_standard.url,
        "--policy",
        str(policy),
        "--end",
        "2026-01-05T00:00:00Z",
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--reaper-namespace",
        "gpu-reaper",
        "--report",
        str(page),
    ]
    assert main(argv, stdout=out) == 0, out.getvalue()
    assert cluster.mutations() == []
    summary = out.getvalue().strip().splitlines()[-1]
    counts = dict(re.findall(r"(\w+)=(\S+)", summary))
    assert counts["mode"] == "dry-run"

    html = page.read_text(encoding="utf-8")
    section = plan_section(html)
    assert "What gpu-reaper would do" in section and ">dry-run<" in section
    # One row per action and per skip, under the two header rows.
    assert section.count("<tr>") == 2 + int(counts["planned"]) + int(counts["skipped"])
    # Actions with their reasons and channels; the dry-run replayed the previous hour to confirm them.
    assert re.search(r"would scale to zero</span></td>\s*<td>Deployment serving/legacy-ranker", section)
    # What --apply would write, by object and field, with no -v needed.
    assert "<th>--apply writes</th>" in section
    assert '<code class="write">Deployment serving/legacy-ranker: replicas 2 → 0</code>' in section
    assert "idle endpoint on 2 GPUs (mean" in section and "#serving-oncall" in section
    assert re.search(r"would cordon</span></td>\s*<td>Node gpu-spare", section)
    assert '<code class="write">Node gpu-spare: cordon (unschedulable false → true)</code>' in section
    assert "saved only once the node is drained and removed" in section
    assert "streaks from 1 replayed run every 1h" in section
    # Skips with their reason ids and details.
    assert "<code>excluded_by_annotation</code>" in section and "deployment is annotated" in section
    assert "<code>unknown</code>" in section and "never acted on" in section
    # Costs in the policy's currency, in the plan and in the analyzer's part of the report.
    assert "EUR/day" in section and "<th>cost (EUR)</th>" in html
    assert "Slack not configured" in section

    image = screenshot(page, tmp_path / "report.png", tmp_path / "profile")
    assert float(image[..., :3].std()) > 0.1, "the screenshot is blank"
    assert pixels_near(image, DRY_RUN_BLUE) > 1500  # the mode and the "would …" badges are drawn


LONG_AGO = NOW - timedelta(days=30)


def small_plan(apply: bool, **annotations: str) -> tuple[Policy, PlanView]:
    policy = Policy.model_validate(
        {
            "pricePerGpuHour": 2.0,
            "currency": "CHF",
            "safety": {"consecutiveRuns": 1},
            "slack": {"channel": "#gpu-waste"},
            "rules": [{"name": "idle", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"}],
        }
    )
    objects = [manifest("Namespace", n) for n in ("serving", "gpu-reaper")]
    objects.append(manifest("Deployment", "ranker", "serving", created=LONG_AGO, spec=gpu_spec(2)))
    objects.append(
        manifest("Deployment", "odd", "serving", created=LONG_AGO, spec=gpu_spec(1), annotations=annotations)
    )
    found = report(finding(FindingKind.IDLE_ENDPOINT, name="ranker", gpus=2), finding(name="odd"))
    memory = InMemoryCluster(objects)
    the_plan = plan(found, read_snapshot(memory, "gpu-reaper"), policy, NOW)
    mode = RunMode.APPLY if apply else RunMode.DRY_RUN
    results = Executor(memory, mode=mode, namespace="gpu-reaper", clock=lambda: NOW).execute(the_plan)
    return policy, PlanView(mode=mode, policy=policy, plan=the_plan, results=results, slack="webhook")


def test_apply_says_what_was_done_with_its_currency_and_webhook() -> None:
    _, view = small_plan(apply=True)
    section = str(render_plan_section(view))
    assert "What gpu-reaper did" in section
    assert re.search(r"scaled to zero</span></td>\s*<td>Deployment serving/ranker", section)
    assert "<th>written</th>" in section
    assert '<code class="write">Deployment serving/ranker: replicas 2 → 0</code>' in section
    assert "72 GPU-hours/day reclaimed (≈ 144 CHF/day)" in section.replace('</div><div class="l">', " ")
    assert "#gpu-waste (via the webhook)" in section
    assert "streaks read from the state ConfigMap" in section


def test_what_the_cluster_wrote_is_escaped() -> None:
    _, view = small_plan(apply=False, **{names.EXCLUDE_UNTIL: "<img src=x onerror=alert(1)>"})
    section = str(render_plan_section(view))
    assert "<img" not in section
    assert "&lt;img src=x onerror=alert(1)&gt;" in section  # the unreadable opt-out, shown as text


def test_a_run_that_planned_nothing_says_why() -> None:
    policy, _ = small_plan(apply=False)
    stopped = PlanView(mode=RunMode.DRY_RUN, policy=policy, plan=None, stopped="metrics unavailable: down")
    section = str(render_plan_section(stopped))
    assert "Nothing was planned: metrics unavailable: down" in section
    assert "<table>" not in section


# --- what a reader of the plan trips on (issue 41) --------------------------------------------------------


def notice_plan() -> PlanView:
    """A heads-up about a low-utilization Deployment (12 GPU-hours wasted over 6h judged) and a stop."""
    policy = Policy.model_validate(
        {
            "pricePerGpuHour": 2.0,
            "currency": "CHF",
            "safety": {"consecutiveRuns": 1},
            "slack": {"channel": "#gpu-waste-and-a-long-channel-name"},
            "rules": [
                {"name": "idle", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"},
                {"name": "tell", "match": {"findings": ["low_utilization"]}, "action": "notify"},
            ],
        }
    )
    objects = [manifest("Namespace", n) for n in ("serving", "gpu-reaper")]
    objects += [
        manifest("Deployment", name, "serving", created=LONG_AGO, spec=gpu_spec(1)) for name in ("a", "b")
    ]
    evidence = {"mean_util_percent": 10.0, "max_util_percent": 20.0, "judged_hours": 6.0}
    found = report(
        finding(FindingKind.IDLE_ENDPOINT, name="a"),
        finding(FindingKind.LOW_UTILIZATION, name="b", gpus=2, wasted=12.0, evidence=evidence),
    )
    memory = InMemoryCluster(objects)
    the_plan = plan(found, read_snapshot(memory, "gpu-reaper"), policy, NOW)
    results = Executor(memory, mode=RunMode.DRY_RUN, namespace="gpu-reaper", clock=lambda: NOW).execute(
        the_plan
    )
    return PlanView(mode=RunMode.DRY_RUN, policy=policy, plan=the_plan, results=results)


def rows(section: str) -> dict[str, str]:
    """Each action row's HTML, by the object it names."""
    found = re.findall(r"<tr>\s*<td><span class=\"badge\".*?</tr>", section, re.S)
    return {re.search(r"Deployment serving/\w+", r).group(0): r for r in found}  # type: ignore[union-attr]


def test_a_notice_shows_the_waste_it_tells_of_per_day() -> None:
    """A notice frees nothing, but 12 GPU-hours wasted in 6 hours are 48 a day, 96 CHF at 2 CHF each."""
    section = str(render_plan_section(notice_plan()))
    notice = rows(section)["Deployment serving/b"]
    assert re.search(
        r"48 GPU-h<br>96\.00 CHF\s*<div class=\"sub\">wasted; a notice frees nothing</div>", notice
    )
    stop = rows(section)["Deployment serving/a"]
    assert re.search(r"24 GPU-h<br>48\.00 CHF", stop) and "wasted" not in stop
    assert "–" not in notice.split('<td class="num per-day">')[1]


def test_the_why_is_the_finding_then_the_rule_and_channels_never_break() -> None:
    section = str(render_plan_section(notice_plan()))
    notice = rows(section)["Deployment serving/b"]
    assert re.search(
        r'<td class="why">low utilization on 2 GPUs \(mean 10\.0 %, max 20\.0 % utilization\)'
        r'<div class="sub">rule tell</div>',
        notice,
    ), notice
    assert '<td class="channel">#gpu-waste-and-a-long-channel-name</td>' in notice
    assert re.search(r"\.plan \.channel[^{]*\{ white-space: nowrap; \}", section)


def test_the_plan_writes_times_as_the_rest_of_the_report_does() -> None:
    section = str(render_plan_section(notice_plan()))
    context = re.search(r'<p class="sub">(.*?)</p>', section, re.S).group(1)  # type: ignore[union-attr]
    assert "as of 2026-01-05 00:00:00 UTC" in context
    assert "findings over 2026-01-04 18:00:00 UTC → 2026-01-05 00:00:00 UTC" in context
    assert not re.search(r"\d\dT\d\d:\d\d:\d\dZ", context)
