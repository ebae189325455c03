"""The one policy-file loader: both tools read the same file and report its problems the same way."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from common.errors import BadInputError, PolicyError
from common.policy_file import parse_policy_document
from common.thresholds import Thresholds, load_thresholds
from reaper.policy import load_policy

POLICY = """\
rules:
  - name: idle
    match: {findings: [idle_endpoint]}
    action: scale_to_zero
detection:
  idlePercent: 120
"""


def test_the_analyzer_and_the_reaper_report_a_detection_error_identically(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    with pytest.raises(PolicyError) as analyzer:
        load_thresholds(path)
    with pytest.raises(PolicyError) as reaper:
        load_policy(path)
    assert str(analyzer.value) == str(reaper.value)
    assert str(analyzer.value).startswith(f"{path}: line 6: detection.idlePercent: ")
    assert isinstance(analyzer.value, BadInputError)  # exit code 2 on both command lines


def test_a_missing_section_is_its_defaults() -> None:
    document = parse_policy_document("rules: []\n", "p.yaml")
    assert document.validate(Thresholds, section="detection") == Thresholds()
    assert parse_policy_document("# nothing yet\n").data is None


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    depth: int = 0


class _Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inner: _Inner = _Inner()
    name: str = ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "inner:\n  depht: 1\n", "line 2: inner.depht: unknown field; did you mean 'depth'?", id="typo"
        ),
        pytest.param("depth: 1\n", "line 1: depth: unknown field; it belongs at inner.depth", id="misplaced"),
        pytest.param("inner: [1]\n", "line 1: inner: must be a mapping, got a list", id="not-a-mapping"),
        pytest.param("name: a\nname: b\n", "line 2: name: key given twice", id="duplicate-key"),
        pytest.param("inner: {depth: [\n", "not valid YAML: line 2", id="broken-yaml"),
        pytest.param("- 1\n", "the top level must be a mapping", id="list-at-top"),
    ],
)
def test_errors_are_located_to_file_line_and_field(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_document(text, "any.yaml").validate(_Outer)
    assert str(caught.value).startswith("any.yaml: ")
    assert message in str(caught.value)
