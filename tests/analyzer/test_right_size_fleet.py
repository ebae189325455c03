"""Right-sizing through the whole analysis, on real Prometheus and VictoriaMetrics and in memory.

A simulated fleet of long-running workloads of low utilization on H100s, L4s (no MIG) and H100s
already split into 3g.40gb instances, plus a Job: the framebuffer peaks are read from the TSDB in one
round, each long-running workload's finding carries the share it would fit (or why none), the Job
none, with the same figures from each source.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from common.evidence import LowUtilizationEvidence, RightSizing
from common.model import FindingKind
from common.thresholds import Thresholds
from harness.analyses import TSDBS, report_on
from simulation.fleet import Fleet, Scenario, simulate

SCENARIO = """
name: right-size
end: 2026-01-05T00:00:00Z
duration: 8h
nodes:
  - {name: h100-a, gpus: 3}
  - {name: l4-a, gpus: 2, model: "NVIDIA L4", memory_mib: 23034}
  - {name: mig-a, gpus: 1, mig_profile: "3g.40gb", mig_instances: 2, profiling: true}
workloads:
  # 8 % of 80 GB held: a small model serving at ~15 %.
  - {namespace: serving, name: ranker, behaviour: low_utilization, memory_fraction: 0.08, node: h100-a}
  # 90 % held: no profile smaller than the GPU holds it.
  - {namespace: serving, name: big, behaviour: low_utilization, memory_fraction: 0.9, node: h100-a}
  - {namespace: serving, name: embedder, behaviour: low_utilization, memory_fraction: 0.2, node: l4-a}
  - {namespace: serving, name: sliced, behaviour: low_utilization, memory_fraction: 0.2, node: mig-a}
  - {namespace: batch, name: nightly, kind: Job, behaviour: low_utilization, memory_fraction: 0.1,
     node: h100-a}
"""


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return simulate(Scenario.model_validate(yaml.safe_load(SCENARIO)))


def _sizes(fleet: Fleet, tsdb: str, tmp_path: Path) -> dict[str, RightSizing | None]:
    report = report_on(fleet, tsdb, tmp_path, Thresholds(price_per_gpu_hour=2.5))
    out: dict[str, RightSizing | None] = {}
    for f in report.findings:
        assert f.kind is FindingKind.LOW_UTILIZATION, f.workload.key()
        assert isinstance(f.evidence, LowUtilizationEvidence)
        out[f.workload.key()] = f.evidence.right_size
    return out


@pytest.mark.parametrize("tsdb", TSDBS)
def test_each_long_running_workload_gets_the_share_it_fits(tsdb: str, fleet: Fleet, tmp_path: Path) -> None:
    sizes = _sizes(fleet, tsdb, tmp_path)
    assert sizes["batch/Job/nightly"] is None  # a Job ends on its own: nothing to resize

    ranker = sizes["serving/Deployment/ranker"]
    assert ranker is not None and ranker.share == "mig"
    assert ranker.gpu_model == "NVIDIA H100 80GB HBM3"
    # 8 % of 81,559 MiB is 6,525 MiB: the peak the TSDB's quantile reads back.
    assert ranker.memory_peak_mib == pytest.approx(6_525, rel=0.01)
    # ~20 % activity needs two of seven slices at 80 % of them; 7,830 MiB fits 2g.20gb's memory.
    assert ranker.profile == "2g.20gb" and ranker.resource == "nvidia.com/mig-2g.20gb"
    assert ranker.gpu_equivalents_saved == pytest.approx(5 / 7, abs=0.01)
    assert ranker.saved_cost == pytest.approx(ranker.saved_gpu_hours * 2.5, abs=0.01)

    big = sizes["serving/Deployment/big"]
    assert big is not None and big.share is None and "whole H100 80GB GPU" in big.reason

    embedder = sizes["serving/Deployment/embedder"]
    assert embedder is not None and embedder.share == "time_slice" and embedder.profile == "1/4"
    # The L4's memory comes from DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE (no MIG table for it).
    assert embedder.gpu_memory_mib == pytest.approx(23_034, rel=0.01)

    sliced = sizes["serving/Deployment/sliced"]
    assert sliced is not None and sliced.share == "mig" and sliced.profile == "1g.20gb"
    assert sliced.replaces == "nvidia.com/mig-3g.40gb"
