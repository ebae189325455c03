"""``gpu-reaper demo``: the whole pipeline on the embedded fleet, with no cluster and no Prometheus."""

from __future__ import annotations

import io
import re
from html import unescape
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
    assert re.search(
        r"would scale to zero +Deployment serving/legacy-ranker: replicas 2 → 0; handed to the KEDA HTTP "
        r"add-on: .* +idle endpoint on 2 GPUs",
        text,
    )
    assert re.search(r"would cordon +Node gpu-spare: cordon", text)
    assert re.search(r"unknown +Deployment ml-platform/gap-service +low coverage: ", text)
    # The Slack preview: routed per owner channel, with money and the opt-out.
    assert "── Slack message to #serving-oncall" in text
    assert "── Slack message to #team-b" in text  # routed by the namespace annotation
    assert "Reclaimable 72 GPU-hours/day (≈ 180 USD/day)" in text
    assert "gpu-reaper/exclude=true" in text
    assert text.rstrip().endswith(
        "gpu-reaper: mode=dry-run gpus=36 findings=15 planned=10 applied=0 skipped=5 failed=0 pending_gpus=1"
    )

    report = tmp_path / "gpu-reaper-report.html"
    html = report.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html") and "legacy-ranker" in html


def test_the_default_demo_reclaims_through_notebook_inferenceservice_and_raycluster(tmp_path: Path) -> None:
    out = io.StringIO()
    assert main(["demo", "--output", str(tmp_path / "r.html")], stdout=out) == 0
    text = out.getvalue()
    assert 'scenario "demo"' in text
    # The plan names the root it would stop (after a notice, for the notebook) and the child holding the GPUs.
    assert re.search(
        r"noticed +Notebook research/alice +notice given now; may act after 2026-01-05T02:00:00Z", text
    )
    assert re.search(
        r"would stop +InferenceService serving/summarizer: annotation serving.kserve.io/stop=true +"
        r"idle endpoint .*\[GPUs held by Deployment serving/summarizer-predictor\]",
        text,
    )
    assert re.search(r"heads-up +RayCluster research/ray-tune +low utilization on 4 GPUs", text)
    # Slack says what it would do to each root, in its own terms.
    assert "*Would give notice* `research/alice` (Notebook; GPUs held by StatefulSet research/alice)" in text
    assert "*Would stop* `serving/summarizer` (InferenceService; GPUs held by Deployment" in text
    assert "*Heads-up* `research/ray-tune` (RayCluster)" in text
    assert text.rstrip().endswith(
        "gpu-reaper: mode=dry-run gpus=44 findings=19 planned=13 applied=0 skipped=6 failed=0 pending_gpus=1"
    )


def test_the_demo_shows_a_notice_an_action_for_pending_work_and_a_wake_on_every_surface(
    tmp_path: Path,
) -> None:
    """The demo cluster has a Pod pending for an A100 and a Service in front of legacy-ranker, and
    serves the KEDA HTTP add-on's API: the demo policy's notice, demand and wake rules all decide."""
    out = io.StringIO()
    page = tmp_path / "r.html"
    assert main(["demo", "--output", str(page)], stdout=out) == 0
    text = out.getvalue()
    terminal = text[text.index("Plan (dry-run") : text.index("Slack messages (preview)")]
    slack = text[text.index("Slack messages (preview)") :]
    plan = unescape(page.read_text(encoding="utf-8"))
    plan = plan[plan.index('<section class="plan"') :]
    demand = "Pod research/finetune-0 (1 × nvidia.com/gpu on nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB)"
    handed = "InterceptorRoute legacy-ranker + ScaledObject legacy-ranker → Service legacy-ranker:8000"
    until = "gpu-reaper/exclude-until=2026-01-12T00:00:00Z"
    snooze = f"kubectl annotate --overwrite notebook alice -n research {until}"
    assert f"for pending GPU work (pending_gpus=1): {demand}" in terminal
    assert f"For pending GPU work (`pending_gpus=1`): {demand}" in slack
    assert f"for pending GPU work (pending_gpus=1: {demand})" in plan
    for surface in (terminal, slack, plan):
        assert handed in surface and "the first request through the add-on's interceptor wakes it" in surface
    assert "*Wake on request*" in slack and 'class="sub wake"' in plan
    assert "*Would give notice* `research/alice`" in slack and snooze in slack
    assert "research/alice" in plan and "2026-01-05T02:00:00Z" in plan


def test_each_action_has_one_name_and_its_exact_write_in_terminal_html_and_slack(tmp_path: Path) -> None:
    """Without -v: the plan says what --apply writes, and every surface names each action alike."""
    out = io.StringIO()
    page = tmp_path / "r.html"
    assert main(["demo", "--output", str(page)], stdout=out) == 0
    text = out.getvalue()
    terminal = text[text.index("Plan (dry-run") : text.index("Skipped, with reasons")]
    slack = text[text.index("Slack messages (preview)") :]
    html = page.read_text(encoding="utf-8")
    plan = html[html.index('<section class="plan"') :]
    plan = plan[: plan.index("</section>")]
    for verb, write in (
        ("would stop", "InferenceService serving/summarizer: annotation serving.kserve.io/stop=true"),
        (
            "would scale to zero",
            "Deployment serving/legacy-ranker: replicas 2 → 0; handed to the KEDA HTTP add-on: "
            "InterceptorRoute legacy-ranker and ScaledObject legacy-ranker (Service legacy-ranker port "
            "8000); a request wakes it",
        ),
        ("would scale to zero", "StatefulSet serving/embeddings: replicas 1 → 0"),
        ("would cordon", "Node gpu-spare: cordon (unschedulable false → true)"),
    ):
        assert re.search(rf"{verb} +{re.escape(write)}", terminal), write
        assert f"Writes `{write}`" in slack, write
        assert re.search(
            rf'{verb}</span></td>\s*<td>{re.escape(write.split(":")[0])}.*?<code class="write">'
            rf"{re.escape(write)}</code>",
            plan,
            re.S,
        ), write
        assert f"*{verb[0].upper()}{verb[1:]}* " in slack
    # The policy's action name is the rule's, never a name for what is done.
    for surface in (terminal, slack, plan):
        assert "scale_to_zero" not in surface
        assert "notify" not in surface.replace("heads-up", "")
    # Too little data goes by the finding kind's name, with its reason, in the held-back list too.
    assert re.search(r"unknown +Deployment team-a/fresh-api +too young: 1\.5 h judged; never acted on", text)
    assert "<code>unknown</code>" in plan and "too young: 1.5 h judged; never acted on" in plan
    assert "*Findings* 19 (5 unknown: too little data to judge, never acted on)" in slack


def test_demo_output_path_and_policy(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "rules:\n  - name: tell\n    match: {findings: [idle_endpoint]}\n    action: notify\n",
        encoding="utf-8",
    )
    out = io.StringIO()
    assert main(["demo", "--policy", str(policy), "--output", str(tmp_path / "r.html")], stdout=out) == 0
    assert "would scale to zero" not in out.getvalue()
    assert re.search(r"heads-up +Deployment serving/legacy-ranker", out.getvalue())
    assert (tmp_path / "r.html").stat().st_size > 10_000


def test_demo_with_unknown_scenario_is_bad_input(tmp_path: Path) -> None:
    assert main(["demo", "--scenario", "no-such-scenario", "--output", str(tmp_path / "r.html")]) == 2


def test_the_demo_shows_a_smaller_share_that_fits_and_no_slice_advice_beside_none(tmp_path: Path) -> None:
    """Right-sizing, a headline of the README, shows in the demo: the reranker fits MIG 2g.20gb. Where
    no smaller share fits, nothing beside it suggests one (issue 41)."""
    out = io.StringIO()
    page = tmp_path / "r.html"
    assert main(["demo", "--output", str(page)], stdout=out) == 0
    text = out.getvalue()
    sized = "Right-size to MIG 2g.20gb: nvidia.com/gpu: 1 → nvidia.com/mig-2g.20gb: 1"
    terminal = text[text.index("Right-sizing (") : text.index("Plan (dry-run")]
    assert re.search(rf"serving/Deployment/reranker +{re.escape(sized)}", terminal)
    assert "No smaller GPU share" in terminal  # batch-scorer's 55.8 GiB fit no smaller profile
    slack = text[text.index("Slack messages (preview)") :]
    assert sized in slack
    html = page.read_text(encoding="utf-8")
    assert sized in html
    # No generic advice to use a smaller slice next to the rule's answer (nor for kinds it does not
    # size), in any surface: a low-utilization recommendation says "averages".
    text = re.sub(r"data:image/png;base64,[^\"]+", "", slack + html)  # the plots' bytes are no text
    advice = re.findall(r"(?<![A-Za-z])[A-Z][a-zA-Z]+ [a-z0-9-]+/[a-z0-9-]+ averages [^_<]*", text)
    assert len(advice) >= 8  # six workloads, in Slack (where routed) and in the HTML report
    assert not [a for a in advice if "MIG slice" in a or "time-slic" in a], advice
