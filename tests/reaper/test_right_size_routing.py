"""Right-size recommendations in the reaper: a notify rule routes them, nothing acts on them.

A rule ``recommendation: right_size`` matches only the low-utilization findings that carry a smaller
share to move to; the plan notifies, writes nothing; the Slack message carries the same sentence the
reports print, with the saving in the policy's currency. A rule that would act on one is refused.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from common.evidence import RightSizing
from common.model import FindingKind
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from reaper.cluster import read_snapshot
from reaper.executor import Executor
from reaper.messages import build_messages, preview
from reaper.outcomes import Outcome
from reaper.planner import plan
from reaper.policy import Action, Policy, RunMode
from simulation.in_memory_cluster import InMemoryCluster, manifest

SIZED = RightSizing(
    share="mig",
    profile="1g.10gb",
    resource="nvidia.com/mig-1g.10gb",
    replaces="nvidia.com/gpu",
    gpu_model="NVIDIA H100 80GB HBM3",
    memory_peak_mib=7000.0,
    memory_quantile=0.99,
    memory_headroom=0.2,
    share_of_gpu=0.1429,
    gpu_equivalents_saved=0.857,
    saved_gpu_hours=5.14,
    saved_cost=10.28,
    reason="1g.10gb is the smallest H100 80GB profile holding 8,400 MiB",
)
NONE_FITS = RightSizing(
    share=None, memory_quantile=0.99, memory_headroom=0.2, reason="its memory needs the whole H100 80GB GPU"
)
POLICY: dict[str, Any] = {
    "mode": "apply",
    "pricePerGpuHour": 2.0,
    "currency": "EUR",
    "safety": {"consecutiveRuns": 1},
    "slack": {"channel": "#gpu-waste"},
    "rules": [
        {
            "name": "right-size",
            "match": {"findings": ["low_utilization"], "recommendation": "right_size"},
            "action": "notify",
            "channel": "#gpu-capacity",
        },
    ],
}


def _finding(name: str, sized: RightSizing | None) -> Any:
    evidence: dict[str, Any] = {"mean_util_percent": 5.0, "max_util_percent": 9.0}
    if sized is not None:
        evidence["right_size"] = sized.model_dump(exclude_unset=True)
    return finding(FindingKind.LOW_UTILIZATION, name=name, evidence=evidence)


def test_a_notify_rule_routes_only_findings_with_a_smaller_share() -> None:
    objects = [manifest("Namespace", n) for n in ("serving", "gpu-reaper")]
    for name in ("ranker", "big", "plain"):
        objects.append(
            manifest("Deployment", name, "serving", created=NOW - timedelta(days=30), spec=gpu_spec(2))
        )
    memory = InMemoryCluster(objects)
    findings = report(_finding("ranker", SIZED), _finding("big", NONE_FITS), _finding("plain", None))
    policy = Policy.model_validate(POLICY)

    the_plan = plan(findings, read_snapshot(memory, "gpu-reaper"), policy, NOW)

    assert [(a.target.name, a.action) for a in the_plan.actions] == [("ranker", Action.NOTIFY)]
    assert {s.target.name for s in the_plan.skips} == {"big", "plain"}
    results = Executor(memory, mode=RunMode.APPLY, namespace="gpu-reaper", clock=lambda: NOW).execute(
        the_plan
    )
    assert [r.outcome for r in results] == [Outcome.APPLIED]  # a notification: nothing is written
    assert all(not r.write for r in results)
    assert memory.get("Deployment", "serving", "ranker")["spec"]["replicas"] == 2

    (message,) = build_messages(the_plan, results, policy, mode=RunMode.APPLY)
    assert message.channel == "#gpu-capacity"
    text = preview([message])
    assert (
        "Right-size to MIG 1g.10gb: nvidia.com/gpu: 1 → nvidia.com/mig-1g.10gb: 1 in its pods' resources "
        "— frees 0.86 GPU-equivalents, 5.1 GPU-hours (10.28 EUR) over the window." in text
    )


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        (
            {
                "match": {"findings": ["low_utilization"], "recommendation": "right_size"},
                "action": "scale_to_zero",
            },
            "must use action notify",
        ),
        (
            {"match": {"findings": ["idle_endpoint"], "recommendation": "right_size"}, "action": "notify"},
            "low_utilization findings only",
        ),
        (
            {"match": {"findings": ["low_utilization"], "recommendation": "resize"}, "action": "notify"},
            "right_size",
        ),
    ],
)
def test_a_rule_that_would_act_on_a_recommendation_is_refused(rule: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        Policy.model_validate(POLICY | {"rules": [{"name": "r", **rule}]})
