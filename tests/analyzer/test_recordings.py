"""Real recordings through a real TSDB, judged against what each recording's repository says the run was.

Each recording (tests/fixtures/recordings, with its licence and provenance) is turned into the
dcgm-exporter and kube-state-metrics series a cluster would hold (tests/harness/recordings.py says
how it is sampled), loaded into real Prometheus and VictoriaMetrics, and analyzed. The expected
verdicts below come from the recording's own repository and from the recording's own timestamps,
never from what the analyzer returned.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from analyzer.pipeline import Analysis, analyze_in_detail
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusConfig
from common.model import FindingKind, LowUtilizationEvidence, TimeWindow, UnknownEvidence, WorkloadRef
from common.thresholds import Thresholds
from harness.recordings import (
    RECORDINGS,
    JobPod,
    Readings,
    cluster_series,
    ending_at,
    read_nvidia_smi_log,
    read_readings,
    scraped,
    scraped_readings,
)
from harness.servers import serving

END = datetime(2026, 1, 5, tzinfo=UTC)
SCRAPE_S = 15.0


@dataclass(frozen=True)
class Published:
    """What the upstream file is: its length in characters (CR and LF both counted where it ends its
    lines with CRLF), its readings, and bounds on the span of its timestamps in seconds."""

    chars: int
    readings: int
    span_s: tuple[float, float]


@dataclass(frozen=True)
class Recording:
    name: str
    path: Path
    read: Callable[[Path], Readings]
    what_the_repository_says: str
    pod: JobPod
    published: Published
    crlf_upstream: bool = False  # the upstream file has CRLF line ends, stored here as LF

    def readings(self, before_end: float = 20.0) -> Readings:
        """The recording moved in time to end ``before_end`` seconds before END."""
        return ending_at(self.read(self.path), END, before_end)

    @property
    def ref(self) -> WorkloadRef:
        return WorkloadRef(kind="Job", name=self.pod.job, namespace=self.pod.namespace)

    def run_in_whole_hours(self) -> timedelta:
        """The window an engineer looking at the run once it ended would ask for: its length,
        rounded up to whole hours."""
        readings = self.read(self.path)
        return timedelta(hours=math.ceil((readings.end - readings.start) / 3600))


NVIDIA_SMI_FIELDS = (
    "timestamp",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.free",  # written as the fifth column; used + it is constant (see the fixtures README)
    "temperature.gpu",
    "power.draw",
)

EMBER_ASYNC = Recording(
    name="ember-async",
    path=RECORDINGS / "ember" / "gpu_utilization_async.csv",
    read=partial(read_readings, time_column="Time", value_column="Utilization", gpu_column="GPU_ID"),
    what_the_repository_says=(
        "Patrickeraa/Ember (MIT): the GPU utilization its worker logged (pynvml, every 0.1 s) during "
        "an asynchronous Ember training run, a PyTorch DDP training loop fed with batches streamed "
        "over gRPC. A training run computing on its GPU: not waste."
    ),
    pod=JobPod(namespace="research", job="ember-async"),
    published=Published(chars=30_414, readings=1_216, span_s=(120, 130)),
    crlf_upstream=True,
)
PLATO = Recording(
    name="plato-fedasync-yolop",
    path=RECORDINGS / "plato" / "gpu_log.csv",
    read=partial(read_nvidia_smi_log, fields=NVIDIA_SMI_FIELDS),
    what_the_repository_says=(
        "beam11221/plato (Apache-2.0): nvidia-smi every 5 s for 2 h 41 min beside a federated-learning "
        "run (Plato's FedAsync example training YOLOP on BDD100K, clients one at a time on the GPU). "
        "0 % in 94 % of the readings, memory taken and released as rounds come and go. As a Job: a "
        "pod holding a GPU that mostly waits, underused."
    ),
    pod=JobPod(namespace="research", job="plato-fedasync-yolop"),
    published=Published(chars=127_849, readings=1_923, span_s=(9_600, 9_700)),
)


def _rpf(commit: str, run: str, published: Published) -> Recording:
    """One of RCKola/Rectified-Point-Flow's `gpu_usage.csv` logs (they differ by commit and run)."""
    return Recording(
        name=f"rpf-{commit}",
        path=RECORDINGS / "rpf" / f"gpu_usage_{commit}.csv",
        read=partial(
            read_readings,
            time_column="timestamp",
            value_column="utilization.gpu",
            memory_column="memory.used",
        ),
        what_the_repository_says=(
            "RCKola/Rectified-Point-Flow (Apache-2.0): nvidia-smi every 60 s while training Rectified "
            f"Point Flow, a point-cloud flow-matching model, on one 24 GB card: {run}. A training run "
            "computing on its GPU: not waste."
        ),
        pod=JobPod(namespace="research", job=f"rpf-{commit}"),
        published=published,
    )


RPF_E21CA9C = _rpf(
    "e21ca9c",
    "2 h, mean 71 %, swinging between 20 and 100 % from minute to minute",
    Published(chars=3_485, readings=122, span_s=(7_200, 7_320)),
)
RPF_076D3D9 = _rpf(
    "076d3d9",
    "another run, 1.5 h, mean 58 %, swinging between 26 and 96 %",
    Published(chars=2_561, readings=90, span_s=(5_280, 5_400)),
)
CORPUS = [EMBER_ASYNC, PLATO, RPF_E21CA9C, RPF_076D3D9]

# What each run's description implies over the run's length in whole hours, ending just after it
# (see the fixtures README): None is no finding.
EXPECTED_OVER_THE_RUN: list[tuple[Recording, FindingKind | None]] = [
    (PLATO, FindingKind.LOW_UTILIZATION),  # a Job holding a GPU that mostly waits
    (RPF_E21CA9C, None),  # training, computing on its GPU
    (RPF_076D3D9, None),
]


def _analyze(
    tsdb: str, recording: Recording, readings: Readings, window: TimeWindow, t: Thresholds, tmp: Path
) -> Analysis:
    series = list(cluster_series(readings, recording.pod, scrape_interval=SCRAPE_S))
    with serving(tsdb, series, tmp) as server:
        return analyze_in_detail(PrometheusSource(PrometheusConfig(server.url)), window, t, now=window.end)


@pytest.mark.parametrize("recording", CORPUS, ids=lambda r: r.name)
def test_the_recording_is_stored_as_published(recording: Recording) -> None:
    """Every reading kept; the size matches the upstream file (the licence beside it)."""
    raw = recording.path.read_bytes()
    text = raw.decode("utf-8")
    assert b"\r" not in raw
    assert len(text) + (text.count("\n") if recording.crlf_upstream else 0) == recording.published.chars
    assert (recording.path.parent / "LICENSE").is_file()
    readings = recording.read(recording.path)
    assert readings.timestamps.size == recording.published.readings
    low, high = recording.published.span_s
    assert low < readings.end - readings.start < high
    assert np.all(np.diff(readings.timestamps) > 0)
    assert np.all((readings.percent >= 0) & (readings.percent <= 100))


def test_an_nvidia_smi_log_is_read_with_its_units_dropped() -> None:
    readings = read_nvidia_smi_log(PLATO.path, NVIDIA_SMI_FIELDS)
    first = datetime(2026, 4, 25, 16, 6, 6, 780_000, tzinfo=UTC).timestamp()
    assert readings.timestamps[0] == pytest.approx(first)  # 2026/04/25 16:06:06.780
    assert (readings.percent[0], readings.memory_mib is not None and readings.memory_mib[0]) == (0.0, 2.0)
    assert readings.percent.max() == 98.0
    assert readings.memory_mib is not None and readings.memory_mib.max() > 20_000


def test_a_scrape_reads_the_latest_reading() -> None:
    readings = Readings(
        timestamps=np.array([0.05, 10.0, 14.9, 15.0, 29.0, 31.0]),
        percent=np.array([0.0, 50.0, 60.0, 70.0, 80.0, 90.0]),
        memory_mib=np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
    )
    t, v = scraped(readings, 15.0)
    assert t.tolist() == [15.0, 30.0]
    assert v.tolist() == [70.0, 80.0]  # at 15 s the reading taken at 15 s; at 30 s the one at 29 s
    s = scraped_readings(readings, 15.0)
    assert s.memory_mib is not None and s.memory_mib.tolist() == [4.0, 5.0]  # from the same readings


def test_memory_is_stored_only_where_recorded() -> None:
    where = JobPod(namespace="ns", job="j")
    t = np.arange(0.0, 120.0, 5.0)
    without = {s.name for s in cluster_series(Readings(t, np.zeros(t.size)), where)}
    with_memory = {s.name for s in cluster_series(Readings(t, np.zeros(t.size), np.ones(t.size)), where)}
    assert "DCGM_FI_DEV_FB_USED" not in without
    assert with_memory - without == {"DCGM_FI_DEV_FB_USED"}


@pytest.mark.prometheus
@pytest.mark.victoriametrics
@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
@pytest.mark.parametrize("recording", CORPUS, ids=lambda r: r.name)
def test_a_short_run_is_reported_too_young_never_left_out(
    tsdb: str, recording: Recording, tmp_path: Path
) -> None:
    """Over the usual six hours, a run shorter than three cannot fill half the window: reported, never
    judged."""
    window = TimeWindow.ending(END, timedelta(hours=6))
    analysis = _analyze(tsdb, recording, recording.readings(), window, Thresholds(), tmp_path)
    (finding,) = [f for f in analysis.report.findings if f.workload == recording.ref]
    assert finding.kind is FindingKind.UNKNOWN
    assert isinstance(finding.evidence, UnknownEvidence) and finding.evidence.reason == "too_young"
    assert not [f for f in analysis.report.findings if f.kind.actionable]


@pytest.mark.prometheus
@pytest.mark.victoriametrics
@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
@pytest.mark.parametrize("recording", [EMBER_ASYNC], ids=lambda r: r.name)
def test_a_window_sized_to_the_run_judges_it_as_its_repository_describes(
    tsdb: str, recording: Recording, tmp_path: Path
) -> None:
    """The two-minute run's own span as the window, with a warm-up in seconds as short jobs need: a
    busy training run."""
    readings = recording.readings(before_end=0.0)
    start = datetime.fromtimestamp(readings.start, tz=UTC) - timedelta(seconds=10)
    window = TimeWindow(start=start, end=END)
    t = Thresholds(warmup_grace=timedelta(seconds=30), scrape_interval=timedelta(seconds=SCRAPE_S))
    analysis = _analyze(tsdb, recording, readings, window, t, tmp_path)
    (view,) = analysis.workloads
    assert view.ref == recording.ref
    assert view.judged is not None  # judged, not too young
    assert analysis.report.findings == ()  # a training run that kept its GPU busy is not waste


@pytest.mark.prometheus
@pytest.mark.victoriametrics
@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
@pytest.mark.parametrize(
    ("recording", "expected"), EXPECTED_OVER_THE_RUN, ids=[r.name for r, _ in EXPECTED_OVER_THE_RUN]
)
def test_over_the_run_in_whole_hours_the_verdict_its_repository_implies(
    tsdb: str, recording: Recording, expected: FindingKind | None, tmp_path: Path
) -> None:
    """Default thresholds, the window an engineer would ask for once the Job ended: judged, and judged
    as the run's description says."""
    window = TimeWindow.ending(END, recording.run_in_whole_hours())
    readings = recording.readings()
    analysis = _analyze(tsdb, recording, readings, window, Thresholds(), tmp_path)
    assert analysis.snapshot.capabilities.memory == (readings.memory_mib is not None)
    (view,) = analysis.workloads
    assert view.ref == recording.ref
    assert view.judged_seconds >= window.duration.total_seconds() / 2  # judged enough, not too young
    findings = [f for f in analysis.report.findings if f.workload == recording.ref]
    if expected is None:
        assert analysis.report.findings == ()
        return
    (finding,) = findings
    assert finding.kind is expected
    if expected is FindingKind.LOW_UTILIZATION:
        evidence = finding.evidence
        assert isinstance(evidence, LowUtilizationEvidence)
        assert not evidence.near_miss  # far below the line: a GPU that mostly waits
        assert evidence.mean_util_percent is not None and evidence.mean_util_percent < 10
