"""Detection settings: documented defaults, the policy file's `detection:` block, precise errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from common.errors import BadInputError
from common.thresholds import Thresholds, load_thresholds


def test_documented_defaults() -> None:
    t = Thresholds()
    assert t.idle_percent == 2.0
    assert t.low_utilization_percent == 30.0
    assert t.min_coverage == 0.9
    assert t.idle_min_memory_mib == 256.0
    assert t.warmup_grace == timedelta(minutes=30)
    assert t.cpu_saturation_ratio == 0.9
    assert t.cpu_throttling_ratio == 0.25
    assert t.price_per_gpu_hour is None
    assert t.request_rate_query is None


def test_frozen() -> None:
    with pytest.raises(ValueError, match="frozen"):
        Thresholds().idle_percent = 5.0


def test_reads_only_the_detection_block(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "mode: apply\n"
        "rules: [{name: anything, whatever: the reaper wants}]\n"
        "detection:\n"
        "  idlePercent: 1.5\n"
        "  warmupGrace: 45m\n"
        "  idleMinMemoryMib: 1024\n"
        "  pricePerGpuHour: 2.49\n"
        "  request_rate_query: >-\n"
        '    sum(rate(http_requests_total{namespace="$namespace", pod=~"$pods"}[$window]))\n'
    )
    t = load_thresholds(policy)
    assert t.idle_percent == 1.5
    assert t.warmup_grace == timedelta(minutes=45)
    assert t.idle_min_memory_mib == 1024.0
    assert t.price_per_gpu_hour == 2.49
    assert t.request_rate_query is not None


@pytest.mark.parametrize(
    "text",
    [pytest.param("", id="empty-file"), pytest.param("mode: dry-run\n", id="no-detection-block")],
)
def test_missing_block_means_defaults(tmp_path: Path, text: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    assert load_thresholds(policy) == Thresholds()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("detection: {idlePercent: 120}\n", "detection.idlePercent", id="percent-above-100"),
        pytest.param("detection: {minCoverage: 1.5}\n", "detection.minCoverage", id="coverage-above-1"),
        pytest.param("detection: {warmupGrace: 30}\n", "has no unit", id="grace-without-unit"),
        pytest.param("detection: {warmupGrace: soon}\n", "invalid duration", id="grace-not-a-duration"),
        pytest.param("detection: {idelPercent: 1}\n", "detection.idelPercent", id="typo-is-refused"),
        pytest.param("detection: {pricePerGpuHour: -1}\n", "detection.pricePerGpuHour", id="negative-price"),
        pytest.param(
            "detection: {idleMinMemoryMib: -1}\n", "detection.idleMinMemoryMib", id="negative-memory-line"
        ),
        pytest.param("detection: {idlePercent: 40}\n", "idlePercent must be below", id="idle-above-low-line"),
        pytest.param(
            "detection: {requestRateQuery: 'rate(x{app=\"$app\"}[5m])'}\n",
            "unknown placeholder",
            id="bad-placeholder",
        ),
        pytest.param("detection: [1, 2]\n", "detection: must be a mapping", id="block-not-a-mapping"),
        pytest.param("- a\n- b\n", "YAML mapping", id="file-not-a-mapping"),
        pytest.param("detection: {idlePercent: [\n", "not valid YAML", id="broken-yaml"),
    ],
)
def test_errors_name_file_field_and_problem(tmp_path: Path, text: str, message: str) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(text)
    with pytest.raises(BadInputError) as err:
        load_thresholds(policy)
    assert str(policy) in str(err.value)
    assert message in str(err.value)


def test_unreadable_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="cannot read the policy file"):
        load_thresholds(tmp_path / "missing.yaml")


def test_json_schema_for_the_policy_file() -> None:
    """The reaper publishes the policy's JSON Schema; the durations must describe themselves."""
    schema = Thresholds.model_json_schema(by_alias=True, mode="validation")
    assert schema["properties"]["warmupGrace"]["type"] == "string"
    assert "idlePercent" in schema["properties"]


def test_serialises_back_to_the_file_spelling() -> None:
    dumped = Thresholds(warmup_grace=timedelta(minutes=45)).model_dump(by_alias=True, mode="json")
    assert dumped["warmupGrace"] == "45m"
    assert Thresholds.model_validate(dumped) == Thresholds(warmup_grace=timedelta(minutes=45))
