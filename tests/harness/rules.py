"""The alert rules of alerts/ and their promtool unit tests, as data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ALERTS_DIR = Path(__file__).resolve().parents[2] / "alerts"
RULE_FILES = sorted(ALERTS_DIR.glob("*.rules.yaml"))
UNIT_TEST_FILES = sorted((ALERTS_DIR / "tests").glob("*.test.yaml"))


@dataclass(frozen=True)
class AlertRule:
    file: str  # file name
    group: str
    alert: str
    expr: str
    raw: dict[str, Any]


def load_rules() -> list[AlertRule]:
    out = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    out.append(AlertRule(path.name, group["name"], rule["alert"], rule["expr"], rule))
    return out


def unit_test_cases() -> list[dict[str, Any]]:
    """Every alert_rule_test of every promtool unit-test file."""
    cases = []
    for path in UNIT_TEST_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            cases.extend(group.get("alert_rule_test", []))
    return cases
