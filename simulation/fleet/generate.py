"""Generate large randomized scenarios: benchmark fleets and broader ground-truth checks.

``synthetic_scenario(1000)`` gives 125 nodes of 8 GPUs filled with a realistic mix of behaviours,
some spare nodes, exporter gaps and young workloads — deterministic for a seed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from simulation.fleet.scenario import Behaviour, Scenario

_MIX: tuple[tuple[Behaviour, float], ...] = (
    (Behaviour.TRAINING, 0.30),
    (Behaviour.SERVING, 0.24),
    (Behaviour.IDLE, 0.14),
    (Behaviour.LOW_UTILIZATION, 0.14),
    (Behaviour.STARVATION_SAWTOOTH, 0.07),
    (Behaviour.STARVATION_CPU, 0.07),
    (Behaviour.STARVATION_SUBSECOND, 0.04),
)
_NAMESPACES = ("serving", "research", "team-a", "team-b", "team-c", "ml-platform", "vision", "speech")
_BATCH = {
    Behaviour.TRAINING,
    Behaviour.STARVATION_SAWTOOTH,
    Behaviour.STARVATION_CPU,
    Behaviour.STARVATION_SUBSECOND,
}


def synthetic_scenario(
    gpus: int,
    seed: int = 1,
    *,
    end: datetime = datetime(2026, 1, 5, tzinfo=UTC),
    duration: timedelta = timedelta(hours=24),
    step: timedelta = timedelta(seconds=60),
    analysis_window: timedelta = timedelta(hours=6),
    metrics: str = "standard",
    gpus_per_node: int = 8,
    spare_every: int = 20,
    gap_every: int = 25,
    young_share: float = 0.08,
) -> Scenario:
    """A fleet of about ``gpus`` GPUs (rounded up to whole nodes)."""
    rng = np.random.default_rng(seed)
    node_count = max(1, -(-gpus // gpus_per_node))
    behaviours = [b for b, _ in _MIX]
    weights = np.array([w for _, w in _MIX])
    nodes: list[dict[str, Any]] = []
    workloads: list[dict[str, Any]] = []
    window_h = analysis_window.total_seconds() / 3600
    for n in range(node_count):
        ours = n % 4 == 0  # a quarter of the fleet runs our exporter, the rest dcgm-exporter
        node: dict[str, Any] = {
            "name": f"gpu-{n:04d}",
            "gpus": gpus_per_node,
            "exporter": "gpu-exporter" if ours else "dcgm-exporter",
            "profiling": ours,
        }
        # Faults at fixed spacing, so every fleet of 50+ GPUs has some whatever the seed.
        if n % gap_every == gap_every // 2:
            node["gaps"] = [{"start": f"-{window_h * 0.7:.2f}h", "end": f"-{window_h * 0.2:.2f}h"}]
        nodes.append(node)
        if n % spare_every == spare_every - 1:
            continue  # nobody schedules here
        free = gpus_per_node
        while free > 0:
            behaviour = behaviours[int(rng.choice(len(behaviours), p=weights))]
            if behaviour is Behaviour.STARVATION_SUBSECOND and not ours:
                behaviour = Behaviour.STARVATION_SAWTOOTH
            size = int(rng.choice([1, 1, 2, 4, 8]))
            while size > free:
                size //= 2
            batch = behaviour in _BATCH
            replicas = 1 if batch else int(min(free // size, rng.choice([1, 1, 2, 3])))
            kind = "Job" if batch else ("StatefulSet" if rng.random() < 0.2 else "Deployment")
            workload: dict[str, Any] = {
                "namespace": _NAMESPACES[int(rng.integers(len(_NAMESPACES)))],
                "name": f"{behaviour.value.replace('_', '-')}-{len(workloads):05d}",
                "kind": kind,
                "behaviour": behaviour.value,
                "replicas": replicas,
                "gpus_per_pod": size,
                "node": node["name"],
            }
            if rng.random() < young_share:
                workload["start"] = f"-{rng.uniform(0.1, window_h * 0.4):.2f}h"
            workloads.append(workload)
            free -= size * replicas
    return Scenario.model_validate(
        {
            "name": f"synthetic-{gpus}",
            "seed": seed,
            "end": end,
            "duration": duration,
            "step": step,
            "analysis_window": analysis_window,
            "metrics": metrics,
            "nodes": nodes,
            "workloads": workloads,
        }
    )
