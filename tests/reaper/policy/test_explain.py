"""A policy explained in plain language, and its published JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

from reaper.policy import Policy, explain, json_schema, load_policy

DOCS = Path(__file__).resolve().parents[3] / "docs"
MINIMAL = "rules:\n  - name: idle\n    match: {findings: [idle_endpoint]}\n    action: scale_to_zero\n"


def one_rule(match: str, action: str, name: str = "idle") -> str:
    return f"rules:\n  - name: {name}\n    match: {match}\n    action: {action}\n"


def test_committed_json_schema_matches_the_model() -> None:
    committed = json.loads((DOCS / "policy.schema.json").read_text(encoding="utf-8"))
    assert committed == json_schema(), (
        "docs/policy.schema.json is generated from the policy model (reaper/policy) and no longer matches "
        "it: regenerate it with `gpu-reaper policy schema > docs/policy.schema.json` and commit it with "
        "the model change (docs/policy.md documents the keys)"
    )


def test_json_schema_describes_durations_and_actions() -> None:
    schema = json_schema()
    assert schema["$schema"].endswith("2020-12/schema")
    assert set(schema["required"]) == {"rules"}
    grace = schema["$defs"]["Grace"]["properties"]["afterCreation"]
    assert grace["type"] == "string" and "pattern" in grace
    assert schema["$defs"]["Action"]["enum"] == ["notify", "scale_to_zero", "cordon"]


def test_explain_says_what_the_policy_does() -> None:
    text = explain(load_policy(DOCS / "policy.example.yaml"))
    assert "4. idle-endpoints: idle_endpoint on Deployment, StatefulSet" in text
    # The three keys of the first rules, each explained in a line of its own.
    assert "research-notice-first: idle_endpoint" in text and "notice: 2h first:" in text
    assert "wake: keda-http: scaled to 0 and handed to the KEDA HTTP add-on" in text
    assert "when: demand: acts only while pods wait unschedulable" in text
    assert "→ scale_to_zero after 2 consecutive runs" in text
    assert "never touched: namespaces kube-system, gpu-reaper (always)" in text
    assert "HPA/KEDA-managed workloads: never scaled" in text
    assert "GPU nodes: those labelled nvidia.com/gpu.present=true (where none is" in text


def test_explain_says_which_nodes_a_run_lists_without_a_selector() -> None:
    rule = {"name": "idle", "match": {"findings": ["idle_endpoint"]}, "action": "scale_to_zero"}
    policy = Policy.model_validate({"gpuNodeSelector": None, "rules": [rule]})
    assert "GPU nodes: every node reporting GPUs" in explain(policy)


def test_explain_lists_prices_per_gpu_model(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    prices = 'prices:\n  "NVIDIA H100 80GB HBM3": 4.5\n  "NVIDIA L4": 0.6\n'
    path.write_text("pricePerGpuHour: 2.0\ncurrency: EUR\n" + prices + MINIMAL, encoding="utf-8")
    text = explain(load_policy(path))
    assert "price: 2 EUR per GPU-hour" in text
    assert "NVIDIA H100 80GB HBM3 4.5; NVIDIA L4 0.6; every other model 2" in text
