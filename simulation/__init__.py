"""Everything that stands in for the real world, above the tools it drives.

The fleet simulator (``fleet``), the in-memory metrics source (``in_memory_source``) and cluster
(``in_memory_cluster``), the demo (``demo``), and the fake NVML binding with its GPU profiles and
scenarios (``fake_nvml``, ``gpu_profiles``, ``gpu_scenarios``).

The package's public surface is what the command lines use of it: a fleet scenario loaded and
simulated, its series written out (``gpu-analyzer simulate``) or read as a metrics source
(``gpu-analyzer analyze --simulate``), the demo (``gpu-reaper demo``), and the GPU scenarios'
names and builder (``gpu-exporter --simulate``). Everything else — the fleet's behaviours and
ground truth, the in-memory cluster, the fake NVML itself — is the simulation's own, used by the
demo, the tests and the benchmarks. Each name is imported from its module when first asked for
(PEP 562's module ``__getattr__``, built by ``common.surface``), so the scenarios' names load
neither numpy nor the fake NVML (docs/architecture.md, "Public surfaces").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.surface import lazy_surface

# name → the module that defines it
_SURFACE = {
    "SCENARIOS": "simulation.gpu_scenario_names",
    "ScenarioError": "simulation.fleet.scenario",
    "SimulatedSource": "simulation.in_memory_source",
    "build_scenario": "simulation.gpu_scenarios",
    "load_scenario": "simulation.fleet.scenario",
    "prometheus_text_chunks": "simulation.fleet.exposition",
    "run_demo": "simulation.demo",
    "simulate": "simulation.fleet.simulator",
    "write_openmetrics": "simulation.fleet.exposition",
}

__all__ = [
    "SCENARIOS",
    "ScenarioError",
    "SimulatedSource",
    "build_scenario",
    "load_scenario",
    "prometheus_text_chunks",
    "run_demo",
    "simulate",
    "write_openmetrics",
]

if TYPE_CHECKING:  # what type checkers and editors see
    from simulation.demo import run_demo
    from simulation.fleet.exposition import prometheus_text_chunks, write_openmetrics
    from simulation.fleet.scenario import ScenarioError, load_scenario
    from simulation.fleet.simulator import simulate
    from simulation.gpu_scenario_names import SCENARIOS
    from simulation.gpu_scenarios import build_scenario
    from simulation.in_memory_source import SimulatedSource


__getattr__, __dir__ = lazy_surface(__name__, _SURFACE)
