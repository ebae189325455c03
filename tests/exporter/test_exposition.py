"""The encoded exposition: escaping, types per format, and content negotiation."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.exposition import encode, wants_gzip, wants_openmetrics
from exporter.snapshot import Series, Snapshot

AWKWARD = {"pod": 'a"b', "namespace": "back\\slash", "container": "two\nlines", "gpu": "0"}


def _snapshot() -> Snapshot:
    shared = {"gpu": "0", "UUID": "GPU-1"}
    series = {
        "DCGM_FI_DEV_GPU_UTIL": (Series(AWKWARD, 42.0), Series(shared, 7.0)),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (Series(shared, 1.5e9),),
        "gpu_xid_errors_total": (Series({**shared, "xid": "79"}, 1.0),),
    }
    return Snapshot(taken_at=0.0, ok=True, duration_s=0.0, series=MappingProxyType(series))


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
def test_label_values_round_trip_through_a_parser(openmetrics: bool) -> None:
    body = encode(_snapshot(), openmetrics=openmetrics).decode()
    parse = parse_openmetrics if openmetrics else parse_text
    samples = [s for family in parse(body) for s in family.samples if s.name == "DCGM_FI_DEV_GPU_UTIL"]
    assert {tuple(sorted(s.labels.items())): s.value for s in samples}[tuple(sorted(AWKWARD.items()))] == 42.0


def test_dcgm_counters_keep_their_names_in_both_formats() -> None:
    text = encode(_snapshot(), openmetrics=False).decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert '\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{UUID="GPU-1",gpu="0"} 1.5e+09\n' in text
    om = encode(_snapshot(), openmetrics=True).decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n" in om
    assert "# TYPE gpu_xid_errors counter\n" in om and "\ngpu_xid_errors_total{" in om
    assert om.endswith("# EOF\n")


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5", True),
        ("application/openmetrics-text; version=0.0.1; q=0.75", True),
        ("application/openmetrics-text;version=1.0.0;q=0", False),
        ("application/openmetrics-text;version=2.0.0", False),
        ("text/plain;version=0.0.4", False),
        ("", False),
    ],
)
def test_openmetrics_only_when_asked(accept: str, expected: bool) -> None:
    assert wants_openmetrics(accept) is expected


@pytest.mark.parametrize(
    ("header", "expected"),
    [("gzip", True), ("deflate, gzip;q=0.5", True), ("gzip;q=0", False), ("identity", False), ("", False)],
)
def test_gzip_only_when_accepted(header: str, expected: bool) -> None:
    assert wants_gzip(header) is expected
