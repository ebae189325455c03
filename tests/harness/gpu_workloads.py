"""Workload specs that request a GPU, as the reaper's tests seed them: it stops nothing that asks for none."""

from __future__ import annotations

from typing import Any

GPU = "nvidia.com/gpu"


def gpu_template(name: str = "main", gpus: int = 1, resource: str = GPU) -> dict[str, Any]:
    """A pod template with one container limited to ``gpus`` of ``resource``."""
    return {
        "metadata": {"labels": {"app": name}},
        "spec": {
            "containers": [
                {
                    "name": name,
                    "image": f"registry.example/{name}:1",
                    "resources": {"limits": {resource: str(gpus)}},
                }
            ]
        },
    }


def gpu_spec(replicas: int, **fields: Any) -> dict[str, Any]:
    """``spec`` of a Deployment, StatefulSet or ReplicaSet whose pods ask for one GPU each."""
    return {"replicas": replicas, "template": gpu_template(), **fields}
