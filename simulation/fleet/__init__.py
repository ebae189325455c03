"""Fleet simulator: realistic DCGM, kube-state-metrics and cAdvisor series plus their ground truth.

Used by ``gpu-reaper demo``, the test-suite and the benchmarks::

    scenario = load_scenario("standard")
    fleet = simulate(scenario)
    write_openmetrics(fleet.series, open("fleet.om", "w"))
    truth = expected_findings(fleet)
"""

from simulation.fleet.exposition import byte_chunks, prometheus_text_chunks, write_openmetrics
from simulation.fleet.generate import synthetic_scenario
from simulation.fleet.naming import Naming, with_naming
from simulation.fleet.scenario import (
    Behaviour,
    NodeSpec,
    Scenario,
    ScenarioError,
    WorkloadKind,
    WorkloadSpec,
    builtin_scenarios,
    load_scenario,
)
from simulation.fleet.simulator import UTIL_BUCKETS, Fleet, Pod, Series, Slot, gpu_uuid, simulate
from simulation.fleet.truth import Expected, expected_findings, score

__all__ = [
    "UTIL_BUCKETS",
    "Behaviour",
    "Expected",
    "Fleet",
    "Naming",
    "NodeSpec",
    "Pod",
    "Scenario",
    "ScenarioError",
    "Series",
    "Slot",
    "WorkloadKind",
    "WorkloadSpec",
    "builtin_scenarios",
    "byte_chunks",
    "expected_findings",
    "gpu_uuid",
    "load_scenario",
    "prometheus_text_chunks",
    "score",
    "simulate",
    "synthetic_scenario",
    "with_naming",
    "write_openmetrics",
]
