"""The findings contract: immutable, timezone-safe, and a stable JSON round trip."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pydantic
import pytest

from common.model import (
    DataloaderStarvationEvidence,
    Finding,
    FindingKind,
    FindingsReport,
    IdleEndpointEvidence,
    LowUtilizationEvidence,
    TimeWindow,
    UnknownEvidence,
    WorkloadRef,
)
from common.timeutil import format_duration, parse_duration, parse_time

FINDINGS = Path(__file__).parent.parent / "fixtures" / "findings"
END = datetime(2026, 1, 5, tzinfo=UTC)
WINDOW = TimeWindow.ending(END, timedelta(hours=6))


def _finding(**overrides: object) -> Finding:
    base: dict[str, object] = {
        "kind": FindingKind.IDLE_ENDPOINT,
        "workload": WorkloadRef(kind="Deployment", name="legacy-ranker", namespace="serving"),
        "pods": ("legacy-ranker-abc-1", "legacy-ranker-abc-2"),
        "nodes": ("gpu-a",),
        "gpus": ("GPU-1", "GPU-2"),
        "window": WINDOW,
        "evidence": {"max_util_percent": 1.0, "coverage": 0.99, "source": "DCGM_FI_DEV_GPU_UTIL"},
        "confidence": 0.95,
        "wasted_gpu_hours": 12.0,
        "estimated_cost": 30.0,
        "recommendation": "scale to zero",
    }
    return Finding.model_validate(base | overrides)


def test_json_round_trip_keeps_every_field() -> None:
    report = FindingsReport(
        window=WINDOW, generated_at=END, source="http://prom:9090", findings=(_finding(),)
    )
    again = FindingsReport.from_json(report.to_json())
    assert again == report
    assert again.findings[0].gpu_count == 2


def test_json_shape_is_the_documented_contract() -> None:
    doc = _finding().to_dict()
    assert list(doc) == [
        "kind",
        "namespace",
        "workload",
        "pods",
        "nodes",
        "gpus",
        "gpu_count",
        "window",
        "evidence",
        "confidence",
        "wasted_gpu_hours",
        "estimated_cost",
        "recommendation",
    ]
    assert doc["namespace"] == "serving"
    assert doc["workload"] == {"kind": "Deployment", "name": "legacy-ranker"}
    assert doc["window"] == {"start": "2026-01-04T18:00:00Z", "end": "2026-01-05T00:00:00Z"}


def test_node_findings_have_an_empty_namespace() -> None:
    node = _finding(kind=FindingKind.LOW_UTILIZATION, workload=WorkloadRef(kind="Node", name="gpu-spare"))
    assert Finding.from_dict(node.to_dict()).workload.key() == "/Node/gpu-spare"


def test_findings_are_immutable() -> None:
    with pytest.raises(pydantic.ValidationError):
        _finding().confidence = 0.1  # type: ignore[misc]


def test_unknown_is_never_actionable() -> None:
    assert not FindingKind.UNKNOWN.actionable
    assert all(k.actionable for k in FindingKind if k is not FindingKind.UNKNOWN)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        pytest.param(lambda d: d.update(kind="sleepy"), "kind", id="unknown-kind"),
        pytest.param(lambda d: d.update(confidence=1.5), "confidence", id="confidence-above-one"),
        pytest.param(
            lambda d: d["window"].update(start="2026-01-04T18:00:00"), "window.start", id="naive-timestamp"
        ),
        pytest.param(lambda d: d.update(gpu_count=3), "gpu_count", id="gpu-count-disagrees"),
        pytest.param(lambda d: d.update(colour="red"), "colour", id="unknown-field"),
    ],
)
def test_bad_finding_json_names_the_field(mutate: object, field: str) -> None:
    doc = _finding().to_dict()
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(ValueError, match=field.split(".")[-1]):
        Finding.from_dict(doc)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("standard_fleet", id="default-thresholds"),
        pytest.param("standard_fleet_priced_request_rate", id="request-rate-and-uneven-quantile-names"),
    ],
)
def test_findings_written_before_typed_evidence_load_and_write_back_byte_for_byte(name: str) -> None:
    # Written by the analyzer when evidence was a free dict: the contract says the JSON never changes.
    text = (FINDINGS / f"{name}.json").read_text()
    report = FindingsReport.from_json(text)
    # Version 1 documents are read; they are written back as version 2 (which added a kind only).
    assert '"schema_version": 1,' in text
    assert report.to_json() == text.rstrip("\n").replace('"schema_version": 1,', '"schema_version": 2,', 1)


def test_evidence_is_typed_by_the_finding_kind() -> None:
    report = FindingsReport.from_json((FINDINGS / "standard_fleet.json").read_text())
    by_kind = {f.kind: f.evidence for f in report.findings}
    assert set(by_kind) == set(FindingKind) - {FindingKind.STALLED_JOB}  # written before that kind
    assert isinstance(by_kind[FindingKind.IDLE_ENDPOINT], IdleEndpointEvidence)
    assert isinstance(by_kind[FindingKind.LOW_UTILIZATION], LowUtilizationEvidence)
    assert isinstance(by_kind[FindingKind.UNKNOWN], UnknownEvidence)
    starving = by_kind[FindingKind.DATALOADER_STARVATION]
    assert isinstance(starving, DataloaderStarvationEvidence)
    assert starving.pattern in ("bimodal", "cpu_bound")
    idle = by_kind[FindingKind.IDLE_ENDPOINT]
    assert isinstance(idle.judged_from, datetime) and idle.judged_from.tzinfo is UTC
    priced = FindingsReport.from_json((FINDINGS / "standard_fleet_priced_request_rate.json").read_text())
    for f in priced.findings:
        if isinstance(f.evidence, LowUtilizationEvidence) and f.evidence.request_rate_query:
            low, high = f.evidence.low_quantile, f.evidence.high_quantile
            assert low is not None and high is not None
            assert (low.level, high.level) == pytest.approx((0.075, 0.925))
            assert low.percent <= high.percent
            assert f.evidence.request_rate is None  # the query ran and returned no data


def test_evidence_of_another_kind_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="idle_endpoint findings carry IdleEndpointEvidence"):
        _finding(evidence=UnknownEvidence(coverage=0.1))


def test_bad_evidence_value_names_the_key() -> None:
    doc = _finding().to_dict()
    doc["evidence"] = {"mean_util_percent": "lots"}
    with pytest.raises(pydantic.ValidationError, match="mean_util_percent"):
        Finding.from_dict(doc)


def test_evidence_keys_are_written_only_when_set() -> None:
    # null means "asked, no data" (a request-rate query that returned nothing); absent means "not asked".
    asked = _finding(evidence={"request_rate": None, "max_util_percent": 0.5}).to_dict()["evidence"]
    assert asked == {"max_util_percent": 0.5, "request_rate": None}
    assert json.loads(json.dumps(_finding(evidence={}).to_dict()))["evidence"] == {}


def test_window_must_be_ordered() -> None:
    with pytest.raises(pydantic.ValidationError, match="not after start"):
        TimeWindow(start=END, end=END - timedelta(seconds=1))


def test_timestamps_are_normalised_to_utc() -> None:
    cet = timezone(timedelta(hours=1))
    window = TimeWindow(start=datetime(2026, 1, 5, 1, tzinfo=cet), end=datetime(2026, 1, 5, 2, tzinfo=cet))
    assert window.start == datetime(2026, 1, 5, 0, tzinfo=UTC)
    assert window.start.tzinfo is UTC


def test_unsupported_schema_version_is_refused() -> None:
    with pytest.raises(ValueError, match="schema_version"):
        FindingsReport.from_json('{"schema_version": 99}')


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("6h", 21600), ("1h30m", 5400), ("7d", 604800), ("500ms", 0.5)],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "6", "h", "6 hours", "-5m", "0s", "5m garbage"])
def test_bad_durations_name_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_duration_formatting_round_trips() -> None:
    for text in ("6h", "1h30m", "2d", "45s"):
        assert format_duration(parse_duration(text)) == text


def test_times_parse_rfc3339_and_unix_seconds() -> None:
    assert parse_time("2026-01-05T00:00:00Z") == END
    assert parse_time(str(END.timestamp())) == END
    with pytest.raises(ValueError, match="timezone"):
        parse_time("2026-01-05T00:00:00")
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_time("yesterday")


def test_the_owner_is_written_only_where_the_metrics_name_one() -> None:
    owner = WorkloadRef(kind="InferenceService", name="legacy", namespace="serving")
    doc = _finding(owner=owner).to_dict()
    assert list(doc)[:4] == ["kind", "namespace", "workload", "owner"]
    assert doc["owner"] == {"kind": "InferenceService", "name": "legacy"}
    assert Finding.from_dict(doc).owner == owner
    assert "owner" not in _finding().to_dict()
    with pytest.raises(pydantic.ValidationError, match="not in the workload's namespace"):
        _finding(owner=owner.model_copy(update={"namespace": "elsewhere"}))
