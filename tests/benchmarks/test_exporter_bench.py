"""The exporter benchmark: its metered NVML boundary counts and charges what it should, and a short
run prints every row of the table."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchmarks.exporter_bench import MEASURED_CALL_US, Node, main

#: NVML calls a cycle may make per GPU on the 16-GPU time-sliced node: the readings of a whole GPU,
#: GPM (sample, metrics) and the two per-process reads of a shared GPU. A new call per GPU and cycle
#: shows here first, and in the benchmark's charged cycle figures.
CALLS_PER_SHARED_GPU = 16


def test_the_busiest_node_stays_within_its_nvml_call_budget(tmp_path: Path) -> None:
    node = Node(tmp_path, 16, 8)
    for _ in range(2):  # handles and identities once per session; the pair of GPM buffers
        node.collect()
    assert node.calls_per_cycle() <= 16 * CALLS_PER_SHARED_GPU + 1  # + nvmlDeviceGetCount


def test_each_call_is_charged_its_cost(tmp_path: Path) -> None:
    node = Node(tmp_path, 2, 1, assumed_call_us=200.0)
    for _ in range(3):  # steady state: the first cycles also allocate GPM buffers (41, 29, then 27 calls)
        node.collect()
    calls = node.calls_per_cycle()
    node.binding.charging = True
    started = time.perf_counter()  # wall time: a spin the scheduler interrupts still takes its time
    node.collect()
    spent = time.perf_counter() - started
    cheap = 2 * len(MEASURED_CALL_US)  # each GPU's utilization and memory calls: their measured cost
    assert spent >= (calls - cheap) * 200e-6


def test_a_short_run_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--scrapes", "4", "--cycles", "4", "--cycle-runs", "4"]) == 0
    out = capsys.readouterr().out
    for label in ("8 GPUs, 64", "16 GPUs, one pod each", "16 GPUs, 128", "8 GPUs, 56 MIG"):
        assert f"collection cycle, {label}" in out
        assert out.count(f"collection cycle, {label}") == 2  # NVML free, then charged
    assert "NVML calls charged (mean" in out
    assert "/metrics over HTTP" in out and "RSS growth" in out
