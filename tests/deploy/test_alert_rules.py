"""The alert rules load in Prometheus, pass their promtool unit tests, and tell a person what to do.

Every alert carries a severity, a summary and a description, has a section in docs/runbooks.md,
and is unit-tested both firing and staying quiet (alerts/tests/*.test.yaml).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import promql_parser
import pytest

from harness.binaries import require_binary
from harness.rules import ALERTS_DIR, RULE_FILES, UNIT_TEST_FILES, AlertRule, load_rules, unit_test_cases

RULES = load_rules()
RUNBOOKS = ALERTS_DIR.parent / "docs" / "runbooks.md"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_binary("promtool"), *args], capture_output=True, text=True, check=False, cwd=ALERTS_DIR
    )


def test_every_rule_file_passes_promtool_check_rules() -> None:
    result = _promtool("check", "rules", *(p.name for p in RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", UNIT_TEST_FILES, ids=lambda p: p.stem)
def test_promtool_unit_tests_pass(path: Path) -> None:
    result = _promtool("test", "rules", str(path.relative_to(ALERTS_DIR)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_file_has_a_unit_test_file() -> None:
    tested = {p.name.removesuffix(".test.yaml") for p in UNIT_TEST_FILES}
    assert tested == {p.name.removesuffix(".rules.yaml") for p in RULE_FILES}


def test_alert_names_are_unique() -> None:
    names = [r.alert for r in RULES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.alert)
def test_alert_expression_parses(rule: AlertRule) -> None:
    promql_parser.parse(rule.expr)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.alert)
def test_alert_says_how_bad_what_and_why(rule: AlertRule) -> None:
    assert rule.raw["labels"]["severity"] in ("critical", "warning", "info")
    annotations = rule.raw["annotations"]
    assert annotations["summary"].strip()
    assert len(annotations["description"]) > len(annotations["summary"])


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.alert)
def test_alert_has_a_runbook_section(rule: AlertRule) -> None:
    headings = re.findall(r"^#+\s+(\S+)\s*$", RUNBOOKS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert rule.alert in headings, f"docs/runbooks.md has no '## {rule.alert}' section"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.alert)
def test_alert_is_unit_tested_firing_and_quiet(rule: AlertRule) -> None:
    cases = [c for c in unit_test_cases() if c["alertname"] == rule.alert]
    assert any(c.get("exp_alerts") for c in cases), f"no promtool case where {rule.alert} fires"
    assert any(not c.get("exp_alerts") for c in cases), f"no promtool case where {rule.alert} stays quiet"
