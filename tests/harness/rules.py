"""The alert and recording rules of alerts/ and their promtool unit tests, as data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ALERTS_DIR = Path(__file__).resolve().parents[2] / "alerts"
RULE_FILES = sorted(ALERTS_DIR.glob("*.rules.yaml"))
# The alert rules and the analyzer's optional recording rules: every rule file the project ships.
ALL_RULE_FILES = sorted(ALERTS_DIR.glob("*.yaml"))
UNIT_TEST_FILES = sorted((ALERTS_DIR / "tests").glob("*.test.yaml"))
# The external label that tells clusters apart where one query view (Thanos Query, Mimir,
# VictoriaMetrics) holds many: every aggregation and join of the rules keeps it.
CLUSTER_LABEL = "cluster"


@dataclass(frozen=True)
class AlertRule:
    file: str  # file name
    group: str
    alert: str
    expr: str
    raw: dict[str, Any]


@dataclass(frozen=True)
class Rule:
    """Any rule of alerts/: an alert (``name`` its alert name) or a recording rule (the series it records)."""

    file: str  # file name
    group: str
    name: str
    expr: str


def load_rules() -> list[AlertRule]:
    out = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    out.append(AlertRule(path.name, group["name"], rule["alert"], rule["expr"], rule))
    return out


def load_every_rule() -> list[Rule]:
    """Every alert and recording rule of every rule file in alerts/."""
    out = []
    for path in ALL_RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                name = rule.get("alert") or rule["record"]
                out.append(Rule(path.name, group["name"], name, rule["expr"]))
    return out


def rules_without_for(workdir: Path, files: list[Path] = RULE_FILES) -> Path:
    """A copy of each rule file whose alerts fire as soon as their expression holds (every
    expression as in alerts/); returns the directory holding the copies."""
    out = workdir / "rules"
    out.mkdir(parents=True)
    for path in files:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in doc["groups"]:
            for rule in group["rules"]:
                rule.pop("for", None)
        (out / path.name).write_text(
            yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8"
        )
    return out


def unit_test_cases() -> list[dict[str, Any]]:
    """Every alert_rule_test of every promtool unit-test file."""
    cases = []
    for path in UNIT_TEST_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            cases.extend(group.get("alert_rule_test", []))
    return cases
