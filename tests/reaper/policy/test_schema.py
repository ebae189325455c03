"""The policy's shape: safe defaults, immutability, cross-field rules, label selector semantics."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from common.errors import PolicyError
from reaper.policy import Action, LabelSelector, parse_policy

DOCS = Path(__file__).resolve().parents[3] / "docs"
MINIMAL = "rules:\n  - name: idle\n    match: {findings: [idle_endpoint]}\n    action: scale_to_zero\n"


def one_rule(match: str, action: str, name: str = "idle") -> str:
    return f"rules:\n  - name: {name}\n    match: {match}\n    action: {action}\n"


def test_minimal_policy_gets_safe_defaults() -> None:
    p = parse_policy(MINIMAL)
    assert p.mode == "dry-run"
    assert p.safety.consecutive_runs == 2 and p.safety.max_actions_per_run == 10
    assert p.grace.after_creation == timedelta(hours=1)
    assert p.protected_namespaces == ("kube-system", "gpu-reaper")
    assert p.rules[0].kinds == ("Deployment", "StatefulSet")  # scale_to_zero's default kinds
    assert p.rules[0].action is Action.SCALE_TO_ZERO


def test_policy_is_immutable() -> None:
    p = parse_policy(MINIMAL)
    with pytest.raises(ValueError, match="frozen"):
        p.mode = "apply"  # type: ignore[misc]


def test_price_is_set_once() -> None:
    text = MINIMAL + "pricePerGpuHour: 2\ndetection: {pricePerGpuHour: 3}\n"
    with pytest.raises(PolicyError, match="set the price once"):
        parse_policy(text, "p.yaml")
    p = parse_policy(MINIMAL + "detection: {pricePerGpuHour: 3}\n")
    assert p.price == 3 and p.thresholds.price_per_gpu_hour == 3
    p = parse_policy(MINIMAL + "pricePerGpuHour: 2\n")
    assert p.thresholds.price_per_gpu_hour == 2


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param({"matchLabels": {"app": "a"}}, {"app": "a", "x": "y"}, True, id="match-labels"),
        pytest.param({"matchLabels": {"app": "a"}}, {"app": "b"}, False, id="match-labels-differ"),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "In", "values": ["1", "2"]}]},
            {"t": "2"},
            True,
            id="in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["1"]}]},
            {},
            True,
            id="notin-absent",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"t": ""}, True, id="exists"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]},
            {"t": "1"},
            False,
            id="does-not-exist",
        ),
    ],
)
def test_label_selector_semantics(selector: dict[str, object], labels: dict[str, str], matches: bool) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is matches
