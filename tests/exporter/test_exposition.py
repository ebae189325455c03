"""The encoded exposition: escaping, types, and what the request headers change (gzip only)."""

from __future__ import annotations

import gzip
from types import MappingProxyType

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.attribution import PodView
from exporter.exposition import TEXT_CONTENT_TYPE, Exposition, encode, wants_gzip
from exporter.readings import DeviceIdentity, DeviceReading, NodeReading
from exporter.snapshot import Counters, Series, Snapshot, SnapshotBuilder

AWKWARD = {"pod": 'a"b', "namespace": "back\\slash", "container": "two\nlines", "gpu": "0"}
#: What Prometheus 2.x and 3.x put in ``Accept`` by default: OpenMetrics first.
PROMETHEUS_ACCEPTS = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=1.0.0;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
)


def _snapshot() -> Snapshot:
    shared = {"gpu": "0", "UUID": "GPU-1"}
    series = {
        "DCGM_FI_DEV_GPU_UTIL": (Series(AWKWARD, 42.0), Series(shared, 7.0)),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (Series(shared, 1.5e9),),
        "gpu_xid_errors_total": (Series({**shared, "xid": "79"}, 1.0),),
    }
    return Snapshot(taken_at=0.0, ok=True, duration_s=0.0, series=MappingProxyType(series))


def test_label_values_round_trip_through_a_parser() -> None:
    body = encode(_snapshot()).decode()
    samples = [s for family in parse_text(body) for s in family.samples if s.name == "DCGM_FI_DEV_GPU_UTIL"]
    assert {tuple(sorted(s.labels.items())): s.value for s in samples}[tuple(sorted(AWKWARD.items()))] == 42.0


def test_every_counter_is_typed_counter_under_its_own_name() -> None:
    text = encode(_snapshot()).decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert '\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{UUID="GPU-1",gpu="0"} 1.5e+09\n' in text
    assert "# TYPE gpu_xid_errors_total counter\n" in text and "\ngpu_xid_errors_total{" in text
    assert " unknown\n" not in text and "# EOF" not in text


@pytest.mark.parametrize("accept", [*PROMETHEUS_ACCEPTS, "application/openmetrics-text;version=1.0.0", ""])
def test_the_text_format_is_served_whatever_the_client_prefers(accept: str) -> None:
    snapshot = _snapshot()
    exposition = Exposition(lambda: snapshot)
    body, content_type, encoding = exposition.render(accept, "")
    assert content_type == TEXT_CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    assert encoding is None
    assert body == encode(snapshot)


def test_gzip_carries_the_same_bytes_and_is_encoded_once_per_snapshot() -> None:
    snapshot = _snapshot()
    exposition = Exposition(lambda: snapshot)
    body, content_type, encoding = exposition.render(PROMETHEUS_ACCEPTS[1], "gzip")
    assert (content_type, encoding) == (TEXT_CONTENT_TYPE, "gzip")
    assert gzip.decompress(body) == encode(snapshot)
    assert exposition.render(PROMETHEUS_ACCEPTS[0], "gzip")[0] is body


def test_before_the_first_collection_the_exposition_is_empty() -> None:
    exposition = Exposition(lambda: None)
    assert exposition.render(PROMETHEUS_ACCEPTS[0], "") == (b"", TEXT_CONTENT_TYPE, None)
    body, _, encoding = exposition.render("", "gzip")
    assert encoding == "gzip" and gzip.decompress(body) == b""


@pytest.mark.parametrize(
    ("header", "expected"),
    [("gzip", True), ("deflate, gzip;q=0.5", True), ("gzip;q=0", False), ("identity", False), ("", False)],
)
def test_gzip_only_when_accepted(header: str, expected: bool) -> None:
    assert wants_gzip(header) is expected


def test_a_sample_on_a_bucket_bound_counts_in_that_bucket_and_the_counts_add_up_across_reads() -> None:
    """The histogram is ``le``: a sample equal to a bound is in that bound's bucket, one above it in
    the next; counts only grow across reads, and a cycle that read nothing serves the same counts."""
    gpu = DeviceIdentity(0, "GPU-a", "NVIDIA H200", "00000000:18:00.0")
    builder = SnapshotBuilder("node-a", version="test")

    def cumulative(samples: tuple[int, ...]) -> tuple[tuple[int, ...], float]:
        reading = NodeReading(True, "580.65.06", ((gpu, True),), (DeviceReading(gpu, None, {}, samples),))
        (histogram,) = builder.build(
            reading, PodView(), {}, Counters(), taken_at=0.0, duration_s=0.0
        ).histograms
        return histogram.cumulative, histogram.total

    # Bounds 5, 10, 25, 50, 75, 90, 95, +Inf.
    assert cumulative((0, 5, 6, 10, 11, 25, 50, 51, 75, 90, 95, 96, 100)) == (
        (2, 4, 6, 7, 9, 10, 11, 13),
        614.0,
    )
    assert cumulative(()) == ((2, 4, 6, 7, 9, 10, 11, 13), 614.0)
    assert cumulative((100, 5, 5)) == ((4, 6, 8, 9, 11, 12, 13, 16), 724.0)
