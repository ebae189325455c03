"""Real recordings through a real TSDB, judged against what each recording's repository says the run was.

Each recording (tests/fixtures/recordings, with its licence and provenance) is turned into the
dcgm-exporter and kube-state-metrics series a cluster would hold (tests/harness/recordings.py says
how it is sampled), loaded into real Prometheus and VictoriaMetrics, and analyzed. The expected
verdicts below come from the recording's own repository and from the recording's own timestamps,
never from what the analyzer returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from analyzer.pipeline import Analysis, analyze_in_detail
from analyzer.sources.prometheus_api import PrometheusConfig
from analyzer.sources.prometheus_source import PrometheusSource
from common.model import FindingKind, TimeWindow, UnknownEvidence, WorkloadRef
from common.thresholds import Thresholds
from harness.recordings import RECORDINGS, JobPod, Readings, cluster_series, ending_at, read_readings, scraped
from harness.servers import serving

END = datetime(2026, 1, 5, tzinfo=UTC)
SCRAPE_S = 15.0


@dataclass(frozen=True)
class Recording:
    name: str
    path: Path
    columns: tuple[str, str, str]  # time, utilization, GPU id
    what_the_repository_says: str
    pod: JobPod

    def readings(self, before_end: float = 20.0) -> Readings:
        """The recording moved in time to end ``before_end`` seconds before END."""
        time, value, gpu = self.columns
        return ending_at(read_readings(self.path, time, value, gpu), END, before_end)


EMBER_ASYNC = Recording(
    name="ember-async",
    path=RECORDINGS / "ember" / "gpu_utilization_async.csv",
    columns=("Time", "Utilization", "GPU_ID"),
    what_the_repository_says=(
        "Patrickeraa/Ember (MIT): the GPU utilization its worker logged (pynvml, every 0.1 s) during "
        "an asynchronous Ember training run, a PyTorch DDP training loop fed with batches streamed "
        "over gRPC. A training run computing on its GPU: not waste."
    ),
    pod=JobPod(namespace="research", job="ember-async"),
)
CORPUS = [EMBER_ASYNC]


def _analyze(
    tsdb: str, recording: Recording, readings: Readings, window: TimeWindow, t: Thresholds, tmp: Path
) -> Analysis:
    series = list(cluster_series(readings, recording.pod, scrape_interval=SCRAPE_S))
    with serving(tsdb, series, tmp) as server:
        return analyze_in_detail(PrometheusSource(PrometheusConfig(server.url)), window, t, now=window.end)


def test_the_recording_is_stored_as_published() -> None:
    """Every reading kept; the length matches the upstream file (CRLF line ends there, LF here)."""
    text = EMBER_ASYNC.path.read_text(encoding="utf-8")
    assert len(text) + text.count("\n") == 30_414
    readings = read_readings(EMBER_ASYNC.path, "Time", "Utilization", "GPU_ID")
    assert readings.timestamps.size == 1_216
    assert 120 < readings.end - readings.start < 130  # a two-minute run


def test_a_scrape_reads_the_latest_reading() -> None:
    readings = Readings(
        timestamps=__import__("numpy").array([0.05, 10.0, 14.9, 15.0, 29.0, 31.0]),
        percent=__import__("numpy").array([0.0, 50.0, 60.0, 70.0, 80.0, 90.0]),
    )
    t, v = scraped(readings, 15.0)
    assert t.tolist() == [15.0, 30.0]
    assert v.tolist() == [70.0, 80.0]  # at 15 s the reading taken at 15 s; at 30 s the one at 29 s


@pytest.mark.prometheus
@pytest.mark.victoriametrics
@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
@pytest.mark.parametrize("recording", CORPUS, ids=lambda r: r.name)
def test_a_short_run_is_reported_too_young_never_left_out(
    tsdb: str, recording: Recording, tmp_path: Path
) -> None:
    """Over the usual six hours, a two-minute run lies inside its pod's warm-up: reported, not judged."""
    window = TimeWindow.ending(END, timedelta(hours=6))
    analysis = _analyze(tsdb, recording, recording.readings(), window, Thresholds(), tmp_path)
    ref = WorkloadRef(kind="Job", name=recording.pod.job, namespace=recording.pod.namespace)
    (finding,) = [f for f in analysis.report.findings if f.workload == ref]
    assert finding.kind is FindingKind.UNKNOWN
    assert isinstance(finding.evidence, UnknownEvidence) and finding.evidence.reason == "too_young"
    assert not [f for f in analysis.report.findings if f.kind.actionable]


@pytest.mark.prometheus
@pytest.mark.victoriametrics
@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
@pytest.mark.parametrize("recording", CORPUS, ids=lambda r: r.name)
def test_a_window_sized_to_the_run_judges_it_as_its_repository_describes(
    tsdb: str, recording: Recording, tmp_path: Path
) -> None:
    """The run's own span as the window, with a warm-up in seconds as short jobs need: a busy training run."""
    readings = recording.readings(before_end=0.0)
    start = datetime.fromtimestamp(readings.start, tz=UTC) - timedelta(seconds=10)
    window = TimeWindow(start=start, end=END)
    t = Thresholds(warmup_grace=timedelta(seconds=30), scrape_interval=timedelta(seconds=SCRAPE_S))
    analysis = _analyze(tsdb, recording, readings, window, t, tmp_path)
    (view,) = analysis.workloads
    assert view.ref == WorkloadRef(kind="Job", name=recording.pod.job, namespace=recording.pod.namespace)
    assert view.judged is not None  # judged, not too young
    assert analysis.report.findings == ()  # a training run that kept its GPU busy is not waste
