"""Both DCGM namings, and a fleet part-way through the switch, give the verdicts of one naming.

dcgm-exporter 4.9 serves DCGM 4.7's names (``DCGM_FI_DEV_GPU_UTIL_RATIO``, 0-1; framebuffer in
bytes; ``hostname`` for ``Hostname``). The standard fleet is written four ways, each a cluster of one
TSDB: in the legacy naming, in DCGM 4.7's, half its nodes in each, and upgraded node by node inside
the window with two scrapes served under both names. Every way must judge every workload alike, and
each GPU renamed in the window must be one device with one history: its samples counted once.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from analyzer.detection.views import DeviceView
from analyzer.pipeline import Analysis, MetricsSource, analyze_in_detail
from analyzer.sources import dcgm, rollups, vocabulary
from analyzer.sources.aggregates import FleetSnapshot
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusConfig
from common import metric_names
from common.model import Finding
from common.thresholds import Thresholds
from harness.rules import ALERTS_DIR
from harness.servers import (
    PrometheusServer,
    VictoriaMetricsServer,
    backfill_blocks,
    backfill_rules,
    merged_blocks,
)
from simulation.fleet import Fleet, Series, load_scenario, simulate, with_naming
from simulation.fleet.scenario import Delivery, Scenario
from simulation.fleet.truth import window_of
from simulation.in_memory_source import SimulatedSource

pytestmark = pytest.mark.slow

LEGACY, CURRENT, MIXED, UPGRADE = "legacy", "dcgm-4.7", "mixed", "upgrade"
NAMINGS = (LEGACY, CURRENT, MIXED, UPGRADE)
# The last three hours (half the standard's window: half the backfill's time), upgraded node by
# node, five minutes apart from 90 minutes before the end: every node's GPUs are read under both
# names, two scrapes (the old exporter pod's last) under both at once.
WINDOW = timedelta(hours=3)
UPGRADE_AT = timedelta(minutes=-90)
RULES_FILE = ALERTS_DIR / "gpu-analyzer.recording.yaml"
RENAMED_HOLDERS = 35  # of 38: a pod started after its node's upgrade; gpu-e's GPU 0 and its pod, lost before


def _scenario(naming: str) -> Scenario:
    standard = load_scenario("standard").model_copy(update={"analysis_window": WINDOW})
    if naming == UPGRADE:
        form = with_naming(standard, "upgrade", at=UPGRADE_AT, overlap=2, stagger=timedelta(minutes=5))
    else:
        form = with_naming(standard, naming)  # type: ignore[arg-type]
    return form.model_copy(update={"delivery": Delivery(cluster=naming)})


@pytest.fixture(scope="module")
def fleets() -> dict[str, Fleet]:
    return {naming: simulate(_scenario(naming)) for naming in NAMINGS}


def _recent(fleet: Fleet) -> Iterator[Series]:
    """The window's samples (and ten minutes before it) of the series the analyzer reads."""
    since = window_of(fleet).start.timestamp() - 600
    for s in fleet.series:
        keep = s.timestamps > since
        if s.name in dcgm.KNOWN_METRICS and keep.any():
            yield Series(s.name, s.labels, s.timestamps[keep], s.values[keep])


def _all(fleets: dict[str, Fleet]) -> Iterator[Series]:
    for fleet in fleets.values():
        yield from _recent(fleet)


def _core(findings: tuple[Finding, ...]) -> list[tuple[object, ...]]:
    """What a verdict is: its kind, workload, GPUs and the GPU-hours it counts (float rounding apart)."""
    return sorted(
        (
            f.kind.value,
            f.workload.kind,
            f.workload.namespace,
            f.workload.name,
            len(f.gpus),
            f.confidence,
            round(f.wasted_gpu_hours, 6),
        )
        for f in findings
    )


def _by_cluster(analysis: Analysis) -> dict[str, Analysis]:
    return {part.cluster: part.analysis for part in analysis.parts}


def _check_one_history(snapshots: dict[str, FleetSnapshot]) -> None:
    """Every device of every naming is the legacy fleet's device: the same samples (none counted
    twice where both names were served), the same numbers in percent."""
    legacy = snapshots[LEGACY].devices
    for naming, snapshot in snapshots.items():
        assert snapshot.devices.keys() == legacy.keys(), naming
        for key, dev in snapshot.devices.items():
            want = legacy[key].stats
            got = dev.stats
            assert got.samples == want.samples, (naming, key)
            for name in ("mean", "max", "q_low", "q_high"):
                assert getattr(got, name) == pytest.approx(getattr(want, name), abs=1e-9), (naming, key, name)
            assert dev.info.node == legacy[key].info.node
    renamed = [d for d in snapshots[UPGRADE].devices.values() if d.info.also]
    # Holders alive on both sides of their node's upgrade were read under both names of a field.
    assert len(renamed) == RENAMED_HOLDERS
    assert {frozenset(d.info.metrics) for d in renamed} == {
        frozenset((dcgm.DEV_GPU_UTIL, metric_names.GPU_UTIL_RATIO)),
        frozenset((dcgm.PROF_GR_ENGINE_ACTIVE, metric_names.PROF_GR_ENGINE_UTIL_RATIO)),
    }
    described = snapshots[UPGRADE].capabilities.describe()
    assert "DCGM names legacy and DCGM 4.7" in described
    assert "node label Hostname and hostname" in described
    assert "DCGM names DCGM 4.7; node label hostname;" in snapshots[CURRENT].capabilities.describe()


def _check(analysis: Analysis) -> None:
    clusters = _by_cluster(analysis)
    assert set(clusters) == set(NAMINGS)
    legacy = _core(clusters[LEGACY].report.findings)
    assert any(kind == "idle_endpoint" for kind, *_ in legacy)
    for naming in NAMINGS:
        assert _core(clusters[naming].report.findings) == legacy, f"{naming}: verdicts differ from legacy's"
    _check_one_history({naming: a.snapshot for naming, a in clusters.items()})
    _check_closer_looks(clusters)


def _check_closer_looks(analyses: dict[str, Analysis]) -> None:
    """Each holder judged over its own span (a young pod, a starvation candidate's shares and
    phases, its memory) has the numbers of the legacy fleet's."""

    def views(analysis: Analysis) -> dict[tuple[str, object], DeviceView]:
        return {(str(w.ref), d.key): d for w in analysis.workloads for d in w.devices}

    legacy = views(analyses[LEGACY])
    assert any(d.shares is not None and d.shares.source == "samples" for d in legacy.values())
    for naming, analysis in analyses.items():
        mine = views(analysis)
        assert mine.keys() == legacy.keys(), naming
        for key, want in legacy.items():
            got = mine[key]
            assert (got.span, got.coverage, got.phases) == (want.span, want.coverage, want.phases), (
                naming,
                key,
            )
            assert (got.stats is None) == (want.stats is None), (naming, key)
            if got.stats is not None and want.stats is not None:
                assert got.stats.samples == want.stats.samples, (naming, key)
                for name in ("mean", "max", "q_low", "q_high"):
                    assert getattr(got.stats, name) == pytest.approx(getattr(want.stats, name), abs=1e-9), (
                        naming,
                        key,
                        name,
                    )
            if want.shares is not None:
                assert got.shares is not None, (naming, key)
                # Our exporter's sample histogram keeps its name but not its node label across the
                # upgrade: a new series, whose first scrape's increase is lost, as at any restart.
                rel = 0.01 if want.shares.source == "histogram" else 1e-9
                assert (got.shares.stalled, got.shares.busy, got.shares.weight) == pytest.approx(
                    (want.shares.stalled, want.shares.busy, want.shares.weight), rel=rel, abs=1e-9
                ), (naming, key)
            if want.memory_used_mib is not None:
                assert got.memory_used_mib == pytest.approx(want.memory_used_mib, rel=1e-9), (naming, key)


def _analysis(url: str, fleets: dict[str, Fleet]) -> Analysis:
    window = window_of(fleets[LEGACY])
    return analyze_in_detail(PrometheusSource(PrometheusConfig(url)), window, Thresholds(), now=window.end)


@pytest.fixture(scope="module")
def victoria_namings(fleets: dict[str, Fleet], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with VictoriaMetricsServer(tmp_path_factory.mktemp("victoria-namings")) as server:
        server.import_series(_all(fleets))
        yield server.url


@pytest.mark.victoriametrics
def test_victoriametrics_reads_every_naming_and_an_upgrade_as_one_fleet(
    victoria_namings: str, fleets: dict[str, Fleet]
) -> None:
    _check(_analysis(victoria_namings, fleets))


@pytest.mark.prometheus
def test_prometheus_reads_every_naming_and_an_upgrade_as_one_fleet(
    fleets: dict[str, Fleet], tmp_path: Path
) -> None:
    """Raw samples, then with the recording rules' rollups of every name (one rule per name)."""
    blocks = backfill_blocks(_all(fleets), tmp_path / "backfill")
    window = window_of(fleets[LEGACY])
    with PrometheusServer(tmp_path / "prometheus", blocks=blocks) as server:
        analysis = _analysis(server.url, fleets)
        _check(analysis)
        _check_memory(analysis)
        rules = backfill_rules(
            server.url, RULES_FILE, window.start - timedelta(minutes=10), window.end, tmp_path
        )
    with PrometheusServer(tmp_path / "rolled", merged_blocks(tmp_path, blocks, rules)) as server:
        rolled = _analysis(server.url, fleets)
    _check(rolled)
    read = {naming: set(a.snapshot.capabilities.rollups) for naming, a in _by_cluster(rolled).items()}
    # Every rolled-up name a fleet serves (the mixed one: no legacy-named node profiles), as the
    # vocabulary lists them, so a name added there is expected here without an edit.
    served = {
        naming: {s.name for s in fleet.series} & set(rollups.ROLLED_UP) for naming, fleet in fleets.items()
    }
    assert served[LEGACY] >= {dcgm.PROF_GR_ENGINE_ACTIVE, dcgm.DEV_GPU_UTIL}
    assert served[CURRENT] >= {metric_names.PROF_GR_ENGINE_UTIL_RATIO, metric_names.GPU_UTIL_RATIO}
    assert read == {
        LEGACY: served[LEGACY],
        CURRENT: served[CURRENT],
        MIXED: served[MIXED],
        # Each name's series stop (start) inside the window, so its rules record nothing over part
        # of it, which reads as evaluations missed: raw samples, as without rules.
        UPGRADE: set(),
    }


def test_in_memory_reads_every_naming_and_an_upgrade_as_one_fleet(fleets: dict[str, Fleet]) -> None:
    window = window_of(fleets[LEGACY])
    found = {
        naming: analyze_in_detail(SimulatedSource(fleet), window, Thresholds(), now=window.end)
        for naming, fleet in fleets.items()
    }
    legacy = _core(found[LEGACY].report.findings)
    for naming, analysis in found.items():
        assert _core(analysis.report.findings) == legacy, naming
    _check_one_history({naming: a.snapshot for naming, a in found.items()})
    _check_closer_looks(found)
    _check_memory_of({naming: (a.parts[0].source, a.snapshot) for naming, a in found.items()})


def _check_memory(analysis: Analysis) -> None:
    _check_memory_of({p.cluster: (p.source, p.analysis.snapshot) for p in analysis.parts})


def _check_memory_of(reads: dict[str, tuple[MetricsSource, FleetSnapshot]]) -> None:
    """Framebuffer read under both names (MiB and bytes) is the legacy fleet's: used, peak, size."""
    source, snapshot = reads[LEGACY]
    keys = sorted(snapshot.devices)
    want_used = source.memory_used(snapshot, keys)
    want_peaks = source.memory_peaks(snapshot, keys, 0.99)
    assert want_used and any(v > 1024 for v in want_used.values())
    for naming in (CURRENT, MIXED, UPGRADE):
        source, snapshot = reads[naming]
        used = source.memory_used(snapshot, keys)
        peaks = source.memory_peaks(snapshot, keys, 0.99)
        assert used.keys() == want_used.keys(), naming
        for key, mib in want_used.items():
            # A scrape served under both names counts once; bytes in the tens of billions pass
            # through the simulator's ten significant digits.
            assert used[key] == pytest.approx(mib, rel=1e-9), (naming, key)
            assert peaks[key].peak_mib == pytest.approx(want_peaks[key].peak_mib, rel=1e-9), (naming, key)
            assert peaks[key].capacity_mib == pytest.approx(want_peaks[key].capacity_mib, rel=1e-9), (
                naming,
                key,
            )


def test_a_renamed_gpu_is_served_under_both_names_for_the_overlap_only(fleets: dict[str, Fleet]) -> None:
    """The oracle itself: one GPU's legacy series ends two scrapes after its 4.7 series begins."""
    fleet = fleets[UPGRADE]
    step = fleet.scenario.step.total_seconds()
    uuid = next(s.label("UUID") for s in fleet.series if s.name == dcgm.DEV_GPU_UTIL)
    old = np.concatenate(
        [s.timestamps for s in fleet.series if s.name == dcgm.DEV_GPU_UTIL and s.label("UUID") == uuid]
    )
    new = np.concatenate(
        [
            s.timestamps
            for s in fleet.series
            if s.name == metric_names.GPU_UTIL_RATIO and s.label("UUID") == uuid
        ]
    )
    both = np.intersect1d(old, new)
    assert both.size == 2 and both[1] - both[0] == step
    assert np.union1d(old, new).size == old.size + new.size - 2
    assert vocabulary.naming({s.name for s in fleet.series}) == "legacy and DCGM 4.7"
