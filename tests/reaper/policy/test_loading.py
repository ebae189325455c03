"""Reading policy files: what validates, what does not, and every error names file, line, field, problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import PolicyError
from reaper.policy import Policy, load_policy, parse_policy

DOCS = Path(__file__).resolve().parents[3] / "docs"
MINIMAL = "rules:\n  - name: idle\n    match: {findings: [idle_endpoint]}\n    action: scale_to_zero\n"


def one_rule(match: str, action: str, name: str = "idle") -> str:
    return f"rules:\n  - name: {name}\n    match: {match}\n    action: {action}\n"


def test_documented_example_validates_and_is_the_demo_policy() -> None:
    p = load_policy(DOCS / "policy.example.yaml")
    assert [r.name for r in p.rules] == [
        "research-notice-first",
        "wake-inference-on-request",
        "embeddings-when-wanted",
        "idle-endpoints",
        "idle-nodes",
        "tell-owners",
    ]
    assert [(r.notice is not None, r.wake, r.when) for r in p.rules[:3]] == [
        (True, None, None),
        (False, "keda-http", None),
        (False, None, "demand"),
    ]
    demo = Path(__file__).resolve().parents[3] / "simulation" / "demo-policy.yaml"
    assert demo.read_text(encoding="utf-8") == (DOCS / "policy.example.yaml").read_text(encoding="utf-8")


BROKEN = [
    pytest.param("", "the file is empty", id="empty-file"),
    pytest.param("# only a comment\n", "the file is empty", id="only-comments"),
    pytest.param("rules: [\n", "not valid YAML: line 2", id="not-yaml"),
    pytest.param("- a\n- b\n", "top level must be a mapping", id="list-at-top-level"),
    pytest.param("mode: apply\n", "line 1: rules: required field is missing", id="no-rules"),
    pytest.param(
        MINIMAL + "mode: yolo\n", "line 5: mode: Input should be 'dry-run' or 'apply'", id="bad-mode"
    ),
    pytest.param(MINIMAL + "window: 6\n", "window: duration '6' has no unit", id="duration-without-unit"),
    pytest.param(MINIMAL + "window: 0s\n", "window: must be longer than 0", id="zero-window"),
    pytest.param(
        MINIMAL + "grace: {afterCreation: -1h}\n",
        "grace.afterCreation: duration '-1h' is negative",
        id="negative-duration",
    ),
    pytest.param(
        MINIMAL + "grace: {afterRestore: soon}\n",
        "grace.afterRestore: invalid duration 'soon'",
        id="garbage-duration",
    ),
    pytest.param(
        MINIMAL + "safety: {maxActionsPerRun: ten}\n",
        "safety.maxActionsPerRun: Input should be a valid integer",
        id="wrong-type",
    ),
    pytest.param(
        MINIMAL + "safety: {maxCordonShare: 1.5}\n",
        "safety.maxCordonShare: Input should be less than or equal to 1",
        id="share-above-one",
    ),
    pytest.param(
        MINIMAL + "safety: {consecutiveRuns: 0}\n",
        "safety.consecutiveRuns: Input should be greater than or equal to 1",
        id="zero-confirmations",
    ),
    pytest.param(
        MINIMAL + "maxActionsPerRun: 3\n",
        "maxActionsPerRun: unknown field; it belongs at safety.maxActionsPerRun",
        id="misplaced-field",
    ),
    pytest.param(
        MINIMAL + "safety: {maxActionPerRun: 3}\n",
        "safety.maxActionPerRun: unknown field; did you mean 'maxActionsPerRun'?",
        id="misspelt-field",
    ),
    pytest.param(
        MINIMAL + "exclude: {namespaces: ['team-[a']}\n",
        "exclude.namespaces[0]: glob 'team-[a' has an unclosed '['",
        id="unclosed-glob",
    ),
    pytest.param(
        MINIMAL + "exclude: {namespaces: ['Team-A']}\n",
        "can never match: Kubernetes names are lowercase",
        id="uppercase-glob",
    ),
    pytest.param(
        MINIMAL + "exclude: {namespaces: ['team a']}\n",
        "characters no Kubernetes name contains",
        id="space-in-glob",
    ),
    pytest.param(
        MINIMAL + "exclude: {workloads: ['api']}\n",
        "exclude.workloads[0]: workload glob 'api' must be NAMESPACE/NAME",
        id="workload-glob-without-namespace",
    ),
    pytest.param(
        MINIMAL + "exclude: {labelSelector: {}}\n",
        "exclude.labelSelector: an empty selector matches everything",
        id="empty-selector",
    ),
    pytest.param(
        MINIMAL
        + "exclude: {labelSelector: {matchExpressions: [{key: app, operator: Exists, values: [a]}]}}\n",
        "operator Exists takes no values",
        id="selector-values-with-exists",
    ),
    pytest.param(
        MINIMAL + "exclude: {labelSelector: {matchLabels: {'bad key!': x}}}\n",
        "label key 'bad key!'",
        id="bad-label-key",
    ),
    pytest.param(
        MINIMAL + "slack: {channel: general}\n",
        "slack.channel: Slack channel 'general' must be '#name'",
        id="bad-channel",
    ),
    pytest.param(
        MINIMAL + "reaperNamespace: Gpu_Reaper\n",
        "reaperNamespace: 'Gpu_Reaper' is not a valid namespace name",
        id="bad-namespace",
    ),
    pytest.param(MINIMAL + "currency: dollars\n", "currency: String should match pattern", id="bad-currency"),
    pytest.param(
        MINIMAL + 'cluster: " "\n', "line 5: cluster: a cluster name cannot be empty", id="blank-cluster"
    ),
    pytest.param(
        MINIMAL + "detection: {idlePercent: 200}\n",
        "detection.idlePercent: Input should be less than or equal to 100",
        id="bad-detection-threshold",
    ),
    pytest.param(
        one_rule("{findings: [unknown]}", "scale_to_zero"),
        "line 3: rules[0].match.findings[0]: Input should be 'idle_endpoint', 'low_utilization', "
        "'dataloader_starvation' or 'stalled_job' (got 'unknown')",
        id="acting-on-unknown",
    ),
    pytest.param(
        one_rule("{findings: [idle_endpoint]}", "delete"),
        "line 4: rules[0].action: Input should be 'notify', 'scale_to_zero' or 'cordon' (got 'delete')",
        id="unknown-action",
    ),
    pytest.param(
        one_rule("{findings: [idle_endpoint], kinds: [DaemonSet, Job]}", "scale_to_zero"),
        "scale_to_zero applies to Deployment, StatefulSet, ReplicaSet, Rollout, RayCluster and Job only, "
        "not DaemonSet",
        id="scale-a-daemonset",
    ),
    pytest.param(
        one_rule("{findings: [low_utilization], kinds: [Deployment]}", "cordon"),
        "action cordon applies to kind Node only",
        id="cordon-a-deployment",
    ),
    pytest.param(
        one_rule("{findings: [low_utilization], kinds: [Deplyment]}", "notify"),
        "rules[0].match.kinds[0]: Input should be 'Deployment'",
        id="misspelt-kind",
    ),
    pytest.param(
        MINIMAL + MINIMAL.replace("rules:\n", ""), "rule name 'idle' is used twice", id="duplicate-rule-names"
    ),
    pytest.param(
        MINIMAL + "mode: apply\nmode: dry-run\n", "line 6: mode: key given twice", id="duplicate-key"
    ),
    pytest.param(
        one_rule("{findings: [idle_endpoint]}", "notify", name="Idle Rule"),
        "rules[0].name: String should match pattern",
        id="bad-rule-name",
    ),
]


@pytest.mark.parametrize(("text", "message"), BROKEN)
def test_broken_policy_error_names_file_field_and_problem(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "policy.yaml")
    assert message in str(caught.value)
    assert all(line.startswith("policy.yaml: ") for line in str(caught.value).splitlines())


def test_all_problems_are_reported_at_once_in_file_order() -> None:
    text = MINIMAL + "safety:\n  maxCordonShare: 2\ngrace:\n  afterCreation: -1m\n"
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "p.yaml")
    lines = str(caught.value).splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["line 6", "line 8"]


def test_unreadable_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read the policy file"):
        load_policy(tmp_path / "missing.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00rules")
    with pytest.raises(PolicyError, match="not a text file"):
        load_policy(binary)


def test_policy_round_trips_through_its_own_serialisation() -> None:
    p = load_policy(DOCS / "policy.example.yaml")
    again = Policy.model_validate(p.model_dump(by_alias=True, mode="json"))
    assert again == p
